"""The Vector-engine families of ``nki.isa`` beside tensor_tensor: ``bn_stats``, ``bn_aggr``,
``reciprocal``, ``tensor_tensor_scan``, ``scalar_tensor_tensor``, and ``iota`` (GpSimd): the
entry points (both API generations; nki/isa.py re-exports them) and what they record.

* ``bn_stats(data)``: data [P, N], N <= 512 (``nl.tile_size.bn_stats_fmax``), gives [P, 6]:
  (count, mean, variance x count) of the even- and of the odd-indexed elements;
* ``bn_aggr(stats)``: [P, 3k] of such triples gives [P, 2]: mean, variance;
* ``iota(expr, dtype)``: the values of an affine ``nl.arange`` / ``nl.mgrid`` expression
  in a new SBUF tile, [n, 1] for a partition-axis ``nl.arange``, [1, n] for a free one, an
  ``nl.mgrid`` expression's whole grid ([P, W, 3, 3] for ``3 * g.y + g.z``).

Values: systolic.sim.functional_engines; costs: timing/costs.py (NKI docs' formulas).
"""

from __future__ import annotations

from math import prod
from typing import Any, NamedTuple

from ..dtypes import FORMATS
from ..isa import Engine
from .calls import current_api, named, need, no_extra
from .index import Expr, MultiExpr, check_mask
from .lazy import LazyKind, is_number
from .mask import applying
from .opkind import (
    BnAggrArgs,
    BnStatsArgs,
    IotaArgs,
    ReciprocalArgs,
    ScalarTensorTensorArgs,
    ScanArgs,
)
from .ops import _add, _alu, _match, _vector
from .record import fail, here
from .tensor import Pending, Tensor, View, as_view
from .types import BUFFERS, to_dtype

