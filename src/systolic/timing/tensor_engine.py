"""The timing model: the schedule of a whole Program, instruction by instruction.

:func:`schedule` walks the Program once, in program order, and gives every LoadStationary /
LdWeightMx, MatMul / MatmultMx and ReadOut a start and an end cycle (DmaLoad is free: -1).
It implements exactly the rules of :mod:`systolic.timing.pe` (its docstring is the spec;
docs/timing.md has the picture) and takes every per-instruction number from cost.py's
helpers, so the register-level simulator, fed the same costs, agrees start for start:

* compute (seed 003): ``start = max(prev_start + interval(prev), end of the loads since the
  previous compute, end of the latest ReadOut of an overlapping region if START)``;
  ``end = start + matmul_duration`` (N + K + M - 2 cycles at one column per cycle).
* load (FACTS "background LoadStationary"): ``start = max(end of the previous load, start of
  the previous compute)``; ``end = start + load_cycles``.
* ReadOut: ``start = max(end of the previous ReadOut, the latest end of the computes of
  each overlapping PSUM region's group)``; ``end = start + readout_cycles``.

Every dependency points backwards in program order, so one pass suffices. Each compute
records what bound its start (:class:`Cause`): ``INTERVAL`` (the previous MatMul's issue
interval max(period*N, MM_INIT_LATENCY)), ``WEIGHT_LOAD``, ``READOUT`` or ``NONE`` (the
first compute, starting at cycle 0). Ties go to the earlier of interval, load, read-out.

Speed: the per-instruction costs are computed once per distinct operand shape (a memo keyed
on the instruction's cost-relevant fields), so the loop body is a handful of integer
``max`` operations: about 1 us per instruction in CPython.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from ..arch import Arch, get_arch
from ..geometry import Rect
from ..isa import (
    CalcFlags,
    DmaLoad,
    LdWeightMx,
    LoadStationary,
    MatMul,
    MatmultMx,
    Program,
    ReadOut,
)
from .pe import (
    PE_IDLE,
    Bind,
    array_cols,
    array_rows,
    column_period,
    compute_step,
    contraction,
    cost_key,
    load_cycles,
    load_step,
    matmul_duration,
    matmul_interval,
    moving_n,
    readout_cycles,
    useful_macs,
)

__all__ = ["Cause", "ComputeCosts", "Kind", "Schedule", "schedule"]


class Kind(enum.IntEnum):
    """What an instruction occupies: nothing (DMA), the load queue, the array, read-out."""

    DMA = 0
    LOAD = 1
    COMPUTE = 2
    READOUT = 3


class Cause(enum.IntEnum):
    """What bound a compute instruction's start (``-1`` in :attr:`Schedule.cause` for the
    other instructions)."""

    NONE = 0
    INTERVAL = 1
    WEIGHT_LOAD = 2
    READOUT = 3


_START = int(CalcFlags.START)
_STOP = int(CalcFlags.STOP)
_NONE, _INTERVAL, _LOAD, _READOUT = (int(c) for c in Cause)
_COMPUTE_KIND = int(Kind.COMPUTE)
# Cause of a compute's start by Bind value (an IntEnum indexes a tuple; a dict keyed by it
# hashed it in Python, per MatMul); LOAD_QUEUE binds loads only
_WHY = {Bind.NONE: _NONE, Bind.INTERVAL: _INTERVAL, Bind.WEIGHT_LOAD: _LOAD,
        Bind.READY: _READOUT}
assert [int(b) for b in sorted(Bind)] == list(range(len(Bind)))
_WHY_CAUSE = tuple(_WHY.get(b, -1) for b in sorted(Bind))


@dataclass(frozen=True, slots=True, eq=False)
class ComputeCosts:
    """Per compute instruction (program order), the numbers the loss breakdown needs.

    ``rows``: PE rows used (partitions); ``fold``: contraction elements per row (2 for
    DoubleRow, 4 for MX, else 1); ``passes``: 2 for a pass of the fp32 two-pass lowering,
    else 1; ``macs``: useful MACs (a two-pass half counts half, so the two passes of one
    product count it once)."""

    index: np.ndarray  # int64, instruction index in the Program
    n: np.ndarray
    period: np.ndarray
    rows: np.ndarray
    cols: np.ndarray
    fold: np.ndarray
    passes: np.ndarray
    interval: np.ndarray
    duration: np.ndarray
    macs: np.ndarray  # float64


@dataclass(frozen=True, slots=True, eq=False)
class Schedule:
    """Start and end cycle of every instruction (-1 for DmaLoad), end exclusive.

    ``cycles`` is the Tensor Engine's busy span (the latest end of a compute instruction,
    cost.py); ``readout_tail`` the cycles read-outs run on after it.
    """

    arch: Arch
    kinds: np.ndarray  # int8, Kind
    starts: np.ndarray  # int64
    ends: np.ndarray  # int64
    cause: np.ndarray  # int8, Cause for compute, -1 otherwise
    cycles: int
    readout_tail: int
    compute: ComputeCosts

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def seconds(self) -> float:
        return self.cycles / self.arch.clock_hz

    def rows_of(self, kind: Kind) -> np.ndarray:
        """Instruction indices of one kind, in program order."""
        return np.flatnonzero(self.kinds == kind)

    def __repr__(self) -> str:
        n_mm = len(self.compute.index)
        return (f"Schedule({len(self)} instructions, {n_mm} compute, {self.cycles} cycles "
                f"on {self.arch.name}, read-out tail {self.readout_tail})")


def _compute_entry(ins: MatMul | MatmultMx, arch: Arch) -> tuple[int, ...]:
    passes = 2 if isinstance(ins, MatMul) and ins.fp32_pass else 1
    rows = array_rows(ins)
    return (matmul_interval(ins, arch), matmul_duration(ins, arch), moving_n(ins),
            column_period(ins, arch), rows, array_cols(ins), contraction(ins) // rows, passes,
            useful_macs(ins))


def schedule(program: Program, arch: Arch | str, *, check: bool = False) -> Schedule:
    """Schedule ``program`` on ``arch`` by the rules of :mod:`systolic.timing.pe`.

    ``check`` runs :func:`systolic.verify` first (programs from the compiler are already
    verified). Instructions the model does not know raise :class:`SystolicError`.
    """
    from ..errors import SystolicError

    arch = get_arch(arch)
    if check:
        from ..verify import verify

        verify(program, arch)
    instrs = program.instructions
    count = len(instrs)
    kinds = bytearray(count)
    starts = [-1] * count
    ends = [-1] * count
    cause = [-1] * count
    entries: list[tuple[int, ...]] = []
    memo: dict[object, tuple[int, ...]] = {}  # compute costs by pe.cost_key
    load_memo: dict[object, int] = {}
    ro_memo: dict[object, int] = {}
    why_cause = _WHY_CAUSE
    pe = PE_IDLE  # the issue rules' state (timing/pe.py)
    ro_free = 0  # the read-out engine is free from here
    group_end: dict[Rect, int] = {}  # region -> its group's last end
    ro_end: dict[Rect, int] = {}  # region -> latest read-out end
    busy_end = 0
    for i, ins in enumerate(instrs):
        tp = type(ins)
        if tp is MatMul or tp is MatmultMx:
            key = cost_key(ins)  # type: ignore[arg-type]
            e = memo.get(key)
            if e is None:
                e = memo[key] = _compute_entry(ins, arch)  # type: ignore[arg-type]
            dst = ins.dst  # type: ignore[union-attr]
            dreg = dst.rect
            flags = int(ins.flags)  # type: ignore[union-attr]
            ready = 0
            if flags & _START and ro_end:  # the bank must be read out first
                ready = max((end for other, end in ro_end.items()
                             if end > 0 and dreg.overlaps(other)), default=0)
            t, why, pe = compute_step(pe, e[0], ready)
            end = t + e[1]
            if flags & _START or end > group_end.get(dreg, -1):
                group_end[dreg] = end
            if end > busy_end:
                busy_end = end
            kinds[i], starts[i], ends[i], cause[i] = 2, t, end, why_cause[why]
            entries.append(e)
        elif tp is LoadStationary or tp is LdWeightMx:
            c = load_memo.get(ins.src.dims)  # type: ignore[union-attr]
            if c is None:
                c = load_memo[ins.src.dims] = load_cycles(ins, arch)  # type: ignore
            t, _, pe = load_step(pe, c)
            kinds[i], starts[i], ends[i] = 1, t, t + c
        elif tp is DmaLoad:
            pass
        elif tp is ReadOut:
            src = ins.src  # type: ignore[union-attr]
            c = ro_memo.get(src.dims)
            if c is None:
                c = ro_memo[src.dims] = readout_cycles(ins, arch)  # type: ignore[arg-type]
            reg = src.rect
            done = max((g for other, g in group_end.items() if reg.overlaps(other)),
                       default=0)  # every MatMul of the region's group has ended (pe.py)
            t = ro_free if ro_free > done else done
            ro_free = t + c
            ro_end[reg] = ro_free
            kinds[i], starts[i], ends[i] = 3, t, ro_free
        else:
            raise SystolicError(f"instruction {i}: the timing model does not know "
                                f"{tp.__name__}")
    return _assemble(arch, kinds, starts, ends, cause, entries, busy_end, ro_free)


def _assemble(arch: Arch, kinds: bytearray, starts: list[int], ends: list[int],
              cause: list[int], entries: list[tuple[int, ...]], busy_end: int,
              ro_free: int) -> Schedule:
    kind_arr = np.frombuffer(bytes(kinds), dtype=np.int8).copy()
    table = np.array(entries, dtype=np.int64).reshape(-1, 9)
    costs = ComputeCosts(
        index=np.flatnonzero(kind_arr == _COMPUTE_KIND),
        interval=table[:, 0], duration=table[:, 1], n=table[:, 2], period=table[:, 3],
        rows=table[:, 4], cols=table[:, 5], fold=table[:, 6], passes=table[:, 7],
        macs=table[:, 8].astype(np.float64) / table[:, 7],
    )
    return Schedule(
        arch=arch, kinds=kind_arr,
        starts=np.array(starts, dtype=np.int64), ends=np.array(ends, dtype=np.int64),
        cause=np.array(cause, dtype=np.int8), cycles=busy_end,
        readout_tail=max(0, ro_free - busy_end), compute=costs,
    )
