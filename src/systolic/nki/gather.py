"""Data movement and reductions across partitions: ``nisa.nc_stream_shuffle`` (Vector),
``nisa.local_gather``, ``nisa.tensor_partition_reduce`` and ``nisa.sequence_bounds``
(GpSimd), aws-neuron-sdk 7c165a3e, nki.isa.*.

* ``nc_stream_shuffle(src, dst, shuffle_mask)``: within each quadrant of 32 partitions, dst
  partition i takes src partition ``shuffle_mask[i]`` (255 leaves it);
* ``local_gather(src_buffer, index, num_elem_per_idx=1, num_valid_indices=None)``: each of
  the 8 GpSimd cores gathers from its 16 partitions with its own uint16 indices;
* ``tensor_partition_reduce(op, data)``: [1, ...] = op over the partitions (add, max);
* ``sequence_bounds(segment_ids=)``: [1, n] segment ids -> [1, 2, n] start / end.

Values: systolic.sim.functional_select; checks: systolic.verify.select.
"""

from __future__ import annotations

from math import prod
from typing import Any

from ..isa import AluOp, Engine
from .calls import RecordFn, current_api, emit, take
from .index import check_mask, whole
from .lazy import LazyKind, Pending
from .mask import NOT_CUT, applying, whole_only
from .opkind import (
    DynamicCopyArgs,
    DynamicCopyDstArgs,
    GatherFlattenedArgs,
    LocalGatherArgs,
    PartitionReduceArgs,
    SequenceBoundsArgs,
    StreamShuffleArgs,
)
from .ops import _add, _alu_of, _engine, _gpsimd, _on_chip, record_copy
from .record import current, fail, here
from .select import Shaper, result_dtype, stage_sbuf
from .tensor import DynamicView, Tensor, View, as_view
from .types import BUFFERS

__all__ = ["RULES", "gather_flattened", "local_gather", "nc_stream_shuffle", "sequence_bounds",
           "tensor_copy_dynamic_dst", "tensor_copy_dynamic_src", "tensor_partition_reduce"]

Where = tuple[str, int]
_QUADRANT = 32
_CORE_PARTITIONS = 16  # nki.isa.local_gather: each GpSimd core serves 16 partitions
_GATHER_ELEMS = (1, 2, 4, 8, 16, 32)


# -- nc_stream_shuffle -----------------------------------------------------------------------
def nc_stream_shuffle(*args: Any, **kw: Any) -> None:
    """``nc_stream_shuffle(src, dst, shuffle_mask)``: cross-partition moves within quadrants
    (Vector engine); src and dst may be the same tile."""
    where = here()
    what = "nc_stream_shuffle"
    with applying(check_mask(kw.pop("mask", None), what, where), what, where):
        _stream_shuffle(args, kw, what, where)