__all__ = ["BN_STATS_FMAX", "bn_aggr", "bn_aggr_result", "bn_stats", "bn_stats_result", "iota",
           "iota_result", "reciprocal", "record_bn_aggr", "record_bn_stats", "record_iota",
           "record_reciprocal", "record_scalar_tensor_tensor", "record_scan",
           "scalar_tensor_tensor", "tensor_tensor_scan", "write_iota", "write_reciprocal",
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
class _Pattern(NamedTuple):
    """What ``iota(expr)`` writes: the tile's shape, and its value at [p, i1, i2, ...]:
    ``base + partition_step * p + sum(free_steps[k] * i_k)``."""

    shape: tuple[int, ...]
    base: int
    partition_step: int
    free_steps: tuple[int, ...]


def _pattern(expr: object, where: tuple[str, int]) -> _Pattern:
    """The pattern of an affine ``nl.arange`` / ``nl.mgrid`` expression. An ``nl.mgrid``
    expression is dense (NKI docs, nki.language.mgrid: "each returned argument has the same
    shape"): ``3 * g.y + g.z`` of ``nl.mgrid[0:P, 0:W, 0:3, 0:3]`` is [P, W, 3, 3], constant
    along the axes it does not name. ``nl.arange`` axes are open: the tile has the axes the
    expression names ([n, 1] for a partition-axis one, [1, n] for a free one)."""
    if isinstance(expr, int) and not isinstance(expr, bool):
        return _Pattern((1, 1), int(expr), 0, (0,))
    if isinstance(expr, Expr):
        expr = MultiExpr.of(expr)
    if not isinstance(expr, MultiExpr):
        raise fail(f"iota takes an nl.arange expression (c + k * nl.arange(n)[None, :]), not "
                   f"{type(expr).__name__}", where)
    by = {t.pos: t for t in expr.terms}
    grid = expr.grid
    if grid is not None and any(p >= len(grid) or grid[p] != t.size for p, t in by.items()):
        grid = None  # an nl.arange axis unlike the grid's: the named axes alone
    if grid is not None:
        shape = (grid[0], *grid[1:]) if len(grid) > 1 else (grid[0], 1)
        free = [by[p].coef if p in by else 0 for p in range(1, len(shape))]
    else:
        named = sorted(p for p in by if p > 0)
        shape = (by[0].size if 0 in by else 1, *([by[p].size for p in named] or [1]))
        free = [by[p].coef for p in named] or [0]
    return _Pattern(shape, expr.const, by[0].coef if 0 in by else 0, tuple(free))


def record_iota(dst: View, expr: object, where: tuple[str, int]) -> None:
    pat = _pattern(expr, where)
    shape = pat.shape
    if dst.buffer.name != "sbuf":
        raise fail(f"iota writes SBUF (NKI docs); dst is in {dst.buffer.name}", where)
    if dst.dtype.fmt not in FORMATS:
        raise fail(f"iota into {dst.dtype}: the model's on-chip memory has no {dst.dtype.fmt} "
                   f"format; use nl.float32 (integers exact to 2^24) or nl.int16", where)
    if dst.partitions != shape[0] or dst.size != prod(shape):
        raise fail(f"iota of this expression makes {list(shape)}; dst is {list(dst.shape)}",
                   where)
    _add(_iota_args(pat, dst, where), dst, (), where)


def _iota_args(pat: _Pattern, dst: View, where: tuple[str, int]) -> IotaArgs:
    """The pattern's free steps laid on dst's free axes (a one-axis pattern: along dst's
    free elements, flat)."""
    steps = [(s, n) for s, n in zip(pat.free_steps, pat.shape[1:], strict=True) if n > 1]
    if len(steps) <= 1:
        return IotaArgs(pat.base, pat.partition_step, steps[0][0] if steps else 0)
    nums = [a.num for a in dst.axes[1:]]
    if [n for n in nums if n > 1] != [n for _, n in steps]:
        raise fail(f"iota of this expression makes {list(pat.shape)}; dst "
                   f"{list(dst.shape)} has its elements in other axes", where)
    it = iter(steps)
    on_dst = [next(it)[0] if n > 1 else 0 for n in nums]
    return IotaArgs(pat.base, pat.partition_step, on_dst[-1], tuple(on_dst[:-1]))


def iota_pending(expr: object, dtype: Any, where: tuple[str, int]) -> Pending:
    _pattern(expr, where)  # refuse a bad expression at the call's line
    return Pending(LazyKind.IOTA, where, expr=expr, dtype=dtype)


def iota_result(pend: Pending) -> Tensor:
    shape = _pattern(pend.args["expr"], pend.where).shape
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
    srcs, const = _two_tiles(dst, (data0, "data0"), (data1, "data1"), (initial, "initial"),
                             what, where)
    _add(ScanArgs(_alu(op0), _alu(op1), const, bool(reverse0), bool(reverse1)), dst, srcs,
         where)


def _two_tiles(dst: View, a: tuple[View, str], b: tuple[View, str], scalar: tuple[Any, str],
               what: str, where: tuple[str, int]) -> tuple[tuple[View, ...], float | None]:
    """The sources of a Vector op on two tiles and a scalar (tensor_tensor_scan,
    scalar_tensor_tensor): every tile on chip, the two not both in PSUM (NKI docs), dst
    shaped as each; the scalar a number (returned) or a [P, 1] tile (a third source)."""
    (x, xn), (y, yn) = a, b
    for v, role in ((x, xn), (y, yn), (dst, "dst")):
        _on_chip(v, role, what, where)
    if x.buffer.name == "psum" and y.buffer.name == "psum":
        raise fail(f"{what}: {xn} and {yn} cannot both be in PSUM (NKI docs)", where)
    _match(dst, x, what, where)
    _match(dst, y, what, where)
    if is_number(scalar[0]):  # a Python or numpy number (np.float32(0.5))
        return (x, y), float(scalar[0])
    return (x, y, _vector(scalar[0], x, scalar[1], what, where)), None


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
    srcs, const = _two_tiles(dst, (data, "data"), (as_view(operand1), "operand1"),
                             (operand0, "operand0"), what, where)
    _add(ScalarTensorTensorArgs(_alu(op0), const, bool(reverse0), _alu(op1), bool(reverse1)),
         dst, srcs, where)


def write_scalar_tensor_tensor(pend: Pending, dst: View, accumulate: bool | None) -> None:
    a = pend.args
    record_scalar_tensor_tensor(dst, as_view(a["data"]), a["op0"], a["operand0"], a["op1"],
                                a["operand1"], a.get("reverse0", False),
                                a.get("reverse1", False), pend.where)


# -- the nki.isa entry points (nki/isa.py re-exports them) ----------------------------------
def _stats(kind: str, args: tuple[Any, ...], kw: dict[str, Any]) -> Pending | None:
    where = here()
    kw.pop("name", None)
    m = check_mask(kw.pop("mask", None), kind, where)
    eng = kw.pop("engine", None)
    if current_api(args, kw, 2):
        vals = named(args, kw, ("dst", "data"), kind)
        no_extra(kw, kind, where)
        need(vals, ("dst", "data"), kind, where)
        if eng not in (None, Engine.VECTOR):
            raise fail(f"{kind} runs on the Vector engine (NKI docs)", where)
        fn = record_bn_stats if kind == "bn_stats" else record_bn_aggr
        with applying(m, kind, where):
            fn(as_view(vals["dst"]), as_view(vals["data"]), where)
        return None
    data = args[0] if args else kw.pop("data", None)
    dtype = kw.pop("dtype", None)
    no_extra(kw, kind, where)
    if data is None:
        raise fail(f"{kind}: missing argument data", where)
    p = stats_pending(LazyKind(kind), data, dtype, eng, where)
    p.args["mask"] = m
    return p


def bn_stats(*args: Any, **kw: Any) -> Pending | None:
    """``bn_stats(dst, data)`` / older ``bn_stats(data, dtype=)``: per partition of data
    [P, N <= 512], (count, mean, variance x count) of its even and of its odd elements."""
    return _stats("bn_stats", args, kw)


def bn_aggr(*args: Any, **kw: Any) -> Pending | None:
    """``bn_aggr(dst, data)`` / older ``bn_aggr(data, dtype=)``: the mean and variance per
    partition of the bn_stats triples in data [P, 3k]."""
    return _stats("bn_aggr", args, kw)


def iota(*args: Any, **kw: Any) -> Pending | None:
    """Older API ``iota(expr, dtype)``: the values of an affine index expression in a
    new SBUF tile, made on GpSimd; ``iota(dst, expr)`` writes them into dst."""
    where = here()
    kw.pop("name", None)
    m = check_mask(kw.pop("mask", None), "iota", where)
    kw.pop("engine", None)
    if current_api(args, kw, 2):
        vals = named(args, kw, ("dst", "expr"), "iota")
        no_extra(kw, "iota", where)
        need(vals, ("dst", "expr"), "iota", where)
        with applying(m, "iota", where):
            record_iota(as_view(vals["dst"]), vals["expr"], where)
        return None
    vals = named(args, kw, ("expr", "dtype"), "iota")
    no_extra(kw, "iota", where)
    need(vals, ("expr", "dtype"), "iota", where)
    p = iota_pending(vals["expr"], vals["dtype"], where)
    p.args["mask"] = m
    return p


def reciprocal(*args: Any, **kw: Any) -> Pending | None:
    """``reciprocal(data, dtype=)`` returns 1 / data in a new tile; ``reciprocal(dst, data)``
    writes it (Vector engine, nki/vector.py)."""
    where = here()
    kw.pop("name", None)
    m = check_mask(kw.pop("mask", None), "reciprocal", where)
    if current_api(args, kw, 2):
        vals = named(args, kw, ("dst", "data"), "reciprocal")
        kw.pop("dtype", None)
        no_extra(kw, "reciprocal", where)
        need(vals, ("dst", "data"), "reciprocal", where)
        with applying(m, "reciprocal", where):
            record_reciprocal(as_view(vals["dst"]), as_view(vals["data"]), where)
        return None
    data = args[0] if args else kw.pop("data", None)
    dtype = kw.pop("dtype", None)
    no_extra(kw, "reciprocal", where)
    if data is None:
        raise fail("reciprocal: missing argument data", where)
    return Pending(LazyKind.RECIPROCAL, where, src=data, dtype=dtype, mask=m)


def tensor_tensor_scan(*args: Any, **kw: Any) -> Pending | None:
    """``tensor_tensor_scan(data0, data1, initial, op0, op1, reverse0=, reverse1=, dtype=)``
    returns the scan in a new tile; with ``dst`` first (or ``dst=``) it writes it (Vector
    engine, nki/vector.py)."""
    where = here()
    kw.pop("name", None)
    m = check_mask(kw.pop("mask", None), "tensor_tensor_scan", where)
    if kw.pop("engine", None) not in (None, Engine.VECTOR):
        raise fail("tensor_tensor_scan runs on the Vector engine (NKI docs)", where)
    new_api = current_api(args, kw, 3, at=2)
    names: tuple[str, ...] = (("dst",) if new_api else ()) + (
        "data0", "data1", "initial", "op0", "op1", "reverse0", "reverse1")
    vals = named(args, kw, names, "tensor_tensor_scan")
    dtype = kw.pop("dtype", None)
    no_extra(kw, "tensor_tensor_scan", where)
    need(vals, names[:6] if new_api else names[:5], "tensor_tensor_scan", where)
    if new_api:
        with applying(m, "tensor_tensor_scan", where):
            record_scan(as_view(vals["dst"]), as_view(vals["data0"]), as_view(vals["data1"]),
                        vals["initial"], vals["op0"], vals["op1"], vals.get("reverse0", False),
                        vals.get("reverse1", False), where)
        return None
    return Pending(LazyKind.TENSOR_TENSOR_SCAN, where, dtype=dtype, mask=m,
                   **{k: vals.get(k) for k in names})


def scalar_tensor_tensor(*args: Any, **kw: Any) -> Pending | None:
    """Older API ``scalar_tensor_tensor(*, data, op0, operand0, op1, operand1,
    reverse0=False, reverse1=False, dtype=None, mask=None)`` returns a new tile (data's
    shape, in dtype or data's); current API ``scalar_tensor_tensor(dst, data, op0, operand0,
    op1, operand1, reverse0=False, reverse1=False)`` writes dst. (data op0 operand0) op1
    operand1 on the Vector engine, operand0 a number or a [P, 1] tile, operand1 a tile of
    data's shape (NKI docs, nki.isa.scalar_tensor_tensor; nki/vector.py)."""
    what = "scalar_tensor_tensor"
    where = here()
    kw.pop("name", None)
    m = check_mask(kw.pop("mask", None), what, where)
    if kw.pop("engine", None) not in (None, Engine.VECTOR):
        raise fail(f"{what} runs on the Vector engine (NKI docs)", where)
    # the newest pages add an optional reduce_res (reduce_cmd=reset_reduce by default):
    # without reduce_res nothing is reduced, so only reduce_res itself is refused (below)
    if kw.get("reduce_res") is None:
        kw.pop("reduce_res", None)
        kw.pop("reduce_op", None)
        kw.pop("reduce_cmd", None)
    new_api = current_api(args, kw, 2)
    names: tuple[str, ...] = (("dst",) if new_api else ()) + (
        "data", "op0", "operand0", "op1", "operand1", "reverse0", "reverse1")
    vals = named(args, kw, names, "scalar_tensor_tensor")
    dtype = kw.pop("dtype", None)
    no_extra(kw, what, where)
    need(vals, names[:-2], what, where)
    rev0, rev1 = bool(vals.get("reverse0", False)), bool(vals.get("reverse1", False))
    if new_api:
        with applying(m, what, where):
            record_scalar_tensor_tensor(as_view(vals["dst"]), as_view(vals["data"]),
                                        vals["op0"], vals["operand0"], vals["op1"],
                                        vals["operand1"], rev0, rev1, where)
        return None
    return Pending(LazyKind.SCALAR_TENSOR_TENSOR, where, data=vals["data"], dtype=dtype,
                   op0=vals["op0"], operand0=vals["operand0"], op1=vals["op1"],
                   operand1=vals["operand1"], reverse0=rev0, reverse1=rev1, mask=m)
