"""Read/write regions of instructions and the dependencies between them (docs/timing.md
"Dependencies").

A region is a :class:`~systolic.geometry.Rect` in one memory space: in SBUF and PSUM the
rows are partitions and the columns bytes of one partition; in device memory (HBM) a
row-strided pattern is a rectangle in the grid of its row pitch (``partition_step``), and
any other pattern is its flat byte interval. Two device-memory regions of different pitch
are compared by their flat extents (conservative: a false overlap only adds a wait).

:class:`Tracker` answers, for each new instruction (an "op" of timing/core.py, in program
order), which earlier ops it must wait for: read after write (``raw``), and write after
write or write after read (``order``) on overlapping regions, including a new tenant of a
reused allocation. The answer depends on the program alone, never on times, so one set
of dependencies serves every schedule built from it (the list schedule, the program-order
one, the what-if schedules).

Per region it keeps the writers since the region was last read and the readers since it
was last written, in buckets of bytes (``BUCKET`` per space), so an op looks only at the
regions near its own. A write that covers a region replaces its record: anything that
waited on the old writers or readers now waits on the new writer, which itself waited on
them. The one exception is the Tensor Engine's accumulation: MatMuls into one PSUM region
are ordered by the PE's own queue, not by waiting for each other's end, so a covering
MatMul keeps the earlier MatMuls of its group as writers until something reads the
region. A region spanning more than ``WIDE`` buckets (a huge strided device-memory
pattern) is kept on one list that every op of its space checks, so no pattern's size can
make the tracker enumerate buckets.
"""

from __future__ import annotations

from ..geometry import Rect
from ..isa import AccessPattern, Space

__all__ = ["BUCKET", "WIDE", "Region", "Tracker", "region", "regions_overlap"]

# Bucket sizes in bytes: a PSUM bank; 2 KiB of an SBUF partition; 1 MiB of device memory.
BUCKET = {"PSUM": 2048, "SBUF": 2048, "DRAM": 1 << 20}
# more buckets than this and a region goes on its space's wide list
WIDE = 64

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


def _buckets(r: Region) -> tuple[tuple[str, int], ...]:
    size = BUCKET[r[0]]
    lo, hi = (r[2].col, r[2].col_end) if r[0] != "DRAM" else _flat(r)
    first, last = lo // size, (hi - 1) // size
    if last - first + 1 > WIDE:
        return ((r[0], -1),)  # the wide list of the space
    return tuple((r[0], b) for b in range(first, last + 1))


class _Record:
    __slots__ = ("readers", "rid", "writers")

    def __init__(self, rid: int) -> None:
        self.rid = rid
        self.writers: list[int] = []  # writes since the last read (module docstring)
        self.readers: list[int] = []  # reads since the last write


class Tracker:
    """Dependencies of ops in program order. Regions are interned (:meth:`intern` gives an
    id per distinct region, so repeated tiles cost one dict lookup). ``queue[op]`` must be
    set for every committed op; ``pipelined`` is the queue whose writes are ordered by the
    queue itself (the Tensor Engine's)."""

    def __init__(self, queue: list[int], pipelined: int = 0) -> None:
        self.queue = queue
        self.pipelined = pipelined
        self.regions: list[Region] = []
        self.buckets: list[tuple[tuple[str, int], ...]] = []
        self.ids: dict[Region, int] = {}
        self.index: dict[tuple[str, int], dict[int, _Record]] = {}
        self.windex: dict[tuple[str, int], dict[int, _Record]] = {}  # records with writers
        self.pairs: dict[int, bool] = {}
        self.covers: dict[int, bool] = {}

    def intern(self, r: Region) -> int:
        rid = self.ids.get(r)
        if rid is None:
            rid = self.ids[r] = len(self.regions)
            self.regions.append(r)
            self.buckets.append(_buckets(r))
        return rid

    def _overlap(self, a: int, b: int) -> bool:
        if a == b:
            return True
        key = a << 32 | b
        hit = self.pairs.get(key)
        if hit is None:
            hit = self.pairs[key] = regions_overlap(self.regions[a], self.regions[b])
        return hit

    def _keys(self, rid: int, index: dict[tuple[str, int], dict[int, _Record]]
              ) -> tuple[tuple[str, int], ...]:
        bks = self.buckets[rid]
        space = bks[0][0]
        if bks[0][1] < 0:  # a wide region may touch any bucket of its space: look at all
            return tuple(k for k in index if k[0] == space)
        return (*bks, (space, -1))

    def _near(self, rid: int, written: bool = False) -> list[_Record]:
        index = self.windex if written else self.index
        seen: dict[int, _Record] = {}
        ov = self._overlap
        for bk in self._keys(rid, index):
            bucket = index.get(bk)
            if bucket:
                for other, rec in bucket.items():
                    if other not in seen and ov(rid, other):
                        seen[other] = rec
        return list(seen.values())

    def deps(self, reads: tuple[int, ...], writes: tuple[int, ...]
             ) -> tuple[set[int], set[int]]:
        """(raw, order): earlier ops whose writes this op reads, and earlier ops it must
        follow because it overwrites what they wrote or read (WAW, WAR)."""
        raw: set[int] = set()
        order: set[int] = set()
        for r in reads:
            for rec in self._near(r, written=True):
                raw.update(rec.writers)
        for w in writes:
            for rec in self._near(w):
                order.update(rec.writers)
                order.update(rec.readers)
        return raw, order

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
        """Record that ``op`` reads ``reads`` and writes ``writes``."""
        for r in reads:
            self._record(r).readers.append(op)
        pipe = self.queue[op] == self.pipelined
        queue = self.queue
        for w in writes:
            kept: list[int] = []
            keep = None  # the record of w itself, reused in place
            for rec in self._near(w):
                if rec.rid != w and not self._covers(w, rec.rid):
                    continue
                if pipe and not rec.readers:  # an accumulation: the PE orders its writes
                    kept.extend(x for x in rec.writers if queue[x] == self.pipelined)
                if rec.rid == w:
                    keep = rec
                else:
                    self._drop(rec)
            rec = keep if keep is not None else self._record(w)
            if not rec.writers:
                for bk in self.buckets[w]:
                    self.windex.setdefault(bk, {})[w] = rec
            rec.writers = [*dict.fromkeys(kept), op]
            rec.readers = []

    def _covers(self, a: int, b: int) -> bool:
        """Region a contains region b (cached per pair)."""
        key = a << 32 | b
        hit = self.covers.get(key)
        if hit is None:
            hit = self.covers[key] = _contains(self.regions[a], self.regions[b])
        return hit
