"""Geometry written once: half-open rectangles and intervals, and the wavefront length.

Every executor, the verifier and the compiler ask the same questions (do two PSUM regions
overlap? do two latched tiles share a PE? what is the union of these busy intervals?), so
the answers live here, at the bottom of the layering: this module imports nothing of the
package.

A :class:`Rect` is half-open on both axes: rows ``[row, row + rows)`` and columns (or bytes)
``[col, col + cols)``. For a PSUM or SBUF region the rows are partitions and the columns are
bytes of one partition; for a latched weight tile they are PE rows and PE columns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Rect", "interval_union", "union_pairs", "wavefront_cycles"]


@dataclass(frozen=True, slots=True)
class Rect:
    """Rows ``[row, row + rows)`` x columns ``[col, col + cols)``, both half-open."""

    row: int
    rows: int
    col: int
    cols: int

    @classmethod
    def spans(cls, row_lo: int, row_hi: int, col_lo: int, col_hi: int) -> Rect:
        """From half-open bounds [row_lo, row_hi) x [col_lo, col_hi)."""
        return cls(row_lo, row_hi - row_lo, col_lo, col_hi - col_lo)

    @property
    def row_end(self) -> int:
        return self.row + self.rows

    @property
    def col_end(self) -> int:
        return self.col + self.cols

    def overlaps(self, other: Rect) -> bool:
        """True when the two rectangles share at least one cell (touching edges do not)."""
        return (self.row < other.row_end and other.row < self.row_end
                and self.col < other.col_end and other.col < self.col_end)

    def contains(self, other: Rect) -> bool:
        return (self.row <= other.row and other.row_end <= self.row_end
                and self.col <= other.col and other.col_end <= self.col_end)


def interval_union(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint, sorted union of the half-open intervals [lo[i], hi[i]).

    Touching intervals ([0, 2) and [2, 5)) merge into one. Empty input gives empty arrays.
    """
    lo = np.asarray(lo)
    hi = np.asarray(hi)
    if len(lo) == 0:
        return lo, hi
    order = np.argsort(lo, kind="stable")
    s, e = lo[order], np.maximum.accumulate(hi[order])
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > e[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s) - 1)
    return s[first], e[last]


def union_pairs(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """:func:`interval_union` of ``(lo, hi)`` pairs, in plain Python (sorts ``pairs`` in
    place): a few dozen intervals cost a tenth of the numpy calls' fixed overhead."""
    if not pairs:
        return []
    pairs.sort()
    out = []
    s, e = pairs[0]
    for lo, hi in pairs:
        if lo > e:
            out.append((s, e))
            s, e = lo, hi
        elif hi > e:
            e = hi
    out.append((s, e))
    return out


def wavefront_cycles(n: int, k: int, m: int, period: int = 1) -> int:
    """Cycles one instruction takes on an idle weight-stationary array (seed 003).

    X[k, n] reaches PE(k, m) at cycle ``period*n + k + m``; the last MAC is at
    ``period*(N-1) + (K-1) + (M-1)``, so the instruction spans ``period*(N-1) + K + M - 1``
    cycles: N + K + M - 2 steps after the first, at one column per cycle.
    """
    return period * (n - 1) + k + m - 1
