"""The PE grid of the register-level simulator: its registers and one clock step.

Seed 003's weight-stationary dataflow, vectorised over the PEs (the caller loops over
cycles only). Each :class:`Lane` is one arithmetic kind of the array (float32, or exact
int64 for the integer formats) and fold (1, or 2 contraction rows per PE under DoubleRow);
lanes share the PE grid, and the issue rules keep one MatMul per PE per cycle.

Registers per lane, double-buffered so a shift is one slice copy with no allocation:
``x`` the moving value each PE holds this cycle (it moved one column right since the last
cycle), ``tag`` which MatMul it belongs to (0 = bubble), ``ps`` the partial sum each PE
passes down (row 0 of ``ps`` is a fixed zero: the sum entering the top row), ``w`` the
weight each PE multiplies by. A PE takes the next MatMul's weight when that MatMul's first
value reaches it, so MatMuls with different weights overlap as wavefronts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..dtypes import get_format
from ..errors import SystolicError
from ..geometry import Rect, wavefront_cycles
from ..isa import AccessPattern, CalcFlags, MatMul

__all__ = ["Flight", "Frames", "Lane", "make_flight"]

_NO_SLOTS = 255  # tags are uint8; 0 is the bubble
_EMPTY = np.empty(0, np.int64)


@dataclass
class Frames:
    """Every cycle's registers (``record=True``), arrays indexed [cycle, row, column].

    ``busy`` PEs that did work; ``index`` the program index of the MatMul each PE worked on
    (-1 idle); ``moving`` the moving value X[k, n] it multiplied (a DoubleRow PE's first of
    two) and ``moving_n`` its n; ``psum`` the partial sum it passed down. Per [cycle,
    column]: ``out`` the finished sum that drained into PSUM partition ``column`` (seed 003:
    column m drains into partition m), ``out_n`` its n and ``out_index`` its MatMul (-1:
    nothing drained).
    """

    busy: np.ndarray
    index: np.ndarray
    moving: np.ndarray
    moving_n: np.ndarray
    psum: np.ndarray
    out: np.ndarray
    out_n: np.ndarray
    out_index: np.ndarray

    @classmethod
    def empty(cls, cycles: int, rows: int, cols: int) -> Frames:
        grid, edge = (cycles, rows, cols), (cycles, cols)
        return cls(np.zeros(grid, bool), np.full(grid, -1, np.int32), np.zeros(grid),
                   np.full(grid, -1, np.int32), np.zeros(grid), np.zeros(edge),
                   np.full(edge, -1, np.int32), np.full(edge, -1, np.int32))


@dataclass(eq=False)
class Flight:
    """One MatMul in the array: its tile (rows r0.., columns c0..), schedule and operands."""

    index: int
    dst: AccessPattern
    flags: CalcFlags
    is_int: bool
    fold: int
    start: int
    period: int
    r0: int
    c0: int
    k: int  # PE rows (partitions)
    m: int  # PE columns = PSUM partitions
    n: int
    inj: np.ndarray  # [period*(n-1)+k, fold, k]: the value entering row k at start + d
    w: np.ndarray  # [fold, k, m]
    out: np.ndarray  # [period*(n-1)+m, m]: the bottom row of the tile, cycle by cycle
    res: np.ndarray  # [m, n]: the finished sums, once the last one drained
    planned: int = 0  # start + period*(n-1) + k + m - 1 (cost.matmul_duration)
    end: int = -1  # observed: last MAC cycle + 1, once every sum drained
    tag: int = 0
    # the weights by wavefront: PE flat indices and values for k + m = d at wave[d]:wave[d+1]
    wave: np.ndarray = field(default_factory=lambda: _EMPTY)
    wave_pe: np.ndarray = field(default_factory=lambda: _EMPTY)
    wave_w: np.ndarray = field(default_factory=lambda: _EMPTY)

    @property
    def rect(self) -> Rect:
        """The PEs the MatMul occupies: array rows r0.. (k of them), columns c0.. (m)."""
        return Rect(self.r0, self.k, self.c0, self.m)

    def overlaps(self, other: Flight) -> bool:
        return self.rect.overlaps(other.rect)

    # X[k, n] reaches PE(r0 + k, c0 + m) at start + period*n + k + m (seed 003); these are
    # that cycle minus (k + m) for the first and last n, comparable across tile origins.
    def first_arrival(self) -> int:
        return self.start - self.r0 - self.c0

    def last_arrival(self) -> int:
        return self.start + self.period * (self.n - 1) - self.r0 - self.c0

    def busy_at(self, d: int, extent: int) -> np.ndarray:
        """Offsets j in [0, extent) whose PE works at d cycles after the tile's corner
        (d - j = period * n for some n in [0, N)): along a tile row or column."""
        hi = min(extent - 1, d)
        lo = max(0, d - self.period * (self.n - 1))
        if lo > hi:
            return _EMPTY
        return np.arange(lo + (d - lo) % self.period, hi + 1, self.period)


def make_flight(index: int, ins: MatMul, start: int, period: int, w: np.ndarray,
                x: np.ndarray) -> Flight:
    """A Flight for ``ins`` with decoded weights ``w`` [K, M] and moving ``x`` [K, N]
    (K logical: DoubleRow puts k = 2p + j on PE row p, seed 000)."""
    # exact int64 lanes only into an int48 region (seed 004's cell); anything else, integer
    # operands included, sums in fp32 down the column (seed 000: fp32 PSUM whatever the input)
    is_int = get_format(ins.dst.dtype).is_int
    dtype = np.int64 if is_int else np.float32
    rows, fold = ins.moving.partitions, ins.perf_mode.k_fold
    cols, n = w.shape[1], x.shape[1]
    xf = x.reshape(rows, fold, n).transpose(1, 0, 2).astype(dtype)  # [fold, rows, n]
    inj = np.empty((period * (n - 1) + rows, fold, rows), dtype)  # only X[k, n] is read
    k_idx = np.arange(rows)[:, None]
    d_idx = period * np.arange(n)[None, :] + k_idx  # row k takes X[k, n] at d = p*n + k
    for j in range(fold):
        inj[d_idx, j, np.broadcast_to(k_idx, d_idx.shape)] = xf[j]
    wf = np.ascontiguousarray(w.reshape(rows, fold, cols).transpose(1, 0, 2), dtype=dtype)
    f = Flight(index, ins.dst, ins.flags, is_int, fold, start, period, ins.moving.partition,
               ins.dst.partition, rows, cols, n, inj, wf,
               np.empty((period * (n - 1) + cols, cols), dtype), np.empty(0, dtype))
    f.planned = start + wavefront_cycles(n, rows, cols, period)
    return f


class Lane:
    """The registers of one arithmetic kind and fold, and :meth:`step`, one clock."""

    def __init__(self, rows: int, cols: int, fold: int, dtype: type, record: bool) -> None:
        self.rows, self.cols, self.fold = rows, cols, fold
        self.x: list[np.ndarray] = [np.zeros((fold, rows, cols), dtype) for _ in range(2)]
        self.tag = [np.zeros((rows, cols), np.uint8) for _ in range(2)]
        self.nidx = [np.full((rows, cols), -1, np.int32) for _ in range(2)] if record else []
        self.ps: list[np.ndarray] = [np.zeros((rows + 1, cols), dtype) for _ in range(2)]
        self.w: np.ndarray = np.zeros((fold, rows, cols), dtype)
        self.prod: np.ndarray = np.zeros((fold, rows, cols), dtype)
        self.zero = dtype(0)
        self.cur = 0
        self.flights: list[Flight] = []
        self.free = list(range(_NO_SLOTS, 0, -1))
        self.index_of = np.full(_NO_SLOTS + 1, -1, np.int32)

    def add(self, f: Flight) -> None:
        if not self.free:
            raise SystolicError(f"instruction {f.index}: more than {_NO_SLOTS} MatMuls in "
                                f"flight at once; split the program")
        f.tag = self.free.pop()
        # the weights in the order the first wavefront reaches them (k + m = 0, 1, ...)
        kk, mm = np.divmod(np.arange(f.k * f.m), f.m)
        order = np.argsort(kk + mm, kind="stable")
        f.wave = np.searchsorted((kk + mm)[order], np.arange(f.k + f.m))
        f.wave_pe = ((f.r0 + kk) * self.cols + f.c0 + mm)[order]
        f.wave_w = f.w.reshape(f.fold, -1)[:, order]
        self.index_of[f.tag] = f.index
        self.flights.append(f)

    def active(self, t: int) -> bool:
        # a flight owns cycles start..planned; at planned its last value leaves the tile
        return any(f.start <= t <= f.planned for f in self.flights)

    def next_start(self, t: int) -> int:
        return min((f.start for f in self.flights if f.start > t), default=1 << 62)

    def step(self, t: int, frames: Frames | None) -> tuple[int, int, list[Flight]]:
        """Simulate cycle ``t``: shift, inject, switch weights, MAC, drain.

        Returns (busy PEs, MACs, flights whose last sum drained this cycle).
        """
        for f in [f for f in self.flights if f.planned < t]:
            self.flights.remove(f)
            self.free.append(f.tag)
            f.inj = f.w = f.wave = f.wave_pe = f.wave_w = _EMPTY  # keep memory flat
        live = [f for f in self.flights if f.start <= t]
        a, b = self.cur, 1 - self.cur
        self.cur = b
        x, g, ps_in, ps = self.x[b], self.tag[b], self.ps[a], self.ps[b]
        # moving values move one column right per cycle (seed 003); column 0 takes inputs
        np.copyto(x[:, :, 1:], self.x[a][:, :, :-1])
        x[:, :, 0] = 0
        np.copyto(g[:, 1:], self.tag[a][:, :-1])
        g[:, 0] = 0
        if self.nidx:
            nx = self.nidx[b]
            np.copyto(nx[:, 1:], self.nidx[a][:, :-1])
            nx[:, 0] = -1
        for f in live:
            self._enter(f, t - f.start, x, g)
        # each PE: partial sum from above + weight x input (seed 003), rounded per step
        np.multiply(self.w, x, out=self.prod)
        np.add(ps_in[:-1], self.prod[0], out=ps[1:])
        for j in range(1, self.fold):  # DoubleRow: the second MAC, in k order
            np.add(ps[1:], self.prod[j], out=ps[1:])
        finished = [f for f in live if self._drain(f, t, ps, frames)]
        busy = int(np.count_nonzero(g))
        if frames is not None:
            self._record(t, frames, x, g, ps)
        return busy, busy * self.fold, finished

    def _enter(self, f: Flight, d: int, x: np.ndarray, g: np.ndarray) -> None:
        """Gate values leaving f's tile, inject its skewed inputs, switch its weights."""
        e = f.c0 + f.m
        if e < self.cols:  # the column group ends here: f's values stop
            col = g[f.r0:f.r0 + f.k, e]
            gone = col == f.tag
            if gone.any():
                col[gone] = 0
                x[:, f.r0:f.r0 + f.k, e][:, gone] = 0
        k_hi = min(d, f.k - 1)  # row k takes X[k, n] at d = period*n + k (the skew)
        k_lo = max(0, d - f.period * (f.n - 1))
        k_lo += (d - k_lo) % f.period
        if k_lo <= k_hi:
            sl = slice(k_lo, k_hi + 1, f.period)
            rows = slice(f.r0 + k_lo, f.r0 + k_hi + 1, f.period)
            x[:, rows, f.c0] = f.inj[d, :, sl]
            g[rows, f.c0] = f.tag
            if self.nidx:
                self.nidx[self.cur][rows, f.c0] = (d - np.arange(k_lo, k_hi + 1, f.period)
                                                   ) // f.period
        if d <= f.k + f.m - 2:  # the first value reaches PEs with k + m = d: new weights
            lo, hi = f.wave[d], f.wave[d + 1]
            self.w.reshape(self.fold, -1)[:, f.wave_pe[lo:hi]] = f.wave_w[:, lo:hi]

    def _drain(self, f: Flight, t: int, ps: np.ndarray, frames: Frames | None) -> bool:
        """Restart sums at the tile's top row; take finished sums off its bottom row."""
        d = t - f.start
        if f.r0 > 0:  # the PE above belongs to another tile: this sum starts from zero
            cols = f.c0 + f.busy_at(d, f.m)
            v = self.prod[0, f.r0, cols] + self.zero
            for j in range(1, self.fold):
                v = v + self.prod[j, f.r0, cols]
            ps[f.r0 + 1, cols] = v
        d -= f.k - 1  # column m of the bottom row finishes X[:, n] at d = period*n + m
        if d < 0 or f.end >= 0:
            return False
        # copy the whole bottom row (one slice); the finished sums lie on its diagonal
        np.copyto(f.out[d], ps[f.r0 + f.k, f.c0:f.c0 + f.m])
        if frames is not None:
            ms = f.busy_at(d, f.m)
            ns = (d - ms) // f.period
            frames.out[t, f.c0 + ms] = f.out[d, ms]
            frames.out_n[t, f.c0 + ms] = ns
            frames.out_index[t, f.c0 + ms] = f.index
        if d < f.out.shape[0] - 1:
            return False
        m_idx = np.arange(f.m)[:, None]
        f.res = f.out[f.period * np.arange(f.n)[None, :] + m_idx, m_idx]  # [m, n]
        f.out = f.out[:0]
        f.end = t + 1
        return True

    def _record(self, t: int, frames: Frames, x: np.ndarray, g: np.ndarray,
                ps: np.ndarray) -> None:
        mask = g != 0
        frames.busy[t] |= mask
        frames.index[t][mask] = self.index_of[g[mask]]
        frames.moving[t][mask] = x[0][mask]
        frames.moving_n[t][mask] = self.nidx[self.cur][mask]
        frames.psum[t][mask] = ps[1:][mask]
