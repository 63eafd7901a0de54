"""The top-8 family of the Vector engine: ``nisa.max8``, ``nisa.nc_find_index8`` and
``nisa.nc_match_replace8`` (aws-neuron-sdk 7c165a3e, nki.isa.*).

* ``max8(src=)``: [P, 8], the 8 largest values of each partition in descending order;
* ``nc_find_index8(data=, vals=, dtype=uint32)``: [P, 8], the index of the first occurrence of
  each value of ``vals`` in each partition of ``data`` (free dims flattened);
* ``nc_match_replace8(data=, vals=, imm=, dst_idx=)``: data with the first occurrence of each
  value replaced by ``imm``; their indices into ``dst_idx`` when given.

Values: systolic.sim.functional_select; checks: systolic.verify.select.
"""

from __future__ import annotations

from typing import Any

from .calls import RecordFn, emit, take
from .index import check_mask
from .lazy import LazyKind, Pending
from .opkind import FindIndex8Args, MatchReplace8Args, Max8Args
from .ops import _add, _on_chip
from .record import fail, here
from .select import Shaper, result_dtype
from .tensor import Tensor, View, as_view
from .types import BUFFERS, to_dtype

__all__ = ["RULES", "max8", "nc_find_index8", "nc_match_replace8"]

Where = tuple[str, int]
# nki.isa.max8 / nc_find_index8: "between 8 and 16,384" elements per partition;
# nc_match_replace8: "no more than 16,384"
_MAX_ELEMS = 16384


def _per_partition(v: View, role: str, what: str, where: Where, lo: int) -> int:
    _on_chip(v, role, what, where)
    n = v.size // max(1, v.partitions)
    if not lo <= n <= _MAX_ELEMS:
        raise fail(f"{what} {role} has {n} elements per partition; it takes {lo} to "
                   f"{_MAX_ELEMS:,} (NKI docs)", where)
    return n


def _eight(v: View, of: View, role: str, what: str, where: Where) -> None:
    _on_chip(v, role, what, where)
    if v.partitions != of.partitions or v.size != 8 * of.partitions:
        raise fail(f"{what} {role} is 8 elements on each of the {of.partitions} partitions, "
                   f"not {list(v.shape)}", where)


def _tile8(dtype: Any) -> Shaper:
    def shape(a: dict[str, Any], where: Where) -> Tensor:
        src = as_view(a.get("src", a.get("data")))
        d = to_dtype(a["dtype"]) if a.get("dtype") is not None else (
            to_dtype(dtype) if dtype is not None else src.dtype)
        return Tensor((src.partitions, 8), d, BUFFERS["sbuf"], where)

    return shape


# -- max8 -------------------------------------------------------------------------------------
def max8(*args: Any, **kw: Any) -> Pending | None:
    """``max8(src=, dtype=)``: the 8 largest values per partition, descending."""
    where = here()
    m = check_mask(kw.pop("mask", None), "max8", where)
    a = take(args, kw, ("src", "dtype", "dst"), "max8", where, 1)
    return emit(LazyKind.MAX8, a.get("dst"),
                {"src": a["src"], "dtype": a.get("dtype"), "mask": m}, where,
                _record_max8)


def _record_max8(dst: View, a: dict[str, Any], where: Where) -> None:
    src = as_view(a["src"])
    _per_partition(src, "src", "max8", where, 8)
    _eight(dst, src, "dst", "max8", where)
    _add(Max8Args(), dst, (src,), where)


# -- nc_find_index8 ---------------------------------------------------------------------------
def nc_find_index8(*args: Any, **kw: Any) -> Pending | None:
    """``nc_find_index8(data=, vals=, dtype=nl.uint32)``: per partition, the index of the
    first occurrence of each of the 8 values."""
    where = here()
    m = check_mask(kw.pop("mask", None), "nc_find_index8", where)
    a = take(args, kw, ("data", "vals", "dtype", "dst"), "nc_find_index8", where, 2)
    dtype = a.get("dtype")
    if dtype is not None and to_dtype(dtype).nki not in ("uint16", "uint32"):
        raise fail(f"nc_find_index8 dtype is nl.uint16 or nl.uint32 (NKI docs), not "
                   f"{to_dtype(dtype)}", where)
    return emit(LazyKind.FIND_INDEX8, a.get("dst"),
                {"data": a["data"], "vals": a["vals"], "dtype": dtype, "mask": m}, where,
                _record_find_index8)


def _record_find_index8(dst: View, a: dict[str, Any], where: Where) -> None:
    data, vals = as_view(a["data"]), as_view(a["vals"])
    _per_partition(data, "data", "nc_find_index8", where, 8)
    _eight(vals, data, "vals", "nc_find_index8", where)
    _eight(dst, data, "dst", "nc_find_index8", where)
    _add(FindIndex8Args(), dst, (data, vals), where)


# -- nc_match_replace8 -----------------------------------------------------------------------
def nc_match_replace8(*args: Any, **kw: Any) -> Pending | None:
    """``nc_match_replace8(data=, vals=, imm=, dst_idx=None, dtype=)``: data with the first
    occurrence of each of the 8 values replaced by ``imm`` (their indices into dst_idx)."""
    where = here()
    m = check_mask(kw.pop("mask", None), "nc_match_replace8", where)
    a = take(args, kw, ("data", "vals", "imm", "dst_idx", "dtype", "dst"),
             "nc_match_replace8", where, 3)
    imm = a["imm"]
    try:
        imm = float(imm)
    except (TypeError, ValueError):
        raise fail(f"nc_match_replace8 imm is a float32 constant, not "
                   f"{type(imm).__name__}", where) from None
    return emit(LazyKind.MATCH_REPLACE8, a.get("dst"),
                {"data": a["data"], "vals": a["vals"], "imm": imm,
                 "dst_idx": a.get("dst_idx"), "dtype": a.get("dtype"), "mask": m}, where,
                _record_match_replace8)


def _record_match_replace8(dst: View, a: dict[str, Any], where: Where) -> None:
    what = "nc_match_replace8"
    data, vals = as_view(a["data"]), as_view(a["vals"])
    _per_partition(data, "data", what, where, 1)
    _eight(vals, data, "vals", what, where)
    _on_chip(dst, "dst", what, where)
    if dst.partitions != data.partitions or dst.size != data.size:
        raise fail(f"{what}: the result has data's shape {list(data.shape)}, not "
                   f"{list(dst.shape)}", where)
    outs: tuple[View, ...] = ()
    if a.get("dst_idx") is not None:
        idx = as_view(a["dst_idx"])
        _eight(idx, data, "dst_idx", what, where)
        outs = (idx,)
    _add(MatchReplace8Args(a["imm"]), dst, (data, vals), where, outs)


def _replaced_tile(a: dict[str, Any], where: Where) -> Tensor:
    data = as_view(a["data"])
    return Tensor(tuple(data.shape), result_dtype(a, data), BUFFERS["sbuf"], where)


RULES: dict[LazyKind, tuple[Shaper, RecordFn]] = {
    LazyKind.MAX8: (_tile8(None), _record_max8),
    LazyKind.FIND_INDEX8: (_tile8("uint32"), _record_find_index8),
    LazyKind.MATCH_REPLACE8: (_replaced_tile, _record_match_replace8),
}
