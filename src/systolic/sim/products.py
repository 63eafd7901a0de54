"""The per-instruction arithmetic of the functional simulator, shared by its reference loop
and its threaded fast path (so the two give the same bits by construction). The semantics
are stated in :mod:`systolic.sim.functional`'s docstring."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from ..geometry import Rect
from ..isa import MatMul, MatmultMx
from ._base import Order

__all__ = ["moving_values", "product", "split_fp32", "stationary_operand", "systolic_sum",
           "tile_rect"]

_BF16_MAX = float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)


def systolic_sum(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """w.T @ x with the array's order: partial sums added in k order, fp32 rounding each step.

    ``w`` [K, M] and ``x`` [K, N] float32; returns float32 [M, N]. The loop is over the K
    array rows (each step is vectorised over the M x N PEs' outputs).
    """
    m, n = w.shape[1], x.shape[1]
    acc = np.zeros((m, n), dtype=np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        for k in range(w.shape[0]):
            acc += np.multiply.outer(w[k], x[k])
    return acc


def split_fp32(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The fp32 two-pass halves (hi, lo), float32: hi = bf16(w), lo = bf16(w - hi).

    A finite w beyond bf16's largest finite value (about 3.39e38) would round hi to inf and
    make lo = -inf (so hi + lo = NaN): hi saturates to +-bf16 max instead, and lo carries the
    rest (exact to bf16). Where w is +-inf or NaN, hi is w and lo is 0, so the two passes
    give what one pass would.
    """
    w = np.asarray(w, dtype=np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        hi = w.astype(ml_dtypes.bfloat16).astype(np.float32)
        big = np.isinf(hi) & np.isfinite(w)
        hi[big] = np.copysign(np.float32(_BF16_MAX), w[big])
        lo = (w - hi).astype(ml_dtypes.bfloat16).astype(np.float32)
    lo[~np.isfinite(hi)] = 0.0
    return hi, lo


def product(wt: np.ndarray, x: np.ndarray, order: Order, exact_int: bool) -> np.ndarray:
    """One instruction's product wt @ x [M, N] before PSUM (``wt`` [M, K], ``x`` [K, N]).

    ``exact_int``: int64 operands into an int48 region (exact). Otherwise float32 operands
    (integers widened exactly) and the fp32 product by ``order``; the caller holds BLAS to
    one thread (:func:`run_reference`, the threaded runner).
    """
    if exact_int:
        return np.matmul(wt, x)
    if wt.dtype != np.float32:
        wt, x = wt.astype(np.float32), x.astype(np.float32)
    if order == "fast":
        with np.errstate(invalid="ignore", over="ignore"):
            return np.matmul(wt, x)
    return systolic_sum(np.ascontiguousarray(wt.T), x)


def tile_rect(ins: MatMul | MatmultMx) -> Rect:
    """The PEs a compute instruction uses: array rows = moving partitions, array columns =
    PSUM partitions (seed 003: column m drains into partition m)."""
    return Rect(ins.moving.partition, ins.moving.partitions, ins.dst.partition,
                ins.dst.partitions)


def moving_values(decoded: np.ndarray, ins: MatMul) -> np.ndarray:
    """The decoded moving tile as [K, N] (zero point subtracted): K = partitions x fold."""
    mv = ins.moving
    x = decoded.reshape(-1, mv.dims[-1][1])
    return x - ins.zp_moving if ins.zp_moving else x


def stationary_operand(wt: np.ndarray, ins: MatMul) -> np.ndarray:
    return wt - ins.zp_stationary if ins.zp_stationary else wt


