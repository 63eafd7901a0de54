"""What nki-samples' vision kernels (select_and_scatter, resize_nearest) need: iota over a
dense ``nl.mgrid`` expression and over several open ``nl.arange`` free axes, numpy
broadcasting along free axes of size 1, indirect DMAs on a later dimension and under a
partition mask. Values against independent numpy references (integers exact); costs
against the nki.isa "Estimated instruction cost" formulas worked by hand."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import kernel_values
from helpers import record_source as _rec

import systolic.nki as snki
from systolic.arch import get_arch
from systolic.errors import KernelError
from systolic.isa.instructions import Iota
from systolic.timing.costs import engine_cycles

TRN2 = get_arch("trn2")


@pytest.fixture(autouse=True)
def _hook():
    snki.install("trn2")


# -- iota over several free axes ----------------------------------------------------------
DENSE = '''
@nki.jit
def k():
    a_out = nl.ndarray((128, 5, 3, 4), dtype=nl.int32, buffer=nl.shared_hbm)
    b_out = nl.ndarray((16, 5, 3, 4), dtype=nl.float32, buffer=nl.shared_hbm)
    g = nl.mgrid[0:128, 0:5, 0:3, 0:4]
    a = nisa.iota(7 * g.y - g.z + 2, dtype=nl.int32)
    h = nl.mgrid[0:16, 0:5, 0:3, 0:4]
    b = nisa.iota(h.p * 1000 + h.x * 100 + h.y * 10 + h.z - 50, dtype=nl.float32)
    nl.store(a_out, a)
    nl.store(b_out, b)
    return a_out, b_out
'''


def test_iota_of_a_dense_grid_expression(tmp_path) -> None:
    """nl.mgrid is dense (NKI docs, nki.language.mgrid): 7 * g.y - g.z + 2 is a
    [128, 5, 3, 4] tile, constant along the partition and x axes it does not name."""
    a, b = kernel_values(tmp_path, DENSE)
    p, x, y, z = np.mgrid[0:128, 0:5, 0:3, 0:4]
    np.testing.assert_array_equal(a, 7 * y - z + 2)
    p, x, y, z = np.mgrid[0:16, 0:5, 0:3, 0:4]
    np.testing.assert_array_equal(b, (p * 1000 + x * 100 + y * 10 + z - 50).astype(np.float64))
    rec = _rec(tmp_path, DENSE, [])
    cycles = sorted(engine_cycles(i, TRN2) for i in rec.program if isinstance(i, Iota))
    assert cycles == [150 + 60, 150 + 60]  # nki.isa.iota: 150 + N, N = 5 * 3 * 4 per partition


def test_iota_of_open_arange_free_axes(tmp_path) -> None:
    body = '''
@nki.jit
def k():
    out = nl.ndarray((1, 4, 5), dtype=nl.int32, buffer=nl.shared_hbm)
    t = nisa.iota(nl.arange(4)[None, :, None] * -3 + nl.arange(5)[None, None, :] * 2 + 1,
                  dtype=nl.int32)
    nl.store(out, t)
    return out
'''
    i, j = np.mgrid[0:4, 0:5]
    np.testing.assert_array_equal(kernel_values(tmp_path, body), (1 - 3 * i + 2 * j)[None])


def test_masked_iota_keeps_each_element_value(tmp_path) -> None:
    """A mask cuts the instruction to the selected rectangle; the values stay those of the
    whole tile's positions (the cut instruction starts at the rectangle's first value)."""
    body = '''
@nki.jit
def k():
    out = nl.ndarray((128, 6, 4), dtype=nl.int32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 6, 4), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=t, value=-1)
    g = nl.mgrid[0:128, 0:6, 0:4]
    nisa.iota(t, g.p * 100 + g.x * 10 + g.y, mask=(g.p >= 40) & (g.x < 5) & (g.y >= 1))
    nl.store(out, t)
    return out
'''
    p, x, y = np.mgrid[0:128, 0:6, 0:4]
    want = np.where((p >= 40) & (x < 5) & (y >= 1), p * 100 + x * 10 + y, -1)
    np.testing.assert_array_equal(kernel_values(tmp_path, body), want)


def test_iota_into_a_tile_of_other_axes_is_refused(tmp_path) -> None:
    body = '''
@nki.jit
def k():
    t = nl.ndarray((128, 12), dtype=nl.int32, buffer=nl.sbuf)
    g = nl.mgrid[0:128, 0:3, 0:4]
    nisa.iota(t, g.x * 4 + g.y)
    return t
'''
    with pytest.raises(KernelError, match="has its elements in other axes"):
        _rec(tmp_path, body, [])


# -- numpy broadcasting along free axes ---------------------------------------------------
def test_free_axis_broadcast_of_size_one_axes(tmp_path) -> None:
    """nl.equal(max [P, W, 1, 1], x [P, W, 3, 3]) as select_and_scatter writes it: each
    window's maximum against the window's elements (the [P, W, 1, 1] side read with step 0)."""
    body = '''
@nki.jit
def k(a):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    eq = nl.ndarray(a.shape, dtype=nl.uint8, buffer=nl.shared_hbm)
    t = nl.load(a)
    m = nl.max(t, axis=[2, 3], keepdims=True)
    nl.store(out, nl.subtract(t, m, dtype=nl.float32))
    nl.store(eq, nl.equal(m, t, dtype=nl.uint8))
    return out, eq
'''
    a = np.random.default_rng(5).normal(0, 1, (64, 7, 3, 3)).astype(np.float32)
    out, eq = kernel_values(tmp_path, body, a)
    m = a.astype(np.float64).max(axis=(2, 3), keepdims=True)
    np.testing.assert_array_equal(out, (a - m).astype(np.float32))  # exact: one fp32 rounding
    np.testing.assert_array_equal(eq, (a == m).astype(np.uint8))


def test_masked_one_axis_iota_starts_at_the_cut(tmp_path) -> None:
    body = '''
@nki.jit
def k():
    out = nl.ndarray((128, 8), dtype=nl.int32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 8), dtype=nl.int32, buffer=nl.sbuf)
    nisa.memset(dst=t, value=-1)
    i_p, i_f = nl.mgrid[0:128, 0:8]
    nisa.iota(t, 3 * i_p + 5 * i_f + 1, mask=(i_p >= 40) & (i_f >= 2))
    nl.store(out, t)
    return out
'''
    p, f = np.mgrid[0:128, 0:8]
    np.testing.assert_array_equal(kernel_values(tmp_path, body),
                                  np.where((p >= 40) & (f >= 2), 3 * p + 5 * f + 1, -1))


def test_iota_outer_axes_round_trip_the_text_form() -> None:
    from systolic.isa import AccessPattern, Program, Space
    from systolic.isa.asm import format_program, parse_instructions
    from systolic.verify import verify

    ins = Iota(AccessPattern(Space.SBUF, 0, 128, 0, ((1, 60),), "int32"), base=2,
               free_step=-1, outer_steps=(0, 7), outer_sizes=(5, 3))
    text = format_program([ins])
    assert "outer_steps=0,7 outer_sizes=5,3" in text
    assert parse_instructions(text) == (ins,)
    bad = Iota(AccessPattern(Space.SBUF, 0, 128, 0, ((1, 60),), "int32"), outer_steps=(1,),
               outer_sizes=(7,))
    with pytest.raises(Exception, match="divide dst's 60 free elements"):
        verify(Program((bad,)), TRN2)


# -- indirect DMA on a later dimension, and under a mask ------------------------------------
GATHER_BATCH = '''
@nki.jit
def k(a, idx):
    B, R, C = a.shape
    out = nl.ndarray((B, 128, C), dtype=a.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(C)[None, :]
    ix = nl.load(idx[i_p])
    for b in nl.affine_range(B):
        g = nl.load(a[b, ix, i_f], mask=(i_p < ROWS))
        nl.store(out[b, i_p, i_f], value=g, mask=(i_p < ROWS))
    return out
'''


def test_gather_along_the_dimension_after_an_integer_index_under_a_partition_mask(
        tmp_path) -> None:
    """x[b, idx_tile, i_f] (nki-samples' resize_nearest): batch b's rows named by the
    indices; mask i_p < 100 leaves partitions 100.. out, whose indices lie past the table
    (an unmasked gather of them is an error)."""
    rng = np.random.default_rng(7)
    a = rng.normal(0, 1, (3, 50, 40)).astype(np.float32)
    idx = np.concatenate([rng.integers(0, 50, 100), np.full(28, 999)]).astype(np.int32)
    got = kernel_values(tmp_path, GATHER_BATCH.replace("ROWS", "100"), a, idx)
    for b in range(3):  # row by row, not numpy's fancy indexing
        for k in range(100):
            np.testing.assert_array_equal(got[b, k], a[b, idx[k]])
    with pytest.raises(IndexError, match="out of bounds"):
        kernel_values(tmp_path, GATHER_BATCH.replace("ROWS", "128"), a, idx)


def test_masked_scatter_on_a_later_dimension(tmp_path) -> None:
    body = '''
@nki.jit
def k(a, idx, v):
    i_p = nl.arange(64)[:, None]
    i_f = nl.arange(a.shape[2])[None, :]
    ix = nl.load(idx[i_p])
    t = nl.load(v)
    nl.store(a[1, ix, i_f], value=t, mask=(i_p >= 16) & (i_f < 5))
    return a
'''
    rng = np.random.default_rng(9)
    a = rng.normal(0, 1, (2, 80, 8)).astype(np.float32)
    idx = rng.permutation(80)[:64].astype(np.int32)
    v = rng.normal(0, 1, (64, 8)).astype(np.float32)
    want = a.copy()
    for k in range(16, 64):
        want[1, idx[k], :5] = v[k, :5]
    np.testing.assert_array_equal(kernel_values(tmp_path, body, a, idx, v), want)


def test_indices_after_a_slice_are_refused(tmp_path) -> None:
    body = '''
@nki.jit
def k(a, idx):
    ix = nl.load(idx[nl.arange(16)[:, None]])
    return nl.load(a[0:2, ix, 0:4])
'''
    with pytest.raises(KernelError, match="first after integer indices"):
        _rec(tmp_path, body, ["fp32[4,16,4]", "int32[16]"])
