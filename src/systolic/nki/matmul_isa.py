"""``nki.isa``'s Tensor Engine entry points: ``nc_matmul`` (both API generations) and the MX
pair ``nc_matmul_mx`` / ``quantize_mx``. Split out of nki/isa.py (which re-exports them);
each checks the rules the NKI docs and the hardware state and records one operation at the
kernel's line (nki/ops.py ``record_matmul``; the MX ops directly); nothing is computed here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..dtypes import get_format
from .calls import named, need, no_extra
from .index import check_mask
from .lazy import LazyKind
from .mask import applying
from .opkind import MatmulMxArgs, QuantizeMxArgs
from .ops import _add, record_copy, record_matmul
from .record import current, fail, here
from .tensor import Pending, Tensor, as_view
from .types import BUFFERS, to_dtype

__all__ = ["matmul_perf_mode", "nc_matmul", "nc_matmul_mx", "quantize_mx"]


class matmul_perf_mode:
    none = "none"
    double_row = "double_row"


def nc_matmul(*args: Any, **kw: Any) -> Pending | None:
    """Current API: ``nc_matmul(dst, stationary, moving, ...)``; older API:
    ``nc_matmul(stationary, moving)`` returns a PSUM tile (lazy, for ``+=``)."""
    where = here()
    # nearly every call (32,768 in the full-size tiled kernel): the three tiles by name, no
    # option and no mask around it, so what the general path below reads is all defaults
    # (tests/test_nki_speed.py holds the two to the same record_matmul call)
    if (len(kw) == 3 and not args and "dst" in kw and "stationary" in kw and "moving" in kw
            and current().mask is None):
        record_matmul(as_view(kw["dst"]), as_view(kw["stationary"]), as_view(kw["moving"]),
                      None, (), (), None, where, False)
        return None
    for flag in ("is_stationary_onezero", "is_moving_onezero"):
        # a hint that the operand holds only 0 and 1 ("setting this field explicitly could
        # lead to 2x better performance if ... in float32; the field has no impact for
        # non-float32", nki.isa.nc_matmul, aws-neuron-sdk 7c165a3e): the same matmul. The
        # model computes the ordinary matmul whatever the operand holds and gives the hint
        # no timing effect (unsure: "could" names no condition nor cost; docs/DESIGN-NOTES)
        if kw.pop(flag, False) not in (True, False):
            raise fail(f"nc_matmul {flag} is True or False", where)
    transpose = kw.pop("is_transpose", False)
    if transpose not in (True, False):
        raise fail(f"nc_matmul is_transpose is True or False, not {transpose!r}", where)
    kw.pop("name", None)
    m = check_mask(kw.pop("mask", None), "nc_matmul", where)
    if len(args) == 3 or "dst" in kw:
        names: tuple[str, ...] = ("dst", "stationary", "moving")
        vals = named(args, kw, names, "nc_matmul")
        need(vals, names, "nc_matmul", where)
        pos = _pair(kw.pop("tile_position", ()), "tile_position", where)
        size = _pair(kw.pop("tile_size", ()), "tile_size", where)
        perf = _perf_mode(kw.pop("perf_mode", None), where)
        acc = kw.pop("accumulate", None)
        no_extra(kw, "nc_matmul", where)
        # is_transpose: the PE transpose, the same matmul in transpose mode (nki/lower.py)
        with applying(m, "nc_matmul", where):  # no mask: a shared no-op
            record_matmul(as_view(vals["dst"]), as_view(vals["stationary"]),
                          as_view(vals["moving"]), acc, pos, size, perf, where, transpose)
        return None
    names = ("stationary", "moving")
    vals = named(args, kw, names, "nc_matmul")
    need(vals, names, "nc_matmul", where)
    pos = _pair(kw.pop("tile_position", ()), "tile_position", where)
    size = _pair(kw.pop("tile_size", ()), "tile_size", where)
    perf = _perf_mode(kw.pop("perf_mode", None), where)
    no_extra(kw, "nc_matmul", where)
    if pos:  # the compiler puts operands the kernel has not used yet where row r reads
        for k in names:
            x = vals[k]
            if isinstance(x, Pending) and x.result is None:
                x.args["p_base"] = pos[0]
    return Pending(LazyKind.MATMUL, where, stationary=vals["stationary"], moving=vals["moving"],
                   perf_mode=perf, transpose=bool(transpose), tile_position=pos,
                   tile_size=size, p_base=pos[1] if pos else 0, mask=m)


def _pair(value: Any, name: str, where: tuple[str, int]) -> tuple[int, ...]:
    """nc_matmul's tile_position / tile_size: () (the whole array) or (row, column) ints."""
    if value is None or (isinstance(value, tuple | list) and not value):
        return ()
    if not isinstance(value, tuple | list) or len(value) != 2 or not all(
            isinstance(v, int | np.integer) and not isinstance(v, bool) for v in value):
        raise fail(f"nc_matmul {name}={value!r}: it is a pair of whole numbers (row, "
                   f"column), or () for the whole 128 x 128 array", where)
    return int(value[0]), int(value[1])


