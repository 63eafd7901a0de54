"""The behavioural PE cell and chain (seed 004) against closed forms and Python-int references."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from systolic.errors import FormatError, ShapeError
from systolic.rtl.cell import PECell, PEChain, exact_depth, wrap48

I16 = st.integers(-(2**15), 2**15 - 1)
I48 = st.integers(-(2**47), 2**47 - 1)


def ref_wrap(v: int) -> int:
    """Two's-complement 48-bit wrap on Python ints (independent of wrap48's bit tricks)."""
    return (v + 2**47) % 2**48 - 2**47


# --- wrap48 and the exactness bound (FACTS.md, INT48 accumulator) -----------------------------


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=1, max_size=20))
def test_wrap48_matches_modular_reference(values: list[int]) -> None:
    got = wrap48(np.array(values, dtype=np.int64))
    assert got.dtype == np.int64
    assert got.tolist() == [ref_wrap(v) for v in values]


def test_wrap48_edges() -> None:
    assert wrap48(np.array([2**47 - 1, 2**47, -(2**47), -(2**47) - 1, 2**48])).tolist() == [
        2**47 - 1,
        -(2**47),
        -(2**47),
        2**47 - 1,
        0,
    ]


@pytest.mark.parametrize(
    ("act_bits", "weight_bits", "depth"),
    [(16, 16, 2**17 - 1), (8, 8, 2**33 - 1), (8, 16, 2**25 - 1), (16, 8, 2**25 - 1)],
)
def test_exact_depth_closed_form(act_bits: int, weight_bits: int, depth: int) -> None:
    assert exact_depth(act_bits, weight_bits) == depth
    worst = (-(2 ** (act_bits - 1))) * (-(2 ** (weight_bits - 1)))
    assert depth * worst <= 2**47 - 1 < (depth + 1) * worst


def test_int16_depth_2_17_overflows_to_most_negative() -> None:
    # K = 2**17 worst-case int16 products sum to 2**47, one past the largest INT48 value.
    total = np.int64(2**17) * np.int64((-32768) * (-32768))
    assert int(wrap48(total)) == -(2**47)


# --- the cell ----------------------------------------------------------------------------------


def ref_cell_run(
    w: list[int], a: list[int], s: list[int], clear: list[bool], rst_n: list[bool]
) -> tuple[list[int], list[int]]:
    """The seed 004 register equations, one Python-int cycle at a time."""
    act, acc = 0, 0
    acts, sums = [], []
    for wt, at, st_, ct, rt in zip(w, a, s, clear, rst_n, strict=True):
        if not rt:
            act, acc = 0, 0
        elif ct:
            act, acc = at, 0
        else:
            act, acc = at, ref_wrap(st_ + wt * at)
        acts.append(act)
        sums.append(acc)
    return acts, sums


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_cell_run_matches_register_equations(data: st.DataObject) -> None:
    t = data.draw(st.integers(1, 30))
    w = data.draw(st.lists(I16, min_size=t, max_size=t))
    a = data.draw(st.lists(I16, min_size=t, max_size=t))
    s = data.draw(st.lists(I48, min_size=t, max_size=t))
    clear = data.draw(st.lists(st.booleans(), min_size=t, max_size=t))
    rst_n = data.draw(st.lists(st.booleans(), min_size=t, max_size=t))
    trace = PECell().run(w, a, s, clear, rst_n)
    acts, sums = ref_cell_run(w, a, s, clear, rst_n)
    assert trace.act_out.tolist() == acts
    assert trace.sum_out.tolist() == sums


def test_cell_wraps_at_48_bits() -> None:
    cell = PECell()
    assert cell.step(weight=1, act_in=1, sum_in=2**47 - 1) == (1, -(2**47))
    assert cell.step(weight=-32768, act_in=32767, sum_in=-(2**47)) == (
        32767,
        2**47 - 32768 * 32767,
    )


def test_cell_rejects_out_of_range_operands() -> None:
    with pytest.raises(FormatError, match="16-bit"):
        PECell().step(weight=2**15, act_in=0, sum_in=0)
    with pytest.raises(FormatError, match="48-bit"):
        PECell().step(weight=0, act_in=0, sum_in=2**47)


# --- the chain ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("w0", "w1", "a"), [(3, 5, 7), (-32768, 32767, -32768), (-2, 9, 0)])
def test_seed_two_cell_example(w0: int, w1: int, a: int) -> None:
    """Seed 004, "Example": a shared activation a flows through two chained cells."""
    chain = PEChain([w0, w1])
    chain.step(a)  # cycle 0: cell0.act_in = a, cell0.sum_in = 0
    assert chain.act_out[0] == a
    assert chain.sum_out[0] == w0 * a
    assert chain.sum_out[1] == 0  # cell1 saw only reset values
    chain.step(0)  # cycle 1: cell1.act_in = a, cell1.sum_in = w0*a
    assert chain.act_out[1] == a
    assert chain.sum_out[1] == w0 * a + w1 * a


def test_seed_two_cell_example_with_cells_wired_by_hand() -> None:
    w0, w1, a = -1234, 567, 891
    c0, c1 = PECell(), PECell()
    # One edge: both cells sample their inputs before either register changes.
    a0_in, s1_in, a1_in = a, c0.sum_out, c0.act_out
    c0.step(w0, a0_in, 0)
    c1.step(w1, a1_in, s1_in)
    assert (c0.act_out, c0.sum_out) == (a, w0 * a)
    a1_in, s1_in = c0.act_out, c0.sum_out
    c0.step(w0, 0, 0)
    c1.step(w1, a1_in, s1_in)
    assert c1.sum_out == w0 * a + w1 * a


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_chain_shared_activation_closed_form(data: st.DataObject) -> None:
    """Seed wiring: the last cell's sum_out after edge t is a[t - C + 1] * sum(w)."""
    n_cells = data.draw(st.integers(1, 12))
    w = data.draw(st.lists(I16, min_size=n_cells, max_size=n_cells))
    acts = data.draw(st.lists(I16, min_size=n_cells, max_size=n_cells + 10))
    chain = PEChain(w)
    for t, a in enumerate(acts):
        chain.step(a)
        if t >= n_cells - 1:
            assert int(chain.sum_out[-1]) == acts[t - n_cells + 1] * sum(w)


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_chain_dot_matches_numpy(data: st.DataObject) -> None:
    n_cells = data.draw(st.integers(1, 24))
    n = data.draw(st.integers(1, 8))
    lo = data.draw(st.sampled_from([-(2**7), -(2**15)]))  # INT8 or INT16 operands
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    w = rng.integers(lo, -lo, size=n_cells)
    x = rng.integers(lo, -lo, size=(n_cells, n))
    got, cycles = PEChain(w).dot(x)
    np.testing.assert_array_equal(got, w.astype(np.int64) @ x.astype(np.int64))
    assert cycles == n + n_cells - 1
    single, _ = PEChain(w).dot(x[:, 0])
    assert int(single) == int(w.astype(np.int64) @ x[:, 0].astype(np.int64))


