"""The recording core shared by ``nki.isa`` and ``nki.language`` (both API generations):
one ``record_*`` function per operation kind checks the NKI rules and appends the operation
with its typed record (nki/opkind.py); the older API's lazy results are written through
nki/results.py."""

from __future__ import annotations

from functools import cache
from math import prod
from typing import Any

import numpy as np

from ..dtypes import get_format
from ..isa import ActivationFunc, AluOp, Engine, PerfMode
from .lazy import is_number
from .opkind import (
    ActivationArgs,
    CopyArgs,
    DmaArgs,
    IndirectDmaArgs,
    MatmulArgs,
    MemsetArgs,
    OpArgs,
    TensorReduceArgs,
    TensorScalarArgs,
    TensorTensorArgs,
)
from .record import Op, current, fail
from .tensor import IndirectView, NlOp, Pending, Tensor, View, as_view, same_shape
from .types import BUFFERS, DType

__all__ = ["record_activation", "record_copy", "record_dma", "record_indirect_dma",
           "record_matmul", "record_memset", "record_tensor_reduce", "record_tensor_scalar",
           "record_tensor_tensor", "staged_in_sbuf"]


_ADD = NlOp("add", AluOp.ADD, None)


# numpy's ufuncs as NKI operators (kernels pass op0=np.subtract, NKI docs' own examples)
_UFUNCS: dict[object, AluOp] = {np.add: AluOp.ADD, np.subtract: AluOp.SUBTRACT,
                                np.multiply: AluOp.MULTIPLY, np.maximum: AluOp.MAXIMUM,
                                np.minimum: AluOp.MINIMUM, np.divide: AluOp.DIVIDE}


# numpy's reductions as reduce operators (the kernels' tensor_reduce(np.max, ...))
_NP_REDUCE: dict[object, AluOp] = {np.max: AluOp.MAXIMUM, np.amax: AluOp.MAXIMUM,
                                   np.min: AluOp.MINIMUM, np.amin: AluOp.MINIMUM,
                                   np.sum: AluOp.ADD, np.prod: AluOp.MULTIPLY}


# numpy's ufuncs as activation functions (the kernels' activation(op=np.exp, ...))
_NP_ACT: dict[object, ActivationFunc] = {
    np.exp: ActivationFunc.EXP, np.log: ActivationFunc.LOG, np.sqrt: ActivationFunc.SQRT,
    np.square: ActivationFunc.SQUARE, np.abs: ActivationFunc.ABS, np.tanh: ActivationFunc.TANH,
    np.reciprocal: ActivationFunc.RECIPROCAL, np.negative: ActivationFunc.NEGATIVE}


def _alu_of(op: object) -> AluOp | None:
    alu = getattr(op, "alu", None)
    if alu is None and isinstance(op, np.ufunc):
        return _UFUNCS.get(op)
    if alu is None:
        try:
            return _NP_REDUCE.get(op)
        except TypeError:  # unhashable
            return None
    return alu  # type: ignore[no-any-return]


def _alu(op: object) -> AluOp:
    alu = _alu_of(op)
    if alu is None:
        raise fail(f"op {op!r} is not an elementwise operator this model implements; use "
                   f"nl.add, nl.subtract, nl.multiply, nl.maximum or nl.minimum")
    return alu  # type: ignore[no-any-return]


def _engine(eng: object, default: Engine) -> Engine:
    if eng is None:
        return default
    if isinstance(eng, Engine):
        return eng
    raise fail(f"engine {eng!r} is not one of nisa.engine.vector, scalar, gpsimd")


def _on_chip(v: View, role: str, what: str, where: tuple[str, int]) -> None:
    if not v.buffer.on_chip:
        raise fail(f"{what} {role} is in {v.buffer.name}; it must be an SBUF or PSUM tile "
                   f"(move HBM data with nisa.dma_copy first)", where)


def _gpsimd(eng: Engine, views: tuple[View, ...], what: str, where: tuple[str, int]) -> None:
    if eng is Engine.GPSIMD and any(v.buffer.name == "psum" for v in views):
        raise fail(f"{what} on GpSimd touches PSUM, which GpSimd cannot access (NKI docs); "
                   f"run it on nisa.engine.vector or scalar", where)


def _match(a: View, b: View, what: str, where: tuple[str, int]) -> None:
    if a.shape != b.shape and (a.size != b.size or not same_shape(a.shape, b.shape)):
        raise fail(f"{what}: shapes {list(a.shape)} and {list(b.shape)} do not match", where)
    if a.buffer.on_chip and b.buffer.on_chip and a.partitions != b.partitions:
        raise fail(f"{what}: {a.partitions} partitions against {b.partitions}; on-chip "
                   f"copies keep the partition dimension", where)


