"""Read/write regions of instructions and the dependencies between them (docs/timing.md
"Dependencies").

A region is a :class:`~systolic.geometry.Rect` in one memory space: in SBUF and PSUM the
rows are partitions and the columns bytes of one partition; in device memory (HBM) a
row-strided pattern is a rectangle in the grid of its row pitch (``partition_step``), and
any other pattern is its flat byte interval. Two device-memory regions of different pitch
are compared by their flat extents (conservative: a false overlap only adds a wait).

:class:`Tracker` answers, for each new instruction (an "op" of sim/core.py, in program
order), which earlier ops it must wait for: read after write, write after write and write
after read on overlapping regions, including a new tenant of a reused allocation. It keeps,
per region, the last writer and the latest reader of each engine, in buckets of bytes
(``BUCKET`` per space), so an op looks only at the regions near its own: no O(n^2). A write
that covers a region replaces its record (anything that waited on the old writer or readers
now waits on the new writer, which itself waited on them), so records do not pile up.
"""

from __future__ import annotations

from ..geometry import Rect
from ..isa import AccessPattern, Space

__all__ = ["BUCKET", "Region", "Tracker", "region", "regions_overlap"]

# Bucket sizes in bytes: a PSUM bank; 2 KiB of an SBUF partition; 1 MiB of device memory.
BUCKET = {"PSUM": 2048, "SBUF": 2048, "DRAM": 1 << 20}

Region = tuple[str, int, Rect]  # (space, DRAM pitch or 0, rectangle)


def region(ap: AccessPattern) -> Region:
    """The region ``ap`` touches (module docstring)."""
    lo, hi = ap.free_bytes_span
    if ap.space is not Space.DRAM:
        return (ap.space.value, 0, Rect.spans(ap.partition, ap.partition + ap.partitions, lo,
                                              hi))
    pitch = ap.partition_step if ap.partitions > 1 else 0
    if pitch > 0 and lo >= 0 and (lo % pitch) + (hi - lo) <= pitch:
        return ("DRAM", pitch, Rect(lo // pitch, ap.partitions, lo % pitch, hi - lo))
    return ("DRAM", 0, Rect(0, 1, lo, hi + (ap.partitions - 1) * max(pitch, 0) - lo))


def _flat(r: Region) -> tuple[int, int]:
    _, pitch, rect = r
    if pitch == 0:
        return rect.col, rect.col_end
    return rect.row * pitch + rect.col, (rect.row_end - 1) * pitch + rect.col_end


def regions_overlap(a: Region, b: Region) -> bool:
    """True when the two regions may share a byte (exact in SBUF/PSUM and for device
    memory patterns of one pitch; conservative otherwise)."""
    if a[0] != b[0]:
        return False
    if a[1] == b[1]:
        return a[2].overlaps(b[2])
    (a0, a1), (b0, b1) = _flat(a), _flat(b)
    return a0 < b1 and b0 < a1


def _contains(a: Region, b: Region) -> bool:
    return a[0] == b[0] and a[1] == b[1] and a[2].contains(b[2])


def _buckets(r: Region) -> range:
    size = BUCKET[r[0]]
    lo, hi = (r[2].col, r[2].col_end) if r[0] != "DRAM" else _flat(r)
    return range(lo // size, (hi - 1) // size + 1)


class _Record:
    __slots__ = ("readers", "region", "writer")

    def __init__(self, reg: Region) -> None:
        self.region = reg
        self.writer = -1
        self.readers: dict[int, int] = {}  # engine queue id -> op with the latest end


class Tracker:
    """Dependencies of ops in program order. ``ends[op]`` and ``queue[op]`` must be set for
    every committed op (the tracker reads them to keep the latest reader per queue)."""

    def __init__(self, ends: list[int], queue: list[int]) -> None:
        self.ends, self.queue = ends, queue
        self.index: dict[tuple[str, int], dict[Region, _Record]] = {}

    def _near(self, r: Region) -> list[_Record]:
        seen: dict[int, _Record] = {}
        space = r[0]
        for b in _buckets(r):
            bucket = self.index.get((space, b))
            if bucket:
                for rec in bucket.values():
                    if id(rec) not in seen and regions_overlap(rec.region, r):
                        seen[id(rec)] = rec
        return list(seen.values())

    def deps(self, reads: tuple[Region, ...], writes: tuple[Region, ...]) -> set[int]:
        """Earlier ops this op must wait for (RAW, WAW, WAR)."""
        out: set[int] = set()
        for r in reads:
            for rec in self._near(r):
                if rec.writer >= 0:
                    out.add(rec.writer)
        for w in writes:
            for rec in self._near(w):
                if rec.writer >= 0:
                    out.add(rec.writer)
                out.update(rec.readers.values())
        return out

    def _record(self, r: Region) -> _Record:
        space = r[0]
        rng = _buckets(r)
        first = self.index.setdefault((space, rng[0]), {})
        rec = first.get(r)
        if rec is None:
            rec = _Record(r)
            for b in rng:
                self.index.setdefault((space, b), {})[r] = rec
        return rec

    def _drop(self, rec: _Record) -> None:
        space = rec.region[0]
        for b in _buckets(rec.region):
            self.index[(space, b)].pop(rec.region, None)

    def commit(self, op: int, reads: tuple[Region, ...], writes: tuple[Region, ...]) -> None:
        """Record that ``op`` (already timed) reads ``reads`` and writes ``writes``."""
        ends, q = self.ends, self.queue[op]
        for r in reads:
            rec = self._record(r)
            prev = rec.readers.get(q)
            if prev is None or ends[prev] <= ends[op]:
                rec.readers[q] = op
        for w in writes:
            writer, readers = op, {}
            for rec in self._near(w):
                if not _contains(w, rec.region):
                    continue
                # keep whatever ends after op (a pipelined op on the same queue may)
                if rec.writer >= 0 and ends[rec.writer] > ends[writer]:
                    writer = rec.writer
                for qq, rd in rec.readers.items():
                    if ends[rd] > ends[op] and (qq not in readers
                                                or ends[rd] > ends[readers[qq]]):
                        readers[qq] = rd
                self._drop(rec)
            rec = self._record(w)
            rec.writer, rec.readers = writer, readers
