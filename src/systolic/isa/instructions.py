"""The instructions: frozen, slotted dataclasses with typed fields, and their groups.

The dense pair follows seed 000 "The Two-Phase Protocol": ``LoadStationary`` latches a
weight tile [K, M] into the array (rows = SBUF partitions, K; columns = M); ``MatMul``
streams the moving tile [K, N] through it into a PSUM bank. The MatMul bundle has no
weights address (seed 000 QUIRK): it carries the weights' dtype, base partition and tile
group only, and the weights are array state. Two instructions the seed does not name make a
Program self-contained: ``DmaLoad`` (device memory -> SBUF) and ``ReadOut`` (PSUM -> device
memory, the copy another engine does after a group's STOP).

:data:`Instruction` (the union) is declared once; :data:`OPCODES` (its members, in order)
is derived from it. The Program type that holds them is :mod:`systolic.isa`'s.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass

from .fields import (
    AccessPattern,
    ActivationFunc,
    AluOp,
    CalcFlags,
    Engine,
    Fp32Pass,
    PerfMode,
    ReduceCmd,
    TileGroup,
    col_group,
)

__all__ = [
    "ACCESS",
    "OPCODES",
    "Activation",
    "AffineSelect",
    "BnAggr",
    "BnStats",
    "CopyPredicated",
    "DmaCopy",
    "DmaIndirect",
    "DmaLoad",
    "Dropout",
    "FindIndex8",
    "GatherFlattened",
    "Group",
    "Instruction",
    "Iota",
    "LdWeightMx",
    "LoadStationary",
    "LocalGather",
    "MatMul",
    "MatchReplace8",
    "MatmultMx",
    "Max8",
    "Memset",
    "PartitionReduce",
    "QuantizeMx",
    "Rand",
    "RangeSelect",
    "ReadOut",
    "Reciprocal",
    "ScalarTensorTensor",
    "Select",
    "SequenceBounds",
    "StreamShuffle",
    "TensorCopy",
    "TensorCopyDynamic",
    "TensorCopyDynamicDst",
    "TensorReduce",
    "TensorScalar",
    "TensorTensor",
    "TensorTensorScan",
    "Transpose",
    "reads",
    "writes",
]


@dataclass(frozen=True, slots=True)
class LoadStationary:
    """Latch the weight tile ``src`` [K, M] into array rows src.partition.. and columns
    ``column``.. (seed 000 phase 1). ``fp32_pass`` selects the fp32 two-pass split: HI
    latches bf16(w), LO latches bf16(w - bf16(w)); FULL latches w as its format gives it."""

    src: AccessPattern
    column: int = 0
    row_group: TileGroup = TileGroup.ALL
    col_group: TileGroup = TileGroup.ALL
    perf_mode: PerfMode = PerfMode.NONE
    fp32_pass: Fp32Pass = Fp32Pass.FULL


@dataclass(frozen=True, slots=True)
class MatMul:
    """Stream ``moving`` [K, N] through the latched tile into PSUM ``dst`` [M, N] (phase 2).

    ``stationary_dtype``, ``stationary_partition`` and the tile group say which latched
    tile is used (the bundle carries no weights address). Zero points are subtracted
    before the product: out = sum_k (moving - zp_moving) * (stationary - zp_stationary)
    (seed 000, reference-model writeback). ``fp32_pass`` is FULL, or HI / LO for the first /
    second pass of an fp32 lowering (the pass of the tile it streams against).
    """

    moving: AccessPattern
    dst: AccessPattern
    flags: CalcFlags
    stationary_dtype: str
    stationary_partition: int = 0
    row_group: TileGroup = TileGroup.ALL
    col_group: TileGroup = TileGroup.ALL
    perf_mode: PerfMode = PerfMode.NONE
    zp_moving: int = 0
    zp_stationary: int = 0
    fp32_pass: Fp32Pass = Fp32Pass.FULL


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
    row_group: TileGroup = TileGroup.ALL
    fmt: str = "mxfp8_e4m3"

    @property
    def col_group(self) -> TileGroup:
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
    pattern (seed 000). ``flags`` is the pre-packed accumulate byte (the same CalcFlags as a
    MatMul's), copied verbatim to bundle byte 0x2B: bit0 START, bit1 STOP, bit2 ACCUMULATE;
    the gen4 rule of :mod:`systolic.isa.generation` accepts only {0, 1, 2, 3, 4, 6} (seed 000
    checkAccumulationFlag), so 5 and 7 are refused by :func:`systolic.verify` and the
    encoder, not here (a Program may hold them until it is verified).
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
    flags: CalcFlags
    fmt: str = "mxfp8_e4m3"
    stationary_fmt: str = "mxfp8_e4m3"
    row_group: TileGroup = TileGroup.ALL
    psum_zero_region: int = 0

    @property
    def col_group(self) -> TileGroup:
        return col_group(0, 0, force=True)

    @property
    def k(self) -> int:
        """Logical contraction elements: 4 per partition (seed 000 x4 unpack)."""
        return 4 * self.moving.partitions


@dataclass(frozen=True, slots=True)
class DmaLoad:
    """Copy device memory to SBUF on the DMA queues (the Tensor Engine's own view leaves it
    out, as if it overlapped; the whole-core timing runs it on its queues). ``src`` and
    ``dst`` enumerate the same shape, element for element."""

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
class DmaIndirect:
    """An indirect DMA: the software DGE's gather or scatter of rows of a device-memory
    table by a tile of indices in SBUF (NKI docs, nki.isa.dma_copy: "When sw_dge is
    selected, nisa.dma_copy can also perform a gather or scatter operation, using a list of
    dynamic indices from SBUF"; nki.language.load / store with ``x[idx_tile, ...]``).

    ``table`` is every row the indices may name: device memory, rows 0..``table.partitions``
    - 1 at ``table.partition_step`` bytes apart, each row's elements by ``table.dims``.
    ``data`` is the SBUF side [K, ...]: its partition k is the row named by the int32 (or
    uint32) value at partition k of ``index`` [K, 1]. The Program carries where the indices
    are, never their values: the rows are resolved when the instruction executes.

    * ``scatter`` False, a gather: data[k] = table[index[k]] (repeated indices allowed).
    * ``scatter`` True: table[index[k]] = data[k], k in order (a repeated index: the last
      write wins; unsure, the hardware's order is not published); ``accumulate``: table[
      index[k]] += data[k] in fp32, rounded to the table's format (``dst_rmw_op=np.add``;
      repeated indices add up, the docs' "the compiler automatically adds
      synchronization").

    An index outside 0..rows-1 is an error when executed, or with ``skip_oob``
    (``oob_mode.skip``) its row is left out: not read, not written."""

    data: AccessPattern
    table: AccessPattern
    index: AccessPattern
    scatter: bool = False
    accumulate: bool = False
    skip_oob: bool = False
    queue: int = 0

    engine = Engine.DMA

    @property
    def src(self) -> AccessPattern:
        """What the transfer reads: the table (gather) or the SBUF rows (scatter)."""
        return self.data if self.scatter else self.table

    @property
    def dst(self) -> AccessPattern:
        """What the transfer writes: the SBUF rows (gather) or the table (scatter)."""
        return self.table if self.scatter else self.data

    @property
    def table_read(self) -> AccessPattern | None:
        """The table when a scatter also reads it (``accumulate``), else None."""
        return self.table if self.scatter and self.accumulate else None


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
    """``nisa.activation``: dst = func(src * scale + bias) on the Scalar (Activation) engine,
    in fp32. ``scale`` is a constant or, when ``scales`` is given, one fp32 value per
    partition ([P, 1]); ``bias`` is one value per partition ([P, 1]) or none. With ``acc``
    ([P, 1]) the instruction also reduces each partition's results with ``acc_op`` into it
    (``reduce_res``, nki.isa.activation / activation_reduce)."""

    src: AccessPattern
    dst: AccessPattern
    func: ActivationFunc = ActivationFunc.COPY
    scale: float = 1.0
    engine: Engine = Engine.SCALAR
    bias: AccessPattern | None = None
    scales: AccessPattern | None = None
    acc: AccessPattern | None = None
    acc_op: AluOp = AluOp.ADD


@dataclass(frozen=True, slots=True)
class TensorScalar:
    """``nisa.tensor_scalar``: dst = (src op0 operand0) op1 operand1 in fp32, each operand a
    constant (``operand0``) or one value per partition (``operand0_ap``, [P, 1]); ``reverse0``
    puts the operand on the left of ``op0``. ``op1`` is optional. With ``acc`` ([P, 1], Vector
    engine) the instruction also reduces each partition's fp32 results with ``acc_op`` into
    it (``reduce_res`` of nki.isa.tensor_scalar_reduce)."""

    src: AccessPattern
    dst: AccessPattern
    op0: AluOp = AluOp.MULTIPLY
    operand0: float = 1.0
    engine: Engine = Engine.VECTOR
    operand0_ap: AccessPattern | None = None
    reverse0: bool = False
    op1: AluOp | None = None
    operand1: float = 0.0
    operand1_ap: AccessPattern | None = None
    reverse1: bool = False
    acc: AccessPattern | None = None
    acc_op: AluOp = AluOp.ADD


@dataclass(frozen=True, slots=True)
class TensorReduce:
    """``nisa.tensor_reduce`` along the innermost free elements: with K = dst's elements per
    partition, dst[p, k] = op over the k-th of K equal consecutive runs of src[p, ...] in
    fp32 (``negate``: its negative); K = 1 reduces every free element of a partition."""

    src: AccessPattern
    dst: AccessPattern
    op: AluOp = AluOp.ADD
    engine: Engine = Engine.VECTOR
    negate: bool = False


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


# --- engine instructions added for the NKI breadth of issue 19 -------------------------
@dataclass(frozen=True, slots=True)
class Transpose:
    """``nisa.nc_transpose(engine=vector)``: dst[f, p] = src[p, f], a PF-transpose of a tile of
    at most 32 x 32 on the Vector engine (NKI docs, nki.isa.nc_transpose: "Vector Engine can
    handle shape (32, 32) or smaller"), SBUF or PSUM on either side, the dtype kept. ``src``
    is [P, F] (its free dims flattened), ``dst`` [F, P]. The Tensor Engine's transpose is a
    matmul against an identity (LoadStationary + MatMul), not this instruction."""

    src: AccessPattern
    dst: AccessPattern
    engine: Engine = Engine.VECTOR


@dataclass(frozen=True, slots=True)
class BnStats:
    """``nisa.bn_stats`` (Vector engine): per partition of ``src`` [P, N] (N <= 512,
    ``nl.tile_size.bn_stats_fmax``), six fp32 statistics into ``dst`` [P, 6]: count, mean
    and variance x count of the even-indexed elements, then the same of the odd-indexed ones
    (NKI docs, nki.isa.bn_stats), rounded to dst's format."""

    src: AccessPattern
    dst: AccessPattern
    engine: Engine = Engine.VECTOR


@dataclass(frozen=True, slots=True)
class BnAggr:
    """``nisa.bn_aggr`` (Vector engine): aggregate the (count, mean, variance x count)
    triples of ``src`` [P, 3k] (the outputs of one or more bn_stats) into ``dst`` [P, 2]:
    the mean and the (population) variance of all the elements they describe (NKI docs,
    nki.isa.bn_aggr)."""

    src: AccessPattern
    dst: AccessPattern
    engine: Engine = Engine.VECTOR


@dataclass(frozen=True, slots=True)
class Iota:
    """``nisa.iota`` (GpSimd engine): dst[p, j] = base + partition_step * p + free_step * j
    in 32-bit integer math, cast to dst's format (NKI docs, nki.isa.iota), ``j`` the index
    of the element in dst's free elements (row-major). Nothing is read.

    With ``outer_sizes`` (the newer API's pattern, [[step, num], ...] outermost first: NKI
    docs, nki.isa.iota), j is split row-major into outer indices i_0.. over ``outer_sizes``
    and an inner index i of the remaining free_elems / prod(outer_sizes) elements, and the
    value is base + partition_step * p + sum(outer_steps[k] * i_k) + free_step * i."""

    dst: AccessPattern
    base: int = 0
    partition_step: int = 0
    free_step: int = 0
    outer_steps: tuple[int, ...] = ()
    outer_sizes: tuple[int, ...] = ()
    engine: Engine = Engine.GPSIMD


@dataclass(frozen=True, slots=True)
class Reciprocal:
    """``nisa.reciprocal`` (Vector engine): dst = 1 / src elementwise in fp32, rounded to
    dst's format (NKI docs, nki.isa.reciprocal)."""

    src: AccessPattern
    dst: AccessPattern
    engine: Engine = Engine.VECTOR


@dataclass(frozen=True, slots=True)
class TensorTensorScan:
    """``nisa.tensor_tensor_scan`` (Vector engine): per partition, along the free elements
    j, dst[j] = (data0[j] op0 dst[j-1]) op1 data1[j] with dst[-1] = ``initial`` (a constant,
    or ``initial_ap``: one value per partition, [P, 1]), in fp32, each result rounded to
    dst's format; ``reverse0``/``reverse1`` swap an operator's operands (NKI docs,
    nki.isa.tensor_tensor_scan)."""

    data0: AccessPattern
    data1: AccessPattern
    dst: AccessPattern
    op0: AluOp = AluOp.MULTIPLY
    op1: AluOp = AluOp.ADD
    initial: float = 0.0
    initial_ap: AccessPattern | None = None
    reverse0: bool = False
    reverse1: bool = False
    engine: Engine = Engine.VECTOR


@dataclass(frozen=True, slots=True)
class ScalarTensorTensor:
    """``nisa.scalar_tensor_tensor`` (Vector engine): dst = (data op0 operand0) op1 operand1
    in fp32, rounded to dst's format; ``operand0`` a constant or one value per partition
    (``operand0_ap``, [P, 1]), ``operand1`` a tile of data's shape; ``reverse0`` /
    ``reverse1`` put the operand on the left of its operator (NKI docs,
    nki.isa.scalar_tensor_tensor). Its own instruction, not a TensorScalar variant: its
    second operand is a whole tile, not [P, 1], and its cost is its own (N or 2N, no
    MIN_II, no perf mode: timing/costs.py)."""

    data: AccessPattern
    operand1: AccessPattern
    dst: AccessPattern
    op0: AluOp = AluOp.SUBTRACT
    operand0: float = 0.0
    operand0_ap: AccessPattern | None = None
    op1: AluOp = AluOp.MULTIPLY
    reverse0: bool = False
    reverse1: bool = False
    engine: Engine = Engine.VECTOR


# --- selection, top-8, gather and random instructions (issue 19, second part) ----------
# Values: systolic.sim.functional_select; checks: systolic.verify.select; costs: the rows
# of systolic.timing.costs.
@dataclass(frozen=True, slots=True)
class AffineSelect:
    """``nisa.affine_select`` (GpSimd): dst = src where ``base + partition_step * p +
    free_step * j  cmp  0`` (p the partition, j the free element, flat, of dst; cmp an
    ``AluOp`` comparison), else ``fill`` (an fp32 constant); the predicate is computed by
    the engine from the affine expression (NKI docs, nki.isa.affine_select)."""

    src: AccessPattern
    dst: AccessPattern
    fill: float
    cmp: AluOp
    base: int = 0
    partition_step: int = 0
    free_step: int = 0
    engine: Engine = Engine.GPSIMD


@dataclass(frozen=True, slots=True)
class RangeSelect:
    """``nisa.range_select`` (Vector, NeuronCore-v3 on): dst = src where ``(range_start + j)
    cmp0 bound0[p]`` and ``(range_start + j) cmp1 bound1[p]`` (j the free element, compared
    in fp32; the bounds [P, 1] fp32 tiles), else ``fill``; the row maximum goes through the
    Vector engine's accumulation register as ``reduce_cmd`` says, into ``acc`` when given
    (NKI docs, nki.isa.range_select)."""

    src: AccessPattern
    dst: AccessPattern
    bound0: AccessPattern
    bound1: AccessPattern
    cmp0: AluOp
    cmp1: AluOp
    range_start: int = 0
    fill: float = -3.4028234663852886e38
    acc: AccessPattern | None = None
    reduce_cmd: ReduceCmd = ReduceCmd.IDLE
    engine: Engine = Engine.VECTOR


@dataclass(frozen=True, slots=True)
class Select:
    """``nisa.select_reduce`` and ``nl.where`` (Vector): dst = on_true where the predicate
    (``predicate`` nonzero, or zero with ``reverse_pred``) holds, else ``on_false`` (a
    constant, or ``on_false_ap``: [P, 1] per partition or dst's shape); the row maximum goes
    through the accumulation register as ``reduce_cmd`` says, into ``acc`` when given."""

    predicate: AccessPattern
    on_true: AccessPattern
    dst: AccessPattern
    on_false: float = 0.0
    on_false_ap: AccessPattern | None = None
    reverse_pred: bool = False
    acc: AccessPattern | None = None
    reduce_cmd: ReduceCmd = ReduceCmd.IDLE
    engine: Engine = Engine.VECTOR


@dataclass(frozen=True, slots=True)
class CopyPredicated:
    """``nisa.tensor_copy_predicated`` (Vector): dst = src (``src_ap``; the constant
    ``value`` when it is None) where ``predicate`` is nonzero (zero with ``reverse_pred``);
    dst keeps its values elsewhere, so dst is read as well as written."""

    predicate: AccessPattern
    dst: AccessPattern
    src_ap: AccessPattern | None = None
    value: float = 0.0
    reverse_pred: bool = False
    engine: Engine = Engine.VECTOR


@dataclass(frozen=True, slots=True)
class PartitionReduce:
    """``nisa.tensor_partition_reduce`` (GpSimd): dst[0, j] = op over the partitions p of
    src[p, j] (add or maximum), in fp32, rounded to dst's format."""

    src: AccessPattern
    dst: AccessPattern
    op: AluOp = AluOp.ADD
    engine: Engine = Engine.GPSIMD


@dataclass(frozen=True, slots=True)
class Max8:
    """``nisa.max8`` (Vector): the 8 largest values of each partition of src (read as fp32),
    in descending order, into dst [P, 8]."""

    src: AccessPattern
    dst: AccessPattern
    engine: Engine = Engine.VECTOR


@dataclass(frozen=True, slots=True)
class FindIndex8:
    """``nisa.nc_find_index8`` (Vector): per partition, the index (from 0, along the flat free
    elements of ``data``) of the first occurrence of each of the 8 ``vals``, into dst [P, 8]
    (an unsigned integer format)."""

    data: AccessPattern
    vals: AccessPattern
    dst: AccessPattern
    engine: Engine = Engine.VECTOR


@dataclass(frozen=True, slots=True)
class MatchReplace8:
    """``nisa.nc_match_replace8`` (Vector): per partition, for each of the 8 ``vals`` in turn,
    the first element of ``data`` equal to it is replaced by ``imm`` (the result in dst) and
    its index written to ``dst_idx`` when given."""

    data: AccessPattern
    vals: AccessPattern
    dst: AccessPattern
    imm: float = 0.0
    dst_idx: AccessPattern | None = None
    engine: Engine = Engine.VECTOR


@dataclass(frozen=True, slots=True)
class StreamShuffle:
    """``nisa.nc_stream_shuffle`` (Vector): within each quadrant of 32 partitions, dst
    partition i takes src partition ``shuffle_mask[i]`` of the same quadrant (255: dst
    partition i is left as it is); partitions counted from each pattern's first."""

    src: AccessPattern
    dst: AccessPattern
    shuffle_mask: tuple[int, ...]
    engine: Engine = Engine.VECTOR


@dataclass(frozen=True, slots=True)
class LocalGather:
    """``nisa.local_gather`` (GpSimd): each of the 8 GpSimd cores gathers from its 16
    partitions of ``src`` [P, E]: its indices (``index``, flattened partition-first, the first
    ``num_valid_indices``) are element offsets into each partition's row, and
    ``num_elem_per_idx`` contiguous elements are read from each; dst [P, valid x per_idx]."""

    src: AccessPattern
    index: AccessPattern
    dst: AccessPattern
    num_elem_per_idx: int = 1
    num_valid_indices: int = 0
    engine: Engine = Engine.GPSIMD


@dataclass(frozen=True, slots=True)
class TensorCopyDynamic:
    """``nisa.tensor_copy_dynamic_src``: dst = the ``src`` window moved along one free axis
    by an offset read from SBUF when the instruction executes (NKI docs,
    nki.isa.tensor_copy_dynamic_src: "with src located at a dynamic offset within each
    partition"; "The dynamic offset must be a scalar value resided in SBUF").

    ``src`` is the window at offset 0; ``offset`` the [1, 1] int32/uint32 SBUF element
    holding the offset; at offset ``o`` the window starts ``o * step`` bytes further, and
    ``lo`` <= o <= ``hi`` keeps it inside its tile (else a one-line error when executed).
    ``region`` is every element the window may reach (the tile along that axis): what the
    dependencies see, conservatively (unsure how the engine orders it). The Program carries
    where the offset is, never its value. Cast as ``TensorCopy`` (through fp32)."""

    src: AccessPattern
    offset: AccessPattern
    region: AccessPattern
    dst: AccessPattern
    step: int
    lo: int
    hi: int
    engine: Engine = Engine.VECTOR


@dataclass(frozen=True, slots=True)
class TensorCopyDynamicDst:
    """``nisa.tensor_copy_dynamic_dst``: the ``dst`` window moved along one free axis by an
    offset read from SBUF when the instruction executes = ``src`` (NKI docs,
    nki.isa.tensor_copy_dynamic_dst: "with dst located at a dynamic offset within each
    partition"; "The dynamic offset must be a scalar value resided in SBUF"); the mirror of
    :class:`TensorCopyDynamic`, with the same fields.

    ``dst`` is the window at offset 0; ``offset`` the [1, 1] int32/uint32 SBUF element
    holding the offset; at offset ``o`` the window starts ``o * step`` bytes further, and
    ``lo`` <= o <= ``hi`` keeps it inside its tile (else a one-line error when executed,
    nothing written). ``region`` is every element the window may write (the tile along that
    axis): the write the dependencies see, conservatively, as _src's read of its region
    (unsure how the engine orders it); any byte of it may or may not be written. Cast as
    ``TensorCopy`` (through fp32)."""

    src: AccessPattern
    offset: AccessPattern
    region: AccessPattern
    dst: AccessPattern
    step: int
    lo: int
    hi: int
    engine: Engine = Engine.VECTOR


@dataclass(frozen=True, slots=True)
class GatherFlattened:
    """``nl.gather_flattened(data, indices)``: within each partition p, with every free
    dimension flattened, dst[p, j] = data[p, indices[p, j]] (NKI docs,
    nki.language.gather_flattened; GpSimd, as nki.isa.nc_n_gather, unsure). The indices are
    uint32 (int32 accepted) in SBUF, read when it executes; dst has the indices' shape and
    data's dtype. Out-of-range indices "return garbage values" on the device: the model
    refuses them with a one-line error instead."""

    data: AccessPattern
    indices: AccessPattern
    dst: AccessPattern
    engine: Engine = Engine.GPSIMD


@dataclass(frozen=True, slots=True)
class SequenceBounds:
    """``nisa.sequence_bounds`` (GpSimd): for segment ids src [1, n], dst [1, 2, n] holds each
    element's segment start and end (end exclusive); id 0 is padding: start n, end -1."""

    src: AccessPattern
    dst: AccessPattern
    engine: Engine = Engine.GPSIMD


@dataclass(frozen=True, slots=True)
class Rand:
    """``nl.rand`` (Vector, unsure which engine): dst filled with uniform values in [0, 1)
    from the model's counter-based generator keyed by ``seed`` (NOT the hardware's
    generator, which is not published: the values cannot match a device's bits)."""

    dst: AccessPattern
    seed: int = 0
    engine: Engine = Engine.VECTOR


@dataclass(frozen=True, slots=True)
class Dropout:
    """``nisa.dropout`` (Vector): dst = 0 where the model's uniform draw (keyed by ``seed``,
    as :class:`Rand`) is below the drop probability (``prob``, or ``prob_ap`` [P, 1] per
    partition), else src; kept values are not rescaled (NKI docs, nki.isa.dropout)."""

    src: AccessPattern
    dst: AccessPattern
    prob: float = 0.0
    prob_ap: AccessPattern | None = None
    seed: int = 0
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
               | TensorCopy | TensorTensor | Memset | Activation | QuantizeMx | TensorScalar
               | TensorReduce | Transpose | BnStats | BnAggr | Iota | Reciprocal
               | TensorTensorScan | ScalarTensorTensor | AffineSelect | RangeSelect | Select
               | CopyPredicated | PartitionReduce | Max8 | FindIndex8 | MatchReplace8
               | StreamShuffle | LocalGather | SequenceBounds | Rand | Dropout | DmaIndirect
               | TensorCopyDynamic | TensorCopyDynamicDst | GatherFlattened)
# Every instruction class, in the union's order (opcode order of counts() and the text form).
OPCODES: tuple[type, ...] = typing.get_args(Instruction)


class Group:
    """Named groups of instruction kinds, declared once (tinygrad's ``GroupOp``): every
    module that asks "is this a weight load / a compute / a DMA" reads these tuples, usable
    directly with ``isinstance``."""

    LOAD: tuple[type, ...] = (LoadStationary, LdWeightMx)  # latch a stationary tile
    COMPUTE: tuple[type, ...] = (MatMul, MatmultMx)  # stream a moving tile into PSUM
    PE: tuple[type, ...] = LOAD + COMPUTE  # the Tensor Engine's own instructions
    MX: tuple[type, ...] = (LdWeightMx, MatmultMx)  # gen4 MX pair
    DENSE: tuple[type, ...] = (LoadStationary, MatMul)
    DMA: tuple[type, ...] = (DmaLoad, DmaCopy, DmaIndirect)  # transfers on the DMA queues
    ELEMENTWISE: tuple[type, ...] = (TensorCopy, TensorTensor, Memset, Activation, QuantizeMx,
                                     TensorScalar, TensorReduce, Transpose, BnStats, BnAggr,
                                     Iota, Reciprocal, TensorTensorScan, ScalarTensorTensor,
                                     AffineSelect,
                                     RangeSelect, Select, CopyPredicated, PartitionReduce,
                                     Max8, FindIndex8, MatchReplace8, StreamShuffle,
                                     LocalGather, SequenceBounds, Rand, Dropout,
                                     TensorCopyDynamic, TensorCopyDynamicDst,
                                     GatherFlattened)
    READOUT: tuple[type, ...] = (ReadOut,)



# What each instruction kind reads and writes, by field name, declared once (issue 18): the
# whole-core timing's dependency tracker, the verifier and the tests' reference scheduler
# read this table rather than keeping their own. A MatMul's accumulation into ``dst`` is a
# write (PSUM adds in program order on the one Tensor queue).
ACCESS: dict[type, tuple[tuple[str, ...], tuple[str, ...]]] = {
    LoadStationary: (("src",), ()),
    MatMul: (("moving",), ("dst",)),
    LdWeightMx: (("src", "scale"), ()),
    MatmultMx: (("moving", "scale"), ("dst",)),
    DmaLoad: (("src",), ("dst",)),
    ReadOut: (("src",), ("dst",)),
    DmaCopy: (("src",), ("dst",)),
    # the DRAM side is the whole table, every row an index may name, not the rows the
    # indices do name (their values are unknown until it executes): a conservative region
    # (unsure how the hardware's DGE orders it against other accesses of the table)
    DmaIndirect: (("src", "index", "table_read"), ("dst",)),
    TensorCopy: (("src",), ("dst",)),
    TensorTensor: (("a", "b"), ("dst",)),
    Memset: ((), ("dst",)),
    Activation: (("src", "bias", "scales"), ("dst", "acc")),
    QuantizeMx: (("src",), ("dst", "scale")),
    TensorScalar: (("src", "operand0_ap", "operand1_ap"), ("dst", "acc")),
    TensorReduce: (("src",), ("dst",)),
    Transpose: (("src",), ("dst",)),
    BnStats: (("src",), ("dst",)),
    BnAggr: (("src",), ("dst",)),
    Iota: ((), ("dst",)),
    Reciprocal: (("src",), ("dst",)),
    TensorTensorScan: (("data0", "data1", "initial_ap"), ("dst",)),
    ScalarTensorTensor: (("data", "operand0_ap", "operand1"), ("dst",)),
    AffineSelect: (("src",), ("dst",)),
    RangeSelect: (("src", "bound0", "bound1"), ("dst", "acc")),
    Select: (("predicate", "on_true", "on_false_ap"), ("dst", "acc")),
    CopyPredicated: (("predicate", "src_ap", "dst"), ("dst",)),
    PartitionReduce: (("src",), ("dst",)),
    Max8: (("src",), ("dst",)),
    FindIndex8: (("data", "vals"), ("dst",)),
    MatchReplace8: (("data", "vals"), ("dst", "dst_idx")),
    StreamShuffle: (("src",), ("dst",)),
    LocalGather: (("src", "index"), ("dst",)),
    # the offset / indices and every element they may name (their values are unknown
    # until it executes): a conservative region, as DmaIndirect's table
    TensorCopyDynamic: (("region", "offset"), ("dst",)),
    # the window's dst at offset 0 lies inside ``region``: the whole region is the write
    # (a may-write: which bytes, only the offset's value says)
    TensorCopyDynamicDst: (("src", "offset"), ("region",)),
    GatherFlattened: (("data", "indices"), ("dst",)),
    SequenceBounds: (("src",), ("dst",)),
    Rand: ((), ("dst",)),
    Dropout: (("src", "prob_ap"), ("dst",)),
}
assert set(ACCESS) == set(OPCODES), "every instruction kind declares its accesses"


def reads(ins: Instruction) -> tuple[AccessPattern, ...]:
    """The access patterns ``ins`` reads (:data:`ACCESS`; optional operands left out when
    absent)."""
    return tuple(ap for f in ACCESS[type(ins)][0] if (ap := getattr(ins, f)) is not None)


def writes(ins: Instruction) -> tuple[AccessPattern, ...]:
    """The access patterns ``ins`` writes (:data:`ACCESS`; optional outputs left out when
    absent)."""
    return tuple(ap for f in ACCESS[type(ins)][1] if (ap := getattr(ins, f)) is not None)
