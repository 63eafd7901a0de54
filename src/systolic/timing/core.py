"""The whole-NeuronCore scheduler: every engine and DMA queue, dependencies, HBM, and the
answer to "what bounds my kernel" (docs/timing.md "The whole core").

``time_program(program, arch) -> CoreTiming`` is the one entry point (the NKI front end's
``nki.benchmark``, ``systolic.matmul``'s report and the sweep call it).

Model. Each engine is an in-order queue at its own clock: Tensor (the PE rules of
:mod:`systolic.timing.pe`, unchanged: issue interval, background weight loads), Vector,
Scalar, GpSimd (costs, QuantizeMx's included: :mod:`systolic.timing.engines`) and
``arch.dma_queues`` DMA queues (:mod:`systolic.timing.dma`). A ReadOut is two ops: the PSUM
evacuation on ``arch.readout_engine``, then a DMA store of its bytes. An op starts when its
queue is free (program order within a queue) and every op it depends on has ended
(:mod:`systolic.timing.deps`: RAW, WAW, WAR on overlapping regions), plus ``arch.sync_ns`` when
a compute engine waits for another queue; a DMA's first byte comes ``dma_fixed_ns`` after
its inputs are ready. All DMA bytes to or from HBM pass one shared server at
``hbm_bytes_per_s`` in program order. Every dependency points backwards in program order,
so one pass in program order is exact for these rules (no event queue is needed).

Time is counted in integer ticks of ``arch.tick_hz`` (the least common multiple of the
engine clocks: every engine cycle is a whole number of ticks; DMA times round up to a
tick), so the breakdown adds up exactly.

Critical path. Each op records which constraint set its start (its binder: the previous op
on its queue, a dependency, the HBM server, or the PE's issue interval / weight load) and
the time on that binder the constraint refers to. Walking back from the op that ends last,
each op's own time is charged to its cause (``pe``, ``weight_load``, ``dma``,
``psum_evacuation``, ``vector``, ``scalar``, ``gpsimd``) and each wait between a binder and
the op to ``sync`` (semaphore latency) or ``dma_latency`` (the DMA fixed cost). The parts
telescope, so they sum to the latency exactly.
"""

from __future__ import annotations

from math import ceil
from typing import Any

import numpy as np

from ..arch import Arch, get_arch
from ..errors import SystolicError
from ..geometry import interval_union
from ..isa import (
    Activation,
    DmaCopy,
    DmaLoad,
    Engine,
    LdWeightMx,
    LoadStationary,
    MatMul,
    MatmultMx,
    Memset,
    Program,
    QuantizeMx,
    ReadOut,
    TensorCopy,
    TensorTensor,
)
from . import pe as cost
from .deps import Tracker, region
from .dma import DmaCost, dma_cost, queues_for
from .engines import engine_cycles, engine_hz
from .result import CAUSES, QUEUE_NAMES, CoreTiming, queue_names

__all__ = ["CAUSES", "QUEUE_NAMES", "CoreTiming", "queue_names", "time_prefixes", "time_program"]

_CAUSE_ID = {k: i for i, k in enumerate(CAUSES)}
_PE, _WL, _DMA, _DLAT, _EVAC, _VEC, _SCA, _GPS, _SYNC, _IDLE = range(len(CAUSES))
_ENGINE_Q = {Engine.TENSOR: 0, Engine.VECTOR: 1, Engine.SCALAR: 2, Engine.GPSIMD: 3}
_ENGINE_CAUSE = {Engine.VECTOR: _VEC, Engine.SCALAR: _SCA, Engine.GPSIMD: _GPS}
_DQ = len(QUEUE_NAMES)  # first DMA queue id


def _program_format(program: Program) -> tuple[str, str]:
    for ins in program:
        if isinstance(ins, MatmultMx):
            return ins.fmt, "none"
        if isinstance(ins, MatMul):
            return ins.moving.dtype, ins.perf_mode.spelling
    return "bf16", "none"