def _add(args: OpArgs, dst: View, srcs: tuple[View, ...], where: tuple[str, int],
         outs: tuple[View, ...] = ()) -> None:
    current().add(Op(args, dst, srcs, where, outs))


_DMA = DmaArgs()


# -- recording, shared by both API generations -------------------------------------------
def record_dma(dst: View, src: View, where: tuple[str, int], *, skip_oob: bool = False,
               accumulate: bool = False) -> None:
    """dst = src by DMA (``accumulate``: dst += src, ``dst_rmw_op=np.add``); either side may
    be ``x[idx_tile, ...]`` (:class:`IndirectView`: :func:`record_indirect_dma`, where
    ``skip_oob`` leaves out-of-range indices' rows out)."""
    if src.dtype is not dst.dtype and src.dtype != dst.dtype:
        _casting_dma(dst, src, where, skip_oob, accumulate)
        return
    if src.buffer.name == "psum" and not dst.buffer.on_chip:
        # nl.store: "If the tile is in PSUM, an extra copy will be performed to move the tile
        # to SBUF first" (NKI docs, nki.language.store)
        record_dma(dst, staged_in_sbuf(src, where, "store_psum", src.p0), where,
                   skip_oob=skip_oob, accumulate=accumulate)
        return
    if src.buffer.name == "psum" or dst.buffer.name == "psum":
        raise fail("dma_copy to or from PSUM is not modelled; copy PSUM to SBUF with "
                   "nisa.tensor_copy", where)
    if isinstance(src, IndirectView) or isinstance(dst, IndirectView):
        record_indirect_dma(dst, src, where, skip_oob, accumulate)
        return
    if accumulate:
        raise fail("dst_rmw_op (a read-modify-write DMA) is modelled on an indirect store "
                   "only (dst x[idx_tile, ...]); add the tiles with nisa.tensor_tensor and "
                   "store the sum", where)
    _match(dst, src, "dma_copy", where)
    _add(_DMA, dst, (src,), where)
    if dst.buffer.on_chip and not src.buffer.on_chip and dst.size == prod(dst.tensor.shape):
        dst.tensor.loaded_from = src


def _casting_dma(dst: View, src: View, where: tuple[str, int], skip_oob: bool = False,
                 accumulate: bool = False) -> None:
    """NKI's dma_copy casts when the dtypes differ (NKI docs, nki.isa.dma_copy: "A cast
    will happen if the src and dst have different dtype"). The model's DmaCopy moves bytes,
    so the cast is a Vector-engine copy through an SBUF staging tile on the SBUF side."""
    if src.buffer.on_chip:
        record_dma(dst, staged_in_sbuf(src, where, "dma_cast", dtype=dst.dtype), where,
                   skip_oob=skip_oob, accumulate=accumulate)
    elif dst.buffer.on_chip:
        tmp = Tensor(dst.shape, src.dtype, BUFFERS["sbuf"], where, "dma_cast")
        current().add_tensor(tmp)
        record_dma(tmp.full, src, where, skip_oob=skip_oob, accumulate=accumulate)
        record_copy(dst, tmp.full, None, where)
    else:
        raise fail(f"dma_copy from HBM to HBM cannot cast {src.dtype} -> {dst.dtype} in this "
                   f"model; stage it through an SBUF tile", where)


