"""The critical path of a whole-core schedule by cause (timing/core.py "Critical path").

Each op records which constraint set its start (its binder: a dependency, the op that held
its resource, the HBM server, or the PE's issue interval / weight load) and the time on that
binder the constraint refers to. Walking back from the op that ends last, each op's own
time is charged to its cause and each wait between a binder and the op to its lag cause;
the parts telescope, so they sum to the latency exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from .result import Cause

__all__ = ["RECORD", "OpRecord", "critical_path"]


class OpRecord(NamedTuple):
    """One timed op of the real schedule: its instruction, how many queues it holds, its
    start, the cause of its own time (a :class:`Cause` value), its binder (-1: a root) with
    the time ``ref`` on the binder the constraint refers to, when it entered (``enter``)
    and the cause of the wait ``ref -> enter``. The scheduler keeps these fields, in this
    order, in one flat list of ints (``RECORD`` an op; no object per op)."""

    instr: int
    queues: int
    start: int
    own: int
    binder: int
    ref: int
    enter: int
    lag: int


RECORD = len(OpRecord._fields)  # ints a record
# the causes' keys by value (Cause's values are 0 .. n - 1 in display order)
_KEYS = tuple(c.key for c in sorted(Cause))
assert [int(c) for c in sorted(Cause)] == list(range(len(Cause)))


def critical_path(records: Sequence[int], ends: np.ndarray, latency: int) -> dict[str, int]:
    """Ticks of the latency by cause (:data:`systolic.timing.result.CAUSES` keys);
    ``records`` are the ops' :class:`OpRecord` fields, ``RECORD`` ints an op."""
    parts = [0] * len(Cause)
    if not len(ends):
        return dict.fromkeys(_KEYS, 0)
    op = int(np.argmax(ends))
    t = latency
    while op >= 0:
        _, _, _, own, binder, ref, enter, lag = records[RECORD * op:RECORD * op + RECORD]
        lo = ref if binder >= 0 else 0
        if lo > t:
            lo = t
        ent = min(max(enter, lo), t)
        parts[own] += t - ent
        parts[lag] += ent - lo
        t = lo
        op = binder
    parts[Cause.IDLE] += t  # a root that does not start at 0
    return dict(zip(_KEYS, parts, strict=True))
