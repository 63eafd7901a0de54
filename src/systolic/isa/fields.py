"""The field types of the instruction set: flags, perf modes, fp32 passes, tile groups,
engines, operators, memory spaces and access patterns.

Every field of an instruction (:mod:`systolic.isa.instructions`) has one of these types, an
``int``, a ``float`` or a format name (``str``); the text form (:mod:`systolic.isa.asm`)
formats and parses each by its type. This module sits at the bottom of the layering: it
imports only the format table, the errors and the geometry.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from math import prod

from ..dtypes import get_format
from ..errors import ShapeError
from ..geometry import Rect

__all__ = [
    "FULL_COL_GROUP_FORMATS",
    "INDEX_FORMATS",
    "AccessPattern",
    "ActivationFunc",
    "AluOp",
    "CalcFlags",
    "Engine",
    "Fp32Pass",
    "PerfMode",
    "ReduceCmd",
    "Space",
    "TileGroup",
    "col_group",
    "row_group",
    "tile_position_problem",
]


class CalcFlags(enum.IntFlag):
    """The 3-bit calc field at bundle byte 0x2B (seed 000 "The Flag Byte").

    Which bits a generation writes, and which bytes it accepts, is the generation table's
    (:mod:`systolic.isa.generation`); every 3-bit value is representable here.
    """

    NONE = 0
    START = 1  # zero the PSUM region, then write (head of a K reduction)
    STOP = 2  # add, then drain: the group is closed and may be read out
    ACCUMULATE = 4  # add into the region (interior); gen3 writes this bit, gen2 does not


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
        # DOUBLE_ROW (1), DOUBLE_ROW_SW_INTERLEAVE (4): the values, compared as ints (asked
        # for every K tile several times while lowering; issue 20)
        return 2 if self._value_ in (1, 4) else 1

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


class Fp32Pass(enum.IntEnum):
    """Which pass of seed 000's fp32 two-pass lowering an instruction belongs to.

    ``LoadStationary`` HI latches bf16(w), LO latches bf16(w - bf16(w)); the ``MatMul``
    streaming against that tile carries the same value (pass 1 = HI, pass 2 = LO). FULL:
    no split, the weights as their format gives them. The values are the bundle bytes.
    """

    FULL = 0
    HI = 1
    LO = 2

    @property
    def spelling(self) -> str:
        return self.name.lower()


class TileGroup(enum.IntEnum):
    """The quadrant mask of a tile (seed 000 "The PE Tile-Group Model"): one 32-lane
    quadrant {1, 2, 4, 8} (translateToRowGroup's LUT), a half {3, 12}, or the whole axis."""

    Q0 = 1
    Q1 = 2
    Q2 = 4
    Q3 = 8
    Q01 = 3
    Q23 = 12
    ALL = 15

    @classmethod
    def parse(cls, value: object) -> TileGroup:
        if isinstance(value, TileGroup):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            try:
                return cls(value)
            except ValueError:
                pass
        masks = ", ".join(str(int(g)) for g in cls)
        raise ShapeError(f"tile group {value!r} is not a quadrant mask; use one of {masks}")


def _quadrant_mask(pos: int, size: int, quadrant: int = 32) -> TileGroup:
    """translateToRowGroup / translateToColGroup of seed 000 ("The PE Tile-Group Model").

    idx = pos >> 5 picks {1, 2, 4, 8} for a tile of at most 32; {3, 12} (the half holding
    pos) for at most 64; 15 (the whole axis) otherwise.
    """
    idx = pos // quadrant
    if size <= quadrant:
        return TileGroup(1 << idx)
    if size <= 2 * quadrant:
        return TileGroup.Q01 if idx < 2 else TileGroup.Q23
    return TileGroup.ALL


def row_group(pos: int, size: int, quadrant: int = 32) -> TileGroup:
    """Row group of a tile of ``size`` rows at ``pos`` (``quadrant``: Arch.quadrant)."""
    return _quadrant_mask(pos, size, quadrant)


def col_group(pos: int, size: int, force: bool = False, quadrant: int = 32) -> TileGroup:
    """Column group; ``force`` gives 15 (fp32r / transpose / MX, seed 000)."""
    return TileGroup.ALL if force else _quadrant_mask(pos, size, quadrant)


# Dense formats whose column group translateToColGroup forces to 15 (seed 000: "force -> 15
# (full col; fp32r / transpose / MX)"); MX forces it in its own instructions.
FULL_COL_GROUP_FORMATS = frozenset({"fp32r"})


def tile_position_problem(pos: int, size: int, quadrant: int = 32) -> str:
    """Why a tile of ``size`` lanes cannot start at ``pos``, or ``""`` when it can.

    The quadrant rule gives a tile one mask per size class (one quadrant, one half, the
    whole axis); the mask states the quadrants the tile occupies only when the tile starts
    at a multiple of its class (NKI ``nc_matmul``: tile_position must be a multiple of
    tile_size). A 64-lane tile at lane 32 would be tagged 3 while it occupies quadrants 1-2.
    """
    span = quadrant if size <= quadrant else 2 * quadrant if size <= 2 * quadrant else (
        4 * quadrant)
    if pos % span:
        return (f"a {size}-lane tile occupies a {span}-lane tile group, so it must start at a "
                f"multiple of {span}, not at {pos} (its quadrant mask would misstate the "
                f"quadrants it occupies)")
    return ""


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
    """Elementwise and reduction operators of ``nisa.tensor_tensor``, ``tensor_scalar`` and
    ``tensor_reduce`` (NKI spells them ``nl.add`` ...)."""

    ADD = "add"
    SUBTRACT = "subtract"
    MULTIPLY = "multiply"
    MAXIMUM = "maximum"
    MINIMUM = "minimum"
    DIVIDE = "divide"
    # comparisons give 1.0 where true, 0.0 where false (nl.equal ...: "element-wise boolean
    # result"); mod is Python's x % y, the sign of the divisor (nki.language.mod)
    EQUAL = "equal"
    NOT_EQUAL = "not_equal"
    LESS = "less"
    LESS_EQUAL = "less_equal"
    GREATER = "greater"
    GREATER_EQUAL = "greater_equal"
    MOD = "mod"


class ReduceCmd(enum.Enum):
    """The Vector engine's accumulation registers (one per partition), as ``reduce_cmd``
    drives them (nki.isa.select_reduce / range_select, aws-neuron-sdk 7c165a3e): ``idle``
    does not accumulate (the register may still change: the model makes it undefined),
    ``reset`` sets it to -inf, ``reset_reduce`` sets it to this instruction's reduction,
    ``reduce`` folds this instruction's reduction into it."""

    IDLE = "idle"
    RESET = "reset"
    RESET_REDUCE = "reset_reduce"
    REDUCE = "reduce"


class ActivationFunc(enum.Enum):
    """The ``nisa.activation`` functions this model implements: y = f(x * scale + bias),
    computed in fp32 ("the Scalar Engine always performs the math operations in float32
    precision", nki.isa.activation) and rounded to the output format. The values are the
    exact functions evaluated in float64 and rounded to fp32 (docs/NUMERICS.md "Activation
    functions": the hardware's table approximations are not published)."""

    COPY = "copy"
    IDENTITY = "identity"
    EXP = "exp"
    LOG = "log"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    SQUARE = "square"
    ABS = "abs"
    RELU = "relu"
    SIGMOID = "sigmoid"
    TANH = "tanh"
    SILU = "silu"
    GELU_APPRX_TANH = "gelu_apprx_tanh"
    RECIPROCAL = "reciprocal"
    NEGATIVE = "negative"


class Space(enum.Enum):
    SBUF = "SBUF"
    PSUM = "PSUM"
    DRAM = "DRAM"

    # Members are singletons compared by identity, so the identity hash is a valid one; Enum's
    # own hashes the name in Python, at every hash of an AccessPattern (issue 20: a sweep
    # point hashes a few hundred patterns and DMA cost keys)
    __hash__ = object.__hash__


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
    # :attr:`rect`, kept once asked: a compiled product's patterns are shared objects whose
    # rectangle the compiler, the Tensor Engine's schedule and the timing ask for again and
    # again (issue 20); not part of the value (compare=False), and None on a copy
    _rect: Rect | None = field(default=None, init=False, repr=False, compare=False)
    # the hash, kept once asked (the generated one hashes all seven fields at every dict
    # lookup: the functional simulator's view cache looks up two patterns a DmaLoad);
    # not part of the value, and never pickled (:meth:`__getstate__`)
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        dims = self.dims
        if not 1 <= len(dims) <= 3:
            raise ShapeError(f"an access pattern has 1 to 3 free dims, not {len(dims)}")
        if self.partitions < 1 or self.partition < 0 or self.offset < 0:
            raise ShapeError("an access pattern needs partition >= 0, partitions >= 1, "
                             "offset >= 0")
        if self.partition_step and self.space is not Space.DRAM:
            raise ShapeError("only device-memory (DRAM) patterns carry a row stride")
        for _, num in dims:  # a loop, not any(generator): made for every pattern
            if num < 1:
                raise ShapeError(f"every free dim needs num >= 1; got {dims}")
        get_format(self.dtype)

    def __hash__(self) -> int:
        # the value dataclass's own __hash__ gives: the fields that compare, in order
        h = self._hash
        if h is None:
            h = hash((self.space, self.partition, self.partitions, self.offset, self.dims,
                      self.dtype, self.partition_step))
            object.__setattr__(self, "_hash", h)
        return h

    def __getstate__(self) -> list[object]:
        # what dataclass pickles for a frozen slotted class, less the kept rectangle and
        # hash: string and Space hashes differ between processes
        return [self.space, self.partition, self.partitions, self.offset, self.dims,
                self.dtype, self.partition_step, None, None]

    @property
    def shape(self) -> tuple[int, ...]:
        dims = self.dims
        if len(dims) == 1:  # most patterns; no generator (the simulator asks per instruction)
            return (self.partitions, dims[0][1])
        return (self.partitions, *(n for _, n in dims))

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

    @property
    def rect(self) -> Rect:
        """Partitions x the bytes touched in each (half-open), for overlap questions: on
        SBUF/PSUM the rows are partitions; a DRAM pattern's rows are its row range."""
        r = self._rect
        if r is None:
            lo, hi = self.free_bytes_span
            r = Rect.spans(self.partition, self.partition + self.partitions, lo, hi)
            object.__setattr__(self, "_rect", r)
        return r

    def start_address(self) -> int:
        """The bundle start address: the partition folds in (SBUF part<<18, PSUM part<<15).

        seed 000 "Partition Geometry"; DRAM addresses are plain byte offsets.
        """
        if self.space is Space.SBUF:
            return (self.partition << 18) | self.offset
        if self.space is Space.PSUM:
            return (self.partition << 15) | self.offset
        return self.offset


INDEX_FORMATS = ("int32", "uint32")
"""The formats of an index or offset an instruction reads from SBUF when it runs (indirect
DMA: "an SBUF tensor of int32 or uint32", NKI docs, tile-grid indexing; uint32 for
gather_flattened; the vendor's tensor_copy_dynamic_src offsets are int32)."""
