"""Transposes: ``nisa.nc_transpose`` (both API generations) and ``nl.transpose``.

A PF-transpose swaps the partition axis and the (flattened) free axis of a tile
(NKI docs, nki.isa.nc_transpose):

* on the **Tensor Engine** (up to 128 x 128) it is "a matrix multiplication between data as
  the stationary tensor and an identity matrix as the moving tensor", so it is recorded as
  the nc_matmul it is (LoadStationary + MatMul into PSUM, timed by the PE rules; the nc_matmul
  cost ``max(min(64, F), P)`` with N_moving = P is the transpose formula ``max(P, min(64,
  F))``). From NeuronCore-v3 the transpose mode writes a bf16/fp16 tile's own dtype into
  PSUM ("FP16/BF16 PSUM output for FP16/BF16 transpose", trainium2_arch.rst), as the model's
  matmul then does (nki/ops.py _psum_output); any other dst (fp8 data, NeuronCore-v2's fp32
  output, an SBUF dst of the older API) gets the fp32 result through an fp32 staging bank
  and a Vector copy. An fp32 tile goes through one fp32 pass on NeuronCore-v3 (nki/lower.py)
  and the model's two-pass fp32 matmul on v2;
* on the **Vector engine** (up to 32 x 32, SBUF or PSUM on either side) it is one
  :class:`~systolic.isa.instructions.Transpose`, ``max(MIN_II, N)`` cycles.

With no engine named the compiler chooses "based on the input shape"; the model takes the
Vector engine for tiles of at most 32 x 32 and the Tensor Engine otherwise (unsure: the
compiler's rule is not published). The identity the Tensor Engine multiplies by is made
once per kernel and dtype, 128 x 128 in SBUF, by three engine instructions: an iota of
``f - p`` (GpSimd), its square (Scalar) and ``max(1 - x, 0)`` (Vector). How the Neuron
compiler makes its identity is not published (unsure); these cost about 0.5 us once.
"""

from __future__ import annotations

import weakref
from typing import Any

from ..dtypes import get_format
from ..isa import ActivationFunc, AluOp, Engine
from .calls import current_api, named, need, no_extra
from .lazy import LazyKind, NlOp
from .mask import TRANSPOSED, applying, whole_only
from .opkind import IotaArgs, VectorTransposeArgs
from .ops import (
    _add,
    record_activation,
    record_copy,
    record_dma,
    record_matmul,
    record_tensor_scalar,
)
from .record import Recorder, current, fail, here
from .tensor import Axis, Pending, Tensor, View, as_view, same_shape
from .types import BUFFERS, to_dtype

__all__ = ["VECTOR_MAX", "dma_transpose", "dma_transpose_result", "identity", "nc_transpose",
           "record_transpose", "transpose_pending", "transpose_result", "write_dma_transpose",
           "write_transpose"]

# nki.isa.nc_transpose: "Vector Engine can handle shape (32, 32) or smaller"; the Tensor
# Engine "(128, 128) or smaller"
VECTOR_MAX = 32
_PE_MAX = 128

_IDENTITY: weakref.WeakKeyDictionary[Recorder, dict[str, Tensor]] = weakref.WeakKeyDictionary()
_SQUARE = NlOp("square", None, ActivationFunc.SQUARE)
_SUBTRACT = NlOp("subtract", AluOp.SUBTRACT, None)
_MAXIMUM = NlOp("maximum", AluOp.MAXIMUM, None)


def _constant(shape: tuple[int, int], dtype: str, where: tuple[str, int]) -> Tensor:
    t = Tensor(shape, to_dtype(dtype), BUFFERS["sbuf"], where, "identity")
    current().add_tensor(t)
    t.loop = None  # a kernel-wide constant: not a per-iteration tile of the loop it is in
    return t


def identity(fmt: str, where: tuple[str, int]) -> Tensor:
    """The 128 x 128 identity in ``fmt`` in SBUF, made at its first use in the kernel."""
    rec = current()
    made = _IDENTITY.setdefault(rec, {})
    if fmt in made:
        return made[fmt]
    n = _PE_MAX
    idx = _constant((n, n), "float32", where)
    _add(IotaArgs(0, -1, 1), idx.full, (), where)  # f - p, on GpSimd
    sq = _constant((n, n), "float32", where)
    record_activation(sq.full, idx.full, _SQUARE, 1.0, where)
    eye = _constant((n, n), fmt, where)
    # 1 - (f - p)^2 is 1 on the diagonal and <= 0 elsewhere (integers): clamp at 0
    record_tensor_scalar(eye.full, sq.full, _SUBTRACT, 1.0, True, _MAXIMUM, 0.0, False, None,
                         where)
    made[fmt] = eye
    return eye


