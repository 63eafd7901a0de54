"""The instruction set: flags, perf modes, tile groups, access patterns, instructions.

One immutable :class:`Program` type feeds every executor (DESIGN.md). Instructions are
frozen, slotted dataclasses; their text form (one line each) parses back to an equal
instruction, see :mod:`systolic.asm`.

The dense pair follows seed 000 "The Two-Phase Protocol": ``LoadStationary`` latches a
weight tile [K, M] into the array (rows = SBUF partitions, K; columns = M); ``MatMul``
streams the moving tile [K, N] through it into a PSUM bank. The MatMul bundle has no
weights address (seed 000 QUIRK): it carries the weights' dtype, base partition and tile
group only, and the weights are array state. Two instructions the seed does not name make a
Program self-contained: ``DmaLoad`` (device memory -> SBUF) and ``ReadOut`` (PSUM -> device
memory, the copy another engine does after a group's STOP).
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass
from math import prod

from .dtypes import get_format
from .errors import ShapeError

__all__ = [
    "AccessPattern",
    "Activation",
    "ActivationFunc",
    "AluOp",
    "CalcFlags",
    "DmaCopy",
    "DmaLoad",
    "Engine",
    "Group",
    "Instruction",
    "LdWeightMx",
    "LoadStationary",
    "MatMul",
    "MatmultMx",
    "Memset",
    "PerfMode",
    "Program",
    "QuantizeMx",
    "ReadOut",
    "Space",
    "TensorCopy",
    "TensorTensor",
    "col_group",
    "row_group",
]


class CalcFlags(enum.IntFlag):
    """The 3-bit calc field at bundle byte 0x2B (seed 000 "The Flag Byte")."""

    NONE = 0
    START = 1  # zero the PSUM region, then write (head of a K reduction)
    STOP = 2  # add, then drain: the group is closed and may be read out
    ACCUMULATE = 4  # add into the region (interior); gen3 writes this bit, gen2 does not


# The accumulate bytes the gen4 validator accepts (seed 000, checkAccumulationFlag).
VALID_MX_ACC_BYTES = frozenset({0, 1, 2, 3, 4, 6})


class PerfMode(enum.IntEnum):
    """MatmultPerfMode (seed 000 "The Perf Modes"); API spelling is :attr:`spelling`."""

    NONE = 0
    DOUBLE_ROW = 1
    DOUBLE_COLUMN = 2
    DOUBLE_PIXEL = 3
    DOUBLE_ROW_SW_INTERLEAVE = 4

    @property
    def spelling(self) -> str:
        return self.name.lower()

    @property
    def k_fold(self) -> int:
        """Contraction rows folded into one PE row: 2 for DoubleRow (seed 000, perf in {1, 4})."""
        return 2 if self in (PerfMode.DOUBLE_ROW, PerfMode.DOUBLE_ROW_SW_INTERLEAVE) else 1

    @classmethod
    def parse(cls, value: str | int | PerfMode | None) -> PerfMode:
        if value is None:
            return cls.NONE
        if isinstance(value, PerfMode):
            return value
        if isinstance(value, int):
            return cls(value)
        try:
            return cls[value.upper()]
        except KeyError:
            names = ", ".join(m.spelling for m in cls)
            raise ShapeError(f"unknown perf mode {value!r}; choose one of {names}") from None


class Engine(enum.Enum):
    """The NeuronCore engine whose in-order queue executes an instruction.

    The names follow the NKI architecture guides and the profile rows of Neuron Explorer
    (FACTS "The whole NeuronCore"): Tensor (the PE array), Vector, Scalar (Activation),
    GpSimd, and the DMA queues.
    """

    TENSOR = "tensor"
    VECTOR = "vector"
    SCALAR = "scalar"
    GPSIMD = "gpsimd"
    DMA = "dma"


class AluOp(enum.Enum):
    """Elementwise operators of ``nisa.tensor_tensor`` (NKI spells them ``nl.add`` ...)."""

    ADD = "add"
    SUBTRACT = "subtract"
    MULTIPLY = "multiply"
    MAXIMUM = "maximum"
    MINIMUM = "minimum"


class ActivationFunc(enum.Enum):
    """The ``nisa.activation`` functions this model implements (NKI: ``nl.copy``,
    ``nl.identity``): both are y = scale * x, rounded to the output format."""

    COPY = "copy"
    IDENTITY = "identity"


class Space(enum.Enum):
    SBUF = "SBUF"
    PSUM = "PSUM"
    DRAM = "DRAM"


def _quadrant_mask(pos: int, size: int, quadrant: int = 32) -> int:
    """translateToRowGroup / translateToColGroup of seed 000 ("The PE Tile-Group Model").

    idx = pos >> 5 picks {1, 2, 4, 8} for a tile of at most 32; {3, 12} (the half holding
    pos) for at most 64; 15 (the whole axis) otherwise.
    """
    idx = pos // quadrant
    if size <= quadrant:
        return 1 << idx
    if size <= 2 * quadrant:
        return 3 if idx < 2 else 12
    return 15


def row_group(pos: int, size: int) -> int:
    return _quadrant_mask(pos, size)


def col_group(pos: int, size: int, force: bool = False) -> int:
    """Column group; ``force`` gives 15 (fp32r / transpose / MX, seed 000)."""
    return 15 if force else _quadrant_mask(pos, size)


@dataclass(frozen=True, slots=True)
class AccessPattern:
    """Where an operand lives: a partition range and up to three free dims.

    Element (p, i1, i2, i3) is at byte ``offset + (p - partition) * partition_step +
    (i1*s1 + i2*s2 + i3*s3) * itemsize`` of partition p (SBUF/PSUM), or of the flat device
    memory (DRAM, where ``partition_step`` is the byte stride between rows). ``dims`` holds
    (step, num) pairs in elements, outermost first (seed 000 "Partition Geometry": the
    partition axis is never a loop word; it folds into the start address).
    """

    space: Space
    partition: int
    partitions: int
    offset: int
    dims: tuple[tuple[int, int], ...]
    dtype: str
    partition_step: int = 0

    def __post_init__(self) -> None:
        if not 1 <= len(self.dims) <= 3:
            raise ShapeError(f"an access pattern has 1 to 3 free dims, not {len(self.dims)}")
        if self.partitions < 1 or self.partition < 0 or self.offset < 0:
            raise ShapeError("an access pattern needs partition >= 0, partitions >= 1, "
                             "offset >= 0")
        if self.partition_step and self.space is not Space.DRAM:
            raise ShapeError("only device-memory (DRAM) patterns carry a row stride")
        if any(num < 1 for _, num in self.dims):
            raise ShapeError(f"every free dim needs num >= 1; got {self.dims}")
        get_format(self.dtype)

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.partitions, *(n for _, n in self.dims))

    @property
    def free_elems(self) -> int:
        return prod(n for _, n in self.dims)

    @property
    def itemsize(self) -> int:
        return get_format(self.dtype).container_bytes

    @property
    def free_bytes_span(self) -> tuple[int, int]:
        """Lowest and one-past-highest byte touched in one partition, relative to its row."""
        lo = hi = 0
        for step, num in self.dims:
            ext = step * (num - 1)
            if ext >= 0:
                hi += ext
            else:
                lo += ext
        isz = self.itemsize
        return self.offset + lo * isz, self.offset + (hi + 1) * isz

    def start_address(self) -> int:
        """The bundle start address: the partition folds in (SBUF part<<18, PSUM part<<15).

        seed 000 "Partition Geometry"; DRAM addresses are plain byte offsets.
        """
        if self.space is Space.SBUF:
            return (self.partition << 18) | self.offset
        if self.space is Space.PSUM:
            return (self.partition << 15) | self.offset
        return self.offset


@dataclass(frozen=True, slots=True)
class LoadStationary:
    """Latch the weight tile ``src`` [K, M] into array rows src.partition.. and columns
    ``column``.. (seed 000 phase 1). ``half`` selects the fp32 two-pass split: ``hi`` latches
    bf16(w), ``lo`` latches bf16(w - bf16(w)); ``full`` latches w as its format gives it."""

    src: AccessPattern
    column: int = 0
    row_group: int = 15
    col_group: int = 15
    perf_mode: PerfMode = PerfMode.NONE
    half: str = "full"


@dataclass(frozen=True, slots=True)
class MatMul:
    """Stream ``moving`` [K, N] through the latched tile into PSUM ``dst`` [M, N] (phase 2).

    ``stationary_dtype``, ``stationary_partition`` and the tile group say which latched
    tile is used (the bundle carries no weights address). Zero points are subtracted
    before the product: out = sum_k (moving - zp_moving) * (stationary - zp_stationary)
    (seed 000, reference-model writeback). ``two_pass`` is 0, or 1/2 for the first/second
    pass of an fp32 lowering.
    """

    moving: AccessPattern
    dst: AccessPattern
    flags: CalcFlags
    stationary_dtype: str
    stationary_partition: int = 0
    row_group: int = 15
    col_group: int = 15
    perf_mode: PerfMode = PerfMode.NONE
    zp_moving: int = 0
    zp_stationary: int = 0
    two_pass: int = 0


@dataclass(frozen=True, slots=True)
class LdWeightMx:
    """gen4 MX weight load (seed 000 op 0x1009): latch an MX stationary tile [K, M].

    The dual-address descriptor (seed 000 "Operand Binding and the Paired Scale": one
    MXMEM_PATTERN1D holding the data ADDR4 and the E8M0 scale ADDR4 as a pair):

    * ``src``: the data, SBUF partitions src.partition.. (P of them, a multiple of 8 from a
      quadrant boundary), one free dim of M x4 containers, dtype ``fmt`` (4 bytes for mxfp8,
      2 for mxfp4). Partition p, slot q holds contraction element k = 4p + q, so the logical
      K is 4P (seed 000: K *= 4), at most 512 (docs/mx_layout.md).
    * ``scale``: the E8M0 block scales, dtype ``e8m0``, same free shape as ``src``. Block g
      (partitions 8g..8g+7) keeps its scale in its own quadrant at partition
      ``scale.partition + 32*(g//4) + g%4``, where ``scale.partition - src.partition`` is the
      quadrant offset 0, 4, 8 or 12 (FACTS "Hardware"); the pattern spans those rows.

    There is no weight cache, no perf mode and no column tiling: the tile starts at
    ``column`` 0 and the column group is forced to 15 (seed 000, generateMatmultMx
    ``mov byte [r13+0x2D],0x0F``), so it is a property, not a field. ``row_group`` is the
    quadrant rule of the data's partitions.
    """

    src: AccessPattern
    scale: AccessPattern
    column: int = 0
    row_group: int = 15
    fmt: str = "mxfp8_e4m3"

    @property
    def col_group(self) -> int:
        return col_group(0, 0, force=True)

    @property
    def k(self) -> int:
        """Logical contraction elements: 4 per partition (seed 000 x4 unpack)."""
        return 4 * self.src.partitions


@dataclass(frozen=True, slots=True)
class MatmultMx:
    """gen4 MX matmul (seed 000 op 0x100A): stream an MX moving tile [K, N] through the tile
    latched by the preceding :class:`LdWeightMx` into PSUM ``dst`` [M, N] (fp32).

    ``moving``/``scale`` is the same dual-address descriptor as LdWeightMx's (N columns of x4
    containers, dtype ``fmt``; E8M0 scales in each block's quadrant). ``dst`` stays a plain
    pattern (seed 000). ``acc`` is the raw pre-packed accumulate byte, copied verbatim to
    bundle byte 0x2B: bit0 START, bit1 STOP, bit2 ACCUMULATE; :func:`systolic.verify`
    accepts only {0, 1, 2, 3, 4, 6} (seed 000 checkAccumulationFlag), so 5 and 7 are
    rejected there, not here (a Program may hold them until it is verified).
    ``stationary_fmt`` names the latched tile's format (the bundle has no weights address).
    ``psum_zero_region`` is the PSUM bank that START clears (bundle byte 0x2F), i.e. the
    bank ``dst`` lies in. Column group forced 15 and no perf mode, as for LdWeightMx.

    Per block pair the product is scale_a x scale_b x (sum of the 32 element products),
    block results summed in fp32 (OCP MX v1.0 section 6); the order of the additions is
    :mod:`systolic.sim.functional_mx`'s docstring.
    """

    moving: AccessPattern
    scale: AccessPattern
    dst: AccessPattern
    acc: int
    fmt: str = "mxfp8_e4m3"
    stationary_fmt: str = "mxfp8_e4m3"
    row_group: int = 15
    psum_zero_region: int = 0

    @property
    def flags(self) -> CalcFlags:
        return CalcFlags(self.acc & 7)

    @property
    def col_group(self) -> int:
        return col_group(0, 0, force=True)

    @property
    def k(self) -> int:
        """Logical contraction elements: 4 per partition (seed 000 x4 unpack)."""
        return 4 * self.moving.partitions


@dataclass(frozen=True, slots=True)
class DmaLoad:
    """Copy device memory to SBUF (another engine's work; the timing model treats it as
    overlapped). ``src`` and ``dst`` enumerate the same shape, element for element."""

    src: AccessPattern
    dst: AccessPattern


@dataclass(frozen=True, slots=True)
class ReadOut:
    """Copy a finished PSUM result to device memory, as the engine that reads PSUM does.

    Only a region whose accumulation group saw STOP may be read out; the region is then
    free for a new START. The timing model charges it to the read-out engine."""

    src: AccessPattern
    dst: AccessPattern


# --- engine instructions: what an NKI kernel does besides nc_matmul --------------------
# The seeds name only the PE's instructions. These carry what the NKI front end records
# (nisa.dma_copy, tensor_copy, tensor_tensor, memset, activation); each names the engine
# whose queue runs it. Their values: systolic.sim; their cost: the whole-core timing.


@dataclass(frozen=True, slots=True)
class DmaCopy:
    """A DMA transfer between any two of DRAM (HBM), SBUF (and PSUM where the generation
    allows it); ``src`` and ``dst`` enumerate the same shape element for element, and the
    dtypes must match (a DMA moves bytes, it does not cast). ``queue`` is the DMA queue
    (0..arch DMA queues - 1) the transfer is issued on."""

    src: AccessPattern
    dst: AccessPattern
    queue: int = 0

    engine = Engine.DMA


@dataclass(frozen=True, slots=True)
class TensorCopy:
    """``nisa.tensor_copy``: dst = src, cast to dst's format (through fp32 when the formats
    differ: NKI docs); runs on ``engine`` (Vector, Scalar or GpSimd)."""

    src: AccessPattern
    dst: AccessPattern
    engine: Engine = Engine.VECTOR


@dataclass(frozen=True, slots=True)
class TensorTensor:
    """``nisa.tensor_tensor``: dst = op(a, b) elementwise, computed in fp32 and rounded to
    dst's format; ``a``, ``b`` and ``dst`` have the same shape."""

    a: AccessPattern
    b: AccessPattern
    dst: AccessPattern
    op: AluOp = AluOp.ADD
    engine: Engine = Engine.VECTOR


