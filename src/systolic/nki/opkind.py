"""The recorded operations, typed: :class:`OpKind` and one frozen record of arguments per kind.

A recorded :class:`~systolic.nki.record.Op` carries its views (what it writes and reads) and
one of the records below, whose class names its kind (``Op.kind`` is ``type(args).KIND``).
Each kind is lowered by exactly one rule of :data:`systolic.nki.lower.LOWER` (tested: every
kind has one). The records hold what the recording checked and resolved (the ALU operator,
the engine, the constants), never the kernel's raw call arguments.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import ClassVar

from ..isa import ActivationFunc, AluOp, Engine, PerfMode
from ..isa.fields import ReduceCmd

__all__ = [
    "ActivationArgs",
    "AffineSelectArgs",
    "BnAggrArgs",
    "BnStatsArgs",
    "CopyArgs",
    "CopyPredicatedArgs",
    "DmaArgs",
    "DropoutArgs",
    "DynamicCopyArgs",
    "DynamicCopyDstArgs",
    "FindIndex8Args",
    "GatherFlattenedArgs",
    "IndirectDmaArgs",
    "IotaArgs",
    "LocalGatherArgs",
    "MatchReplace8Args",
    "MatmulArgs",
    "MatmulMxArgs",
    "Max8Args",
    "MemsetArgs",
    "OpArgs",
    "OpKind",
    "PartitionReduceArgs",
    "QuantizeMxArgs",
    "RandArgs",
    "RangeSelectArgs",
    "ReciprocalArgs",
    "ScalarTensorTensorArgs",
    "ScanArgs",
    "SelectArgs",
    "SequenceBoundsArgs",
    "StreamShuffleArgs",
    "TensorReduceArgs",
    "TensorScalarArgs",
    "TensorTensorArgs",
    "VectorTransposeArgs",
]


class OpKind(enum.Enum):
    """What a recorded operation is; the value is the NKI call's name, for messages."""

    DMA = "dma_copy"
    INDIRECT_DMA = "indirect dma_copy"  # x[idx_tile, ...]: a gather or a scatter
    COPY = "tensor_copy"
    TENSOR_TENSOR = "tensor_tensor"
    TENSOR_SCALAR = "tensor_scalar"
    TENSOR_REDUCE = "tensor_reduce"
    MEMSET = "memset"
    ACTIVATION = "activation"
    MATMUL = "nc_matmul"
    MATMUL_MX = "nc_matmul_mx"
    QUANTIZE_MX = "quantize_mx"
    VECTOR_TRANSPOSE = "nc_transpose"
    BN_STATS = "bn_stats"
    BN_AGGR = "bn_aggr"
    IOTA = "iota"
    RECIPROCAL = "reciprocal"
    TENSOR_TENSOR_SCAN = "tensor_tensor_scan"
    SCALAR_TENSOR_TENSOR = "scalar_tensor_tensor"
    # selection, top-8, gather, random (issue 19, second part; nki/select.py, top8.py,
    # gather.py, random.py)
    AFFINE_SELECT = "affine_select"
    RANGE_SELECT = "range_select"
    SELECT = "select_reduce"
    COPY_PREDICATED = "tensor_copy_predicated"
    PARTITION_REDUCE = "tensor_partition_reduce"
    MAX8 = "max8"
    FIND_INDEX8 = "nc_find_index8"
    MATCH_REPLACE8 = "nc_match_replace8"
    STREAM_SHUFFLE = "nc_stream_shuffle"
    LOCAL_GATHER = "local_gather"
    TENSOR_COPY_DYNAMIC = "tensor_copy_dynamic_src"
    TENSOR_COPY_DYNAMIC_DST = "tensor_copy_dynamic_dst"
    GATHER_FLATTENED = "gather_flattened"
    SEQUENCE_BOUNDS = "sequence_bounds"
    RAND = "rand"
    DROPOUT = "dropout"

    # members are singletons compared by identity, so hash by identity too: Enum's own
    # __hash__ (hash of the name, in Python) was 0.05 s of a 100,000-op kernel's lowering
    __hash__ = object.__hash__


