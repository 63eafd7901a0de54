"""Where MX blocks sit in the engine: x4 packing, the K layout of one tile, scale partitions.

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

Partition and quadrant counts are read from the Arch (``rows``, ``quadrant``); the MX path
is gen4's, so ``arch`` defaults to trn3.
"""

from __future__ import annotations

import numpy as np

from ..arch import Arch, get_arch
from ..dtypes import Format
from ..errors import FormatError, ShapeError
from .quantize import (
    BLOCK,
    KOrder,
    MXTensor,
    ScaleRule,
    as_float32,
    element_values,
    mx_formats,
    quantize,
    scale_values,
)

__all__ = [
    "BLOCK_PARTITIONS",
    "SLOTS",
    "hw_blocks",
    "layout_k",
    "pack_tile",
    "pack_x4",
    "quantize_hw",
    "scale_partition",
    "tile_k",
    "unpack_tile",
    "unpack_x4",
]

SLOTS = 4  # elements per x4 container
BLOCK_PARTITIONS = BLOCK // SLOTS  # 8 partitions x 4 slots per block
_MX_ARCH = "trn3"  # the one generation with the MX path (seed 000: CoreV4)


def _arch(arch: Arch | None) -> Arch:
    return get_arch(_MX_ARCH) if arch is None else arch


def tile_k(arch: Arch | None = None) -> int:
    """Contraction elements of one MX tile: every partition of the array x 4 slots (seed 000:
    K *= 4), 512 on a 128-row array."""
    return _arch(arch).rows * SLOTS

# ---- x4 packing -------------------------------------------------------------------------


def pack_x4(codes: np.ndarray, fmt: str | Format) -> np.ndarray:
    """Pack element codes four to a container along the last axis (length a multiple of 4).

    fp8 -> uint32 with element 0 in bits 0-7; fp4 -> uint16 with element i in bits 4i..4i+3.
    """
    _, elem = mx_formats(fmt)
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
    _, elem = mx_formats(fmt)
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


def layout_k(K: int, order: KOrder = "contiguous", *, arch: Arch | None = None
             ) -> tuple[np.ndarray, np.ndarray]:
    """(partition, slot) of each k of one tile, K <= :func:`tile_k` a multiple of 32, P = K/4
    partitions.

    ``"contiguous"``: k = 4p + q. ``"strided"`` (vendor golden model): k = q*P + p.
    """
    _check_k(K)
    if tile_k(arch) < K:
        raise ShapeError(f"one MX tile holds at most {tile_k(arch)} contraction elements; "
                         f"got K={K}")
    k = np.arange(K)
    if _order(order) == "contiguous":
        return k // SLOTS, k % SLOTS
    P = K // SLOTS
    return k % P, k // P


def _physical(K: int, order: KOrder, arch: Arch | None) -> np.ndarray:
    """perm[j] = the logical k at physical position j = tile*tile_k + 4p + q."""
    _check_k(K)
    if _order(order) == "contiguous":
        return np.arange(K)
    parts = []
    step = tile_k(arch)
    for t0 in range(0, K, step):
        kt = min(step, K - t0)
        p, q = layout_k(kt, order, arch=arch)
        perm = np.empty(kt, np.int64)
        perm[p * SLOTS + q] = np.arange(kt)
        parts.append(perm + t0)
    return np.concatenate(parts)


def hw_blocks(K: int, order: KOrder = "contiguous", *, arch: Arch | None = None
              ) -> np.ndarray:
    """The scale block of each logical k (tiles of :func:`tile_k`; block ids count up
    through tiles).

    Block b of a tile is partitions 8b..8b+7 x slots 0..3; ``"contiguous"`` gives k // 32.
    """
    perm = _physical(K, order, arch)
    blocks = np.empty(K, np.int64)
    blocks[perm] = np.arange(K) // BLOCK
    return blocks


