"""``tensor_reduce`` / ``nl.sum`` over some of the free axes (issue 19 item 3): the source
access pattern walks the kept axes outermost and the reduced ones innermost, one
TensorReduce per kept block (nki/reduce.py); values against float64 numpy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import opcodes, record_source, write_kernel

import systolic.nki as snki
from systolic.errors import KernelError
from systolic.isa import TensorReduce


@pytest.fixture(autouse=True)
def _hook() -> None:
    snki.install("trn2")


def _values(tmp_path: Path, body: str, *arrays: np.ndarray) -> np.ndarray:
    k = snki.load_kernel(str(write_kernel(tmp_path, body)), "k")
    return np.asarray(snki.values(k, list(arrays)), np.float64)


POOL = '''
@nki.jit
def k(x):
    C, H, W = x.shape
    out = nl.ndarray((C, H // 2, W // 2), dtype=x.dtype, buffer=nl.shared_hbm)
    i0, i1, i2, i3, i4 = nl.mgrid[0:C, 0:H // 2, 0:2, 0:W // 2, 0:2]
    t = nl.load(x)
    r = nl.sum(t[i0, 2 * i1 + i2, 2 * i3 + i4], axis=[2, 4]) / 4
    nl.store(out, value=r)
    return out
'''


def test_average_pool_reduces_two_inner_window_axes(tmp_path: Path) -> None:
    """The vendor's average_pool2d pattern: axes 2 and 4 of a 5-axis view; integers / 4
    are exact in fp32."""
    x = (np.arange(64 * 8 * 12) % 13 - 6).astype(np.float32).reshape(64, 8, 12)
    want = x.astype(np.float64).reshape(64, 4, 2, 6, 2).sum(axis=(2, 4)) / 4
    assert np.array_equal(_values(tmp_path, POOL, x), want)
    rec = record_source(tmp_path, POOL, ["fp32[64,8,12]"])
    red = [i for i in rec.program if isinstance(i, TensorReduce)]
    # kept (4, 6) and reduced (2, 2) read as 4 free dimensions: split along the first kept
    assert len(red) == 4 and all(r.src.free_elems == 24 and r.dst.free_elems == 6
                                 for r in red)
    assert opcodes(rec).count("TensorReduce") == 4


LAST_TWO = '''
@nki.jit
def k(x):
    P, A, B, D = x.shape
    out = nl.ndarray((P, A), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((P, A, B, D), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    r = nl.ndarray((P, A), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=r, op=nl.maximum, data=t, axis=AXIS)
    nisa.dma_copy(dst=out, src=r)
    return out
'''


@pytest.mark.parametrize("axis", ["(-2, -1)", "[2, 3]", "(3, 2)"])
def test_the_innermost_axes_in_one_instruction(tmp_path: Path, axis: str) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((128, 5, 4, 6)).astype(np.float32)
    got = _values(tmp_path, LAST_TWO.replace("AXIS", axis), x)
    assert np.array_equal(got, x.astype(np.float64).max(axis=(2, 3)))  # max: exact
    rec = record_source(tmp_path, LAST_TWO.replace("AXIS", axis), ["fp32[128,5,4,6]"])
    assert opcodes(rec).count("TensorReduce") == 1


def test_an_outer_axis_with_the_inner_kept(tmp_path: Path) -> None:
    """axis=1 of [P, 5, 4]: the pattern walks axis 2 outermost, axis 1 innermost."""
    body = LAST_TWO.replace("P, A, B, D = x.shape", "P, A, B = x.shape; D = 1").replace(
        "(P, A, B, D)", "(P, A, B)").replace("(P, A)", "(P, B)").replace("AXIS", "1")
    x = (np.arange(128 * 5 * 4) % 11).astype(np.float32).reshape(128, 5, 4)
    assert np.array_equal(_values(tmp_path, body, x), x.astype(np.float64).max(axis=1))


def test_a_reduction_over_the_partition_axis_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(KernelError, match="axis 0 is the partition axis"):
        record_source(tmp_path, LAST_TWO.replace("AXIS", "(0, 1)"), ["fp32[128,5,4,6]"])


def test_a_dst_of_the_wrong_shape_names_the_kept_shape(tmp_path: Path) -> None:
    with pytest.raises(KernelError, match=r"dst must be \[128, 5, 4\]"):
        record_source(tmp_path, LAST_TWO.replace("AXIS", "3"), ["fp32[128,5,4,6]"])
