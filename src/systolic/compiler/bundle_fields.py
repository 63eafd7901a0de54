"""Field codecs of the 64-byte bundles: each codec owns some bytes of one bundle.

A codec moves one or more instruction fields to and from its bytes and checks them both
ways: :meth:`Codec.put` raises :class:`Fault` when a value does not fit its field (never a
silent truncation), :meth:`Codec.get` raises it when the bytes are not a valid value. The
offsets in a :class:`Fault` are relative to the bundle; :mod:`.bundle` adds the bundle's
place in the stream and wraps it in :class:`~systolic.errors.BundleError`.

Where a byte comes from (seed 000 or this project) is said where the layouts are built, in
:mod:`.bundle`, and in ``docs/bundles.md``. This module holds the encodings of the field
*kinds*: integers, enums, flags and dtype bytes; :mod:`.bundle_groups` holds the tile-group
codecs and :mod:`.bundle_patterns` the two access-pattern forms:

* **ADDR4 pattern** (SBUF / PSUM), a 16-byte body ``u32 ADDR4 | 3 x (i16 step, u16 num)``
  plus two tag bytes ``u8 partitions`` and ``u8 dtype`` placed by the layout. The ADDR4
  word holds the start address with the partition folded in, as seed 000 "Partition
  Geometry" gives it (SBUF ``part << 18 | offset``, PSUM ``part << 15 | offset``), in bits
  0..27, and the region (1 SBUF, 2 PSUM) in bits 28..29 (project; seed 000 names "ADDR4
  region math" without its bits); bits 30..31 are reserved zero.
* **DRAM pattern**, 41 bytes: ``u48 byte offset | i48 partition step | u16 first row |
  u16 partitions | u8 dtype | 3 x (i32 step, u32 num)`` (project-defined throughout).

Unused free-dim slots are all zero (a real dim has num >= 1), so the number of dims needs no
field of its own.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from typing import Any

from ..dtypes import FORMATS
from ..isa import CalcFlags, PerfMode
from ..isa.generation import UNENCODED_PERF_MODES, GenerationRules

__all__ = [
    "DRAM_AP_BYTES",
    "MX_DTYPE_BIT",
    "NO_ENCODING",
    "Codec",
    "Const",
    "Derived",
    "DtypeByte",
    "EnumByte",
    "Fault",
    "Flags",
    "Int",
    "Perf",
    "Values",
    "byte_range",
    "covered",
    "dtype_tables",
    "get_int",
    "put_int",
]

Values = dict[str, Any]
Buf = bytes | bytearray | memoryview

# Set in a dtype byte when the pattern holds x4-packed MX containers (project): the format
# table gives each MX format its element format's code, so the code alone is ambiguous.
MX_DTYPE_BIT = 0x80
DRAM_AP_BYTES = 41
NO_ENCODING = ("no encoding is known for perf mode {mode}: seed 000 (GOTCHA, The Perf Modes) "
               "validates it but no encoder was seen emitting its bundle bytes; only none, "
               "double_row and double_row_sw_interleave are encodable")



class Fault(Exception):
    """A value that does not fit its field, or bytes that are not a valid value."""

    def __init__(self, offset: int, message: str) -> None:
        super().__init__(message)
        self.offset = offset
        self.message = message


# -- integers -----------------------------------------------------------------------------
_STRUCTS = {(1, False): struct.Struct("<B"), (1, True): struct.Struct("<b"),
            (2, False): struct.Struct("<H"), (2, True): struct.Struct("<h"),
            (4, False): struct.Struct("<I"), (4, True): struct.Struct("<i")}


def _int_fault(off: int, nbytes: int, signed: bool, value: object, what: str) -> Fault:
    """The sentence for a value that does not fit (the slow path, after struct refused)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return Fault(off, f"{what} must be an integer, not {value!r}")
    bits = 8 * nbytes
    lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    kind = "signed" if signed else "unsigned"
    return Fault(off, f"{what} = {value} does not fit its {bits}-bit {kind} field ({lo}..{hi})")


def put_int(buf: bytearray, off: int, nbytes: int, signed: bool, value: int, what: str) -> None:
    """Write ``value`` little-endian; a value out of range raises :class:`Fault`."""
    if isinstance(value, bool):
        raise _int_fault(off, nbytes, signed, value, what)
    st = _STRUCTS.get((nbytes, signed))
    try:
        if st is None:
            buf[off:off + nbytes] = value.to_bytes(nbytes, "little", signed=signed)
        else:
            st.pack_into(buf, off, value)
    except (struct.error, OverflowError, AttributeError, TypeError):
        raise _int_fault(off, nbytes, signed, value, what) from None


def get_int(buf: Buf, off: int, nbytes: int, signed: bool) -> int:
    st = _STRUCTS.get((nbytes, signed))
    if st is None:
        return int.from_bytes(buf[off:off + nbytes], "little", signed=signed)
    return int(st.unpack_from(buf, off)[0])


