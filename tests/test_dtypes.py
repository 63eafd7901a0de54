"""Every format's rounding, checked against expectations derived from its bit layout.

The formats under test are read from the format table (``FORMATS``), so a new format is
tested as soon as it has a row; the references are ml_dtypes and float64 arithmetic.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from systolic import FORMATS, FormatError, decode, encode, get_format, round_to
from systolic.dtypes import encode_into, surely_in_range

FLOATS = [n for n, f in FORMATS.items() if f.kind == "float"]
INTS = [n for n, f in FORMATS.items() if f.kind == "int"]


def _is_own_storage(name: str) -> bool:
    """The storage dtype is the format itself (ml_dtypes / numpy), not a wider container."""
    f = FORMATS[name]
    return int(ml_dtypes.finfo(f.storage).nmant) == f.man_bits


# formats whose storage type is the format: ml_dtypes (or numpy) is the reference for them
ML = {n: FORMATS[n].storage for n in FLOATS if _is_own_storage(n)}
# formats kept in a wider container and rounded by this project (tf32, fp32r)
CONTAINED = [n for n in FLOATS if not _is_own_storage(n)]


def test_the_derived_lists_cover_the_seed_formats() -> None:
    # the table-derived lists hold at least the formats the seeds and FACTS name
    assert {"bf16", "fp16", "fp32", "fp8_e4m3", "fp8_e4m3fn", "fp8_e5m2", "fp4_e2m1"} <= set(ML)
    assert set(CONTAINED) == {"tf32", "fp32r"}
    assert {"int8", "uint8", "int16", "int48"} <= set(INTS)


def rne_reference(x: np.ndarray, man_bits: int, min_exp: int, max_val: float,
                  overflow: str) -> np.ndarray:
    """Round float32 values to ``man_bits`` mantissa bits, nearest-even, in float64 maths.

    Independent of the code under test: uses frexp and numpy's half-to-even np.round.
    """
    x64 = x.astype(np.float64)
    out = np.empty_like(x64)
    for i, v in enumerate(x64.ravel()):
        if np.isnan(v) or np.isinf(v):
            out.flat[i] = v
            continue
        if v == 0:
            out.flat[i] = v
            continue
        _, ex = np.frexp(abs(v))  # exponent from the bits, not a float log2
        e = max(ex - 1, min_exp)
        q = 2.0 ** (e - man_bits)
        r = np.round(v / q) * q
        if abs(r) > max_val:
            r = {"inf": np.copysign(np.inf, v), "nan": np.nan,
                 "saturate": np.copysign(max_val, v)}[overflow]
        out.flat[i] = r
    return out


@pytest.mark.parametrize("name", FLOATS)
def test_edge_cases_follow_the_format(name: str) -> None:
    f = get_format(name)
    mx, sub, norm = f.max, f.min_subnormal, f.min_normal
    ulp_at_max = 2.0 ** (np.floor(np.log2(mx)) - f.man_bits)
    with np.errstate(over="ignore"):  # fp32: max + ulp/2 is inf in float32, on purpose
        cases = np.array([
            0.0, -0.0, 1.0, mx, -mx, sub, -sub, norm,
            sub / 2,  # tie between 0 and sub: even is 0
            1.5 * sub,  # tie between sub and 2*sub: even is 2*sub
            1 + 2.0 ** -(f.man_bits + 1),  # tie between 1 and 1+ulp: even is 1
            1 + 3 * 2.0 ** -(f.man_bits + 1),  # tie between 1+ulp and 1+2ulp: even is 1+2ulp
            mx + ulp_at_max / 2,  # tie above max: to even, so overflows iff max is odd
            mx * 4 if mx < 1e37 else mx,
        ], dtype=np.float32)
    got = round_to(cases, name, overflow="format").astype(np.float64)
    min_exp = int(np.log2(norm))
    expected = rne_reference(cases, f.man_bits, min_exp, mx, f.overflow)
    np.testing.assert_array_equal(got, expected)
    assert got[8] == 0.0 and got[9] == 2 * sub
    assert got[10] == 1.0 and got[11] == 1 + 2 * 2.0 ** -f.man_bits
    max_odd = int(mx / 2.0 ** (np.floor(np.log2(mx)) - f.man_bits)) % 2 == 1
    if not max_odd:  # e4m3fn: 448 = 1.110b x 2^8 is even, so the tie stays at max
        assert got[12] == mx
    elif f.overflow == "inf":
        assert np.isinf(got[12])
    elif f.overflow == "nan":
        assert np.isnan(got[12])
    else:
        assert got[12] == mx


def _bound(name: str) -> tuple[float, bool]:
    """The overflow threshold from the bit layout alone: max + half an ulp at max, and
    whether the tie there rounds up (max's last mantissa bit is 1); independent of the
    code's own ``Format.overflow_bound``."""
    f = FORMATS[name]
    _, e = np.frexp(f.max)  # f.max = m * 2**e, 0.5 <= m < 1
    ulp = 2.0 ** (e - 1 - f.man_bits)
    return f.max + ulp / 2, round(f.max / ulp) % 2 == 1


@pytest.mark.parametrize("name", [n for n in FLOATS if n in ML])
@given(st.lists(st.floats(width=32, allow_nan=False), min_size=1, max_size=64))
def test_equals_ml_dtypes(name: str, values: list[float]) -> None:
    x = np.array(values, dtype=np.float32)
    with np.errstate(over="ignore"):
        expected = x.astype(ML[name]).astype(np.float32)
    np.testing.assert_array_equal(round_to(x, name, overflow="format"), expected)
    # the default refuses exactly the values the format's own rule would send past max
    t, tie_up = _bound(name)
    ax = np.abs(x.astype(np.float64))
    beyond = ((ax > t) | ((ax == t) & tie_up)) & np.isfinite(x)
    if not FORMATS[name].inf:
        beyond |= np.isinf(x)  # refused too, as "no infinity"
    if beyond.any():
        with pytest.raises(FormatError, match=r"holds at most|no infinity"):
            round_to(x, name)
    else:
        np.testing.assert_array_equal(round_to(x, name), expected)


@pytest.mark.parametrize("name", CONTAINED)
@given(st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), min_size=1,
                max_size=32))
