"""The weight-stationary and adder-tree array models against numpy int64 products."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from systolic.errors import FormatError, ShapeError
from systolic.rtl.array import (
    AdderTreeArray,
    ArrayStimulus,
    WeightStationaryArray,
    array_cost,
)


def ref_wrap(v: int) -> int:
    return (v + 2**47) % 2**48 - 2**47


def ref_product(w: np.ndarray, x: np.ndarray, p: np.ndarray | None = None) -> np.ndarray:
    """Exact Python-int stationary.T @ moving (+ p), then the 48-bit wrap."""
    exact = w.T.astype(object) @ x.astype(object)
    if p is not None:
        exact = exact + p.astype(object)
    return (
        np.vectorize(ref_wrap, otypes=[np.int64])(exact) if exact.size else exact.astype(np.int64)
    )


@st.composite
def problems(draw: st.DrawFn, max_side: int = 8) -> tuple[int, int, np.ndarray, np.ndarray]:
    rows = draw(st.integers(1, max_side))
    cols = draw(st.integers(1, max_side))
    k = draw(st.integers(1, rows))
    m = draw(st.integers(1, cols))
    n = draw(st.integers(1, 12))
    bits = draw(st.sampled_from([8, 16]))  # INT8 operands are sign-extended INT16 ones
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
    w = rng.integers(lo, hi, size=(k, m), endpoint=True)
    x = rng.integers(lo, hi, size=(k, n), endpoint=True)
    return rows, cols, w, x


@settings(max_examples=40, deadline=None)
@given(problems())
def test_weight_stationary_matches_numpy(prob: tuple[int, int, np.ndarray, np.ndarray]) -> None:
    rows, cols, w, x = prob
    arr = WeightStationaryArray(rows, cols)
    got = arr.matmul(w, x)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, w.T.astype(np.int64) @ x.astype(np.int64))
    # Output (m, n) leaves the bottom row after edge n + m + rows - 1: last one M-1, N-1.
    assert arr.cycles == rows + w.shape[1] + x.shape[1] - 2


@settings(max_examples=40, deadline=None)
@given(problems(max_side=17))
def test_adder_tree_matches_numpy(prob: tuple[int, int, np.ndarray, np.ndarray]) -> None:
    rows, cols, w, x = prob
    arr = AdderTreeArray(rows, cols)
    got = arr.matmul(w, x, chunk=5)
    np.testing.assert_array_equal(got, w.T.astype(np.int64) @ x.astype(np.int64))
    assert arr.cycles == x.shape[1]  # one dot product per clock edge
    assert arr.adder_levels == (rows - 1).bit_length()  # ceil(log2(rows))


@settings(max_examples=30, deadline=None)
@given(problems(), st.integers(0, 2**32 - 1))
def test_psum_in_wraps_at_48_bits(prob: tuple[int, int, np.ndarray, np.ndarray], seed: int) -> None:
    rows, cols, w, x = prob
    rng = np.random.default_rng(seed)
    # Partial sums near the INT48 limits, so products push many of them over.
    edge = rng.choice([-(2**47), 2**47 - 1], size=(w.shape[1], x.shape[1]))
    p = edge - np.sign(edge) * rng.integers(0, 2**20, size=edge.shape)
    want = ref_product(w, x, p)
    np.testing.assert_array_equal(WeightStationaryArray(rows, cols).matmul(w, x, p), want)
    np.testing.assert_array_equal(AdderTreeArray(rows, cols).matmul(w, x, p), want)


def test_wrapped_partial_sum_column_still_exact() -> None:
    """Partial sums wrap inside a column yet the output is exact because the total fits."""
    p = 2**47 - 1
    w = np.array([[32767], [-32767]])
    arr = WeightStationaryArray(2, 1)
    arr.load(w)
    arr.step([32767, 0], [p])  # X[0, 0] and the top partial sum enter at edge 0
    assert int(arr.sum_out[0, 0]) == p + 32767 * 32767 - 2**48  # PE(0, 0) wrapped
    arr.step([0, 32767])  # X[1, 0] enters row 1 one edge later (the skew)
    assert int(arr.sum_out[1, 0]) == p
    np.testing.assert_array_equal(
        WeightStationaryArray(2, 1).matmul(w, np.array([[32767], [32767]]), np.array([[p]])),
        [[p]],
    )


def ref_array_run(w: np.ndarray, stim: ArrayStimulus) -> tuple[np.ndarray, np.ndarray]:
    """Every PE of the grid, one Python-int cycle at a time, wired as the module says."""
    rows, cols = w.shape
    weight = [[int(v) for v in row] for row in w]
    act = [[0] * cols for _ in range(rows)]
    acc = [[0] * cols for _ in range(rows)]
    acts, sums = [], []
    for t in range(stim.act_in.shape[0]):
        new_act = [[0] * cols for _ in range(rows)]
        new_acc = [[0] * cols for _ in range(rows)]
        for k in range(rows):
            for m in range(cols):
                a_in = int(stim.act_in[t, k]) if m == 0 else act[k][m - 1]
                s_in = int(stim.sum_in[t, m]) if k == 0 else acc[k - 1][m]
                if not stim.rst_n[t]:
                    new_act[k][m], new_acc[k][m] = 0, 0
                elif stim.clear[t]:
                    new_act[k][m], new_acc[k][m] = a_in, 0
                else:
                    new_act[k][m] = a_in
                    new_acc[k][m] = ref_wrap(s_in + weight[k][m] * a_in)
        if stim.w_shift is not None and stim.w_shift[t]:  # after the products of the edge
            assert stim.w_in is not None
            weight = [[int(v) for v in stim.w_in[t]], *weight[:-1]]
        act, acc = new_act, new_acc
        acts.append(act)
        sums.append(acc)
    return np.array(acts, dtype=np.int64), np.array(sums, dtype=np.int64)


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 5), st.integers(1, 5), st.integers(1, 25), st.integers(0, 2**32 - 1))
def test_array_run_with_clear_and_reset(rows: int, cols: int, t: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    w = rng.integers(-(2**15), 2**15, size=(rows, cols))
    stim = ArrayStimulus.random(rows, cols, t, rng, p_clear=0.2, p_reset=0.1)
    arr = WeightStationaryArray(rows, cols)
    arr.load(w)
    trace = arr.run(stim)
    acts, sums = ref_array_run(w, stim)
    np.testing.assert_array_equal(trace.act_out, acts)
    np.testing.assert_array_equal(trace.sum_out, sums)


def test_weights_load_a_row_per_cycle() -> None:
    """rows edges of ArrayStimulus.load_weights leave the tile in place (the state load()
    gives at once), and a product streamed after them is W.T @ X."""
    rng = np.random.default_rng(11)
    rows, cols, n = 5, 3, 4
    w = rng.integers(-(2**15), 2**15, size=(rows, cols))
    x = rng.integers(-(2**15), 2**15, size=(rows, n))
    arr = WeightStationaryArray(rows, cols)
    load = ArrayStimulus.load_weights(w)
    assert load.cycles == rows and load.w_shift is not None and load.w_shift.all()
    for t in range(rows):
        arr.run(ArrayStimulus(load.act_in[t:t + 1], load.sum_in[t:t + 1], load.clear[t:t + 1],
                              load.rst_n[t:t + 1], load.w_in[t:t + 1],  # type: ignore[index]
                              load.w_shift[t:t + 1]))
        np.testing.assert_array_equal(arr.weights[: t + 1], w[rows - 1 - t:])  # pushed down
    np.testing.assert_array_equal(arr.weights, w)
    cycles = rows + cols + n - 2
    act_in = np.zeros((cycles, rows), np.int64)
    for k in range(rows):
        act_in[k: k + n, k] = x[k]  # X[k, n] enters row k at edge n + k
    stream = ArrayStimulus(act_in, np.zeros((cycles, cols), np.int64), np.zeros(cycles, bool),
                           np.ones(cycles, bool))
    trace = WeightStationaryArray(rows, cols).run(load.then(stream))
    got = np.array([[trace.sum_out[rows + j + m + rows - 1, rows - 1, m] for j in range(n)]
                    for m in range(cols)])
    np.testing.assert_array_equal(got, ref_product(w, x))


def test_reset_keeps_the_weights() -> None:
    arr = WeightStationaryArray(2, 2)
    arr.load([[1, 2], [3, 4]])
    arr.step([5, 6], None, rst_n=False)
    np.testing.assert_array_equal(arr.weights, [[1, 2], [3, 4]])
    assert not arr.sum_out.any()


def test_full_128x128_int8_product() -> None:
    rng = np.random.default_rng(7)
    w = rng.integers(-128, 128, size=(128, 128), dtype=np.int8)
    x = rng.integers(-128, 128, size=(128, 6), dtype=np.int8)
    arr = WeightStationaryArray(128, 128)
    np.testing.assert_array_equal(arr.matmul(w, x), w.T.astype(np.int64) @ x.astype(np.int64))
    assert arr.cycles == 128 + 128 + 6 - 2


def test_seed_16x16_adder_tree_is_256_macs_per_cycle() -> None:
    """Seed 004: npu.sv's array is 16x16 = 256 simultaneous multiplies, 1 cycle."""
    tree = array_cost("adder_tree", 16, 16)
    systolic = array_cost("systolic", 16, 16)
    assert tree.multipliers == systolic.multipliers == 256
    assert tree.adders_in_path == 4 + 1  # log2(16) tree levels, then the sum_in adder
    assert systolic.adders_in_path == 1
    assert tree.cycles(100) == 100
    assert systolic.cycles(100) == 100 + 16 + 16 - 2
    assert systolic.register_bits == 256 * (16 + 48)
    assert tree.register_bits == 16 * 48
    assert tree.act_fanout == 16 and systolic.act_fanout == 1


