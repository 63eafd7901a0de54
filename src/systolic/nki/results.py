"""Lazy results of the older API (``nl.load(x)``, ``nl.exp(t)``, ``a * b``, ``nc_matmul(s,
m)`` ...): per :class:`~systolic.nki.lazy.LazyKind`, ONE rule (:data:`LAZY`) saying which
fresh tile the result lands in when it is used, and how it is recorded when it is written
into a destination (assigned, or ``+=``).

:data:`RECORDING` is what the :class:`~systolic.nki.record.Recorder` is given
(nki/run.py): the recording functions tensor handles call, below which they sit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from .gather import RULES as GATHER_RULES
from .lazy import LazyKind, Pending
from .ops import (
    record_activation,
    record_copy,
    record_dma,
    record_matmul,
    record_memset,
    record_tensor_reduce,
    record_tensor_scalar,
    record_tensor_tensor,
    staged_in_sbuf,
)
from .record import current, fail
from .rng import RULES as RNG_RULES
from .select import RULES as SELECT_RULES
from .select import as_lazy
from .tensor import Tensor, View, as_view
from .top8 import RULES as TOP8_RULES
from .transpose import (
    dma_transpose_result,
    transpose_result,
    write_dma_transpose,
    write_transpose,
)
from .types import BUFFERS, to_dtype
from .vector import (
    bn_aggr_result,
    bn_stats_result,
    iota_result,
    scan_result,
    write_iota,
    write_reciprocal,
    write_scalar_tensor_tensor,
    write_scan,
    write_stats,
)

__all__ = ["LAZY", "RECORDING", "LazyRule", "materialize", "write"]


class LazyRule(NamedTuple):
    """``result``: the fresh tile (not yet added to the recording) a used result lands in;
    ``write``: record the result into a view, adding when ``accumulate``."""

    result: Callable[[Pending], Tensor]
    write: Callable[[Pending, View, bool | None], None]


def _dtype(p: Pending, src: View) -> Any:
    d = p.args.get("dtype")
    return to_dtype(d) if d is not None else src.dtype


def _same_shape(key: str) -> Callable[[Pending], Tensor]:
    """A result shaped as its argument ``key``, in SBUF, in the asked dtype or its own."""

    def result(p: Pending) -> Tensor:
        src = as_view(p.args[key])
        return Tensor(src.shape, _dtype(p, src), BUFFERS["sbuf"], p.where)

    return result


def _matmul_result(p: Pending) -> Tensor:
    stat, mov = as_view(p.args["stationary"]), as_view(p.args["moving"])
    return Tensor((stat.shape[-1], mov.shape[-1]), to_dtype("float32"), BUFFERS["psum"],
                  p.where)


def _reduce_result(p: Pending) -> Tensor:
    """The kept axes of each partition: the reduced ones as 1 (keepdims) or dropped
    ([P] when every free axis is reduced)."""
    from .reduce import as_column, reduce_shape, reduced_axes

    src = as_column(as_view(p.args["src"]))
    axes = reduced_axes(p.args.get("axis"), len(src.shape), "tensor_reduce", p.where)
    shape = reduce_shape(src.shape, axes, p.args.get("keepdims", True))
    return Tensor(shape, _dtype(p, src), BUFFERS["sbuf"], p.where)


def _write_load(p: Pending, dst: View, acc: bool | None) -> None:
    record_dma(dst, as_view(p.args["src"]), p.where)


def _write_matmul(p: Pending, dst: View, acc: bool | None) -> None:
    a = p.args
    pos = a.get("tile_position", ())
    stat, mov = (_to_sbuf(as_view(a[k]), pos, p.where) for k in ("stationary", "moving"))
    record_matmul(dst, stat, mov, acc, pos, a.get("tile_size", ()), a.get("perf_mode"),
                  p.where, a.get("transpose", False), implicit=acc is True)


def _to_sbuf(v: View, pos: tuple[int, ...], where: tuple[str, int]) -> View:
    """An older-API matmul operand (``nisa.nc_matmul(stationary, moving)``, ``nl.matmul``)
    that lies in PSUM, staged into a fresh SBUF tile by a recorded Vector engine
    tensor_copy (timed like any copy), the one the compiler must insert: "The nc_matmul
    instruction must read inputs from SBUF" (nki.isa.nc_matmul), while a Tensor Engine
    nc_transpose "must ... write the transposed result to PSUM" (nki.isa.nc_transpose,
    NKI docs 2.21-2.26), and flash attention backward (nki-samples) feeds one to the other.
    Which engine the compiler uses for that copy is not documented (unsure): the Vector
    engine, nisa.tensor_copy's default. The current API's ``nc_matmul(dst, stationary,
    moving)`` is the instruction itself and keeps refusing a PSUM operand."""
    if v.buffer.name != "psum":
        return v
    if v.outside is not None:
        v.outside.check(where)
    # at the row a tile_position reads it from (as for a lazy operand, nki/isa.py)
    return staged_in_sbuf(v, where, "matmul_stage", int(pos[0]) if pos else None)


def _write_copy(p: Pending, dst: View, acc: bool | None) -> None:
    record_copy(dst, as_view(p.args["src"]), p.args.get("engine"), p.where)


def _write_tt(p: Pending, dst: View, acc: bool | None) -> None:
    a = p.args
    record_tensor_tensor(dst, as_view(a["a"]), as_view(a["b"]), a["op"], a.get("engine"),
                         p.where)


def _write_act(p: Pending, dst: View, acc: bool | None) -> None:
    a = p.args
    record_activation(dst, as_view(a["src"]), a["op"], a.get("scale", 1.0), p.where,
                      a.get("bias"), a.get("reduce_op"), a.get("reduce_res"))


def _write_ts(p: Pending, dst: View, acc: bool | None) -> None:
    a = p.args
    record_tensor_scalar(dst, as_view(a["src"]), a["op0"], a["operand0"],
                         a.get("reverse0", False), a.get("op1"), a.get("operand1"),
                         a.get("reverse1", False), a.get("engine"), p.where,
                         a.get("reduce_op"), a.get("reduce_res"))


def _loop_reduce_result(p: Pending) -> Tensor:
    raise fail("nl.loop_reduce reduces into the tile its result is assigned to (t[...] = "
               "nl.loop_reduce(x, op, ...)): t = t op x; a result used any other way has no "
               "tile to reduce into", p.where)


def _write_loop_reduce(p: Pending, dst: View, acc: bool | None) -> None:
    """dst = dst op x, one tensor_tensor (nki/language.py loop_reduce)."""
    record_tensor_tensor(dst, dst, as_view(p.args["src"]), p.args["op"], None, p.where)


def _write_reduce(p: Pending, dst: View, acc: bool | None) -> None:
    a = p.args
    record_tensor_reduce(dst, as_view(a["src"]), a["op"], a.get("axis"),
                         a.get("negate", False), a.get("engine"), p.where)


LAZY: dict[LazyKind, LazyRule] = {
    LazyKind.LOAD: LazyRule(_same_shape("src"), _write_load),
    LazyKind.MATMUL: LazyRule(_matmul_result, _write_matmul),
    LazyKind.COPY: LazyRule(_same_shape("src"), _write_copy),
    LazyKind.TENSOR_TENSOR: LazyRule(_same_shape("a"), _write_tt),
    LazyKind.TENSOR_SCALAR: LazyRule(_same_shape("src"), _write_ts),
    LazyKind.TENSOR_REDUCE: LazyRule(_reduce_result, _write_reduce),
    LazyKind.ACTIVATION: LazyRule(_same_shape("src"), _write_act),
    LazyKind.TRANSPOSE: LazyRule(transpose_result, write_transpose),
    LazyKind.DMA_TRANSPOSE: LazyRule(dma_transpose_result, write_dma_transpose),
    LazyKind.BN_STATS: LazyRule(bn_stats_result, write_stats),
    LazyKind.BN_AGGR: LazyRule(bn_aggr_result, write_stats),
    LazyKind.IOTA: LazyRule(iota_result, write_iota),
    LazyKind.RECIPROCAL: LazyRule(_same_shape("src"), write_reciprocal),
    LazyKind.TENSOR_TENSOR_SCAN: LazyRule(scan_result, write_scan),
    # the older API's result: data's shape, in dtype or data's (nki.isa.scalar_tensor_tensor)
    LazyKind.SCALAR_TENSOR_TENSOR: LazyRule(_same_shape("data"), write_scalar_tensor_tensor),
    LazyKind.LOOP_REDUCE: LazyRule(_loop_reduce_result, _write_loop_reduce),
    # issue 19, second part: each family's rules (nki/select.py, top8.py, gather.py, rng.py)
    **{k: LazyRule(*as_lazy(*v)) for k, v in {**SELECT_RULES, **TOP8_RULES, **GATHER_RULES,
                                              **RNG_RULES}.items()},
}
assert set(LAZY) == set(LazyKind), "every lazy kind has its rule"


def materialize(p: Pending) -> Tensor:
    """The fresh tile ``p`` lands in, written (``p.materialize()`` keeps it)."""
    t = LAZY[p.kind].result(p)
    if p.args.get("p_base"):  # placed where an older-API matmul's tile_position reads it
        t.at_partition(p.args["p_base"])
    current().add_tensor(t)
    p.result = t
    write(p, t.full, False)
    return t


def write(p: Pending, dst: View, accumulate: bool | None) -> None:
    """Record ``p`` into ``dst``, under the mask= of the call that made it (nki/mask.py;
    None too: a result written while another call's mask applies keeps its own)."""
    from .mask import applying

    with applying(p.args.get("mask"), p.kind.value, p.where):
        LAZY[p.kind].write(p, dst, accumulate)


class _Recording:
    """The :class:`~systolic.nki.record.Recording` of the model's recording functions."""

    dma = staticmethod(record_dma)
    copy = staticmethod(record_copy)
    tensor_tensor = staticmethod(record_tensor_tensor)
    memset = staticmethod(record_memset)
    materialize = staticmethod(materialize)
    write = staticmethod(write)


RECORDING = _Recording()