def test_tf32_rounding_matches_float64_reference(name: str, values: list[float]) -> None:
    x = np.array(values, dtype=np.float32)
    f = get_format(name)
    expected = rne_reference(x, 10, -126, f.max, "inf")
    np.testing.assert_array_equal(round_to(x, name, overflow="format").astype(np.float64),
                                  expected)


def test_nan_policies() -> None:
    nan = np.array([np.nan], dtype=np.float32)
    for name in FLOATS:
        if FORMATS[name].nan in ("ieee", "fn"):
            assert np.isnan(round_to(nan, name)).all()
        else:
            with pytest.raises(FormatError, match="no NaN"):
                encode(nan, name)
    with pytest.raises(FormatError, match="no NaN"):
        encode(nan, "fp4_e2m1")
    # e4m3fn overflows to NaN, never to its max (FACTS "Numerics"), under its own rule
    assert np.isnan(round_to(np.float32(500.0), "fp8_e4m3fn", overflow="format"))
    assert round_to(np.float32(460.0), "fp8_e4m3fn") == 448.0


# quiet and signalling NaNs of both signs, with payloads in the kept and the dropped bits
NAN_BITS = [0x7FC00000, 0x7F800001, 0x7FC00001, 0x7FFFFFFF, 0x7FA00000, 0xFF800001,
            0xFFC00000, 0xFFFFFFFF]


@pytest.mark.parametrize("name", CONTAINED)
def test_nan_payloads_stay_nan_with_their_bits(name: str) -> None:
    # A NaN is not rounded as a number: 0x7F800001 rounded as one would carry into inf
    # (payload in the dropped bits), 0x7FFFFFFF would carry into the sign bit.
    bits = np.array(NAN_BITS, dtype=np.uint32)
    got = encode(bits.view(np.float32), name)
    assert np.isnan(got).all()
    np.testing.assert_array_equal(got.view(np.uint32), bits)  # passed through, bit for bit
    assert list(np.signbit(got)) == [b >> 31 == 1 for b in NAN_BITS]


# -- out-of-range values: one policy for every format (docs/NUMERICS.md) -----------------
def _just_above(x: float) -> np.float32:
    return np.nextafter(np.float32(x), np.float32(np.inf))


def _just_below(x: float) -> np.float32:
    return np.nextafter(np.float32(x), np.float32(0))


@pytest.mark.parametrize("name", [n for n in FLOATS if FORMATS[n].max < 3e38])
def test_out_of_range_is_refused_naming_the_max(name: str) -> None:
    f = FORMATS[name]
    t, tie_up = _bound(name)
    first_over = np.float32(t) if tie_up else _just_above(t)
    # below the threshold: rounds to max under every policy
    for policy in ("error", "saturate", "format"):
        got = round_to(np.array([_just_below(t), -_just_below(t)]), name, overflow=policy)
        np.testing.assert_array_equal(got, [f.max, -f.max])
    for x in (first_over, -first_over, np.float32(f.max * 4)):
        with pytest.raises(FormatError, match=f"{name} holds at most {f.max:g}"):
            encode(np.array([1.0, x], dtype=np.float32), name)
        sat = round_to(np.array([x]), name, overflow="saturate")
        assert sat[0] == np.copysign(f.max, x)
        native = round_to(np.array([x]), name, overflow="format")[0]
        if f.overflow == "inf":
            assert native == np.copysign(np.inf, x)
        elif f.overflow == "nan":
            assert np.isnan(native)
        else:
            assert native == np.copysign(f.max, x)
        if name in ML:  # the format's own rule is ml_dtypes' cast
            with np.errstate(over="ignore"):
                ml = np.float32(np.array([x]).astype(ML[name])[0])
            np.testing.assert_array_equal(native, ml)


