"""Behavioural model of the integer PE cell (seed 004, ``rtl/pe.sv``) and of a chain of cells.

Register semantics, per clock edge (seed 004, "Functionality"), for every cell at once:

* ``rst_n == 0``: ``act_out <= 0`` and ``sum_out <= 0``;
* else ``clear == 1``: ``sum_out <= 0`` (the "synchronous accumulator clear" of "Ports"),
  while ``act_out <= act_in`` keeps the activation moving;
* else ``act_out <= act_in`` and
  ``sum_out <= sum_in + sign_extend_48(weight * act_in)``.

Operands are signed 16-bit (INT8 operands are sign-extended before driving, seed 004 "Ports"),
the product is exact in 32 bits, and the 48-bit sum **wraps** as two's complement: the register
keeps the low 48 bits. Wrapping is what a 48-bit adder does and it is a ring homomorphism
(arithmetic modulo 2**48), so a partial sum that wrapped on the way still yields the exact total
whenever the true total fits in 48 bits. With worst-case operands every partial sum is exact for
a depth K of at most ``exact_depth(16, 16) == 2**17 - 1`` (int16 x int16; K = 2**17 overflows at
(-32768)**2 * 2**17 == 2**47) and ``exact_depth(8, 8) == 2**33 - 1`` (int8 x int8).

Values are held in numpy int64; all quantities are plain integers (no units other than bits
and clock edges).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from systolic.errors import FormatError, ShapeError

#: Port widths of the PE, in bits (seed 004, "Ports").
ACT_BITS = 16
WEIGHT_BITS = 16
SUM_BITS = 48

_SUM_MASK = (1 << SUM_BITS) - 1
_SUM_SIGN = 1 << (SUM_BITS - 1)


def int_range(bits: int) -> tuple[int, int]:
    """Inclusive (min, max) of a signed two's-complement integer of ``bits`` bits."""
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def wrap48(x: ArrayLike) -> np.ndarray:
    """Two's-complement wrap of int64 values to 48 bits: keep the low 48 bits, sign-extend bit 47.

    Returns an int64 array in [-2**47, 2**47 - 1]; values already in range come back unchanged.
    """
    v = np.asarray(x, dtype=np.int64)
    # (v & mask) ^ sign - sign sign-extends bit 47 without ever leaving int64 range.
    return ((v & _SUM_MASK) ^ _SUM_SIGN) - _SUM_SIGN


def _wrap48_inplace(v: np.ndarray) -> None:
    """``v[...] = wrap48(v)`` without temporaries (the inner loop of the array models)."""
    np.bitwise_and(v, _SUM_MASK, out=v)
    np.bitwise_xor(v, _SUM_SIGN, out=v)
    np.subtract(v, _SUM_SIGN, out=v)


def exact_depth(act_bits: int, weight_bits: int, sum_bits: int = SUM_BITS) -> int:
    """Largest K such that any K products of signed operands of these widths sum exactly.

    The worst case is K copies of the most negative operand squared, (-2**(a-1)) * (-2**(w-1)),
    which must stay at or below 2**(sum_bits-1) - 1. Gives 2**17 - 1 for 16x16 and 2**33 - 1
    for 8x8 with the 48-bit accumulator.
    """
    worst_product = 1 << (act_bits - 1 + weight_bits - 1)
    return ((1 << (sum_bits - 1)) - 1) // worst_product


def as_operands(x: ArrayLike, name: str, bits: int = ACT_BITS) -> np.ndarray:
    """Validate integer operands that must fit a signed ``bits``-bit port; return int64.

    Raises FormatError for non-integer data or values out of range (INT8 values pass: the
    hardware sign-extends them, seed 004 "Ports").
    """
    a = np.asarray(x)
    if a.size == 0:  # an empty list arrives as float64; its shape is what callers check
        return a.astype(np.int64)
    if a.dtype == np.bool_ or not np.issubdtype(a.dtype, np.integer):
        raise FormatError(f"{name} must be an integer array, got dtype {a.dtype}.")
    lo, hi = int_range(bits)
    if int(a.min()) < lo or int(a.max()) > hi:
        raise FormatError(f"{name} holds values outside the signed {bits}-bit range [{lo}, {hi}].")
    return a.astype(np.int64)


def pe_update(
    act_reg: np.ndarray,
    sum_reg: np.ndarray,
    weight: np.ndarray,
    act_in: np.ndarray,
    sum_in: np.ndarray,
    clear: bool | np.ndarray = False,
    rst_n: bool | np.ndarray = True,
    wrap: bool = True,
) -> None:
    """One clock edge of any number of cells, in place on ``act_reg`` / ``sum_reg``.

    All inputs broadcast to the register shape. ``sum_in`` must not share memory with
    ``sum_reg``; ``act_in`` may be ``act_reg`` itself (already shifted in place) and is
    otherwise copied in. ``wrap=False`` skips the 48-bit wrap, for callers that have proved
    no sum leaves the 48-bit range (then the wrap is the identity).
    """
    np.multiply(weight, act_in, out=sum_reg)
    np.add(sum_reg, sum_in, out=sum_reg)
    if wrap:
        _wrap48_inplace(sum_reg)
    if act_in is not act_reg:
        act_reg[...] = act_in
    # Plain bools skip np.any / np.all, which cost as much as a pass over a 128x128 grid.
    if clear is True or (not isinstance(clear, bool) and np.any(clear)):
        sum_reg[...] = np.where(clear, 0, sum_reg)
    if rst_n is False or (not isinstance(rst_n, bool) and not np.all(rst_n)):
        act_reg[...] = np.where(rst_n, act_reg, 0)
        sum_reg[...] = np.where(rst_n, sum_reg, 0)