def time_program(program: Program, arch: Arch | str, *, fmt: str | None = None,
                 perf_mode: str | None = None) -> CoreTiming:
    """Schedule ``program`` on the whole NeuronCore of ``arch`` (module docstring).

    ``fmt``/``perf_mode`` name the peak the ``hfu`` is measured against (default: those of
    the Program's first MatMul). Instructions the model does not know raise
    :class:`SystolicError`."""
    arch = get_arch(arch)
    return time_prefixes(program, arch, (len(program),), fmt=fmt, perf_mode=perf_mode)[0]


def time_prefixes(program: Program, arch: Arch | str, cuts: tuple[int, ...], *,
                  fmt: str | None = None, perf_mode: str | None = None
                  ) -> list[CoreTiming]:
    """One schedule of ``program``, summarised for each prefix ``program[:cut]``.

    Every decision depends only on earlier instructions, so the prefix's summary is exactly
    what :func:`time_program` gives for the prefix alone (tested); extrapolating a long
    regular program from its first blocks uses this (systolic.extrapolate)."""
    arch = get_arch(arch)
    sch = _Scheduler(arch)
    sch.run(program)
    if fmt is None:
        fmt, mode = _program_format(program)
    else:
        mode = perf_mode or "none"
    return [sch.assemble(cut, fmt, perf_mode or mode) for cut in cuts]


