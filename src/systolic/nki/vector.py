"""Statistics and constants: ``nisa.bn_stats``, ``nisa.bn_aggr`` (Vector engine) and
``nisa.iota`` (GpSimd), both API generations.

* ``bn_stats(data)``: data [P, N], N <= 512 (``nl.tile_size.bn_stats_fmax``), gives [P, 6]:
  (count, mean, variance x count) of the even- and of the odd-indexed elements;
* ``bn_aggr(stats)``: [P, 3k] of such triples gives [P, 2]: mean, variance;
* ``iota(expr, dtype)``: the values of an ``nl.arange`` expression (``c + k * i``, one axis)
  in a new SBUF tile, [n, 1] for a partition-axis expression, [1, n] for a free one.

Values: systolic.sim.functional_engines; costs: timing/costs.py (NKI docs' formulas).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import FORMATS
from ..isa import Engine
from .index import Expr, MultiExpr
from .lazy import LazyKind
from .opkind import (
    BnAggrArgs,
    BnStatsArgs,
    IotaArgs,
    ReciprocalArgs,
    ScalarTensorTensorArgs,
    ScanArgs,
)
from .ops import _add, _alu, _gpsimd, _match, _vector
from .record import fail
from .tensor import Pending, Tensor, View, as_view
from .types import BUFFERS, to_dtype

__all__ = ["BN_STATS_FMAX", "bn_aggr_result", "bn_stats_result", "iota_result",
           "record_bn_aggr", "record_bn_stats", "record_iota", "record_reciprocal",
           "record_scalar_tensor_tensor", "record_scan", "write_iota", "write_reciprocal",
           "write_scalar_tensor_tensor", "write_scan", "write_stats"]

# nki.isa.bn_stats: "the number of elements per partition ... must not exceed 512
# (nl.tile_size.bn_stats_fmax)"
BN_STATS_FMAX = 512


def _vector_only(eng: object, what: str, where: tuple[str, int]) -> None:
    if eng not in (None, Engine.VECTOR):
        raise fail(f"{what} runs on the Vector engine (NKI docs), not {eng!r}", where)


def _on_chip(v: View, role: str, what: str, where: tuple[str, int]) -> None:
    if not v.buffer.on_chip:
        raise fail(f"{what} {role} is in {v.buffer.name}; it must be an SBUF or PSUM tile",
                   where)
    if not v.axes or not v.axes[0].part:
        raise fail(f"{what} {role} needs its partition dimension first, not shape "
                   f"{list(v.shape)}", where)


def record_bn_stats(dst: View, data: View, where: tuple[str, int]) -> None:
    _on_chip(data, "data", "bn_stats", where)
    _on_chip(dst, "dst", "bn_stats", where)
    p = data.partitions
    n = data.size // p
    if n > BN_STATS_FMAX:
        raise fail(f"bn_stats takes at most {BN_STATS_FMAX} elements per partition "
                   f"(nl.tile_size.bn_stats_fmax), not {n}: run it on each 512-element "
                   f"slice and aggregate the outputs with one bn_aggr", where)
    if dst.partitions != p or dst.size != 6 * p:
        raise fail(f"bn_stats writes six statistics per partition, [{p}, 6]; dst is "
                   f"{list(dst.shape)}", where)
    _add(BnStatsArgs(), dst, (data,), where)


def record_bn_aggr(dst: View, data: View, where: tuple[str, int]) -> None:
    _on_chip(data, "data", "bn_aggr", where)
    _on_chip(dst, "dst", "bn_aggr", where)
    p = data.partitions
    n = data.size // p
    if n % 3:
        raise fail(f"bn_aggr reads (count, mean, variance x count) triples of bn_stats: "
                   f"{n} elements per partition is not a multiple of 3", where)
    if dst.partitions != p or dst.size != 2 * p:
        raise fail(f"bn_aggr writes the mean and the variance, [{p}, 2]; dst is "
                   f"{list(dst.shape)}", where)
    _add(BnAggrArgs(), dst, (data,), where)


def stats_pending(kind: LazyKind, data: Any, dtype: Any, eng: object,
                  where: tuple[str, int]) -> Pending:
    """``bn_stats(data)`` / ``bn_aggr(data)`` of the older API: a new tile, in ``dtype`` or
    the data's ("If dtype field is not specified, the instruction will cast the float32
    results back to the same data type as the input data tile")."""
    _vector_only(eng, kind.value, where)
    return Pending(kind, where, src=data, dtype=dtype)  # BN_STATS or BN_AGGR