@dataclass(frozen=True, slots=True)
class DmaArgs:
    """``dma_copy``: dst = srcs[0], bytes as they are (a cast is recorded as a copy)."""

    KIND: ClassVar[OpKind] = OpKind.DMA


@dataclass(frozen=True, slots=True)
class IndirectDmaArgs:
    """A DMA through a tile of indices (``nl.load(x[idx_tile, ...])``, ``nl.store``,
    ``dma_copy``): a gather has dst the SBUF rows and srcs (table, index); a scatter has dst
    the table (every row an index may name) and srcs (the SBUF rows, index), then the table
    again when it ``accumulate``s (``dst_rmw_op=np.add``). ``skip_oob``: out-of-range
    indices leave their row out (``oob_mode.skip``) instead of failing."""

    KIND: ClassVar[OpKind] = OpKind.INDIRECT_DMA
    scatter: bool
    accumulate: bool = False
    skip_oob: bool = False


@dataclass(frozen=True, slots=True)
class CopyArgs:
    """``tensor_copy`` on an engine: dst = srcs[0], rounded to dst's dtype."""

    KIND: ClassVar[OpKind] = OpKind.COPY
    engine: Engine


@dataclass(frozen=True, slots=True)
class TensorTensorArgs:
    """``tensor_tensor``: dst = srcs[0] op srcs[1]."""

    KIND: ClassVar[OpKind] = OpKind.TENSOR_TENSOR
    engine: Engine
    op: AluOp


@dataclass(frozen=True, slots=True)
class TensorScalarArgs:
    """``tensor_scalar``: (data op0 operand0) op1 operand1. ``c0`` / ``c1`` are the constant
    operands, None where a [P, 1] tile gives it (then that tile is the next of srcs[1:]);
    outs holds ``reduce_res`` of ``tensor_scalar_reduce`` (the results also reduced with
    ``acc_op``)."""

    KIND: ClassVar[OpKind] = OpKind.TENSOR_SCALAR
    engine: Engine
    op0: AluOp
    c0: float | None
    reverse0: bool
    op1: AluOp | None
    c1: float | None
    reverse1: bool
    acc_op: AluOp = AluOp.ADD


@dataclass(frozen=True, slots=True)
class TensorReduceArgs:
    """``tensor_reduce`` over every free element of each partition, negated if asked."""

    KIND: ClassVar[OpKind] = OpKind.TENSOR_REDUCE
    engine: Engine
    op: AluOp
    negate: bool


@dataclass(frozen=True, slots=True)
class MemsetArgs:
    KIND: ClassVar[OpKind] = OpKind.MEMSET
    engine: Engine
    value: float


@dataclass(frozen=True, slots=True)
class ActivationArgs:
    """``activation``: func(data * scale + bias). srcs are data, then the bias tile if
    ``bias``, then the per-partition scale tile if ``scales`` (else the constant ``scale``);
    outs holds ``reduce_res`` when the results are also reduced (``acc_op``)."""

    KIND: ClassVar[OpKind] = OpKind.ACTIVATION
    engine: Engine
    func: ActivationFunc
    scale: float
    bias: bool
    scales: bool
    acc_op: AluOp


@dataclass(frozen=True, slots=True)
class MatmulArgs:
    """``nc_matmul``: dst (+)= srcs[0].T @ srcs[1] at array row ``row``, column ``col``;
    ``transpose``: the PE's transpose mode (nki/lower.py); ``iadd``: the older API's
    ``psum[...] += nc_matmul(...)`` (accumulate True), which may open a group (nki/build.py)."""

    KIND: ClassVar[OpKind] = OpKind.MATMUL
    accumulate: bool | None
    perf: PerfMode
    row: int
    col: int
    transpose: bool = False
    iadd: bool = False


