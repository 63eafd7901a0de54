"""Per-instruction costs and issue rules shared by the timing model and the register-level
simulator, so that the two agree cycle for cycle by construction of their inputs.

The rules (docs/timing.md has the picture):

* A MatMul streams its moving tile [K, N] into the array one column every ``period``
  cycles (1; fp32 two-pass 2 per pass; a single fp32/fp32r pass 4: seed 003 "fp32 inputs
  cost roughly 4x"). Value X[k, n] reaches PE(k, m) at cycle ``start + period*n + k + m``
  (seed 003), where k counts array rows (partitions: DoubleRow and MX fold 2 or 4
  contraction elements into one PE row). So an instruction alone ends at
  ``start + period*(N-1) + rows + cols - 1`` (exclusive), i.e. N + K + M - 2 cycles.
* The next MatMul starts no sooner than ``max(period*N, MM_INIT_LATENCY)`` after this
  one's start (seed 003 / FACTS "issue interval about max(N, MM_INIT_LATENCY)").
* A weight load (LoadStationary / LdWeightMx) takes ``ceil(cols / ldweights_speedup)``
  cycles (FACTS: about 32 for 128 columns). Loads run in one queue, in program order, in
  the background into shadow latches: a load starts when the previous load has finished
  and the MatMul before it in program order has started (the shadow latches are then
  free). A MatMul that follows a load (in program order, with no MatMul between) starts
  no sooner than that load's end.
* A ReadOut copies a finished PSUM region on another engine, one queue in program order:
  it starts when that engine is free and every MatMul of the region's group has ended (a
  wide early MatMul of the group can drain after the narrower one that STOPped it),
  and takes ``readout_fixed_cycles + ceil(N / readout_elems_per_cycle)`` cycles.
* A MatMul that STARTs a PSUM region starts no sooner than the end of the latest earlier
  ReadOut (in program order) of an overlapping region: the bank must be copied out first.
* DmaLoad is free: the DMA queues are assumed to run ahead (not modelled).
* Total cycles = the end of the last MatMul (the Tensor Engine's busy span); read-outs
  still running after it are reported separately as ``readout_tail``.
"""

from __future__ import annotations

import enum
from math import ceil, prod
from typing import NamedTuple

from ..arch import Arch
from ..dtypes import get_format
from ..geometry import wavefront_cycles
from ..isa import LdWeightMx, LoadStationary, MatMul, MatmultMx, ReadOut

__all__ = [
    "PE_IDLE",
    "Bind",
    "PeQueue",
    "array_cols",
    "array_rows",
    "column_period",
    "compute_step",
    "contraction",
    "cost_key",
    "load_cycles",
    "load_step",
    "matmul_duration",
    "matmul_interval",
    "moving_n",
    "readout_cycles",
    "useful_macs",
]

Compute = MatMul | MatmultMx
Load = LoadStationary | LdWeightMx


def array_rows(ins: Compute) -> int:
    """PE rows the instruction uses: the moving tile's partitions."""
    return ins.moving.partitions


def array_cols(ins: Compute) -> int:
    """PE columns the instruction uses: the PSUM destination's partitions (seed 003:
    column m drains into PSUM partition m)."""
    return ins.dst.partitions


def moving_n(ins: Compute) -> int:
    return ins.moving.dims[-1][1]


def contraction(ins: Compute) -> int:
    """Logical contraction elements K: partitions x folded elements per partition."""
    if isinstance(ins, MatmultMx):  # x4 unpack (seed 000 "MX Dispatch Path")
        return ins.moving.partitions * get_format(ins.fmt).pe_fold
    return ins.moving.partitions * prod(n for _, n in ins.moving.dims[:-1])


def useful_macs(ins: Compute) -> int:
    return contraction(ins) * array_cols(ins) * moving_n(ins)


def column_period(ins: Compute, arch: Arch) -> int:
    """Cycles between moving columns entering the array."""
    if isinstance(ins, MatmultMx):
        return 1
    if get_format(ins.moving.dtype).fp32_cost:
        if ins.fp32_pass:  # the two passes share the 4x: each streams at half rate
            return arch.fp32_pass_slowdown
        return round(1 / arch.rate_fp32)  # one fp32 pass: seed 003 "roughly 4x"
    return 1


