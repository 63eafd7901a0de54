"""The one adapter between the NKI front end and the compiler's codegen.

Every ``nisa.nc_matmul`` goes through the compiler's own one-matmul step,
:func:`systolic.compiler.codegen.emit_nc_matmul` (the dense codegen calls it for every step
of ``systolic.matmul`` too): the generation's calc-flag bits (:func:`calc_flags`, from the
generation table), the WeightTileState cache (a LoadStationary only when the tile group
does not already hold these weights, untouched since), fp32 as seed 000's two passes
(never cached), fp32r's forced column group, and the tile group from the tile's position.
``nc_matmul_mx`` is always the LdWeightMx + MatmultMx pair with the MX codegen's accumulate
byte (:func:`systolic.compiler.codegen_mx.acc_byte`). This module only keeps the state
between the calls of one kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from ..arch import Arch
from ..compiler.codegen import WeightTileState, calc_flags
from ..compiler.codegen import emit_nc_matmul as codegen_nc_matmul
from ..compiler.codegen_mx import acc_byte
from ..isa import (
    AccessPattern,
    Activation,
    DmaCopy,
    Fp32Pass,
    Instruction,
    LdWeightMx,
    LoadStationary,
    MatMul,
    MatmultMx,
    Memset,
    PerfMode,
    QuantizeMx,
    Space,
    TensorCopy,
    TensorReduce,
    TensorScalar,
    TensorTensor,
    row_group,
)
from ..isa import instructions as isa_
from ..isa.instructions import (
    BnAggr,
    BnStats,
    Iota,
    Reciprocal,
    ScalarTensorTensor,
    TensorTensorScan,
    Transpose,
)
from ..timing.dma import queue_for
from .opkind import (
    ActivationArgs,
    AffineSelectArgs,
    CopyArgs,
    CopyPredicatedArgs,
    DropoutArgs,
    DynamicCopyArgs,
    DynamicCopyDstArgs,
    GatherFlattenedArgs,
    IndirectDmaArgs,
    IotaArgs,
    LocalGatherArgs,
    MatchReplace8Args,
    MatmulArgs,
    MatmulMxArgs,
    MemsetArgs,
    OpKind,
    PartitionReduceArgs,
    RandArgs,
    RangeSelectArgs,
    ScalarTensorTensorArgs,
    ScanArgs,
    SelectArgs,
    StreamShuffleArgs,
    TensorReduceArgs,
    TensorScalarArgs,
    TensorTensorArgs,
    VectorTransposeArgs,
)
from .record import Op

__all__ = ["LOWER", "UNMERGED_SOURCES", "MatmulState", "Placed", "Rule", "emit_nc_matmul",
           "emit_nc_matmul_mx", "new_state"]


@dataclass
class MatmulState:
    """What lowering one kernel carries between its matmuls: the arch, the weight-tile
    cache (the compiler's immutable :class:`WeightTileState`) and the number of cache
    hits."""

    arch: Arch
    cache: WeightTileState = field(default_factory=WeightTileState)
    hits: int = 0

    def invalidate(self, written: AccessPattern) -> None:
        """An SBUF write over latched weights' source is an intervening writer (seed 000)."""
        self.cache = self.cache.written(written)


def new_state(arch: Arch) -> MatmulState:
    return MatmulState(arch)


def emit_nc_matmul(st: MatmulState, stationary: AccessPattern, moving: AccessPattern,
                   dst: AccessPattern, *, first: bool, last: bool, perf: PerfMode,
                   column: int, transpose: bool = False) -> list[Instruction]:
    """The instructions of one nc_matmul: dst[M, N] (+)= stationary[K, M].T @
    moving[K, N], START on the group's first matmul and STOP on its last; the tile sits at
    array row ``stationary.partition`` and column ``column``.

    ``transpose`` (nc_matmul ``is_transpose``, nc_transpose on the Tensor Engine): from
    NeuronCore-v3 the PE's transpose mode passes the data through bit-accurately
    (trainium2_arch.rst "Built-in Transpose Support"), so an fp32 transpose is ONE pass of
    the fp32 values (LoadStationary + MatMul, fp32_pass full; x * 1 + 0 is exact in fp32),
    not the two bf16 passes of an fp32 matmul. 8- and 16-bit floats are exact through the
    ordinary matmul. NeuronCore-v2 has no transpose mode: the ordinary matmul."""
    m = stationary.dims[-1][1]
    flags = calc_flags(st.arch, first, last)
    insts, st.cache = codegen_nc_matmul(
        st.cache, st.arch, stationary=stationary, moving=moving, dst=dst,
        flags=flags, perf_mode=perf,
        tile_position=(stationary.partition, column), tile_size=(stationary.partitions, m))
    if transpose and stationary.dtype == "fp32" and st.arch.generation >= 3:
        # the first pass of codegen's fp32 pair, whole: the latch and the MatMul of fp32
        latch, mm = insts[0], insts[1]
        assert isinstance(latch, LoadStationary) and isinstance(mm, MatMul)
        insts = [replace(latch, fp32_pass=Fp32Pass.FULL),
                 replace(mm, flags=flags, fp32_pass=Fp32Pass.FULL)]
    if stationary.dtype != "fp32" and not any(isinstance(i, LoadStationary) for i in insts):
        st.hits += 1  # WeightTileState hit: the weights were warm, the MatMul went alone
    return list(insts)


def emit_nc_matmul_mx(st: MatmulState, stationary: AccessPattern, moving: AccessPattern,
                      stationary_scale: AccessPattern, moving_scale: AccessPattern,
                      dst: AccessPattern, *, first: bool, last: bool, bank: int
                      ) -> list[Instruction]:
    """One nc_matmul_mx: always the pair LdWeightMx + MatmultMx (seed 000: the MX path has
    no weight cache), with the compiler's MX accumulate byte (START first, ACCUMULATE after,
    STOP last)."""
    rg = row_group(stationary.partition, stationary.partitions)
    st.cache = WeightTileState()  # the MX load replaced whatever dense tile the PEs held
    return [LdWeightMx(stationary, stationary_scale, 0, rg, stationary.dtype),
            MatmultMx(moving, moving_scale, dst, acc_byte(first, last), moving.dtype,
                      stationary.dtype, rg, bank)]


# -- ONE lowering rule per recorded kind ------------------------------------------------------
class Placed(NamedTuple):
    """A recorded operation's views as access patterns at their placed addresses (dst, then
    srcs and outs in the op's order), and its place in its accumulation group (matmuls)."""

    dst: AccessPattern
    srcs: list[AccessPattern]
    outs: list[AccessPattern]
    first: bool
    last: bool


Rule = Callable[[Op, Placed, MatmulState], list[Instruction]]

# the kinds whose source patterns keep every dimension (a matmul operand's [K, 2, F])
UNMERGED_SOURCES = frozenset({OpKind.MATMUL})


def _mx_scale(scale: AccessPattern, data: AccessPattern) -> AccessPattern:
    """The E8M0 scale pattern of an MX operand: block g of the data's partitions keeps its
    scale at row 32*(g//4) + g%4 of the scale tile (NKI docs; FACTS "Hardware")."""
    from ..verify.mx import scale_span

    return AccessPattern(Space.SBUF, scale.partition, scale_span(data.partitions),
                         scale.offset, scale.dims, "e8m0")


def _matmul(op: Op, p: Placed, st: MatmulState) -> list[Instruction]:
    a = op.args
    assert isinstance(a, MatmulArgs)
    return emit_nc_matmul(st, p.srcs[0], p.srcs[1], p.dst, first=p.first, last=p.last,
                          perf=a.perf, column=a.col, transpose=a.transpose)


def _matmul_mx(op: Op, p: Placed, st: MatmulState) -> list[Instruction]:
    assert isinstance(op.args, MatmulMxArgs)
    s = p.srcs
    return emit_nc_matmul_mx(st, s[0], s[1], _mx_scale(s[2], s[0]), _mx_scale(s[3], s[1]),
                             p.dst, first=p.first, last=p.last,
                             bank=p.dst.offset // st.arch.psum_bank_bytes)


def _dma(op: Op, p: Placed, st: MatmulState) -> list[Instruction]:
    # the compiler's queue assignment (timing/dma.py queue_for)
    return [DmaCopy(p.srcs[0], p.dst, queue_for(p.srcs[0], p.dst))]


def _indirect_dma(op: Op, p: Placed, st: MatmulState) -> list[Instruction]:
    a = op.args
    assert isinstance(a, IndirectDmaArgs)
    data, table = (p.srcs[0], p.dst) if a.scatter else (p.dst, p.srcs[0])
    src, dst = (data, table) if a.scatter else (table, data)
    return [isa_.DmaIndirect(data, table, p.srcs[1], a.scatter, a.accumulate, a.skip_oob,
                             queue_for(src, dst))]


def _copy(op: Op, p: Placed, st: MatmulState) -> list[Instruction]:
    assert isinstance(op.args, CopyArgs)
    return [TensorCopy(p.srcs[0], p.dst, op.args.engine)]


def _tensor_tensor(op: Op, p: Placed, st: MatmulState) -> list[Instruction]:
    a = op.args
    assert isinstance(a, TensorTensorArgs)
    return [TensorTensor(p.srcs[0], p.srcs[1], p.dst, a.op, a.engine)]


def _memset(op: Op, p: Placed, st: MatmulState) -> list[Instruction]:
    a = op.args
    assert isinstance(a, MemsetArgs)
    return [Memset(p.dst, a.value, a.engine)]


def _activation(op: Op, p: Placed, st: MatmulState) -> list[Instruction]:
    a = op.args
    assert isinstance(a, ActivationArgs)
    rest = iter(p.srcs[1:])  # bias, then scales, as recorded (nki/ops.py)
    bias = next(rest) if a.bias else None
    scales = next(rest) if a.scales else None
    acc = p.outs[0] if p.outs else None
    return [Activation(p.srcs[0], p.dst, a.func, a.scale, a.engine, bias=bias, scales=scales,
                       acc=acc, acc_op=a.acc_op)]


def _tensor_scalar(op: Op, p: Placed, st: MatmulState) -> list[Instruction]:
    a = op.args
    assert isinstance(a, TensorScalarArgs)
    rest = iter(p.srcs[1:])  # the operand tiles, in order (nki/ops.py)
    c0 = next(rest) if a.c0 is None else None
    c1 = next(rest) if a.op1 is not None and a.c1 is None else None
    return [TensorScalar(p.srcs[0], p.dst, a.op0, 1.0 if a.c0 is None else a.c0, a.engine,
                         operand0_ap=c0, reverse0=a.reverse0, op1=a.op1,
                         operand1=0.0 if a.c1 is None else a.c1, operand1_ap=c1,
                         reverse1=a.reverse1, acc=p.outs[0] if p.outs else None,
                         acc_op=a.acc_op)]


def _tensor_reduce(op: Op, p: Placed, st: MatmulState) -> list[Instruction]:
    a = op.args
    assert isinstance(a, TensorReduceArgs)
    return [TensorReduce(p.srcs[0], p.dst, a.op, a.engine, a.negate)]


def _quantize_mx(op: Op, p: Placed, st: MatmulState) -> list[Instruction]:
    return [QuantizeMx(p.srcs[0], p.dst, _mx_scale(p.outs[0], p.dst))]


def _vector_transpose(op: Op, p: Placed, st: MatmulState) -> list[Instruction]:
    assert isinstance(op.args, VectorTransposeArgs)
    return [Transpose(p.srcs[0], p.dst, op.args.engine)]


def _bn_stats(op: Op, p: Placed, st: MatmulState) -> list[Instruction]:
    return [BnStats(p.srcs[0], p.dst)]


def _bn_aggr(op: Op, p: Placed, st: MatmulState) -> list[Instruction]:
    return [BnAggr(p.srcs[0], p.dst)]


def _iota(op: Op, p: Placed, st: MatmulState) -> list[Instruction]:
    a = op.args
    assert isinstance(a, IotaArgs)
    outer = [(s, ax.num) for s, ax in zip(a.outer_steps, op.dst.axes[1:-1], strict=True)
             if ax.num > 1]
    return [Iota(p.dst, a.base, a.partition_step, a.free_step, tuple(s for s, _ in outer),
                 tuple(n for _, n in outer))]


def _reciprocal(op: Op, p: Placed, st: MatmulState) -> list[Instruction]:
    return [Reciprocal(p.srcs[0], p.dst)]


def _scan(op: Op, p: Placed, st: MatmulState) -> list[Instruction]:
    a = op.args
    assert isinstance(a, ScanArgs)
    init = p.srcs[2] if a.initial is None else None
    return [TensorTensorScan(p.srcs[0], p.srcs[1], p.dst, a.op0, a.op1,
                             0.0 if a.initial is None else a.initial, init, a.reverse0,
                             a.reverse1)]


def _scalar_tensor_tensor(op: Op, p: Placed, st: MatmulState) -> list[Instruction]:
    a = op.args
    assert isinstance(a, ScalarTensorTensorArgs)
    c0 = p.srcs[2] if a.c0 is None else None  # srcs: data, operand1, [operand0] (nki/vector.py)
    return [ScalarTensorTensor(p.srcs[0], p.srcs[1], p.dst, a.op0,
                               0.0 if a.c0 is None else a.c0, c0, a.op1, a.reverse0,
                               a.reverse1)]


# -- selection, top-8, gather, random (issue 19, second part) ------------------------------
def _affine_select(op: Op, p: Placed, st: MatmulState) -> list[Instruction]:
    a = op.args
    assert isinstance(a, AffineSelectArgs)
    return [isa_.AffineSelect(p.srcs[0], p.dst, a.fill, a.cmp, a.base, a.partition_step,
                              a.free_step)]


def _range_select(op: Op, p: Placed, st: MatmulState) -> list[Instruction]:
    a = op.args
    assert isinstance(a, RangeSelectArgs)
    return [isa_.RangeSelect(p.srcs[0], p.dst, p.srcs[1], p.srcs[2], a.cmp0, a.cmp1,
                             a.range_start, a.fill, p.outs[0] if p.outs else None,
                             a.reduce_cmd)]


def _select(op: Op, p: Placed, st: MatmulState) -> list[Instruction]:
    a = op.args
    assert isinstance(a, SelectArgs)
    other = p.srcs[2] if a.on_false is None else None
    return [isa_.Select(p.srcs[0], p.srcs[1], p.dst, a.on_false or 0.0, other,
                        a.reverse_pred, p.outs[0] if p.outs else None, a.reduce_cmd)]


def _copy_predicated(op: Op, p: Placed, st: MatmulState) -> list[Instruction]:
    a = op.args
    assert isinstance(a, CopyPredicatedArgs)
    src = p.srcs[1] if a.value is None else None  # srcs end with dst itself (read)
    return [isa_.CopyPredicated(p.srcs[0], p.dst, src, a.value or 0.0, a.reverse_pred)]


def _partition_reduce(op: Op, p: Placed, st: MatmulState) -> list[Instruction]:
    a = op.args
    assert isinstance(a, PartitionReduceArgs)
    return [isa_.PartitionReduce(p.srcs[0], p.dst, a.op)]


def _max8(op: Op, p: Placed, st: MatmulState) -> list[Instruction]:
    return [isa_.Max8(p.srcs[0], p.dst)]


def _find_index8(op: Op, p: Placed, st: MatmulState) -> list[Instruction]:
    return [isa_.FindIndex8(p.srcs[0], p.srcs[1], p.dst)]


def _match_replace8(op: Op, p: Placed, st: MatmulState) -> list[Instruction]:
    a = op.args
    assert isinstance(a, MatchReplace8Args)
    return [isa_.MatchReplace8(p.srcs[0], p.srcs[1], p.dst, a.imm,
                               p.outs[0] if p.outs else None)]


def _stream_shuffle(op: Op, p: Placed, st: MatmulState) -> list[Instruction]:
    a = op.args
    assert isinstance(a, StreamShuffleArgs)
    return [isa_.StreamShuffle(p.srcs[0], p.dst, a.shuffle_mask)]


def _copy_dynamic(op: Op, p: Placed, st: MatmulState) -> list[Instruction]:
    a = op.args
    assert isinstance(a, DynamicCopyArgs)
    src = p.srcs[0]
    return [isa_.TensorCopyDynamic(src, p.srcs[1], p.srcs[2], p.dst, a.step * src.itemsize,
                                   a.lo, a.hi, a.engine)]


def _copy_dynamic_dst(op: Op, p: Placed, st: MatmulState) -> list[Instruction]:
    a = op.args
    assert isinstance(a, DynamicCopyDstArgs)
    window = p.outs[0]
    return [isa_.TensorCopyDynamicDst(p.srcs[0], p.srcs[1], p.dst, window,
                                      a.step * window.itemsize, a.lo, a.hi, a.engine)]


def _gather_flattened(op: Op, p: Placed, st: MatmulState) -> list[Instruction]:
    assert isinstance(op.args, GatherFlattenedArgs)
    return [isa_.GatherFlattened(p.srcs[0], p.srcs[1], p.dst)]


def _local_gather(op: Op, p: Placed, st: MatmulState) -> list[Instruction]:
    a = op.args
    assert isinstance(a, LocalGatherArgs)
    return [isa_.LocalGather(p.srcs[0], p.srcs[1], p.dst, a.num_elem_per_idx,
                             a.num_valid_indices)]


def _sequence_bounds(op: Op, p: Placed, st: MatmulState) -> list[Instruction]:
    return [isa_.SequenceBounds(p.srcs[0], p.dst)]


def _rand(op: Op, p: Placed, st: MatmulState) -> list[Instruction]:
    a = op.args
    assert isinstance(a, RandArgs)
    return [isa_.Rand(p.dst, a.seed)]


def _dropout(op: Op, p: Placed, st: MatmulState) -> list[Instruction]:
    a = op.args
    assert isinstance(a, DropoutArgs)
    prob = p.srcs[1] if a.prob is None else None
    return [isa_.Dropout(p.srcs[0], p.dst, a.prob or 0.0, prob, a.seed)]


LOWER: dict[OpKind, Rule] = {
    OpKind.DMA: _dma,
    OpKind.INDIRECT_DMA: _indirect_dma,
    OpKind.COPY: _copy,
    OpKind.TENSOR_TENSOR: _tensor_tensor,
    OpKind.TENSOR_SCALAR: _tensor_scalar,
    OpKind.TENSOR_REDUCE: _tensor_reduce,
    OpKind.MEMSET: _memset,
    OpKind.ACTIVATION: _activation,
    OpKind.MATMUL: _matmul,
    OpKind.MATMUL_MX: _matmul_mx,
    OpKind.QUANTIZE_MX: _quantize_mx,
    OpKind.VECTOR_TRANSPOSE: _vector_transpose,
    OpKind.BN_STATS: _bn_stats,
    OpKind.BN_AGGR: _bn_aggr,
    OpKind.IOTA: _iota,
    OpKind.RECIPROCAL: _reciprocal,
    OpKind.TENSOR_TENSOR_SCAN: _scan,
    OpKind.SCALAR_TENSOR_TENSOR: _scalar_tensor_tensor,
    OpKind.AFFINE_SELECT: _affine_select,
    OpKind.RANGE_SELECT: _range_select,
    OpKind.SELECT: _select,
    OpKind.COPY_PREDICATED: _copy_predicated,
    OpKind.PARTITION_REDUCE: _partition_reduce,
    OpKind.MAX8: _max8,
    OpKind.FIND_INDEX8: _find_index8,
    OpKind.MATCH_REPLACE8: _match_replace8,
    OpKind.STREAM_SHUFFLE: _stream_shuffle,
    OpKind.LOCAL_GATHER: _local_gather,
    OpKind.TENSOR_COPY_DYNAMIC: _copy_dynamic,
    OpKind.TENSOR_COPY_DYNAMIC_DST: _copy_dynamic_dst,
    OpKind.GATHER_FLATTENED: _gather_flattened,
    OpKind.SEQUENCE_BOUNDS: _sequence_bounds,
    OpKind.RAND: _rand,
    OpKind.DROPOUT: _dropout,
}
"""The one lowering table: every recorded kind to the instructions it becomes, each naming
its engine. Matmul rules keep the weight-tile cache themselves; after every other rule the
emission pass marks the SBUF its instructions write as an intervening writer (seed 000)."""
assert set(LOWER) == set(OpKind), "every recorded kind has one lowering rule"