def _stats_result(width: int) -> Any:
    def result(pend: Pending) -> Tensor:
        src = as_view(pend.args["src"])
        dtype = pend.args.get("dtype")
        dt = to_dtype(dtype) if dtype is not None else src.dtype
        return Tensor((src.partitions, width), dt, BUFFERS["sbuf"], pend.where)

    return result


bn_stats_result = _stats_result(6)
bn_aggr_result = _stats_result(2)


def write_stats(pend: Pending, dst: View, accumulate: bool | None) -> None:
    fn = record_bn_stats if pend.kind is LazyKind.BN_STATS else record_bn_aggr
    fn(dst, as_view(pend.args["src"]), pend.where)


# -- iota ----------------------------------------------------------------------------------
def _pattern(expr: object, where: tuple[str, int]) -> tuple[tuple[int, int], int, int, int]:
    """(shape, base, partition step, free step) of a one-axis ``nl.arange`` expression."""
    if isinstance(expr, int) and not isinstance(expr, bool):
        return (1, 1), int(expr), 0, 0
    if isinstance(expr, MultiExpr):  # expr_a + expr_b: a partition and a free axis
        by = {t.pos: t for t in expr.terms}
        if not set(by) <= {0, 1}:
            raise fail("iota of an expression over more than the partition axis and one free "
                       "axis is not modelled", where)
        p, f = by.get(0), by.get(1)
        return ((p.size if p else 1, f.size if f else 1), expr.const, p.coef if p else 0,
                f.coef if f else 0)
    if not isinstance(expr, Expr):
        raise fail(f"iota takes an nl.arange expression (c + k * nl.arange(n)[None, :]), not "
                   f"{type(expr).__name__}", where)
    if expr.pos == 0:
        return (expr.size, 1), expr.const, expr.coef, 0
    return (1, expr.size), expr.const, 0, expr.coef


def record_iota(dst: View, expr: object, where: tuple[str, int]) -> None:
    shape, base, pstep, fstep = _pattern(expr, where)
    if dst.buffer.name != "sbuf":
        raise fail(f"iota writes SBUF (NKI docs); dst is in {dst.buffer.name}", where)
    if dst.dtype.fmt not in FORMATS:
        raise fail(f"iota into {dst.dtype}: the model's on-chip memory has no {dst.dtype.fmt} "
                   f"format; use nl.float32 (integers exact to 2^24) or nl.int16", where)
    if dst.partitions != shape[0] or dst.size != shape[0] * shape[1]:
        raise fail(f"iota of this expression makes {list(shape)}; dst is {list(dst.shape)}",
                   where)
    _add(IotaArgs(base, pstep, fstep), dst, (), where)


def iota_pending(expr: object, dtype: Any, where: tuple[str, int]) -> Pending:
    _pattern(expr, where)  # refuse a bad expression at the call's line
    return Pending(LazyKind.IOTA, where, expr=expr, dtype=dtype)


def iota_result(pend: Pending) -> Tensor:
    shape = _pattern(pend.args["expr"], pend.where)[0]
    return Tensor(shape, to_dtype(pend.args["dtype"]), BUFFERS["sbuf"], pend.where)


def write_iota(pend: Pending, dst: View, accumulate: bool | None) -> None:
    record_iota(dst, pend.args["expr"], pend.where)


# -- reciprocal, tensor_tensor_scan (Vector engine) ----------------------------------------
def record_reciprocal(dst: View, data: View, where: tuple[str, int]) -> None:
    """dst = 1 / data on the Vector engine (nki.isa.reciprocal)."""
    _on_chip(data, "data", "reciprocal", where)
    _on_chip(dst, "dst", "reciprocal", where)
    _match(dst, data, "reciprocal", where)
    _add(ReciprocalArgs(), dst, (data,), where)


def write_reciprocal(pend: Pending, dst: View, accumulate: bool | None) -> None:
    record_reciprocal(dst, as_view(pend.args["src"]), pend.where)


