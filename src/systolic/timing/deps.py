"""The dependencies between instructions (docs/timing.md "Dependencies"), over the regions
their access patterns touch (timing/regions.py).

:class:`Tracker` answers, for each new instruction (an "op" of timing/core.py, in program
order), which earlier ops it must wait for: read after write (``raw``), and write after
write or write after read (``order``) on overlapping regions, including a new tenant of a
reused allocation. The answer depends on the program alone, never on times, so one set
of dependencies serves every schedule built from it (the list schedule, the program-order
one, the what-if schedules).

Per region it keeps the writers since the region was last read and the readers since it
was last written, in buckets of bytes, so an op looks only at the regions near its own. A
write that covers a region replaces its record: anything that waited on the old writers or
readers now waits on the new writer, which itself waited on them. The one exception is the
Tensor Engine's accumulation: MatMuls into one PSUM region are ordered by the PE's own
queue, not by waiting for each other's end, so a covering MatMul keeps the earlier MatMuls
of its group as writers until something reads the region. A record keeps the writers on that
queue apart (``pipe``), so an op of the queue itself, which never waits on them, is answered
without them (``deps(..., pipelined=True)``): a group of K MatMuls then costs K lookups, not
K^2 / 2 skipped dependencies (issue 20).

Buckets follow the overlap rule. SBUF and PSUM: ``BUCKET`` bytes of a partition. Device
memory: a row-strided region sits in cells of its pitch's grid (``GRID_ROWS`` rows x
``GRID_BYTES`` bytes), where regions of the same pitch are compared, and in 1 MiB buckets of
its flat extent, where a region of another pitch looks (issue 22 H6: bucketing the columns
of one [128, F] tensor by their flat extent put every [128, 1] column in one bucket, and
each new op compared itself with every earlier one). A region spanning more than ``WIDE``
buckets of a kind (a huge strided pattern) is kept on that kind's wide list, which every op
looking at that kind checks, so no pattern's size can make the tracker enumerate buckets.
"""

from __future__ import annotations

from ..geometry import Rect
from .regions import Region, contains, flat_span, regions_overlap

__all__ = ["BUCKET", "GRID_BYTES", "GRID_ROWS", "WIDE", "Tracker"]

# Bucket sizes in bytes: a PSUM bank; 2 KiB of an SBUF partition; 1 MiB of device memory.
BUCKET = {"PSUM": 2048, "SBUF": 2048, "DRAM": 1 << 20}
# a device-memory grid cell: rows of one pitch x bytes of a row
GRID_ROWS, GRID_BYTES = 128, 2048
# more buckets than this and a region goes on its kind's wide list
WIDE = 64

# A bucket: (kind, pitch, level, row block, column bucket); level 1 is the fine one,
# (kind, pitch, 0, -1, -1) a kind's wide list.
Key = tuple[str, int, int, int, int]
Layout = tuple[str, int, tuple[Rect, ...]]  # (kind, pitch, rectangles in its grid)
# bytes of a coarse bucket per kind, and rows of a row block (None: rows not split)
COLS = {"PSUM": BUCKET["PSUM"], "SBUF": BUCKET["SBUF"], "DRAMG": GRID_BYTES,
        "DRAMF": BUCKET["DRAM"]}
ROWS: dict[str, int | None] = {"PSUM": None, "SBUF": None, "DRAMG": GRID_ROWS,
                               "DRAMF": None}
# a fine bucket is 1/FINE of a coarse one; a region within SMALL fine buckets of each row
# block is filed there (so many narrow regions, [128, 1] columns, do not share a bucket)
FINE, SMALL = 32, 2
# what a bucket lookup reads of the tracker's state (Tracker._look)
_FIXED, _FINE, _KINDS = 0, 1, 2


def _layouts(r: Region) -> tuple[Layout, ...]:
    """Where a region is filed (module docstring): SBUF/PSUM by partitions x bytes; device
    memory by the grid of its pitch and by its flat extent (only the flat one at pitch 0)."""
    if r[0] != "DRAM":
        return ((r[0], 0, (r[2],)),)
    lo, hi = flat_span(r)
    flat = ("DRAMF", r[1], (Rect(0, 1, lo, hi - lo),))
    if not r[1]:
        return (flat,)
    return (("DRAMG", r[1], (r[2],) if r[3] is None else (r[2], r[3])), flat)


