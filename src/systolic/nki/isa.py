"""``nki.isa`` (``nisa``): one function per NKI instruction, both API generations.

Current API: ``nc_matmul(dst, stationary, moving, accumulate=None, tile_position=(),
tile_size=(), perf_mode=...)``, ``dma_copy(dst, src)``, ``tensor_copy(dst, src)``,
``tensor_tensor(dst, data1, data2, op)``, ``memset(dst, value)``, ``activation(dst, op,
data)``. Older API: the same names returning a new tile (``nc_matmul(stationary, moving)``).
Every call checks the rules the NKI docs and the hardware state, and records one operation
at the kernel's line; nothing is computed here.
"""

from __future__ import annotations

import enum
from typing import Any

from ..isa import AluOp, Engine
from .calls import current_api, named, need, no_extra
from .index import check_mask, reduce_axis
from .lazy import LazyKind
from .mask import applying

# the Tensor Engine entry points live in nki/matmul_isa.py; nki.isa is their public name
from .matmul_isa import matmul_perf_mode, nc_matmul, nc_matmul_mx, quantize_mx
from .ops import (
    _alu_of,
    record_activation,
    record_copy,
    record_dma,
    record_memset,
    record_tensor_reduce,
    record_tensor_scalar,
    record_tensor_tensor,
)
from .record import current, fail, here
from .tensor import Pending, Tensor, View, as_view
from .types import BUFFERS, Buffer, fill_value, to_dtype

__all__ = ["activation", "activation_reduce", "dma_copy", "engine", "matmul_perf_mode",
           "memset", "nc_matmul", "nc_matmul_mx", "oob_mode", "quantize_mx", "reduce_cmd",
           "tensor_copy", "tensor_reduce", "tensor_scalar", "tensor_scalar_reduce",
           "tensor_tensor"]

class engine:
    """``nisa.engine``: which engine runs an instruction (``unknown`` lets us choose)."""

    tensor = Engine.TENSOR
    vector = Engine.VECTOR
    scalar = Engine.SCALAR
    gpsimd = Engine.GPSIMD
    unknown = None


# the older API's names
vector_engine, scalar_engine, gpsimd_engine = Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD
tensor_engine = Engine.TENSOR


class dge_mode:
    """``nisa.dge_mode``: which descriptor generator a DMA uses; no difference to the values,
    and the model times every DMA by the same rule (timing/dma.py)."""

    none = "none"
    swdge = "swdge"
    hwdge = "hwdge"
    unknown = "unknown"


# -- the public functions ------------------------------------------------------------------
class oob_mode:
    """``nisa.oob_mode``: what an indirect DMA (``x[idx_tile, ...]``) does with an index
    outside its tensor when it runs (NKI docs, nki.isa.dma_copy): ``error`` (the default)
    fails, ``skip`` leaves that row out. A DMA with no tile of indices is bounds-checked
    when it is recorded."""

    error = "error"
    skip = "skip"


def dma_copy(dst: Any = None, src: Any = None, **kw: Any) -> None:
    """``dma_copy(dst, src, dst_rmw_op=None, oob_mode=oob_mode.error, dge_mode=...)``: the
    descriptor generator (``dge_mode``) makes no difference to the values or the model's
    time; ``dst_rmw_op`` (np.add only, NKI docs) and ``oob_mode`` act on an indirect DMA."""
    where = here()
    if dst is None or src is None:
        raise fail("dma_copy needs dst= and src=", where)
    if not kw:  # the common call: no options to read (100,000 of them in a big kernel)
        if current().mask is None:  # and no mask around it: nothing to apply
            record_dma(as_view(dst), as_view(src), where)
            return
        with applying(None, "dma_copy", where):
            record_dma(as_view(dst), as_view(src), where)
        return
    skip = dma_oob_mode(kw.pop("oob_mode", None), "dma_copy", where)
    rmw = kw.pop("dst_rmw_op", None)
    if rmw is not None and _alu_of(rmw) is not AluOp.ADD:
        raise fail(f"dma_copy dst_rmw_op={rmw!r}: only np.add (nl.add) is supported (NKI "
                   f"docs)", where)
    with applying(check_mask(kw.pop("mask", None), "dma_copy", where), "dma_copy", where):
        record_dma(as_view(dst), as_view(src), where, skip_oob=skip,
                   accumulate=rmw is not None)


