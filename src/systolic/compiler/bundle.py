"""Program <-> bytes: one instruction per 64-byte little-endian bundle, per generation.

:func:`encode_program` and :func:`decode_program` (the ISA knows nothing of bundles:
this is the compiler's encoding of it); decoding gives back an equal Program. Both take a
generation (2, 3 or 4, at its preset's arch level) or an :class:`~systolic.arch.Arch`
(whose arch level decides seed 000's gen3 calc-byte gate). What varies by generation is
read from :mod:`systolic.isa.generation`.
The full table of offsets, with which ones seed 000 places and which this project places,
is ``docs/bundles.md``; in short:

* every bundle: ``+0x00`` u16 opcode, ``+0x02`` generation byte (2, 3 or 4), ``+0x03`` check
  byte making the 64 bytes sum to 0 mod 256 (all project-defined). The MX opcodes 0x1009
  LdWeightMx and 0x100A MatmultMx are seed 000's ("The MX Dispatch Path"); 0x7Fxx are the
  project's for the dense pair and the two copies.
* seed 000 places (dense path): perf byte +0x21 ("+0x21/+0x23 perf bytes", inferred there),
  gen2 row group +0x24, column group +0x25, num_active_cols +0x27, calc flags +0x2B,
  normalised column group +0x2E; gen3/gen4 the word ``col << 8 | row`` at +0x2C.
* seed 000 places (MX, gen4): accumulate byte +0x2B copied raw, row group +0x2C, column
  group forced 0x0F at +0x2D, psum_zero_region +0x2F, PSUM destination pattern +0x30, and
  the data/scale ADDR4 pair (assignAccessForMX) at +0x04/+0x08.
* Start addresses fold the partition in: SBUF ``part << 18``, PSUM ``part << 15`` (seed 000
  "Partition Geometry").

Every bundle byte no field owns is reserved and must be zero. Decoding checks, in order: the
length, the opcode, the generation byte, each field (in layout order), the reserved bytes,
the check byte; the first failure raises :class:`~systolic.errors.BundleError` with the
offset of the bad byte in ``data``. Encoding a value that does not fit its field raises
BundleError with the offset the field would have in the stream.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from types import MappingProxyType
from typing import Any

import numpy as np

from ..arch import ARCHS, Arch, get_arch
from ..errors import ArchError, BundleError, SystolicError
from ..isa import (
    DmaLoad,
    Fp32Pass,
    Group,
    Instruction,
    LdWeightMx,
    LoadStationary,
    MatMul,
    MatmultMx,
    PerfMode,
    Program,
    ReadOut,
)
from ..isa.generation import GENERATIONS as GENERATION_RULES
from ..isa.generation import GenerationRules, rules
from .bundle_fields import (
    Codec,
    Const,
    Derived,
    DtypeByte,
    EnumByte,
    Fault,
    Flags,
    Int,
    Perf,
    Values,
    covered,
)
from .bundle_groups import Gen2Groups, GroupByte, WordGroups
from .bundle_patterns import DramPattern, OnChipPattern

__all__ = [
    "BUNDLE_BYTES",
    "GENERATIONS",
    "OPCODES",
    "decode_program",
    "encode_program",
]

BUNDLE_BYTES = 64
GENERATIONS = tuple(GENERATION_RULES)  # 2, 3, 4
HEADER = struct.Struct("<HBB")  # opcode, generation byte, check byte

# seed 000 "The MX Dispatch Path": generateLdweightMx "op 0x1009", generateMatmultMx
# "op 0x100A". The 0x7Fxx codes are project-defined (the seed does not give the dense ones).
OPCODES: Mapping[type, int] = MappingProxyType({
    LoadStationary: 0x7F01,
    MatMul: 0x7F02,
    DmaLoad: 0x7F10,
    ReadOut: 0x7F11,
    LdWeightMx: 0x1009,
    MatmultMx: 0x100A,
})
_BY_OPCODE = {op: cls for cls, op in OPCODES.items()}
# An int generation stands for its first preset's arch level (trn1 20, trn2 30, trn3 40).
_PRESET_LEVEL = {g: next(a.arch_level for a in ARCHS.values() if a.generation == g)
                 for g in GENERATIONS}


def _active_cols(values: Values) -> int:
    """num_active_cols (seed 000, CoreV2 generateMatMul): the destination's elements per
    partition divided by scale, where scale is 2 for DoubleRow only ("cmp [rax+0x2D0], 1")."""
    scale = 2 if values["perf_mode"] == PerfMode.DOUBLE_ROW else 1
    return int(values["dst"].free_elems) // scale


def _groups(gen: int) -> Codec:
    # seed 000 tile-group NOTE: CoreV2 +0x24 row / +0x25 col / +0x2E normalised col;
    # CoreV3 (and CoreV4's dense path, which reuses it) the word (col<<8 | row) at +0x2C.
    return Gen2Groups(0x24, 0x25, 0x2E) if gen == 2 else WordGroups(0x2C)


def _load_stationary(gen: int) -> list[Codec]:
    return [
        OnChipPattern("src", addr=0x04, dims=0x08, parts=0x14, dtype=0x15),
        Int("column", 0x16),
        EnumByte("fp32_pass", 0x17, Fp32Pass),
        Perf(0x21),
        _groups(gen),
    ]


def _matmul(gen: int) -> list[Codec]:
    return [
        OnChipPattern("moving", addr=0x04, dims=0x08, parts=0x14, dtype=0x15),
        # the PSUM destination's body sits at +0x30, where seed 000 puts MX's
        OnChipPattern("dst", addr=0x30, dims=0x34, parts=0x16, dtype=0x17),
        DtypeByte("stationary_dtype", 0x18),
        Int("stationary_partition", 0x19),
        Int("zp_moving", 0x1A, 2, signed=True),
        Int("zp_stationary", 0x1C, 2, signed=True),
        EnumByte("fp32_pass", 0x1E, Fp32Pass),
        Perf(0x21),
        _groups(gen),
        # seed gives the offset, not the width; a byte cannot hold N = 512, so 16 bits
        Derived("num_active_cols", 0x27, 2, _active_cols),
        Flags(0x2B, rules(gen)),
    ]


def _mx_pair(data: str) -> list[Codec]:
    """The dual-address descriptor: data and E8M0 scale ADDR4s as a pair (seed 000,
    assignAccessForMX), then their dims and tag bytes."""
    return [
        OnChipPattern(data, addr=0x04, dims=0x0C, parts=0x24, dtype=0x25),
        OnChipPattern("scale", addr=0x08, dims=0x18, parts=0x26, dtype=0x27),
    ]


_MX_COL = Const(0x2D, 0x0F, "seed 000 forces the MX column group full "
                            "(mov byte [r13+0x2D],0x0F)")


def _ld_weight_mx(gen: int) -> list[Codec]:
    return [*_mx_pair("src"), Int("column", 0x28), DtypeByte("fmt", 0x29),
            GroupByte("row_group", 0x2C), _MX_COL]


def _matmult_mx(gen: int) -> list[Codec]:
    return [
        *_mx_pair("moving"),
        OnChipPattern("dst", addr=0x30, dims=0x34, parts=0x28, dtype=0x29),
        DtypeByte("fmt", 0x2A),
        Flags(0x2B, rules(gen)),  # the raw accumulate byte, the gen4 rule of the table
        GroupByte("row_group", 0x2C),
        _MX_COL,
        DtypeByte("stationary_fmt", 0x2E),
        Int("psum_zero_region", 0x2F),
    ]


def _dma_load(gen: int) -> list[Codec]:
    return [DramPattern("src", 0x04),
            OnChipPattern("dst", addr=0x30, dims=0x34, parts=0x2E, dtype=0x2F)]


def _read_out(gen: int) -> list[Codec]:
    return [DramPattern("dst", 0x04),
            OnChipPattern("src", addr=0x30, dims=0x34, parts=0x2E, dtype=0x2F)]


_BUILDERS = {LoadStationary: _load_stationary, MatMul: _matmul, LdWeightMx: _ld_weight_mx,
             MatmultMx: _matmult_mx, DmaLoad: _dma_load, ReadOut: _read_out}


@dataclass(frozen=True)
class Layout:
    """Where one instruction type's fields sit for one generation."""

    cls: type
    opcode: int
    codecs: tuple[Codec, ...]
    reserved: tuple[int, ...]
    # dataclass fields no codec places: encodable only at their default, decoded as it
    unplaced: Mapping[str, Any]
    problem: str = ""  # why this type cannot be encoded at all (set for gen gates)
    fields: tuple[str, ...] = ()  # every dataclass field, in order
    # the reserved bytes as a mask over the bundle read as one little-endian integer
    reserved_mask: int = 0
    calc_byte: int | None = None  # the offset of the calc byte, where the layout has one


