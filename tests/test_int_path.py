"""The integer path: systolic.matmul with zero points equals numpy int64 and the RTL array."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from systolic import matmul
from systolic.rtl.array import WeightStationaryArray


@given(m=st.integers(1, 40), k=st.integers(1, 300), n=st.integers(1, 40),
       zp_a=st.integers(-20, 20), zp_b=st.integers(-20, 20), seed=st.integers(0, 1000),
       dtype=st.sampled_from(["int8", "int16"]))
def test_engine_equals_numpy_and_the_rtl_array(m: int, k: int, n: int, zp_a: int, zp_b: int,
                                               seed: int, dtype: str) -> None:
    rng = np.random.default_rng(seed)
    hi = 128 if dtype == "int8" else 30000
    a = rng.integers(-hi, hi, (m, k))
    b = rng.integers(-hi, hi, (k, n))
    want = (a - zp_a) @ (b - zp_b)  # numpy int64
    got = matmul(a, b, dtype=dtype, zero_points=(zp_a, zp_b)).out
    np.testing.assert_array_equal(got, want)
    # the RTL weight-stationary array: stationary = (a - zp).T, K tiled over 128 rows with
    # the partial sums chained through psum_in, as PSUM accumulation does
    if dtype == "int16":
        return  # int16 minus a zero point can leave the cell's signed 16-bit operand range
    arr = WeightStationaryArray(128, 128)
    acc = np.zeros((m, n), dtype=np.int64)
    for k0 in range(0, k, 128):
        st_tile = (a[:, k0:k0 + 128] - zp_a).T
        mv_tile = b[k0:k0 + 128] - zp_b
        acc = arr.matmul(st_tile, mv_tile, psum_in=acc)
    np.testing.assert_array_equal(acc, want)