def record_indirect_dma(dst: View, src: View, where: tuple[str, int], skip_oob: bool,
                        accumulate: bool) -> None:
    """An indirect DMA (one side ``x[idx_tile, ...]``): a gather of device-memory rows into
    the partitions of an SBUF tile, or a scatter of its partitions into rows (nki/opkind.py
    IndirectDmaArgs). The rows are resolved when the kernel runs (isa DmaIndirect); a
    mask= cuts the tile's partitions and the indices alike (nki/mask.py)."""
    gather = isinstance(src, IndirectView)
    if gather and isinstance(dst, IndirectView):
        raise fail("an indirect DMA moves rows between device memory and SBUF; index one "
                   "side with a tile of indices, not both", where)
    ind = src if gather else dst
    assert isinstance(ind, IndirectView)
    data = dst if gather else src
    if data.buffer.name != "sbuf":
        raise fail(f"an indirect DMA moves rows between a device-memory tensor and an SBUF "
                   f"tile; the other side is in {data.buffer.name.upper()} (stage it through "
                   f"an SBUF tile)", where)
    if accumulate and gather:
        raise fail("dst_rmw_op adds into the destination: an indirect store (scatter) only",
                   where)
    if accumulate and skip_oob:
        raise fail("dst_rmw_op takes oob_mode.error only (NKI docs, nki.isa.dma_copy)", where)
    _match(dst, src, "dma_copy", where)
    k = ind.index.partitions
    if not data.axes or not data.axes[0].part or data.partitions != k:
        raise fail(f"an indirect DMA moves row k of the tensor to or from partition k of the "
                   f"SBUF tile: the tile needs the index tile's {k} partitions first, not "
                   f"shape {list(data.shape)}", where)
    args = IndirectDmaArgs(not gather, accumulate, skip_oob)
    if gather:
        _add(args, dst, (ind.table, ind.index), where)
    else:
        _add(args, ind.table, (src, ind.index, *((ind.table,) if accumulate else ())), where)


def staged_in_sbuf(v: View, where: tuple[str, int], name: str = "",
                   partition: int | None = None, dtype: DType | None = None) -> View:
    """``v`` copied into a fresh SBUF tile by a recorded Vector ``tensor_copy`` (timed as
    any copy): the staging the compiler inserts where an engine or a DMA cannot use PSUM
    (each caller names the document). ``partition``: where the tile starts (a copy keeps
    each element on its partition); ``dtype``: the tile's, converting (default ``v``'s)."""
    tmp = Tensor(v.shape, dtype or v.dtype, BUFFERS["sbuf"], where, name)
    if partition is not None:
        tmp.at_partition(partition)
    current().add_tensor(tmp)
    record_copy(tmp.full, v, None, where)
    return tmp.full


def record_copy(dst: View, src: View, eng: object, where: tuple[str, int]) -> None:
    e = _engine(eng, Engine.VECTOR)
    _on_chip(src, "src", "tensor_copy", where)
    _on_chip(dst, "dst", "tensor_copy", where)
    _gpsimd(e, (dst, src), "tensor_copy", where)
    _match(dst, src, "tensor_copy", where)
    _add(CopyArgs(e), dst, (src,), where)


def record_tensor_tensor(dst: View, a: View, b: View, op: object, eng: object,
                         where: tuple[str, int]) -> None:
    alu = AluOp(op) if isinstance(op, str) else _alu(op)
    e = _engine(eng, Engine.VECTOR)
    for v, role in ((dst, "dst"), (a, "data1"), (b, "data2")):
        _on_chip(v, role, "tensor_tensor", where)
    _gpsimd(e, (dst, a, b), "tensor_tensor", where)
    _match(dst, a, "tensor_tensor", where)
    _match(dst, b, "tensor_tensor", where)
    _add(TensorTensorArgs(e, alu), dst, (a, b), where)


def record_memset(dst: View, value: float, eng: object, where: tuple[str, int]) -> None:
    e = _engine(eng, Engine.VECTOR)
    _on_chip(dst, "dst", "memset", where)
    _gpsimd(e, (dst,), "memset", where)
    _add(MemsetArgs(e, float(value)), dst, (), where)


def _vector(v: Any, of: View, role: str, what: str, where: tuple[str, int]) -> View:
    """A per-partition operand: an on-chip tile of one element on each of ``of``'s
    partitions ([P, 1], NKI docs)."""
    if not isinstance(v, Tensor | View | Pending):
        raise fail(f"{what} {role} must be a number or a [P, 1] tile, not "
                   f"{type(v).__name__}", where)
    vv = as_view(v)
    _on_chip(vv, role, what, where)
    if vv.partitions != of.partitions or vv.size != of.partitions:
        raise fail(f"{what} {role} must be one element on each of the {of.partitions} "
                   f"partitions ([{of.partitions}, 1]), not {list(vv.shape)}", where)
    return vv


def _reduce_alu(op: object, what: str, where: tuple[str, int]) -> AluOp:
    alu = _alu_of(op)
    if alu not in (AluOp.ADD, AluOp.MAXIMUM, AluOp.MINIMUM, AluOp.MULTIPLY):
        raise fail(f"{what}: reduce op {op!r} is not one of nl.add, nl.maximum, nl.minimum, "
                   f"nl.multiply", where)
    return alu  # type: ignore[no-any-return]


