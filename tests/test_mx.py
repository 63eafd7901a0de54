"""MX quantization: hand-built blocks worked out from the OCP MX v1.0 rules, bounds, packing.

Expected codes are built from (sign, biased exponent, mantissa) with the element formats'
layouts (OCP OFP8 v1.0 and MX v1.0): e4m3fn bias 7, e5m2 bias 15, e2m1 bias 1.
Scale codes are the shared exponent + 127 (E8M0, MX v1.0 section 5.4).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from systolic import mx
from systolic.dtypes import get_format
from systolic.errors import FormatError, ShapeError

MX = ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp4"]
RULES = ["ocp", "trainium"]
# (exponent bits, mantissa bits, emax) of each element format (OCP MX v1.0; FACTS).
LAYOUT = {"mxfp8_e4m3": (4, 3, 8), "mxfp8_e5m2": (5, 2, 15), "mxfp4": (2, 1, 2)}


def code(fmt: str, sign: int, exp: int, man: int) -> int:
    """The element code with these fields (biased exponent)."""
    ebits, mbits, _ = LAYOUT[fmt]
    return sign << (ebits + mbits) | exp << mbits | man


def block(*head: float, fill: float = 0.0) -> np.ndarray:
    x = np.full(32, fill, np.float32)
    x[: len(head)] = head
    return x


def codes_of(t: mx.MXTensor) -> np.ndarray:
    return t.elements.view(np.uint8)


# ---- hand-built blocks -------------------------------------------------------------------


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("fmt", MX)
def test_all_zero_block_gets_the_smallest_scale(fmt: str, rule: str) -> None:
    # floor(log2(0)) = -inf is below E8M0's range: clamped to -127 (code 0x00); FACTS says
    # v4's quantize_mx gives an all-zero group 2**-127 too. Signed zeros keep their sign.
    x = block(0.0, -0.0)
    t = mx.quantize(x, fmt, rule=rule)
    assert t.scales.tolist() == [0x00]
    assert codes_of(t)[0] == 0 and codes_of(t)[1] == code(fmt, 1, 0, 0)
    assert np.all(codes_of(t)[2:] == 0)
    y = mx.dequantize(t)
    assert np.all(y == 0) and np.signbit(y[1]) and not np.signbit(y[0])


# A single huge value 1.5 * 2**127 (floor(log2) = 127) with 1.0 beside it:
# ocp e = 127 - emax, trainium e = 127 - (emax - 1); 1.0 / 2**e is far below every element's
# smallest subnormal and rounds to zero. Element = 1.5 * 2**(emax or emax - 1).
HUGE = [
    # fmt, rule, scale code, element (sign, biased exp, mantissa)
    ("mxfp8_e4m3", "ocp", 127 + 119, (0, 8 + 7, 0b100)),  # 384 = 1.5 * 2**8
    ("mxfp8_e4m3", "trainium", 127 + 120, (0, 7 + 7, 0b100)),  # 192
    ("mxfp8_e5m2", "ocp", 127 + 112, (0, 15 + 15, 0b10)),  # 49152 = 1.5 * 2**15
    ("mxfp8_e5m2", "trainium", 127 + 113, (0, 14 + 15, 0b10)),
    ("mxfp4", "ocp", 127 + 125, (0, 2 + 1, 1)),  # 6 = 1.5 * 2**2
    ("mxfp4", "trainium", 127 + 126, (0, 1 + 1, 1)),  # 3
]


@pytest.mark.parametrize(("fmt", "rule", "scale", "fields"), HUGE)
def test_single_huge_value(fmt: str, rule: str, scale: int, fields: tuple[int, int, int]) -> None:
    x = block(1.0, -1.5 * 2.0**127)
    t = mx.quantize(x, fmt, rule=rule)
    assert t.scales.tolist() == [scale]
    assert codes_of(t)[1] == code(fmt, 1, *fields[1:])
    assert codes_of(t)[0] == 0  # 1.0 flushes to zero next to 2**127
    y = mx.dequantize(t)
    assert y[1] == np.float32(-1.5 * 2.0**127) and y[0] == 0


# amax = 2**20 - 2**-4, the float32 just below 2**20: floor(log2) = 19, while a float32
# log2 rounds to 20.0. ocp: amax / 2**(19 - emax) is just below 2**(emax + 1) and saturates
# to the element max; trainium: just below 2**emax, which rounds up to 2**emax exactly.
BELOW = [
    ("mxfp8_e4m3", "ocp", 127 + 11, (0, 15, 0b110)),  # 448 = 1.75 * 2**8 (max)
    ("mxfp8_e4m3", "trainium", 127 + 12, (0, 15, 0)),  # 256
    ("mxfp8_e5m2", "ocp", 127 + 4, (0, 30, 0b11)),  # 57344 = 1.75 * 2**15 (max)
    ("mxfp8_e5m2", "trainium", 127 + 5, (0, 30, 0)),  # 32768
    ("mxfp4", "ocp", 127 + 17, (0, 3, 1)),  # 6 (max)
    ("mxfp4", "trainium", 127 + 18, (0, 3, 0)),  # 4
]


@pytest.mark.parametrize(("fmt", "rule", "scale", "fields"), BELOW)
def test_value_just_below_a_power_of_two(fmt: str, rule: str, scale: int,
                                         fields: tuple[int, int, int]) -> None:
    a = np.nextafter(np.float32(2.0**20), np.float32(0))
    assert a == 2.0**20 - 2.0**-4 and np.floor(np.log2(a)) == 20  # the trap, for the record
    t = mx.quantize(block(a), fmt, rule=rule)
    assert t.scales.tolist() == [scale]
    assert codes_of(t)[0] == code(fmt, *fields)


def test_e4m3fn_saturates_instead_of_nan() -> None:
    # amax 500: e = 8 - 8 = 0, 500 > 448 clamps to 448 (ml_dtypes alone would give NaN).
    t = mx.quantize(block(500.0, -470.0), "mxfp8_e4m3")
    assert t.scales.tolist() == [127]
    assert codes_of(t)[:2].tolist() == [code("mxfp8_e4m3", 0, 15, 6), code("mxfp8_e4m3", 1, 15, 6)]


def test_fp4_rounds_ties_to_even() -> None:
    # amax 6: e = 2 - 2 = 0, so elements are the values themselves. Ties: 2.5 -> 2 (1.0b*2),
    # 5 -> 4, 0.25 -> 0, 0.75 -> 1.0 (even mantissa), 1.25 -> 1.0, 1.75 -> 2.
    t = mx.quantize(block(6.0, 2.5, 5.0, 0.25, 0.75, 1.25, 1.75, -2.5), "mxfp4")
    assert t.scales.tolist() == [127]
    assert mx.dequantize(t)[:8].tolist() == [6.0, 2.0, 4.0, 0.0, 1.0, 1.0, 2.0, -2.0]


SUB = 2.0**-140  # a float32 subnormal


@pytest.mark.parametrize("rule", RULES)
def test_subnormal_block_uses_the_smallest_scale(rule: str) -> None:
    # floor(log2(2**-140)) = -140, minus emax is below -127: clamped to -127. Elements are
    # x * 2**127: 2**-13, 2**-14, 3 * 2**-16. e5m2 (min normal 2**-14, subnormal step 2**-16)
    # holds them all; e4m3fn (smallest 2**-9) and e2m1 (smallest 0.5) flush them to zero.
    x = block(SUB, -SUB / 2, 3 * SUB / 8)
    t = mx.quantize(x, "mxfp8_e5m2", rule=rule)
    assert t.scales.tolist() == [0]
    assert codes_of(t)[:3].tolist() == [code("mxfp8_e5m2", 0, 2, 0), code("mxfp8_e5m2", 1, 1, 0),
                                        code("mxfp8_e5m2", 0, 0, 0b11)]
    assert np.array_equal(mx.dequantize(t), x)  # exact: products land on float32 subnormals
    for fmt in ("mxfp8_e4m3", "mxfp4"):
        t = mx.quantize(x, fmt, rule=rule)
        assert t.scales.tolist() == [0] and np.all(mx.dequantize(t) == 0)


def test_small_normal_block_clamps_exponent_without_loss() -> None:
    # amax 2**-120: ocp e4m3 wants e = -128, clamped to -127; the element is 2**7 = 128.
    t = mx.quantize(block(2.0**-120), "mxfp8_e4m3")
    assert t.scales.tolist() == [0] and codes_of(t)[0] == code("mxfp8_e4m3", 0, 14, 0)
    assert mx.dequantize(t)[0] == np.float32(2.0**-120)


NAN_CODE = {"mxfp8_e4m3": 0x7F, "mxfp8_e5m2": 0x7E, "mxfp4": 0x00}


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("fmt", MX)
def test_nan_or_inf_makes_the_block_nan(fmt: str, bad: float) -> None:
    # amax is not finite: no E8M0 exponent, X = NaN (0xFF), which makes the whole
    # block NaN (the spec's special values). The next block is untouched (amax 1: e = -step).
    x = np.concatenate([block(1.0, bad, 2.0), block(1.0)])
    for rule in RULES:
        t = mx.quantize(x, fmt, rule=rule)
        emax = LAYOUT[fmt][2]
        step = emax if rule == "ocp" else emax - 1
        assert t.scales.tolist() == [0xFF, 127 - step]
        assert np.all(codes_of(t)[:32] == NAN_CODE[fmt])
        y = mx.dequantize(t)
        assert np.all(np.isnan(y[:32])) and y[32] == 1.0 and np.all(y[33:] == 0)


def test_block_scale_exponent_reads_bits_over_all_binades() -> None:
    ks = np.arange(-148, 128)
    at = np.ldexp(np.float32(1), ks).astype(np.float32)
    below = np.nextafter(at, np.float32(0))
    for a, want in ((at, ks), (below, ks - 1)):
        floor_log2 = np.array([math.frexp(float(v))[1] - 1 for v in a])  # float64, exact
        assert np.array_equal(floor_log2, want)
        got = mx.block_scale_exponent(a, "mxfp8_e4m3", "ocp")
        assert np.array_equal(got, np.maximum(want - 8, -127))
        got = mx.block_scale_exponent(-a, "mxfp4", "trainium")
        assert np.array_equal(got, np.maximum(want - 1, -127))
    assert mx.block_scale_exponent(np.float32(np.nan), "mxfp4") == 128


# ---- bounds ------------------------------------------------------------------------------


def check_half_ulp(x: np.ndarray, fmt: str, rule: str) -> None:
    """Every element within half an element ulp at the block's scale, or saturated."""
    ebits, mbits, emax = LAYOUT[fmt]
    f = get_format(fmt)
    t = mx.quantize(x, fmt, rule=rule)
    y = mx.dequantize(t).astype(np.float64)
    xb = x.astype(np.float64).reshape(-1, 32)
    amax = np.abs(xb).max(axis=1)
    # The shared exponent, worked out in float64 with Python's frexp (independent of mx).
    fl = np.array([math.frexp(a)[1] - 1 if a > 0 else -10**4 for a in amax])
    e = np.maximum(fl - (emax if rule == "ocp" else emax - 1), -127)
    assert np.array_equal(t.scales.astype(np.int64), e + 127)
    X = np.ldexp(1.0, e)[:, None]
    v = xb / X  # exact in float64
    emin = 2 - 2 ** (ebits - 1)  # smallest normal exponent: 1 - bias
    vexp = np.array([math.frexp(a)[1] - 1 if a > 0 else emin for a in np.abs(v).ravel()])
    half_ulp = np.ldexp(0.5, np.maximum(vexp, emin) - mbits).reshape(v.shape) * X
    err = np.abs(y.reshape(v.shape) - xb)
    sat = np.abs(v) > f.max
    overflow = np.isinf(y.reshape(v.shape))  # 2**emax * 2**(127 - emax + 1) = 2**128
    if overflow.any():  # only the trainium rule rounds a block maximum up to 2**128
        assert rule == "trainium" and np.all(np.abs(xb[overflow]) >= 2.0**127)
    ok = ~sat & ~overflow
    assert np.all(err[ok] <= half_ulp[ok])
    assert np.all(np.abs(y.reshape(v.shape)[sat]) == f.max * np.broadcast_to(X, v.shape)[sat])
    if rule == "trainium":
        assert not sat.any()  # the block maximum never saturates


