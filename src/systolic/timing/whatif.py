"""What-if latencies of a whole-core schedule (issue 18 part 5; timing/core.py "What-if"):
the same schedule re-run with one set of costs at zero. Every op keeps its dependencies and
its place in each resource's order (the real schedule's start order), so a what-if latency
is never above the real one, and says how far removing that cost alone could take the
kernel.

:func:`rerun` is the re-run as defined, written plainly: each op in the real schedule's
start order, after its dependencies and after the previous op of each resource it holds.
The order is fixed, so "the previous op of each resource" is too: :class:`LazyWhatIf` finds
those ops once (:func:`_resource_preds`) and then each what-if is one pass of longest-path
arithmetic over lists (:func:`_longest`), tested against :func:`rerun` op for op
(tests/test_timing_fast_paths.py; issue 20: the three re-runs of a 133,120-instruction
kernel took 1.3 s).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from ..collector import paused
from . import pe as pe_rules

__all__ = ["PLAN_KINDS", "LazyWhatIf", "Plan", "Plans", "rerun"]

# Plan.kind: a MatMul, a weight load, a Vector/Scalar/GpSimd instruction, a DMA transfer
PLAN_KINDS = (PE, LOAD, ENGINE, DMA) = range(4)
# the plan kinds each what-if zeroes (WHAT_IF's keys; the PE's loads go with its MatMuls)
_FREE: dict[str, tuple[int, ...]] = {"dma_free": (DMA,), "engines_free": (ENGINE,),
                                     "pe_free": (PE, LOAD)}


class Plan(NamedTuple):
    """What the what-if pass needs of one op: its kind (:data:`PLAN_KINDS`), its
    dependencies as (op, latency in ticks), the resources it holds in the real schedule's
    order (an engine instruction: its timeline keys; a transfer: its DMA engines, each
    engine's ``queue`` held too), its duration, for the PE its issue interval, for a
    transfer its HBM ticks (:meth:`Plans.plan`)."""

    kind: int
    deps: tuple[tuple[int, int], ...]
    resources: tuple[object, ...]
    dur: int
    interval: int = 0
    hbm: int = 0
    queue: int = 0


class Plans:
    """Every op's :class:`Plan`, as parallel lists of ints (the scheduler appends to them;
    no object per op): ``kind``, ``dur``, ``extra`` (the PE's issue interval, a transfer's
    HBM ticks), ``res`` (the resources: shared tuples), ``qid`` (a transfer's DMA queue),
    and the dependencies of op ``i`` at ``dep_end[i - 1] .. dep_end[i] - 1`` of ``dep_op``
    (the op) and ``dep_lat`` (the latency)."""

    __slots__ = ("dep_end", "dep_lat", "dep_op", "dur", "extra", "kind", "qid", "res")

    def __init__(self) -> None:
        self.kind: list[int] = []
        self.dur: list[int] = []
        self.extra: list[int] = []
        self.res: list[tuple[object, ...]] = []
        self.qid: list[int] = []
        self.dep_end: list[int] = []
        self.dep_op: list[int] = []
        self.dep_lat: list[int] = []

    def __len__(self) -> int:
        return len(self.kind)

    def plan(self, op: int) -> Plan:
        """Op ``op``'s plan as one object."""
        lo, hi = (self.dep_end[op - 1] if op else 0), self.dep_end[op]
        kind, extra = self.kind[op], self.extra[op]
        return Plan(kind, tuple(zip(self.dep_op[lo:hi], self.dep_lat[lo:hi], strict=True)),
                    self.res[op], self.dur[op], extra if kind == PE else 0,
                    extra if kind == DMA else 0, self.qid[op])


def _order(starts: Sequence[int] | np.ndarray, n: int) -> list[int]:
    """The first ``n`` ops in the real schedule's start order (ties: program order)."""
    return np.argsort(np.asarray(starts[:n], dtype=np.int64), kind="stable").tolist()


def _resources(p: Plan) -> Sequence[object]:
    """The resource keys an op holds in the re-run (a transfer: each engine, and each
    engine's queue)."""
    if p.kind == DMA:
        return [*(("dma", e) for e in p.resources), *(("fifo", e, p.queue) for e in
                                                      p.resources)]
    return p.resources


def rerun(plans: Plans, starts: Sequence[int], free: str, n: int, fixed: int) -> int:
    """The latency of the first ``n`` ops with the costs ``free`` names at zero: each op in
    the real schedule's start order (``starts``), after its dependencies and after the
    previous op of each resource it holds. ``fixed`` is the DMA fixed cost in ticks (zero
    with DMA free). The definition, written plainly; :class:`LazyWhatIf` computes the
    same figure faster."""
    zeroed = _FREE[free]
    ends = [0] * n
    res_free: dict[object, int] = {}
    hbm_free = 0
    pe = pe_rules.PE_IDLE
    if free == "dma_free":
        fixed = 0
    latency = 0
    for op in _order(starts, n):
        p = plans.plan(op)
        zero = p.kind in zeroed
        t = 0
        for d, lat in p.deps:
            e = ends[d] + lat
            if e > t:
                t = e
        dur = 0 if zero else p.dur
        if p.kind == PE:
            t, _, pe = pe_rules.compute_step(pe, 0 if zero else p.interval, t)
            end = t + dur
        elif p.kind == LOAD:
            t, _, pe = pe_rules.load_step(pe, dur, t)
            end = t + dur
        else:
            if p.kind == DMA:
                t += fixed
            res = _resources(p)
            for r in res:
                f = res_free.get(r, 0)
                if f > t:
                    t = f
            end = t + dur
            if p.kind == DMA and p.hbm and not zero:
                sh = max(t, hbm_free)
                hbm_free = sh + p.hbm
                end = max(end, hbm_free)
            for r in res:
                res_free[r] = end
        ends[op] = end
        if end > latency:
            latency = end
    return latency


def _resource_preds(plans: Plans, order: list[int], n_dma: int) -> list[tuple[int, ...]]:
    """Per op, the ops that held one of its resources last before it in ``order`` (each
    once; ``()`` for the PE's ops, which hold none): the re-run starts an op no sooner than
    their ends. A transfer over consecutive DMA engines reads and writes its engines' (and
    queue's) last ops as list slices; ``n_dma`` is the number of DMA engines."""
    preds: list[tuple[int, ...]] = [()] * len(plans)
    last: dict[object, int] = {}  # an engine instruction's timeline key -> op
    last_dma = [-1] * n_dma  # per DMA engine
    last_fifo: dict[int, list[int]] = {}  # per DMA queue id, per engine
    spans: dict[tuple[object, ...], tuple[int, int]] = {}
    kinds, res, qids = plans.kind, plans.res, plans.qid
    for op in order:
        kind = kinds[op]
        if kind == DMA:
            engines: tuple[int, ...] = res[op]  # type: ignore[assignment]
            fifo = last_fifo.get(qids[op])
            if fifo is None:
                fifo = last_fifo[qids[op]] = [-1] * n_dma
            span = spans.get(engines)
            if span is None:
                e0 = engines[0]
                span = spans[engines] = ((e0, e0 + len(engines))
                                         if engines == tuple(range(e0, e0 + len(engines)))
                                         else (0, 0))
            e0, e1 = span
            if e1:
                got = {*last_dma[e0:e1], *fifo[e0:e1]}
                last_dma[e0:e1] = fifo[e0:e1] = [op] * (e1 - e0)
            else:
                got = {last_dma[e] for e in engines} | {fifo[e] for e in engines}
                for e in engines:
                    last_dma[e] = fifo[e] = op
        elif kind == ENGINE:
            got = {last.get(k, -1) for k in res[op]}
            for k in res[op]:
                last[k] = op
        else:
            continue
        got.discard(-1)
        preds[op] = tuple(got)
    return preds


def _longest(plans: Plans, order: list[int], preds: list[tuple[int, ...]], fixed: int
             ) -> tuple[int, int, int]:
    """:func:`rerun`'s latencies with DMA, engines and PE free (in that order), in one pass
    of longest-path arithmetic: an op starts at the latest end (plus latency) of its
    dependencies, then (a transfer) its fixed cost, then the latest end of its resource
    predecessors. The HBM server and the PE, the two resources with more state than "free
    at", are stepped as :func:`rerun` steps them: the PE's issue rules of
    :func:`systolic.timing.pe.compute_step` and ``load_step`` written out here on plain
    ints, one state per what-if (tests/test_timing_fast_paths.py holds them to rerun)."""
    n = len(plans)
    e0, e1, e2 = [0] * n, [0] * n, [0] * n  # ends with DMA / engines / PE free
    lat0 = lat1 = lat2 = 0
    h1 = h2 = 0  # when HBM is free (no HBM time with DMA free)
    # the PE's state (PeQueue) per what-if: previous MatMul start, earliest next MatMul,
    # end of the loads since that MatMul (-1: none), end of the load queue
    ps0, nc0, le0, lf0 = pe_rules.PE_IDLE
    ps1, nc1, le1, lf1 = pe_rules.PE_IDLE
    ps2, nc2, le2, lf2 = pe_rules.PE_IDLE
    kinds, durs, extras, dep_end, dep_op, dep_lat = (plans.kind, plans.dur, plans.extra,
                                                     plans.dep_end, plans.dep_op,
                                                     plans.dep_lat)
    for op in order:
        t0 = t1 = t2 = 0
        for k in range(dep_end[op - 1] if op else 0, dep_end[op]):
            d, lat = dep_op[k], dep_lat[k]
            e = e0[d] + lat
            if e > t0:
                t0 = e
            e = e1[d] + lat
            if e > t1:
                t1 = e
            e = e2[d] + lat
            if e > t2:
                t2 = e
        kind, dur = kinds[op], durs[op]
        if kind == DMA:
            t1 += fixed
            t2 += fixed
            for d in preds[op]:
                if e0[d] > t0:
                    t0 = e0[d]
                if e1[d] > t1:
                    t1 = e1[d]
                if e2[d] > t2:
                    t2 = e2[d]
            end0, end1, end2 = t0, t1 + dur, t2 + dur
            hbm = extras[op]
            if hbm:
                h1 = (h1 if h1 > t1 else t1) + hbm
                if h1 > end1:
                    end1 = h1
                h2 = (h2 if h2 > t2 else t2) + hbm
                if h2 > end2:
                    end2 = h2
        elif kind == ENGINE:
            for d in preds[op]:
                if e0[d] > t0:
                    t0 = e0[d]
                if e1[d] > t1:
                    t1 = e1[d]
                if e2[d] > t2:
                    t2 = e2[d]
            end0, end1, end2 = t0 + dur, t1, t2 + dur
        elif kind == PE:  # compute_step: max(interval, loads since, ready)
            interval = extras[op]
            if nc0 > t0:
                t0 = nc0
            if le0 > t0:
                t0 = le0
            ps0, nc0, le0 = t0, t0 + interval, -1
            if nc1 > t1:
                t1 = nc1
            if le1 > t1:
                t1 = le1
            ps1, nc1, le1 = t1, t1 + interval, -1
            if nc2 > t2:
                t2 = nc2
            if le2 > t2:
                t2 = le2
            ps2, nc2, le2 = t2, t2, -1
            end0, end1, end2 = t0 + dur, t1 + dur, t2
        else:  # LOAD, load_step: max(load queue, previous MatMul's start, ready)
            if lf0 > t0:
                t0 = lf0
            if ps0 > t0:
                t0 = ps0
            le0 = lf0 = end0 = t0 + dur
            if lf1 > t1:
                t1 = lf1
            if ps1 > t1:
                t1 = ps1
            le1 = lf1 = end1 = t1 + dur
            if lf2 > t2:
                t2 = lf2
            if ps2 > t2:
                t2 = ps2
            le2 = lf2 = end2 = t2
        e0[op], e1[op], e2[op] = end0, end1, end2
        if end0 > lat0:
            lat0 = end0
        if end1 > lat1:
            lat1 = end1
        if end2 > lat2:
            lat2 = end2
    return lat0, lat1, lat2


class LazyWhatIf(Mapping[str, int]):
    """The what-if latencies of a schedule's first ``n`` ops, computed (all three in one
    pass) when the first is read: a caller that never reads them (``systolic matmul``, a
    sweep's matmul point) pays for none. A read-only mapping from the what-if names
    (WHAT_IF's keys, in their order) to latencies in ticks. ``plans`` are the ops' plans,
    ``starts`` their start ticks in the real schedule, ``fixed`` the DMA fixed cost in
    ticks, ``dma_engines`` the Arch's count."""

    __slots__ = ("_dma", "_fixed", "_got", "_n", "_names", "_plans", "_starts")

    def __init__(self, names: Sequence[str], plans: Plans,
                 starts: Sequence[int] | np.ndarray, n: int, fixed: int,
                 dma_engines: int) -> None:
        self._names = tuple(names)
        self._plans, self._starts, self._n, self._fixed = plans, starts, n, fixed
        self._dma = dma_engines
        self._got: dict[str, int] | None = None

    def _compute(self) -> dict[str, int]:
        with paused():  # lists of ints and a tuple an op
            order = _order(self._starts, self._n)
            preds = _resource_preds(self._plans, order, self._dma)
            lat = dict(zip(("dma_free", "engines_free", "pe_free"),
                           _longest(self._plans, order, preds, self._fixed), strict=True))
        return {k: lat[k] for k in self._names}

    def __getitem__(self, key: str) -> int:
        if key not in self._names:
            raise KeyError(key)
        if self._got is None:
            self._got = self._compute()
        return self._got[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        return repr(dict(self))