def record_activation(dst: View, src: View, op: object, scale: Any,
                      where: tuple[str, int], bias: Any = None, reduce_op: Any = None,
                      reduce_res: Any = None) -> None:
    func = getattr(op, "act", None)
    if func is None and isinstance(op, np.ufunc):  # activation(op=np.exp, ...)
        func = _NP_ACT.get(op)
    if func is None:
        names = ", ".join(f"nl.{f.value}" for f in ActivationFunc)
        raise fail(f"activation {op!r} is not modelled; this model implements {names}",
                   where)
    _on_chip(src, "data", "activation", where)
    _on_chip(dst, "dst", "activation", where)
    _match(dst, src, "activation", where)
    srcs: list[View] = [src]
    const, scales = 1.0, False
    if is_number(scale):  # np.float32(0.5) too
        const = float(scale)
    else:
        srcs.append(_vector(scale, src, "scale", "activation", where))
        scales = True
    if bias is not None:
        srcs.insert(1, _vector(bias, src, "bias", "activation", where))
    outs: tuple[View, ...] = ()
    acc = AluOp.ADD
    if reduce_res is not None:
        outs = (_vector(reduce_res, src, "reduce_res", "activation", where),)
        acc = _reduce_alu(reduce_op if reduce_op is not None else _ADD, "activation", where)
    _add(ActivationArgs(Engine.SCALAR, func, const, bias is not None, scales, acc), dst,
         tuple(srcs), where, outs)


def record_tensor_scalar(dst: View, src: View, op0: object, operand0: Any, reverse0: bool,
                         op1: object, operand1: Any, reverse1: bool, eng: object,
                         where: tuple[str, int], reduce_op: Any = None,
                         reduce_res: Any = None) -> None:
    """``tensor_scalar``; with ``reduce_res`` it is ``tensor_scalar_reduce`` (one operator,
    Vector engine: NKI docs), each partition's results also reduced with ``reduce_op``."""
    what = "tensor_scalar" if reduce_res is None else "tensor_scalar_reduce"
    e = _engine(eng, Engine.VECTOR)
    _on_chip(src, "data", what, where)
    _on_chip(dst, "dst", what, where)
    _match(dst, src, what, where)
    srcs: list[View] = [src]
    alu0 = _alu(op0)
    alu1 = None
    consts: list[float | None] = [None, None]
    for k, operand in enumerate((operand0, operand1)):
        if k == 1 and op1 is None:
            if operand1 is not None:
                raise fail(f"{what}: operand1 without op1", where)
            continue
        if k == 1:
            alu1 = _alu(op1)
        if is_number(operand):
            consts[k] = float(operand)
        else:
            srcs.append(_vector(operand, src, f"operand{k}", what, where))
    _gpsimd(e, (dst, *srcs), what, where)
    outs: tuple[View, ...] = ()
    acc = AluOp.ADD
    if reduce_res is not None:
        if e is not Engine.VECTOR or alu1 is not None:
            raise fail(f"{what} is one operator on the Vector engine (NKI docs)", where)
        outs = (_vector(reduce_res, src, "reduce_res", what, where),)
        acc = _reduce_alu(reduce_op, what, where)
    _add(TensorScalarArgs(e, alu0, consts[0], bool(reverse0), alu1, consts[1],
                          bool(reverse1), acc), dst, tuple(srcs), where, outs)


def record_tensor_reduce(dst: View, src: View, op: object, axis: Any, negate: bool,
                         eng: object, where: tuple[str, int]) -> None:
    e = _engine(eng, Engine.VECTOR)
    if e is Engine.SCALAR:
        raise fail("tensor_reduce runs on the Vector or GpSimd engine (NKI docs)", where)
    _on_chip(src, "data", "tensor_reduce", where)
    _on_chip(dst, "dst", "tensor_reduce", where)
    _gpsimd(e, (dst, src), "tensor_reduce", where)
    from .reduce import as_column, reduced_axes, split_reduce

    src = as_column(src)
    args = TensorReduceArgs(e, _reduce_alu(op, "tensor_reduce", where), bool(negate))
    axes = reduced_axes(axis, len(src.shape), "tensor_reduce", where)
    for d, s in split_reduce(dst, src, axes, "tensor_reduce", where):
        _add(args, d, (s,), where)


def _tile(values: tuple[int, int] | tuple[()] | list[int], default: tuple[int, int],
          what: str, where: tuple[str, int]) -> tuple[int, int]:
    if not values:
        return default
    if len(values) != 2:
        raise fail(f"{what} is a pair (row, column)", where)
    return int(values[0]), int(values[1])


