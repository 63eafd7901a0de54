"""The critical path of a whole-core schedule by cause (timing/core.py "Critical path").

Each op records which constraint set its start (its binder: a dependency, the op that held
its resource, the HBM server, or the PE's issue interval / weight load) and the time on that
binder the constraint refers to. Walking back from the op that ends last, each op's own
time is charged to its cause and each wait between a binder and the op to its lag cause;
the parts telescope, so they sum to the latency exactly.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .result import Cause

__all__ = ["OpRecord", "critical_path"]


class OpRecord(NamedTuple):
    """One timed op of the real schedule: its instruction, how many queues it holds, its
    start, the cause of its own time, its binder (-1: a root) with the time ``ref`` on the
    binder the constraint refers to, when it entered (``enter``) and the cause of the wait
    ``ref -> enter``."""

    instr: int
    queues: int
    start: int
    own: Cause
    binder: int
    ref: int
    enter: int
    lag: Cause


def critical_path(records: list[OpRecord], ends: np.ndarray, latency: int) -> dict[str, int]:
    """Ticks of the latency by cause (:data:`systolic.timing.result.CAUSES` keys)."""
    parts = [0] * len(Cause)
    if not len(ends):
        return {c.key: 0 for c in Cause}
    op = int(np.argmax(ends))
    t = latency
    while op >= 0:
        r = records[op]
        lo = r.ref if r.binder >= 0 else 0
        if lo > t:
            lo = t
        ent = min(max(r.enter, lo), t)
        parts[r.own] += t - ent
        parts[r.lag] += ent - lo
        t = lo
        op = r.binder
    parts[Cause.IDLE] += t  # a root that does not start at 0
    return {c.key: parts[c] for c in Cause}
