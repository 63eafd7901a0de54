"""The integer path: seed 000's fp32 PSUM whatever the input (the Trainium presets' default).

Integer operands (zero points subtracted exactly) are exact in fp32, and so are their
products and sums while every partial sum stays below 2^24 in magnitude; beyond that each
fp32 add rounds. The exact INT48 accumulator of seed 004 stays in the RTL cell and arrays
(and as an explicit int48 PSUM destination of a hand-written Program: test_functional).
"""

from __future__ import annotations

import numpy as np
from helpers import fp32_bound
from hypothesis import given
from hypothesis import strategies as st

from systolic import matmul
from systolic.rtl.array import WeightStationaryArray


@given(m=st.integers(1, 40), k=st.integers(1, 300), n=st.integers(1, 40),
       zp_a=st.integers(-20, 20), zp_b=st.integers(-20, 20), seed=st.integers(0, 1000))
def test_int8_engine_equals_numpy_and_the_rtl_array(m: int, k: int, n: int, zp_a: int,
                                                    zp_b: int, seed: int) -> None:
    # |a - zp| <= 148 and K <= 300: every partial sum is below 300 * 148^2 < 2^24, so fp32
    # accumulation is exact and equals numpy's int64 product
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (m, k))
    b = rng.integers(-128, 128, (k, n))
    want = (a - zp_a) @ (b - zp_b)  # numpy int64
    got = matmul(a, b, dtype="int8", zero_points=(zp_a, zp_b)).out
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)
    # the RTL weight-stationary array (INT48 cell): stationary = (a - zp).T, K tiled over 128
    # rows with the partial sums chained through psum_in, as PSUM accumulation does
    arr = WeightStationaryArray(128, 128)
    acc = np.zeros((m, n), dtype=np.int64)
    for k0 in range(0, k, 128):
        st_tile = (a[:, k0:k0 + 128] - zp_a).T
        mv_tile = b[k0:k0 + 128] - zp_b
        acc = arr.matmul(st_tile, mv_tile, psum_in=acc)
    np.testing.assert_array_equal(acc, want)


@given(m=st.integers(1, 20), k=st.integers(1, 300), n=st.integers(1, 20),
       zp_a=st.integers(-20, 20), zp_b=st.integers(-20, 20), seed=st.integers(0, 1000))
def test_int16_accumulates_in_fp32(m: int, k: int, n: int, zp_a: int, zp_b: int,
                                   seed: int) -> None:
    # int16 products reach 2^30: not exact in fp32, but within fp32's bound of the exact sum
    rng = np.random.default_rng(seed)
    a = rng.integers(-30000, 30000, (m, k))
    b = rng.integers(-30000, 30000, (k, n))
    aa, bb = (a - zp_a).astype(np.float64), (b - zp_b).astype(np.float64)
    got = matmul(a, b, dtype="int16", zero_points=(zp_a, zp_b)).out
    assert got.dtype == np.float32
    assert np.all(np.abs(got - aa @ bb) <= fp32_bound(aa, bb))


def test_int8_sums_are_exact_only_below_2_24() -> None:
    # 127 * 127 = 16129 per product. K = 1040: the sum 16,774,160 < 2^24 is exact. K = 1041:
    # eight full 128-row tiles sum exactly to 16,516,096, and the ninth tile's 17 products
    # bring it to 16,790,289 > 2^24, odd, so the last fp32 PSUM add rounds (to even).
    for k, exact in ((1040, True), (1041, False)):
        a = np.full((1, k), 127)
        b = np.full((k, 1), 127)
        want = 16129 * k
        got = matmul(a, b, dtype="int8").out[0, 0]
        assert got == np.float32(want)
        assert (int(got) == want) is exact
