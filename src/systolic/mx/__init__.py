"""``systolic.mx``: the public MX namespace, one import for users (no code of its own).

The two halves live beside each other, named for what they own:

* :mod:`systolic.mx.quantize`: E8M0 block scales, :func:`quantize`, :func:`dequantize`;
* :mod:`systolic.mx.layout`: x4 packing, the K layout of one tile, scale partitions,
  :func:`quantize_hw`, :func:`pack_tile`.

Package modules import from those two directly; this one re-exports them so that
``from systolic import mx; mx.quantize(...)`` keeps working.
"""

from __future__ import annotations

from ..arch import get_arch
from .layout import (
    BLOCK_PARTITIONS,
    SLOTS,
    hw_blocks,
    layout_k,
    pack_tile,
    pack_x4,
    quantize_hw,
    scale_partition,
    tile_k,
    unpack_tile,
    unpack_x4,
)
from .quantize import (
    BLOCK,
    NAN_EXPONENT,
    KOrder,
    MXTensor,
    ScaleRule,
    block_scale_exponent,
    dequantize,
    quantize,
)

# The MX tile's K on the one generation with the MX path (trn3); prefer tile_k(arch).
TILE_K = tile_k(get_arch("trn3"))

__all__ = [
    "BLOCK",
    "BLOCK_PARTITIONS",
    "NAN_EXPONENT",
    "SLOTS",
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
    "tile_k",
    "unpack_tile",
    "unpack_x4",
]
