"""OCP Microscaling (MX): E8M0 block scales, quantize / dequantize, x4 packing, K layout.

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

Packing (FACTS "Hardware", nki mxfp-matmul deep-dive): four elements per container along the
contraction axis. fp8 x4 is a little-endian uint32, element 0 in bits 0-7; fp4 x4 is a uint16
of nibbles, element i in bits 4i..4i+3 (byte j holds elements 2j low, 2j+1 high).

Contraction layout of one tile (K <= 512: 128 partitions x 4 slots). A scale block is 8
partitions x 4 slots; its scale byte sits in the block's own 32-partition quadrant at
partition 32*(g//4) + offset + g%4 (offset 0/4/8/12 lets four tensors share a quadrant).
This module lays K out ``"contiguous"``: k = 4p + q (p partition, q slot)::

                 slot q=0  q=1   q=2   q=3     scale (offset 0)
    partition 0    k=0    k=1   k=2   k=3   -+
    partition 1    k=4    k=5   k=6   k=7    | block 0 = k 0..31      -> partition 0
      ...                                    |
    partition 7    k=28   k=29  k=30  k=31  -+
    partition 8    k=32   ...                  block 1 = k 32..63     -> partition 1
      ...
    partition 31   k=124  ...         k=127    block 3 = k 96..127    -> partition 3
    partition 32   k=128  ...                  block 4 = k 128..159   -> partition 32
      ...
    partition 127  k=508  k=509 k=510 k=511    block 15 = k 480..511  -> partition 99

so every hardware block is 32 consecutive k: the OCP block, and quantize_hw equals quantize
along K. A container then holds four consecutive k, and packing is a reshape. The vendor's
golden model instead reads k = q*P + p (``"strided"``, P = K/4 partitions): block 0 of a
full tile is then k in {0..7, 128..135, 256..263, 384..391}. Both are available; any
bijection gives the same dot product when both operands share it, only the blocks differ.
K > 512 is cut into independent tiles of 512 (the last may be shorter); K and every tile
must be a multiple of 32, i.e. whole blocks of 8 partitions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import ml_dtypes
import numpy as np

from .dtypes import Format, e8m0_from_exponent, get_format
from .errors import FormatError, ShapeError

__all__ = [
    "BLOCK",
    "TILE_K",
    "KOrder",
    "MXTensor",
    "ScaleRule",
    "block_scale_exponent",
    "dequantize",
    "hw_blocks",
    "layout_k",
    "pack_tile",
    "pack_x4",
    "quantize",
    "quantize_hw",
    "scale_partition",
    "unpack_tile",
    "unpack_x4",
]

ScaleRule = Literal["ocp", "trainium"]
KOrder = Literal["contiguous", "strided"]

BLOCK = 32  # elements per scale (OCP MX v1.0: k = 32 for every concrete format)
SLOTS = 4  # elements per x4 container
BLOCK_PARTITIONS = BLOCK // SLOTS  # 8 partitions x 4 slots per block
PARTITIONS = 128
TILE_K = PARTITIONS * SLOTS  # 512 contraction elements per tile (seed 000: K *= 4)
NAN_EXPONENT = 128  # a shared exponent E8M0 cannot hold: encodes as NaN (0xFF)
_CHUNK = 1 << 20  # values per pass: keeps temporaries in cache (4 MiB of float32)


@dataclass(frozen=True, slots=True, eq=False)  # eq on arrays would be ambiguous
class MXTensor:
    """MX-quantized values: element codes plus one E8M0 scale code per block.

    ``elements`` has the input's shape in the element format's ml_dtypes storage type (fp4
    one per byte). ``scales`` is uint8 E8M0 codes, the input's shape with ``axis`` divided
    by 32. ``order`` is ``"contiguous"`` (block b = indices 32b..32b+31 along ``axis``) or
    ``"strided"`` (the vendor layout's blocks, see :func:`hw_blocks`; axis 0 only).
    """

    elements: np.ndarray
    scales: np.ndarray
    fmt: str
    rule: ScaleRule
    axis: int
    order: KOrder = "contiguous"

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.elements.shape)

    @property
    def element_format(self) -> Format:
        return _formats(self.fmt)[1]


def _formats(fmt: str | Format) -> tuple[Format, Format]:
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


def _as_float32(x: object) -> np.ndarray:
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
    _, elem = _formats(fmt)
    assert elem.emax is not None
    a = np.abs(_as_float32(amax))
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
    mxf, elem = _formats(fmt)
    x32 = np.ascontiguousarray(_as_float32(x))
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


def _element_values(codes: np.ndarray, elem: Format) -> np.ndarray:
    """Element codes -> float32 through a 256-entry table (exact; ml_dtypes builds it)."""
    raw = np.ascontiguousarray(codes).view(np.uint8)
    lut = np.arange(256, dtype=np.uint8)
    if elem.bits == 4:
        lut &= np.uint8(0x0F)  # one fp4 per byte: the table ignores the high nibble
    return lut.view(elem.storage).astype(np.float32)[raw]


def _scale_values(scales: np.ndarray) -> np.ndarray:
    # ml_dtypes' e8m0 -> float32 is exact: 0x00 -> 2**-127 (subnormal), 0xFF -> NaN.
    return np.ascontiguousarray(scales, np.uint8).view(ml_dtypes.float8_e8m0fnu).astype(
        np.float32)


def dequantize(t: MXTensor) -> np.ndarray:
    """The float32 values X * P_i of an :class:`MXTensor` (NaN for every element of a block
    whose scale is 0xFF). Products are exact unless they overflow float32, which gives inf:
    only the trainium rule does that, when a block maximum above 2**127 rounds to 2**128."""
    elem = t.element_format
    vals = _element_values(t.elements, elem)
    sv = _scale_values(t.scales)
    if t.order == "strided":
        with np.errstate(over="ignore"):
            return vals * np.take(sv, hw_blocks(vals.shape[0], "strided"), axis=0)
    pre, nb, post = _split(vals.shape, t.axis)
    with np.errstate(over="ignore"):  # float32 overflow is inf, by design (docstring)
        out = vals.reshape(pre * nb, BLOCK, post) * sv.reshape(pre * nb, 1, post)
    return out.reshape(vals.shape)


# ---- x4 packing -------------------------------------------------------------------------


def pack_x4(codes: np.ndarray, fmt: str | Format) -> np.ndarray:
    """Pack element codes four to a container along the last axis (length a multiple of 4).

    fp8 -> uint32 with element 0 in bits 0-7; fp4 -> uint16 with element i in bits 4i..4i+3.
    """
    _, elem = _formats(fmt)
    raw = np.ascontiguousarray(codes).view(np.uint8)
    if raw.ndim == 0 or raw.shape[-1] % SLOTS:
        raise ShapeError(f"x4 packing needs a last axis that is a multiple of 4; got {raw.shape}")
    lanes = raw.reshape(*raw.shape[:-1], raw.shape[-1] // SLOTS, SLOTS)
    if elem.bits == 8:
        # Four bytes read as a little-endian word: element 0 is the low byte on any host.
        return np.ascontiguousarray(lanes).view("<u4")[..., 0].astype(np.uint32)
    nib = (lanes & np.uint8(0x0F)).astype(np.uint16)
    return nib[..., 0] | nib[..., 1] << 4 | nib[..., 2] << 8 | nib[..., 3] << 12


def unpack_x4(packed: np.ndarray, fmt: str | Format) -> np.ndarray:
    """Inverse of :func:`pack_x4`: codes in the element storage type, last axis times 4."""
    _, elem = _formats(fmt)
    p = np.asarray(packed)
    want = np.uint32 if elem.bits == 8 else np.uint16
    if p.dtype != want:
        raise FormatError(f"{elem.name} x4 containers are {np.dtype(want)}; got {p.dtype}")
    shifts = np.arange(SLOTS, dtype=want) * np.asarray(elem.bits, dtype=want)
    mask = want(0xFF if elem.bits == 8 else 0x0F)
    lanes = ((p[..., None] >> shifts) & mask).astype(np.uint8)
    return lanes.reshape(*p.shape[:-1], p.shape[-1] * SLOTS).view(elem.storage)


# ---- contraction layout ------------------------------------------------------------------


def _check_k(K: int) -> None:
    if K <= 0 or K % BLOCK:
        raise ShapeError(
            f"the MX contraction length must be a positive multiple of 32 (whole blocks of "
            f"8 partitions x 4); got K={K}: pad K with zeros"
        )


def _order(order: str) -> KOrder:
    if order not in ("contiguous", "strided"):
        raise ShapeError(f"unknown K order {order!r}; use 'contiguous' or 'strided'")
    return order  # type: ignore[return-value]


def layout_k(K: int, order: KOrder = "contiguous") -> tuple[np.ndarray, np.ndarray]:
    """(partition, slot) of each k of one tile, K <= 512 a multiple of 32, P = K/4 partitions.

    ``"contiguous"``: k = 4p + q. ``"strided"`` (vendor golden model): k = q*P + p.
    """
    _check_k(K)
    if K > TILE_K:
        raise ShapeError(f"one MX tile holds at most 512 contraction elements; got K={K}")
    k = np.arange(K)
    if _order(order) == "contiguous":
        return k // SLOTS, k % SLOTS
    P = K // SLOTS
    return k % P, k // P


def _physical(K: int, order: KOrder) -> np.ndarray:
    """perm[j] = the logical k at physical position j = tile*512 + 4p + q."""
    _check_k(K)
    if _order(order) == "contiguous":
        return np.arange(K)
    parts = []
    for t0 in range(0, K, TILE_K):
        kt = min(TILE_K, K - t0)
        p, q = layout_k(kt, order)
        perm = np.empty(kt, np.int64)
        perm[p * SLOTS + q] = np.arange(kt)
        parts.append(perm + t0)
    return np.concatenate(parts)


def hw_blocks(K: int, order: KOrder = "contiguous") -> np.ndarray:
    """The scale block of each logical k (tiles of 512; block ids count up through tiles).

    Block b of a tile is partitions 8b..8b+7 x slots 0..3; ``"contiguous"`` gives k // 32.
    """
    perm = _physical(K, order)
    blocks = np.empty(K, np.int64)
    blocks[perm] = np.arange(K) // BLOCK
    return blocks


def scale_partition(group: np.ndarray | int, offset: int = 0) -> np.ndarray:
    """SBUF partition of the scale of block ``group`` (partitions 8g..8g+7) of a tile: the
    block's own quadrant, row g % 4 after ``offset`` (0, 4, 8 or 12; FACTS "Hardware")."""
    if offset not in (0, 4, 8, 12):
        raise ShapeError(f"scale offset must be 0, 4, 8 or 12 within a quadrant; got {offset}")
    g = np.asarray(group, dtype=np.int64)
    return 32 * (g // 4) + offset + g % 4


def quantize_hw(x: object, fmt: str | Format, *, rule: ScaleRule = "ocp",
                order: KOrder = "contiguous") -> MXTensor:
    """MX-quantize an operand [K, ...] (K the contraction axis) with the hardware's blocks.

    For the stationary a.T [K, M] and the moving b [K, N] alike. With ``"contiguous"`` this is
    ``quantize(x, axis=0)``; with ``"strided"`` each block is the 8 x 4 group of the vendor
    layout (see :func:`hw_blocks`) and ``scales[b]`` belongs to block b. Raises
    :class:`ShapeError` unless K is a positive multiple of 32.
    """
    x32 = np.ascontiguousarray(_as_float32(x))
    if x32.ndim == 0:
        raise ShapeError("quantize_hw needs an operand [K, ...]; got a scalar")
    K = x32.shape[0]
    _check_k(K)
    if _order(order) == "contiguous":
        return quantize(x32, fmt, rule=rule, axis=0)
    perm = _physical(K, order)
    t = quantize(x32[perm], fmt, rule=rule, axis=0)
    codes = np.empty_like(t.elements)
    codes[perm] = t.elements
    return MXTensor(elements=codes, scales=t.scales, fmt=t.fmt, rule=rule, axis=0,
                    order="strided")


def pack_tile(t: MXTensor, tile: int = 0, scale_offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """SBUF image of K tile ``tile`` of a :func:`quantize_hw` operand [K, N].

    Returns ``(data, scales)``: data [P, N] x4 containers (P = tile's K / 4) and a [128, N]
    uint8 plane holding each block's scale at :func:`scale_partition` (other rows 0).
    """
    if t.axis != 0 or t.elements.ndim != 2:
        raise ShapeError("pack_tile takes a quantize_hw operand [K, N]")
    K, N = t.elements.shape
    k0 = tile * TILE_K
    if not 0 <= k0 < K:
        raise ShapeError(f"tile {tile} is outside K={K} (tiles of 512)")
    kt = min(TILE_K, K - k0)
    p, q = layout_k(kt, t.order)
    codes = np.empty((kt // SLOTS, N, SLOTS), t.elements.dtype)
    codes[p, :, q] = t.elements[k0:k0 + kt]
    plane = np.zeros((PARTITIONS, N), np.uint8)
    g = np.arange(kt // BLOCK)
    plane[scale_partition(g, scale_offset)] = t.scales[k0 // BLOCK + g]
    return pack_x4(codes.reshape(kt // SLOTS, N * SLOTS), t.fmt), plane


def unpack_tile(data: np.ndarray, scales: np.ndarray, fmt: str | Format, *,
                order: KOrder = "contiguous", scale_offset: int = 0) -> np.ndarray:
    """Float32 [K, N] values of one tile's SBUF image (the inverse of :func:`pack_tile`)."""
    _, elem = _formats(fmt)
    codes = unpack_x4(np.asarray(data), elem)  # [P, N*4]: slots of one container adjacent
    P = codes.shape[0]
    K = P * SLOTS
    p, q = layout_k(K, order)
    n = codes.shape[1] // SLOTS
    vals = _element_values(codes.reshape(P, n, SLOTS)[p, :, q], elem)
    sv = _scale_values(np.asarray(scales)[scale_partition(np.arange(K // BLOCK), scale_offset)])
    return vals * sv[p // BLOCK_PARTITIONS]  # sv rows are blocks: [K, N]
