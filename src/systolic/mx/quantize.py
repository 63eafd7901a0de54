"""OCP Microscaling (MX) quantization: E8M0 block scales, quantize and dequantize.

An MX block is 32 elements sharing one E8M0 scale X = 2**e (bias 127; 0xFF is NaN; no zero,
no infinity; OCP MX v1.0 section 5, E8M0 in 5.4). A value is X * P_i. Element formats:
fp8 e4m3fn, fp8 e5m2 and fp4 e2m1, whose emax (exponent of the largest power of two) is 8,
15 and 2.

Scale rules (``rule=``), exponents read from the float32 bits, never from a float log2
(floor(log2(x)) in float32 is off by one just below powers of two; FACTS "Numerics"):

* ``"ocp"``: e = floor(log2(amax)) - emax, the OCP MX v1.0 conversion (Algorithm 1). The
  block maximum may land above the element maximum and saturate (e4m3fn: up to 511.9 -> 448).
* ``"trainium"``: e = floor(log2(amax)) - (emax - 1), one step larger: v4's quantize_mx
  (FACTS "Hardware"), so the block maximum never saturates.

Elements are RNE(V_i / X) clamped to +-max of the element format (Algorithm 1 line 4). V_i / X
is one float32 multiplication by the exact power of two 2**-e (the same single rounding as
``np.ldexp``) followed by one ml_dtypes cast: no double rounding. Clamping comes *before* the
cast because ml_dtypes turns e4m3fn overflow into NaN (FACTS "Numerics").

Special cases, chosen here and tested in tests/test_mx.py:

* NaN or +-inf anywhere in a block: amax is not finite, so the shared exponent lies outside
  E8M0's range and X is NaN (code 0xFF). The spec's special-value rules make every element
  of a block with X = NaN a NaN, whatever P_i holds; P_i = V_i / NaN is written as the
  element format's NaN code (e4m3fn 0x7F, e5m2 0x7E) and as +0 for e2m1, which has no NaN.
  Infinities are therefore never stored as elements, not even in e5m2. This is also what the
  reference code by the spec's authors does (microsoft/microxcaling, mx_ops._quantize_mx and
  tests/test_corners_mx.py: "All other values in a shared vector with a NaN/Inf become NaN").
  Finite values are never NaN: the clamp keeps e4m3fn overflow at 448.
* Shared exponent out of range: above 127 -> NaN (impossible for finite float32 input: at
  most 127 - 1); below -127 -> -127, so tiny blocks flush towards zero in the element format
  (as microxcaling does: "Underflows are set to -127").
* All-zero block: floor(log2(0)) = -inf, clamped to -127: scale 2**-127 (code 0x00) under
  both rules, which is exactly what v4's quantize_mx gives (FACTS "Hardware").

Input is read as float32 first (ml_dtypes converts float64 through float32; FACTS).

Where the blocks sit in the engine's SBUF (x4 packing, the K layout, scale partitions) is
:mod:`systolic.mx.layout`'s; this module knows only blocks of 32 along an axis.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import ml_dtypes
import numpy as np

from ..dtypes import Format, e8m0_from_exponent, get_format
from ..errors import FormatError, ShapeError

__all__ = [
    "BLOCK",
    "NAN_EXPONENT",
    "KOrder",
    "MXTensor",
    "ScaleRule",
    "as_float32",
    "block_scale_exponent",
    "dequantize",
    "element_values",
    "mx_formats",
    "quantize",
    "scale_values",
]

ScaleRule = Literal["ocp", "trainium"]
KOrder = Literal["contiguous", "strided"]

BLOCK = 32  # elements per scale (OCP MX v1.0: k = 32 for every concrete format)
NAN_EXPONENT = 128  # a shared exponent E8M0 cannot hold: encodes as NaN (0xFF)
_CHUNK = 1 << 20  # values per pass: keeps temporaries in cache (4 MiB of float32)


@dataclass(frozen=True, slots=True, eq=False)  # eq on arrays would be ambiguous
class MXTensor:
    """MX-quantized values: element codes plus one E8M0 scale code per block.

    ``elements`` has the input's shape in the element format's ml_dtypes storage type (fp4
    one per byte). ``scales`` is uint8 E8M0 codes, the input's shape with ``axis`` divided
    by 32. ``order`` is ``"contiguous"`` (block b = indices 32b..32b+31 along ``axis``) or
    ``"strided"`` (the vendor layout's blocks, :func:`systolic.mx.layout.hw_blocks`; axis 0
    only), in which case ``block_of[k]`` is the block of index k along axis 0.
    """

    elements: np.ndarray
    scales: np.ndarray
    fmt: str
    rule: ScaleRule
    axis: int
    order: KOrder = "contiguous"
    block_of: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.elements.shape)

    @property
    def element_format(self) -> Format:
        return mx_formats(self.fmt)[1]


def mx_formats(fmt: str | Format) -> tuple[Format, Format]:
    """(MX format row, element format row) for an MX name or an element format name."""
    f = get_format(fmt)
    if f.kind == "mx" and f.element is not None:
        return f, get_format(f.element)
    for name in ("mxfp8_e4m3", "mxfp8_e5m2", "mxfp4"):
        mx = get_format(name)
        if mx.element == f.name:
            return mx, f
    raise FormatError(
        f"{f.name} is not an MX format; use mxfp8_e4m3, mxfp8_e5m2 or mxfp4 "
        "(or their element formats fp8_e4m3fn, fp8_e5m2, fp4_e2m1)"
    )


def _check_rule(rule: str) -> None:
    if rule not in ("ocp", "trainium"):
        raise FormatError(f"unknown MX scale rule {rule!r}; use 'ocp' or 'trainium'")


def as_float32(x: object) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype.kind in "OSUMm" or (arr.dtype.kind == "V" and arr.dtype.names is not None):
        raise FormatError(f"cannot quantize values of dtype {arr.dtype}; pass numbers")
    return arr.astype(np.float32, copy=False)


def _floor_log2_bits(abits: np.ndarray) -> np.ndarray:
    """floor(log2(a)) from the bits of |a| (uint32): exact for subnormals; 0 -> -1000."""
    a = abits.view(np.float32)
    _, e = np.frexp(a)  # a = m * 2**e, m in [0.5, 1): reads the exponent field, no log2
    return np.where(abits == 0, np.int32(-1000), e.astype(np.int32) - 1)


def _exponent_from_bits(abits: np.ndarray, emax: int, rule: ScaleRule) -> np.ndarray:
    step = emax if rule == "ocp" else emax - 1
    e = _floor_log2_bits(abits) - np.int32(step)
    e = np.maximum(e, np.int32(-127))  # underflow -> 2**-127 (microxcaling, zero blocks)
    # amax inf or NaN (bits >= 0x7F800000): no E8M0 exponent, X is NaN (MX v1.0 5.4).
    return np.where(abits >= np.uint32(0x7F800000), np.int32(NAN_EXPONENT), e)


def block_scale_exponent(amax: object, fmt: str | Format, rule: ScaleRule = "ocp") -> np.ndarray:
    """The shared exponent e (X = 2**e) of blocks whose largest magnitude is ``amax``.

    int32, in [-127, 127]; a NaN or infinite amax gives 128 (:data:`NAN_EXPONENT`), which E8M0
    encodes as NaN. Raises :class:`FormatError` for a non-MX format or an unknown rule.
    """
    _check_rule(rule)
    _, elem = mx_formats(fmt)
    assert elem.emax is not None
    a = np.abs(as_float32(amax))
    return _exponent_from_bits(np.ascontiguousarray(a).view(np.uint32), elem.emax, rule)


def _nan_code(elem: Format) -> np.ndarray:
    if elem.nan == "none":  # e2m1: no NaN; the block's 0xFF scale carries it
        return np.zeros((), np.uint8).view(elem.storage)
    return np.float32(np.nan).astype(elem.storage)


def _quantize_rows(xb: np.ndarray, elem: Format, rule: ScaleRule,
                   codes: np.ndarray, scales: np.ndarray) -> None:
    """Quantize float32 ``xb`` [rows, 32, post] into ``codes`` (same shape) and ``scales``."""
    assert elem.emax is not None
    mx = np.float32(elem.max)
    rows = max(1, _CHUNK // (BLOCK * xb.shape[2]))
    buf = np.empty((min(rows, xb.shape[0]), *xb.shape[1:]), np.float32)
    for s in range(0, xb.shape[0], rows):
        x = xb[s:s + rows]
        abits = (x.view(np.uint32) & np.uint32(0x7FFFFFFF)).max(axis=1)
        e = _exponent_from_bits(abits, elem.emax, rule)
        nan = e == NAN_EXPONENT
        # 2**-e is a normal float32 for e in [-127, 126], so x * 2**-e is exact unless the
        # quotient is a float32 subnormal, far below every element format's smallest value.
        inv = np.ldexp(np.float32(1.0), -np.minimum(e, 126)).astype(np.float32)
        inv[nan] = np.nan
        y = np.multiply(x, inv[:, None, :], out=buf[: x.shape[0]])
        np.clip(y, -mx, mx, out=y)  # saturate before the cast: keeps NaN, e4m3fn stays finite
        c = codes[s:s + rows]
        np.copyto(c, y, casting="unsafe")  # the ml_dtypes cast (RNE), straight into place
        if nan.any():
            c[np.broadcast_to(nan[:, None, :], c.shape)] = _nan_code(elem)
        scales[s:s + rows] = e8m0_from_exponent(e).view(np.uint8)


def _split(shape: tuple[int, ...], axis: int) -> tuple[int, int, int]:
    pre = int(np.prod(shape[:axis], dtype=np.int64))
    post = int(np.prod(shape[axis + 1:], dtype=np.int64))
    return pre, shape[axis] // BLOCK, post


def quantize(x: object, fmt: str | Format, *, rule: ScaleRule = "ocp", axis: int = -1) -> MXTensor:
    """MX-quantize ``x`` in blocks of 32 consecutive elements along ``axis``.

    ``fmt`` is ``"mxfp8_e4m3"``, ``"mxfp8_e5m2"``, ``"mxfp4"`` or an element format name.
    Raises :class:`ShapeError` if the length along ``axis`` is not a multiple of 32 and
    :class:`FormatError` for other formats, unknown rules or non-numeric input.
    """
    _check_rule(rule)
    mxf, elem = mx_formats(fmt)
    x32 = np.ascontiguousarray(as_float32(x))
    if x32.ndim == 0:
        raise ShapeError("MX quantizes blocks of 32 values; pass an array, not a scalar")
    ax = axis % x32.ndim if -x32.ndim <= axis < x32.ndim else None
    if ax is None:
        raise ShapeError(f"axis {axis} is out of range for an array of {x32.ndim} dimensions")
    n = x32.shape[ax]
    if n % BLOCK:
        raise ShapeError(
            f"MX blocks are 32 elements and axis {axis} has length {n}; pad it with zeros "
            f"to {-(-n // BLOCK) * BLOCK} (zeros change no other element's code)"
        )
    pre, nb, post = _split(x32.shape, ax)
    codes = np.empty((pre * nb, BLOCK, post), elem.storage)
    scales = np.empty((pre * nb, post), np.uint8)
    _quantize_rows(x32.reshape(pre * nb, BLOCK, post), elem, rule, codes, scales)
    sshape = (*x32.shape[:ax], nb, *x32.shape[ax + 1:])
    return MXTensor(elements=codes.reshape(x32.shape), scales=scales.reshape(sshape),
                    fmt=mxf.name, rule=rule, axis=ax)


def element_values(codes: np.ndarray, elem: Format) -> np.ndarray:
    """Element codes -> float32 through a 256-entry table (exact; ml_dtypes builds it)."""
    raw = np.ascontiguousarray(codes).view(np.uint8)
    lut = np.arange(256, dtype=np.uint8)
    if elem.bits == 4:
        lut &= np.uint8(0x0F)  # one fp4 per byte: the table ignores the high nibble
    return lut.view(elem.storage).astype(np.float32)[raw]


def scale_values(scales: np.ndarray) -> np.ndarray:
    # ml_dtypes' e8m0 -> float32 is exact: 0x00 -> 2**-127 (subnormal), 0xFF -> NaN.
    return np.ascontiguousarray(scales, np.uint8).view(ml_dtypes.float8_e8m0fnu).astype(
        np.float32)


def dequantize(t: MXTensor) -> np.ndarray:
    """The float32 values X * P_i of an :class:`MXTensor` (NaN for every element of a block
    whose scale is 0xFF). Products are exact unless they overflow float32, which gives inf:
    only the trainium rule does that, when a block maximum above 2**127 rounds to 2**128."""
    elem = t.element_format
    vals = element_values(t.elements, elem)
    sv = scale_values(t.scales)
    if t.order == "strided":
        if t.block_of is None:
            raise ShapeError("a strided MXTensor needs block_of (made by mx.layout.quantize_hw)")
        with np.errstate(over="ignore"):
            return vals * np.take(sv, t.block_of, axis=0)
    pre, nb, post = _split(vals.shape, t.axis)
    with np.errstate(over="ignore"):  # float32 overflow is inf, by design (docstring)
        out = vals.reshape(pre * nb, BLOCK, post) * sv.reshape(pre * nb, 1, post)
    return out.reshape(vals.shape)