def _flat(v: View, what: str, where: tuple[str, int]) -> View:
    """``v`` as [P, F]: its free axes collapsed (NKI: "implicitly collapses all free axes
    into one axis"), partition axis first."""
    if not v.axes or not v.axes[0].part:
        raise fail(f"{what}: the data tile needs its partition dimension first, not shape "
                   f"{list(v.shape)}", where)
    if len(v.axes) == 2:
        return v
    p = v.partitions
    free = v.size // p
    try:
        return v.reshape((p, free))
    except Exception as exc:  # KernelError of a strided view, raised at the model's frame
        raise fail(f"{what} of a strided {list(v.shape)} view is not modelled; copy it to "
                   f"a contiguous tile first", where) from exc


def _engine(eng: object, p: int, f: int, where: tuple[str, int]) -> Engine:
    if eng is None:
        return Engine.VECTOR if p <= VECTOR_MAX and f <= VECTOR_MAX else Engine.TENSOR
    if eng in (Engine.VECTOR, Engine.TENSOR):
        return eng  # type: ignore[return-value]
    raise fail(f"nc_transpose runs on nisa.tensor_engine or nisa.vector_engine, not {eng!r}",
               where)


_VT = VectorTransposeArgs(Engine.VECTOR)


def _pe_tile(p0: int, extent: int, sizes: tuple[int, ...]) -> int | None:
    """The smallest PE tile size holding ``extent`` rows from ``p0`` at a multiple of it."""
    for s in sorted(sizes):
        if s >= extent and p0 % s == 0 and p0 + s <= _PE_MAX:
            return s
    return None


def record_transpose(dst: View, data: View, eng: object, where: tuple[str, int], *,
                     cast: bool = False) -> None:
    """dst[F, P] = data[P, F]; ``cast`` allows dst a dtype of its own (the older API's
    ``dtype=``: "an additional nki.isa.cast instruction will be inserted")."""
    src = _flat(data, "nc_transpose", where)
    p, f = src.partitions, src.size // src.partitions
    e = _engine(eng, p, f, where)
    if dst.size != p * f or dst.partitions != f:
        raise fail(f"nc_transpose of a [{p}, {f}] tile writes [{f}, {p}]; dst is "
                   f"{list(dst.shape)}", where)
    if dst.dtype != src.dtype and not cast:
        raise fail(f"nc_transpose keeps the dtype (NKI docs: dst has the data's dtype); data "
                   f"is {src.dtype}, dst {dst.dtype}", where)
    for v, role in ((src, "data"), (dst, "dst")):
        if not v.buffer.on_chip:
            raise fail(f"nc_transpose {role} is in {v.buffer.name}; it must be an SBUF or "
                       f"PSUM tile", where)
    out = _flat(dst, "nc_transpose dst", where)
    if e is Engine.VECTOR:
        if p > VECTOR_MAX or f > VECTOR_MAX:
            raise fail(f"nc_transpose on the Vector engine takes at most 32 x 32; the tile is "
                       f"[{p}, {f}]: use nisa.tensor_engine", where)
        if out.dtype != src.dtype:
            tmp = Tensor((f, p), src.dtype, BUFFERS["sbuf"], where, "transpose")
            current().add_tensor(tmp)
            _add(_VT, tmp.full, (src,), where)
            record_copy(out, tmp.full, None, where)
            return
        _add(_VT, out, (src,), where)
        return
    if not cast and out.buffer.name != "psum":
        raise fail(f"nc_transpose on the Tensor Engine writes PSUM (NKI docs); dst is in "
                   f"{out.buffer.name}: give a PSUM dst, or the Vector engine for <= 32 x 32",
                   where)
    _pe_transpose(out, src, p, f, where)


