"""What-if latencies of a whole-core schedule (issue 18 part 5; timing/core.py "What-if"):
the same schedule re-run with one set of costs at zero. Every op keeps its dependencies and
its place in each resource's order (the real schedule's start order), so a what-if latency
is never above the real one, and says how far removing that cost alone could take the
kernel.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import NamedTuple

from . import pe as pe_rules
from .critical_path import OpRecord

__all__ = ["LazyWhatIf", "Plan", "rerun"]

# the plan kind each what-if zeroes (WHAT_IF's keys; the PE's loads go with its MatMuls)
_FREE = {"dma_free": "dma", "engines_free": "engine", "pe_free": "pe"}


class Plan(NamedTuple):
    """What the what-if pass needs of one op: its kind (``pe``, ``load``, ``engine``,
    ``dma``), its dependencies as (op, latency in ticks), the resources it holds in the
    real schedule's order (a transfer: its DMA engines, each engine's ``queue`` held too),
    its duration(s) and, for the PE, its issue interval."""

    kind: str
    deps: tuple[tuple[int, int], ...]
    resources: tuple[object, ...]
    dur: int
    interval: int = 0
    hbm: int = 0
    queue: int = 0


def rerun(plans: Sequence[Plan], records: Sequence[OpRecord], free: str, n: int,
          fixed: int) -> int:
    """The latency of the first ``n`` ops with the costs ``free`` names at zero: each op in
    the real schedule's start order, after its dependencies and after the previous op of
    each resource it holds. ``fixed`` is the DMA fixed cost in ticks (zero with DMA free)."""
    kind_free = _FREE[free]
    order = sorted(range(n), key=lambda op: (records[op].start, op))
    ends = [0] * n
    res_free: dict[object, int] = {}
    hbm_free = 0
    pe = pe_rules.PE_IDLE
    if kind_free == "dma":
        fixed = 0
    latency = 0
    for op in order:
        p = plans[op]
        zero = p.kind == kind_free or (kind_free == "pe" and p.kind == "load")
        t = 0
        for d, lat in p.deps:
            e = ends[d] + lat
            if e > t:
                t = e
        dur = 0 if zero else p.dur
        if p.kind == "pe":
            t, _, pe = pe_rules.compute_step(pe, 0 if zero else p.interval, t)
            end = t + dur
        elif p.kind == "load":
            t, _, pe = pe_rules.load_step(pe, dur, t)
            end = t + dur
        else:
            res: Sequence[object] = p.resources
            if p.kind == "dma":
                t += fixed
                res = [*(("dma", e) for e in res), *(("fifo", e, p.queue) for e in res)]
            for r in res:
                f = res_free.get(r, 0)
                if f > t:
                    t = f
            end = t + dur
            if p.kind == "dma" and p.hbm and not zero:
                sh = max(t, hbm_free)
                hbm_free = sh + p.hbm
                end = max(end, hbm_free)
            for r in res:
                res_free[r] = end
        ends[op] = end
        if end > latency:
            latency = end
    return latency


class LazyWhatIf(Mapping[str, int]):
    """The what-if latencies of a schedule's first ``n`` ops, each re-run on first use: a
    caller that never reads them (``systolic matmul``, a sweep's matmul point) pays for
    none of the three re-runs. A read-only mapping from the what-if names (WHAT_IF's keys,
    in their order) to latencies in ticks."""

    __slots__ = ("_fixed", "_got", "_n", "_names", "_plans", "_records")

    def __init__(self, names: Sequence[str], plans: Sequence[Plan],
                 records: Sequence[OpRecord], n: int, fixed: int) -> None:
        self._names = tuple(names)
        self._plans, self._records, self._n, self._fixed = plans, records, n, fixed
        self._got: dict[str, int] = {}

    def __getitem__(self, key: str) -> int:
        got = self._got.get(key)
        if got is None:
            if key not in self._names:
                raise KeyError(key)
            got = self._got[key] = rerun(self._plans, self._records, key, self._n,
                                         self._fixed)
        return got

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        return repr(dict(self))