@dataclass(frozen=True, slots=True)
class Memset:
    """``nisa.memset``: every element of dst = value (rounded to dst's format)."""

    dst: AccessPattern
    value: float = 0.0
    engine: Engine = Engine.VECTOR


@dataclass(frozen=True, slots=True)
class Activation:
    """``nisa.activation`` with a copy/identity function: dst = func(scale * src), on the
    Scalar (Activation) engine."""

    src: AccessPattern
    dst: AccessPattern
    func: ActivationFunc = ActivationFunc.COPY
    scale: float = 1.0
    engine: Engine = Engine.SCALAR


@dataclass(frozen=True, slots=True)
class QuantizeMx:
    """``nisa.quantize_mx`` (gen4, Vector engine): quantize ``src`` [P, F] (bf16/fp16) to
    MX containers ``dst`` [P, F/4] (four consecutive elements per x4 container) and one
    E8M0 scale per 8 partitions x 4 elements, written in ``scale`` at row 32*(g//4) + g%4
    for block g (the layout nc_matmul_mx reads). Values: systolic.sim.functional_engines."""

    src: AccessPattern
    dst: AccessPattern
    scale: AccessPattern
    engine: Engine = Engine.VECTOR


# The engine of the PE's own instructions (class attributes: not fields, not in the text).
LoadStationary.engine = Engine.TENSOR  # type: ignore[attr-defined]
MatMul.engine = Engine.TENSOR  # type: ignore[attr-defined]
LdWeightMx.engine = Engine.TENSOR  # type: ignore[attr-defined]
MatmultMx.engine = Engine.TENSOR  # type: ignore[attr-defined]
DmaLoad.engine = Engine.DMA  # type: ignore[attr-defined]
# ReadOut: the engine that reads PSUM and writes the result out (Vector: unsure which engine
# the first release's read-out stands for; the whole-core timing decides).
ReadOut.engine = Engine.VECTOR  # type: ignore[attr-defined]

