"""Regions: what memory an instruction's access pattern touches, and whether two overlap
(docs/timing.md "Dependencies").

A region is a :class:`~systolic.geometry.Rect` in one memory space: in SBUF and PSUM the
rows are partitions and the columns bytes of one partition; in device memory (HBM) a
row-strided pattern is a rectangle in the grid of its row pitch (``partition_step``; rows
stored bottom-up, a negative pitch, are the same rows counted from the lowest), and any
other pattern is its flat byte interval. Two device-memory regions of different pitch are
compared row by row (up to ``EXACT_ROWS`` rows; beyond, by their flat extents:
conservative, a false overlap only adds a wait). The dependency tracker that files and
compares them is timing/deps.py.
"""

from __future__ import annotations

from ..geometry import Rect
from ..isa import AccessPattern, Space

__all__ = ["EXACT_ROWS", "Region", "contains", "flat_span", "region", "regions_overlap"]

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
    if pitch < 0:  # rows stored bottom-up: the same rows, counted from the lowest one
        lo, hi, pitch = lo + (ap.partitions - 1) * pitch, hi + (ap.partitions - 1) * pitch, \
            -pitch
    if pitch > 0 and lo >= 0 and hi - lo <= pitch:
        row, col = divmod(lo, pitch)
        if col + hi - lo <= pitch:
            return ("DRAM", pitch, Rect(row, ap.partitions, col, hi - lo), None)
        return ("DRAM", pitch, Rect(row, ap.partitions, col, pitch - col),
                Rect(row + 1, ap.partitions, 0, col + hi - lo - pitch))
    return ("DRAM", 0, Rect(0, 1, lo, hi + (ap.partitions - 1) * max(pitch, 0) - lo), None)


def flat_span(r: Region) -> tuple[int, int]:
    """The flat byte interval [lo, hi) a region spans (a device-memory one, its rows' first
    byte to its last)."""
    _, pitch, rect, wrap = r
    if pitch == 0:
        return rect.col, rect.col_end
    end = (rect.row_end - 1) * pitch + rect.col_end
    if wrap is not None:
        end = (wrap.row_end - 1) * pitch + wrap.col_end
    return rect.row * pitch + rect.col, end


# rows of the shorter of two device-memory regions of different pitch checked one by one;
# past this, their flat extents are compared (conservative: a false overlap only adds a wait)
EXACT_ROWS = 4096


def _rows(r: Region) -> tuple[int, int, int, int]:
    """A device-memory region as (first byte, pitch, rows, bytes a row): row i covers
    [first + i * pitch, first + i * pitch + width)."""
    _, pitch, rect, wrap = r
    if pitch == 0:
        return rect.col, 0, 1, rect.cols
    width = rect.cols + (wrap.cols if wrap is not None else 0)
    return rect.row * pitch + rect.col, pitch, rect.rows, width


def _rows_overlap(a: Region, b: Region) -> bool:
    (sa, pa, na, wa), (sb, pb, nb, wb) = _rows(a), _rows(b)
    if na > nb:
        (sa, pa, na, wa), (sb, pb, nb, wb) = (sb, pb, nb, wb), (sa, pa, na, wa)
    for i in range(na):
        x = sa + i * pa  # row i of a: [x, x + wa); a row j of b meets it when
        if pb == 0:  # sb + j pb < x + wa and sb + j pb + wb > x
            if sb < x + wa and x < sb + wb:
                return True
            continue
        lo = max(0, (x - wb - sb) // pb + 1)
        hi = min(nb - 1, -((sb - x - wa) // pb) - 1)
        if lo <= hi:
            return True
    return False


def regions_overlap(a: Region, b: Region) -> bool:
    """True when the two regions may share a byte: exact in SBUF/PSUM, for device-memory
    patterns of one pitch and, row by row, for two of different pitch up to EXACT_ROWS rows
    (beyond: their flat extents, conservative)."""
    if a[0] != b[0]:
        return False
    if a[1] == b[1]:
        ra = (a[2],) if a[3] is None else (a[2], a[3])
        rb = (b[2],) if b[3] is None else (b[2], b[3])
        return any(x.overlaps(y) for x in ra for y in rb)
    (a0, a1), (b0, b1) = flat_span(a), flat_span(b)
    if not (a0 < b1 and b0 < a1):
        return False
    if min(_rows(a)[2], _rows(b)[2]) > EXACT_ROWS:
        return True
    return _rows_overlap(a, b)


def contains(a: Region, b: Region) -> bool:
    """True when ``a`` surely holds every byte of ``b`` (same space and pitch; a wrapped
    region only when the two are equal)."""
    if a[0] != b[0] or a[1] != b[1]:
        return False
    if a[3] is None and b[3] is None:
        return a[2].contains(b[2])
    return a == b