@pytest.mark.parametrize("name", FLOATS)
def test_infinities_follow_the_format(name: str) -> None:
    f = FORMATS[name]
    inf = np.array([np.inf, -np.inf], dtype=np.float32)
    if f.inf:
        np.testing.assert_array_equal(round_to(inf, name), inf)
    else:
        with pytest.raises(FormatError, match="no infinity"):
            encode(inf, name)
        np.testing.assert_array_equal(round_to(inf, name, overflow="saturate"),
                                      [f.max, -f.max])


def test_float64_beyond_float32_is_an_overflow() -> None:
    # float64 1e39 is finite; float32 cannot hold it: refused, not turned into inf
    with pytest.raises(FormatError, match="fp32 holds at most"):
        encode(np.array([1e39]), "fp32")
    assert round_to(np.array([1e39]), "fp32", overflow="saturate")[0] == FORMATS["fp32"].max
    with pytest.raises(FormatError, match="overflow must be one of"):
        encode(np.ones(1), "bf16", overflow="clip")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", INTS)
def test_integers_refuse_or_saturate_at_their_range(name: str) -> None:
    f = FORMATS[name]
    bits = f.bits
    lo, hi = (0, (1 << bits) - 1) if np.dtype(f.storage).kind == "u" else (
        -(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    np.testing.assert_array_equal(round_to(np.array([lo, hi]), name), [lo, hi])
    for bad in (lo - 1, hi + 1):
        with pytest.raises(FormatError, match=f"holds {lo}..{hi}"):
            encode(np.array([bad]), name)
    np.testing.assert_array_equal(round_to(np.array([lo - 1, hi + 1]), name,
                                           overflow="saturate"), [lo, hi])


def test_float64_input_is_read_as_float32_first() -> None:
    # 1 + 2^-8 + 2^-30 in float64: float32 keeps 1 + 2^-8 (a bf16 tie), which rounds to 1.
    x = np.array([1 + 2.0**-8 + 2.0**-30])
    assert round_to(x, "bf16")[0] == 1.0


def test_integer_formats_refuse_what_they_cannot_hold() -> None:
    np.testing.assert_array_equal(round_to(np.array([-128, 127]), "int8"), [-128, 127])
    with pytest.raises(FormatError, match=r"holds -128\.\.127"):
        encode(np.array([128]), "int8")
    with pytest.raises(FormatError, match="integer values"):
        encode(np.array([1.5]), "int16")
    with pytest.raises(FormatError, match=r"holds 0\.\.255"):
        encode(np.array([-1]), "uint8")


def test_table_is_complete_and_consistent() -> None:
    names = {"bf16", "fp16", "fp32", "fp32r", "tf32", "fp8_e4m3", "fp8_e4m3fn", "fp8_e5m2",
             "fp4_e2m1", "e8m0", "int8", "uint8", "int16", "mxfp8_e4m3", "mxfp8_e5m2", "mxfp4"}
    assert names <= set(FORMATS)
    for f in FORMATS.values():
        if f.kind == "float":
            assert f.bits == 1 + f.exp_bits + f.man_bits or f.name == "fp32r"
            assert f.bias == (1 << (f.exp_bits - 1)) - 1
    # seed 000 "Shared vs. Diverged": fp4 e2m1 x4 is 0x05 on gen2/gen3 and 0x10 on gen4
    fp4 = get_format("fp4_e2m1")
    assert (fp4.code(2), fp4.code(3), fp4.code(4)) == (0x05, 0x05, 0x10)
    with pytest.raises(FormatError, match="unknown format"):
        get_format("bf17")


def test_decode_widens_without_rounding_steps() -> None:
    # 300 bf16 ones summed in bf16 give 256 (FACTS trap); widened first, 300.
    ones = encode(np.ones(300, dtype=np.float32), "bf16")
    assert decode(ones, "bf16").sum() == 300.0


@pytest.mark.parametrize("name", ["bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "fp4_e2m1"])
def test_the_in_place_cast_takes_only_values_that_surely_encode(name: str) -> None:
    """surely_in_range is a shortcut past encode's overflow masks: True only where encode
    raises nothing and changes nothing; encode_into writes nothing where it is False."""
    f = get_format(name)
    t = np.float32(f.overflow_bound[0])
    below = np.nextafter(t, np.float32(0))  # the largest float32 under the bound
    ok = np.array([0.5, -below, below, 0.0, -0.0], np.float32)
    assert surely_in_range(ok, name)
    out = np.zeros(ok.shape, f.storage)
    assert encode_into(ok, name, out)
    assert np.array_equal(out.view(np.uint8), encode(ok, name).view(np.uint8))
    for bad in ([0.5, t], [np.nan, 1.0], [np.inf, 1.0], [-np.inf], []):
        x = np.array(bad, np.float32)
        assert not surely_in_range(x, name)
        out = np.full(x.size * f.storage.itemsize, 7, np.uint8).view(f.storage)
        out = out.reshape(x.shape)
        assert not encode_into(x, name, out)
        assert (out.view(np.uint8) == 7).all()  # nothing written
    assert not surely_in_range(ok.astype(np.float64), name)  # float32 only
    assert not surely_in_range(np.array([1, 2], np.float32), "int8")  # float formats only