def _psum_output(dst: View, stat: View, transpose: bool, accumulate: bool | None,
                 generation: int, where: tuple[str, int]) -> None:
    """Refuse a PSUM dtype the Tensor Engine does not write for this matmul. fp32 always
    ("The matmul accumulation and results are always in float32", nki.isa.nc_matmul,
    aws-neuron-sdk 7c165a3e). From NeuronCore-v3 the transpose mode writes the data's own
    bf16/fp16 ("FP16/BF16 PSUM output for FP16/BF16 transpose", trainium2_arch.rst; exact:
    x * 1 summed with zeros); the docs say nothing of a transpose accumulating into it, so
    that stays refused. NeuronCore-v4 writes bf16 from any matmul ("The output data type can
    either be FP32 or BF16", NeuronCore-v4 Architecture): the PE's fp32 sum rounded to
    nearest even as it lands, an accumulating matmul adding its sum to the stored bf16 value
    and rounding again (unsure: the docs name near-memory accumulation, not its rounding
    point; stochastic rounding is not modelled). The values: sim/_base.apply_psum."""
    fmt = dst.dtype.fmt
    if fmt == "fp32":
        return
    wide = get_format(stat.dtype.fmt).family == "fp32"
    if transpose and generation >= 3 and fmt in ("bf16", "fp16"):
        if dst.dtype != stat.dtype:
            raise fail(f"nc_matmul is_transpose=True writes fp32, or the data's own "
                       f"bf16/fp16, into PSUM; data is {stat.dtype}, dst {dst.dtype}", where)
        if accumulate:
            raise fail(f"nc_matmul is_transpose=True accumulating into a {dst.dtype} PSUM "
                       f"tile is not modelled (the docs name none); use an fp32 dst", where)
        return
    if generation >= 4 and fmt == "bf16" and not wide:
        return
    if wide and fmt == "bf16" and generation >= 4:
        why = "only fp32 from an fp32 / tfloat32 operand (two passes)"
    elif transpose or fmt != "bf16":
        why = "bf16/fp16 only from the transpose mode (is_transpose=True) on NeuronCore-v3+"
    else:
        why = "bf16 only on NeuronCore-v4, or from the transpose mode on NeuronCore-v3"
    raise fail(f"nc_matmul writes fp32 into PSUM; dst is {dst.dtype} ({why}): allocate it "
               f"as nl.float32", where)


@cache
def _matmul_floats(formats: tuple[str, ...]) -> tuple[str, ...]:
    """The float formats nc_matmul takes among an Arch's (once per Arch, not per call)."""
    return tuple(f for f in formats if get_format(f).kind == "float" and f != "fp32r")