@cache
def layout(cls: type, generation: int) -> Layout:
    """The bundle layout of ``cls`` on ``generation`` (cached)."""
    opcode = OPCODES[cls]
    if cls in Group.MX and not rules(generation).mx:
        why = f"{cls.__name__} is gen4 only (seed 000: the MX path exists on CoreV4 alone)"
        return Layout(cls, opcode, (), (), MappingProxyType({}), why)
    codecs = tuple(_BUILDERS[cls](generation))
    used = covered(codecs) | set(range(HEADER.size))
    reserved = tuple(o for o in range(BUNDLE_BYTES) if o not in used)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    placed = {n for c in codecs for n in c.names}
    unplaced: dict[str, Any] = {}
    problem = ""
    for name in sorted(placed - fields.keys()):
        problem = f"bundle.py places {cls.__name__}.{name}, which the instruction lacks"
    for name, f in fields.items():
        if name in placed:
            continue
        if f.default is not dataclasses.MISSING:
            unplaced[name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            unplaced[name] = f.default_factory()
        else:
            problem = (f"{cls.__name__}.{name} has no position in the bundle layout; "
                       f"bundle.py must place it before {cls.__name__} can be encoded")
    calc = next((c.off for c in codecs if isinstance(c, Flags)), None)
    return Layout(cls, opcode, codecs, reserved, MappingProxyType(unplaced), problem,
                  tuple(fields), sum(0xFF << (8 * o) for o in reserved), calc)


@dataclass(frozen=True, slots=True)
class _Target:
    gen: int
    level: int
    rules: GenerationRules


def _target(target: int | Arch | str) -> _Target:
    """(generation, arch level) from a generation number, an Arch or a preset name."""
    if isinstance(target, (Arch, str)):
        arch = get_arch(target)
        return _Target(arch.generation, arch.arch_level, rules(arch.generation))
    if isinstance(target, bool) or target not in GENERATIONS:
        raise ArchError(f"bundle generation must be 2, 3 or 4 (arch.generation), not "
                        f"{target!r}")
    return _Target(target, _PRESET_LEVEL[target], rules(target))


def _calc_gate(lay: Layout, t: _Target) -> str:
    """Why this layout's calc byte cannot be encoded or decoded at the target's arch level
    (seed 000's gen3 gate leaves the byte untouched, so no bundle could say START/STOP)."""
    return "" if lay.calc_byte is None else t.rules.calc_byte_problem(t.level)


# -- encode -------------------------------------------------------------------------------
def _encode(ins: Any, t: _Target, base: int, index: int) -> bytearray:
    name = type(ins).__name__
    if type(ins) not in OPCODES:
        raise BundleError(base, f"instruction {index}: {name} is not an instruction type "
                                f"with a bundle opcode")
    kind: type = type(ins)
    gen = t.gen
    lay = layout(kind, gen)
    if lay.problem:
        raise BundleError(base, f"instruction {index} ({name}): {lay.problem}; cannot "
                                f"encode for gen{gen}")
    gate = _calc_gate(lay, t)
    if gate and lay.calc_byte is not None:
        raise BundleError(base + lay.calc_byte, f"instruction {index} ({name}): {gate}")
    values = {f: getattr(ins, f) for f in lay.fields}
    buf = bytearray(BUNDLE_BYTES)
    try:
        for field_name, default in lay.unplaced.items():
            if values[field_name] != default:
                raise Fault(0, f"field {field_name} = {values[field_name]!r} has no position "
                               f"in the bundle layout, so only its default {default!r} can "
                               f"be encoded")
        for codec in lay.codecs:
            codec.put(buf, values, gen)
    except Fault as f:
        raise BundleError(base + f.offset, f"instruction {index} ({name}): {f.message}") from None
    HEADER.pack_into(buf, 0, lay.opcode, gen, 0)
    buf[3] = -sum(buf) & 0xFF
    return buf


def encode_program(program: Program, generation: int | Arch | str) -> bytes:
    """The Program as ``64 * len(program)`` bytes for ``generation`` (2, 3 or 4, or an
    Arch / preset name, whose arch level the gen3 calc-byte gate reads)."""
    t = _target(generation)
    return b"".join([_encode(ins, t, i * BUNDLE_BYTES, i)
                     for i, ins in enumerate(program)])


# -- decode -------------------------------------------------------------------------------
def _decode(buf: memoryview, t: _Target, base: int, checksum: int) -> Instruction:
    opcode, gbyte, _ = HEADER.unpack_from(buf, 0)
    gen = t.gen
    cls = _BY_OPCODE.get(opcode)
    if cls is None:
        raise BundleError(base, f"unknown opcode {opcode:#06x}; known: "
                                + ", ".join(f"{o:#06x} {c.__name__}" for o, c in
                                            _BY_OPCODE.items()))
    if gbyte != gen:
        what = f"encoded for gen{gbyte}" if gbyte in GENERATIONS else (
            f"generation byte {gbyte:#04x} is not 2, 3 or 4")
        raise BundleError(base + 2, f"bundle {what}; decoding for gen{gen}")
    lay = layout(cls, gen)
    if lay.problem:
        raise BundleError(base, f"opcode {opcode:#06x} ({cls.__name__}): {lay.problem}")
    gate = _calc_gate(lay, t)
    if gate and lay.calc_byte is not None:
        raise BundleError(base + lay.calc_byte, f"{cls.__name__} bundle: {gate}")
    out: Values = {}
    try:
        for codec in lay.codecs:
            codec.get(buf, gen, out)
        stray = int.from_bytes(buf, "little") & lay.reserved_mask
        if stray:
            o = ((stray & -stray).bit_length() - 1) // 8  # the lowest non-zero reserved byte
            raise Fault(o, f"reserved byte +{o:#04x} is {buf[o]:#04x}; it must be 0")
    except Fault as f:
        raise BundleError(base + f.offset, f"{cls.__name__} bundle: {f.message}") from None
    if checksum:
        raise BundleError(base + 3, f"check byte mismatch: the bundle's bytes sum to "
                                    f"{checksum:#04x} mod 256, not 0; the bundle is corrupt")
    out.update(lay.unplaced)
    try:
        ins: Instruction = cls(**out)
    except (SystolicError, TypeError, ValueError) as exc:
        raise BundleError(base, f"{cls.__name__} bundle decodes to no valid instruction: "
                                f"{exc}") from None
    return ins


def decode_program(data: bytes | bytearray | memoryview,
                   generation: int | Arch | str) -> Program:
    """The Program in ``data``; raises BundleError at the first byte that is not valid."""
    t = _target(generation)
    raw = bytes(data)
    tail = len(raw) % BUNDLE_BYTES
    if tail:
        start = len(raw) - tail
        raise BundleError(start, f"the stream is {len(raw)} bytes, not a multiple of "
                                 f"{BUNDLE_BYTES}; the bundle at {start:#x} is truncated to "
                                 f"{tail} bytes")
    # one vectorised pass for every bundle's byte sum (the check byte makes it 0 mod 256)
    sums = (np.frombuffer(raw, dtype=np.uint8).reshape(-1, BUNDLE_BYTES)
            .sum(axis=1, dtype=np.uint32) & 0xFF).tolist()
    view = memoryview(raw)
    return Program([_decode(view[b:b + BUNDLE_BYTES], t, b, sums[i])
                    for i, b in enumerate(range(0, len(raw), BUNDLE_BYTES))])
