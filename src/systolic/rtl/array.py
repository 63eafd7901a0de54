"""Arrays built from the PE cell: a 2-D weight-stationary systolic array and the adder-tree array.

Seed 004 ("Functionality", last paragraph) contrasts two ways to build the 256 MACs of a
16x16 array: a systolic arrangement of PE cells that pass activations and partial sums to their
neighbours every clock (short wires, one multiply + one add per stage, but fill/drain latency),
and the fully parallel array the NPU actually uses, where every column sums its products in one
combinational adder tree (one cycle, but a tree of log2(rows) adders and a broadcast of every
activation to all columns). Both are modelled here at the clock-edge level with numpy int64,
vectorised over all cells; the Python loop runs over clock edges only.

Geometry of the weight-stationary array (DESIGN.md terms): PE(k, m) holds ``stationary[k, m]``;
row k receives the moving values ``X[k, n]`` at its left edge, activations move right along the
row (``act_in`` of PE(k, m) is ``act_out`` of PE(k, m-1)), partial sums move down the column
(``sum_in`` of PE(k, m) is ``sum_out`` of PE(k-1, m); the top row takes ``sum_in`` from outside,
0 for a plain product), and ``sum_out`` of the bottom cell of column m is output m.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from systolic.errors import ShapeError
from systolic.rtl.cell import (
    ACT_BITS,
    SUM_BITS,
    WEIGHT_BITS,
    as_operands,
    int_range,
    pe_update,
    wrap48,
)


@dataclass(frozen=True)
class ArrayStimulus:
    """Per-cycle inputs of an array's edge ports, T cycles.

    act_in: [T, rows] values entering column 0 of each row (16-bit); sum_in: [T, cols] values
    entering row 0 of each column (48-bit); clear, rst_n: [T] bool, broadcast to every cell.
    w_shift: [T] bool and w_in: [T, cols] (16-bit), the weight-load port: on an edge with
    w_shift high every weight register takes the one above it and row 0 takes w_in, so
    ``rows`` such edges load a whole tile, one row per cycle (None: no weight loading).
    """

    act_in: np.ndarray
    sum_in: np.ndarray
    clear: np.ndarray
    rst_n: np.ndarray
    w_in: np.ndarray | None = None
    w_shift: np.ndarray | None = None

    @property
    def cycles(self) -> int:
        return int(self.act_in.shape[0])

    def weight_port(self, cols: int) -> tuple[np.ndarray, np.ndarray]:
        """(w_in [T, cols], w_shift [T]) with zeros / False where the stimulus has none."""
        t = self.cycles
        w_in = np.zeros((t, cols), np.int64) if self.w_in is None else np.asarray(self.w_in)
        shift = np.zeros(t, bool) if self.w_shift is None else np.asarray(self.w_shift, bool)
        if w_in.shape != (t, cols) or shift.shape != (t,):
            raise ShapeError(f"stimulus w_in must be [T, {cols}] and w_shift [T], got "
                             f"{w_in.shape} and {shift.shape}.")
        return w_in, shift

    @classmethod
    def load_weights(cls, stationary: ArrayLike) -> ArrayStimulus:
        """``rows`` edges that shift the tile [rows, cols] into the weight registers: the
        last row enters first and is pushed down to the bottom, row 0 enters last."""
        w = as_operands(stationary, "stationary", WEIGHT_BITS)
        if w.ndim != 2:
            raise ShapeError(f"stationary must be 2-D [rows, cols], got {w.shape}.")
        rows, cols = w.shape
        return cls(
            act_in=np.zeros((rows, rows), np.int64), sum_in=np.zeros((rows, cols), np.int64),
            clear=np.zeros(rows, bool), rst_n=np.ones(rows, bool),
            w_in=w[::-1].copy(), w_shift=np.ones(rows, bool),
        )

    def then(self, other: ArrayStimulus) -> ArrayStimulus:
        """This stimulus followed by ``other`` (for the same array)."""
        cols = self.sum_in.shape[1]
        w0, s0 = self.weight_port(cols)
        w1, s1 = other.weight_port(cols)
        return ArrayStimulus(
            np.concatenate([self.act_in, other.act_in]),
            np.concatenate([self.sum_in, other.sum_in]),
            np.concatenate([self.clear, other.clear]),
            np.concatenate([self.rst_n, other.rst_n]),
            np.concatenate([w0, w1]), np.concatenate([s0, s1]),
        )

    @classmethod
    def random(
        cls,
        rows: int,
        cols: int,
        cycles: int,
        rng: np.random.Generator,
        *,
        p_clear: float = 0.1,
        p_reset: float = 0.05,
        p_shift: float = 0.05,
    ) -> ArrayStimulus:
        """Uniform operands over the full port ranges, so 48-bit sums wrap often; the
        weights shift (a row enters at the top) on about ``p_shift`` of the edges."""
        alo, ahi = int_range(ACT_BITS)
        slo, shi = int_range(SUM_BITS)
        wlo, whi = int_range(WEIGHT_BITS)
        return cls(
            act_in=rng.integers(alo, ahi, size=(cycles, rows), endpoint=True),
            sum_in=rng.integers(slo, shi, size=(cycles, cols), endpoint=True),
            clear=rng.random(cycles) < p_clear,
            rst_n=rng.random(cycles) >= p_reset,
            w_in=rng.integers(wlo, whi, size=(cycles, cols), endpoint=True),
            w_shift=rng.random(cycles) < p_shift,
        )


@dataclass(frozen=True)
class ArrayTrace:
    """Every cell's registers after each clock edge: act_out, sum_out of shape [T, rows, cols]."""

    act_out: np.ndarray
    sum_out: np.ndarray


