"""Verifier rules of the gen4 MX pair, :class:`LdWeightMx` and :class:`MatmultMx`.

:class:`systolic.verify.Checker` calls :func:`check_ld_weight_mx` (which returns the
stationary M; the checker latches the tile) and :func:`check_matmult_mx` (the checker then
applies the generation table's accumulate-byte rule, {0,1,2,3,4,6} on gen4, and the
START/STOP bookkeeping). This module sits beside :mod:`systolic.verify` and below it: it
imports the checker's type only for annotations. The rules, with
their sources:

* MX exists on gen4 only (seed 000: "the modern MX path ... gen4 only"), in the arch's
  ``mx_formats``; the data patterns carry the MX format name, the scale patterns ``e8m0``.
* One x4 container per partition per column (seed 000: the descriptor's K is x4-unpacked),
  so a data pattern's leading free dims are 1 and K = 4 x partitions, at most 512.
* Partitions come in whole scale blocks of 8 (FACTS "Hardware": one scale group is 8
  partitions x 4 elements) from a quadrant boundary, so block g's scale sits in its own
  quadrant: at ``scale.partition + 32*(g//4) + g%4`` with ``scale.partition - data.partition``
  in {0, 4, 8, 12} (FACTS: "partitions 0-3 of it ... offsets 0/4/8/12"). The scale pattern
  spans exactly the rows from the first to the last scale byte and has the data's free shape.
* No column tiling (seed 000: col_tile_pos in {-1, 0}): the stationary tile starts at column
  0; the column group is forced 15 (implied by the instruction, no field); the row group
  follows the quadrant rule. No perf mode exists on the path (nothing to check).
* A MatmultMx needs a tile latched by an LdWeightMx over exactly its rows and columns (a
  LoadStationary tile does not serve: the bundle carries no weights address, seed 000), of
  the format it names; N fits one fp32 PSUM bank; ``psum_zero_region`` names dst's bank.
"""

from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING

from ..isa import AccessPattern, LdWeightMx, MatmultMx, Space, row_group
from ..memory import psum_bank
from ..mx import BLOCK, SLOTS, TILE_K

if TYPE_CHECKING:
    from . import Checker

__all__ = ["check_ld_weight_mx", "check_matmult_mx", "scale_rows", "scale_span"]

# The quadrant the scale rows step by: Arch.quadrant of every preset (seed 000 "Partition
# Geometry"); the scale layout functions below take no Arch, so it is named once here.
_QUADRANT = 32
_BLOCK_PARTS = BLOCK // SLOTS  # 8 partitions per scale block
_OFFSETS = (0, 4, 8, 12)


