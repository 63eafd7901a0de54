"""Read/write regions of instructions and the dependencies between them (docs/timing.md
"Dependencies").

A region is a :class:`~systolic.geometry.Rect` in one memory space: in SBUF and PSUM the
rows are partitions and the columns bytes of one partition; in device memory (HBM) a
row-strided pattern is a rectangle in the grid of its row pitch (``partition_step``), and
any other pattern is its flat byte interval. Two device-memory regions of different pitch
are compared by their flat extents (conservative: a false overlap only adds a wait).

:class:`Tracker` answers, for each new instruction (an "op" of timing/core.py, in program
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

Region = tuple[str, int, Rect, Rect | None]  # (space, DRAM pitch or 0, rect, wrapped part)


def region(ap: AccessPattern) -> Region:
    """The region ``ap`` touches (module docstring). A strided device-memory pattern whose
    rows do not start on a multiple of the pitch wraps: its part past the pitch is the
    second rectangle, one row further down."""
    lo, hi = ap.free_bytes_span
    if ap.space is not Space.DRAM:
        return (ap.space.value, 0, Rect.spans(ap.partition, ap.partition + ap.partitions, lo,
                                              hi), None)
    pitch = ap.partition_step if ap.partitions > 1 else 0
    if pitch > 0 and lo >= 0 and hi - lo <= pitch:
        row, col = divmod(lo, pitch)
        if col + hi - lo <= pitch:
            return ("DRAM", pitch, Rect(row, ap.partitions, col, hi - lo), None)
        return ("DRAM", pitch, Rect(row, ap.partitions, col, pitch - col),
                Rect(row + 1, ap.partitions, 0, col + hi - lo - pitch))
    return ("DRAM", 0, Rect(0, 1, lo, hi + (ap.partitions - 1) * max(pitch, 0) - lo), None)


def _flat(r: Region) -> tuple[int, int]:
    _, pitch, rect, wrap = r
    if pitch == 0:
        return rect.col, rect.col_end
    end = (rect.row_end - 1) * pitch + rect.col_end
    if wrap is not None:
        end = (wrap.row_end - 1) * pitch + wrap.col_end
    return rect.row * pitch + rect.col, end


def regions_overlap(a: Region, b: Region) -> bool:
    """True when the two regions may share a byte (exact in SBUF/PSUM and for device
    memory patterns of one pitch; conservative otherwise)."""
    if a[0] != b[0]:
        return False
    if a[1] == b[1]:
        ra = (a[2],) if a[3] is None else (a[2], a[3])
        rb = (b[2],) if b[3] is None else (b[2], b[3])
        return any(x.overlaps(y) for x in ra for y in rb)
    (a0, a1), (b0, b1) = _flat(a), _flat(b)
    return a0 < b1 and b0 < a1


def _contains(a: Region, b: Region) -> bool:
    if a[0] != b[0] or a[1] != b[1]:
        return False
    if a[3] is None and b[3] is None:
        return a[2].contains(b[2])
    return a == b


def _buckets(r: Region) -> range:
    size = BUCKET[r[0]]
    lo, hi = (r[2].col, r[2].col_end) if r[0] != "DRAM" else _flat(r)
    return range(lo // size, (hi - 1) // size + 1)


class _Record:
    __slots__ = ("readers", "rid", "writer")

    def __init__(self, rid: int) -> None:
        self.rid = rid
        self.writer = -1
        self.readers: dict[int, int] = {}  # engine queue id -> op with the latest end


class Tracker:
    """Dependencies of ops in program order. Regions are interned (:meth:`intern` gives an
    id per distinct region, so repeated tiles cost one dict lookup). ``ends[op]`` and
    ``queue[op]`` must be set for every committed op (the tracker reads them to keep the
    latest reader per queue)."""

    def __init__(self, ends: list[int], queue: list[int]) -> None:
        self.ends, self.queue = ends, queue
        self.regions: list[Region] = []
        self.buckets: list[tuple[tuple[str, int], ...]] = []
        self.ids: dict[Region, int] = {}
        self.index: dict[tuple[str, int], dict[int, _Record]] = {}
        self.windex: dict[tuple[str, int], dict[int, _Record]] = {}  # records with a writer
        self.pairs: dict[int, bool] = {}
        self.covers: dict[int, bool] = {}
        self._pending: dict[int, list[_Record]] = {}  # deps()' write neighbours

    def intern(self, r: Region) -> int:
        rid = self.ids.get(r)
        if rid is None:
            rid = self.ids[r] = len(self.regions)
            self.regions.append(r)
            self.buckets.append(tuple((r[0], b) for b in _buckets(r)))
        return rid

    def _overlap(self, a: int, b: int) -> bool:
        if a == b:
            return True
        key = a << 32 | b
        hit = self.pairs.get(key)
        if hit is None:
            hit = self.pairs[key] = regions_overlap(self.regions[a], self.regions[b])
        return hit

    def _near(self, rid: int, written: bool = False) -> list[_Record]:
        index = self.windex if written else self.index
        bks = self.buckets[rid]
        if len(bks) == 1:  # the common case: no record can be seen twice
            bucket = index.get(bks[0])
            if not bucket:
                return []
            ov = self._overlap
            return [rec for other, rec in bucket.items() if other == rid or ov(rid, other)]
        seen: dict[int, _Record] = {}
        for bk in self.buckets[rid]:
            bucket = index.get(bk)
            if bucket:
                for other, rec in bucket.items():
                    if other not in seen and self._overlap(rid, other):
                        seen[other] = rec
        return list(seen.values())

    def deps(self, reads: tuple[int, ...], writes: tuple[int, ...]) -> set[int]:
        """Earlier ops this op must wait for (RAW, WAW, WAR), by interned region ids."""
        out: set[int] = set()
        for r in reads:
            for rec in self._near(r, written=True):
                out.add(rec.writer)
        near = self._pending = {}
        for w in writes:
            recs = near[w] = self._near(w)
            for rec in recs:
                if rec.writer >= 0:
                    out.add(rec.writer)
                out.update(rec.readers.values())
        return out

    def _record(self, rid: int) -> _Record:
        bks = self.buckets[rid]
        first = self.index.get(bks[0])
        if first is not None:
            rec = first.get(rid)
            if rec is not None:
                return rec
        rec = _Record(rid)
        for bk in bks:
            self.index.setdefault(bk, {})[rid] = rec
        return rec

    def _drop(self, rec: _Record) -> None:
        for bk in self.buckets[rec.rid]:
            self.index[bk].pop(rec.rid, None)
            w = self.windex.get(bk)
            if w:
                w.pop(rec.rid, None)

    def commit(self, op: int, reads: tuple[int, ...], writes: tuple[int, ...]) -> None:
        """Record that ``op`` (already timed) reads ``reads`` and writes ``writes``."""
        ends, q = self.ends, self.queue[op]
        for r in reads:
            rec = self._record(r)
            prev = rec.readers.get(q)
            if prev is None or ends[prev] <= ends[op]:
                rec.readers[q] = op
        pending, self._pending = self._pending, {}
        for w in writes:
            writer, readers = op, dict[int, int]()
            keep = None  # the record of w itself, reused in place
            # the records deps() found: nothing changed since but this op's own read records
            # above, which need no dropping (a later writer waits on this op as the writer)
            recs = pending.get(w) if len(writes) == 1 else None
            for rec in recs if recs is not None else self._near(w):
                if rec.rid != w and not self._covers(w, rec.rid):
                    continue
                # keep whatever ends after op (a pipelined op on the same queue may)
                if rec.writer >= 0 and ends[rec.writer] > ends[writer]:
                    writer = rec.writer
                for qq, rd in rec.readers.items():
                    if ends[rd] > ends[op] and (qq not in readers
                                                or ends[rd] > ends[readers[qq]]):
                        readers[qq] = rd
                if rec.rid == w:
                    keep = rec
                else:
                    self._drop(rec)
            rec = keep if keep is not None else self._record(w)
            if rec.writer < 0:
                for bk in self.buckets[w]:
                    self.windex.setdefault(bk, {})[w] = rec
            rec.writer, rec.readers = writer, readers

    def _covers(self, a: int, b: int) -> bool:
        """Region a contains region b (cached per pair)."""
        key = a << 32 | b
        hit = self.covers.get(key)
        if hit is None:
            hit = self.covers[key] = _contains(self.regions[a], self.regions[b])
        return hit