floats32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@settings(max_examples=150, deadline=None)
@given(x=hnp.arrays(np.float32, 64, elements=floats32), fmt=st.sampled_from(MX),
       rule=st.sampled_from(RULES))
def test_roundtrip_error_is_half_ulp_at_block_scale(x: np.ndarray, fmt: str, rule: str) -> None:
    check_half_ulp(x, fmt, rule)


@settings(max_examples=100, deadline=None)
@given(m=hnp.arrays(np.float32, 96, elements=st.floats(-1, 1, width=32)),
       k=st.integers(-150, 120), fmt=st.sampled_from(MX), rule=st.sampled_from(RULES))
def test_roundtrip_bound_at_every_magnitude(m: np.ndarray, k: int, fmt: str, rule: str) -> None:
    check_half_ulp(np.ldexp(m, k).astype(np.float32), fmt, rule)


def test_axis_quantizes_the_same_blocks() -> None:
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((3, 64, 5)) * np.exp2(rng.integers(-20, 20, (3, 1, 5)))).astype(
        np.float32)
    t = mx.quantize(x, "mxfp8_e4m3", axis=1)
    assert t.elements.shape == x.shape and t.scales.shape == (3, 2, 5)
    for i in range(3):
        for j in range(5):
            ref = mx.quantize(x[i, :, j], "mxfp8_e4m3")
            assert np.array_equal(codes_of(t)[i, :, j], codes_of(ref))
            assert np.array_equal(t.scales[i, :, j], ref.scales)


