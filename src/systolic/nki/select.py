"""Selections: ``nisa.affine_select`` (GpSimd), ``nisa.range_select``, ``nisa.select_reduce``,
``nisa.tensor_copy_predicated`` (Vector), ``nl.where``, and the comparison and modulo
operators ``nl.equal``, ``not_equal``, ``less``, ``less_equal``, ``greater``,
``greater_equal``, ``mod`` (tensor_tensor / tensor_scalar with a comparison ALU op).

Each call checks the NKI docs' rules (aws-neuron-sdk 7c165a3e, nki.isa.*) and records one
operation; the older API's results are lazy (nki/results.py ``LAZY``). :func:`emit` and
:func:`stage_sbuf` are shared with nki/top8.py, gather.py and random.py. Values:
systolic.sim.functional_select; checks: systolic.verify.select; costs: timing/costs.py.
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod
from typing import Any

import numpy as np

from ..isa import AluOp, Engine
from ..isa.fields import ReduceCmd
from .calls import RecordFn, emit, take
from .index import Mask, check_mask, whole
from .lazy import LazyKind, NlOp, Pending, binary, is_number
from .mask import applying
from .opkind import (
    AffineSelectArgs,
    CopyPredicatedArgs,
    RangeSelectArgs,
    SelectArgs,
)
from .ops import _add, _gpsimd, _match, _on_chip, _vector, record_copy, staged_in_sbuf
from .record import current, fail, here
from .tensor import Tensor, View, as_view
from .types import BUFFERS, DType, to_dtype

__all__ = ["RULES", "affine_select", "as_lazy", "equal", "greater", "greater_equal", "less",
           "less_equal", "mod", "not_equal", "range_select", "select_reduce", "stage_sbuf",
           "tensor_copy_predicated", "where"]

Where = tuple[str, int]
Shaper = Callable[[dict[str, Any], Where], Tensor]

FP32_MIN = -3.4028234663852886e38  # nl.fp32.min, the bit pattern 0xff7fffff


# -- shared by the families of this part ----------------------------------------------------
def stage_sbuf(v: View, where: Where) -> View:
    """A PSUM tile a GpSimd instruction reads, copied to SBUF first by the Vector engine
    (GpSimd cannot access PSUM; unsure: the compiler's own staging is not published)."""
    return v if v.buffer.name != "psum" else staged_in_sbuf(v, where, "gpsimd_stage")


def result_dtype(args: dict[str, Any], src: View) -> DType:
    d = args.get("dtype")
    return to_dtype(d) if d is not None else src.dtype


def _sbuf_tile(shape: tuple[int, ...], dtype: DType, where: Where) -> Tensor:
    return Tensor(shape, dtype, BUFFERS["sbuf"], where)


def _engine_view(dst: View, where: Where, write: Callable[[View], None]) -> None:
    """Write a GpSimd result into ``dst``; a PSUM dst gets it through an SBUF tile and a
    Vector copy (GpSimd cannot write PSUM)."""
    if dst.buffer.name != "psum":
        write(dst)
        return
    tmp = Tensor(dst.shape, dst.dtype, BUFFERS["sbuf"], where, "gpsimd_stage")
    current().add_tensor(tmp)
    write(tmp.full)
    record_copy(dst, tmp.full, None, where)


_CMP_TEXT = {"<": AluOp.LESS, "<=": AluOp.LESS_EQUAL, ">": AluOp.GREATER,
             ">=": AluOp.GREATER_EQUAL}
_CMP_UFUNC: dict[object, AluOp] = {
    np.equal: AluOp.EQUAL, np.not_equal: AluOp.NOT_EQUAL, np.less: AluOp.LESS,
    np.less_equal: AluOp.LESS_EQUAL, np.greater: AluOp.GREATER,
    np.greater_equal: AluOp.GREATER_EQUAL}


def comparison(op: object, what: str, where: Where) -> AluOp:
    """A comparison operator: np.less ... or nl.less ..."""
    alu = getattr(op, "alu", None)
    if alu is None and isinstance(op, np.ufunc):
        alu = _CMP_UFUNC.get(op)
    if alu not in _CMP_UFUNC.values():
        raise fail(f"{what}: {op!r} is not a comparison; use np.equal, np.less, "
                   f"np.less_equal, np.greater or np.greater_equal", where)
    return alu  # type: ignore[return-value]


def reduce_command(cmd: object, what: str, where: Where) -> ReduceCmd:
    try:
        return ReduceCmd(getattr(cmd, "value", cmd))
    except ValueError:
        raise fail(f"{what}: reduce_cmd {cmd!r} is not one of nisa.reduce_cmd.idle, reset, "
                   f"reset_reduce, reduce", where) from None


def max_only(op: object, what: str, where: Where) -> None:
    """select_reduce / range_select: "reduce_op only supports max"."""
    if op is None or op in (np.max, np.amax, np.maximum) or getattr(op, "alu", None) is (
            AluOp.MAXIMUM):
        return
    raise fail(f"{what}: reduce_op {op!r} is not modelled; only the maximum is supported "
               f"(NKI docs)", where)


# -- affine_select ----------------------------------------------------------------------------
def _pattern(pred: object, shape: tuple[int, ...], where: Where
             ) -> tuple[int, int, int, AluOp]:
    """(base, partition step, free step, comparison) of ``pred``, one comparison of affine
    index expressions over the tile's axes, as ``base + ps * p + fs * j  cmp  0`` with j the
    flat free element (row-major over the tile's free dims)."""
    if not isinstance(pred, Mask) or len(pred.clauses) != 1:
        raise fail("affine_select pred is one comparison of index expressions (iy < ix, "
                   "i * 128 + i_p >= j); masks joined with & are not allowed (NKI docs: use "
                   "nl.where)", where)
    e, op = pred.clauses[0]  # the clause e op 0 (nki/index.py Mask)
    bound = 0
    terms = e.terms
    pstep = fstep = 0
    strides = [prod(shape[k + 1:]) for k in range(len(shape))]
    free: list[tuple[int, int]] = []
    for t in terms:
        if t.coef == 0 or t.size == 1:
            continue
        if t.pos >= len(shape) or t.size != shape[t.pos]:
            raise fail(f"affine_select pred indexes axis {t.pos} over {t.size} values; the "
                       f"tile has shape {list(shape)}", where)
        if t.pos == 0:
            pstep = t.coef
        else:
            free.append((t.pos, t.coef))
    if free:
        pos, coef = free[-1]
        if coef % strides[pos]:
            raise fail("affine_select pred must be affine in the flat free index of the tile "
                       "(a steps ratio the free dims do not give)", where)
        fstep = coef // strides[pos]
        if any(c != fstep * strides[p] for p, c in free):
            raise fail("affine_select pred must be affine in the flat free index of the tile "
                       "(each free axis's step = the last one's x its stride)", where)
    return e.const - bound, pstep, fstep, _CMP_TEXT[op]


def affine_select(*args: Any, **kw: Any) -> Pending | None:
    """``affine_select(pred, on_true_tile, on_false_value, dtype=)``: on_true where the
    affine predicate holds, else on_false_value (GpSimd); ``dst=`` writes it."""
    where = here()
    m = check_mask(kw.pop("mask", None), "affine_select", where)
    dst, dtype = kw.pop("dst", None), kw.pop("dtype", None)
    a = take(args, kw, ("pred", "on_true_tile", "on_false_value"), "affine_select", where, 3)
    fill = a["on_false_value"]
    if not is_number(fill):
        raise fail(f"affine_select on_false_value is a number (fp32), not "
                   f"{type(fill).__name__}", where)
    src = as_view(a["on_true_tile"])
    _pattern(a["pred"], tuple(src.shape), where)  # refuse a bad predicate at this line
    return emit(LazyKind.AFFINE_SELECT, dst,
                {"pred": a["pred"], "src": a["on_true_tile"], "fill": float(fill),
                 "dtype": dtype, "mask": m}, where, _record_affine_select)


def _record_affine_select(dst: View, a: dict[str, Any], where: Where) -> None:
    src = as_view(a["src"])
    _on_chip(src, "on_true_tile", "affine_select", where)
    _on_chip(dst, "dst", "affine_select", where)
    _match(dst, src, "affine_select", where)
    base, ps, fs, cmp = _pattern(a["pred"], tuple(dst.shape), where)
    src = stage_sbuf(src, where)
    _engine_view(dst, where, lambda d: _add(AffineSelectArgs(a["fill"], cmp, base, ps, fs), d,
                                            (src,), where))


def _affine_tile(a: dict[str, Any], where: Where) -> Tensor:
    src = as_view(a["src"])
    return _sbuf_tile(tuple(src.shape), result_dtype(a, src), where)


# -- range_select ----------------------------------------------------------------------------
def range_select(*args: Any, **kw: Any) -> Pending | None:
    """``range_select(on_true_tile=, comp_op0=, comp_op1=, bound0=, bound1=, reduce_cmd=,
    reduce_res=, reduce_op=np.max, range_start=0, on_false_value=nl.fp32.min, dtype=)``
    (Vector, NeuronCore-v3 on)."""
    where = here()
    m = check_mask(kw.pop("mask", None), "range_select", where)
    dst, dtype = kw.pop("dst", None), kw.pop("dtype", None)
    a = take(args, kw, ("on_true_tile", "comp_op0", "comp_op1", "bound0", "bound1",
                        "reduce_cmd", "reduce_res", "reduce_op", "range_start",
                        "on_false_value"), "range_select", where, 5)
    arch = current().arch
    if arch.generation < 3:
        raise fail(f"range_select needs NeuronCore-v3 or newer (NKI docs); {arch.name} is "
                   f"gen{arch.generation}", where)
    fill = a.get("on_false_value")
    if fill is not None and float(fill) != FP32_MIN:
        raise fail(f"range_select on_false_value must be nl.fp32.min (NKI docs: \"Due to HW "
                   f"constraints\"), not {fill!r}", where)
    start = a.get("range_start") or 0
    if not whole(start):
        raise fail(f"range_select range_start is a whole number known when the kernel is "
                   f"recorded, not {type(start).__name__}", where)
    max_only(a.get("reduce_op"), "range_select", where)
    args_ = {"src": a["on_true_tile"], "bound0": a["bound0"], "bound1": a["bound1"],
             "cmp0": comparison(a["comp_op0"], "range_select comp_op0", where),
             "cmp1": comparison(a["comp_op1"], "range_select comp_op1", where),
             "start": int(start),
             "cmd": reduce_command(a.get("reduce_cmd") or ReduceCmd.IDLE, "range_select",
                                   where),
             "reduce_res": a.get("reduce_res"), "dtype": dtype, "mask": m}
    return emit(LazyKind.RANGE_SELECT, dst, args_, where, _record_range_select)


def _record_range_select(dst: View, a: dict[str, Any], where: Where) -> None:
    what = "range_select"
    src = as_view(a["src"])
    _on_chip(src, "on_true_tile", what, where)
    _on_chip(dst, "dst", what, where)
    _match(dst, src, what, where)
    b0 = _vector(a["bound0"], src, "bound0", what, where)
    b1 = _vector(a["bound1"], src, "bound1", what, where)
    for b, role in ((b0, "bound0"), (b1, "bound1")):
        if b.dtype.fmt != "fp32":
            raise fail(f"{what} {role} must be float32 (NKI docs), not {b.dtype}", where)
    outs: tuple[View, ...] = ()
    if a["reduce_res"] is not None:
        outs = (_vector(a["reduce_res"], src, "reduce_res", what, where),)
    _add(RangeSelectArgs(a["cmp0"], a["cmp1"], a["start"], FP32_MIN, a["cmd"]), dst,
         (src, b0, b1), where, outs)


# -- select_reduce, nl.where ------------------------------------------------------------------
def select_reduce(*args: Any, **kw: Any) -> None:
    """``select_reduce(dst=, predicate=, on_true=, on_false=, reduce_res=, reduce_cmd=,
    reduce_op=np.max, reverse_pred=False)`` (Vector)."""
    where = here()
    m = check_mask(kw.pop("mask", None), "select_reduce", where)
    kw.pop("dtype", None)  # the result is cast to dst's dtype
    a = take(args, kw, ("dst", "predicate", "on_true", "on_false", "reduce_res",
                        "reduce_cmd", "reduce_op", "reverse_pred"), "select_reduce", where, 4)
    max_only(a.get("reduce_op"), "select_reduce", where)
    pred = as_view(a["predicate"])
    if pred.dtype.fmt not in ("uint8", "int8", "int16", "uint16", "int32", "uint32"):
        raise fail(f"select_reduce predicate is an integer tile (uint8, int8, int16, uint16), "
                   f"not {pred.dtype}", where)
    cmd = reduce_command(a.get("reduce_cmd") or ReduceCmd.IDLE, "select_reduce", where)
    with applying(m, "select_reduce", where):
        _record_select(as_view(a["dst"]), pred, as_view(a["on_true"]), a["on_false"],
                       bool(a.get("reverse_pred")), cmd, a.get("reduce_res"),
                       "select_reduce", where)


def _record_select(dst: View, pred: View, on_true: View, on_false: Any, reverse: bool,
                   cmd: ReduceCmd, reduce_res: Any, what: str, where: Where) -> None:
    for v, role in ((dst, "dst"), (pred, "predicate"), (on_true, "on_true")):
        _on_chip(v, role, what, where)
    if pred.buffer.name == "psum" and on_true.buffer.name == "psum":
        raise fail(f"{what}: on_true and predicate cannot both be in PSUM (NKI docs)", where)
    _match(dst, on_true, what, where)
    _match(dst, pred, what, where)
    srcs = [pred, on_true]
    const: float | None = None
    if is_number(on_false):
        const = float(on_false)
    else:
        f = as_view(on_false)
        if f.size == f.partitions == dst.partitions and dst.size > dst.partitions:
            f = _vector(f, dst, "on_false", what, where)
        else:
            _on_chip(f, "on_false", what, where)
            _match(dst, f, what, where)
        srcs.append(f)
    outs: tuple[View, ...] = ()
    if reduce_res is not None:
        outs = (_vector(reduce_res, dst, "reduce_res", what, where),)
    _add(SelectArgs(const, reverse, cmd), dst, tuple(srcs), where, outs)


def where(condition: Any, x: Any, y: Any, dtype: Any = None, mask: Any = None,
          **kw: Any) -> Pending:
    """``nl.where(condition, x, y)``: x where condition is nonzero, else y (a tile of x's
    shape, a [P, 1] column, or a number); a Vector select (the instruction select_reduce
    uses, with no reduction)."""
    at = here()
    m = check_mask(mask, "nl.where", at)
    kw.pop("name", None)
    if kw:
        raise fail(f"nl.where: argument(s) {', '.join(sorted(kw))} not modelled", at)
    if is_number(x):
        raise fail("nl.where x is a tile (y may be a number)", at)
    return Pending(LazyKind.WHERE, at, cond=condition, x=x, y=y, dtype=dtype, mask=m)


def _record_where(dst: View, a: dict[str, Any], at: Where) -> None:
    _record_select(dst, as_view(a["cond"]), as_view(a["x"]), a["y"], False, ReduceCmd.IDLE,
                   None, "nl.where", at)


def _where_tile(a: dict[str, Any], at: Where) -> Tensor:
    x = as_view(a["x"])
    return _sbuf_tile(tuple(x.shape), result_dtype(a, x), at)


# -- tensor_copy_predicated ----------------------------------------------------------------
def tensor_copy_predicated(*args: Any, **kw: Any) -> None:
    """``tensor_copy_predicated(src=, dst=, predicate=, reverse_pred=False)``: dst = src
    where predicate is nonzero; elsewhere dst keeps its values (Vector)."""
    where_ = here()
    what = "tensor_copy_predicated"
    m = check_mask(kw.pop("mask", None), what, where_)
    kw.pop("dtype", None)
    a = take(args, kw, ("src", "dst", "predicate", "reverse_pred"), what, where_, 3)
    with applying(m, what, where_):
        _copy_predicated(a, what, where_)


def _copy_predicated(a: dict[str, Any], what: str, where_: Where) -> None:
    dst, pred = as_view(a["dst"]), as_view(a["predicate"])
    for v, role in ((dst, "dst"), (pred, "predicate")):
        _on_chip(v, role, what, where_)
    if get_kind(pred) != "int":
        raise fail(f"{what} predicate is an unsigned integer tile (uint8, uint16, uint32), "
                   f"not {pred.dtype}", where_)
    _match(dst, pred, what, where_)
    src, value = a["src"], None
    srcs = [pred]
    if is_number(src):
        value = float(src)
    else:
        s = as_view(src)
        _on_chip(s, "src", what, where_)
        _match(dst, s, what, where_)
        if s.dtype != dst.dtype:
            raise fail(f"{what}: src and dst share a dtype (NKI docs): {s.dtype} vs "
                       f"{dst.dtype}", where_)
        if s.buffer.name == "psum" and pred.buffer.name == "psum":
            raise fail(f"{what}: src and predicate cannot both be in PSUM (NKI docs)",
                       where_)
        srcs.append(s)
    srcs.append(dst)  # the elements left as they are: dst is read too
    _gpsimd(Engine.VECTOR, tuple(srcs), what, where_)
    _add(CopyPredicatedArgs(value, bool(a.get("reverse_pred"))), dst, tuple(srcs), where_)


def get_kind(v: View) -> str:
    from ..dtypes import FORMATS

    f = FORMATS.get(v.dtype.fmt)
    return f.kind if f is not None else "int"  # int32 / uint32: integers with no format yet


# -- nl comparisons and mod ------------------------------------------------------------------
class _Op(NlOp):
    """``nl.equal(x, y)`` ...: a tensor_tensor (or tensor_scalar with a number or a [P, 1]
    column) with a comparison ALU op, 1 where true and 0 where false, in ``dtype`` (default
    uint8, NKI's bool); ``nl.mod``: Python's x % y, in the inputs' dtype."""

    def __init__(self, name: str, alu: AluOp, default: str | None) -> None:
        super().__init__(name, alu, None)
        self.default = default

    def __call__(self, x: Any, y: Any, dtype: Any = None, mask: Any = None,
                 **kw: Any) -> Pending:
        at = here()
        m = check_mask(mask, f"nl.{self.name}", at)
        kw.pop("name", None)
        if kw:
            raise fail(f"nl.{self.name}: argument(s) {', '.join(sorted(kw))} not modelled",
                       at)
        if is_number(x) and is_number(y):
            raise fail(f"nl.{self.name} of two numbers: give a tile", at)
        p = binary(self, x, y, at, dtype if dtype is not None else self.default)
        p.args["mask"] = m
        return p


equal = _Op("equal", AluOp.EQUAL, "uint8")
not_equal = _Op("not_equal", AluOp.NOT_EQUAL, "uint8")
less = _Op("less", AluOp.LESS, "uint8")
less_equal = _Op("less_equal", AluOp.LESS_EQUAL, "uint8")
greater = _Op("greater", AluOp.GREATER, "uint8")
greater_equal = _Op("greater_equal", AluOp.GREATER_EQUAL, "uint8")
mod = _Op("mod", AluOp.MOD, None)


# per lazy kind: the fresh tile a used result lands in, and how it is recorded into a view
RULES: dict[LazyKind, tuple[Shaper, RecordFn]] = {
    LazyKind.AFFINE_SELECT: (_affine_tile, _record_affine_select),
    LazyKind.RANGE_SELECT: (_affine_tile, _record_range_select),
    LazyKind.WHERE: (_where_tile, _record_where),
}


def as_lazy(shape: Shaper, rec: RecordFn) -> tuple[Callable[[Pending], Tensor],
                                                    Callable[[Pending, View, bool | None], None]]:
    """A family rule as nki/results.py's ``LazyRule`` takes it: (result, write)."""
    return (lambda p: shape(p.args, p.where),
            lambda p, dst, acc: rec(dst, p.args, p.where))
