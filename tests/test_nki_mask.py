"""Partial masks (issue 19 item 1; nki/mask.py): an operation under ``mask=`` becomes the
same instruction over each covered rectangle, masked-out elements neither read nor
written, each instruction timed on what it covers. Values against float64 numpy."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from helpers import SQUARE_MASKED, kernel_values, record_source, write_kernel

import systolic.nki as snki
from systolic.errors import KernelError
from systolic.isa import Activation, DmaCopy, TensorTensor
from systolic.nki.mask import boxes
from systolic.timing.costs import engine_cycles


@pytest.fixture(autouse=True)
def _hook() -> None:
    snki.install("trn2")


# the vendor's own example with its mask: [0:64, 0:256]
SQUARE = SQUARE_MASKED.replace("MASK", "((i_p < 64) & (i_f < 256))")


def test_a_rectangle_mask_is_one_smaller_instruction(tmp_path: Path) -> None:
    x = (np.arange(128 * 512) % 17 - 8).astype(np.float32).reshape(128, 512)
    got = np.asarray(kernel_values(tmp_path, SQUARE, x), np.float64)
    assert np.array_equal(got, x[:64, :256].astype(np.float64) ** 2)
    rec = record_source(tmp_path, SQUARE, ["fp32[128,512]"])
    act = [i for i in rec.program if isinstance(i, Activation)]
    assert len(act) == 1 and act[0].src.partitions == 64 and act[0].src.free_elems == 256
    store = [i for i in rec.program if isinstance(i, DmaCopy) and i.dst.space.name == "DRAM"]
    assert len(store) == 1 and store[0].src.partitions == 64
    # timed by the cost table on the 256 elements it covers, not the tile's 512
    whole = Activation(replace(act[0].src, dims=((1, 512),)), act[0].dst, act[0].func,
                       act[0].scale, act[0].engine)
    assert engine_cycles(act[0], rec.arch) < engine_cycles(whole, rec.arch)


# a tail: rows past the end of x are neither loaded, computed nor stored (the vendor's
# layout-dynamic-loop / rmsnorm pattern)
TAIL = '''
@nki.jit
def k(x):
    n, f = x.shape
    out = nl.ndarray((n, f), dtype=x.dtype, buffer=nl.shared_hbm)
    i_f = nl.arange(f)[None, :]
    for p in nl.affine_range((n + 127) // 128):
        i_p = p * 128 + nl.arange(128)[:, None]
        t = nl.load(x[i_p, i_f], mask=(i_p < n))
        e = nl.add(t, t, mask=(i_p < n))
        nl.store(out[i_p, i_f], value=e, mask=(i_p < n))
    return out
'''


@pytest.mark.parametrize("n", [100, 128, 300])
def test_a_tail_of_rows_is_left_out(tmp_path: Path, n: int) -> None:
    x = (np.arange(n * 64) % 9).astype(np.float32).reshape(n, 64)
    got = np.asarray(kernel_values(tmp_path, TAIL, x), np.float64)
    assert np.array_equal(got, 2 * x.astype(np.float64))
    rec = record_source(tmp_path, TAIL, [f"fp32[{n},64]"])
    tts = [i for i in rec.program if isinstance(i, TensorTensor)]
    assert sum(i.dst.partitions for i in tts) == n


# two index expressions in one clause: the first r rows whole, then part of one row
FLAT = '''
@nki.jit
def k(x, n):
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=x)
    ix = nl.arange(128)[:, None]
    iy = nl.arange(64)[None, :]
    t = nl.load(x[ix, iy])
    c = nl.multiply(t, 3.0, mask=(64 * ix + iy < n))
    nl.store(out[ix, iy], value=c, mask=(64 * ix + iy < n))
    return out
'''


def test_a_mask_over_two_axes_is_cut_into_rectangles(tmp_path: Path) -> None:
    x = (np.arange(128 * 64) % 5 + 1).astype(np.float32).reshape(128, 64)
    got = np.asarray(kernel_values(tmp_path, FLAT, x, n=1000), np.float64).reshape(-1)
    want = x.astype(np.float64).reshape(-1).copy()
    want[:1000] *= 3
    assert np.array_equal(got, want)
    rec = snki.record_kernel(str(write_kernel(tmp_path, FLAT)), "k", ["fp32[128,64]"],
                             {"n": 1000}, arch="trn2")
    # 1000 = 15 rows of 64 + 40: two rectangles
    mul = [i for i in rec.program if type(i).__name__ == "TensorScalar"]
    assert [(i.src.partitions, i.src.free_elems) for i in mul] == [(15, 64), (1, 40)]


# two index expressions compared with each other: a lower triangle
TRIANGLE = '''
@nki.jit
def k(x):
    out = nl.ndarray((32, 32), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:32, 0:32]
    t = nl.load(x)
    z = nl.ndarray((32, 32), dtype=x.dtype, buffer=nl.sbuf)
    nisa.memset(dst=z, value=0.0)
    nisa.tensor_copy(dst=z, src=t, mask=(i_p >= i_f))
    nl.store(out, value=z)
    return out
'''


def test_two_index_expressions_compared_select_a_triangle(tmp_path: Path) -> None:
    x = (np.arange(32 * 32) % 7 + 1).astype(np.float32).reshape(32, 32)
    got = np.asarray(kernel_values(tmp_path, TRIANGLE, x))
    assert np.array_equal(got, np.tril(x))


def test_boxes_cover_exactly_the_selection() -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        sel = rng.random((rng.integers(1, 6), rng.integers(1, 6), rng.integers(1, 4))) < 0.5
        got = np.zeros_like(sel, dtype=np.int64)
        for b in boxes(sel):
            got[tuple(slice(lo, hi) for lo, hi in b)] += 1
        assert np.array_equal(got, sel.astype(np.int64))  # each cell once


# a Python bool (a comparison of plain integers): False records nothing
BOOL = '''
@nki.jit
def k(x):
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    for i in nl.static_range(2):
        nisa.tensor_scalar(dst=t, data=t, op0=nl.add, operand0=1.0, mask=(i * 64 >= 64))
    nl.store(out, value=t)
    return out
'''


def test_a_false_mask_makes_no_instruction(tmp_path: Path) -> None:
    x = np.zeros((128, 64), np.float32)
    assert np.array_equal(np.asarray(kernel_values(tmp_path, BOOL, x)), x + 1)


REDUCE = '''
@nki.jit
def k(x):
    n, f = x.shape
    out = nl.ndarray((n, 1), dtype=x.dtype, buffer=nl.shared_hbm)
    ix = nl.arange(128)[:, None]
    iy = nl.arange(f)[None, :]
    t = nl.load(x[ix, iy], mask=(ix < n))
    m = nl.max(t, axis=[1], keepdims=True, mask=MASK)
    nl.store(out[ix, nl.arange(1)[None, :]], value=m, mask=(ix < n))
    return out
'''


def test_a_row_mask_on_a_reduction(tmp_path: Path) -> None:
    x = np.random.default_rng(2).standard_normal((100, 64)).astype(np.float32)
    got = np.asarray(kernel_values(tmp_path, REDUCE.replace("MASK", "(ix < n)"), x))
    assert np.array_equal(got, x.max(axis=1, keepdims=True))


def test_a_mask_splitting_a_reduction_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(KernelError, match="not one rectangle"):
        record_source(tmp_path, REDUCE.replace("MASK", "(64 * ix + iy < 1000)"),
                      ["fp32[100,64]"])
    with pytest.raises(KernelError, match="free axis of tensor_reduce"):
        record_source(tmp_path, REDUCE.replace("MASK", "(iy < 10)"), ["fp32[100,64]"])


def test_an_index_past_its_dimension_without_a_mask_is_one_line(tmp_path: Path) -> None:
    body = SQUARE.replace("mask=((i_p < 64) & (i_f < 256)))\n    return", ")\n    return")
    with pytest.raises(KernelError, match=r"index expression covers 0\.\.127, outside "
                                          r"dimension 0 of size 64") as exc:
        record_source(tmp_path, body, ["fp32[128,512]"])
    assert exc.value.line == 13


def test_a_mask_on_a_matmul_that_drops_part_is_one_line(tmp_path: Path) -> None:
    body = '''
@nki.jit
def k(a, b):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    p = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=p, stationary=nl.load(a), moving=nl.load(b), mask=(i_p < 64))
    nl.store(out, value=p)
    return out
'''
    with pytest.raises(KernelError, match="not modelled on nc_matmul"):
        record_source(tmp_path, body, ["bf16[128,128]", "bf16[128,512]"])
