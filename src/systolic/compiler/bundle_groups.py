"""Tile-group codecs of the 64-byte bundles (seed 000 "The PE Tile-Group Model"): CoreV2's
row, column and normalised column bytes, CoreV3/V4's ``col << 8 | row`` word, and the MX
row-group byte. The codec protocol is :mod:`.bundle_fields`'s."""

from __future__ import annotations

import struct

from ..isa import TileGroup
from .bundle_fields import Buf, Codec, Fault, Values

__all__ = ["GROUP_MASKS", "Gen2Groups", "GroupByte", "WordGroups", "normalise_col_group"]

# Tile-group masks: the quadrant LUT {1, 2, 4, 8} and the two-quadrant / whole-axis spans
# {3, 12, 15} of seed 000 "The PE Tile-Group Model" (translateToRowGroup @ 0x1089e70).
GROUP_MASKS = frozenset(int(g) for g in TileGroup)


def normalise_col_group(col: int) -> int:
    """The gen2 normalised column group (project reading of seed 000's +0x2E): the group
    shifted right so that its lowest set quadrant is bit 0 (4 -> 1, 12 -> 3, 15 -> 15)."""
    return col >> ((col & -col).bit_length() - 1) if col else 0


def _group(value: object, off: int, what: str) -> TileGroup:
    if isinstance(value, bool) or not isinstance(value, int) or value not in GROUP_MASKS:
        raise Fault(off, f"{what} {value!r} is not a quadrant mask {sorted(GROUP_MASKS)} "
                         f"(seed 000 tile-group LUT)")
    return TileGroup(value)


class Gen2Groups(Codec):
    """CoreV2 row group, column group, normalised column group (seed 000 tile-group NOTE)."""

    names = ("row_group", "col_group")

    def __init__(self, row: int, col: int, norm: int) -> None:
        self.span, self.row, self.col, self.norm = (row, col, norm), row, col, norm

    def describe(self) -> list[tuple[int, int, str]]:
        return [(self.row, 1, "`row_group`"), (self.col, 1, "`col_group`"),
                (self.norm, 1, "normalised column group (derived, checked)")]

    def put(self, buf: bytearray, values: Values, gen: int) -> None:
        buf[self.row] = _group(values["row_group"], self.row, "row_group")
        buf[self.col] = c = _group(values["col_group"], self.col, "col_group")
        buf[self.norm] = normalise_col_group(c)

    def get(self, buf: Buf, gen: int, out: Values) -> None:
        out["row_group"] = _group(buf[self.row], self.row, "row group byte")
        out["col_group"] = c = _group(buf[self.col], self.col, "column group byte")
        if buf[self.norm] != normalise_col_group(c):
            raise Fault(self.norm, f"normalised column group {buf[self.norm]:#04x} does not "
                                   f"match column group {c:#04x} (expected "
                                   f"{normalise_col_group(c):#04x})")


class WordGroups(Codec):
    """CoreV3/V4 ``(col << 8 | row)`` as one little-endian word (seed 000)."""

    names = ("row_group", "col_group")

    def __init__(self, off: int) -> None:
        self.span, self.off = (off, off + 1), off

    def describe(self) -> list[tuple[int, int, str]]:
        return [(self.off, 2, "`col_group << 8 | row_group` (u16)")]

    def put(self, buf: bytearray, values: Values, gen: int) -> None:
        row = _group(values["row_group"], self.off, "row_group")
        col = _group(values["col_group"], self.off + 1, "col_group")
        struct.pack_into("<H", buf, self.off, col << 8 | row)

    def get(self, buf: Buf, gen: int, out: Values) -> None:
        out["row_group"] = _group(buf[self.off], self.off, "row group byte")
        out["col_group"] = _group(buf[self.off + 1], self.off + 1, "column group byte")


class GroupByte(Codec):
    """One tile-group byte (the MX row group)."""

    def __init__(self, name: str, off: int) -> None:
        self.names, self.span, self.name, self.off = (name,), (off,), name, off

    def describe(self) -> list[tuple[int, int, str]]:
        return [(self.off, 1, f"`{self.name}`")]

    def put(self, buf: bytearray, values: Values, gen: int) -> None:
        buf[self.off] = _group(values[self.name], self.off, self.name)

    def get(self, buf: Buf, gen: int, out: Values) -> None:
        out[self.name] = _group(buf[self.off], self.off, f"{self.name} byte")
