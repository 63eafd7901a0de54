"""Verify rules of the selection, top-8, gather and random instructions (issue 19, second
part), one function per kind in :data:`CHECKS` (called by :class:`systolic.verify.Checker`).

The rules are the NKI docs' constraints (nki.isa.* at aws-neuron-sdk 7c165a3e): operands on
chip and in bounds, GpSimd instructions never touching PSUM, the shapes each kind demands
(quoted at each rule), and every PSUM access ending the accumulation groups it overlaps
(verify/engines.py ``_touch_psum``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..dtypes import get_format
from ..isa import AccessPattern, AluOp, Engine, Space
from ..isa import instructions as ins_
from ..isa.fields import INDEX_FORMATS
from .engines import _bounds, _same, _touch_psum

if TYPE_CHECKING:
    from . import Checker

__all__ = ["CHECKS", "COMPARISONS", "LOCAL_GATHER_ELEMS", "MAX8_ELEMS"]

_ON_CHIP = (Space.SBUF, Space.PSUM)
COMPARISONS = frozenset({AluOp.EQUAL, AluOp.NOT_EQUAL, AluOp.LESS, AluOp.LESS_EQUAL,
                         AluOp.GREATER, AluOp.GREATER_EQUAL})
# nki.isa.max8 / nc_find_index8: "between 8 and 16,384" elements per partition
MAX8_ELEMS = (8, 16384)
# nki.isa.local_gather: num_elem_per_idx "must be one of [1, 2, 4, 8, 16, 32]"; at most
# 4096 indices per core; each GpSimd core serves 16 partitions
LOCAL_GATHER_ELEMS = (1, 2, 4, 8, 16, 32)
_GATHER_MAX_INDICES = 4096
_CORE_PARTITIONS = 16


def _on(c: Checker, i: int, ap: AccessPattern | None, role: str, engine: Engine, *,
        write: bool = False) -> None:
    """In bounds, on chip (SBUF only on GpSimd), and its PSUM groups touched."""
    if ap is None:
        return
    spaces = (Space.SBUF,) if engine is Engine.GPSIMD else _ON_CHIP
    _bounds(c, i, ap, role, spaces)
    _touch_psum(c, i, ap, write=write)


def _column(c: Checker, i: int, ap: AccessPattern | None, parts: int, role: str) -> None:
    if ap is not None and (ap.partitions != parts or ap.free_elems != 1):
        c._fail(i, f"{role} must be one element on each of the {parts} partitions "
                   f"([{parts}, 1]), not [{ap.partitions}, {ap.free_elems}]")


def _engine(c: Checker, i: int, ins: Any, engine: Engine) -> None:
    if ins.engine is not engine:
        c._fail(i, f"{type(ins).__name__} runs on the {engine.value} engine, not "
                   f"{ins.engine.value} (NKI docs)")


def _cmp(c: Checker, i: int, op: AluOp, role: str) -> None:
    if op not in COMPARISONS:
        c._fail(i, f"{role} must be a comparison (equal, less, ...), not {op.value}")


def _affine_select(c: Checker, i: int, ins: ins_.AffineSelect) -> None:
    _engine(c, i, ins, Engine.GPSIMD)
    _cmp(c, i, ins.cmp, "AffineSelect cmp")
    _on(c, i, ins.src, "AffineSelect src", Engine.GPSIMD)
    _on(c, i, ins.dst, "AffineSelect dst", Engine.GPSIMD, write=True)
    _same(c, i, ins.src, ins.dst, "AffineSelect")


def _range_select(c: Checker, i: int, ins: ins_.RangeSelect) -> None:
    _engine(c, i, ins, Engine.VECTOR)
    if c.arch.generation < 3:  # nki.isa.range_select: "Available only on NeuronCore-v3"
        c._fail(i, f"RangeSelect needs NeuronCore-v3 or newer; {c.arch.name} is "
                   f"gen{c.arch.generation}")
    _cmp(c, i, ins.cmp0, "RangeSelect cmp0")
    _cmp(c, i, ins.cmp1, "RangeSelect cmp1")
    for role, ap in (("src", ins.src), ("bound0", ins.bound0), ("bound1", ins.bound1)):
        _on(c, i, ap, f"RangeSelect {role}", Engine.VECTOR)
    for role, ap in (("bound0", ins.bound0), ("bound1", ins.bound1)):
        _column(c, i, ap, ins.src.partitions, f"RangeSelect {role}")
        if ap.dtype != "fp32":  # "bound0/bound1 must be FP32 types"
            c._fail(i, f"RangeSelect {role} must be fp32, not {ap.dtype}")
    _on(c, i, ins.dst, "RangeSelect dst", Engine.VECTOR, write=True)
    _on(c, i, ins.acc, "RangeSelect acc", Engine.VECTOR, write=True)
    _column(c, i, ins.acc, ins.src.partitions, "RangeSelect acc")
    _same(c, i, ins.src, ins.dst, "RangeSelect")


def _select(c: Checker, i: int, ins: ins_.Select) -> None:
    _engine(c, i, ins, Engine.VECTOR)
    if ins.predicate.space is Space.PSUM and ins.on_true.space is Space.PSUM:
        c._fail(i, "Select: on_true and predicate cannot both be in PSUM (NKI docs)")
    for role, ap in (("predicate", ins.predicate), ("on_true", ins.on_true),
                     ("on_false", ins.on_false_ap)):
        _on(c, i, ap, f"Select {role}", Engine.VECTOR)
    _same(c, i, ins.predicate, ins.dst, "Select")
    _same(c, i, ins.on_true, ins.dst, "Select")
    f = ins.on_false_ap
    if f is not None and f.free_elems != 1:
        _same(c, i, f, ins.dst, "Select on_false")
    elif f is not None:
        _column(c, i, f, ins.dst.partitions, "Select on_false")
    _on(c, i, ins.dst, "Select dst", Engine.VECTOR, write=True)
    _on(c, i, ins.acc, "Select acc", Engine.VECTOR, write=True)
    _column(c, i, ins.acc, ins.dst.partitions, "Select acc")


def _copy_predicated(c: Checker, i: int, ins: ins_.CopyPredicated) -> None:
    _engine(c, i, ins, Engine.VECTOR)
    src = ins.src_ap
    if src is not None and src.space is Space.PSUM and ins.predicate.space is Space.PSUM:
        c._fail(i, "CopyPredicated: src and predicate cannot both be in PSUM (NKI docs)")
    _on(c, i, ins.predicate, "CopyPredicated predicate", Engine.VECTOR)
    _on(c, i, src, "CopyPredicated src", Engine.VECTOR)
    _on(c, i, ins.dst, "CopyPredicated dst", Engine.VECTOR, write=True)
    _same(c, i, ins.predicate, ins.dst, "CopyPredicated")
    if src is not None:
        _same(c, i, src, ins.dst, "CopyPredicated")
        if src.dtype != ins.dst.dtype:  # "src and dst must share the same data type"
            c._fail(i, f"CopyPredicated src and dst share a dtype: {src.dtype} vs "
                       f"{ins.dst.dtype}")


def _partition_reduce(c: Checker, i: int, ins: ins_.PartitionReduce) -> None:
    _engine(c, i, ins, Engine.GPSIMD)
    if ins.op not in (AluOp.ADD, AluOp.MAXIMUM):
        c._fail(i, f"PartitionReduce op is add or maximum, not {ins.op.value}")
    _on(c, i, ins.src, "PartitionReduce src", Engine.GPSIMD)
    _on(c, i, ins.dst, "PartitionReduce dst", Engine.GPSIMD, write=True)
    if ins.dst.partitions != 1 or ins.dst.free_elems != ins.src.free_elems:
        c._fail(i, f"PartitionReduce writes one partition of {ins.src.free_elems} elements, "
                   f"not [{ins.dst.partitions}, {ins.dst.free_elems}]")


def _elems(c: Checker, i: int, ap: AccessPattern, role: str, lo: int, hi: int) -> None:
    if not lo <= ap.free_elems <= hi:
        c._fail(i, f"{role} has {ap.free_elems} elements per partition; it takes {lo} to "
                   f"{hi:,} (NKI docs)")


def _eight(c: Checker, i: int, ap: AccessPattern, parts: int, role: str) -> None:
    if ap.partitions != parts or ap.free_elems != 8:
        c._fail(i, f"{role} is 8 elements on each of the {parts} partitions, not "
                   f"[{ap.partitions}, {ap.free_elems}]")


def _unsigned(c: Checker, i: int, ap: AccessPattern, role: str) -> None:
    f = get_format(ap.dtype)
    if f.kind != "int":
        c._fail(i, f"{role} holds indices: an integer format, not {ap.dtype}")


def _max8(c: Checker, i: int, ins: ins_.Max8) -> None:
    _engine(c, i, ins, Engine.VECTOR)
    _on(c, i, ins.src, "Max8 src", Engine.VECTOR)
    _on(c, i, ins.dst, "Max8 dst", Engine.VECTOR, write=True)
    _elems(c, i, ins.src, "Max8 src", *MAX8_ELEMS)
    _eight(c, i, ins.dst, ins.src.partitions, "Max8 dst")


def _find_index8(c: Checker, i: int, ins: ins_.FindIndex8) -> None:
    _engine(c, i, ins, Engine.VECTOR)
    _on(c, i, ins.data, "FindIndex8 data", Engine.VECTOR)
    _on(c, i, ins.vals, "FindIndex8 vals", Engine.VECTOR)
    _on(c, i, ins.dst, "FindIndex8 dst", Engine.VECTOR, write=True)
    _elems(c, i, ins.data, "FindIndex8 data", *MAX8_ELEMS)
    _eight(c, i, ins.vals, ins.data.partitions, "FindIndex8 vals")
    _eight(c, i, ins.dst, ins.data.partitions, "FindIndex8 dst")
    _unsigned(c, i, ins.dst, "FindIndex8 dst")


def _match_replace8(c: Checker, i: int, ins: ins_.MatchReplace8) -> None:
    _engine(c, i, ins, Engine.VECTOR)
    _on(c, i, ins.data, "MatchReplace8 data", Engine.VECTOR)
    _on(c, i, ins.vals, "MatchReplace8 vals", Engine.VECTOR)
    _on(c, i, ins.dst, "MatchReplace8 dst", Engine.VECTOR, write=True)
    _on(c, i, ins.dst_idx, "MatchReplace8 dst_idx", Engine.VECTOR, write=True)
    _elems(c, i, ins.data, "MatchReplace8 data", 1, MAX8_ELEMS[1])
    _eight(c, i, ins.vals, ins.data.partitions, "MatchReplace8 vals")
    _same(c, i, ins.data, ins.dst, "MatchReplace8")
    if ins.dst_idx is not None:
        _eight(c, i, ins.dst_idx, ins.data.partitions, "MatchReplace8 dst_idx")
        _unsigned(c, i, ins.dst_idx, "MatchReplace8 dst_idx")


def _stream_shuffle(c: Checker, i: int, ins: ins_.StreamShuffle) -> None:
    _engine(c, i, ins, Engine.VECTOR)
    src, dst = ins.src, ins.dst
    _on(c, i, src, "StreamShuffle src", Engine.VECTOR)
    _on(c, i, dst, "StreamShuffle dst", Engine.VECTOR, write=True)
    if src.dtype != dst.dtype or src.free_elems != dst.free_elems:
        c._fail(i, f"StreamShuffle keeps the dtype and the elements per partition: "
                   f"{src.dtype} x {src.free_elems} -> {dst.dtype} x {dst.free_elems}")
    mask = ins.shuffle_mask
    if len(mask) != 32 or any(not (0 <= m < 32 or m == 255) for m in mask):
        c._fail(i, "StreamShuffle shuffle_mask is 32 entries, each 0..31 or 255")
    active = -(-max(src.partitions, dst.partitions) // 32) * 32
    starts = {96: (0,), 128: (0,), 64: (0, 64), 32: (0, 32, 64, 96)}[active]
    for role, ap in (("src", src), ("dst", dst)):
        if ap.partition not in starts:  # nki.isa.nc_stream_shuffle, constraint 3
            c._fail(i, f"StreamShuffle {role} starts at partition {ap.partition}; with "
                       f"{active} active partitions it starts at "
                       f"{' or '.join(map(str, starts))}")
    for p in range(dst.partitions):
        m = mask[p % 32]
        if m != 255 and (p // 32) * 32 + m >= src.partitions:
            c._fail(i, f"StreamShuffle: dst partition {p} reads src partition "
                       f"{(p // 32) * 32 + m}, beyond src's {src.partitions}")


def _local_gather(c: Checker, i: int, ins: ins_.LocalGather) -> None:
    _engine(c, i, ins, Engine.GPSIMD)
    src, idx, dst = ins.src, ins.index, ins.dst
    for role, ap in (("src", src), ("index", idx)):
        _on(c, i, ap, f"LocalGather {role}", Engine.GPSIMD)
    _on(c, i, dst, "LocalGather dst", Engine.GPSIMD, write=True)
    if src.partitions != idx.partitions or src.partitions % _CORE_PARTITIONS:
        c._fail(i, f"LocalGather src and index have the same partitions, a multiple of 16: "
                   f"{src.partitions} and {idx.partitions}")
    if ins.num_elem_per_idx not in LOCAL_GATHER_ELEMS:
        c._fail(i, f"LocalGather num_elem_per_idx is one of {LOCAL_GATHER_ELEMS}, not "
                   f"{ins.num_elem_per_idx}")
    per_core = idx.free_elems * _CORE_PARTITIONS
    if not 1 <= ins.num_valid_indices <= min(per_core, _GATHER_MAX_INDICES):
        c._fail(i, f"LocalGather num_valid_indices is 1 to {min(per_core, 4096)} (the "
                   f"indices of one core's 16 partitions, at most 4096), not "
                   f"{ins.num_valid_indices}")
    if get_format(idx.dtype).kind != "int":
        c._fail(i, f"LocalGather index is an integer tile (uint16), not {idx.dtype}")
    want = ins.num_valid_indices * ins.num_elem_per_idx
    if dst.partitions != src.partitions or dst.free_elems != want or dst.dtype != src.dtype:
        c._fail(i, f"LocalGather dst is [{src.partitions}, {want}] of {src.dtype}, not "
                   f"[{dst.partitions}, {dst.free_elems}] of {dst.dtype}")


def _sequence_bounds(c: Checker, i: int, ins: ins_.SequenceBounds) -> None:
    _engine(c, i, ins, Engine.GPSIMD)
    _on(c, i, ins.src, "SequenceBounds src", Engine.GPSIMD)
    _on(c, i, ins.dst, "SequenceBounds dst", Engine.GPSIMD, write=True)
    if ins.src.partitions != 1 or ins.dst.partitions != 1 or (
            ins.dst.free_elems != 2 * ins.src.free_elems):
        c._fail(i, f"SequenceBounds reads [1, n] and writes [1, 2, n] (\"the partition "
                   f"dimension must always be 1\"); got [{ins.src.partitions}, "
                   f"{ins.src.free_elems}] -> [{ins.dst.partitions}, {ins.dst.free_elems}]")


def _rand(c: Checker, i: int, ins: ins_.Rand) -> None:
    _on(c, i, ins.dst, "Rand dst", ins.engine, write=True)


def _dropout(c: Checker, i: int, ins: ins_.Dropout) -> None:
    _engine(c, i, ins, Engine.VECTOR)
    _on(c, i, ins.src, "Dropout src", Engine.VECTOR)
    _on(c, i, ins.prob_ap, "Dropout prob", Engine.VECTOR)
    _column(c, i, ins.prob_ap, ins.src.partitions, "Dropout prob")
    _on(c, i, ins.dst, "Dropout dst", Engine.VECTOR, write=True)
    _same(c, i, ins.src, ins.dst, "Dropout")


def _tensor_copy_dynamic(c: Checker, i: int, ins: ins_.TensorCopyDynamic) -> None:
    """nki.isa.tensor_copy_dynamic_src: src and dst on chip with the same partitions and
    elements per partition; the offset one int32/uint32 element in SBUF; the window at
    offsets lo..hi inside ``region``. The offset's value is checked when it executes."""
    _dynamic_engine(c, i, ins)
    _on(c, i, ins.src, "TensorCopyDynamic src", ins.engine)
    _on(c, i, ins.region, "TensorCopyDynamic region", ins.engine)
    _on(c, i, ins.dst, "TensorCopyDynamic dst", ins.engine, write=True)
    _dynamic_window(c, i, ins, ins.src)