def _perf_mode(value: Any, where: tuple[str, int]) -> Any:
    """nc_matmul's perf_mode: None, a name or an ``nisa.matmul_perf_mode`` member."""
    name = getattr(value, "value", value)
    if name is None:
        return None
    from ..errors import SystolicError
    from ..isa import PerfMode

    if name == "double_row_gen3":  # the older API's name of DoubleRow on NeuronCore-v3
        return "double_row"
    if isinstance(name, str):
        try:
            PerfMode.parse(name)
        except SystolicError as exc:
            raise fail(f"nc_matmul perf_mode: {exc}", where) from None
        return value
    raise fail(f"nc_matmul perf_mode={value!r}: use nisa.matmul_perf_mode.none or "
               f"nisa.matmul_perf_mode.double_row (a mode's name, not a "
               f"{type(value).__name__})", where)


def _mx_gate(what: str) -> None:
    arch = current().arch
    if not arch.mx_formats:  # the generation table: the MX pair exists on gen4 alone
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
        _add(MatmulMxArgs(accumulate), d, srcs, where)
        return
    if accumulate:
        raise fail("accumulating nc_matmul_mx into a bfloat16 PSUM tile is not modelled; "
                   "accumulate in a float32 PSUM tile", where)
    # bf16 PSUM: the fp32 accumulation lands in a staging bank, then rounds into dst (the
    # model's PSUM holds fp32 matmul results only)
    tmp = Tensor((mm, n), to_dtype("float32"), BUFFERS["psum"], where, "mx_fp32")
    current().add_tensor(tmp)
    _add(MatmulMxArgs(None), tmp.full, srcs, where)
    record_copy(d, tmp.full, None, where)


def quantize_mx(dst: Any = None, src: Any = None, dst_scale: Any = None,
                name: str = "") -> None:
    """gen4: quantize bf16/fp16 ``src`` [P, F] into ``dst`` [P, F/4] (float8_e4m3fn_x4 or
    float8_e5m2_x4) and ``dst_scale`` (uint8 / float8_e8m0fnu; scales of block g at row
    32*(g//4) + g%4), on the Vector engine (NKI docs, nki.isa.quantize_mx)."""
    where = here()
    _mx_gate("quantize_mx")
    d, s_, sc = as_view(dst), as_view(src), as_view(dst_scale)
    for v, role in ((d, "dst"), (s_, "src"), (sc, "dst_scale")):
        if v.buffer.name != "sbuf":
            raise fail(f"quantize_mx {role} must be in SBUF, not {v.buffer.name}", where)
    if s_.dtype.fmt not in ("bf16", "fp16"):
        raise fail(f"quantize_mx src must be bfloat16 or float16, not {s_.dtype}", where)
    if d.dtype.fmt not in ("mxfp8_e4m3", "mxfp8_e5m2"):
        raise fail(f"quantize_mx dst must be float8_e4m3fn_x4 or float8_e5m2_x4, not "
                   f"{d.dtype}", where)
    if sc.dtype.itemsize != 1:
        raise fail(f"quantize_mx dst_scale must be uint8 or float8_e8m0fnu, not {sc.dtype}",
                   where)
    p, f = s_.partitions, s_.size // max(1, s_.partitions)
    if p % 32 or p > 128 or f % 4 or s_.p0 % 32:
        raise fail(f"quantize_mx src [{p}, {f}] needs whole quadrants of 32 partitions (at "
                   f"most 128) and a free size that is a multiple of 4", where)
    if d.partitions != p or d.size != p * f // 4:
        raise fail(f"quantize_mx dst has shape {list(d.shape)}; it must be [{p}, {f // 4}]",
                   where)
    _add(QuantizeMxArgs(), d, (s_,), where, (sc,))
