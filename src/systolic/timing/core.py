"""The whole-NeuronCore scheduler: every engine and DMA engine, dependencies, HBM, and the
answer to "what bounds my kernel" (docs/timing.md "The whole core").

``time_program(program, arch) -> CoreTiming`` is the one entry point (the NKI front end's
``nki.benchmark``, ``systolic.matmul``'s report and the sweep call it).

Model.

* **Queues.** Tensor (the PE issue rules of :mod:`systolic.timing.pe`: issue interval,
  background weight loads; always in program order, since the latched weights are machine
  state the compiler keeps paired with their MatMuls), Vector, Scalar, GpSimd (the costs of
  :mod:`systolic.timing.costs`), ``arch.dma_engines`` DMA engines and one HBM server
  (:mod:`systolic.timing.dma`). A ReadOut is two ops: the PSUM evacuation on
  ``arch.readout_engine``, then a DMA store of its bytes.
* **Dependencies** (:mod:`systolic.timing.deps`, RAW/WAW/WAR on overlapping regions): an
  op starts no sooner than each dependency's end, plus ``sync_ns`` when a compute engine
  waits for another queue, plus ``engine_access_overhead`` cycles of the producer when the
  producer is a Vector/Scalar/GpSimd instruction (its SBUF/PSUM write latency), plus
  ``engine_dep_overhead`` cycles on a read-after-write on the same engine; a DMA's first
  byte comes ``dma_fixed_ns`` after its inputs are ready.
* **Scheduling** (``schedule=``): ``"list"`` (the default) places every op, in program
  order of priority, at the earliest time its dependencies and its resources allow, into
  an idle gap before a later reservation if one fits: an instruction issues ahead of an
  earlier one on the same engine when no dependency orders them, as the Neuron compiler's
  list scheduler reorders each engine's stream (so a store waiting on compute does not
  block the next block's prefetch). DMA transfers on one queue of one DMA engine stay in
  order (FIFO); another queue's transfer may use the engine meanwhile (round-robin).
  ``"program-order"`` never fills a gap: every engine and DMA engine serves its ops in
  program order (the first release's in-order queues).
* **Resources** besides the queues: on NeuronCore-v2 Vector and GpSimd share SBUF access,
  Vector and Scalar PSUM access; on v3+ Vector and Scalar must not use one PSUM bank at
  once (``Arch.shared_engine_ports``).

Placement depends only on earlier instructions, so a prefix's schedule is the schedule's
prefix (:func:`time_prefixes`, used by systolic.extrapolate).

What-if latencies (``what_if=True``): :mod:`systolic.timing.whatif`.

Time is counted in integer ticks of ``arch.tick_hz`` (the least common multiple of the
engine clocks: every engine cycle is a whole number of ticks; DMA times round up to a
tick), so the breakdown adds up exactly.

Critical path by cause: :mod:`systolic.timing.critical_path` (each op records the
constraint that set its start; the parts sum to the latency exactly).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from math import ceil
from typing import Any

import numpy as np

from ..arch import Arch, get_arch
from ..collector import paused
from ..errors import SystolicError
from ..isa import (
    ACCESS,
    AccessPattern,
    DmaCopy,
    DmaIndirect,
    DmaLoad,
    Engine,
    LdWeightMx,
    LoadStationary,
    MatMul,
    MatmultMx,
    Program,
    ReadOut,
    Space,
    reads,
    writes,
)
from . import pe as pe_rules
from .busy import busy_grouped, busy_small
from .costs import engine_cycles, engine_hz
from .critical_path import RECORD, critical_path
from .deps import Tracker
from .dma import dma_cost, indirect_rows, queue_for
from .regions import Region, region
from .result import CAUSES, QUEUE_NAMES, WHAT_IF, Cause, CoreTiming, queue_names
from .timeline import Timeline
from .whatif import PLAN_KINDS, LazyWhatIf, Plans

__all__ = ["CAUSES", "QUEUE_NAMES", "SCHEDULES", "CoreTiming", "queue_names", "time_prefixes",
           "time_program"]

SCHEDULES = ("list", "program-order")
_TENSOR = 0
_ENGINE_Q = {Engine.TENSOR: 0, Engine.VECTOR: 1, Engine.SCALAR: 2, Engine.GPSIMD: 3}
_ENGINE_CAUSE = {Engine.VECTOR: Cause.VECTOR, Engine.SCALAR: Cause.SCALAR,
                 Engine.GPSIMD: Cause.GPSIMD}
_DQ = len(QUEUE_NAMES)  # the first DMA engine's queue id
_COMPUTE = (MatMul, MatmultMx)
_LOADS = (LoadStationary, LdWeightMx)
# what run() does with an instruction, by its type, and the type's ACCESS fields (one lookup
# per instruction instead of a chain of isinstance calls, issue 20); an engine instruction's
# engine is its own field, asked per instruction
_K_DMA_LOAD, _K_COMPUTE, _K_LOAD, _K_COPY, _K_INDIRECT, _K_READOUT, _K_ENGINE = range(7)
_KINDS: dict[type, tuple[int, tuple[str, ...], tuple[str, ...]]] = {}


def _kind(tp: type) -> int:
    """The kind of an instruction type, tested in this order (a subclass of two of these
    types goes where the first would take it)."""
    for kind, base in ((_K_COPY, DmaCopy), (_K_INDIRECT, DmaIndirect), (_K_COMPUTE, _COMPUTE),
                       (_K_LOAD, _LOADS), (_K_DMA_LOAD, DmaLoad), (_K_READOUT, ReadOut)):
        if issubclass(tp, base):
            return kind
    return _K_ENGINE


# a transfer as the scheduler places it: its DMA engines, the first and (consecutive engines)
# one past the last or 0, ticks on each engine, ticks of HBM, bytes moved, bytes of HBM, its
# queue by the model's rule (timing/dma.py queue_for: a function of the two spaces)
_DmaPlan = tuple[tuple[int, ...], int, int, int, int, int, int, int]
# DMA costs by Arch and transfer shape (its offsets left out: a cost does not depend on
# them, timing/dma.py), kept across programs: a sweep times thousands of small programs
# made of the same few transfer shapes. Cleared when full.
_DMA_COSTS: dict[tuple[object, ...], _DmaPlan] = {}
_DMA_COSTS_MAX = 1 << 16
# The region of an access pattern, kept across programs as _DMA_COSTS (a sweep's products
# share most of their SBUF slots and PSUM banks, and the compiler shares the pattern objects
# themselves, compiler/codegen.py's _PATTERNS; a pattern keeps its hash, isa/fields.py).
# Cleared when full.
_REGIONS: dict[AccessPattern, Region] = {}
# A transfer's DMA plan by its two pattern objects (by id, the objects kept in the entry so
# that the ids stay theirs), across programs: a key of the two patterns and the Arch would
# run three equality checks a lookup (issue 20). Cleared when full.
_DMA_OF: dict[tuple[int, int], tuple[AccessPattern, AccessPattern, Arch, _DmaPlan]] = {}
# Up to this many ops the queues' busy times are found in plain Python (timing/busy.py
# busy_small), past it with numpy (busy_grouped): the same integers either way
# (tests/test_timing_fast_paths.py)
BUSY_NUMPY = 512


def _program_format(program: Program) -> tuple[str, str]:
    for ins in program:
        if isinstance(ins, MatmultMx):
            return ins.fmt, "none"
        if isinstance(ins, MatMul):
            return ins.moving.dtype, ins.perf_mode.spelling
    return "bf16", "none"


def time_program(program: Program, arch: Arch | str, *, fmt: str | None = None,
                 perf_mode: str | None = None, schedule: str = "list",
                 what_if: bool = True) -> CoreTiming:
    """Schedule ``program`` on the whole NeuronCore of ``arch`` (module docstring).

    ``fmt``/``perf_mode`` name the peak the ``hfu`` is measured against (default: those of
    the Program's first MatMul). ``schedule`` is ``"list"`` or ``"program-order"``;
    ``what_if`` adds the latencies with DMA, engines or PE free. Instructions the model
    does not know raise :class:`SystolicError`."""
    return time_prefixes(program, arch, (len(program),), fmt=fmt, perf_mode=perf_mode,
                         schedule=schedule, what_if=what_if)[0]


def time_prefixes(program: Program, arch: Arch | str, cuts: tuple[int, ...], *,
                  fmt: str | None = None, perf_mode: str | None = None,
                  schedule: str = "list", what_if: bool = True,
                  dep_led: list[int] | None = None) -> list[CoreTiming]:
    """One schedule of ``program``, summarised for each prefix ``program[:cut]``.

    Every decision depends only on earlier instructions, so the prefix's summary is exactly
    what :func:`time_program` gives for the prefix alone (tested); extrapolating a long
    regular program from its first blocks uses this (systolic.extrapolate).

    ``dep_led``, when given, gets the instruction index of every transfer whose
    dependencies set the time its placement starts from: it has dependencies and no
    earlier transfer of its DMA queue on its engines ends later than they let it start
    (a tie counts as set by them). A transfer not listed would be placed the same with
    dependencies that end no later (systolic.extrapolate's K stand-ins check this)."""
    if schedule not in SCHEDULES:
        raise SystolicError(f"schedule must be one of {', '.join(SCHEDULES)}, not "
                            f"{schedule!r}")
    with paused():  # ints in lists and a few objects per region, none cyclic
        arch = get_arch(arch)
        sch = _Scheduler(arch, schedule, what_if)
        sch.dep_led = dep_led
        sch.run(program, cuts)
        if fmt is None:
            fmt, mode = _program_format(program)
        else:
            mode = perf_mode or "none"
        return [sch.assemble(cut, fmt, perf_mode or mode) for cut in cuts]


# op kinds of the what-if plans (timing/whatif.py) and the causes records carry, as ints
_PE, _LOAD, _ENGINE, _DMA = PLAN_KINDS
_C_PE, _C_WL, _C_DMA, _C_LAT = int(Cause.PE), int(Cause.WEIGHT_LOAD), int(Cause.DMA), \
    int(Cause.DMA_LATENCY)
_C_SYNC, _C_IDLE = int(Cause.SYNC), int(Cause.IDLE)


@dataclass(frozen=True, slots=True)
class _ArchTables:
    """The scheduler's figures that depend on the Arch alone, in ticks."""

    tick: int
    r_pe: int  # ticks per PE cycle
    sync: int  # a cross-engine semaphore
    fixed: int  # a DMA's fixed latency
    hbm_rate: float  # bytes per tick
    per: dict[int, int]  # ticks per cycle, per compute queue
    access: dict[int, int]  # engine access overhead, per compute queue
    dep_overhead: dict[int, int]  # a same-engine read-after-write, per compute queue
    # ticks between a dependency on queue qd and an op on queue q: lat_raw[q][qd] for a
    # read after write, lat_order[q][qd] otherwise (see _latency)
    lat_raw: list[list[int]]
    lat_order: list[list[int]]


def _latency(t: _ArchTables, qd: int, q: int, raw: bool) -> int:
    """Ticks between the end of a dependency on queue ``qd`` and an op on queue ``q``
    (module docstring: sync, access and dependency overheads; a DMA consumer's fixed cost
    is added by the caller). The scheduler reads it from its tables."""
    if qd == q and q < _DQ:
        return t.dep_overhead.get(q, 0) if raw else 0
    if q >= _DQ:
        return t.access.get(qd, 0)
    return t.sync + t.access.get(qd, 0)


@lru_cache(maxsize=64)  # a sweep over Arch fields makes an Arch per point: bounded
def _arch_tables(arch: Arch) -> _ArchTables:
    """The tables of one Arch, read only and shared (building the latency tables was 800
    calls, a fifth of a small product's timing)."""
    tick = arch.tick_hz
    per = {q: tick // engine_hz(arch, e) for e, q in _ENGINE_Q.items()}
    base = _ArchTables(
        tick, tick // int(arch.clock_hz), ceil(arch.sync_ns * tick / 1e9),
        ceil(arch.dma_fixed_ns * tick / 1e9), arch.hbm_bytes_per_s / tick, per,
        {q: arch.engine_access_overhead * per[q] for q in (1, 2, 3)},
        {q: arch.engine_dep_overhead * per[q] for q in (1, 2, 3)}, [], [])
    nq = _DQ + arch.dma_engines
    for q in range(nq):
        base.lat_raw.append([_latency(base, qd, q, True) for qd in range(nq)])
        base.lat_order.append([_latency(base, qd, q, False) for qd in range(nq)])
    return base


class _Scheduler:
    """One pass over a Program (module docstring). Per op it keeps ints in flat lists, no
    object (133,120 instructions make 133,120 ops, and objects that outlive the pass are
    what the garbage collector scans later, issue 20): ``queue`` and ``ends``, a record
    (:class:`~systolic.timing.critical_path.OpRecord`'s fields, ``RECORD`` ints an op in
    ``records``, a list: extending an ``array('q')`` cost four times as much) and, for the
    what-ifs, a plan (:class:`~systolic.timing.whatif.Plans`)."""

    def __init__(self, arch: Arch, mode: str, what_if: bool) -> None:
        self.arch = arch
        self.mode = mode
        self.what_if = what_if
        self.fill = mode == "list"
        t = _arch_tables(arch)
        self.tick, self.r_pe, self.sync, self.fixed = t.tick, t.r_pe, t.sync, t.fixed
        self.hbm_rate, self.per, self.access = t.hbm_rate, t.per, t.access
        self.dep_overhead, self.lat_raw, self.lat_order = t.dep_overhead, t.lat_raw, t.lat_order
        # per op
        self.queue: list[int] = []  # its (first) queue id
        self.records: list[int] = []  # OpRecord's fields, RECORD an op
        self.ends: list[int] = []
        self.plans = Plans()  # what_if only
        self.tracker = Tracker(self.queue, _TENSOR)
        # the resources of the real schedule
        self.timelines: dict[object, Timeline] = {}
        self.hbm = Timeline(self.fill)
        # the DMA engines' timelines: engines whose reservations so far are the same share
        # one Timeline object, split (copied) when a transfer uses only some of them; a
        # transfer over all 16 engines then fits and books once (the answers are those of
        # 16 separate timelines: a fit right after an identical timeline's fit is a no-op).
        # ``dma_one``: that Timeline while every engine still shares it (never again once
        # split)
        self.dma_tl: list[Timeline] = [Timeline(self.fill)] * arch.dma_engines
        self.dma_one: Timeline | None = self.dma_tl[0]
        # per engine set: the distinct timelines it books (each held by none of the other
        # engines) and the run-deduplicated ones it fits, valid while ``dma_split`` (the
        # splits so far) is unchanged: once a set's timelines are its own, booking it splits
        # nothing until another set splits one of them
        self.dma_split = 0
        self.dma_sets: dict[tuple[int, ...], tuple[int, list[Timeline], list[Timeline]]] = {}
        # per DMA queue id, per engine: the ends and the ops of the queue's last transfers
        self.fifo: dict[int, tuple[list[int], list[int]]] = {}
        self.pe = pe_rules.PE_IDLE
        self.pe_prev = -1  # the previous MatMul op
        self.load_last = -1  # the previous load op
        self.pending = -1  # the load op since the previous MatMul
        # memos, on frozen patterns and instructions
        self.region_ids: dict[int, tuple[AccessPattern, int]] = {}
        self.region_vals: dict[int, tuple[Region, int]] = {}
        self.pe_costs: dict[object, tuple[int, int, int]] = {}
        self.dma_bytes = self.hbm_bytes = 0
        self.arrays: tuple[np.ndarray, ...] | None = None  # _arrays()
        self.macs2 = 0  # 2 x useful MACs (two-pass halves count half)
        # (macs2, DMA bytes, HBM bytes) after the first ``cut`` instructions, for each cut
        # run() was given
        self.totals: dict[int, tuple[int, int, int]] = {0: (0, 0, 0)}
        # the transfers whose dependencies set their placement's start (time_prefixes'
        # dep_led), when asked for
        self.dep_led: list[int] | None = None

    # -- helpers ----------------------------------------------------------------------
    def _reg(self, ap: AccessPattern) -> int:
        """The tracker's id of the region an access pattern touches, memoised for this
        pass on the pattern object (by id, the pattern kept in the entry so that its id
        stays its own: an int key, where the pattern's own ``__hash__`` is a Python call;
        run() looks it up inline too), then across programs on its value (``_REGIONS``: an
        equal pattern made again, as a Program built in a loop makes them, needs no region
        computed)."""
        got = self.region_ids.get(id(ap))
        if got is not None and got[0] is ap:
            return got[1]
        reg = _REGIONS.get(ap)  # by value: every field, as two dtypes touch different bytes
        if reg is None:
            if len(_REGIONS) >= _DMA_COSTS_MAX:
                _REGIONS.clear()
            reg = _REGIONS[ap] = region(ap)
        # the tracker's id by region object (kept in the entry: its id stays its own); an
        # equal region met as another object is found equal by intern
        hit = self.region_vals.get(id(reg))
        if hit is not None and hit[0] is reg:
            rid = hit[1]
        else:
            rid = self.tracker.intern(reg)
            self.region_vals[id(reg)] = (reg, rid)
        self.region_ids[id(ap)] = (ap, rid)
        return rid

    def _timeline(self, key: object) -> Timeline:
        tl = self.timelines.get(key)
        if tl is None:
            tl = self.timelines[key] = Timeline(self.fill)
        return tl

    def _deps(self, raw: set[int], order: set[int], q: int, skip_own: bool
              ) -> tuple[int, int]:
        """(the latest end plus latency of the dependencies, that dependency: the latest of
        those ending last); each dependency and its latency go to the op's plan."""
        t, b = -1, -1
        ends, queue = self.ends, self.queue
        plans = self.what_if
        dep_op, dep_lat = self.plans.dep_op, self.plans.dep_lat
        lat_of = self.lat_raw[q]
        for d in raw:
            qd = queue[d]
            if skip_own and qd == q:
                continue  # the Tensor queue orders its own ops
            lat = lat_of[qd]
            if plans:
                dep_op.append(d)
                dep_lat.append(lat)
            e = ends[d] + lat
            if e > t or (e == t and d > b):
                t, b = e, d
        if order:
            lat_of = self.lat_order[q]
            for d in order:
                if d in raw:
                    continue  # counted once, as a read after write
                qd = queue[d]
                if skip_own and qd == q:
                    continue
                lat = lat_of[qd]
                if plans:
                    dep_op.append(d)
                    dep_lat.append(lat)
                e = ends[d] + lat
                if e > t or (e == t and d > b):
                    t, b = e, d
        return t, b

    @staticmethod
    def _fit(tls: list[Timeline], t: int, d: int) -> tuple[int, int]:
        """The earliest start >= t at which every timeline is free for d ticks, and the op
        that last delayed it (-1: none)."""
        binder = -1
        if len(tls) == 1:  # Timeline.fit is idempotent: fit(fit(t)) == fit(t)
            s, b = tls[0].fit(t, d)
            return (s, b) if s > t else (t, -1)
        while True:
            moved = False
            for tl in tls:
                s, b = tl.fit(t, d)
                if s > t:
                    t, binder, moved = s, b, True
            if not moved:
                return t, binder

    def _add(self, rec: tuple[int, ...], q: int, end: int, kind: int, dur: int, extra: int,
             res: tuple[object, ...], qid: int) -> int:
        """A new op: its record, queue and end and (what_if) its plan: kind, duration,
        the PE's interval or a transfer's HBM ticks, resources and DMA queue id (its
        dependencies were added by :meth:`_deps`)."""
        op = len(self.queue)
        self.queue.append(q)
        self.records.extend(rec)
        self.ends.append(end)
        if self.what_if:
            p = self.plans
            p.kind.append(kind)
            p.dur.append(dur)
            p.extra.append(extra)
            p.res.append(res)
            p.qid.append(qid)
            p.dep_end.append(len(p.dep_op))
        return op

    # -- ops --------------------------------------------------------------------------
    def _ports(self, engine: Engine, aps: tuple[object, ...]) -> list[object]:
        """The shared SBUF/PSUM ports an engine instruction needs (module docstring)."""
        arch = self.arch
        out: list[object] = []
        spaces = {ap.space for ap in aps}  # type: ignore[attr-defined]
        if arch.shared_engine_ports:
            if engine in (Engine.VECTOR, Engine.GPSIMD) and Space.SBUF in spaces:
                out.append("sbuf port")
            if engine in (Engine.VECTOR, Engine.SCALAR) and Space.PSUM in spaces:
                out.append("psum port")
        elif engine in (Engine.VECTOR, Engine.SCALAR) and Space.PSUM in spaces:
            for ap in aps:
                if ap.space is Space.PSUM:  # type: ignore[attr-defined]
                    # the bytes it touches (the span includes the offset already)
                    lo, hi = ap.free_bytes_span  # type: ignore[attr-defined]
                    for bank in range(lo // arch.psum_bank_bytes,
                                      (hi - 1) // arch.psum_bank_bytes + 1):
                        out.append(("psum bank", bank))
        return out

    def _engine_op(self, i: int, ins: object, engine: Engine, rd: tuple[int, ...],
                   wr: tuple[int, ...], own: Cause, aps: tuple[object, ...]) -> int:
        q = _ENGINE_Q[engine]
        dur = engine_cycles(ins, self.arch, engine) * self.per[q]
        raw, order = self.tracker.deps(rd, wr)
        dt, db = self._deps(raw, order, q, False)
        t0 = max(dt, 0)
        keys = (q, *self._ports(engine, aps))
        tls = [self._timeline(k) for k in keys]
        t, rb = self._fit(tls, t0, dur)
        op = len(self.queue)
        for tl in tls:
            tl.reserve(t, t + dur, op)
        c = int(own)
        if t > t0 and rb >= 0:
            rec = (i, 1, t, c, rb, t, t, _C_IDLE)
        elif db >= 0 and dt > 0:
            rec = (i, 1, t, c, db, self.ends[db], t, _C_SYNC)
        else:
            rec = (i, 1, t, c, -1, 0, t, _C_IDLE)
        self._add(rec, q, t + dur, _ENGINE, dur, 0, keys, 0)
        self.tracker.commit(op, rd, wr)
        return op

    def _dma_cost(self, src: AccessPattern, dst: AccessPattern) -> _DmaPlan:
        """What placing a transfer needs (:data:`_DmaPlan`), memoised on the two pattern
        objects (by id, as :meth:`_reg`) and its cost, across programs, on its shape."""
        ids = (id(src), id(dst))
        known = _DMA_OF.get(ids)  # across programs (see _DMA_OF)
        if known is not None and known[0] is src and known[1] is dst and \
                known[2] is self.arch:
            return known[3]
        # a transfer's cost does not depend on its offsets (timing/dma.py), so the memo key
        # leaves them out: one entry per transfer shape, not per address
        key = (self.arch, src.space, src.partition, src.partitions, src.dims, src.dtype,
               src.partition_step, dst.space, dst.partition, dst.partitions, dst.dims,
               dst.dtype, dst.partition_step)
        plan = _DMA_COSTS.get(key)
        if plan is None:
            c = dma_cost(src, dst, self.arch)
            occ = max(1, ceil(c.engine_ns * self.tick / 1e9))
            hb = max(1, ceil(c.hbm_bytes / self.hbm_rate)) if c.hbm_bytes else 0
            engines = c.engines
            e0 = engines[0]
            # consecutive engines (no wrap past the last) are read and written as list slices
            e1 = e0 + len(engines) if engines == tuple(range(e0, e0 + len(engines))) else 0
            if len(_DMA_COSTS) >= _DMA_COSTS_MAX:
                _DMA_COSTS.clear()
            plan = _DMA_COSTS[key] = (engines, e0, e1, occ, hb, c.bytes, c.hbm_bytes,
                                      queue_for(src, dst))
        if len(_DMA_OF) >= _DMA_COSTS_MAX:
            _DMA_OF.clear()
        _DMA_OF[ids] = (src, dst, self.arch, plan)
        return plan

    def _book_dma(self, engines: tuple[int, ...], t: int, end: int, op: int) -> None:
        """Reserve [t, end) on each engine's timeline: once on a timeline shared by exactly
        these engines (and others that share it with no other), on a copy for the engines
        used when some sharing it are not."""
        dma_tl = self.dma_tl
        if self.dma_one is not None and len(engines) == len(dma_tl):
            self.dma_one.reserve(t, end, op)  # every engine, one shared timeline
            return
        got = self.dma_sets.get(engines)
        if got is not None and got[0] == self.dma_split:
            for tl in got[1]:
                tl.reserve(t, end, op)
            return
        done: set[int] = set()
        for e in engines:
            tl = dma_tl[e]
            if id(tl) in done:
                continue
            done.add(id(tl))
            mine = [x for x in engines if dma_tl[x] is tl]
            if sum(1 for x in dma_tl if x is tl) > len(mine):
                tl = tl.copy()
                for x in mine:
                    dma_tl[x] = tl
                done.add(id(tl))
                self.dma_one = None
                self.dma_split += 1
            tl.reserve(t, end, op)
        own = list({id(dma_tl[e]): dma_tl[e] for e in engines}.values())
        self.dma_sets[engines] = (self.dma_split, own, self._run_timelines(engines))

    def _run_timelines(self, engines: tuple[int, ...]) -> list[Timeline]:
        """The engines' timelines, a run of engines sharing one timeline as one."""
        dma_tl = self.dma_tl
        tls: list[Timeline] = []
        for e in engines:
            tl = dma_tl[e]
            if not tls or tls[-1] is not tl:
                tls.append(tl)
        return tls

    def _dma_op(self, i: int, src: AccessPattern, dst: AccessPattern, qid: int,
                rd: tuple[int, ...], wr: tuple[int, ...], extra: int = -1) -> int:
        """A transfer on DMA queue ``qid`` (-1: the model's rule, timing/dma.py queue_for)."""
        engines, e0, e1, occ, hb, nbytes, hbm_bytes, rule = self._dma_cost(src, dst)
        if qid < 0:
            qid = rule
        q0 = _DQ + e0
        raw, order = self.tracker.deps(rd, wr)
        if extra >= 0:
            raw.add(extra)
        dt, db = self._deps(raw, order, q0, False)
        ready = (dt if dt > 0 else 0) + self.fixed
        t, fifo_op = ready, -1
        fifo = self.fifo.get(qid)
        if fifo is None:
            n = self.arch.dma_engines
            fifo = self.fifo[qid] = ([0] * n, [-1] * n)
        fends, fops = fifo
        if e1:  # the first engine (in order) whose last transfer ends latest
            fe = max(fends[e0:e1])
            if fe > t:
                t, fifo_op = fe, fops[fends.index(fe, e0, e1)]
        else:
            for e in engines:
                if fends[e] > t:
                    t, fifo_op = fends[e], fops[e]
        fifo_t = t
        if fifo_op < 0 and db >= 0 and self.dep_led is not None:
            self.dep_led.append(i)  # its dependencies, not its queue, set fifo_t
        # the engines' timelines, a run of engines sharing one timeline as one: fitting a
        # timeline again right after fitting it (or its twin) moves nothing
        one = self.dma_one
        if one is not None:
            tls = [one]
        else:
            got = self.dma_sets.get(engines)
            tls = (got[2] if got is not None and got[0] == self.dma_split
                   else self._run_timelines(engines))
        hbm = self.hbm
        while True:
            if len(tls) == 1:  # _fit of one timeline
                s1, rb = tls[0].fit(t, occ)
                if s1 > t:
                    t = s1
                else:
                    rb = -1
            else:
                t, rb = self._fit(tls, t, occ)
            sh, hbind = hbm.fit(t, hb) if hb else (t, -1)
            end = max(t + occ, sh + hb)
            if end == t + occ:  # [t, end) was just found free on every engine
                break
            s2, rb2 = self._fit(tls, t, end - t)
            if s2 == t:
                break
            t, rb = s2, rb2
        op = len(self.queue)
        if one is not None and len(engines) == len(self.dma_tl):
            one.reserve(t, end, op)  # every engine, one shared timeline
        else:
            self._book_dma(engines, t, end, op)
        if hb:
            hbm.reserve(sh, sh + hb, op)
        if e1:
            n = e1 - e0
            fends[e0:e1] = [end] * n
            fops[e0:e1] = [op] * n
        else:
            for e in engines:
                fends[e], fops[e] = end, op
        n = len(engines)
        if hb and sh + hb > t + occ and sh > t:  # the shared HBM binds
            rec = (i, n, t, _C_DMA, hbind, sh, sh, _C_IDLE)
        elif t > ready:  # an engine, or the queue's previous transfer, held it
            rec = (i, n, t, _C_DMA, rb if t > fifo_t else fifo_op, t, t, _C_IDLE)
        elif db >= 0:
            rec = (i, n, t, _C_DMA, db, self.ends[db], t, _C_LAT)
        else:
            rec = (i, n, t, _C_DMA, -1, 0, t, _C_LAT)
        # the re-run keeps each engine and each engine's queue in order
        self._add(rec, q0, end, _DMA, occ, hb, engines, qid)
        self.tracker.commit(op, rd, wr)
        self.dma_bytes += nbytes
        self.hbm_bytes += hbm_bytes
        return op

    def _pe_cost(self, ins: MatMul | MatmultMx) -> tuple[int, int, int]:
        """(interval, duration, 2 x useful MACs) of a MatMul, in ticks (memoised on
        :func:`~systolic.timing.pe.cost_key`)."""
        key = pe_rules.cost_key(ins)
        hit = self.pe_costs.get(key)
        if hit is None:
            r = self.r_pe
            passes = 2 if isinstance(ins, MatMul) and ins.fp32_pass else 1
            hit = self.pe_costs[key] = (pe_rules.matmul_interval(ins, self.arch) * r,
                                        pe_rules.matmul_duration(ins, self.arch) * r,
                                        2 * pe_rules.useful_macs(ins) // passes)
        return hit

    def _compute_op(self, i: int, ins: MatMul | MatmultMx, rd: tuple[int, ...],
                    wr: tuple[int, ...]) -> None:
        interval, dur, macs2 = self._pe_cost(ins)
        raw, order = self.tracker.deps(rd, wr, True)
        dt, db = self._deps(raw, order, _TENSOR, True)
        t, why, self.pe = pe_rules.compute_step(self.pe, interval, max(dt, 0))
        if why is pe_rules.Bind.READY:
            rec = (i, 1, t, _C_PE, db, self.ends[db], t, _C_SYNC)
        elif why is pe_rules.Bind.WEIGHT_LOAD:
            rec = (i, 1, t, _C_PE, self.pending, t, t, _C_IDLE)
        elif why is pe_rules.Bind.INTERVAL:
            rec = (i, 1, t, _C_PE, self.pe_prev, t, t, _C_IDLE)
        else:
            rec = (i, 1, t, _C_PE, -1, 0, t, _C_IDLE)
        op = self._add(rec, _TENSOR, t + dur, _PE, dur, interval, (), 0)
        self.pe_prev, self.pending = op, -1
        self.tracker.commit(op, rd, wr)
        self.macs2 += macs2

    def _load_op(self, i: int, ins: object, rd: tuple[int, ...]) -> None:
        c = pe_rules.load_cycles(ins, self.arch) * self.r_pe  # type: ignore[arg-type]
        raw, order = self.tracker.deps(rd, (), True)
        dt, db = self._deps(raw, order, _TENSOR, True)
        before = self.pe
        t, why, self.pe = pe_rules.load_step(self.pe, c, max(dt, 0))
        if why is pe_rules.Bind.READY:
            rec = (i, 1, t, _C_WL, db, self.ends[db], t, _C_SYNC)
        elif why is pe_rules.Bind.LOAD_QUEUE:
            b = self.load_last if t == before.load_free else self.pe_prev
            rec = (i, 1, t, _C_WL, b, t, t, _C_IDLE)
        else:
            rec = (i, 1, t, _C_WL, -1, 0, t, _C_IDLE)
        op = self._add(rec, _TENSOR, t + c, _LOAD, c, 0, (), 0)
        self.load_last = self.pending = op
        self.tracker.commit(op, rd, ())

    # -- the pass ---------------------------------------------------------------------
    def run(self, program: Program, cuts: Sequence[int] | None = None) -> None:
        """Schedule every instruction; keep the totals of the prefixes ``cuts`` (None:
        every prefix) for :meth:`assemble`."""
        arch = self.arch
        reg = self._reg
        rids = self.region_ids
        totals = self.totals
        stops = sorted({c for c in cuts if c > 0}) if cuts is not None else []
        every, k = cuts is None, 0
        stop = stops[0] - 1 if stops else -1  # the next instruction that ends a prefix
        kinds = _KINDS
        dma_op, compute_op = self._dma_op, self._compute_op
        # Any: the kind below says each instruction's type, which mypy cannot narrow on
        instructions: Sequence[Any] = program.instructions
        for i, ins in enumerate(instructions):
            tp = type(ins)
            got_kind = kinds.get(tp)
            if got_kind is None:
                got_kind = kinds[tp] = (_kind(tp), *ACCESS[tp])
            kind, rf, wf = got_kind
            # the regions it reads and writes (one pattern: _reg's memo looked up here)
            if len(rf) == 1:
                ap = getattr(ins, rf[0])
                if ap is None:
                    rd: tuple[int, ...] = ()
                else:
                    got = rids.get(id(ap))
                    rd = (got[1],) if got is not None and got[0] is ap else (reg(ap),)
            else:
                rd = tuple([reg(ap) for f in rf if (ap := getattr(ins, f)) is not None])
            if len(wf) == 1:
                ap = getattr(ins, wf[0])
                if ap is None:
                    wr: tuple[int, ...] = ()
                else:
                    got = rids.get(id(ap))
                    wr = (got[1],) if got is not None and got[0] is ap else (reg(ap),)
            else:
                wr = tuple([reg(ap) for f in wf if (ap := getattr(ins, f)) is not None])
            if kind == _K_DMA_LOAD:
                dma_op(i, ins.src, ins.dst, -1, rd, wr)
            elif kind == _K_COMPUTE:
                compute_op(i, ins, rd, wr)
            elif kind == _K_LOAD:
                self._load_op(i, ins, rd)
            elif kind == _K_COPY:
                dma_op(i, ins.src, ins.dst, ins.queue, rd, wr)
            elif kind == _K_INDIRECT:
                # the bytes of K rows, a descriptor per row at least (timing/dma.py); the
                # dependencies are ACCESS's: the index tile and the whole table
                rows = indirect_rows(ins.table, ins.data.partitions)
                src, dst = (ins.data, rows) if ins.scatter else (rows, ins.data)
                dma_op(i, src, dst, ins.queue, rd, wr)
            elif kind == _K_READOUT:
                eng = Engine(arch.readout_engine)
                src = ins.src
                ev = self._engine_op(i, ins, eng, rd, (), Cause.PSUM_EVACUATION, (src,))
                dma_op(i, src, ins.dst, -1, (), wr, extra=ev)
            elif getattr(ins, "engine", None) in _ENGINE_CAUSE:
                e = ins.engine
                self._engine_op(i, ins, e, rd, wr, _ENGINE_CAUSE[e],
                                (*reads(ins), *writes(ins)))
            else:
                name = str(getattr(getattr(ins, "engine", None), "value", "?"))
                raise SystolicError(f"instruction {i}: the whole-core timing does not know "
                                    f"{tp.__name__} on the {name} engine")
            if every or i == stop:
                totals[i + 1] = (self.macs2, self.dma_bytes, self.hbm_bytes)
                if not every:
                    k += 1
                    stop = stops[k] - 1 if k < len(stops) else -1

    def _arrays(self) -> tuple[np.ndarray, ...]:
        """Per op: instruction, start, end, queue, queues held, own cause (built once)."""
        got = self.arrays
        if got is None or len(got[0]) != len(self.queue):
            n = len(self.queue)
            recs = np.fromiter(self.records, dtype=np.int64,
                               count=len(self.records)).reshape(n, RECORD)
            got = self.arrays = (
                recs[:, 0].copy(), recs[:, 2].copy(), np.array(self.ends, dtype=np.int64),
                np.array(self.queue, dtype=np.int64), recs[:, 1].copy(), recs[:, 3].copy())
        return got

    def assemble(self, cut: int, fmt: str, mode: str) -> CoreTiming:
        """The summary of the ops of instructions ``< cut``."""
        arch = self.arch
        a_instr, a_starts, a_ends, a_queue, a_nqs, a_own = self._arrays()
        n = int(np.searchsorted(a_instr, cut))  # ops are in instruction order
        instr, starts, ends = a_instr[:n].copy(), a_starts[:n].copy(), a_ends[:n].copy()
        queue, nqs, own = a_queue[:n].copy(), a_nqs[:n].copy(), a_own[:n].copy()
        latency = int(ends.max()) if n else 0
        macs2, dma_bytes, hbm_bytes = self.totals[cut]
        names = queue_names(arch)
        if n <= BUSY_NUMPY:
            rec = self.records
            b, c = busy_small(rec[2:RECORD * n:RECORD], self.ends[:n], self.queue[:n],
                              rec[1:RECORD * n:RECORD], len(names), arch.dma_engines)
        else:
            b, c = busy_grouped(starts, ends, queue, nqs, len(names), arch.dma_engines)
        busy = dict(zip(names, b, strict=True))
        counts = dict(zip(names, c, strict=True))
        # the what-if latencies: one longest-path pass over the plans, when first read
        what = (LazyWhatIf(tuple(WHAT_IF), self.plans, a_starts, n, self.fixed,
                           arch.dma_engines) if self.what_if else {})
        return CoreTiming(
            arch=arch, tick_hz=self.tick, latency=latency,
            op_instr=instr, op_queue=queue, op_queues=nqs,
            starts=starts, ends=ends, bound_ticks=critical_path(self.records, ends, latency),
            busy_ticks=busy, instructions=counts, dma_bytes=dma_bytes,
            hbm_bytes=hbm_bytes, useful_macs=macs2 // 2, fmt=fmt, perf_mode=mode,
            op_cause=own, what_if=what, schedule=self.mode)