# ---- packing and layout ------------------------------------------------------------------


def test_pack_x4_puts_element_zero_low() -> None:
    c = np.array([0x11, 0x22, 0x33, 0x44], np.uint8).view(get_format("fp8_e4m3fn").storage)
    assert mx.pack_x4(c, "mxfp8_e4m3").tolist() == [0x44332211]
    assert mx.pack_x4(c, "mxfp8_e4m3").dtype == np.uint32
    n = np.array([0x1, 0x2, 0x3, 0x4], np.uint8).view(get_format("fp4_e2m1").storage)
    p = mx.pack_x4(n, "mxfp4")
    assert p.dtype == np.uint16 and p.tolist() == [0x4321]
    assert p.astype("<u2").tobytes() == bytes([0x21, 0x43])  # byte j: 2j low, 2j+1 high


@settings(max_examples=60, deadline=None)
@given(raw=hnp.arrays(np.uint8, st.tuples(st.integers(1, 3), st.integers(4, 32))),
       fmt=st.sampled_from(MX))
def test_pack_round_trips(raw: np.ndarray, fmt: str) -> None:
    raw = np.ascontiguousarray(raw[:, : raw.shape[1] // 4 * 4])
    elem = get_format(get_format(fmt).element or fmt)
    if elem.bits == 4:
        raw = raw & np.uint8(0x0F)
    codes = raw.view(elem.storage)
    packed = mx.pack_x4(codes, fmt)
    assert packed.shape == (raw.shape[0], raw.shape[1] // 4)
    want = sum(raw[:, i::4].astype(np.uint64) << np.uint64(elem.bits * i) for i in range(4))
    assert np.array_equal(packed.astype(np.uint64), want)
    assert np.array_equal(mx.unpack_x4(packed, fmt).view(np.uint8), raw)


def test_layouts_follow_their_formulas() -> None:
    p, q = mx.layout_k(512, "contiguous")
    assert np.array_equal(4 * p + q, np.arange(512))
    p, q = mx.layout_k(512, "strided")
    assert np.array_equal(q * 128 + p, np.arange(512))  # the vendor golden model (FACTS)
    assert np.array_equal(mx.hw_blocks(1024 + 96), np.arange(1024 + 96) // 32)
    b = mx.hw_blocks(512, "strided")
    assert set(np.flatnonzero(b == 0)) == {*range(8), *range(128, 136), *range(256, 264),
                                           *range(384, 392)}
    assert mx.scale_partition(np.arange(16)).tolist() == [
        0, 1, 2, 3, 32, 33, 34, 35, 64, 65, 66, 67, 96, 97, 98, 99]
    assert mx.scale_partition(5, offset=8).item() == 32 + 8 + 1


@pytest.mark.parametrize("order", ["contiguous", "strided"])
@pytest.mark.parametrize("fmt", MX)
def test_quantize_hw_uses_the_hardware_blocks(fmt: str, order: str) -> None:
    rng = np.random.default_rng(2)
    K, N = 512 + 64, 6
    x = (rng.standard_normal((K, N)) * np.exp2(rng.integers(-8, 8, (K, 1)))).astype(np.float32)
    t = mx.quantize_hw(x, fmt, rule="trainium", order=order)
    blocks = mx.hw_blocks(K, order)
    for b in range(K // 32):
        ks = np.flatnonzero(blocks == b)
        ref = mx.quantize(x[ks], fmt, rule="trainium", axis=0)  # a plain OCP block
        assert np.array_equal(codes_of(t)[ks], codes_of(ref))
        assert np.array_equal(t.scales[b], ref.scales[0])
    y = mx.dequantize(t)
    for tile in range(2):
        data, plane = mx.pack_tile(t, tile)
        k0, kt = 512 * tile, min(512, K - 512 * tile)
        assert data.shape == (kt // 4, N)
        first = (data & (0xFF if "fp8" in fmt else 0xF)).astype(np.uint8)
        p, q = mx.layout_k(kt, order)
        assert np.array_equal(first[p[q == 0]], codes_of(t)[k0:k0 + kt][q == 0])
        assert np.array_equal(plane[mx.scale_partition(np.arange(kt // 32))],
                              t.scales[k0 // 32:(k0 + kt) // 32])
        assert np.array_equal(mx.unpack_tile(data, plane, fmt, order=order), y[k0:k0 + kt])


def test_errors_say_what_to_do() -> None:
    with pytest.raises(ShapeError, match="pad it with zeros"):
        mx.quantize(np.zeros(33, np.float32), "mxfp4")
    with pytest.raises(ShapeError, match="multiple of 32"):
        mx.quantize_hw(np.zeros((48, 2), np.float32), "mxfp4")
    with pytest.raises(FormatError, match="not an MX format"):
        mx.quantize(np.zeros(32, np.float32), "bf16")
    with pytest.raises(FormatError, match="rule"):
        mx.quantize(np.zeros(32, np.float32), "mxfp4", rule="floor")  # type: ignore[arg-type]
    with pytest.raises(ShapeError, match="multiple of 4"):
        mx.pack_x4(np.zeros(6, np.uint8), "mxfp8_e5m2")


def test_the_tile_geometry_is_read_from_the_arch() -> None:
    # a toy array of 64 rows in quadrants of 16: tiles of 256 k, two scale rows a quadrant
    import dataclasses

    from systolic.arch import get_arch

    toy = dataclasses.replace(get_arch("trn3"), rows=64, cols=64, quadrant=16)
    assert mx.tile_k(toy) == 256 and mx.tile_k() == mx.TILE_K == 512
    g = np.arange(8)  # the 8 blocks of a 256-k tile
    assert mx.scale_partition(g, arch=toy).tolist() == [0, 1, 16, 17, 32, 33, 48, 49]
    assert mx.scale_partition(g).tolist() == [0, 1, 2, 3, 32, 33, 34, 35]
    with pytest.raises(ShapeError, match="at most 256"):
        mx.layout_k(288, arch=toy)
    x = np.random.default_rng(4).standard_normal((300 + 12, 5)).astype(np.float32)
    t = mx.quantize_hw(x[:288], "mxfp8_e4m3", order="strided", arch=toy)
    data, plane = mx.pack_tile(t, 1, arch=toy)  # the second tile: k 256..287
    assert data.shape == (8, 5) and plane.shape == (64, 5)
    assert np.array_equal(plane[[0]], t.scales[[8]])
    back = mx.unpack_tile(data, plane, "mxfp8_e4m3", order="strided", arch=toy)
    assert np.array_equal(back, mx.dequantize(t)[256:])
