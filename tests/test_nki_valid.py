"""Values computed from memory nothing wrote never leave the chip (nki/valid.py, issue 19
item 6): computing on a partly written tile and keeping only the written part runs (its
values against float64 numpy); keeping any element that depends on the unwritten part is
one line at the store, naming the tile and the line that read it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import kernel_values

import systolic.nki as snki
from systolic.errors import KernelError


@pytest.fixture(autouse=True)
def _hook() -> None:
    snki.install("trn2")


PART_KEPT = '''
@nki.jit
def k(x):
    out = nl.ndarray((100, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t[0:100, :], src=x)
    sq = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=sq, op=nl.square, data=t)
    s = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=s, op=nl.add, data=sq, axis=1)
    r = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=r, data=sq, op0=nl.add, operand0=s)
    nisa.dma_copy(dst=out, src=r[0:100, :])
    return out
'''


def test_a_partly_written_tile_may_be_computed_on_when_only_its_written_part_is_kept(
        tmp_path: Path) -> None:
    """Rows 100..127 are never written: squared, summed per row, added; rows 0..99 do not
    depend on them (each row's sum is its own), so they are stored."""
    x = np.arange(100 * 64, dtype=np.float32).reshape(100, 64) % 7 - 3
    got = np.asarray(kernel_values(tmp_path, PART_KEPT, x), np.float64)
    sq = x.astype(np.float64) ** 2
    assert np.array_equal(got, sq + sq.sum(axis=1, keepdims=True))  # small ints: exact


def test_keeping_a_row_computed_from_the_unwritten_part_is_refused(tmp_path: Path) -> None:
    with pytest.raises(KernelError) as exc:
        kernel_values(tmp_path, PART_KEPT.replace("src=r[0:100, :]", "src=r[0:101, :]").replace(
            "(100, 64), dtype=nl.float32, buffer=nl.shared_hbm",
            "(101, 64), dtype=nl.float32, buffer=nl.shared_hbm"),
            np.ones((100, 64), np.float32))
    assert exc.value.line == 17 and "made at line 9" in str(exc.value)
    assert "read at line 12" in str(exc.value)  # the activation read the unwritten rows


MATMUL_HALF = '''
@nki.jit
def k(a, b):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    y = nl.ndarray((128, 512), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.dma_copy(dst=y[0:KEEP, :], src=b[0:KEEP, :])
    p = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=p, stationary=x, moving=y)
    r = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=r, src=p)
    nisa.dma_copy(dst=out, src=r)
    return out
'''


def test_a_matmul_contracting_over_unwritten_partitions_taints_every_output(
        tmp_path: Path) -> None:
    """A garbage (or NaN) element of the moving tile enters every output of its column:
    one missing partition is enough to refuse the store."""
    import ml_dtypes

    a = np.ones((128, 128), ml_dtypes.bfloat16)
    b = np.ones((128, 512), ml_dtypes.bfloat16)
    got = kernel_values(tmp_path, MATMUL_HALF.replace("KEEP", "128"), a, b)
    assert np.array_equal(np.asarray(got), np.full((128, 512), 128.0, np.float32))
    with pytest.raises(KernelError, match="nothing wrote") as exc:
        kernel_values(tmp_path, MATMUL_HALF.replace("KEEP", "127"), a, b)
    assert exc.value.line == 17 and "made at line 11" in str(exc.value)
    assert "read at line 14" in str(exc.value)  # the matmul


SCRATCH = '''
@nki.jit
def k(x):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    scratch = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.hbm)
    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=scratch[0:64, :], src=t[0:64, :])
    nisa.dma_copy(dst=scratch[HALF, :], src=t[HALF, :])
    back = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=back, src=scratch)
    nisa.dma_copy(dst=out, src=back)
    return out
'''


def test_device_memory_written_in_parts_then_read_back(tmp_path: Path) -> None:
    """A device-memory tensor stored in parts keeps the parts' views until something reads
    it (no element map for an output stored tile by tile); read back, the map made from
    them is exact: both halves written pass, a row left out is refused at the store."""
    x = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)
    got = np.asarray(kernel_values(tmp_path, SCRATCH.replace("HALF", "64:128"), x))
    assert np.array_equal(got, x)
    with pytest.raises(KernelError, match="nothing wrote"):
        kernel_values(tmp_path, SCRATCH.replace("HALF", "64:127"), x)


def test_the_warn_policy_stores_the_fill_and_names_the_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under ``POLICY = "warn"`` (the pytest plugin's) the store runs: the rows written
    hold their values, the row nothing wrote the model's fill (NaN for fp32, hardware's
    "garbage data"), and one UnwrittenWarning names the store's FILE:LINE."""
    from systolic.nki import valid

    monkeypatch.setattr(valid, "POLICY", "warn")
    x = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)
    with pytest.warns(valid.UnwrittenWarning, match="garbage on hardware") as rec:
        got = np.asarray(kernel_values(tmp_path, SCRATCH.replace("HALF", "64:127"), x))
    assert [(Path(w.filename).name, w.lineno) for w in rec] == [("k.py", 16)]
    assert np.array_equal(got[:127], x[:127]) and np.isnan(got[127]).all()
