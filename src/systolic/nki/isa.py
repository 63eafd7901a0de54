"""``nki.isa`` (``nisa``): one function per NKI instruction, both API generations.

Current API: ``nc_matmul(dst, stationary, moving, accumulate=None, tile_position=(),
tile_size=(), perf_mode=...)``, ``dma_copy(dst, src)``, ``tensor_copy(dst, src)``,
``tensor_tensor(dst, data1, data2, op)``, ``memset(dst, value)``, ``activation(dst, op,
data)``. Older API: the same names returning a new tile (``nc_matmul(stationary, moving)``).
Every call checks the rules the NKI docs and the hardware state, and records one operation
at the kernel's line; nothing is computed here.
"""

from __future__ import annotations

from typing import Any

from ..dtypes import get_format
from ..isa import ActivationFunc, AluOp, Engine, PerfMode
from ..memory import psum_bank  # noqa: F401  (documents the bank rule checked below)
from .record import HOOKS, Op, current, fail, here
from .tensor import Pending, Tensor, View, as_view, same_shape
from .types import BUFFERS, to_dtype

__all__ = ["activation", "dma_copy", "engine", "matmul_perf_mode", "memset", "nc_matmul",
           "nc_matmul_mx", "quantize_mx", "tensor_copy", "tensor_tensor"]

_FP32 = frozenset({"fp32", "tf32", "fp32r"})


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


class matmul_perf_mode:
    none = "none"
    double_row = "double_row"


class _Op:
    """``nl.add`` and friends: usable as ``op=`` and callable as a function (older API)."""

    def __init__(self, name: str, alu: AluOp | None, act: ActivationFunc | None) -> None:
        self.name, self.alu, self.act = name, alu, act

    def __repr__(self) -> str:
        return f"nl.{self.name}"


def _alu(op: object) -> AluOp:
    alu = getattr(op, "alu", None)
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
    if a.size != b.size or not same_shape(a.shape, b.shape):
        raise fail(f"{what}: shapes {list(a.shape)} and {list(b.shape)} do not match", where)
    if a.partitions != b.partitions and a.buffer.on_chip and b.buffer.on_chip:
        raise fail(f"{what}: {a.partitions} partitions against {b.partitions}; on-chip "
                   f"copies keep the partition dimension", where)


def _add(kind: str, dst: View, srcs: tuple[View, ...], where: tuple[str, int],
         **attrs: Any) -> None:
    current().add(Op(kind, dst, srcs, where, attrs))


# -- recording, shared by both API generations -------------------------------------------
def record_dma(dst: View, src: View, where: tuple[str, int]) -> None:
    if src.dtype != dst.dtype:
        _casting_dma(dst, src, where)
        return
    if src.buffer.name == "psum" or dst.buffer.name == "psum":
        raise fail("dma_copy to or from PSUM is not modelled; copy PSUM to SBUF with "
                   "nisa.tensor_copy", where)
    _match(dst, src, "dma_copy", where)
    _add("dma", dst, (src,), where)


def _casting_dma(dst: View, src: View, where: tuple[str, int]) -> None:
    """NKI's dma_copy casts when the dtypes differ (NKI docs, nki.isa.dma_copy: "A cast
    will happen if the src and dst have different dtype"). The model's DmaCopy moves bytes,
    so the cast is a Vector-engine copy through an SBUF staging tile on the SBUF side."""
    if src.buffer.on_chip:
        tmp = Tensor(src.shape, dst.dtype, BUFFERS["sbuf"], where, "dma_cast")
        current().tensors.append(tmp)
        record_copy(tmp.full, src, None, where)
        record_dma(dst, tmp.full, where)
    elif dst.buffer.on_chip:
        tmp = Tensor(dst.shape, src.dtype, BUFFERS["sbuf"], where, "dma_cast")
        current().tensors.append(tmp)
        record_dma(tmp.full, src, where)
        record_copy(dst, tmp.full, None, where)
    else:
        raise fail(f"dma_copy from HBM to HBM cannot cast {src.dtype} -> {dst.dtype} in this "
                   f"model; stage it through an SBUF tile", where)


def record_copy(dst: View, src: View, eng: object, where: tuple[str, int]) -> None:
    e = _engine(eng, Engine.VECTOR)
    _on_chip(src, "src", "tensor_copy", where)
    _on_chip(dst, "dst", "tensor_copy", where)
    _gpsimd(e, (dst, src), "tensor_copy", where)
    _match(dst, src, "tensor_copy", where)
    _add("copy", dst, (src,), where, engine=e)


