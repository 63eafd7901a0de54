"""Independent references for the tests: float64 products and fp32 error bounds."""

from __future__ import annotations

import numpy as np

U32 = 2.0**-24  # unit roundoff of fp32


def ref64(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) @ b.astype(np.float64)


def fp32_bound(a: np.ndarray, b: np.ndarray, extra_rel: float = 0.0) -> np.ndarray:
    """Elementwise bound on |fl32(a @ b) - a @ b| for any summation order: gamma_K times
    sum |a||b| (Higham, Accuracy and Stability, eq. 3.5), plus an optional relative term."""
    k = a.shape[1]
    gamma = 2 * k * U32 / (1 - 2 * k * U32)
    mag = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    return (gamma + extra_rel) * mag + 1e-30