def _tensor_copy_dynamic_dst(c: Checker, i: int, ins: ins_.TensorCopyDynamicDst) -> None:
    """nki.isa.tensor_copy_dynamic_dst, the mirror: the window is dst, inside ``region``
    (every byte it may write) at offsets lo..hi."""
    _dynamic_engine(c, i, ins)
    _on(c, i, ins.src, "TensorCopyDynamicDst src", ins.engine)
    _on(c, i, ins.region, "TensorCopyDynamicDst region", ins.engine, write=True)
    _on(c, i, ins.dst, "TensorCopyDynamicDst dst", ins.engine, write=True)  # in region
    _dynamic_window(c, i, ins, ins.dst)


def _dynamic_engine(c: Checker, i: int,
                    ins: ins_.TensorCopyDynamic | ins_.TensorCopyDynamicDst) -> None:
    if ins.engine not in (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD):
        c._fail(i, f"{type(ins).__name__} runs on Vector, Scalar or GpSimd, not {ins.engine}")


def _dynamic_window(c: Checker, i: int,
                    ins: ins_.TensorCopyDynamic | ins_.TensorCopyDynamicDst,
                    window: AccessPattern) -> None:
    """The rules the two dynamic copies share: the offset one int32/uint32
    element in SBUF; src and dst the same partitions and elements per partition (NKI docs);
    ``window`` (the side at the dynamic offset, at offset 0) inside ``region`` at its lowest
    and its highest offset."""
    name = type(ins).__name__
    _bounds(c, i, ins.offset, f"{name} offset", (Space.SBUF,))
    if ins.offset.dtype not in INDEX_FORMATS or ins.offset.partitions != 1 or (
            ins.offset.free_elems != 1):
        c._fail(i, f"{name} offset is one int32/uint32 element in SBUF, not "
                   f"[{ins.offset.partitions}, {ins.offset.free_elems}] of {ins.offset.dtype}")
    if ins.src.partitions != ins.dst.partitions or ins.src.free_elems != ins.dst.free_elems:
        c._fail(i, f"{name} src and dst have the same partitions and elements per "
                   f"partition: [{ins.src.partitions}, {ins.src.free_elems}] vs "
                   f"[{ins.dst.partitions}, {ins.dst.free_elems}]")
    (s0, s1), (r0, r1) = window.free_bytes_span, ins.region.free_bytes_span
    if ins.lo > ins.hi or s0 + ins.lo * ins.step < r0 or s1 + ins.hi * ins.step > r1 or (
            window.space is not ins.region.space
            or window.partition != ins.region.partition
            or window.partitions > ins.region.partitions):
        c._fail(i, f"{name} window at offsets {ins.lo}..{ins.hi} leaves its region")