def _cells(kind: str, rects: tuple[Rect, ...], cols: int) -> list[tuple[int, int]] | None:
    """The (row block, column bucket) cells the rectangles cover at ``cols`` bytes a
    bucket, or None past WIDE of them."""
    rows = ROWS[kind]
    out: dict[tuple[int, int], None] = {}
    for rc in rects:
        rbs = range(rc.row // rows, (rc.row_end - 1) // rows + 1) if rows else range(1)
        cbs = range(rc.col // cols, (rc.col_end - 1) // cols + 1)
        if len(out) + len(rbs) * len(cbs) > WIDE:
            return None
        out.update(((rb, cb), None) for rb in rbs for cb in cbs)
    return list(out)


def _small(kind: str, rects: tuple[Rect, ...]) -> list[tuple[int, int]] | None:
    """The fine cells of a narrow region, or None when it is not narrow."""
    fine = COLS[kind] // FINE
    if any((rc.col_end - 1) // fine - rc.col // fine >= SMALL for rc in rects):
        return None
    return _cells(kind, rects, fine)


def _filed(layout: Layout) -> tuple[Key, ...]:
    """The buckets a record is filed under in one layout."""
    kind, pitch, rects = layout
    fine = _small(kind, rects)
    if fine is not None:
        return tuple((kind, pitch, 1, rb, cb) for rb, cb in fine)
    cells = _cells(kind, rects, COLS[kind])
    if cells is None:
        return ((kind, pitch, 0, -1, -1),)
    return tuple((kind, pitch, 0, rb, cb) for rb, cb in cells)

class _Record:
    __slots__ = ("pipe", "readers", "rid", "writers")

    def __init__(self, rid: int) -> None:
        self.rid = rid
        self.writers: list[int] = []  # the latest writes, off the pipelined queue
        self.pipe: list[int] = []  # ... and on it (module docstring)
        self.readers: list[int] = []  # reads since the last write


# an empty hull (Tracker.written_lo/_hi), and the answer of no record (never modified)
_NOWHERE = (1 << 62, -(1 << 62))
_NONE: list[_Record] = []


# Up to this many distinct regions a tracker keeps no buckets: each lookup compares the
# region with every live record of its memory space (a small program's few dozen regions
# cost less to scan than to file); past it the records are filed in buckets once and the
# tracker continues with them. The answers are the same either way: buckets only narrow
# the candidates, and every candidate is checked exactly.
FLAT_REGIONS = 64


class Tracker:
    """Dependencies of ops in program order. Regions are interned (:meth:`intern` gives an
    id per distinct region, so repeated tiles cost one dict lookup). ``queue[op]`` must be
    set for every committed op; ``pipelined`` is the queue whose writes are ordered by the
    queue itself (the Tensor Engine's)."""

    def __init__(self, queue: list[int], pipelined: int = 0) -> None:
        self.queue = queue
        self.pipelined = pipelined
        # flat mode (FLAT_REGIONS): the live records of each memory space, by region id
        self.flat: dict[str, dict[int, _Record]] | None = {}
        self.regions: list[Region] = []
        # per region: its (first) rectangle's row and column bounds, for the flat scan
        self.boxes: list[tuple[int, int, int, int]] = []
        self.extents: list[tuple[int, int]] = []  # a device-memory region's flat extent
        self.layouts: list[tuple[Layout, ...]] = []
        self.buckets: list[tuple[Key, ...]] = []  # where each region's record is filed
        self.ids: dict[Region, int] = {}
        self.live: dict[int, _Record] = {}  # the live record of each region that has one
        self.index: dict[Key, dict[int, _Record]] = {}
        self.windex: dict[Key, dict[int, _Record]] = {}  # records with writers
        self.kinds: dict[tuple[str, int], set[Key]] = {}  # the buckets filed, per layout
        self.fine: dict[tuple[str, int, int, int], set[Key]] = {}  # per coarse cell
        self.pitches: dict[int, None] = {}  # device-memory pitches seen (0: flat)
        # per region: (pitches seen, what the answer read, its version then, buckets)
        self.looks: dict[int, tuple[int, int, int, tuple[Key, ...]]] = {}
        # versions of what a lookup may read: nothing, the fine sets, the layouts' buckets
        self.versions = [0, 0, 0]
        self.pairs: dict[int, bool] = {}
        self.covers: dict[int, bool] = {}
        # deps()'s records of an op's first write, reused by commit() (and whether the
        # reads of commit() made a record since)
        self.wnear: tuple[tuple[int, ...], list[_Record]] | None = None
        self.made = False
        # _near's answers, kept per (region, written) with the version of its memory space
        # they were found at: two versions per space, one moving whenever a record there is
        # made or dropped (the answers for every record), one whenever a record with
        # writers is dropped or a record gets its first writers (the answers for records
        # with writers); nothing else alters an answer (the records' lists of ops change in
        # place)
        self.space_of: list[int] = []  # per region, 2 x its space's index in space_versions
        self.spaces: dict[str, int] = {}
        self.space_versions: list[int] = []
        self.answers: dict[int, tuple[int, list[_Record]]] = {}
        # the flat extents of every device-memory region given writers so far, as one hull
        # (never shrunk): a region outside it overlaps no record with writers. A product's
        # loads read A and B, its stores write C: every store renewed the space's version,
        # so nearly every load's read was scanned again, to find nothing (issue 20)
        self.written_lo, self.written_hi = _NOWHERE

    def intern(self, r: Region) -> int:
        rid = self.ids.get(r)
        if rid is None:
            rid = self.ids[r] = len(self.regions)
            self.regions.append(r)
            x = r[2]
            self.boxes.append((x.row, x.row + x.rows, x.col, x.col + x.cols))
            sp = self.spaces.get(r[0])
            if sp is None:
                sp = self.spaces[r[0]] = len(self.space_versions)
                self.space_versions += (0, 0)
            self.space_of.append(sp)
            self.extents.append(flat_span(r) if r[0] == "DRAM" else (0, 0))
            if self.flat is None:
                self._file_region(r)
            elif len(self.regions) > FLAT_REGIONS:
                self._unflatten()
        return rid

    def _file_region(self, r: Region) -> None:
        """Where the newest region's records go in the buckets (bucket mode)."""
        lays = _layouts(r)
        self.layouts.append(lays)
        self.buckets.append(tuple(k for lay in lays for k in _filed(lay)))
        if r[0] == "DRAM":
            self.pitches.setdefault(r[1], None)

    def _unflatten(self) -> None:
        """Leave flat mode: file every region, then every live record, in the buckets (as
        if the tracker had used them from the start: the index holds the live records, the
        written index those with writers)."""
        flat = self.flat
        assert flat is not None
        self.flat = None
        self.answers.clear()
        self.live.clear()  # filed again below
        for r in self.regions:
            self._file_region(r)
        live = [rec for recs in flat.values() for rec in recs.values()]
        for rec in sorted(live, key=lambda x: x.rid):
            self._record(rec.rid, rec)
            if rec.writers or rec.pipe:
                for bk in self.buckets[rec.rid]:
                    self.windex.setdefault(bk, {})[rec.rid] = rec

    def _overlap(self, a: int, b: int) -> bool:
        if a == b:
            return True
        key = a << 32 | b
        hit = self.pairs.get(key)
        if hit is None:
            hit = self.pairs[key] = regions_overlap(self.regions[a], self.regions[b])
        return hit

    def _look(self, kind: str, pitch: int, rects: tuple[Rect, ...]) -> tuple[tuple[Key, ...],
                                                                         int]:
        """(the buckets of layout (kind, pitch) where a region overlapping ``rects`` may be
        filed, what that answer reads of what is filed now: ``_FIXED`` nothing, ``_FINE``
        the fine buckets of its coarse cells, ``_KINDS`` every bucket of the layout)."""
        fine = _small(kind, rects)
        cells = _cells(kind, rects, COLS[kind])
        if cells is None:  # a wide region may touch any bucket of the layout: look at all
            return tuple(self.kinds.get((kind, pitch), ())), _KINDS
        out: list[Key] = [(kind, pitch, 0, rb, cb) for rb, cb in cells]
        out.append((kind, pitch, 0, -1, -1))
        if fine is not None:
            out.extend((kind, pitch, 1, rb, cb) for rb, cb in fine)
            return tuple(out), _FIXED
        for rb, cb in cells:  # the narrow regions filed in each coarse cell
            out.extend(self.fine.get((kind, pitch, rb, cb), ()))
        return tuple(out), _FINE

    def _keys(self, rid: int) -> tuple[Key, ...]:
        """Every bucket where a region overlapping ``rid`` may be filed (module docstring):
        in SBUF/PSUM its own layout; in device memory its pitch's grid among the regions of
        its pitch, its flat extent among those of every other pitch (and of pitch 0)."""
        # the answer is kept with the versions of what it read (issue 20: recomputing the
        # keys of every DMA's device-memory region doubled the time of a 16384^3 slice)
        hit = self.looks.get(rid)
        if hit is not None and hit[0] == len(self.pitches) and \
                hit[2] == self.versions[hit[1]]:
            return hit[3]
        lays = self.layouts[rid]
        out: list[Key] = []
        reads = _FIXED
        if lays[0][0] != "DRAMG" and lays[0][0] != "DRAMF":
            keys, reads = self._look(*lays[0])
            out.extend(keys)
        else:
            pitch, grid, flat = lays[0][1], lays[0][2], lays[-1][2]
            for q in self.pitches:
                keys, f = (self._look("DRAMG", q, grid) if q and q == pitch
                           else self._look("DRAMF", q, flat))
                out.extend(keys)
                reads = max(reads, f)
        ans = tuple(out)
        self.looks[rid] = (len(self.pitches), reads, self.versions[reads], ans)
        return ans

    def _near(self, rid: int, written: bool = False) -> list[_Record]:
        """The live records whose regions overlap region ``rid`` (``written``: only those
        with writers), as :meth:`_scan` finds them, kept while its space does not change
        (callers do not modify the list)."""
        if written and self.regions[rid][0] == "DRAM":
            lo, hi = self.extents[rid]
            if hi <= self.written_lo or self.written_hi <= lo:
                return _NONE
        key = rid + rid + written
        version = self.space_versions[self.space_of[rid] + written]
        got = self.answers.get(key)
        if got is not None and got[0] == version:
            return got[1]
        out = self._scan(rid, written)
        self.answers[key] = (version, out)
        return out

    def _changed(self, rid: int, every: bool, written: bool) -> None:
        """A record of region ``rid``'s space was made or dropped (``every``: the kept
        answers for every record there are stale) or dropped with writers or given its
        first writers (``written``: the kept answers for records with writers are)."""
        sp = self.space_of[rid]
        if every:
            self.space_versions[sp] += 1
        if written:
            self.space_versions[sp + 1] += 1

    def _scan(self, rid: int, written: bool = False) -> list[_Record]:
        flat = self.flat
        if flat is not None:
            regions = self.regions
            ra = regions[rid]
            live = flat.get(ra[0])
            if not live:
                return []
            out: list[_Record] = []
            extents = self.extents
            boxes = self.boxes
            simple = ra[3] is None
            pitch = ra[1]
            x0, x1, y0, y1 = boxes[rid]
            for other, rec in live.items():
                if written and not rec.writers and not rec.pipe:
                    continue
                rb = regions[other]
                if simple and rb[3] is None and rb[1] == pitch:  # two rectangles of one grid
                    o0, o1, p0, p1 = boxes[other]
                    if o0 < x1 and x0 < o1 and p0 < y1 and y0 < p1:
                        out.append(rec)
                elif rb[1] != pitch:  # device memory, two pitches: flat extents first
                    lo, hi = extents[rid]
                    olo, ohi = extents[other]
                    if olo < hi and lo < ohi and self._overlap(rid, other):
                        out.append(rec)
                elif self._overlap(rid, other):
                    out.append(rec)
            return out
        index = self.windex if written else self.index
        seen: dict[int, _Record] = {}
        ov = self._overlap
        for bk in self._keys(rid):
            bucket = index.get(bk)
            if bucket:
                for other, rec in bucket.items():
                    if other not in seen and ov(rid, other):
                        seen[other] = rec
        return list(seen.values())

    def deps(self, reads: tuple[int, ...], writes: tuple[int, ...], pipelined: bool = False
             ) -> tuple[set[int], set[int]]:
        """(raw, order): earlier ops whose writes this op reads, and earlier ops it must
        follow because it overwrites what they wrote or read (WAW, WAR). ``pipelined``: the
        op is on the pipelined queue, and its writers there are left out (the queue orders
        them; its readers there are not)."""
        raw: set[int] = set()
        order: set[int] = set()
        near_of = self._near
        # (an empty list is skipped, not added: most records hold one kind of op)
        for r in reads:
            for rec in near_of(r, True):
                if rec.writers:
                    raw.update(rec.writers)
                if rec.pipe and not pipelined:
                    raw.update(rec.pipe)
        self.wnear = None
        for w in writes:
            near = near_of(w, False)
            if self.wnear is None:  # the first write's records, for commit()
                self.wnear = (writes, near)
            for rec in near:
                if rec.writers:
                    order.update(rec.writers)
                if rec.pipe and not pipelined:
                    order.update(rec.pipe)
                if rec.readers:
                    order.update(rec.readers)
        return raw, order

    def _record(self, rid: int, rec: _Record | None = None) -> _Record:
        """The live record of region ``rid``, made (or ``rec`` filed) if it has none."""
        got = self.live.get(rid)
        if got is not None:
            return got
        rec = _Record(rid) if rec is None else rec
        self.made = True
        self._changed(rid, True, bool(rec.writers or rec.pipe))
        self.live[rid] = rec
        flat = self.flat
        if flat is not None:
            live = flat.get(self.regions[rid][0])
            if live is None:
                live = flat[self.regions[rid][0]] = {}
            live[rid] = rec
            return rec
        for bk in self.buckets[rid]:
            self.index.setdefault(bk, {})[rid] = rec
            filed = self.kinds.setdefault(bk[:2], set())
            if bk not in filed:
                filed.add(bk)
                self.versions[_KINDS] += 1
            if bk[2] == 1:  # a fine bucket, found from its coarse cell
                coarse = (bk[0], bk[1], bk[3], bk[4] // FINE)
                fines = self.fine.setdefault(coarse, set())
                if bk not in fines:
                    fines.add(bk)
                    self.versions[_FINE] += 1
        return rec

    def _drop(self, rec: _Record) -> None:
        self._changed(rec.rid, True, bool(rec.writers or rec.pipe))
        del self.live[rec.rid]
        if self.flat is not None:
            del self.flat[self.regions[rec.rid][0]][rec.rid]
            return
        for bk in self.buckets[rec.rid]:
            self.index[bk].pop(rec.rid, None)
            w = self.windex.get(bk)
            if w:
                w.pop(rec.rid, None)

    def commit(self, op: int, reads: tuple[int, ...], writes: tuple[int, ...]) -> None:
        """Record that ``op`` reads ``reads`` and writes ``writes``. Right after
        :meth:`deps` of the same op, its lookup of the first write's records is reused
        when the reads added no record (nothing else can have changed them)."""
        self.made = False
        live = self.live
        for r in reads:
            rec = live.get(r)  # _record's lookup, here: most reads find their record
            if rec is None:
                rec = self._record(r)
            rec.readers.append(op)
        pipe = self.queue[op] == self.pipelined
        first = self.wnear
        self.wnear = None
        for w in writes:
            kept: list[int] = []  # the pipelined writers an accumulation keeps
            merged = 0  # records whose pipelined writers are in kept
            keep = None  # the record of w itself, reused in place
            if first is not None and first[0] is writes and not self.made:
                near = first[1]
            else:
                near = self._near(w)
            first = None
            for rec in near:
                if rec.rid != w and not self._covers(w, rec.rid):
                    continue
                if pipe and not rec.readers and rec.pipe:  # an accumulation: the PE
                    kept.extend(rec.pipe)  # orders its writes
                    merged += 1
                if rec.rid == w:
                    keep = rec
                else:
                    self._drop(rec)
            rec = keep if keep is not None else self._record(w)
            if not rec.writers and not rec.pipe:
                self._changed(w, False, True)
                if self.regions[w][0] == "DRAM":
                    lo, hi = self.extents[w]
                    self.written_lo = min(self.written_lo, lo)
                    self.written_hi = max(self.written_hi, hi)
                if self.flat is None:
                    for bk in self.buckets[w]:
                        self.windex.setdefault(bk, {})[w] = rec
            if pipe:
                # one record's writers hold no op twice; the writers of several might
                rec.pipe = [*(dict.fromkeys(kept) if merged > 1 else kept), op]
                rec.writers = []
            else:
                rec.writers, rec.pipe = [op], []
            rec.readers = []

    def _covers(self, a: int, b: int) -> bool:
        """Region a contains region b (cached per pair)."""
        key = a << 32 | b
        hit = self.covers.get(key)
        if hit is None:
            hit = self.covers[key] = contains(self.regions[a], self.regions[b])
        return hit