def _pe_transpose(out: View, src: View, p: int, f: int, where: tuple[str, int]) -> None:
    arch = current().arch
    fmt = src.dtype.fmt
    floats = [x for x in arch.formats if get_format(x).kind == "float" and x != "fp32r"]
    if src.buffer.name != "sbuf":
        raise fail(f"nc_transpose on the Tensor Engine reads SBUF; data is in "
                   f"{src.buffer.name}", where)
    if fmt not in floats:
        raise fail(f"nc_transpose of {src.dtype} on the Tensor Engine is not modelled (the PE "
                   f"multiplies {', '.join(floats)}); use the Vector engine for <= 32 x 32",
                   where)
    if p > _PE_MAX or f > _PE_MAX:
        raise fail(f"nc_transpose on the Tensor Engine takes at most 128 x 128; the tile is "
                   f"[{p}, {f}]", where)
    row = _pe_tile(src.p0, p, arch.tile_sizes)
    eye = identity(fmt, where).full[src.p0:src.p0 + p, src.p0:src.p0 + p]
    direct = out.buffer.name == "psum" and (out.dtype.fmt == "fp32" or (
        arch.generation >= 3 and out.dtype == src.dtype and fmt in ("bf16", "fp16")))
    if direct:
        target = out
    else:
        tmp = Tensor((f, p), to_dtype("float32"), BUFFERS["psum"], where, "transpose_fp32")
        current().add_tensor(tmp)
        target = tmp.full
    col = _pe_tile(target.p0, f, arch.tile_sizes)
    if row is None or col is None:
        raise fail(f"nc_transpose data at partition {src.p0} (or dst at {target.p0}) is not "
                   f"at a PE tile position (a multiple of its tile size)", where)
    tiled = row != _PE_MAX or col != _PE_MAX
    pos = (src.p0, target.p0) if tiled else ()
    size = (row, col) if tiled else ()
    record_matmul(target, src, eye, False, pos, size, None, where, transpose=True)
    if not direct:
        record_copy(out, target, None, where)


# -- lazy results: nisa.nc_transpose(data) of the older API, nl.transpose(x) ----------------
def transpose_pending(data: Any, eng: object, dtype: Any, buffer: str | None,
                      where: tuple[str, int], mask: Any = None) -> Pending:
    """A lazy transpose; ``buffer`` "sbuf" makes a used result land in SBUF (nl.transpose),
    None in the engine's own output (PSUM for the Tensor Engine, SBUF for Vector).
    ``mask``: the call's, all or nothing (mask.whole_only), applied where it is written
    (results.write)."""
    return Pending(LazyKind.TRANSPOSE, where, src=data, engine=eng, dtype=dtype, buffer=buffer,
                   mask=mask)


def transpose_result(pend: Pending) -> Tensor:
    a = pend.args
    src = as_view(a["src"])
    p = src.partitions
    f = src.size // max(1, p)
    dtype = to_dtype(a["dtype"]) if a.get("dtype") is not None else src.dtype
    eng = _engine(a.get("engine"), p, f, pend.where)
    buf = a.get("buffer") or ("psum" if eng is Engine.TENSOR else "sbuf")
    return Tensor((f, p), dtype, BUFFERS[buf], pend.where)


def write_transpose(pend: Pending, dst: View, accumulate: bool | None) -> None:
    a = pend.args
    record_transpose(dst, as_view(a["src"]), a.get("engine"), pend.where, cast=True)


# -- nisa.dma_transpose: a transpose on the DMA engine -------------------------------------
def record_dma_transpose(dst: View, src: View, where: tuple[str, int],
                         what: str = "dma_transpose") -> None:
    """dst[F, P] = src[P, F] for a 2-D device-memory ``src``: one DMA whose source pattern
    walks src column by column (partition f of dst reads element f of every row, step 1;
    its free axis steps a whole row), as the DMA engine's descriptors can. src.shape[-1]
    becomes the partition dimension, at most 128. The nki.isa docs at aws-neuron-sdk
    7c165a3e name no dtype limit, so any dtype is taken (unsure: later NKI releases may
    limit the hardware DGE transpose to 2-byte dtypes); a dst of another dtype (``dtype=``)
    gets the transposed bytes through an SBUF staging tile and a Vector copy, as a casting
    dma_copy does. The hardware DGE transpose's own speed is not published (unsure): it is
    timed as a DMA of one-element runs. ``what``: the NKI call, for messages."""
    if src.outside is not None:  # past its tensor, or x[idx_tile, ...]: the view is rebuilt
        src.outside.check(where)  # below without it, so its refusal is raised here
    if src.buffer.on_chip:
        raise fail(f"{what} from {src.buffer.name} is not modelled (only device memory to "
                   f"SBUF); use nisa.nc_transpose for an on-chip tile", where)
    if len(src.axes) != 2:
        raise fail(f"{what} of a {len(src.axes)}-d tensor is not modelled (only 2-d, "
                   f"permutation [1, 0])", where)
    (rs, p), (cs, f) = ((a.stride, a.num) for a in src.axes)
    if f > _PE_MAX:
        raise fail(f"{what}: src.shape[-1] is {f}; it becomes the partition dimension, at "
                   f"most 128 (NKI docs)", where)
    if dst.buffer.name != "sbuf" or not same_shape(tuple(dst.shape), (f, p)):
        raise fail(f"{what} of a [{p}, {f}] tensor writes an SBUF [{f}, {p}] tile; dst is "
                   f"{list(dst.shape)} in {dst.buffer.name}", where)
    cols = View(src.tensor, src.offset, 0, (Axis(cs, f), Axis(rs, p)), src.dt)
    if dst.dtype != src.dtype:
        tmp = Tensor((f, p), src.dtype, BUFFERS["sbuf"], where, "transpose_cast")
        current().add_tensor(tmp)
        record_dma(tmp.full, cols, where)
        record_copy(dst, tmp.full, None, where)
        return
    record_dma(dst, cols, where)


