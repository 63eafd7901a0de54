"""The engine-cost table: what one instruction costs on its engine, one row per instruction
kind and engine, each citing its formula (issue 18 part 4; docs/timing.md "Engines").

The formulas are the "Estimated instruction cost" sections of the nki.isa pages
(aws-neuron-sdk ``nki/api/nki/isa/__init__.py`` at commit 7c165a3e; removed at HEAD) and the
architecture guides (``nki/guides/architecture/*_arch.rst``):

* ``N`` is the number of elements per partition of the instruction's input (its output for
  memset/iota); the partition count does not enter (the 128 lanes work in parallel);
* ``MIN_II`` (``Arch.engine_min_ii``) is "roughly 64 engine cycles";
* the Vector engine performance mode of NeuronCore-v3/v4 (trainium2_arch.rst) and the
  Scalar engine's of v4 (trainium3_arch.rst) divide N for the formats of
  ``Arch.vector_perf_formats`` / ``scalar_perf_formats``; the hardware detects the
  conditions itself;
* a minor free-dimension stride above 16 bytes halves SBUF/PSUM bandwidth
  (trainium_inferentia2_arch.rst "Access pattern"): such an operand doubles the time of an
  instruction the formula does not already charge for it.

What is *not* an instruction's own cost, and so not here: the dependency overhead (+100
cycles on a read-after-write on the same engine) and the ~60-cycle SBUF/PSUM access
latency, which the scheduler (timing/core.py) adds as latencies between ops, because only
it knows the dependencies.

A cost is a pure function of the instruction (frozen, hashable) and the Arch, so it never
depends on what ran before it: :func:`engine_cycles` memoises on the instruction itself.
To give a new instruction kind its cost, add one :class:`Row` to :data:`ROWS` naming the
kind, the engines it may run on, the function and the formula with its source.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from math import ceil

from ..arch import Arch
from ..dtypes import get_format
from ..errors import SystolicError
from ..isa import (
    AccessPattern,
    Activation,
    AluOp,
    Engine,
    GatherFlattened,
    Memset,
    QuantizeMx,
    ReadOut,
    Space,
    TensorCopy,
    TensorCopyDynamic,
    TensorCopyDynamicDst,
    TensorReduce,
    TensorScalar,
    TensorTensor,
)
from ..isa.instructions import (
    AffineSelect,
    BnAggr,
    BnStats,
    CopyPredicated,
    Dropout,
    FindIndex8,
    Iota,
    LocalGather,
    MatchReplace8,
    Max8,
    PartitionReduce,
    Rand,
    RangeSelect,
    Reciprocal,
    ScalarTensorTensor,
    Select,
    SequenceBounds,
    StreamShuffle,
    TensorTensorScan,
    Transpose,
)

__all__ = ["ROWS", "Row", "engine_cycles", "engine_hz", "rows_for"]

# a minor free-dimension stride above this many bytes halves SBUF/PSUM bandwidth
_FAST_STRIDE_BYTES = 16


def engine_hz(arch: Arch, engine: Engine) -> int:
    """The clock of an engine, Hz (Arch; the Tensor Engine's is ``clock_hz``)."""
    if engine is Engine.TENSOR:
        return int(arch.clock_hz)
    if engine is Engine.VECTOR:
        return arch.vector_hz
    if engine is Engine.SCALAR:
        return arch.scalar_hz
    if engine is Engine.GPSIMD:
        return arch.gpsimd_hz
    raise SystolicError(f"{engine.value} is not a compute engine; DMA is timed by "
                        f"timing/dma.py")


def _n(ap: AccessPattern) -> int:
    return ap.free_elems


def _contiguous(ap: AccessPattern) -> bool:
    """Physically contiguous along the innermost free dimension (stride of one element)."""
    return all(num == 1 or step == 1 for step, num in ap.dims[-1:])


def _slow_stride(ap: AccessPattern) -> bool:
    """The innermost free stride is above 16 bytes (half bandwidth)."""
    step, num = ap.dims[-1]
    return num > 1 and abs(step) * ap.itemsize > _FAST_STRIDE_BYTES


def _in(fmt: str, formats: tuple[str, ...]) -> bool:
    return fmt in formats


def _floor(arch: Arch, cycles: float) -> int:
    return max(arch.engine_min_ii, ceil(cycles))


def _stride_factor(*aps: AccessPattern) -> int:
    return 2 if any(_slow_stride(ap) for ap in aps) else 1


# -- the formulas ---------------------------------------------------------------------------
def _copy_speedup(arch: Arch, engine: Engine, src: AccessPattern, dst: AccessPattern) -> int:
    """The performance-mode factor of a tensor_copy / tensor_scalar / activation copy:
    Vector v3+ 4x when both tensors are in SBUF, in a perf-mode format and contiguous; 2x
    when strided or one of them is in PSUM (trainium2_arch.rst); Scalar v4 2x for
    BF16/FP16 (trainium3_arch.rst)."""
    if engine is Engine.VECTOR:
        if not (_in(src.dtype, arch.vector_perf_formats)
                and _in(dst.dtype, arch.vector_perf_formats)):
            return 1
        sbuf = src.space is Space.SBUF and dst.space is Space.SBUF
        contiguous = _contiguous(src) and _contiguous(dst)
        if sbuf and contiguous:
            return 4
        return 2 if sbuf or contiguous else 1
    if engine is Engine.SCALAR and _in(src.dtype, arch.scalar_perf_formats) \
            and _in(dst.dtype, arch.scalar_perf_formats):
        return 2
    return 1


def tensor_copy(ins: TensorCopy, arch: Arch, engine: Engine) -> int:
    """``max(MIN_II, N)`` engine cycles (nki.isa.tensor_copy), over the perf-mode factor."""
    sp = _copy_speedup(arch, engine, ins.src, ins.dst)
    return _floor(arch, _n(ins.src) * _stride_factor(ins.src, ins.dst) / sp)


def activation(ins: Activation, arch: Arch, engine: Engine) -> int:
    """``max(MIN_II, N)`` Scalar engine cycles (nki.isa.activation), plus ``MIN_II`` with a
    reduction into ``reduce_res`` (nki.isa.activation_reduce: ``max(MIN_II, N) + MIN_II``);
    v4's Scalar perf mode for BF16/FP16 (trainium3_arch.rst)."""
    sp = _copy_speedup(arch, engine, ins.src, ins.dst) if engine is Engine.SCALAR else 1
    cost = _floor(arch, _n(ins.src) * _stride_factor(ins.src, ins.dst) / sp)
    return cost + (arch.engine_min_ii if ins.acc is not None else 0)


def tensor_scalar(ins: TensorScalar, arch: Arch, engine: Engine) -> int:
    """``max(MIN_II, N)`` Vector or Scalar engine cycles (nki.isa.tensor_scalar), over the
    trn2 Vector perf mode of tensor_copy / tensor_scalar (trainium2_arch.rst). With a
    reduction into ``reduce_res`` (``acc``): ``max(MIN_II, N) + MIN_II`` Vector cycles
    (nki.isa.tensor_scalar_reduce), no perf mode (unsure: its page names none, and FACTS
    "Hardware" gives the trn2 perf mode for tensor_copy / tensor_scalar only)."""
    if ins.acc is not None:
        return _floor(arch, _n(ins.src) * _stride_factor(ins.src, ins.dst)) \
            + arch.engine_min_ii
    sp = _copy_speedup(arch, engine, ins.src, ins.dst)
    return _floor(arch, _n(ins.src) * _stride_factor(ins.src, ins.dst) / sp)


_HALF_REDUCE_OPS = frozenset({AluOp.ADD, AluOp.MAXIMUM})


def tensor_reduce(ins: TensorReduce, arch: Arch, engine: Engine) -> int:
    """nki.isa.tensor_reduce: ``N/2`` Vector cycles when input and output are bfloat16 and
    the operator is add or maximum, else ``N`` (at least MIN_II, the formula's floor)."""
    n = _n(ins.src)
    half = (ins.src.dtype == "bf16" and ins.dst.dtype == "bf16"
            and ins.op in _HALF_REDUCE_OPS)
    return _floor(arch, (n / 2 if half else n) * _stride_factor(ins.src))


_FAST_TT_OPS = frozenset({AluOp.ADD, AluOp.MULTIPLY, AluOp.SUBTRACT})


def tensor_tensor(ins: TensorTensor, arch: Arch, engine: Engine) -> int:
    """nki.isa.tensor_tensor on Vector: ``max(MIN_II, N)`` when one input is in PSUM and
    the other in SBUF, or when both are in SBUF, all of input/output are bfloat16, the
    operator is add, multiply or subtract and the inputs are contiguous; else
    ``max(MIN_II, 2N)``. v3+'s perf mode gives the N rule to fp16 too (trainium2_arch.rst
    "2x ... when both input tensors are SBUF and all of input/output tensors are in
    BF16/FP16"). GpSimd: two input tiles, ``2N`` (trainium_inferentia2_arch.rst cost
    model)."""
    a, b, d = ins.a, ins.b, ins.dst
    n = _n(a)
    if engine is not Engine.VECTOR:
        return _floor(arch, 2 * n)
    one_psum = (a.space is Space.PSUM) != (b.space is Space.PSUM)
    fast_fmts = ("bf16", *arch.vector_perf_formats)
    fast = (a.space is Space.SBUF and b.space is Space.SBUF
            and all(x.dtype in fast_fmts for x in (a, b, d)) and ins.op in _FAST_TT_OPS
            and _contiguous(a) and _contiguous(b))
    return _floor(arch, n if one_psum or fast else 2 * n)


def memset(ins: Memset, arch: Arch, engine: Engine) -> int:
    """nki.isa.memset: ``max(MIN_II, N/2)`` when the value is zero and the output is
    bfloat16/float16, else ``max(MIN_II, N)`` (Vector engine cycles; the same rule on
    GpSimd)."""
    n = _n(ins.dst)
    half = ins.value == 0.0 and get_format(ins.dst.dtype).family == "half"
    return _floor(arch, n / 2 if half else n)


def quantize_mx(ins: QuantizeMx, arch: Arch, engine: Engine) -> int:
    """QuantizeMX "can quantize four input elements per partition, per cycle (i.e., 4x
    Vector performance mode)" (trainium3_arch.rst): ``max(MIN_II, N/4)``."""
    return _floor(arch, _n(ins.src) / 4)


def readout_evacuation(ins: ReadOut, arch: Arch, engine: Engine) -> int:
    """The PSUM evacuation half of the compiler's ReadOut: a tensor_copy of the fp32 PSUM
    tile, ``max(MIN_II, N)`` (fp32 takes no perf mode)."""
    return _floor(arch, _n(ins.src) * _stride_factor(ins.src))


# The NKI breadth of issue 19, from nki.isa 'Estimated instruction cost' at aws-neuron-sdk
# 7c165a3e, nki/api/nki/isa/__init__.py: nc_transpose "max(MIN_II, N) ... engine set to
# vector" (N: elements per partition of data); bn_stats "max(MIN_II, N) Vector Engine
# cycles"; bn_aggr "max(MIN_II, 13*(N/3)) Vector Engine cycles" (N: elements per partition
# of data); iota "150 + N GpSimd Engine cycles, where N is the number of elements per
# partition in the output tile".
_IOTA_FIXED_CYCLES = 150


def vector_transpose(ins: Transpose, arch: Arch, engine: Engine) -> int:
    """nki.isa.nc_transpose on the Vector engine: ``max(MIN_II, N)``."""
    return _floor(arch, _n(ins.src))


def bn_stats(ins: BnStats, arch: Arch, engine: Engine) -> int:
    """nki.isa.bn_stats: ``max(MIN_II, N)`` Vector cycles."""
    return _floor(arch, _n(ins.src))


def bn_aggr(ins: BnAggr, arch: Arch, engine: Engine) -> int:
    """nki.isa.bn_aggr: ``max(MIN_II, 13 * (N / 3))`` Vector cycles."""
    return _floor(arch, 13 * (_n(ins.src) / 3))


def iota(ins: Iota, arch: Arch, engine: Engine) -> int:
    """nki.isa.iota: ``150 + N`` GpSimd cycles (N: output elements per partition)."""
    return _IOTA_FIXED_CYCLES + _n(ins.dst)


def reciprocal(ins: Reciprocal, arch: Arch, engine: Engine) -> int:
    """nki.isa.reciprocal: "max(MIN_II, 8*N) Vector Engine cycles, where N is the number of
    elements per partition in data"."""
    return _floor(arch, 8 * _n(ins.src))


def tensor_tensor_scan(ins: TensorTensorScan, arch: Arch, engine: Engine) -> int:
    """nki.isa.tensor_tensor_scan: "max(MIN_II, 2N) Vector Engine cycles, where N is the
    number of elements per partition in data0/data1"."""
    return _floor(arch, 2 * _n(ins.data0))


def scalar_tensor_tensor(ins: ScalarTensorTensor, arch: Arch, engine: Engine) -> int:
    """nki.isa.scalar_tensor_tensor: "N" Vector Engine cycles when "data and operand1 are
    both bfloat16, op0=nl.subtract and op1=nl.multiply, and N is even", "2*N otherwise", N
    the elements per partition in data. The formula alone: no MIN_II floor and no stride
    rule (its page prints neither; unsure), no perf mode (it names none)."""
    n = _n(ins.data)
    fast = (ins.data.dtype == "bf16" and ins.operand1.dtype == "bf16"
            and ins.op0 is AluOp.SUBTRACT and ins.op1 is AluOp.MULTIPLY and n % 2 == 0)
    return n if fast else 2 * n


# -- selection, top-8, gather, random (issue 19, second part) -----------------------------
def gpsimd_start_n(ins: AffineSelect | PartitionReduce | SequenceBounds, arch: Arch,
                   engine: Engine) -> int:
    """nki.isa.affine_select: "GPSIMD_START + N GpSimd Engine cycles ... GPSIMD_START ...
    roughly 150 engine cycles", N the elements per partition of the input. PartitionReduce
    and SequenceBounds take the same form (unsure: the docs give them no cost)."""
    return _IOTA_FIXED_CYCLES + _n(ins.src)


def vector_n_floor(ins: RangeSelect | StreamShuffle | Dropout | MatchReplace8 | Select,
                   arch: Arch, engine: Engine) -> int:
    """``max(MIN_II, N)`` Vector cycles, N the elements per partition of the input
    (nki.isa.range_select, nc_stream_shuffle, dropout; nc_match_replace8 prints
    ``min(MIN_II, N)``, read as max (a constant cost for any size is unlikely: unsure);
    select_reduce gives none: range_select's, the same select-and-reduce, unsure)."""
    src = (ins.on_true if isinstance(ins, Select) else ins.data
           if isinstance(ins, MatchReplace8) else ins.src)
    return _floor(arch, _n(src))


def vector_n(ins: Max8 | FindIndex8, arch: Arch, engine: Engine) -> int:
    """nki.isa.max8 / nc_find_index8: "N engine cycles", N the elements per partition of the
    source (no MIN_II floor in the docs)."""
    return _n(ins.src if isinstance(ins, Max8) else ins.data)


def copy_predicated(ins: CopyPredicated, arch: Arch, engine: Engine) -> int:
    """nki.isa.tensor_copy_predicated: ``max(MIN_II, N)`` "if src is from SBUF and predicate
    is from PSUM or the other way around", ``max(MIN_II, 2N)`` "if both src and dst are in
    SBUF"; a constant src reads like SBUF (unsure)."""
    src = ins.src_ap.space if ins.src_ap is not None else Space.SBUF
    one_psum = (src is Space.PSUM) != (ins.predicate.space is Space.PSUM)
    return _floor(arch, _n(ins.dst) * (1 if one_psum else 2))


def local_gather(ins: LocalGather, arch: Arch, engine: Engine) -> int:
    """nki.isa.local_gather: "150 + (num_valid_indices * num_elem_per_idx)/C GpSimd Engine
    cycles, where C = ((28 + t * num_elem_per_idx)/(t * num_elem_per_idx)) /
    min(4/dtype_size, num_elem_per_idx)", t = 4."""
    k, t = ins.num_elem_per_idx, 4
    c = ((28 + t * k) / (t * k)) / min(4 / ins.src.itemsize, k)
    return _IOTA_FIXED_CYCLES + ceil(ins.num_valid_indices * k / c)


# nki.isa.tensor_copy_dynamic_src / _dst: "max(MIN_II_DYNAMIC, N) engine cycles ...
# MIN_II_DYNAMIC is roughly 600 engine cycles" (NKI docs, latest; an older release gave
# tensor_copy's cost plus about 140 cycles to read the index: unsure which the hardware has)
MIN_II_DYNAMIC = 600


def tensor_copy_dynamic(ins: TensorCopyDynamic | TensorCopyDynamicDst, arch: Arch,
                        engine: Engine) -> int:
    """nki.isa.tensor_copy_dynamic_src and _dst: ``max(MIN_II_DYNAMIC, N)``, N the elements
    per partition of the source (both pages: "N is the number of elements per partition in
    the src tile")."""
    return max(MIN_II_DYNAMIC, _n(ins.src))


def gather_flattened(ins: GatherFlattened, arch: Arch, engine: Engine) -> int:
    """nl.gather_flattened gives no cost (unsure): GpSimd tensor_copy's ``max(MIN_II, N)``,
    N the elements per partition of dst."""
    return _floor(arch, _n(ins.dst))


def rand(ins: Rand, arch: Arch, engine: Engine) -> int:
    """``max(MIN_II, N)``, N the elements per partition of dst (unsure: nl.rand gives no
    cost; dropout's, the same engine's random draw per element)."""
    return _floor(arch, _n(ins.dst))


@dataclass(frozen=True, slots=True)
class Row:
    """One row of the table: an instruction kind, the engines it runs on, its cost in
    cycles of that engine, and the formula as its source gives it."""

    kind: type
    engines: tuple[Engine, ...]
    cost: Callable[..., int]
    formula: str
    source: str


_V, _S, _G = Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD
_ISA = "nki.isa 'Estimated instruction cost' (aws-neuron-sdk 7c165a3e)"

ROWS: tuple[Row, ...] = (
    Row(TensorCopy, (_V, _S, _G), tensor_copy, "max(MIN_II, N) / perf mode",
        f"{_ISA} tensor_copy; trainium2_arch.rst Vector perf mode"),
    Row(TensorTensor, (_V, _G), tensor_tensor, "max(MIN_II, N) or max(MIN_II, 2N)",
        f"{_ISA} tensor_tensor"),
    Row(TensorTensor, (_S,), tensor_tensor, "max(MIN_II, 2N)",
        "trainium_inferentia2_arch.rst: two input tiles, about 2N"),
    Row(Memset, (_V, _G, _S), memset, "max(MIN_II, N/2) for 0 in bf16/fp16, else "
        "max(MIN_II, N)", f"{_ISA} memset"),
    Row(Activation, (_S,), activation, "max(MIN_II, N), + MIN_II with reduce_res",
        f"{_ISA} activation, activation_reduce"),
    Row(Activation, (_V, _G), activation, "max(MIN_II, N)",
        "trainium_inferentia2_arch.rst: one input tile, about N"),
    Row(TensorScalar, (_V, _S, _G), tensor_scalar, "max(MIN_II, N) / perf mode; "
        "max(MIN_II, N) + MIN_II with reduce_res",
        f"{_ISA} tensor_scalar, tensor_scalar_reduce; trainium2_arch.rst Vector perf mode"),
    Row(TensorReduce, (_V, _G), tensor_reduce, "N/2 for bf16 add/max, else N (>= MIN_II)",
        f"{_ISA} tensor_reduce"),
    Row(QuantizeMx, (_V,), quantize_mx, "max(MIN_II, N/4)",
        "trainium3_arch.rst QuantizeMX: four elements per partition per cycle"),
    Row(ReadOut, (_V, _S, _G), readout_evacuation, "max(MIN_II, N)",
        f"{_ISA} tensor_copy (the evacuation of a fp32 PSUM tile)"),
    Row(Transpose, (_V,), vector_transpose, "max(MIN_II, N)",
        f"{_ISA} nc_transpose (engine=vector)"),
    Row(BnStats, (_V,), bn_stats, "max(MIN_II, N)", f"{_ISA} bn_stats"),
    Row(BnAggr, (_V,), bn_aggr, "max(MIN_II, 13 * (N / 3))", f"{_ISA} bn_aggr"),
    Row(Iota, (_G,), iota, "150 + N", f"{_ISA} iota"),
    Row(Reciprocal, (_V,), reciprocal, "max(MIN_II, 8N)", f"{_ISA} reciprocal"),
    Row(TensorTensorScan, (_V,), tensor_tensor_scan, "max(MIN_II, 2N)",
        f"{_ISA} tensor_tensor_scan"),
    Row(ScalarTensorTensor, (_V,), scalar_tensor_tensor, "N for bf16 data and operand1, "
        "op0 subtract, op1 multiply and N even; else 2N", f"{_ISA} scalar_tensor_tensor"),
    Row(AffineSelect, (_G,), gpsimd_start_n, "150 + N", f"{_ISA} affine_select"),
    Row(RangeSelect, (_V,), vector_n_floor, "max(MIN_II, N)", f"{_ISA} range_select"),
    Row(Select, (_V,), vector_n_floor, "max(MIN_II, N) (unsure: none in the docs)",
        f"{_ISA} range_select (select_reduce has none)"),
    Row(CopyPredicated, (_V,), copy_predicated, "max(MIN_II, N) one operand in PSUM, else "
        "max(MIN_II, 2N)", f"{_ISA} tensor_copy_predicated"),
    Row(PartitionReduce, (_G,), gpsimd_start_n, "150 + N (unsure: none in the docs)",
        f"{_ISA} affine_select (tensor_partition_reduce has none)"),
    Row(Max8, (_V,), vector_n, "N", f"{_ISA} max8"),
    Row(FindIndex8, (_V,), vector_n, "N", f"{_ISA} nc_find_index8"),
    Row(MatchReplace8, (_V,), vector_n_floor, "max(MIN_II, N) (the docs print min)",
        f"{_ISA} nc_match_replace8"),
    Row(StreamShuffle, (_V,), vector_n_floor, "max(MIN_II, N)", f"{_ISA} nc_stream_shuffle"),
    Row(LocalGather, (_G,), local_gather, "150 + valid * per_idx / C",
        f"{_ISA} local_gather"),
    Row(SequenceBounds, (_G,), gpsimd_start_n, "150 + N (unsure: none in the docs)",
        f"{_ISA} affine_select (sequence_bounds has none)"),
    Row(Rand, (_V,), rand, "max(MIN_II, N) (unsure: none in the docs)",
        f"{_ISA} dropout (nl.rand has none)"),
    Row(Dropout, (_V,), vector_n_floor, "max(MIN_II, N)", f"{_ISA} dropout"),
    Row(TensorCopyDynamic, (_V, _S, _G), tensor_copy_dynamic, "max(MIN_II_DYNAMIC = 600, N)",
        "nki.isa.tensor_copy_dynamic_src 'Estimated instruction cost' (NKI docs, latest)"),
    Row(TensorCopyDynamicDst, (_V, _S, _G), tensor_copy_dynamic,
        "max(MIN_II_DYNAMIC = 600, N)", "nki.isa.tensor_copy_dynamic_dst 'Estimated "
        "instruction cost' (NKI docs, v2.26.1)"),
    Row(GatherFlattened, (_G,), gather_flattened, "max(MIN_II, N) (unsure: none in the "
        "docs)", f"{_ISA} tensor_copy (nl.gather_flattened has none)"),
)
_BY_KEY: dict[tuple[type, Engine], Row] = {(r.kind, e): r for r in ROWS for e in r.engines}


def rows_for(kind: type) -> list[Row]:
    """The rows of one instruction kind."""
    return [r for r in ROWS if r.kind is kind]


@lru_cache(maxsize=1 << 16)
def _cached(ins: object, arch: Arch, engine: Engine) -> int:
    row = _BY_KEY.get((type(ins), engine))
    if row is None:
        raise SystolicError(f"the engine-cost table has no row for {type(ins).__name__} on "
                            f"the {engine.value} engine (timing/costs.py ROWS)")
    return int(row.cost(ins, arch, engine))


def engine_cycles(ins: object, arch: Arch, engine: Engine | None = None) -> int:
    """Cycles of ``ins`` on ``engine`` (default: its own), computed alone: the table's row
    for its kind and engine. Memoised on the instruction itself (frozen and hashable)."""
    eng = engine if engine is not None else ins.engine  # type: ignore[attr-defined]
    return _cached(ins, arch, eng)