def record_matmul(dst: View, stat: View, mov: View, accumulate: bool | None,
                  tile_position: Any, tile_size: Any, perf_mode: Any,
                  where: tuple[str, int], transpose: bool = False, iadd: bool = False) -> None:
    """dst (+)= stat.T @ mov on the Tensor Engine. ``transpose``: the PE's transpose mode
    (nc_matmul ``is_transpose``; NeuronCore-v3 on, nki/lower.py), the same matmul.
    ``iadd``: written by the older API's ``dst += nc_matmul(...)`` (nki/build.py groups)."""
    arch = current().arch
    for v, role, buf in ((stat, "stationary", "sbuf"), (mov, "moving", "sbuf"),
                         (dst, "dst", "psum")):
        if v.buffer.name != buf:
            raise fail(f"nc_matmul {role} is in {v.buffer.name}; it must be in "
                       f"{buf.upper()}", where)
    sf, mf = stat.dtype.fmt, mov.dtype.fmt
    floats = _matmul_floats(arch.formats)
    for f in (sf, mf):
        if f not in floats:
            raise fail(f"nc_matmul does not take {f} operands on {arch.name} (NKI docs: "
                       f"float8, bfloat16, float16, tfloat32, float32); use one of "
                       f"{', '.join(floats)}", where)
    if (get_format(sf).family == "fp32") != (get_format(mf).family == "fp32"):
        raise fail(f"fp32 operands pair only with fp32: stationary {stat.dtype}, moving "
                   f"{mov.dtype}; cast both with nisa.tensor_copy", where)
    _psum_output(dst, stat, transpose, accumulate, arch.generation, where)
    perf = (PerfMode.NONE if perf_mode is None else
            PerfMode.parse(getattr(perf_mode, "value", perf_mode) or "none"))
    fold = perf.k_fold
    if perf is not PerfMode.NONE and not arch.supports_perf_mode(perf.spelling):
        raise fail(f"perf_mode {perf.spelling} needs NeuronCore-v3 or newer; {arch.name} is "
                   f"gen{arch.generation}: drop perf_mode", where)
    if perf not in (PerfMode.NONE, PerfMode.DOUBLE_ROW):
        raise fail(f"perf_mode {perf.spelling} is not modelled; use none or double_row", where)
    if fold == 2 and not (get_format(sf).family == get_format(mf).family == "fp8"):
        raise fail(f"double_row packs two fp8 elements per PE; operands are {stat.dtype} and "
                   f"{mov.dtype}", where)
    want = 2 + (fold == 2)
    for v, role in ((stat, "stationary"), (mov, "moving")):
        if len(v.axes) != want or not v.axes[0].part or (fold == 2 and v.axes[1].num != 2):
            shape = "[K, 2, F] (two contraction rows per partition)" if fold == 2 else "[K, F]"
            raise fail(f"nc_matmul {role} has shape {list(v.shape)}; it must be {shape} with "
                       f"the partition dimension first", where)
    k, m, n = stat.partitions, stat.shape[-1], mov.shape[-1]
    if k > arch.rows:
        raise fail(f"the partition dimension is {k}; the Tensor Engine has {arch.rows} rows "
                   f"(nl.tile_size.pmax)", where)
    if mov.partitions != k:
        raise fail(f"stationary and moving contract over the partition dimension: {k} vs "
                   f"{mov.partitions}", where)
    if m > arch.cols:
        raise fail(f"stationary free size {m} exceeds {arch.cols} "
                   f"(nl.tile_size.gemm_stationary_fmax); split M into tiles", where)
    bank_elems = arch.psum_bank_bytes // 4
    if n > bank_elems:
        raise fail(f"moving free size {n} exceeds {bank_elems} (one PSUM bank, "
                   f"nl.tile_size.gemm_moving_fmax); split N into tiles", where)
    if dst.partitions != m or len(dst.axes) != 2 or dst.shape[-1] != n:
        raise fail(f"nc_matmul dst has shape {list(dst.shape)}; stationary.T @ moving is "
                   f"[{m}, {n}]", where)
    isz = dst.dtype.itemsize
    lo = dst.offset * isz
    hi = lo + ((dst.axes[1].num - 1) * dst.axes[1].stride + 1) * isz
    if lo // arch.psum_bank_bytes != (hi - 1) // arch.psum_bank_bytes:
        raise fail(f"nc_matmul dst spans two PSUM banks (bytes {lo}..{hi} of the tile); an "
                   f"accumulation stays within one {arch.psum_bank_bytes}-byte bank", where)
    size = _tile(tile_size, (arch.rows, arch.cols), "tile_size", where)
    pos = _tile(tile_position, (0, 0), "tile_position", where)
    allowed = arch.tile_sizes
    for s, p, name, extent, limit in ((size[0], pos[0], "row", k, arch.rows),
                                      (size[1], pos[1], "column", m, arch.cols)):
        if s not in allowed:
            raise fail(f"tile_size {name} {s} is not one of {allowed} on {arch.name}", where)
        if p % s or p + s > limit:
            raise fail(f"tile_position {name} {p} must be a multiple of tile_size {s} within "
                       f"the {limit} {name}s", where)
        if extent > s:
            raise fail(f"the tile's {name} extent {extent} exceeds tile_size {s}", where)
    if fold == 2 and size[1] != arch.cols:
        raise fail("double_row cannot be combined with column tiling (NKI docs); use "
                   "tile_size column 128", where)
    if stat.p0 != pos[0] or mov.p0 != pos[0]:
        raise fail(f"a tile at row position {pos[0]} reads SBUF partitions {pos[0]}.. (PE row "
                   f"r reads partition r); stationary starts at {stat.p0}, moving at "
                   f"{mov.p0}", where)
    if dst.p0 != pos[1]:
        raise fail(f"a tile at column position {pos[1]} writes PSUM partitions {pos[1]}.. "
                   f"(column m drains into partition m); dst starts at {dst.p0}", where)
    if accumulate not in (None, True, False):
        raise fail("accumulate is None, True or False", where)
    if transpose and perf is not PerfMode.NONE:
        raise fail(f"nc_matmul is_transpose=True with perf_mode {perf.spelling} is not "
                   f"modelled (a transpose has no perf mode); drop perf_mode", where)
    _add(MatmulArgs(accumulate, perf, pos[0], pos[1], transpose, iadd), dst, (stat, mov),
         where)