def _drive_weights(weights: np.ndarray, stationary: ArrayLike) -> None:
    """Write a [K, M] weight tile into an array's [rows, cols] weight registers, zeroing the
    unused cells; a tile that does not fit is refused in one sentence."""
    w = as_operands(stationary, "stationary", WEIGHT_BITS)
    rows, cols = weights.shape
    if w.ndim != 2 or w.shape[0] > rows or w.shape[1] > cols:
        raise ShapeError(f"stationary {w.shape} does not fit a {rows} x {cols} array.")
    weights[:] = 0
    weights[: w.shape[0], : w.shape[1]] = w


def _check_matmul(
    rows: int, cols: int, stationary: ArrayLike, moving: ArrayLike, psum_in: ArrayLike | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate ``stationary.T @ moving (+ psum_in)`` operands for a rows x cols array."""
    w = as_operands(stationary, "stationary", WEIGHT_BITS)
    x = as_operands(moving, "moving", ACT_BITS)
    if w.ndim != 2 or x.ndim != 2:
        raise ShapeError(f"stationary and moving must be 2-D, got {w.shape} and {x.shape}.")
    k, m = w.shape
    if x.shape[0] != k:
        raise ShapeError(f"stationary is [K={k}, M={m}] but moving has {x.shape[0]} rows, not K.")
    if k > rows or m > cols:
        raise ShapeError(f"stationary [{k}, {m}] does not fit a {rows} x {cols} array.")
    n = x.shape[1]
    p = np.zeros((m, n), np.int64) if psum_in is None else as_operands(psum_in, "psum_in", SUM_BITS)
    if p.shape != (m, n):
        raise ShapeError(f"psum_in must have shape [M={m}, N={n}], got {p.shape}.")
    return w, x, p


def _check_size(rows: int, cols: int) -> None:
    if rows < 1 or cols < 1:
        raise ShapeError(f"An array needs at least one row and one column, got {rows} x {cols}.")


class WeightStationaryArray:
    """A rows x cols grid of PE cells, stepped one clock edge at a time.

    State: ``weights`` (the weight registers) and the ``act_out`` / ``sum_out`` registers
    of every cell, all int64 arrays of shape [rows, cols]. ``cycles`` is the number of clock
    edges the last ``matmul`` took (weights already loaded).

    The weights enter as in a real weight-stationary array, one row per cycle down the
    columns (``w_in`` / ``w_shift``, see :class:`ArrayStimulus`): a tile takes ``rows``
    edges to load. ``load`` puts a tile in place at once (what those edges leave behind);
    ``step`` and ``run`` model the shift edge by edge. ``rst_n`` does not clear the weights
    (they are configuration, loaded explicitly; seed 004's reset names the pipeline
    registers), and an edge computes with the weights held before it.
    """

    def __init__(self, rows: int, cols: int) -> None:
        _check_size(rows, cols)
        self.rows = rows
        self.cols = cols
        self.weights = np.zeros((rows, cols), np.int64)
        self.act_out = np.zeros((rows, cols), np.int64)
        self.sum_out = np.zeros((rows, cols), np.int64)
        self.cycles = 0
        # Scratch for the shifted neighbour values, reused every edge.
        self._act_in = np.zeros((rows, cols), np.int64)
        self._sum_in = np.zeros((rows, cols), np.int64)

    def load(self, stationary: ArrayLike) -> None:
        """Put a tile in the weight registers: PE(k, m) gets stationary[k, m]; unused cells
        get 0. The same state as ``rows`` edges of :meth:`ArrayStimulus.load_weights`."""
        _drive_weights(self.weights, stationary)

    def reset(self) -> None:
        """Clear every register, as one edge with ``rst_n`` low does."""
        self.act_out[:] = 0
        self.sum_out[:] = 0

    def step(
        self,
        act_in: ArrayLike,
        sum_in: ArrayLike | None = None,
        clear: bool = False,
        rst_n: bool = True,
        w_in: ArrayLike | None = None,
        w_shift: bool = False,
    ) -> None:
        """One clock edge. act_in: [rows] left-edge activations; sum_in: [cols] top sums or None;
        with ``w_shift`` the weights move down a row and row 0 takes ``w_in`` [cols].

        Operands are trusted here (the hot loop); ``run`` and ``matmul`` validate them.
        ``act_out`` is a new array after every edge: read it after the step, not before.
        """
        self._edge(act_in, sum_in, clear, rst_n, wrap=True)
        if w_shift:  # after the edge's products: they used the weights held before it
            self.weights[1:] = self.weights[:-1].copy()
            self.weights[0] = 0 if w_in is None else w_in

    def _edge(
        self, act_in: ArrayLike, sum_in: ArrayLike | None, clear: bool, rst_n: bool, wrap: bool
    ) -> None:
        # Shift the activations into the spare grid and swap it in: no second copy.
        a = self._act_in
        a[:, 1:] = self.act_out[:, :-1]
        a[:, 0] = act_in
        self._act_in, self.act_out = self.act_out, a
        s = self._sum_in
        s[1:] = self.sum_out[:-1]
        s[0] = 0 if sum_in is None else sum_in
        pe_update(self.act_out, self.sum_out, self.weights, a, s, clear, rst_n, wrap)

    def run(self, stimulus: ArrayStimulus) -> ArrayTrace:
        """Apply a stimulus from the current state; return every register after every edge."""
        a = as_operands(stimulus.act_in, "act_in", ACT_BITS)
        s = as_operands(stimulus.sum_in, "sum_in", SUM_BITS)
        t = a.shape[0]
        if a.shape != (t, self.rows) or s.shape != (t, self.cols):
            raise ShapeError(
                f"stimulus act_in must be [T, {self.rows}] and sum_in [T, {self.cols}], "
                f"got {a.shape} and {s.shape}."
            )
        w_in, shift = stimulus.weight_port(self.cols)
        w_in = as_operands(w_in, "w_in", WEIGHT_BITS)
        acts = np.empty((t, self.rows, self.cols), np.int64)
        sums = np.empty_like(acts)
        for i in range(t):
            self.step(a[i], s[i], bool(stimulus.clear[i]), bool(stimulus.rst_n[i]),
                      w_in[i], bool(shift[i]))
            acts[i] = self.act_out
            sums[i] = self.sum_out
        return ArrayTrace(acts, sums)

    def latency(self, m: int, n: int) -> int:
        """Clock edges for an [K, M] x [K, N] product: rows + M + N - 2.

        Output (m, n) leaves the bottom of column m after edge n + m + rows - 1 (0-based): the
        moving column n enters row k at edge n + k (the input skew) and reaches column m m
        edges later, where the partial sum from row k - 1 meets it.
        """
        return 0 if n == 0 or m == 0 else self.rows + m + n - 2

    def matmul(
        self, stationary: ArrayLike, moving: ArrayLike, psum_in: ArrayLike | None = None
    ) -> np.ndarray:
        """``stationary.T @ moving (+ psum_in)`` through the cell array, int64 [M, N].

        stationary [K, M] and moving [K, N] are signed 16-bit integers with K <= rows,
        M <= cols; psum_in [M, N] (48-bit) enters the top of the columns, so a product can
        continue an earlier partial sum. Every cell wraps at 48 bits. Sets ``cycles``.
        """
        w, x, p = _check_matmul(self.rows, self.cols, stationary, moving, psum_in)
        k, m = w.shape
        n = x.shape[1]
        self.load(w)
        self.reset()
        self.cycles = cycles = self.latency(m, n)
        if cycles == 0:
            return wrap48(p)
        # Skewed input streams (seed 004's chain, made 2-D): X[k, n] enters row k at edge
        # n + k, and psum_in[m, n] enters column m at edge n + m, in step with X[0, n].
        kk, nk = np.meshgrid(np.arange(k), np.arange(n), indexing="ij")
        feed = np.zeros((cycles, self.rows), np.int64)
        feed[nk + kk, kk] = x
        mm, nm = np.meshgrid(np.arange(m), np.arange(n), indexing="ij")
        top = np.zeros((cycles, self.cols), np.int64)
        top[nm + mm, mm] = p
        # Every register holds psum_in plus at most k products, so when that bound fits in
        # 48 bits the per-cell wrap is the identity and the hot loop may skip it, bit-exact.
        bound = int(np.abs(p).max(initial=0)) + k * int(np.abs(w).max(initial=0)) * int(
            np.abs(x).max(initial=0)
        )
        wrap = bound > (1 << (SUM_BITS - 1)) - 1
        bottom = np.empty((cycles, self.cols), np.int64)
        for t in range(cycles):
            self._edge(feed[t], top[t], False, True, wrap)
            bottom[t] = self.sum_out[-1]
        return bottom[nm + mm + self.rows - 1, mm]


def _tree_sum(products: np.ndarray) -> tuple[np.ndarray, int]:
    """Sum over axis 0 by a balanced binary adder tree; return (sums, number of adder levels).

    Each level adds neighbouring pairs (an odd one out passes to the next level), as the
    combinational tree of seed 004's npu.sv would. Node widths grow by one bit per level, so
    the tree itself never overflows (32 + levels <= 48 bits for up to 2**16 rows).
    """
    p = products
    levels = 0
    while p.shape[0] > 1:
        if p.shape[0] % 2:
            p = np.concatenate([p, np.zeros_like(p[:1])])
        p = p[0::2] + p[1::2]
        levels += 1
    return p[0], levels


class AdderTreeArray:
    """The fully parallel array (seed 004: npu.sv's 16x16 = 256 MACs), one dot product per cycle.

    Each clock edge takes one moving column x [rows]; all rows x cols products are formed at
    once, each column sums its rows through an adder tree, adds ``sum_in`` and the 48-bit
    output register ``sum_out`` [cols] latches the wrapped result: latency 1 edge.
    """

    def __init__(self, rows: int = 16, cols: int = 16) -> None:
        _check_size(rows, cols)
        self.rows = rows
        self.cols = cols
        self.weights = np.zeros((rows, cols), np.int64)
        self.sum_out = np.zeros(cols, np.int64)
        self.cycles = 0
        self.adder_levels = int(np.ceil(np.log2(rows))) if rows > 1 else 0

    def load(self, stationary: ArrayLike) -> None:
        """Drive the weight inputs; unused multipliers get 0."""
        _drive_weights(self.weights, stationary)

    def step(self, x: ArrayLike, sum_in: ArrayLike | None = None) -> np.ndarray:
        """One clock edge with moving column x [rows]; return the new ``sum_out`` [cols]."""
        xv = as_operands(x, "x", ACT_BITS)
        if xv.shape != (self.rows,):
            raise ShapeError(f"x must have {self.rows} values, one per row, got {xv.shape}.")
        total, _ = _tree_sum(self.weights * xv[:, None])
        self.sum_out = wrap48(total + (0 if sum_in is None else np.asarray(sum_in, np.int64)))
        return self.sum_out

    def matmul(
        self,
        stationary: ArrayLike,
        moving: ArrayLike,
        psum_in: ArrayLike | None = None,
        *,
        chunk: int = 32,
    ) -> np.ndarray:
        """``stationary.T @ moving (+ psum_in)``, int64 [M, N], one column per edge.

        Same operands and wrap as ``WeightStationaryArray.matmul``; ``cycles`` becomes N. The
        array keeps no state between edges except its output register, so ``chunk`` edges are
        evaluated together (memory rows * cols * chunk * 8 bytes) with identical results.
        """
        w, x, p = _check_matmul(self.rows, self.cols, stationary, moving, psum_in)
        k, m = w.shape
        n = x.shape[1]
        self.load(w)
        self.cycles = n
        out = np.empty((m, n), np.int64)
        wk = self.weights[:k, :m]
        for c0 in range(0, n, chunk):
            cols = slice(c0, min(c0 + chunk, n))
            total, _ = _tree_sum(wk[:, :, None] * x[:, None, cols])
            out[:, cols] = wrap48(total + p[:, cols])
        if n:
            self.sum_out[:] = 0
            self.sum_out[:m] = out[:, -1]
        return out


@dataclass(frozen=True)
class ArrayCost:
    """Area and latency proxies of one array style (counts, bits and clock edges).

    multipliers / adders: 16x16 multipliers and adders of any width; register_bits: pipeline
    flip-flops besides the weight registers both styles need; adders_in_path: adders after
    the multiplier on the critical path in one clock; act_fanout: loads each activation
    wire drives; fill_drain: edges beyond N to stream N moving columns through all columns.
    """

    style: Literal["systolic", "adder_tree"]
    rows: int
    cols: int
    multipliers: int
    adders: int
    register_bits: int
    adders_in_path: int
    act_fanout: int
    fill_drain: int

    def cycles(self, n: int) -> int:
        """Clock edges to stream n moving columns through a full-width product."""
        return n + self.fill_drain if n else 0


def array_cost(style: Literal["systolic", "adder_tree"], rows: int, cols: int) -> ArrayCost:
    """The trade-off of seed 004's last paragraph as numbers for a rows x cols array."""
    _check_size(rows, cols)
    cells = rows * cols
    if style == "systolic":
        # Per cell: one multiplier, one 48-bit adder, registers act_out (16) + sum_out (48).
        return ArrayCost(
            style, rows, cols, cells, cells, cells * (ACT_BITS + SUM_BITS), 1, 1, rows + cols - 2
        )
    if style == "adder_tree":
        levels = int(np.ceil(np.log2(rows))) if rows > 1 else 0
        # Per column: rows - 1 tree adders plus the sum_in adder; a 48-bit output register.
        return ArrayCost(style, rows, cols, cells, cells, cols * SUM_BITS, levels + 1, cols, 0)
    raise ShapeError(f"Unknown array style {style!r}: use 'systolic' or 'adder_tree'.")