def record_tensor_tensor(dst: View, a: View, b: View, op: object, eng: object,
                         where: tuple[str, int]) -> None:
    alu = AluOp(op) if isinstance(op, str) else _alu(op)
    e = _engine(eng, Engine.VECTOR)
    for v, role in ((dst, "dst"), (a, "data1"), (b, "data2")):
        _on_chip(v, role, "tensor_tensor", where)
    _gpsimd(e, (dst, a, b), "tensor_tensor", where)
    _match(dst, a, "tensor_tensor", where)
    _match(dst, b, "tensor_tensor", where)
    _add("tt", dst, (a, b), where, engine=e, op=alu)


def record_memset(dst: View, value: float, eng: object, where: tuple[str, int]) -> None:
    e = _engine(eng, Engine.VECTOR)
    _on_chip(dst, "dst", "memset", where)
    _gpsimd(e, (dst,), "memset", where)
    _add("memset", dst, (), where, engine=e, value=float(value))


def record_activation(dst: View, src: View, op: object, scale: float,
                      where: tuple[str, int]) -> None:
    func = getattr(op, "act", None)
    if func is None:
        raise fail(f"activation {op!r} is not modelled; this model implements nl.copy and "
                   f"nl.identity", where)
    _on_chip(src, "data", "activation", where)
    _on_chip(dst, "dst", "activation", where)
    _match(dst, src, "activation", where)
    if not isinstance(scale, int | float):
        raise fail("activation scale must be a number (a tile of scales is not modelled)",
                   where)
    _add("act", dst, (src,), where, engine=Engine.SCALAR, func=func, scale=float(scale))


def _tile(values: tuple[int, int] | tuple[()] | list[int], default: tuple[int, int],
          what: str, where: tuple[str, int]) -> tuple[int, int]:
    if not values:
        return default
    if len(values) != 2:
        raise fail(f"{what} is a pair (row, column)", where)
    return int(values[0]), int(values[1])


def record_matmul(dst: View, stat: View, mov: View, accumulate: bool | None,
                  tile_position: Any, tile_size: Any, perf_mode: Any,
                  where: tuple[str, int]) -> None:
    arch = current().arch
    for v, role, buf in ((stat, "stationary", "sbuf"), (mov, "moving", "sbuf"),
                         (dst, "dst", "psum")):
        if v.buffer.name != buf:
            raise fail(f"nc_matmul {role} is in {v.buffer.name}; it must be in "
                       f"{buf.upper()}", where)
    sf, mf = stat.dtype.fmt, mov.dtype.fmt
    floats = [f for f in arch.formats if get_format(f).kind == "float" and f != "fp32r"]
    for f in (sf, mf):
        if f not in floats:
            raise fail(f"nc_matmul does not take {f} operands on {arch.name} (NKI docs: "
                       f"float8, bfloat16, float16, tfloat32, float32); use one of "
                       f"{', '.join(floats)}", where)
    if (sf in _FP32) != (mf in _FP32):
        raise fail(f"fp32 operands pair only with fp32: stationary {stat.dtype}, moving "
                   f"{mov.dtype}; cast both with nisa.tensor_copy", where)
    if dst.dtype.fmt != "fp32":
        raise fail(f"nc_matmul writes fp32 into PSUM; dst is {dst.dtype}: allocate it as "
                   f"nl.float32", where)
    perf = PerfMode.parse(getattr(perf_mode, "value", perf_mode) or "none")
    fold = perf.k_fold
    if perf is not PerfMode.NONE and not arch.supports_perf_mode(perf.spelling):
        raise fail(f"perf_mode {perf.spelling} needs NeuronCore-v3 or newer; {arch.name} is "
                   f"gen{arch.generation}: drop perf_mode", where)
    if perf not in (PerfMode.NONE, PerfMode.DOUBLE_ROW):
        raise fail(f"perf_mode {perf.spelling} is not modelled; use none or double_row", where)
    if fold == 2 and not (sf.startswith("fp8") and mf.startswith("fp8")):
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
    lo = dst.offset * 4
    hi = lo + ((dst.axes[1].num - 1) * dst.axes[1].stride + 1) * 4
    if lo // arch.psum_bank_bytes != (hi - 1) // arch.psum_bank_bytes:
        raise fail(f"nc_matmul dst spans two PSUM banks (bytes {lo}..{hi} of the tile); an "
                   f"accumulation stays within one {arch.psum_bank_bytes}-byte bank", where)
    size = _tile(tile_size, (arch.rows, arch.cols), "tile_size", where)
    pos = _tile(tile_position, (0, 0), "tile_position", where)
    allowed = (64, 128) if arch.generation == 2 else (32, 64, 128)
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
    _add("mm", dst, (stat, mov), where, accumulate=accumulate, perf=perf, row=pos[0],
         col=pos[1])