# -- dtype bytes --------------------------------------------------------------------------
@cache
def dtype_tables(generation: int) -> tuple[Mapping[str, int], Mapping[int, str],
                                           Mapping[str, str]]:
    """(name -> byte, byte -> name, name -> why it has no byte) for one generation.

    The byte is ``get_format(name).code(generation)`` (dtypes table; fp4's codes from seed
    000), with :data:`MX_DTYPE_BIT` set for MX formats. MX formats and the E8M0 scale exist
    on gen4 only (seed 000: "the modern MX path ... gen4 only"). Two names that would share
    a byte get none, so a byte always decodes to one name.
    """
    by_byte: dict[int, list[str]] = {}
    why: dict[str, str] = {}
    for name, fmt in FORMATS.items():
        mx_era = fmt.kind in ("mx", "scale")
        code = fmt.code(generation)
        if mx_era and generation != 4:
            why[name] = f"{name} is an MX-path format, gen4 only (seed 000)"
        elif not 0 < code < MX_DTYPE_BIT:
            why[name] = f"{name}'s dtype code {code:#x} does not fit 7 bits"
        else:
            by_byte.setdefault(code | (MX_DTYPE_BIT if fmt.kind == "mx" else 0), []).append(name)
    enc: dict[str, int] = {}
    dec: dict[int, str] = {}
    for byte, names in by_byte.items():
        if len(names) == 1:
            enc[names[0]], dec[byte] = byte, names[0]
        else:
            for n in names:
                why[n] = (f"{' and '.join(names)} share dtype byte {byte:#04x} on gen"
                          f"{generation}, so a bundle cannot tell them apart")
    return enc, dec, why


def dtype_byte(name: object, generation: int, off: int, what: str) -> int:
    enc, _, why = dtype_tables(generation)
    if isinstance(name, str) and name in enc:
        return enc[name]
    reason = why.get(name, "not a format of the dtypes table") if isinstance(name, str) else (
        "not a format name")
    raise Fault(off, f"{what} {name!r} has no dtype byte on gen{generation}: {reason}")


def dtype_name(byte: int, generation: int, off: int, what: str) -> str:
    name = dtype_tables(generation)[1].get(byte)
    if name is None:
        raise Fault(off, f"{what} byte {byte:#04x} is not a dtype code known on gen{generation}")
    return name


# -- codecs -------------------------------------------------------------------------------
class Codec:
    """Owns ``names`` (instruction fields) and ``span`` (bundle byte offsets)."""

    names: tuple[str, ...] = ()
    span: tuple[int, ...] = ()

    def describe(self) -> list[tuple[int, int, str]]:
        """(offset, bytes, what) of each part, for the generated table in docs/bundles.md."""
        raise NotImplementedError

    def put(self, buf: bytearray, values: Values, gen: int) -> None:
        raise NotImplementedError

    def get(self, buf: Buf, gen: int, out: Values) -> None:
        raise NotImplementedError


def byte_range(off: int, n: int) -> tuple[int, ...]:
    return tuple(range(off, off + n))


class Int(Codec):
    """An integer field."""

    def __init__(self, name: str, off: int, nbytes: int = 1, signed: bool = False) -> None:
        self.names, self.span = (name,), byte_range(off, nbytes)
        self.name, self.off, self.nbytes, self.signed = name, off, nbytes, signed

    def describe(self) -> list[tuple[int, int, str]]:
        kind = f"{'i' if self.signed else 'u'}{8 * self.nbytes}"
        return [(self.off, self.nbytes, f"`{self.name}` ({kind})")]

    def put(self, buf: bytearray, values: Values, gen: int) -> None:
        put_int(buf, self.off, self.nbytes, self.signed, values[self.name], self.name)

    def get(self, buf: Buf, gen: int, out: Values) -> None:
        out[self.name] = get_int(buf, self.off, self.nbytes, self.signed)


class EnumByte(Codec):
    """A byte holding an ``IntEnum`` member's value (the fp32 pass)."""

    def __init__(self, name: str, off: int, kind: type[enum.IntEnum]) -> None:
        self.names, self.span, self.name, self.off, self.kind = (name,), (off,), name, off, kind

    def _choices(self) -> str:
        return ", ".join(f"{m.name.lower()} ({int(m)})" for m in self.kind)

    def describe(self) -> list[tuple[int, int, str]]:
        return [(self.off, 1, f"`{self.name}`: {self._choices()}")]

    def put(self, buf: bytearray, values: Values, gen: int) -> None:
        value = values[self.name]
        if not isinstance(value, self.kind):
            raise Fault(self.off, f"{self.name} = {value!r} is not a {self.kind.__name__}: "
                                  f"one of {self._choices()}")
        buf[self.off] = int(value)

    def get(self, buf: Buf, gen: int, out: Values) -> None:
        b = buf[self.off]
        try:
            out[self.name] = self.kind(b)
        except ValueError:
            raise Fault(self.off, f"{self.name} byte {b:#04x} is not one of "
                                  f"{self._choices()}") from None