@dataclass(frozen=True)
class CellTrace:
    """Register outputs of one cell after each clock edge: ``act_out[t]``, ``sum_out[t]``."""

    act_out: np.ndarray
    sum_out: np.ndarray


class PECell:
    """One PE cell (seed 004): registers ``act_out`` (16 bit) and ``sum_out`` (48 bit).

    Registers start at 0, the value ``rst_n`` gives them.
    """

    def __init__(self) -> None:
        self.act_out = 0
        self.sum_out = 0

    def step(
        self,
        weight: int,
        act_in: int,
        sum_in: int,
        clear: bool = False,
        rst_n: bool = True,
    ) -> tuple[int, int]:
        """Apply one clock edge; return the new ``(act_out, sum_out)``."""
        as_operands(weight, "weight", WEIGHT_BITS)
        as_operands(act_in, "act_in", ACT_BITS)
        as_operands(sum_in, "sum_in", SUM_BITS)
        a = np.array([self.act_out], dtype=np.int64)
        s = np.array([self.sum_out], dtype=np.int64)
        pe_update(a, s, np.array(weight, np.int64), np.array(act_in, np.int64),
                  np.array(sum_in, np.int64), clear, rst_n)
        self.act_out, self.sum_out = int(a[0]), int(s[0])
        return self.act_out, self.sum_out

    def run(
        self,
        weight: ArrayLike,
        act_in: ArrayLike,
        sum_in: ArrayLike,
        clear: ArrayLike,
        rst_n: ArrayLike,
    ) -> CellTrace:
        """Drive per-cycle input vectors (all length T); return the registers after each edge."""
        w = as_operands(weight, "weight", WEIGHT_BITS)
        a = as_operands(act_in, "act_in", ACT_BITS)
        s = as_operands(sum_in, "sum_in", SUM_BITS)
        c = np.asarray(clear, dtype=bool)
        r = np.asarray(rst_n, dtype=bool)
        if not (w.shape == a.shape == s.shape == c.shape == r.shape) or w.ndim != 1:
            raise ShapeError(
                "weight, act_in, sum_in, clear and rst_n must be vectors of one length."
            )
        acts = np.empty_like(a)
        sums = np.empty_like(s)
        for t in range(a.shape[0]):
            acts[t], sums[t] = self.step(int(w[t]), int(a[t]), int(s[t]), bool(c[t]), bool(r[t]))
        return CellTrace(acts, sums)


class PEChain:
    """Cells in a row: ``sum_in`` of cell c is ``sum_out`` of cell c - 1 (seed 004, "Example").

    ``step(act_in=int)`` is the seed's wiring: the activation enters cell 0 and moves one cell
    per edge through ``act_out``, so the sum and its activation travel together and the last
    cell's ``sum_out`` is ``a * sum(weights)`` (the seed's two-cell example). ``step`` with a
    vector drives every cell's ``act_in`` from outside instead, which is one column of the
    weight-stationary array; ``dot`` uses that, skewing ``x[c]`` to cycle c, to compute
    ``weights . x``.
    """

    def __init__(self, weights: ArrayLike) -> None:
        w = as_operands(weights, "weights", WEIGHT_BITS)
        if w.ndim != 1 or w.size == 0:
            raise ShapeError("A chain needs a non-empty vector of weights, one per cell.")
        self.weights = w
        self.act_out = np.zeros_like(w)
        self.sum_out = np.zeros_like(w)

    def __len__(self) -> int:
        return int(self.weights.size)

    def step(
        self,
        act_in: int | ArrayLike,
        sum_in: int = 0,
        clear: bool = False,
        rst_n: bool = True,
    ) -> None:
        """One clock edge. ``act_in``: an int entering cell 0, or one value per cell.

        ``sum_in`` feeds cell 0 (0 in seed 004; nonzero continues an earlier partial sum).
        """
        a = as_operands(act_in, "act_in", ACT_BITS)
        if a.ndim == 0:
            a = np.concatenate(([a], self.act_out[:-1]))
        elif a.shape != self.weights.shape:
            raise ShapeError(f"act_in needs one value per cell ({len(self)}), got {a.shape}.")
        as_operands(sum_in, "sum_in", SUM_BITS)
        s = np.concatenate(([sum_in], self.sum_out[:-1]))
        pe_update(self.act_out, self.sum_out, self.weights, a, s, clear, rst_n)

    def dot(self, x: ArrayLike) -> tuple[np.ndarray, int]:
        """Dot products ``weights . x[:, n]`` for x of shape [C] or [C, N], with their cycles.

        x[c, n] drives cell c at cycle n + c; the last cell's ``sum_out`` after edge
        n + C - 1 is result n. Returns (int64 results of shape [] or [N], clock edges used =
        N + C - 1). Registers are reset first.
        """
        xv = as_operands(x, "x", ACT_BITS)
        single = xv.ndim == 1
        x2 = xv[:, None] if single else xv
        n_cells = len(self)
        if x2.ndim != 2 or x2.shape[0] != n_cells:
            raise ShapeError(f"x must have {n_cells} rows, one per cell, got shape {xv.shape}.")
        n = x2.shape[1]
        cycles = n + n_cells - 1
        self.act_out[:] = 0
        self.sum_out[:] = 0
        cells = np.arange(n_cells)
        out = np.empty(n, dtype=np.int64)
        for t in range(cycles):
            col = t - cells
            ok = (col >= 0) & (col < n)
            feed = np.where(ok, x2[cells, np.clip(col, 0, n - 1)], 0)
            self.step(feed)
            if t >= n_cells - 1:
                out[t - n_cells + 1] = self.sum_out[-1]
        return (out.reshape(()) if single else out), cycles