class _Scheduler:
    def __init__(self, arch: Arch) -> None:
        self.arch = arch
        self.tick = arch.tick_hz
        self.r_pe = self.tick // int(arch.clock_hz)
        self.nq = _DQ + arch.dma_queues
        self.sync = ceil(arch.sync_ns * self.tick / 1e9)
        self.fixed = ceil(arch.dma_fixed_ns * self.tick / 1e9)
        self.hbm_rate = arch.hbm_bytes_per_s / self.tick  # bytes per tick
        # per op
        self.queue: list[int] = []
        self.ends: list[int] = []
        # per op: (instruction, queue count, start, own cause, binder (-1: a root), ref,
        # enter, lag cause): the cause of the op's own time, and of the wait ref -> enter
        self.rest: list[tuple[int, int, int, int, int, int, int, int]] = []
        self.rest_arr: np.ndarray | None = None
        self.tracker = Tracker(self.ends, self.queue)
        self.last = [-1] * self.nq  # last op per queue
        self.free = [0] * self.nq
        self.rmemo: dict[object, int] = {}
        self.idmemo: dict[int, int] = {}
        self.cmemo: dict[object, Any] = {}
        self.qmemo: dict[tuple[int, int], list[int]] = {}
        self.hbm_free = 0
        self.hbm_last = -1
        self.dma_bytes = self.hbm_bytes = 0
        self.macs2 = 0  # 2 x useful MACs (two-pass halves count half)
        self.macs_at: list[int] = []  # macs2 after each instruction
        self.dma_at: list[tuple[int, int]] = []  # (dma, hbm) bytes after each instruction

    # -- helpers ----------------------------------------------------------------------
    def _reg(self, ap: object) -> int:
        # by identity first (the Program keeps every pattern alive during the run), then
        # by value (equal patterns built separately)
        r = self.idmemo.get(id(ap))
        if r is None:
            a: Any = ap
            # a key of plain ints and tuples (hashed in C; the dataclass hash is slower)
            key = (id(a.space), a.partition, a.partitions, a.offset, a.dims, a.dtype,
                   a.partition_step)
            r = self.rmemo.get(key)
            if r is None:
                r = self.rmemo[key] = self.tracker.intern(region(a))
            self.idmemo[id(ap)] = r
        return r

    def _add(self, i: int, q: int, nqs: int, own: int, start: int, end: int, binder: int,
             ref: int, enter: int, lag: int, reads: tuple[int, ...],
             writes: tuple[int, ...]) -> int:
        """Append one timed op and commit its accesses; returns its index."""
        op = len(self.ends)
        self.queue.append(q)
        self.ends.append(end)
        self.rest.append((i, nqs, start, own, binder, ref, enter, lag))
        self.tracker.commit(op, reads, writes)
        return op

    def _ready(self, deps: set[int], q: int, sync: int) -> tuple[int, int]:
        """(latest dependency end + sync, that dependency) over deps on other queues."""
        t, b = -1, -1
        for d in deps:
            if self.queue[d] == q and q < _DQ:
                continue
            e = self.ends[d] + (sync if self.queue[d] != q else 0)
            if e > t:
                t, b = e, d
        return t, b

    # -- ops --------------------------------------------------------------------------
    def _engine_op(self, i: int, ins: Any, engine: Engine, reads: tuple[int, ...],
                   writes: tuple[int, ...], own: int) -> int:
        q = _ENGINE_Q[engine]
        d = ins.dst
        s = ins.a if type(ins) is TensorTensor else getattr(ins, "src", d)
        key = (type(ins), q, s.dims, s.dtype, d.dims, d.dtype)
        hit = self.cmemo.get(key)
        if hit is None:
            per = self.tick // engine_hz(self.arch, engine)
            hit = self.cmemo[key] = (engine_cycles(ins, self.arch, engine), per)
        cyc, per = hit
        deps = self.tracker.deps(reads, writes)
        prev = self.last[q]
        if prev >= 0 and prev in deps:
            cyc += self.arch.engine_dep_overhead
        t, b, ref, lag = self.free[q], prev, self.free[q], _IDLE
        dt, db = self._ready(deps, q, self.sync)
        if dt > t:
            t, b, ref, lag = dt, db, self.ends[db], _SYNC
        end = t + cyc * per
        op = self._add(i, q, 1, own, t, end, b, ref if b >= 0 else 0, t, lag, reads, writes)
        self.free[q], self.last[q] = end, op
        return op

    def _dma_op(self, i: int, cost3: tuple[DmaCost, int, int], first: int,
                reads: tuple[int, ...], writes: tuple[int, ...], extra: int = -1) -> int:
        c, occ, hb = cost3
        qs = self.qmemo.get((first, c.queues))
        if qs is None:
            qs = self.qmemo[(first, c.queues)] = [
                _DQ + q for q in queues_for(first, c.queues, self.arch.dma_queues)]
        deps = self.tracker.deps(reads, writes)
        if extra >= 0:
            deps.add(extra)
        op = len(self.ends)
        t, b, ref, lag = 0, -1, 0, _IDLE
        for q in qs:
            if self.free[q] > t:
                t, b, ref = self.free[q], self.last[q], self.free[q]
        dt, db = self._ready(deps, -1, 0)
        dt = max(dt, 0) + self.fixed
        if dt > t:
            t, b, ref, lag = dt, db, (self.ends[db] if db >= 0 else 0), _DLAT
        end, enter = t + occ, t
        if hb:
            hs = max(self.hbm_free, t)
            if hs + hb > end:
                end = hs + hb
                if hs > t:  # waiting for the shared HBM: the previous HBM transfer binds
                    b, ref, enter, lag = self.hbm_last, hs, hs, _IDLE
            self.hbm_free, self.hbm_last = hs + hb, op
        self._add(i, qs[0], len(qs), _DMA, t, end, b, ref, enter, lag, reads, writes)
        for q in qs:
            self.free[q], self.last[q] = end, op
        self.dma_bytes += c.bytes
        self.hbm_bytes += c.hbm_bytes
        return op

    def _dma_cost(self, src: Any, dst: Any) -> tuple[DmaCost, int, int]:
        """(cost, queue ticks, HBM ticks) of a transfer, memoised on its shape."""
        key = ("dma", src.partitions, src.dims, src.dtype, src.partition_step, id(src.space),
               dst.partitions, dst.dims, id(dst.space))
        hit = self.cmemo.get(key)
        if hit is None:
            c = dma_cost(src, dst, self.arch)
            occ = max(1, ceil(c.queue_ns * self.tick / 1e9))
            hb = max(1, ceil(c.hbm_bytes / self.hbm_rate)) if c.hbm_bytes else 0
            hit = self.cmemo[key] = (c, occ, hb)
        return hit  # type: ignore[no-any-return]

    def _band(self, sbuf_side: Any) -> int:
        """First queue of a transfer without a queue field: the queue that serves the
        band of partitions its SBUF/PSUM side starts in (dma.py)."""
        return (sbuf_side.partition // self.arch.dma_partitions_per_queue) \
            % self.arch.dma_queues

    # -- the pass ---------------------------------------------------------------------
    def run(self, program: Program) -> None:
        arch, r = self.arch, self.r_pe
        reg = self._reg
        pe_prev = -1  # previous compute op
        pe_prev_start = -1
        earliest = 0
        pending_load = -1  # op of the latest load since the previous compute
        load_last = -1
        ins: Any
        for i, ins in enumerate(program.instructions):
            tp = type(ins)
            if tp is MatMul or tp is MatmultMx:
                mv = ins.moving
                key = (tp, mv.partitions, mv.dims, mv.dtype, ins.dst.partitions,
                       ins.fp32_pass if tp is MatMul else 0)
                e = self.cmemo.get(key)
                if e is None:
                    passes = 2 if tp is MatMul and ins.fp32_pass else 1
                    e = self.cmemo[key] = (cost.matmul_interval(ins, arch) * r,
                                           cost.matmul_duration(ins, arch) * r,
                                           2 * cost.useful_macs(ins) // passes)
                reads = (reg(mv),) if tp is MatMul else (reg(mv), reg(ins.scale))
                writes = (reg(ins.dst),)
                deps = self.tracker.deps(reads, writes)
                if pe_prev >= 0:
                    t, b, ref, lag = earliest, pe_prev, earliest, _IDLE
                else:
                    t, b, ref, lag = 0, -1, 0, _IDLE
                if pending_load >= 0 and self.ends[pending_load] > t:
                    t, b, ref, lag = self.ends[pending_load], pending_load, \
                        self.ends[pending_load], _IDLE
                dt, db = self._ready(deps, 0, self.sync)
                if dt > t:
                    t, b, ref, lag = dt, db, self.ends[db], _SYNC
                op = self._add(i, 0, 1, _PE, t, t + e[1], b, ref, t, lag, reads, writes)
                self.macs2 += e[2]
                pe_prev, pe_prev_start, earliest, pending_load = op, t, t + e[0], -1
                self.last[0] = op
            elif tp is LoadStationary or tp is LdWeightMx:
                c = self.cmemo.get(("ld", ins.src.dims))
                if c is None:
                    c = self.cmemo[("ld", ins.src.dims)] = \
                        cost.load_cycles(ins, arch) * r
                reads = (reg(ins.src),) if tp is LoadStationary else \
                    (reg(ins.src), reg(ins.scale))
                deps = self.tracker.deps(reads, ())
                t, b, ref, lag = 0, -1, 0, _IDLE
                if load_last >= 0:
                    t, b, ref = self.ends[load_last], load_last, self.ends[load_last]
                if pe_prev >= 0 and pe_prev_start > t:
                    t, b, ref = pe_prev_start, pe_prev, pe_prev_start
                dt, db = self._ready(deps, 0, self.sync)
                if dt > t:
                    t, b, ref, lag = dt, db, self.ends[db], _SYNC
                op = self._add(i, 0, 1, _WL, t, t + c, b, ref, t, lag, reads, ())
                load_last = pending_load = op
            elif tp is DmaLoad or tp is DmaCopy:
                c = self._dma_cost(ins.src, ins.dst)
                first = ins.queue if tp is DmaCopy else self._band(ins.dst)
                self._dma_op(i, c, first, (reg(ins.src),), (reg(ins.dst),))
            elif tp is ReadOut:
                eng = Engine(arch.readout_engine)
                ev = self._engine_op(i, ins, eng, (reg(ins.src),), (), _EVAC)
                c = self._dma_cost(ins.src, ins.dst)
                self._dma_op(i, c, self._band(ins.src), (), (reg(ins.dst),), extra=ev)
            elif tp is TensorCopy or tp is Activation:
                self._engine_op(i, ins, ins.engine, (reg(ins.src),),
                                (reg(ins.dst),), _ENGINE_CAUSE.get(ins.engine, _VEC))
            elif tp is TensorTensor:
                self._engine_op(i, ins, ins.engine, (reg(ins.a), reg(ins.b)),
                                (reg(ins.dst),), _ENGINE_CAUSE.get(ins.engine, _VEC))
            elif tp is QuantizeMx:  # reads src, writes the containers and the scales
                self._engine_op(i, ins, ins.engine, (reg(ins.src),),
                                (reg(ins.dst), reg(ins.scale)),
                                _ENGINE_CAUSE.get(ins.engine, _VEC))
            elif tp is Memset:
                self._engine_op(i, ins, ins.engine, (), (reg(ins.dst),),
                                _ENGINE_CAUSE.get(ins.engine, _VEC))
            else:
                raise SystolicError(f"instruction {i}: the whole-core timing does not know "
                                    f"{tp.__name__}")
            self.macs_at.append(self.macs2)
            self.dma_at.append((self.dma_bytes, self.hbm_bytes))

    def assemble(self, cut: int, fmt: str, mode: str) -> CoreTiming:
        """The summary of the ops of instructions ``< cut``."""
        arch = self.arch
        if self.rest_arr is None or len(self.rest_arr) != len(self.rest):
            self.rest_arr = np.array(self.rest, dtype=np.int64).reshape(-1, 8)
        rest = self.rest_arr
        instr = rest[:, 0]
        n = int(np.searchsorted(instr, cut))  # ops are in instruction order
        starts = rest[:n, 2].copy()
        ends = np.array(self.ends[:n], dtype=np.int64)
        queue = np.array(self.queue[:n], dtype=np.int64)
        nqs = rest[:n, 1].copy()
        latency = int(ends.max()) if len(ends) else 0
        macs2 = self.macs_at[cut - 1] if cut else 0
        dma_bytes, hbm_bytes = self.dma_at[cut - 1] if cut else (0, 0)
        names = queue_names(arch)
        busy: dict[str, int] = {}
        counts: dict[str, int] = {}
        for qid, name in enumerate(names):
            if qid < _DQ:
                sel = queue == qid
            else:  # a DMA gang holds queues first .. first + n - 1 (mod dma_queues)
                k = qid - _DQ
                sel = ((k - (queue - _DQ)) % arch.dma_queues < nqs) & (queue >= _DQ)
            lo, hi = interval_union(starts[sel], ends[sel])
            busy[name] = int(np.sum(hi - lo))
            counts[name] = int(np.count_nonzero(sel))
        return CoreTiming(
            arch=arch, tick_hz=self.tick, latency=latency,
            op_instr=instr[:n].copy(), op_queue=queue, op_queues=nqs,
            starts=starts, ends=ends, bound_ticks=self._critical_path(ends, latency),
            busy_ticks=busy, instructions=counts, dma_bytes=dma_bytes,
            hbm_bytes=hbm_bytes, useful_macs=macs2 // 2, fmt=fmt, perf_mode=mode,
            op_cause=rest[:n, 3].copy())

    def _critical_path(self, ends: np.ndarray, latency: int) -> dict[str, int]:
        parts = [0] * len(CAUSES)
        if not len(ends):
            return dict.fromkeys(CAUSES, 0)
        op = int(np.argmax(ends))
        t = latency
        rest = self.rest
        while op >= 0:
            _, _, _, own, b, ref, enter, lag = rest[op]
            lo = ref if b >= 0 else 0
            ent = min(max(enter, lo), t)
            parts[own] += t - ent
            parts[lag] += ent - lo
            t = lo
            op = b
        parts[_IDLE] += t  # a root that does not start at 0 (none under these rules)
        return {k: parts[i] for i, k in enumerate(CAUSES)}