def matmul_interval(ins: Compute, arch: Arch) -> int:
    """Cycles from this MatMul's start to the earliest start of the next."""
    return max(column_period(ins, arch) * moving_n(ins), arch.mm_init_latency)


def matmul_duration(ins: Compute, arch: Arch) -> int:
    """Cycles from start to the last MAC's cycle + 1 on an otherwise idle array."""
    return wavefront_cycles(moving_n(ins), array_rows(ins), array_cols(ins),
                            column_period(ins, arch))


def cost_key(ins: Compute) -> tuple[object, ...]:
    """The fields the compute rules above read (the moving tile's partitions, dims and
    format, the destination's partitions, the fp32 pass or the MX format): instructions of
    one key cost the same on one Arch. A memo key that hashes in C (the frozen instruction's
    own hash runs in Python over every field, issue 20)."""
    mv = ins.moving
    last = ins.fmt if type(ins) is MatmultMx else ins.fp32_pass  # type: ignore[union-attr]
    return (type(ins), mv.partitions, mv.dims, mv.dtype, ins.dst.partitions, last)


def load_cycles(ins: Load, arch: Arch) -> int:
    """Fast weight load: ceil(columns / 4) cycles (FACTS, NKI performance guide)."""
    cols = ins.src.dims[-1][1]
    return ceil(cols / arch.ldweights_speedup)


def readout_cycles(ins: ReadOut, arch: Arch) -> int:
    n = prod(num for _, num in ins.src.dims)
    return arch.readout_fixed_cycles + ceil(n / arch.readout_elems_per_cycle)


# -- the issue rules, once: a pure step function on a frozen queue state -------------------
class Bind(enum.IntEnum):
    """What set a PE instruction's start: nothing (the first, at its ready time 0), the
    previous MatMul's issue interval, the weight load before it, the previous load or
    MatMul (a load's shadow latches), or the caller's ``ready`` time (its inputs: the
    read-out of its bank, a dependency)."""

    NONE = 0
    INTERVAL = 1
    WEIGHT_LOAD = 2
    LOAD_QUEUE = 3
    READY = 4


class PeQueue(NamedTuple):
    """The Tensor Engine's issue state between instructions (all times in one unit, -1 for
    "none yet"): the previous MatMul's start and the earliest start of the next one (its
    issue interval), the end of the latest load since that MatMul, and the end of the
    latest load (the load queue)."""

    prev_start: int
    next_compute: int
    load_end: int
    load_free: int


PE_IDLE = PeQueue(-1, 0, -1, 0)


def compute_step(q: PeQueue, interval: int, ready: int = 0) -> tuple[int, Bind, PeQueue]:
    """A MatMul: start = max(the previous start + its issue interval, the end of the loads
    since it, ``ready``); ties go to the interval, then the load, then ``ready``. Returns
    (start, what bound it, the state after)."""
    t, why = q.next_compute, (Bind.INTERVAL if q.prev_start >= 0 else Bind.NONE)
    if q.load_end > t:
        t, why = q.load_end, Bind.WEIGHT_LOAD
    if ready > t:
        t, why = ready, Bind.READY
    return t, why, PeQueue(t, t + interval, -1, q.load_free)


def load_step(q: PeQueue, cycles: int, ready: int = 0) -> tuple[int, Bind, PeQueue]:
    """A weight load into the shadow latches: start = max(the end of the previous load, the
    start of the previous MatMul, ``ready``). Returns (start, what bound it, the state
    after; the next MatMul waits for this load's end)."""
    t, why = q.load_free, (Bind.LOAD_QUEUE if q.load_free > 0 else Bind.NONE)
    if q.prev_start > t:
        t, why = q.prev_start, Bind.LOAD_QUEUE
    if ready > t:
        t, why = ready, Bind.READY
    end = t + cycles
    return t, why, PeQueue(q.prev_start, q.next_compute, end, end)