def _stream_shuffle(args: tuple[Any, ...], kw: dict[str, Any], what: str, where: Where
                    ) -> None:
    kw.pop("dtype", None)  # dst "must have same data type as src"
    a = take(args, kw, ("src", "dst", "shuffle_mask"), what, where, 3)
    src, dst = as_view(a["src"]), as_view(a["dst"])
    for v, role in ((src, "src"), (dst, "dst")):
        _on_chip(v, role, what, where)
    mask = a["shuffle_mask"]
    if not isinstance(mask, list | tuple) or len(mask) != _QUADRANT or not all(
            whole(m) and (0 <= m < _QUADRANT or m == 255) for m in mask):
        raise fail(f"{what} shuffle_mask is a list of 32 integers, each 0..31 (the source "
                   f"partition in the quadrant) or 255 (leave it)", where)
    if src.dtype != dst.dtype:
        raise fail(f"{what}: dst must have src's dtype (NKI docs): {src.dtype} vs "
                   f"{dst.dtype}", where)
    if src.size // src.partitions != dst.size // dst.partitions:
        raise fail(f"{what}: src and dst hold the same elements per partition (NKI docs): "
                   f"{list(src.shape)} vs {list(dst.shape)}", where)
    for p in range(dst.partitions):
        m = int(mask[p % _QUADRANT])
        if m != 255 and (p // _QUADRANT) * _QUADRANT + m >= src.partitions:
            raise fail(f"{what}: dst partition {p} takes src partition "
                       f"{(p // _QUADRANT) * _QUADRANT + m}; src has {src.partitions}", where)
    _add(StreamShuffleArgs(tuple(int(m) for m in mask)), dst, (src,), where)


# -- local_gather ----------------------------------------------------------------------------
def local_gather(*args: Any, **kw: Any) -> Pending | None:
    """``local_gather(src_buffer, index, num_elem_per_idx=1, num_valid_indices=None)``
    (GpSimd)."""
    where = here()
    what = "local_gather"
    m = whole_only(kw.pop("mask", None), what, where, NOT_CUT)
    a = take(args, kw, ("src_buffer", "index", "num_elem_per_idx", "num_valid_indices",
                        "dst"), what, where, 2)
    src, idx = as_view(a["src_buffer"]), as_view(a["index"])
    k = a.get("num_elem_per_idx") or 1
    if k not in _GATHER_ELEMS:
        raise fail(f"{what} num_elem_per_idx is one of {list(_GATHER_ELEMS)} (NKI docs), "
                   f"not {k!r}", where)
    if src.partitions != idx.partitions or src.partitions % _CORE_PARTITIONS:
        raise fail(f"{what}: src_buffer and index have the same partitions, a multiple of "
                   f"16 (NKI docs): {src.partitions} and {idx.partitions}", where)
    per_core = (idx.size // idx.partitions) * _CORE_PARTITIONS
    valid = a.get("num_valid_indices")
    if valid is None:
        valid = per_core
    if not whole(valid) or not 1 <= valid <= min(per_core, 4096):
        raise fail(f"{what} num_valid_indices is 1 to {min(per_core, 4096)} (the indices of "
                   f"one core's 16 partitions, at most 4096), not {valid!r}", where)
    if idx.dtype.nki != "uint16":
        raise fail(f"{what} index must be a uint16 tile (NKI docs), not {idx.dtype}", where)
    args_ = {"src": a["src_buffer"], "index": a["index"], "k": int(k), "valid": int(valid),
             "mask": m}
    return emit(LazyKind.LOCAL_GATHER, a.get("dst"), args_, where, _record_local_gather)


def _gather_shape(a: dict[str, Any]) -> tuple[int, ...]:
    """[P, index free dims..., 16, k] when every index is valid (the shape the vendor's test
    names: indices run partition-first through the core's 16 partitions), else [P, valid,
    k] (unsure: the docs do not give the result's shape)."""
    src, idx = as_view(a["src"]), as_view(a["index"])
    if a["valid"] == (idx.size // idx.partitions) * _CORE_PARTITIONS:
        return (src.partitions, *idx.shape[1:], _CORE_PARTITIONS, a["k"])
    return (src.partitions, a["valid"], a["k"])


def _record_local_gather(dst: View, a: dict[str, Any], where: Where) -> None:
    src, idx = as_view(a["src"]), as_view(a["index"])
    _on_chip(dst, "dst", "local_gather", where)
    if dst.partitions != src.partitions or dst.size != src.partitions * a["valid"] * a["k"]:
        raise fail(f"local_gather writes {list(_gather_shape(a))}, not {list(dst.shape)}",
                   where)
    if dst.dtype != src.dtype:
        raise fail(f"local_gather keeps the dtype (NKI docs): {src.dtype}, not {dst.dtype}",
                   where)
    src, idx = stage_sbuf(src, where), stage_sbuf(idx, where)
    _gpsimd(Engine.GPSIMD, (dst,), "local_gather", where)
    _add(LocalGatherArgs(a["k"], a["valid"]), dst, (src, idx), where)


def _gather_tile(a: dict[str, Any], where: Where) -> Tensor:
    return Tensor(_gather_shape(a), as_view(a["src"]).dtype, BUFFERS["sbuf"], where)


# -- tensor_partition_reduce -------------------------------------------------------------------


def tensor_partition_reduce(*args: Any, **kw: Any) -> Pending | None:
    """``tensor_partition_reduce(op, data, dtype=)``: [1, ...] = op over the partitions of
    data (add or max; GpSimd)."""
    where = here()
    what = "tensor_partition_reduce"
    m = check_mask(kw.pop("mask", None), what, where)
    a = take(args, kw, ("op", "data", "dtype", "dst"), what, where, 2)
    op = a["op"]
    alu = _alu_of(op)  # nl.add / np.add / np.sum, nl.maximum / np.maximum / np.max ...
    if alu not in (AluOp.ADD, AluOp.MAXIMUM):
        name = getattr(op, "__name__", repr(op))
        raise fail(f"{what} op {name} is not modelled: add and max are (the docs' "
                   f"bitwise_or / bitwise_and need integer formats the model lacks)", where)
    return emit(LazyKind.PARTITION_REDUCE, a.get("dst"),
                {"src": a["data"], "op": alu, "dtype": a.get("dtype"), "mask": m},
                where, _record_partition_reduce)


def _record_partition_reduce(dst: View, a: dict[str, Any], where: Where) -> None:
    src = as_view(a["src"])
    _on_chip(src, "data", "tensor_partition_reduce", where)
    _on_chip(dst, "dst", "tensor_partition_reduce", where)
    n = src.size // src.partitions
    if dst.partitions != 1 or dst.size != n:
        raise fail(f"tensor_partition_reduce writes one partition of {n} elements, not "
                   f"{list(dst.shape)}", where)
    src = stage_sbuf(src, where)
    _gpsimd(Engine.GPSIMD, (dst,), "tensor_partition_reduce", where)
    _add(PartitionReduceArgs(a["op"]), dst, (src,), where)


def _partition_tile(a: dict[str, Any], where: Where) -> Tensor:
    src = as_view(a["src"])
    return Tensor((1, *src.shape[1:]), result_dtype(a, src), BUFFERS["sbuf"], where)


# -- sequence_bounds -------------------------------------------------------------------------
def sequence_bounds(*args: Any, **kw: Any) -> Pending | None:
    """``sequence_bounds(segment_ids=, dtype=)``: [1, n] ids -> [1, 2, n] (start, end)."""
    where = here()
    a = take(args, kw, ("segment_ids", "dtype", "dst"), "sequence_bounds", where, 1)
    src = as_view(a["segment_ids"])
    for d in (src.dtype, result_dtype(a, src)):
        if d.nki not in ("float32", "int32"):
            raise fail(f"sequence_bounds takes and gives float32 or int32 (NKI docs), not "
                       f"{d}", where)
    if src.partitions != 1:
        raise fail(f"sequence_bounds: \"the partition dimension must always be 1\" (NKI "
                   f"docs); segment_ids is {list(src.shape)}", where)
    return emit(LazyKind.SEQUENCE_BOUNDS, a.get("dst"),
                {"src": a["segment_ids"], "dtype": a.get("dtype")}, where,
                _record_sequence_bounds)


def _record_sequence_bounds(dst: View, a: dict[str, Any], where: Where) -> None:
    src = as_view(a["src"])
    _on_chip(dst, "dst", "sequence_bounds", where)
    n = src.size
    if dst.partitions != 1 or dst.size != 2 * n:
        raise fail(f"sequence_bounds writes [1, 2, {n}], not {list(dst.shape)}", where)
    src = stage_sbuf(src, where)
    _gpsimd(Engine.GPSIMD, (dst,), "sequence_bounds", where)
    _add(SequenceBoundsArgs(), dst, (src,), where)


def _bounds_tile(a: dict[str, Any], where: Where) -> Tensor:
    src = as_view(a["src"])
    return Tensor((1, 2, prod(src.shape[1:])), result_dtype(a, src), BUFFERS["sbuf"], where)


# -- tensor_copy_dynamic_src / _dst, gather_flattened (offsets / indices read when it runs) -


def tensor_copy_dynamic_src(*args: Any, **kw: Any) -> Pending | None:
    """``tensor_copy_dynamic_src(src, dtype=, engine=)`` (returns a tile) or ``(dst, src,
    engine=)``: src is ``x[i_p, offsets[0, i] + i_f]`` (NKI docs,
    nki.isa.tensor_copy_dynamic_src)."""
    where = here()
    what = "tensor_copy_dynamic_src"
    m = whole_only(kw.pop("mask", None), what, where, NOT_CUT)
    kw.pop("name", None)
    eng = kw.pop("engine", None)
    if current_api(args, kw, 2, at=1):  # (dst, src); the older (src, dtype) returns a tile
        a = take(args, kw, ("dst", "src"), what, where, 2)
    else:
        a = take(args, kw, ("src", "dtype"), what, where, 1)
    src = a["src"]
    if not isinstance(src, DynamicView):
        raise fail(f"{what}: src is a tile indexed by an offset read from SBUF "
                   f"(x[i_p, offsets[0, i] + i_f])", where)
    args_ = {"src": src, "dtype": a.get("dtype"), "engine": _copy_engine(eng, what, where),
             "mask": m}
    return emit(LazyKind.TENSOR_COPY_DYNAMIC, a.get("dst"), args_, where, _record_dynamic)


def _copy_engine(eng: Any, what: str, where: Where) -> Engine:
    """A dynamic copy's engine: Vector by default (nisa.engine.* are Engine members),
    Scalar or GpSimd; a copy is an engine instruction, not the PE's."""
    e = _engine(eng, Engine.VECTOR)
    if e is Engine.TENSOR:
        raise fail(f"{what} runs on the Vector, Scalar or GpSimd engine, not the Tensor "
                   f"Engine", where)
    return e


def _same_elems(src: View, dst: View, what: str, where: Where) -> None:
    """A dynamic copy's two sides: the same partitions and elements per partition."""
    if src.partitions != dst.partitions or src.size != dst.size:
        raise fail(f"{what}: src and dst have the same partitions and elements per "
                   f"partition (NKI docs): {list(src.shape)} vs {list(dst.shape)}", where)


def _dynamic_tile(a: dict[str, Any], where: Where) -> Tensor:
    src: DynamicView = a["src"]
    return Tensor(src.window.shape, result_dtype(a, src.window), BUFFERS["sbuf"], where)


def _record_dynamic(dst: View, a: dict[str, Any], where: Where) -> None:
    src: DynamicView = a["src"]
    w = src.window
    _on_chip(dst, "dst", "tensor_copy_dynamic_src", where)
    _same_elems(w, dst, "tensor_copy_dynamic_src", where)
    _gpsimd(a["engine"], (dst, w), "tensor_copy_dynamic_src", where)
    _add(DynamicCopyArgs(a["engine"], src.step, src.lo, src.hi), dst,
         (w, src.offset_tile, src.region), where)


def tensor_copy_dynamic_dst(*args: Any, **kw: Any) -> None:
    """``tensor_copy_dynamic_dst(dst, src, engine=, name=)`` or the older ``(*, dst=, src=,
    mask=, dtype=, engine=)``: dst is ``t[i_p, offsets[0, i] + i_f]``, the mirror of
    tensor_copy_dynamic_src's src (NKI docs, nki.isa.tensor_copy_dynamic_dst: "the
    destination of copy, must be a tile in SBUF of PSUM that is dynamically indexed"). The
    older ``dtype=`` is not used: the copy is cast to dst's dtype, as tensor_copy_predicated
    (unsure what the compiler does with a dtype unlike dst's)."""
    where = here()
    what = "tensor_copy_dynamic_dst"
    m = whole_only(kw.pop("mask", None), what, where, NOT_CUT)
    eng = kw.pop("engine", None)
    kw.pop("dtype", None)
    a = take(args, kw, ("dst", "src"), what, where, 2)
    dst = a["dst"]
    if not isinstance(dst, DynamicView):
        raise fail(f"{what}: dst is a tile indexed by an offset read from SBUF "
                   f"(t[i_p, offsets[0, i] + i_f])", where)
    if isinstance(a["src"], DynamicView):
        raise fail(f"{what}: src is a plain tile; an offset read from SBUF indexes dst only "
                   f"(copy in two steps, through tensor_copy_dynamic_src)", where)
    src = as_view(a["src"])
    e = _copy_engine(eng, what, where)
    w = dst.window
    _on_chip(src, "src", what, where)
    _same_elems(src, w, what, where)
    _gpsimd(e, (src, dst.region), what, where)
    with applying(m, what, where):  # False: no instruction
        _add(DynamicCopyDstArgs(e, dst.step, dst.lo, dst.hi), dst.region,
             (src, dst.offset_tile), where, (w,))


def gather_flattened(*args: Any, **kw: Any) -> Pending | None:
    """``nl.gather_flattened(data, indices, axis=0, dtype=)``: per partition, the free
    dimensions flattened, out[p, j] = data[p, indices[p, j]] (NKI docs,
    nki.language.gather_flattened)."""
    where = here()
    what = "gather_flattened"
    m = whole_only(kw.pop("mask", None), what, where, NOT_CUT)
    a = take(args, kw, ("data", "indices", "axis", "dtype"), what, where, 2)
    data, idx = as_view(a["data"]), as_view(a["indices"])
    if a.get("axis") not in (None, 0, -1):
        raise fail(f"{what} axis={a['axis']!r} is not modelled (the free axes are "
                   f"flattened)", where)
    if data.partitions != idx.partitions:
        raise fail(f"{what}: data and indices have the same partitions: "
                   f"{data.partitions} vs {idx.partitions}", where)
    if idx.dtype.fmt not in ("uint32", "int32"):
        raise fail(f"{what}: indices are uint32 (NKI docs), not {idx.dtype}", where)
    args_ = {"data": a["data"], "indices": a["indices"], "dtype": a.get("dtype"), "mask": m}
    return emit(LazyKind.GATHER_FLATTENED, None, args_, where, _record_gather_flattened)


def _flattened_tile(a: dict[str, Any], where: Where) -> Tensor:
    return Tensor(as_view(a["indices"]).shape, as_view(a["data"]).dtype, BUFFERS["sbuf"],
                  where)


def _record_gather_flattened(dst: View, a: dict[str, Any], where: Where) -> None:
    data, idx = as_view(a["data"]), as_view(a["indices"])
    if dst.partitions != idx.partitions or dst.size != idx.size:
        raise fail(f"gather_flattened writes the indices' shape {list(idx.shape)}, not "
                   f"{list(dst.shape)}", where)
    out = dst
    if dst.dtype != data.dtype or dst.buffer.name != "sbuf":  # GpSimd writes SBUF, no cast
        out = Tensor(idx.shape, data.dtype, BUFFERS["sbuf"], where, "gather_stage").full
        current().add_tensor(out.tensor)
    data, idx = stage_sbuf(data, where), stage_sbuf(idx, where)
    _add(GatherFlattenedArgs(), out, (data, idx), where)
    if out is not dst:
        record_copy(dst, out, None, where)


RULES: dict[LazyKind, tuple[Shaper, RecordFn]] = {
    LazyKind.TENSOR_COPY_DYNAMIC: (_dynamic_tile, _record_dynamic),
    LazyKind.GATHER_FLATTENED: (_flattened_tile, _record_gather_flattened),
    LazyKind.LOCAL_GATHER: (_gather_tile, _record_local_gather),
    LazyKind.PARTITION_REDUCE: (_partition_tile, _record_partition_reduce),
    LazyKind.SEQUENCE_BOUNDS: (_bounds_tile, _record_sequence_bounds),
}