def _gather_flattened(c: Checker, i: int, ins: ins_.GatherFlattened) -> None:
    """nl.gather_flattened: data, indices and dst in SBUF (GpSimd), the same partitions, dst
    the indices' elements in data's dtype, uint32/int32 indices."""
    _engine(c, i, ins, Engine.GPSIMD)
    for ap, role in ((ins.data, "data"), (ins.indices, "indices")):
        _on(c, i, ap, f"GatherFlattened {role}", Engine.GPSIMD)
    _on(c, i, ins.dst, "GatherFlattened dst", Engine.GPSIMD, write=True)
    if ins.indices.dtype not in INDEX_FORMATS:
        c._fail(i, f"GatherFlattened indices are uint32 (or int32), not {ins.indices.dtype}")
    d, x, o = ins.data, ins.indices, ins.dst
    if not d.partitions == x.partitions == o.partitions or (
            o.free_elems != x.free_elems or o.dtype != d.dtype):
        c._fail(i, f"GatherFlattened dst is [{x.partitions}, {x.free_elems}] of {d.dtype} "
                   f"(the indices' shape, data's dtype), not [{o.partitions}, "
                   f"{o.free_elems}] of {o.dtype}; data has {d.partitions} partitions")


CHECKS: dict[type, Callable[[Checker, int, Any], None]] = {
    ins_.AffineSelect: _affine_select, ins_.RangeSelect: _range_select,
    ins_.Select: _select, ins_.CopyPredicated: _copy_predicated,
    ins_.PartitionReduce: _partition_reduce, ins_.Max8: _max8,
    ins_.FindIndex8: _find_index8, ins_.MatchReplace8: _match_replace8,
    ins_.StreamShuffle: _stream_shuffle, ins_.LocalGather: _local_gather,
    ins_.SequenceBounds: _sequence_bounds, ins_.Rand: _rand, ins_.Dropout: _dropout,
    ins_.TensorCopyDynamic: _tensor_copy_dynamic,
    ins_.TensorCopyDynamicDst: _tensor_copy_dynamic_dst, ins_.GatherFlattened: _gather_flattened,
}