Instruction = (LoadStationary | MatMul | LdWeightMx | MatmultMx | DmaLoad | ReadOut | DmaCopy
               | TensorCopy | TensorTensor | Memset | Activation | QuantizeMx)
OPCODES: tuple[type, ...] = (LoadStationary, MatMul, LdWeightMx, MatmultMx, DmaLoad, ReadOut,
                             DmaCopy, TensorCopy, TensorTensor, Memset, Activation, QuantizeMx)


class Group:
    """Named groups of instruction kinds, declared once (tinygrad's ``GroupOp``): every
    module that asks "is this a weight load / a compute / a DMA" reads these tuples, usable
    directly with ``isinstance``."""

    LOAD: tuple[type, ...] = (LoadStationary, LdWeightMx)  # latch a stationary tile
    COMPUTE: tuple[type, ...] = (MatMul, MatmultMx)  # stream a moving tile into PSUM
    PE: tuple[type, ...] = LOAD + COMPUTE  # the Tensor Engine's own instructions
    MX: tuple[type, ...] = (LdWeightMx, MatmultMx)  # gen4 MX pair
    DENSE: tuple[type, ...] = (LoadStationary, MatMul)
    DMA: tuple[type, ...] = (DmaLoad, DmaCopy)  # transfers on the DMA queues
    ELEMENTWISE: tuple[type, ...] = (TensorCopy, TensorTensor, Memset, Activation, QuantizeMx)
    READOUT: tuple[type, ...] = (ReadOut,)