class Perf(Codec):
    """The MatmultPerfMode byte; DoubleColumn / DoublePixel have no known encoding."""

    def __init__(self, off: int) -> None:
        self.names, self.span, self.off = ("perf_mode",), (off,), off

    def describe(self) -> list[tuple[int, int, str]]:
        known = ", ".join(f"{int(m)} {m.spelling}" for m in PerfMode
                          if m not in UNENCODED_PERF_MODES)
        return [(self.off, 1, f"`perf_mode` (MatmultPerfMode: {known})")]

    def put(self, buf: bytearray, values: Values, gen: int) -> None:
        mode = values["perf_mode"]
        if not isinstance(mode, PerfMode):
            raise Fault(self.off, f"perf_mode must be a PerfMode, not {mode!r}")
        if mode in UNENCODED_PERF_MODES:
            raise Fault(self.off, NO_ENCODING.format(mode=mode.spelling))
        buf[self.off] = int(mode)

    def get(self, buf: Buf, gen: int, out: Values) -> None:
        b = buf[self.off]
        try:
            mode = PerfMode(b)
        except ValueError:
            raise Fault(self.off, f"perf mode byte {b:#04x} is not a MatmultPerfMode "
                                  f"(0..{max(PerfMode)})") from None
        if mode in UNENCODED_PERF_MODES:
            raise Fault(self.off, NO_ENCODING.format(mode=mode.spelling))
        out["perf_mode"] = mode


class Flags(Codec):
    """The calc-flag byte (seed 000 "The Flag Byte"): the bytes the generation table allows
    (:attr:`GenerationRules.calc_bytes`, the set the verifier checks too)."""

    def __init__(self, off: int, gen_rules: GenerationRules) -> None:
        self.names, self.span, self.off = ("flags",), (off,), off
        self.valid, self.why = gen_rules.calc_bytes, gen_rules.calc_why

    def describe(self) -> list[tuple[int, int, str]]:
        return [(self.off, 1, "`flags`: calc byte, bit0 START, bit1 STOP, bit2 ACCUMULATE")]

    def put(self, buf: bytearray, values: Values, gen: int) -> None:
        flags = values["flags"]
        if isinstance(flags, bool) or not isinstance(flags, int) or int(flags) not in self.valid:
            raise Fault(self.off, f"calc flags {flags!r} cannot be written on gen{gen}: "
                                  f"{self.why}")
        buf[self.off] = int(flags)

    def get(self, buf: Buf, gen: int, out: Values) -> None:
        b = buf[self.off]
        if b not in self.valid:
            raise Fault(self.off, f"calc flag byte {b:#04x} is outside gen{gen}'s set "
                                  f"{sorted(self.valid)}: {self.why}")
        out["flags"] = CalcFlags(b)


class DtypeByte(Codec):
    """A format name stored as its dtype byte."""

    def __init__(self, name: str, off: int) -> None:
        self.names, self.span, self.name, self.off = (name,), (off,), name, off

    def describe(self) -> list[tuple[int, int, str]]:
        return [(self.off, 1, f"`{self.name}` (dtype byte)")]

    def put(self, buf: bytearray, values: Values, gen: int) -> None:
        buf[self.off] = dtype_byte(values[self.name], gen, self.off, self.name)

    def get(self, buf: Buf, gen: int, out: Values) -> None:
        out[self.name] = dtype_name(buf[self.off], gen, self.off, self.name)


class Const(Codec):
    """A byte with one fixed value (no instruction field)."""

    def __init__(self, off: int, value: int, why: str) -> None:
        self.span, self.off, self.value, self.why = (off,), off, value, why

    def describe(self) -> list[tuple[int, int, str]]:
        return [(self.off, 1, f"always {self.value:#04x} (checked)")]

    def put(self, buf: bytearray, values: Values, gen: int) -> None:
        buf[self.off] = self.value

    def get(self, buf: Buf, gen: int, out: Values) -> None:
        if buf[self.off] != self.value:
            raise Fault(self.off, f"byte is {buf[self.off]:#04x}, must be {self.value:#04x}: "
                                  f"{self.why}")


class Derived(Codec):
    """An integer computed from other fields: written on encode, checked on decode."""

    def __init__(self, what: str, off: int, nbytes: int, fn: Callable[[Values], int]) -> None:
        self.span, self.what, self.off, self.nbytes, self.fn = byte_range(off, nbytes), what, off, \
            nbytes, fn

    def describe(self) -> list[tuple[int, int, str]]:
        return [(self.off, self.nbytes, f"{self.what} (u{8 * self.nbytes}, derived, checked)")]

    def put(self, buf: bytearray, values: Values, gen: int) -> None:
        put_int(buf, self.off, self.nbytes, False, self.fn(values), self.what)

    def get(self, buf: Buf, gen: int, out: Values) -> None:
        got, want = get_int(buf, self.off, self.nbytes, False), self.fn(out)
        if got != want:
            raise Fault(self.off, f"{self.what} is {got} but the other fields give {want}")


# -- access patterns ----------------------------------------------------------------------
def covered(codecs: Iterable[Codec]) -> set[int]:
    """Every bundle offset some codec owns; the check rejects an overlap."""
    seen: set[int] = set()
    for c in codecs:
        overlap = seen.intersection(c.span)
        assert not overlap, f"bundle layout overlap at {sorted(overlap)}"
        seen.update(c.span)
    return seen