def test_chain_partial_sum_wraps_and_total_is_exact() -> None:
    """A wrapped partial sum still ends exact when the total fits (INT48 wrap is mod 2**48)."""
    p = 2**47 - 5
    chain = PEChain([32767, -32767])
    chain.step(32767, sum_in=p)
    assert int(chain.sum_out[0]) == p + 32767 * 32767 - 2**48  # wrapped negative
    assert chain.sum_out[0] < 0
    chain.step(0)
    assert int(chain.sum_out[1]) == p  # p + w0*a + w1*a == p, exact


def test_chain_clear_and_reset() -> None:
    chain = PEChain([2, 3])
    chain.step(5)
    chain.step(7, clear=True)
    assert chain.sum_out.tolist() == [0, 0]
    assert chain.act_out.tolist() == [7, 5]  # clear leaves the activations moving
    chain.step(1, rst_n=False)
    assert chain.act_out.tolist() == [0, 0]


def test_chain_shape_errors() -> None:
    with pytest.raises(ShapeError):
        PEChain([])
    with pytest.raises(ShapeError, match="one value per cell"):
        PEChain([1, 2]).step([1, 2, 3])
    with pytest.raises(ShapeError, match="rows"):
        PEChain([1, 2]).dot(np.zeros((3, 1), np.int64))
    with pytest.raises(FormatError, match="integer"):
        PEChain([1.5, 2.0])
