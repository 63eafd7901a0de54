"""The busy time of one resource (an engine, a DMA engine, the HBM server, a shared port),
for the list scheduler of timing/core.py.

A :class:`Timeline` keeps the end of its last reservation and the idle gaps before it.
:meth:`Timeline.fit` answers "the earliest start at or after ``t`` at which ``d`` ticks are
free": in list-scheduling mode the search may place an op in a gap left before a later
reservation (an instruction issues ahead of an earlier one that waits: the compiler's
scheduler, docs/timing.md "Scheduling"); in program-order mode it never does (every op
after the previous one, today's in-order queues). It also says which op's reservation
ended where the answer starts, so the critical path can name what held the resource.

Gaps are kept in start order. The search looks at most ``WINDOW`` gaps forward, and a
timeline keeps at most ``KEEP`` gaps (the oldest are forgotten): a window, as a compiler's
list scheduler has; both bounds keep the cost per op constant. Forgotten gaps leave the
lists ``KEEP`` at a time (``base`` counts those forgotten but still there), not one per new
gap (issue 20: moving 512 entries down at every reservation).
"""

from __future__ import annotations

from bisect import bisect_right

__all__ = ["KEEP", "WINDOW", "Timeline"]

WINDOW = 64
KEEP = 512


class Timeline:
    """Reservations of one resource (module docstring). ``fill`` allows gap filling."""

    __slots__ = ("base", "end", "fill", "gap_hi", "gap_lo", "gap_op", "last")

    def __init__(self, fill: bool = True) -> None:
        self.fill = fill
        self.end = 0  # end of the latest-ending reservation
        self.last = -1  # the op of that reservation
        self.gap_lo: list[int] = []
        self.gap_hi: list[int] = []
        self.gap_op: list[int] = []  # the op whose reservation ends where the gap starts
        self.base = 0  # the gaps before this index are forgotten

    def fit(self, t: int, d: int) -> tuple[int, int]:
        """(start, binder): the earliest start >= t with [start, start + d) free, and the op
        whose reservation ends at that start when the resource delayed it (else -1)."""
        if t >= self.end:  # every gap ends by the end: none can start a later op sooner
            return t, -1
        if self.fill and len(self.gap_lo) > self.base and d >= 0:
            his = self.gap_hi
            i = bisect_right(his, t, self.base)
            stop = min(len(his), i + WINDOW)
            lo = self.gap_lo
            while i < stop:
                s = lo[i] if lo[i] > t else t
                if s + d <= his[i]:
                    return s, (self.gap_op[i] if s > t else -1)
                i += 1
        return self.end, self.last  # after the last reservation (t < end, above)

    def copy(self) -> Timeline:
        """A timeline with the same reservations, booked apart from now on."""
        tl = Timeline(self.fill)
        tl.end, tl.last = self.end, self.last
        b = self.base
        tl.gap_lo, tl.gap_hi, tl.gap_op = self.gap_lo[b:], self.gap_hi[b:], self.gap_op[b:]
        return tl

    def reserve(self, s: int, e: int, op: int) -> None:
        """Book [s, e) for ``op``; s must come from :meth:`fit` (free)."""
        if s >= self.end:
            if self.fill and s > self.end:
                self.gap_lo.append(self.end)
                self.gap_hi.append(s)
                self.gap_op.append(self.last)
                if len(self.gap_lo) - self.base > KEEP:  # forget the oldest
                    self.base += 1
                    if self.base >= KEEP:
                        b = self.base
                        del self.gap_lo[:b], self.gap_hi[:b], self.gap_op[:b]
                        self.base = 0
            if e >= self.end:
                self.end, self.last = e, op
            return
        # inside a gap (only a filling timeline places ops before its end)
        i = bisect_right(self.gap_hi, s, self.base)
        lo, hi, before = self.gap_lo[i], self.gap_hi[i], self.gap_op[i]
        pieces = []
        if s > lo:
            pieces.append((lo, s, before))
        if e < hi:
            pieces.append((e, hi, op))
        self.gap_lo[i:i + 1] = [p[0] for p in pieces]
        self.gap_hi[i:i + 1] = [p[1] for p in pieces]
        self.gap_op[i:i + 1] = [p[2] for p in pieces]
        if e > self.end:  # cannot happen from fit(); kept for safety of direct callers
            self.end, self.last = e, op