@dataclass(frozen=True, slots=True)
class MatmulMxArgs:
    """``nc_matmul_mx``: srcs are stationary, moving, their scales."""

    KIND: ClassVar[OpKind] = OpKind.MATMUL_MX
    accumulate: bool | None


@dataclass(frozen=True, slots=True)
class QuantizeMxArgs:
    """``quantize_mx``: srcs[0] into dst and the scales outs[0]."""

    KIND: ClassVar[OpKind] = OpKind.QUANTIZE_MX


@dataclass(frozen=True, slots=True)
class VectorTransposeArgs:
    """``nc_transpose`` on the Vector engine (the PE transpose is recorded as a matmul)."""

    KIND: ClassVar[OpKind] = OpKind.VECTOR_TRANSPOSE
    engine: Engine


@dataclass(frozen=True, slots=True)
class BnStatsArgs:
    KIND: ClassVar[OpKind] = OpKind.BN_STATS


@dataclass(frozen=True, slots=True)
class BnAggrArgs:
    KIND: ClassVar[OpKind] = OpKind.BN_AGGR


@dataclass(frozen=True, slots=True)
class IotaArgs:
    """``iota``: base + partition_step * p + free_step * j, j the flat free element; with
    ``outer_steps`` (one per free axis of dst but its last), base + partition_step * p +
    sum(outer_steps[k] * i_k) + free_step * i_last over dst's axes."""

    KIND: ClassVar[OpKind] = OpKind.IOTA
    base: int
    partition_step: int
    free_step: int
    outer_steps: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ReciprocalArgs:
    KIND: ClassVar[OpKind] = OpKind.RECIPROCAL


@dataclass(frozen=True, slots=True)
class ScanArgs:
    """``tensor_tensor_scan``: srcs are data0, data1, then the initial tile if ``initial``
    is None (else the constant)."""

    KIND: ClassVar[OpKind] = OpKind.TENSOR_TENSOR_SCAN
    op0: AluOp
    op1: AluOp
    initial: float | None
    reverse0: bool
    reverse1: bool


@dataclass(frozen=True, slots=True)
class ScalarTensorTensorArgs:
    """``scalar_tensor_tensor``: (data op0 operand0) op1 operand1; srcs are data, operand1,
    then the operand0 tile if ``c0`` is None (else the constant)."""

    KIND: ClassVar[OpKind] = OpKind.SCALAR_TENSOR_TENSOR
    op0: AluOp
    c0: float | None
    reverse0: bool
    op1: AluOp
    reverse1: bool


# -- selection, top-8, gather, random (issue 19, second part) ------------------------------
@dataclass(frozen=True, slots=True)
class AffineSelectArgs:
    """``affine_select``: srcs[0] where ``base + partition_step * p + free_step * j  cmp
    0``, else ``fill``."""

    KIND: ClassVar[OpKind] = OpKind.AFFINE_SELECT
    fill: float
    cmp: AluOp
    base: int
    partition_step: int
    free_step: int


@dataclass(frozen=True, slots=True)
class RangeSelectArgs:
    """``range_select``: srcs are on_true, bound0, bound1; outs holds ``reduce_res``."""

    KIND: ClassVar[OpKind] = OpKind.RANGE_SELECT
    cmp0: AluOp
    cmp1: AluOp
    range_start: int
    fill: float
    reduce_cmd: ReduceCmd


@dataclass(frozen=True, slots=True)
class SelectArgs:
    """``select_reduce`` / ``nl.where``: srcs are predicate, on_true, then the on_false tile
    when ``on_false`` is None; outs holds ``reduce_res``."""

    KIND: ClassVar[OpKind] = OpKind.SELECT
    on_false: float | None
    reverse_pred: bool
    reduce_cmd: ReduceCmd


@dataclass(frozen=True, slots=True)
class CopyPredicatedArgs:
    """``tensor_copy_predicated``: srcs are predicate, src (unless ``value`` is given),
    then dst itself (read: its other elements stay)."""

    KIND: ClassVar[OpKind] = OpKind.COPY_PREDICATED
    value: float | None
    reverse_pred: bool


