"""Every format's rounding, checked against expectations derived from its bit layout."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from systolic import FORMATS, FormatError, decode, encode, get_format, round_to

FLOATS = ["bf16", "fp16", "fp8_e4m3", "fp8_e4m3fn", "fp8_e5m2", "fp4_e2m1", "tf32", "fp32r"]
ML = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16, "fp8_e4m3": ml_dtypes.float8_e4m3,
      "fp8_e4m3fn": ml_dtypes.float8_e4m3fn, "fp8_e5m2": ml_dtypes.float8_e5m2,
      "fp4_e2m1": ml_dtypes.float4_e2m1fn}


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
    cases = np.array([
        0.0, -0.0, 1.0, mx, -mx, sub, -sub, norm,
        sub / 2,  # tie between 0 and sub: even is 0
        1.5 * sub,  # tie between sub and 2*sub: even is 2*sub
        1 + 2.0 ** -(f.man_bits + 1),  # tie between 1 and 1+ulp: even is 1
        1 + 3 * 2.0 ** -(f.man_bits + 1),  # tie between 1+ulp and 1+2ulp: even is 1+2ulp
        mx + ulp_at_max / 2,  # tie above max: to even, so overflows iff max is odd
        mx * 4 if mx < 1e37 else mx,
    ], dtype=np.float32)
    got = round_to(cases, name).astype(np.float64)
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


@pytest.mark.parametrize("name", [n for n in FLOATS if n in ML])
@given(st.lists(st.floats(width=32, allow_nan=False), min_size=1, max_size=64))
def test_equals_ml_dtypes(name: str, values: list[float]) -> None:
    x = np.array(values, dtype=np.float32)
    with np.errstate(over="ignore"):
        expected = x.astype(ML[name]).astype(np.float32)
    np.testing.assert_array_equal(round_to(x, name), expected)


@pytest.mark.parametrize("name", ["tf32", "fp32r"])
@given(st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), min_size=1,
                max_size=32))
def test_tf32_rounding_matches_float64_reference(name: str, values: list[float]) -> None:
    x = np.array(values, dtype=np.float32)
    f = get_format(name)
    expected = rne_reference(x, 10, -126, f.max, "inf")
    np.testing.assert_array_equal(round_to(x, name).astype(np.float64), expected)


def test_nan_policies() -> None:
    nan = np.array([np.nan], dtype=np.float32)
    for name in ["bf16", "fp16", "fp8_e4m3", "fp8_e4m3fn", "fp8_e5m2", "tf32"]:
        assert np.isnan(round_to(nan, name)).all()
    with pytest.raises(FormatError, match="no NaN"):
        encode(nan, "fp4_e2m1")
    # e4m3fn overflows to NaN, never to its max (FACTS "Numerics")
    assert np.isnan(round_to(np.float32(500.0), "fp8_e4m3fn"))
    assert round_to(np.float32(460.0), "fp8_e4m3fn") == 448.0


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