def scale_rows(blocks: int) -> list[int]:
    """Rows of the scale pattern (relative to its first partition) holding blocks 0..n-1."""
    return [_QUADRANT * (g // 4) + g % 4 for g in range(blocks)]


def scale_span(partitions: int) -> int:
    """Partitions a scale pattern spans for a data tile of ``partitions`` partitions."""
    return scale_rows(partitions // _BLOCK_PARTS)[-1] + 1


def _gen4(checker: Checker, i: int, fmt: str, role: str) -> None:
    arch = checker.arch
    if fmt not in arch.mx_formats:
        if not arch.mx_formats:
            checker._fail(i, f"the MX pair needs gen4 (trn3); {arch.name} is "
                             f"gen{arch.generation} and has no MX path (seed 000)")
        checker._fail(i, f"{role} format {fmt!r} is not an MX format; use one of "
                         f"{', '.join(arch.mx_formats)}")


def _data_and_scale(checker: Checker, i: int, data: AccessPattern, scale: AccessPattern,
                    fmt: str, role: str) -> int:
    """Check one dual-address descriptor; return its free size (M or N)."""
    checker._bounds(i, data, f"{role} data", Space.SBUF)
    checker._bounds(i, scale, f"{role} scale", Space.SBUF)
    if data.dtype != fmt:
        checker._fail(i, f"{role} data is {data.dtype}, but the instruction names {fmt}")
    if scale.dtype != "e8m0":
        checker._fail(i, f"{role} scale must be e8m0 block scales, not {scale.dtype}")
    if prod(n for _, n in data.dims[:-1]) != 1:
        checker._fail(i, f"{role} data holds one x4 container per partition and column; "
                         f"its leading free dims must be 1, got {data.dims}")
    parts = data.partitions
    if parts % _BLOCK_PARTS or parts > checker.arch.rows:
        checker._fail(i, f"{role} spans {parts} partitions; MX needs whole scale blocks of 8 "
                         f"partitions, at most {checker.arch.rows} (K = 4 x partitions <= "
                         f"{TILE_K})")
    if data.partition % checker.arch.quadrant:
        checker._fail(i, f"{role} starts at partition {data.partition}; an MX tile starts at a "
                         f"quadrant boundary (0, 32, 64, 96) so each block's scale sits in "
                         f"its own quadrant")
    size = data.dims[-1][1]
    off = scale.partition - data.partition
    span = scale_span(parts)
    if off not in _OFFSETS or scale.partitions != span:
        checker._fail(i, f"{role} scale must start at the data's partition + 0, 4, 8 or 12 and "
                         f"span {span} partitions (block g at row 32*(g//4) + g%4); got "
                         f"partitions {scale.partition}..{scale.partition + scale.partitions - 1}")
    if prod(n for _, n in scale.dims[:-1]) != 1 or scale.dims[-1][1] != size:
        checker._fail(i, f"{role} scale must have the data's free shape (1 x {size}); got "
                         f"{scale.dims}")
    return size


def check_ld_weight_mx(checker: Checker, i: int, ins: LdWeightMx) -> int:
    """Check an LdWeightMx; return the stationary M (the tile's columns from 0)."""
    _gen4(checker, i, ins.fmt, "stationary")
    src = ins.src
    m = _data_and_scale(checker, i, src, ins.scale, ins.fmt, "LdWeightMx")
    if ins.column != 0:
        checker._fail(i, f"the MX stationary tile starts at column 0 (seed 000: the MX column "
                         f"is never tiled); got column {ins.column}")
    if m > checker.arch.cols:
        checker._fail(i, f"stationary M = {m} exceeds the {checker.arch.cols} array columns; "
                         f"split M into tiles of {checker.arch.cols}")
    checker._position(i, "rows", src.partition, src.partitions)
    want = row_group(src.partition, src.partitions, checker.arch.quadrant)
    if ins.row_group != want:
        checker._fail(i, f"row group {ins.row_group} does not match partitions "
                         f"{src.partition}..{src.partition + src.partitions - 1}: expected "
                         f"{want} by the quadrant rule")
    return m


def check_matmult_mx(checker: Checker, i: int, ins: MatmultMx) -> None:
    """Check a MatmultMx (its accumulate byte is checked by the caller, as a MatMul's)."""
    _gen4(checker, i, ins.fmt, "moving")
    _gen4(checker, i, ins.stationary_fmt, "stationary")
    mv, dst = ins.moving, ins.dst
    n = _data_and_scale(checker, i, mv, ins.scale, ins.fmt, "MatmultMx moving")
    checker._bounds(i, dst, "MatmultMx dst", Space.PSUM)
    if dst.dtype != "fp32":
        checker._fail(i, f"the PSUM destination of an MX matmul is fp32, not {dst.dtype}")
    bank_elems = checker.arch.psum_bank_bytes // 4
    if n > bank_elems or dst.free_elems != n:
        checker._fail(i, f"moving N = {n} must equal the destination's {dst.free_elems} and "
                         f"fit one PSUM bank ({bank_elems} fp32); split N into tiles")
    if dst.partition != 0:
        checker._fail(i, f"an MX result starts at PSUM partition 0 (column 0: the MX column "
                         f"is never tiled, seed 000); got {dst.partition}")
    rect = (mv.partition, mv.partitions, dst.partition, dst.partitions)
    tile = next((t for t in checker.tiles if (t.row, t.rows, t.col, t.cols) == rect), None)
    if tile is None:
        last = mv.partition + mv.partitions - 1
        checker._fail(i, f"no MX tile latched at rows {mv.partition}..{last}, columns "
                         f"0..{dst.partitions - 1}; emit an LdWeightMx of that tile first "
                         f"(the MX path always pairs them, seed 000)")
    if not tile.mx:
        checker._fail(i, f"the tile at these rows and columns was latched by a LoadStationary "
                         f"(instruction {tile.index}); a MatmultMx needs an LdWeightMx")
    if tile.dtype != ins.stationary_fmt:
        checker._fail(i, f"MatmultMx names stationary {ins.stationary_fmt}, but the latched "
                         f"tile (instruction {tile.index}) is {tile.dtype}")
    checker._position(i, "rows", mv.partition, mv.partitions)
    want = row_group(mv.partition, mv.partitions, checker.arch.quadrant)
    if ins.row_group != want:
        checker._fail(i, f"row group {ins.row_group} does not match partitions "
                         f"{mv.partition}..{mv.partition + mv.partitions - 1}: expected {want}")
    bank = psum_bank(dst, checker.arch)
    if ins.psum_zero_region != bank:
        checker._fail(i, f"psum_zero_region {ins.psum_zero_region} must name the bank of dst "
                         f"({bank})")