def test_zero_columns_and_psum_only() -> None:
    arr = WeightStationaryArray(3, 3)
    assert arr.matmul(np.ones((2, 2), np.int64), np.ones((2, 0), np.int64)).shape == (2, 0)
    assert arr.cycles == 0


@pytest.mark.parametrize("cls", [WeightStationaryArray, AdderTreeArray])
def test_bad_operands(cls: type) -> None:
    arr = cls(4, 4)
    with pytest.raises(ShapeError, match="does not fit"):
        arr.matmul(np.zeros((5, 2), np.int64), np.zeros((5, 3), np.int64))
    with pytest.raises(ShapeError, match="rows, not K"):
        arr.matmul(np.zeros((2, 2), np.int64), np.zeros((3, 3), np.int64))
    with pytest.raises(ShapeError, match="2-D"):
        arr.matmul(np.zeros(2, np.int64), np.zeros((2, 3), np.int64))
    with pytest.raises(FormatError, match="16-bit"):
        arr.matmul(np.full((2, 2), 40000), np.zeros((2, 3), np.int64))
    with pytest.raises(FormatError, match="integer"):
        arr.matmul(np.zeros((2, 2)), np.zeros((2, 3), np.int64))
    with pytest.raises(FormatError, match="48-bit"):
        arr.matmul(np.zeros((2, 2), np.int64), np.zeros((2, 3), np.int64), np.full((2, 3), 2**47))
    with pytest.raises(ShapeError, match="psum_in"):
        arr.matmul(np.zeros((2, 2), np.int64), np.zeros((2, 3), np.int64), np.zeros((3, 2), int))
    with pytest.raises(ShapeError, match="at least one"):
        cls(0, 4)