# -- lazy results of the older API ---------------------------------------------------------
def new_result(p: Pending) -> Tensor:
    """The fresh tile a lazy result lands in when it is used rather than assigned."""
    a = p.args
    rec = current()
    if p.kind == "mm":
        stat, mov = as_view(a["stationary"]), as_view(a["moving"])
        shape: tuple[int, ...] = (stat.shape[-1], mov.shape[-1])
        t = Tensor(shape, to_dtype("float32"), BUFFERS["psum"], p.where)
    else:
        src = as_view(a["src"] if "src" in a else a["a"])
        dtype = to_dtype(a["dtype"]) if a.get("dtype") is not None else src.dtype
        t = Tensor(src.shape, dtype, BUFFERS["sbuf"], p.where)
    rec.tensors.append(t)
    return t


def materialize(p: Pending) -> Tensor:
    t = new_result(p)
    p.result = t
    write_pending(p, t.full, False)
    return t


def write_pending(p: Pending, dst: View, accumulate: bool | None) -> None:
    a, w = p.args, p.where
    if p.kind == "load":
        record_dma(dst, as_view(a["src"]), w)
    elif p.kind == "mm":
        record_matmul(dst, as_view(a["stationary"]), as_view(a["moving"]), accumulate,
                      (), (), a.get("perf_mode"), w)
    elif p.kind == "copy":
        record_copy(dst, as_view(a["src"]), a.get("engine"), w)
    elif p.kind == "tt":
        record_tensor_tensor(dst, as_view(a["a"]), as_view(a["b"]), a["op"], a.get("engine"),
                             w)
    elif p.kind == "act":
        record_activation(dst, as_view(a["src"]), a["op"], a.get("scale", 1.0), w)
    else:  # pragma: no cover - the kinds above are the only ones made
        raise fail(f"internal: unknown lazy result {p.kind}", w)


# -- the public functions ------------------------------------------------------------------
def dma_copy(dst: Any = None, src: Any = None, **kw: Any) -> None:
    where = here()
    if dst is None or src is None:
        raise fail("dma_copy needs dst= and src=", where)
    record_dma(as_view(dst), as_view(src), where)


def nc_matmul(*args: Any, **kw: Any) -> Pending | None:
    """Current API: ``nc_matmul(dst, stationary, moving, ...)``; older API:
    ``nc_matmul(stationary, moving)`` returns a PSUM tile (lazy, for ``+=``)."""
    where = here()
    for flag in ("is_stationary_onezero", "is_moving_onezero", "is_transpose"):
        if kw.pop(flag, False):
            raise fail(f"nc_matmul {flag}=True is not modelled", where)
    kw.pop("name", None)
    kw.pop("mask", None)
    if len(args) == 3 or "dst" in kw:
        names: tuple[str, ...] = ("dst", "stationary", "moving")
        vals = dict(zip(names, args, strict=False))
        vals.update({k: kw.pop(k) for k in names if k in kw})
        record_matmul(as_view(vals["dst"]), as_view(vals["stationary"]),
                      as_view(vals["moving"]), kw.pop("accumulate", None),
                      kw.pop("tile_position", ()), kw.pop("tile_size", ()),
                      kw.pop("perf_mode", None), where)
        _no_extra(kw, "nc_matmul", where)
        return None
    names = ("stationary", "moving")
    vals = dict(zip(names, args, strict=False))
    vals.update({k: kw.pop(k) for k in names if k in kw})
    if kw.get("tile_position") or kw.get("tile_size"):
        raise fail("tile_position/tile_size need the current API: nc_matmul(dst, "
                   "stationary, moving, ...)", where)
    kw.pop("tile_position", None)
    kw.pop("tile_size", None)
    perf = kw.pop("perf_mode", None)
    _no_extra(kw, "nc_matmul", where)
    return Pending("mm", where, stationary=vals["stationary"], moving=vals["moving"],
                   perf_mode=perf)


def _no_extra(kw: dict[str, Any], what: str, where: tuple[str, int]) -> None:
    if kw:
        raise fail(f"{what}: argument(s) {', '.join(sorted(kw))} not modelled", where)