def dma_oob_mode(mode: object, what: str, where: tuple[str, int]) -> bool:
    """Whether ``oob_mode`` skips out-of-range indices (None and ``error``: no)."""
    if mode not in (None, oob_mode.error, oob_mode.skip):
        raise fail(f"{what} oob_mode={mode!r} is oob_mode.error or oob_mode.skip", where)
    return mode == oob_mode.skip


def tensor_copy(*args: Any, **kw: Any) -> Pending | None:
    """Current API ``tensor_copy(dst, src, engine=, dtype=)``; older ``tensor_copy(src,
    dtype=, engine=)`` returns a new tile."""
    where = here()
    kw.pop("name", None)
    m = check_mask(kw.pop("mask", None), "tensor_copy", where)
    eng = kw.pop("engine", None)
    if len(args) == 2 or "dst" in kw:
        vals = named(args, kw, ("dst", "src"), "tensor_copy")
        kw.pop("dtype", None)  # the current API casts to dst's dtype
        no_extra(kw, "tensor_copy", where)
        need(vals, ("dst", "src"), "tensor_copy", where)
        with applying(m, "tensor_copy", where):
            record_copy(as_view(vals["dst"]), as_view(vals["src"]), eng, where)
        return None
    if not args and "src" not in kw:
        raise fail("tensor_copy: missing argument(s) src", where)
    src = args[0] if args else kw.pop("src")
    dtype = kw.pop("dtype", None)
    no_extra(kw, "tensor_copy", where)
    return Pending(LazyKind.COPY, where, src=src, dtype=dtype, engine=eng, mask=m)


def tensor_tensor(*args: Any, **kw: Any) -> Pending | None:
    where = here()
    kw.pop("name", None)
    m = check_mask(kw.pop("mask", None), "tensor_tensor", where)
    eng = kw.pop("engine", None)
    if len(args) == 4 or "dst" in kw:
        names: tuple[str, ...] = ("dst", "data1", "data2", "op")
        vals = named(args, kw, names, "tensor_tensor")
        kw.pop("dtype", None)
        no_extra(kw, "tensor_tensor", where)
        need(vals, names, "tensor_tensor", where)
        _tt_op(vals["op"], where)
        with applying(m, "tensor_tensor", where):
            record_tensor_tensor(as_view(vals["dst"]), as_view(vals["data1"]),
                                 as_view(vals["data2"]), vals["op"], eng, where)
        return None
    names = ("data1", "data2", "op")
    vals = named(args, kw, names, "tensor_tensor")
    dtype = kw.pop("dtype", None)
    no_extra(kw, "tensor_tensor", where)
    need(vals, names, "tensor_tensor", where)
    _tt_op(vals["op"], where)
    return Pending(LazyKind.TENSOR_TENSOR, where, a=vals["data1"], b=vals["data2"], op=vals["op"],
                   dtype=dtype, engine=eng, mask=m)


def _tt_op(op: Any, where: tuple[str, int]) -> None:
    """tensor_tensor's op: an ``nl`` operator (nl.add ...) or an ALU op's name."""
    from ..isa import AluOp

    if isinstance(op, str):
        try:
            AluOp(op)
        except ValueError:
            raise fail(f"tensor_tensor op {op!r} is not one of "
                       f"{', '.join(a.value for a in AluOp)}; pass nl.add, nl.multiply, "
                       f"...", where) from None
    elif getattr(op, "alu", None) is None:
        raise fail(f"tensor_tensor op {op!r} is not an elementwise operator this model "
                   f"implements; use nl.add, nl.subtract, nl.multiply, nl.maximum or "
                   f"nl.minimum", where)


def _memset_value(value: Any, dtype: Any, where: tuple[str, int]) -> float:
    from ..errors import SystolicError

    try:
        return fill_value(value, to_dtype(dtype))
    except SystolicError as exc:
        raise fail(f"memset value: {exc}", where) from None