def dma_transpose_result(pend: Pending) -> Tensor:
    src = as_view(pend.args["src"])
    shape = tuple(src.shape)[::-1] if len(src.shape) == 2 else tuple(src.shape)
    dtype = pend.args.get("dtype")
    return Tensor(shape, to_dtype(dtype) if dtype is not None else src.dtype, BUFFERS["sbuf"],
                  pend.where)


def write_dma_transpose(pend: Pending, dst: View, accumulate: bool | None) -> None:
    what = pend.args.get("what", "dma_transpose")
    if accumulate:
        raise fail(f"{what} cannot accumulate (+=); assign its result", pend.where)
    record_dma_transpose(dst, as_view(pend.args["src"]), pend.where, what)


# -- the nki.isa entry points (nki/isa.py re-exports them) ----------------------------------
def nc_transpose(*args: Any, **kw: Any) -> Pending | None:
    """Current API ``nc_transpose(dst, data, engine=)``; older ``nc_transpose(data,
    engine=, dtype=)`` returns the transposed tile (PSUM from the Tensor Engine, SBUF from
    Vector). dst[F, P] = data[P, F] (nki/transpose.py)."""
    where = here()
    kw.pop("name", None)
    m = whole_only(kw.pop("mask", None), "nc_transpose", where, TRANSPOSED)
    eng = kw.pop("engine", None)
    if current_api(args, kw, 2):
        vals = named(args, kw, ("dst", "data"), "nc_transpose")
        no_extra(kw, "nc_transpose", where)
        need(vals, ("dst", "data"), "nc_transpose", where)
        with applying(m, "nc_transpose", where):  # False: no instruction
            record_transpose(as_view(vals["dst"]), as_view(vals["data"]), eng, where)
        return None
    data = args[0] if args else kw.pop("data", None)
    dtype = kw.pop("dtype", None)
    no_extra(kw, "nc_transpose", where)
    if data is None:
        raise fail("nc_transpose: missing argument data", where)
    return transpose_pending(data, eng, dtype, None, where, m)


def dma_transpose(*args: Any, **kw: Any) -> Pending | None:
    """Current API ``dma_transpose(dst, src)``; older ``dma_transpose(src)`` returns the
    transposed SBUF tile (lazy). 2-d only (nki/transpose.py)."""
    where = here()
    kw.pop("name", None)
    kw.pop("dge_mode", None)  # which descriptor generator: no difference in the values
    kw.pop("oob_mode", None)  # no indirection, so nothing can be out of bounds
    for opt in ("axes", "priority"):
        if kw.pop(opt, None) is not None:
            raise fail(f"dma_transpose {opt}= is not modelled", where)
    if current_api(args, kw, 2):
        vals = named(args, kw, ("dst", "src"), "dma_transpose")
        no_extra(kw, "dma_transpose", where)
        need(vals, ("dst", "src"), "dma_transpose", where)
        record_dma_transpose(as_view(vals["dst"]), as_view(vals["src"]), where)
        return None
    src = args[0] if args else kw.pop("src", None)
    dtype = kw.pop("dtype", None)
    no_extra(kw, "dma_transpose", where)
    if src is None:
        raise fail("dma_transpose: missing argument src", where)
    return Pending(LazyKind.DMA_TRANSPOSE, where, src=src, dtype=dtype)
