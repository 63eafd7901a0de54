"""Access-pattern codecs of the 64-byte bundles (the forms are described in
:mod:`.bundle_fields`): the 16-byte ADDR4 pattern for SBUF/PSUM, with the partition folded
into the start address as seed 000 "Partition Geometry" gives it, and the 41-byte DRAM
pattern (project-defined)."""

from __future__ import annotations

import struct

from ..isa import AccessPattern, Space
from .bundle_fields import (
    DRAM_AP_BYTES,
    Buf,
    Codec,
    Fault,
    Values,
    byte_range,
    dtype_byte,
    dtype_name,
    get_int,
    put_int,
)

__all__ = ["DramPattern", "OnChipPattern"]

_REGION = {Space.SBUF: 1, Space.PSUM: 2}
_SPACE = {v: k for k, v in _REGION.items()}
# seed 000 "Partition Geometry": SB part<<18, PSUM part<<15; the byte offset sits below.
_PART_SHIFT = {Space.SBUF: 18, Space.PSUM: 15}
_ADDR_BITS = 28

def _ap(value: object, off: int, what: str) -> AccessPattern:
    if not isinstance(value, AccessPattern):
        raise Fault(off, f"{what} must be an AccessPattern, not {type(value).__name__}")
    return value


_DIMS = {2: struct.Struct("<hHhHhH"), 4: struct.Struct("<iIiIiI")}


def _put_dims(buf: bytearray, off: int, dims: tuple[tuple[int, int], ...], width: int,
              what: str) -> None:
    """Three (signed step, unsigned num) words of ``width`` bytes each; unused ones zero."""
    flat = [x for d in dims for x in d] + [0] * (6 - 2 * len(dims))
    try:
        _DIMS[width].pack_into(buf, off, *flat)
    except (struct.error, TypeError, ValueError):
        for i, (step, num) in enumerate(dims):  # find the word that does not fit
            o = off + 2 * width * i
            put_int(buf, o, width, True, step, f"{what} dim {i} step")
            put_int(buf, o + width, width, False, num, f"{what} dim {i} num")
        raise Fault(off, f"{what} dims {dims!r} are not (step, num) integer pairs") from None


def _get_dims(buf: Buf, off: int, width: int, what: str) -> tuple[tuple[int, int], ...]:
    words = _DIMS[width].unpack_from(buf, off)
    if words[1] and words[3] and words[5]:  # the common case: three dims in use
        return ((words[0], words[1]), (words[2], words[3]), (words[4], words[5]))
    dims: list[tuple[int, int]] = []
    for i in range(3):
        step, num = words[2 * i], words[2 * i + 1]
        o = off + 2 * width * i
        if num == 0:
            if step:
                raise Fault(o, f"{what} dim {i} is unused (num 0) but its step is {step}")
        elif len(dims) < i:
            raise Fault(o + width, f"{what} dim {i} follows an unused dim; dims are packed "
                                   f"outermost first")
        else:
            dims.append((step, num))
    if not dims:
        raise Fault(off + width, f"{what} has no free dim (dim 0 num is 0)")
    return tuple(dims)


def _partitions(buf: Buf, off: int, nbytes: int, what: str) -> int:
    n = get_int(buf, off, nbytes, False)
    if n == 0:
        raise Fault(off, f"{what} partition count is 0; a pattern spans at least one")
    return n