def memset(*args: Any, **kw: Any) -> Tensor | None:
    """Current API ``memset(dst, value, engine=)``; older ``memset(shape, value, dtype)``."""
    where = here()
    kw.pop("name", None)
    eng = kw.pop("engine", None)
    m = check_mask(kw.pop("mask", None), "memset", where)
    if (args and isinstance(args[0], tuple | list)) or "shape" in kw:
        vals = named(args, kw, ("shape", "value", "dtype"), "memset")
        buf = kw.pop("buffer", BUFFERS["sbuf"])
        no_extra(kw, "memset", where)
        need(vals, ("shape", "value", "dtype"), "memset", where)
        if not isinstance(buf, Buffer) or not buf.on_chip:
            raise fail(f"memset buffer={buf!r}: a memset fills an nl.sbuf or nl.psum tile",
                       where)
        t = Tensor(tuple(vals["shape"]), to_dtype(vals["dtype"]), buf, where)
        value = _memset_value(vals["value"], t.dtype, where)
        current().add_tensor(t)
        with applying(m, "memset", where):
            record_memset(t.full, value, eng, where)
        return t
    vals = named(args, kw, ("dst", "value"), "memset")
    kw.pop("dtype", None)
    no_extra(kw, "memset", where)
    need(vals, ("dst", "value"), "memset", where)
    dst = as_view(vals["dst"])
    with applying(m, "memset", where):
        record_memset(dst, _memset_value(vals["value"], dst.dtype, where), eng, where)
    return None


class reduce_cmd:
    """``nisa.reduce_cmd``: the Scalar engine's accumulation registers. ``idle`` leaves
    them alone; ``reset_reduce`` reduces this instruction's results alone into
    ``reduce_res`` (what activation_reduce does); accumulating across instructions
    (``reset``, ``reduce``) is not modelled."""

    idle = "idle"
    reset = "reset"
    reduce = "reduce"
    reset_reduce = "reset_reduce"


def _no_mask(kw: dict[str, Any], what: str, where: tuple[str, int]) -> Any:
    return check_mask(kw.pop("mask", None), what, where)


def _activation_extras(kw: dict[str, Any], where: tuple[str, int], reduce: bool
                       ) -> dict[str, Any]:
    kw.pop("name", None)
    out = {"mask": _no_mask(kw, "activation", where),
           "scale": kw.pop("scale", 1.0), "bias": kw.pop("bias", None),
           "reduce_op": kw.pop("reduce_op", None), "reduce_res": kw.pop("reduce_res", None)}
    cmd = kw.pop("reduce_cmd", reduce_cmd.reset_reduce if reduce else reduce_cmd.idle)
    if cmd in (reduce_cmd.reset, reduce_cmd.reduce):
        raise fail(f"activation reduce_cmd={cmd}: accumulating across instructions is not "
                   f"modelled; use reduce_cmd.reset_reduce (one instruction's reduction)",
                   where)
    return out


def activation(*args: Any, **kw: Any) -> Pending | None:
    """Current API ``activation(dst, op, data, bias=None, scale=1.0, reduce_op=,
    reduce_res=, reduce_cmd=)``; older ``activation(op, data, ...)`` returns a new tile.
    out = op(data * scale + bias), scale a constant or a [P, 1] tile, bias a [P, 1] tile;
    with ``reduce_res`` each partition's results are also reduced into it."""
    return _activation(args, kw, reduce=False)


def activation_reduce(*args: Any, **kw: Any) -> Pending | None:
    """``activation`` plus the free-axis reduction into ``reduce_res`` (both APIs)."""
    return _activation(args, kw, reduce=True)


def _activation(args: tuple[Any, ...], kw: dict[str, Any], reduce: bool) -> Pending | None:
    where = here()
    extra = _activation_extras(kw, where, reduce)
    if reduce and extra["reduce_res"] is None:
        raise fail("activation_reduce needs reduce_res (a [P, 1] tile)", where)
    if (args and isinstance(args[0], Tensor | View)) or "dst" in kw:
        names: tuple[str, ...] = ("dst", "op", "data")
        vals = named(args, kw, names, "activation_reduce" if reduce else "activation")
        kw.pop("dtype", None)
        no_extra(kw, "activation", where)
        need(vals, names, "activation", where)
        with applying(extra["mask"], "activation", where):
            record_activation(as_view(vals["dst"]), as_view(vals["data"]), vals["op"],
                              extra["scale"], where, extra["bias"], extra["reduce_op"],
                              extra["reduce_res"])
        return None
    names = ("op", "data")
    vals = named(args, kw, names, "activation_reduce" if reduce else "activation")
    dtype = kw.pop("dtype", None)
    no_extra(kw, "activation", where)
    need(vals, names, "activation", where)
    return Pending(LazyKind.ACTIVATION, where, src=vals["data"], op=vals["op"], dtype=dtype,
                   **extra)