def scale_partition(group: np.ndarray | int, offset: int = 0, *, arch: Arch | None = None
                    ) -> np.ndarray:
    """SBUF partition of the scale of block ``group`` (partitions 8g..8g+7) of a tile: the
    block's own quadrant, row g % 4 after ``offset`` (0, 4, 8 or 12; FACTS "Hardware")."""
    if offset not in (0, 4, 8, 12):
        raise ShapeError(f"scale offset must be 0, 4, 8 or 12 within a quadrant; got {offset}")
    quadrant = _arch(arch).quadrant
    per_quadrant = quadrant // BLOCK_PARTITIONS  # 4 blocks of 8 partitions in 32
    g = np.asarray(group, dtype=np.int64)
    return quadrant * (g // per_quadrant) + offset + g % per_quadrant


def quantize_hw(x: object, fmt: str | Format, *, rule: ScaleRule = "ocp",
                order: KOrder = "contiguous", arch: Arch | None = None) -> MXTensor:
    """MX-quantize an operand [K, ...] (K the contraction axis) with the hardware's blocks.

    For the stationary a.T [K, M] and the moving b [K, N] alike. With ``"contiguous"`` this is
    ``quantize(x, axis=0)``; with ``"strided"`` each block is the 8 x 4 group of the vendor
    layout (see :func:`hw_blocks`) and ``scales[b]`` belongs to block b. Raises
    :class:`ShapeError` unless K is a positive multiple of 32.
    """
    x32 = np.ascontiguousarray(as_float32(x))
    if x32.ndim == 0:
        raise ShapeError("quantize_hw needs an operand [K, ...]; got a scalar")
    K = x32.shape[0]
    _check_k(K)
    if _order(order) == "contiguous":
        return quantize(x32, fmt, rule=rule, axis=0)
    perm = _physical(K, order, arch)
    t = quantize(x32[perm], fmt, rule=rule, axis=0)
    codes = np.empty_like(t.elements)
    codes[perm] = t.elements
    return MXTensor(elements=codes, scales=t.scales, fmt=t.fmt, rule=rule, axis=0,
                    order="strided", block_of=hw_blocks(K, "strided", arch=arch))


def pack_tile(t: MXTensor, tile: int = 0, scale_offset: int = 0, *, arch: Arch | None = None
              ) -> tuple[np.ndarray, np.ndarray]:
    """SBUF image of K tile ``tile`` of a :func:`quantize_hw` operand [K, N].

    Returns ``(data, scales)``: data [P, N] x4 containers (P = tile's K / 4) and an
    [arch.rows, N] uint8 plane holding each block's scale at :func:`scale_partition` (other
    rows 0).
    """
    if t.axis != 0 or t.elements.ndim != 2:
        raise ShapeError("pack_tile takes a quantize_hw operand [K, N]")
    K, N = t.elements.shape
    step = tile_k(arch)
    k0 = tile * step
    if not 0 <= k0 < K:
        raise ShapeError(f"tile {tile} is outside K={K} (tiles of {step})")
    kt = min(step, K - k0)
    p, q = layout_k(kt, t.order, arch=arch)
    codes = np.empty((kt // SLOTS, N, SLOTS), t.elements.dtype)
    codes[p, :, q] = t.elements[k0:k0 + kt]
    plane = np.zeros((_arch(arch).rows, N), np.uint8)
    g = np.arange(kt // BLOCK)
    plane[scale_partition(g, scale_offset, arch=arch)] = t.scales[k0 // BLOCK + g]
    return pack_x4(codes.reshape(kt // SLOTS, N * SLOTS), t.fmt), plane


def unpack_tile(data: np.ndarray, scales: np.ndarray, fmt: str | Format, *,
                order: KOrder = "contiguous", scale_offset: int = 0,
                arch: Arch | None = None) -> np.ndarray:
    """Float32 [K, N] values of one tile's SBUF image (the inverse of :func:`pack_tile`)."""
    _, elem = mx_formats(fmt)
    codes = unpack_x4(np.asarray(data), elem)  # [P, N*4]: slots of one container adjacent
    P = codes.shape[0]
    K = P * SLOTS
    p, q = layout_k(K, order, arch=arch)
    n = codes.shape[1] // SLOTS
    vals = element_values(codes.reshape(P, n, SLOTS)[p, :, q], elem)
    sv = scale_values(np.asarray(scales)[scale_partition(np.arange(K // BLOCK), scale_offset,
                                                      arch=arch)])
    return vals * sv[p // BLOCK_PARTITIONS]  # sv rows are blocks: [K, N]