class OnChipPattern(Codec):
    """An SBUF/PSUM pattern: ADDR4 word, dims, and the two tag bytes, each at its offset."""

    def __init__(self, name: str, addr: int, dims: int, parts: int, dtype: int) -> None:
        self.names, self.name = (name,), name
        self.addr, self.dims, self.parts, self.dtype = addr, dims, parts, dtype
        self.span = (*byte_range(addr, 4), *byte_range(dims, 12), parts, dtype)

    def describe(self) -> list[tuple[int, int, str]]:
        n = self.name
        return [(self.addr, 4, f"`{n}` ADDR4: region bits 28..29, start address (partition "
                               f"folded in) bits 0..27"),
                (self.dims, 12, f"`{n}` dims: 3 x (i16 step, u16 num)"),
                (self.parts, 1, f"`{n}` partitions (u8)"),
                (self.dtype, 1, f"`{n}` dtype byte")]

    def put(self, buf: bytearray, values: Values, gen: int) -> None:
        ap = _ap(values[self.name], self.addr, self.name)
        if ap.space not in _REGION:
            raise Fault(self.addr, f"{self.name} is in {ap.space.value}; this bundle slot "
                                   f"holds an SBUF or PSUM pattern")
        if ap.partition_step:
            raise Fault(self.addr, f"{self.name} has partition_step {ap.partition_step}; only "
                                   f"DRAM patterns carry one, it must be 0 in {ap.space.value}")
        shift = _PART_SHIFT[ap.space]
        if ap.offset >= 1 << shift:
            raise Fault(self.addr, f"{self.name} offset {ap.offset:#x} does not fit below the "
                                   f"partition bits ({ap.space.value} part<<{shift})")
        folded = ap.partition << shift | ap.offset
        if folded >> _ADDR_BITS:
            raise Fault(self.addr, f"{self.name} partition {ap.partition} does not fit the "
                                   f"{_ADDR_BITS}-bit ADDR4 address")
        struct.pack_into("<I", buf, self.addr, _REGION[ap.space] << _ADDR_BITS | folded)
        _put_dims(buf, self.dims, ap.dims, 2, self.name)
        put_int(buf, self.parts, 1, False, ap.partitions, f"{self.name} partitions")
        buf[self.dtype] = dtype_byte(ap.dtype, gen, self.dtype, f"{self.name} dtype")

    def get(self, buf: Buf, gen: int, out: Values) -> None:
        word = get_int(buf, self.addr, 4, False)
        region, high = word >> _ADDR_BITS & 3, word >> (_ADDR_BITS + 2)
        if high:
            raise Fault(self.addr + 3, f"{self.name} ADDR4 bits 30..31 are reserved and must "
                                       f"be 0")
        if region not in _SPACE:
            raise Fault(self.addr + 3, f"{self.name} ADDR4 region {region} is not 1 (SBUF) or "
                                       f"2 (PSUM)")
        space = _SPACE[region]
        shift = _PART_SHIFT[space]
        folded = word & ((1 << _ADDR_BITS) - 1)
        dims = _get_dims(buf, self.dims, 2, self.name)
        parts = _partitions(buf, self.parts, 1, self.name)
        dtype = dtype_name(buf[self.dtype], gen, self.dtype, f"{self.name} dtype")
        out[self.name] = AccessPattern(space, folded >> shift, parts,
                                       folded & ((1 << shift) - 1), dims, dtype)


class DramPattern(Codec):
    """A device-memory pattern, :data:`DRAM_AP_BYTES` contiguous bytes from ``off``."""

    def __init__(self, name: str, off: int) -> None:
        self.names, self.name, self.off = (name,), name, off
        self.span = byte_range(off, DRAM_AP_BYTES)

    def describe(self) -> list[tuple[int, int, str]]:
        return [(self.off, DRAM_AP_BYTES, f"`{self.name}` DRAM pattern (41 bytes, below)")]

    def put(self, buf: bytearray, values: Values, gen: int) -> None:
        o = self.off
        ap = _ap(values[self.name], o, self.name)
        if ap.space is not Space.DRAM:
            raise Fault(o, f"{self.name} is in {ap.space.value}; this bundle slot holds a "
                           f"DRAM pattern")
        put_int(buf, o, 6, False, ap.offset, f"{self.name} DRAM byte offset")
        put_int(buf, o + 6, 6, True, ap.partition_step, f"{self.name} partition step")
        put_int(buf, o + 12, 2, False, ap.partition, f"{self.name} first row")
        put_int(buf, o + 14, 2, False, ap.partitions, f"{self.name} partitions")
        buf[o + 16] = dtype_byte(ap.dtype, gen, o + 16, f"{self.name} dtype")
        _put_dims(buf, o + 17, ap.dims, 4, self.name)

    def get(self, buf: Buf, gen: int, out: Values) -> None:
        o = self.off
        offset, pstep = get_int(buf, o, 6, False), get_int(buf, o + 6, 6, True)
        first = get_int(buf, o + 12, 2, False)
        parts = _partitions(buf, o + 14, 2, self.name)
        dtype = dtype_name(buf[o + 16], gen, o + 16, f"{self.name} dtype")
        dims = _get_dims(buf, o + 17, 4, self.name)
        out[self.name] = AccessPattern(Space.DRAM, first, parts, offset, dims, dtype,
                                       partition_step=pstep)