def tensor_scalar(*args: Any, **kw: Any) -> Pending | None:
    """Current API ``tensor_scalar(dst, data, op0, operand0, reverse0=False, op1=None,
    operand1=None, reverse1=False, engine=)``; older ``tensor_scalar(data, op0, operand0,
    ...)`` returns a new tile. (data op0 operand0) op1 operand1, each operand a constant or
    a [P, 1] tile."""
    where = here()
    kw.pop("name", None)
    eng = kw.pop("engine", None)
    m = check_mask(kw.pop("mask", None), "tensor_scalar", where)
    new_api = current_api(args, kw, 2, at=1)
    names: tuple[str, ...] = (("dst",) if new_api else ()) + (
        "data", "op0", "operand0", "reverse0", "op1", "operand1", "reverse1")
    vals = named(args, kw, names, "tensor_scalar")
    dtype = kw.pop("dtype", None)
    no_extra(kw, "tensor_scalar", where)
    need(vals, names[:4] if new_api else names[:3], "tensor_scalar", where)
    rev0, rev1 = bool(vals.get("reverse0", False)), bool(vals.get("reverse1", False))
    if new_api:
        with applying(m, "tensor_scalar", where):
            record_tensor_scalar(as_view(vals["dst"]), as_view(vals["data"]), vals["op0"],
                                 vals["operand0"], rev0, vals.get("op1"),
                                 vals.get("operand1"), rev1, eng, where)
        return None
    return Pending(LazyKind.TENSOR_SCALAR, where, src=vals["data"], dtype=dtype, engine=eng,
                   op0=vals["op0"], operand0=vals["operand0"], reverse0=rev0, op1=vals.get("op1"),
                   operand1=vals.get("operand1"), reverse1=rev1, mask=m)


def tensor_scalar_reduce(*args: Any, **kw: Any) -> Pending | None:
    """Older API ``tensor_scalar_reduce(data=, op0=, operand0=, reduce_op=, reduce_res=,
    reverse0=False, dtype=, mask=)`` returns the new tile data op0 operand0; current API
    ``tensor_scalar_reduce(dst, data, op0, operand0, reduce_op, reduce_res, reverse0=)``
    writes it into dst. Either way each partition's results are also reduced with
    reduce_op into ``reduce_res`` ([P, 1]) on the Vector engine (NKI docs,
    nki.isa.tensor_scalar_reduce)."""
    what = "tensor_scalar_reduce"
    where = here()
    kw.pop("name", None)
    m = check_mask(kw.pop("mask", None), what, where)
    if kw.pop("engine", None) not in (None, Engine.VECTOR):
        raise fail(f"{what} runs on the Vector engine (NKI docs)", where)
    cmd = kw.pop("reduce_cmd", None)
    if cmd not in (None, reduce_cmd.idle, reduce_cmd.reset_reduce):
        raise fail(f"{what} reduce_cmd={cmd}: accumulating across instructions is not "
                   f"modelled; use reduce_cmd.reset_reduce (one instruction's reduction)",
                   where)
    for opt, default in (("reduce_init", None), ("reduce_res_negate", False)):
        if kw.pop(opt, default) != default:
            raise fail(f"{what} {opt}= is not modelled", where)
    new_api = current_api(args, kw, 2)
    names: tuple[str, ...] = (("dst",) if new_api else ()) + (
        "data", "op0", "operand0", "reduce_op", "reduce_res", "reverse0")
    vals = named(args, kw, names, "tensor_scalar_reduce")
    dtype = kw.pop("dtype", None)
    no_extra(kw, what, where)
    need(vals, names[:-1], what, where)
    rev0 = bool(vals.get("reverse0", False))
    if new_api:
        with applying(m, what, where):
            record_tensor_scalar(as_view(vals["dst"]), as_view(vals["data"]), vals["op0"],
                                 vals["operand0"], rev0, None, None, False, None, where,
                                 vals["reduce_op"], vals["reduce_res"])
        return None
    return Pending(LazyKind.TENSOR_SCALAR, where, src=vals["data"], dtype=dtype, engine=None,
                   op0=vals["op0"], operand0=vals["operand0"], reverse0=rev0, op1=None,
                   operand1=None, reverse1=False, reduce_op=vals["reduce_op"],
                   reduce_res=vals["reduce_res"], mask=m)