def tensor_copy(*args: Any, **kw: Any) -> Pending | None:
    """Current API ``tensor_copy(dst, src, engine=, dtype=)``; older ``tensor_copy(src,
    dtype=, engine=)`` returns a new tile."""
    where = here()
    kw.pop("name", None)
    kw.pop("mask", None)
    eng = kw.pop("engine", None)
    if len(args) == 2 or "dst" in kw:
        vals = dict(zip(("dst", "src"), args, strict=False))
        vals.update({k: kw.pop(k) for k in ("dst", "src") if k in kw})
        kw.pop("dtype", None)  # the current API casts to dst's dtype
        _no_extra(kw, "tensor_copy", where)
        record_copy(as_view(vals["dst"]), as_view(vals["src"]), eng, where)
        return None
    src = args[0] if args else kw.pop("src")
    dtype = kw.pop("dtype", None)
    _no_extra(kw, "tensor_copy", where)
    return Pending("copy", where, src=src, dtype=dtype, engine=eng)


def tensor_tensor(*args: Any, **kw: Any) -> Pending | None:
    where = here()
    kw.pop("name", None)
    kw.pop("mask", None)
    eng = kw.pop("engine", None)
    if len(args) == 4 or "dst" in kw:
        names: tuple[str, ...] = ("dst", "data1", "data2", "op")
        vals = dict(zip(names, args, strict=False))
        vals.update({k: kw.pop(k) for k in names if k in kw})
        kw.pop("dtype", None)
        _no_extra(kw, "tensor_tensor", where)
        record_tensor_tensor(as_view(vals["dst"]), as_view(vals["data1"]),
                             as_view(vals["data2"]), vals["op"], eng, where)
        return None
    names = ("data1", "data2", "op")
    vals = dict(zip(names, args, strict=False))
    vals.update({k: kw.pop(k) for k in names if k in kw})
    dtype = kw.pop("dtype", None)
    _no_extra(kw, "tensor_tensor", where)
    return Pending("tt", where, a=vals["data1"], b=vals["data2"], op=vals["op"],
                   dtype=dtype, engine=eng)


def memset(*args: Any, **kw: Any) -> Tensor | None:
    """Current API ``memset(dst, value, engine=)``; older ``memset(shape, value, dtype)``."""
    where = here()
    kw.pop("name", None)
    eng = kw.pop("engine", None)
    if (args and isinstance(args[0], tuple | list)) or "shape" in kw:
        shape = args[0] if args else kw.pop("shape")
        value = args[1] if len(args) > 1 else kw.pop("value")
        dtype = args[2] if len(args) > 2 else kw.pop("dtype")
        buf = kw.pop("buffer", BUFFERS["sbuf"])
        t = Tensor(tuple(shape), to_dtype(dtype), buf, where)
        current().tensors.append(t)
        record_memset(t.full, value, eng, where)
        return t
    dst = args[0] if args else kw.pop("dst")
    value = args[1] if len(args) > 1 else kw.pop("value")
    kw.pop("dtype", None)
    _no_extra(kw, "memset", where)
    record_memset(as_view(dst), value, eng, where)
    return None


def activation(*args: Any, **kw: Any) -> Pending | None:
    """Current API ``activation(dst, op, data, bias=None, scale=1.0)``; older
    ``activation(op, data, ...)`` returns a new tile. Only copy/identity are modelled."""
    where = here()
    kw.pop("name", None)
    if kw.pop("bias", None) is not None:
        raise fail("activation bias is not modelled; add it with nisa.tensor_tensor", where)
    scale = kw.pop("scale", 1.0)
    if (args and isinstance(args[0], Tensor | View)) or "dst" in kw:
        names: tuple[str, ...] = ("dst", "op", "data")
        vals = dict(zip(names, args, strict=False))
        vals.update({k: kw.pop(k) for k in names if k in kw})
        kw.pop("dtype", None)
        _no_extra(kw, "activation", where)
        record_activation(as_view(vals["dst"]), as_view(vals["data"]), vals["op"], scale,
                          where)
        return None
    names = ("op", "data")
    vals = dict(zip(names, args, strict=False))
    vals.update({k: kw.pop(k) for k in names if k in kw})
    dtype = kw.pop("dtype", None)
    _no_extra(kw, "activation", where)
    return Pending("act", where, src=vals["data"], op=vals["op"], scale=scale, dtype=dtype)