def record_scan(dst: View, data0: View, data1: View, initial: Any, op0: Any, op1: Any,
                reverse0: bool, reverse1: bool, where: tuple[str, int]) -> None:
    """The scan of nki.isa.tensor_tensor_scan: per partition, dst[j] = (data0[j] op0
    dst[j-1]) op1 data1[j], dst[-1] = initial (a number, or a [P, 1] tile)."""
    what = "tensor_tensor_scan"
    for v, role in ((data0, "data0"), (data1, "data1"), (dst, "dst")):
        _on_chip(v, role, what, where)
    if data0.buffer.name == "psum" and data1.buffer.name == "psum":
        raise fail(f"{what}: data0 and data1 cannot both be in PSUM (NKI docs)", where)
    _match(dst, data0, what, where)
    _match(dst, data1, what, where)
    srcs = [data0, data1]
    const: float | None = None
    if isinstance(initial, int | float) and not isinstance(initial, bool):
        const = float(initial)
    else:
        srcs.append(_vector(initial, data0, "initial", what, where))
    _gpsimd(Engine.VECTOR, (dst, *srcs), what, where)
    _add(ScanArgs(_alu(op0), _alu(op1), const, bool(reverse0), bool(reverse1)), dst,
         tuple(srcs), where)


def write_scan(pend: Pending, dst: View, accumulate: bool | None) -> None:
    a = pend.args
    record_scan(dst, as_view(a["data0"]), as_view(a["data1"]), a["initial"], a["op0"],
                a["op1"], a.get("reverse0", False), a.get("reverse1", False), pend.where)


def scan_result(pend: Pending) -> Tensor:
    """The older API's result tile: data0's shape, in ``dtype`` or the higher-precision
    of the two inputs' dtypes (NKI docs)."""
    d0, d1 = as_view(pend.args["data0"]), as_view(pend.args["data1"])
    dtype = pend.args.get("dtype")
    dt = to_dtype(dtype) if dtype is not None else max(
        (d0.dtype, d1.dtype), key=lambda d: d.itemsize)
    return Tensor(d0.shape, dt, BUFFERS["sbuf"], pend.where)


# -- scalar_tensor_tensor (Vector engine) ----------------------------------------------------
def record_scalar_tensor_tensor(dst: View, data: View, op0: Any, operand0: Any, op1: Any,
                                operand1: Any, reverse0: bool, reverse1: bool,
                                where: tuple[str, int]) -> None:
    """nki.isa.scalar_tensor_tensor: dst = (data op0 operand0) op1 operand1 on the Vector
    engine, operand0 a number or a [P, 1] tile, operand1 a tile of data's shape; "data and
    operand1 cannot both reside in PSUM" (NKI docs)."""
    what = "scalar_tensor_tensor"
    if not isinstance(operand1, Tensor | View | Pending):
        raise fail(f"{what} operand1 must be a tile of data's shape, not "
                   f"{type(operand1).__name__}", where)
    t = as_view(operand1)
    for v, role in ((data, "data"), (t, "operand1"), (dst, "dst")):
        _on_chip(v, role, what, where)
    if data.buffer.name == "psum" and t.buffer.name == "psum":
        raise fail(f"{what}: data and operand1 cannot both be in PSUM (NKI docs)", where)
    _match(dst, data, what, where)
    _match(dst, t, what, where)
    srcs = [data, t]
    const: float | None = None
    if isinstance(operand0, int | float | np.integer | np.floating) and not isinstance(
            operand0, bool | np.bool_):  # a Python or numpy number (np.float32(0.5))
        const = float(operand0)
    else:
        srcs.append(_vector(operand0, data, "operand0", what, where))
    _add(ScalarTensorTensorArgs(_alu(op0), const, bool(reverse0), _alu(op1), bool(reverse1)),
         dst, tuple(srcs), where)


def write_scalar_tensor_tensor(pend: Pending, dst: View, accumulate: bool | None) -> None:
    a = pend.args
    record_scalar_tensor_tensor(dst, as_view(a["data"]), a["op0"], a["operand0"], a["op1"],
                                a["operand1"], a.get("reverse0", False),
                                a.get("reverse1", False), pend.where)