def tensor_reduce(*args: Any, **kw: Any) -> Pending | None:
    """Current API ``tensor_reduce(dst, op, data, axis, negate=False, keepdims=False)``;
    older ``tensor_reduce(op, data, axis, negate=False, keepdims=False, dtype=)`` returns a
    new tile of one element per partition."""
    where = here()
    kw.pop("name", None)
    m = _no_mask(kw, "tensor_reduce", where)
    eng = kw.pop("engine", None)
    new_api = current_api(args, kw, 1)
    names: tuple[str, ...] = (("dst",) if new_api else ()) + ("op", "data", "axis",
                                                                   "negate", "keepdims")
    vals = named(args, kw, names, "tensor_reduce")
    dtype = kw.pop("dtype", None)
    no_extra(kw, "tensor_reduce", where)
    need(vals, names[:3] if new_api else names[:2], "tensor_reduce", where)
    reduce_axis(vals.get("axis"), "tensor_reduce", where)
    if new_api:
        with applying(m, "tensor_reduce", where):
            record_tensor_reduce(as_view(vals["dst"]), as_view(vals["data"]), vals["op"],
                                 vals.get("axis"), bool(vals.get("negate", False)), eng,
                                 where)
        return None
    return Pending(LazyKind.TENSOR_REDUCE, where, src=vals["data"], op=vals["op"],
                   axis=vals.get("axis"), negate=bool(vals.get("negate", False)), engine=eng,
                   dtype=dtype, keepdims=bool(vals.get("keepdims", False)), mask=m)


class nc_version(enum.IntEnum):  # NKI's own lower-case name
    """``nisa.nc_version`` (NKI docs): the NeuronCore version; gen2 Trn1/Inf2, gen3 Trn2,
    gen4 Trn3 (the Arch's ``generation``)."""

    gen2 = 2
    gen3 = 3
    gen4 = 4


def get_nc_version() -> nc_version:
    """``nisa.get_nc_version()``: "the nc_version of the current target context", here the
    Arch the kernel is recorded for (``platform_target`` / ``--arch``)."""
    return nc_version(current().arch.generation)


__all__ += ["get_nc_version", "nc_version"]


# -- the NKI breadth of issue 19, each family in its own module -----------------------------
from .transpose import dma_transpose, nc_transpose  # noqa: E402
from .vector import (  # noqa: E402
    bn_aggr,
    bn_stats,
    iota,
    reciprocal,
    scalar_tensor_tensor,
    tensor_tensor_scan,
)

__all__ += ["bn_aggr", "bn_stats", "dma_transpose", "iota", "nc_transpose", "reciprocal",
            "scalar_tensor_tensor", "tensor_tensor_scan"]


# -- issue 19, second part: selection, top-8, gather, random (each family its own module) --
from .gather import (  # noqa: E402
    local_gather,
    nc_stream_shuffle,
    sequence_bounds,
    tensor_copy_dynamic_dst,
    tensor_copy_dynamic_src,
    tensor_partition_reduce,
)
from .rng import dropout  # noqa: E402
from .select import (  # noqa: E402
    affine_select,
    range_select,
    select_reduce,
    tensor_copy_predicated,
)
from .top8 import max8, nc_find_index8, nc_match_replace8  # noqa: E402

__all__ += ["affine_select", "dropout", "local_gather", "max8", "nc_find_index8",
            "nc_match_replace8", "nc_stream_shuffle", "range_select", "select_reduce",
            "sequence_bounds", "tensor_copy_dynamic_dst", "tensor_copy_dynamic_src",
            "tensor_copy_predicated",
            "tensor_partition_reduce"]