@dataclass(frozen=True, slots=True)
class PartitionReduceArgs:
    KIND: ClassVar[OpKind] = OpKind.PARTITION_REDUCE
    op: AluOp


@dataclass(frozen=True, slots=True)
class Max8Args:
    KIND: ClassVar[OpKind] = OpKind.MAX8


@dataclass(frozen=True, slots=True)
class FindIndex8Args:
    """``nc_find_index8``: srcs are data, vals."""

    KIND: ClassVar[OpKind] = OpKind.FIND_INDEX8


@dataclass(frozen=True, slots=True)
class MatchReplace8Args:
    """``nc_match_replace8``: srcs are data, vals; outs holds ``dst_idx`` when given."""

    KIND: ClassVar[OpKind] = OpKind.MATCH_REPLACE8
    imm: float


@dataclass(frozen=True, slots=True)
class StreamShuffleArgs:
    KIND: ClassVar[OpKind] = OpKind.STREAM_SHUFFLE
    shuffle_mask: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class LocalGatherArgs:
    """``local_gather``: srcs are src_buffer, index."""

    KIND: ClassVar[OpKind] = OpKind.LOCAL_GATHER
    num_elem_per_idx: int
    num_valid_indices: int


@dataclass(frozen=True, slots=True)
class DynamicCopyArgs:
    """``tensor_copy_dynamic_src``: srcs are the window at offset 0, the [1, 1] offset tile
    and the region the window may reach; at offset o it starts o * ``step`` elements on,
    ``lo`` <= o <= ``hi``."""

    KIND: ClassVar[OpKind] = OpKind.TENSOR_COPY_DYNAMIC
    engine: Engine
    step: int
    lo: int
    hi: int


@dataclass(frozen=True, slots=True)
class DynamicCopyDstArgs:
    """``tensor_copy_dynamic_dst``: dst is the region the window may write (every element
    of its tile along the dynamic axis), srcs are src and the [1, 1] offset tile, outs[0]
    the dst window at offset 0 (a may-write inside dst, never a read); at offset o the
    window starts o * ``step`` elements on, ``lo`` <= o <= ``hi``."""

    KIND: ClassVar[OpKind] = OpKind.TENSOR_COPY_DYNAMIC_DST
    engine: Engine
    step: int
    lo: int
    hi: int


@dataclass(frozen=True, slots=True)
class GatherFlattenedArgs:
    """``nl.gather_flattened``: srcs are data, indices."""

    KIND: ClassVar[OpKind] = OpKind.GATHER_FLATTENED


@dataclass(frozen=True, slots=True)
class SequenceBoundsArgs:
    KIND: ClassVar[OpKind] = OpKind.SEQUENCE_BOUNDS


@dataclass(frozen=True, slots=True)
class RandArgs:
    KIND: ClassVar[OpKind] = OpKind.RAND
    seed: int


@dataclass(frozen=True, slots=True)
class DropoutArgs:
    """``dropout``: srcs are data, then the [P, 1] probability tile when ``prob`` is None."""

    KIND: ClassVar[OpKind] = OpKind.DROPOUT
    prob: float | None
    seed: int


OpArgs = (DmaArgs | IndirectDmaArgs | CopyArgs | TensorTensorArgs | TensorScalarArgs
          | TensorReduceArgs | MemsetArgs | ActivationArgs | MatmulArgs | MatmulMxArgs
          | QuantizeMxArgs
          | VectorTransposeArgs | BnStatsArgs | BnAggrArgs | IotaArgs | ReciprocalArgs
          | ScanArgs | ScalarTensorTensorArgs | AffineSelectArgs | RangeSelectArgs | SelectArgs
          | CopyPredicatedArgs | PartitionReduceArgs | Max8Args | FindIndex8Args
          | MatchReplace8Args | StreamShuffleArgs | LocalGatherArgs | SequenceBoundsArgs
          | DynamicCopyArgs | DynamicCopyDstArgs | GatherFlattenedArgs
          | RandArgs | DropoutArgs)