@dataclass(frozen=True, slots=True)
class Program:
    """An ordered, immutable sequence of instructions: the pivot every executor reads."""

    instructions: tuple[Instruction, ...]

    def __init__(self, instructions: object = ()) -> None:
        object.__setattr__(self, "instructions", tuple(instructions))  # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(self.instructions)

    def __iter__(self) -> Iterator[Instruction]:
        return iter(self.instructions)

    def __getitem__(self, i: int) -> Instruction:
        return self.instructions[i]

    def counts(self) -> dict[str, int]:
        """Number of instructions per opcode name, in opcode order."""
        out: dict[str, int] = {}
        for ins in self.instructions:
            name = type(ins).__name__
            out[name] = out.get(name, 0) + 1
        return {op.__name__: out[op.__name__] for op in OPCODES if op.__name__ in out}

    def text(self) -> str:
        from .asm import format_program

        return format_program(self)

    @classmethod
    def parse(cls, text: str) -> Program:
        from .asm import parse_program

        return parse_program(text)

    def to_bytes(self, generation: int) -> bytes:
        from .compiler.bundle import encode_program

        return encode_program(self, generation)

    @classmethod
    def from_bytes(cls, data: bytes, generation: int) -> Program:
        from .compiler.bundle import decode_program

        return decode_program(data, generation)

    def __repr__(self) -> str:
        counts = ", ".join(f"{k}={v}" for k, v in self.counts().items())
        return f"Program({len(self)} instructions: {counts})"