def _mx_gate(what: str) -> None:
    arch = current().arch
    if arch.generation < 4:
        raise fail(f"{what} needs NeuronCore-v4 (trn3); {arch.name} is gen{arch.generation}: "
                   f"run with arch trn3", here())


def nc_matmul_mx(dst: Any = None, stationary: Any = None, moving: Any = None,
                 stationary_scale: Any = None, moving_scale: Any = None,
                 tile_position: Any = None, tile_size: Any = None, accumulate: Any = None,
                 name: str = "") -> None:
    """gen4 MX matmul: dst[M, N] (+)= dequantized stationary[P, M] x4 . moving[P, N] x4,
    K = 4P, one E8M0 scale per 8 partitions x 4 elements, kept in the block's quadrant
    (NKI docs, nki.isa.nc_matmul_mx; seed 000's LdWeightMx + MatmultMx)."""
    where = here()
    _mx_gate("nc_matmul_mx")
    arch = current().arch
    if tile_position or tile_size:
        raise fail("nc_matmul_mx row tiling is not modelled; use whole 128-row tiles", where)
    d, s, m = as_view(dst), as_view(stationary), as_view(moving)
    ss, ms = as_view(stationary_scale), as_view(moving_scale)
    for v, role in ((s, "stationary"), (m, "moving")):
        if v.buffer.name != "sbuf" or get_format(v.dtype.fmt).kind != "mx" or (
                v.dtype.fmt not in arch.mx_formats):
            raise fail(f"nc_matmul_mx {role} must be an SBUF tile of an _x4 MX dtype "
                       f"(nl.float8_e4m3fn_x4, float8_e5m2_x4, float4_e2m1fn_x4); got "
                       f"{v.dtype} in {v.buffer.name}", where)
        if len(v.axes) != 2 or not v.axes[0].part:
            raise fail(f"nc_matmul_mx {role} is [P, F] with the partition dimension first; "
                       f"got {list(v.shape)}", where)
        if v.partitions % 32 or v.p0 % 32:
            raise fail(f"nc_matmul_mx {role} spans partitions {v.p0}..{v.p0 + v.partitions - 1}"
                       f"; MX tiles start at a quadrant and cover whole quadrants of 32", where)
    for v, role in ((ss, "stationary_scale"), (ms, "moving_scale")):
        if v.buffer.name != "sbuf" or v.dtype.itemsize != 1:
            raise fail(f"nc_matmul_mx {role} must be a one-byte (uint8 / float8_e8m0fnu) SBUF "
                       f"tile; got {v.dtype} in {v.buffer.name}", where)
    if s.partitions != m.partitions:
        raise fail(f"stationary and moving contract over {s.partitions} and {m.partitions} "
                   f"partitions", where)
    mm, n = s.shape[-1], m.shape[-1]
    if mm > arch.cols or n > arch.psum_bank_bytes // 4:
        raise fail(f"nc_matmul_mx tile [{mm}, {n}] exceeds [128, 512]", where)
    if d.buffer.name != "psum" or d.dtype.fmt not in ("fp32", "bf16"):
        raise fail(f"nc_matmul_mx dst must be a float32 or bfloat16 PSUM tile; got {d.dtype} "
                   f"in {d.buffer.name}", where)
    if d.partitions != mm or d.shape[-1] != n or d.p0 != 0:
        raise fail(f"nc_matmul_mx dst has shape {list(d.shape)}; the product is [{mm}, {n}] "
                   f"from partition 0", where)
    srcs = (s, m, ss, ms)
    if d.dtype.fmt == "fp32":
        _add("mmx", d, srcs, where, accumulate=accumulate)
        return
    if accumulate:
        raise fail("accumulating nc_matmul_mx into a bfloat16 PSUM tile is not modelled; "
                   "accumulate in a float32 PSUM tile", where)
    # bf16 PSUM: the fp32 accumulation lands in a staging bank, then rounds into dst (the
    # model's PSUM holds fp32 matmul results only)
    tmp = Tensor((mm, n), to_dtype("float32"), BUFFERS["psum"], where, "mx_fp32")
    current().tensors.append(tmp)
    _add("mmx", tmp.full, srcs, where, accumulate=None)
    record_copy(d, tmp.full, None, where)


def quantize_mx(*args: Any, **kw: Any) -> None:
    _mx_gate("quantize_mx")
    raise fail("quantize_mx is not modelled by this front end yet")


HOOKS.update(tensor_tensor=record_tensor_tensor, materialize=materialize,
             write_pending=write_pending, memset=record_memset, dma=record_dma,
             copy=record_copy)
