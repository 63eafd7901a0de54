"""What the value executors share: the machine state and the memory helpers.

The one executor interface (:class:`Executor`, :class:`Run`) is :mod:`systolic.executor`,
re-exported here. :class:`MachineState` is the explicit state the value executors share:
the memories and the weight tiles latched in the array. Instruction handlers are
functions of ``(state, instruction)`` (``systolic.sim.functional.HANDLERS``), so an
executor or a handler written elsewhere never reaches into another object's attributes.

This module imports nothing of the executors (it is the layer below them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from ..arch import Arch
from ..dtypes import encode, encode_into, get_format
from ..errors import SystolicError
from ..executor import Executor, Run
from ..geometry import Rect
from ..isa import AccessPattern, CalcFlags
from ..memory import Memory

__all__ = ["Executor", "Latched", "MachineState", "Order", "Run", "apply_psum", "dram_span",
           "read_dram", "wrap48", "write_dram"]

Order = Literal["fast", "systolic"]
_MASK48 = (1 << 48) - 1
_SIGN48 = 1 << 47
# Memory.view checks bounds and builds a strided view (~12 us); a run asks for the same few
# PSUM and SBUF patterns thousands of times, so views are kept, up to this many.
_VIEW_CACHE = 4096


def wrap48(x: np.ndarray) -> np.ndarray:
    """Two's complement wrap of int64 values to 48 bits (seed 004's INT48 accumulator)."""
    x = np.asarray(x, dtype=np.int64)
    return ((x + _SIGN48) & _MASK48) - _SIGN48


@dataclass(eq=False, slots=True)
class Latched:
    """One weight tile latched in the array: ``values`` decoded [K, M] (float32, int64 for
    integers); ``wt`` the same transposed and C-contiguous [M, K] (one BLAS call without a
    strided operand, ~10x faster here); ``mx`` the MX decomposition when an LdWeightMx
    latched it (:class:`systolic.sim.functional_mx.MxOperand`), else None; ``bound`` the
    largest magnitude in ``wt`` once the threaded runner has needed it (None before: it
    decides whether a product is surely finite, :mod:`systolic.sim.blas`)."""

    values: np.ndarray
    wt: np.ndarray
    mx: object | None = None
    bound: float | None = None


class MachineState:
    """The memories and the latched weight tiles: all the state instruction handlers touch.

    ``order`` is the accumulation order MatMul handlers use (the functional simulator's
    module docstring defines both).
    """

    def __init__(self, arch: Arch, memory: Memory, order: Order = "fast") -> None:
        self.arch = arch
        self.memory = memory
        self.order: Order = order
        # latched tiles by the PEs they occupy: rows = array rows, cols = array columns
        self.tiles: dict[Rect, Latched] = {}
        self._views: dict[AccessPattern, np.ndarray] = {}
        # engine accumulation registers by engine name ("vector": one fp32 per partition,
        # nki.isa.select_reduce / range_select reduce_cmd; sim/functional_select.py)
        self.accumulators: dict[str, np.ndarray] = {}

    def view(self, ap: AccessPattern) -> np.ndarray:
        """``memory.view(ap)``, kept (a view of a buffer that never moves stays valid)."""
        v = self._views.get(ap)
        if v is None:
            if len(self._views) >= _VIEW_CACHE:
                self._views.clear()
            v = self._views[ap] = self.memory.view(ap)
        return v

    def latch(self, rect: Rect, values: np.ndarray, mx: object | None = None) -> Latched:
        """Latch decoded weights [K, M] over ``rect``, evicting every tile it overlaps (a
        later load over the same PEs replaces what they held)."""
        return self.latch_tile(rect, Latched(values, np.ascontiguousarray(values.T), mx))

    def latch_tile(self, rect: Rect, tile: Latched) -> Latched:
        """Latch an already decoded tile over ``rect`` (evicting as :meth:`latch` does)."""
        for key in [k for k in self.tiles if k.overlaps(rect)]:
            del self.tiles[key]
        self.tiles[rect] = tile
        return tile

    def tile(self, rect: Rect) -> Latched:
        """The tile latched exactly over ``rect``; a compute instruction needs one."""
        got = self.tiles.get(rect)
        if got is None:
            raise SystolicError(f"no weight tile is latched at array rows {rect.row}.."
                                f"{rect.row_end - 1}, columns {rect.col}..{rect.col_end - 1}; "
                                f"run verify() on the Program")
        return got

    def accumulate(self, dst: AccessPattern, flags: CalcFlags, res: np.ndarray) -> None:
        """START writes ``res`` into the PSUM region; anything else adds it (one fp32 rounding
        per add, or the INT48 two's complement wrap for an int48 region)."""
        apply_psum(self.view(dst), flags, res)


def apply_psum(view: np.ndarray, flags: CalcFlags, res: np.ndarray) -> None:
    """The PSUM update of one compute instruction on the region's ``view``."""
    res = res.reshape(view.shape)
    if view.dtype == np.int64:
        view[...] = wrap48(res if CalcFlags.START in flags else view + res)
    elif view.dtype != np.float32:
        # a bf16 / fp16 region (dtypes.accumulator_formats): the fp32 sum, of the product
        # alone (START) or of the stored value and the product, rounded once (RNE) as it is
        # written; an fp32 sum past the format's range is inf, as fp32 hardware's is
        with np.errstate(invalid="ignore", over="ignore"):
            total = res if CalcFlags.START in flags else view.astype(np.float32) + res
            view[...] = total.astype(view.dtype)
    elif CalcFlags.START in flags:
        view[...] = res
    else:
        # IEEE specials propagate as fp32 hardware's do (inf + -inf = NaN): not a warning
        with np.errstate(invalid="ignore", over="ignore"):
            view += res


def write_dram(memory: Memory, offset: int, values: np.ndarray, dtype: str) -> None:
    """Encode ``values`` to ``dtype`` and store them contiguously at byte ``offset``.

    Float32 values that surely encode (finite and in range:
    :func:`~systolic.dtypes.encode_into`) are cast straight into device memory: 1.8 ms for
    a 2048^2 bf16 operand, against 3.3 ms on the path below. Otherwise a large operand is
    encoded in row blocks of about 1 MiB straight into device memory: encode is
    elementwise, so the bytes are the same, and its temporaries (magnitudes, overflow
    masks, the rounded copy) stay small and in cache instead of several full-size fresh
    arrays. A block that fails encodes the whole operand again, so the error is the
    one a single call gives (it names the worst value of the whole operand), and device
    memory is left as it was."""
    arr = np.asarray(values)
    f = get_format(dtype)
    size = arr.size * f.container_bytes
    if offset < 0 or offset + size > memory.dram.size:
        raise SystolicError(f"{size} bytes at {offset:#x} do not fit device memory "
                            f"of {memory.dram.size} bytes")
    if f.storage.itemsize == f.container_bytes and arr.dtype == np.float32 and encode_into(
            arr, f, memory.dram[offset:offset + size].view(f.storage).reshape(arr.shape)):
        return  # ordinary float32 values: cast straight into device memory, nothing to undo
    row = arr.size // arr.shape[0] if arr.ndim > 1 and arr.shape[0] else 0
    rows = max(1, _BLOCK_BYTES // max(1, row * 4))
    if not row or arr.shape[0] <= rows or encode(arr[:1], dtype).nbytes != row * \
            f.container_bytes:  # small, or a format whose stored size is not per element
        _put_encoded(memory, offset, arr, dtype)
        return
    step = row * f.container_bytes
    region = memory.dram[offset:offset + size]
    old = None if not region.any() else region.copy()  # fresh memory is zeros: no copy
    try:
        for r in range(0, arr.shape[0], rows):
            _put_encoded(memory, offset + r * step, arr[r:r + rows], dtype)
    except SystolicError:
        region[...] = 0 if old is None else old  # nothing half-written
        _put_encoded(memory, offset, arr, dtype)  # raises the whole operand's error
        raise


_BLOCK_BYTES = 1 << 20  # float32 bytes of input per encoded block


def _put_encoded(memory: Memory, offset: int, values: np.ndarray, dtype: str) -> None:
    raw = np.ascontiguousarray(encode(values, dtype)).reshape(-1).view(np.uint8)
    if offset < 0 or offset + raw.size > memory.dram.size:
        raise SystolicError(f"{raw.size} bytes at {offset:#x} do not fit device memory "
                            f"of {memory.dram.size} bytes")
    memory.dram[offset:offset + raw.size] = raw


def read_dram(memory: Memory, offset: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """A view of ``shape`` ``dtype`` values stored contiguously at byte ``offset``."""
    f = get_format(dtype)
    count = int(np.prod(shape))
    raw = memory.dram[offset:offset + count * f.container_bytes]
    return raw.view(f.storage).reshape(shape)


def dram_span(ap: AccessPattern) -> tuple[int, int]:
    """The device-memory bytes [lo, hi) a DRAM pattern touches (rows at partition_step)."""
    lo, hi = ap.free_bytes_span
    ext = ap.partition_step * (ap.partitions - 1)
    return lo + min(0, ext), hi + max(0, ext)


def dram_rows_overlap(a: AccessPattern, b: AccessPattern) -> bool:
    """Whether two device-memory patterns may share a byte, row by row: each partition p of
    a pattern touches bytes inside ``free_bytes_span + p * partition_step`` only, so two
    patterns whose rows' spans are disjoint share none (the tiles of one output row band,
    side by side in C, do not; their :func:`dram_span` hulls do). Never False where they
    share a byte; True where they share a span but maybe no byte (a strided pattern)."""
    a0, a1 = dram_span(a)
    b0, b1 = dram_span(b)
    if not (a0 < b1 and b0 < a1):
        return False
    (alo, ahi), (blo, bhi) = a.free_bytes_span, b.free_bytes_span
    step = a.partition_step
    if step == b.partition_step:  # the tiles of one matrix: closed form, no arrays
        return _rows_meet(step, a.partitions, b.partitions, blo - ahi, bhi - alo)
    sa = alo + step * np.arange(a.partitions, dtype=np.int64)
    order = np.argsort(sa, kind="stable")
    sa = sa[order]
    top = np.maximum.accumulate(sa + (ahi - alo))  # the furthest end of a's rows so far
    sb = blo + b.partition_step * np.arange(b.partitions, dtype=np.int64)
    # for each row of b, the last row of a starting before b's row ends: they overlap iff
    # some row of a up to there ends after b's row starts
    idx = np.searchsorted(sa, sb + (bhi - blo), side="left") - 1
    hit = idx >= 0
    return bool(np.any(top[idx[hit]] > sb[hit]))


def _rows_meet(step: int, pa: int, pb: int, lo: int, hi: int) -> bool:
    """:func:`dram_rows_overlap` of two patterns with the same row stride ``step``: row p of
    a, ``[alo, ahi) + p * step``, meets row q of b, ``[blo, bhi) + q * step``, iff
    ``(p - q) * step`` lies strictly between ``lo = blo - ahi`` and ``hi = bhi - alo``, for
    some p < ``pa`` and q < ``pb``: whether an integer t in [-(pb - 1), pa - 1] has t * step
    in (lo, hi). Several hundred calls a 4096^3 product; the general check builds arrays."""
    if step == 0:
        return lo < 0 < hi
    t_lo, t_hi = -(pb - 1), pa - 1
    if step < 0:  # t * step = (-t) * (-step)
        step, t_lo, t_hi = -step, -t_hi, -t_lo
    first = lo // step + 1  # the least t with t * step > lo
    last = -(-hi // step) - 1  # the greatest t with t * step < hi
    return max(first, t_lo) <= min(last, t_hi)
