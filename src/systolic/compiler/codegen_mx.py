"""Pass 4 for the MX formats (gen4): LdWeightMx / MatmultMx pairs, nothing cached.

The MX codegen step of the one pipeline (:mod:`systolic.compiler`), beside the dense
:mod:`~systolic.compiler.codegen`, minus what seed 000 says the MX dispatch does not have
(no weight cache, no fp32 two-pass, no perf mode): DMA tiles into SBUF slots (LRU, as the
dense path), then always the pair LdWeightMx + MatmultMx (seed 000: visitInstMatmultMx is
generateLdweightMx; jmp generateMatmultMx), and ReadOut of finished banks.

The plan's K tiles cover K padded to whole blocks of 32 (``kp``; :func:`~.tiling.tile`).
Device memory (byte offsets in :class:`MxLayout`, each region 64-byte aligned):

* ``a``: a [M, Kp] row-major with K packed four to a container: [M, Kp/4] containers;
* ``a_scale``: a's E8M0 scales [M, Kp/32], one byte per block of 32 k of a row;
* ``b``: b [Kp, N] packed along K: [Kp/4, N] containers (container r holds k = 4r..4r+3);
* ``b_scale``: b's scales [Kp/32, N];
* ``out``: the fp32 result [M, N].

In SBUF a tile's data sits at partitions 0..K/4-1 (k = 4p + q), its scales in the same slot
after the data, block g at partition quadrant*(g//4) + g%4 (scale offset 0; FACTS
"Hardware"). The scales reach SBUF by one DmaLoad per quadrant (a pattern's partitions are
consecutive).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..arch import Arch
from ..isa import (
    AccessPattern,
    CalcFlags,
    DmaLoad,
    Instruction,
    LdWeightMx,
    MatmultMx,
    Space,
    row_group,
)
from ..mx.layout import BLOCK_PARTITIONS, SLOTS
from ..mx.quantize import BLOCK
from ..verify.mx import scale_span
from .codegen import Layout, SlotCache, align, read_out
from .schedule import ReadStep, Step
from .tiling import KTile, Span, TilePlan, padded_k

__all__ = ["MxLayout", "MxState", "acc_byte", "emit", "plan_mx_layout"]


@dataclass(frozen=True, slots=True)
class MxLayout(Layout):
    """The dense :class:`Layout` plus the scale planes and the padded K."""

    a_scale_offset: int = 0
    b_scale_offset: int = 0
    kp: int = 0


def plan_mx_layout(plan: TilePlan) -> MxLayout:
    s, cb = plan.spec, plan.itemsize
    kp = padded_k(s.k)
    a_scale = align(s.m * kp // SLOTS * cb)
    b_off = align(a_scale + s.m * kp // BLOCK)
    b_scale = align(b_off + kp // SLOTS * s.n * cb)
    out = align(b_scale + kp // BLOCK * s.n)
    return MxLayout(0, b_off, out, out + s.m * s.n * 4, a_scale_offset=a_scale,
                    b_scale_offset=b_scale, kp=kp)


def acc_byte(first: bool, last: bool) -> CalcFlags:
    """gen4 accumulate byte: START first, ACCUMULATE after, STOP last (seed 000)."""
    f = CalcFlags.START if first else CalcFlags.ACCUMULATE
    if last:
        f |= CalcFlags.STOP
    return f


@dataclass
class MxState:
    """What MX codegen carries between steps, made fresh by each :func:`emit` call: the
    SBUF slots (a slot holds a tile's containers, then its scale bytes at ``*_scale``)."""

    stat: SlotCache
    mov: SlotCache
    stat_scale: int
    mov_scale: int

    @classmethod
    def for_plan(cls, arch: Arch, plan: TilePlan) -> MxState:
        cb = plan.itemsize
        n_max = max(n.size for n in plan.n_tiles)
        stat_scale = align(arch.cols * cb)
        mov_scale = align(n_max * cb)
        stat_slot = stat_scale + align(arch.cols)
        mov_slot = mov_scale + align(n_max)
        window = arch.sbuf_bytes // 4
        return cls(SlotCache(0, stat_slot, max(2, window // stat_slot)),
                   SlotCache(window, mov_slot, max(2, (arch.sbuf_bytes - window) // mov_slot)),
                   stat_scale, mov_scale)


def _scale_dmas(arch: Arch, src_start: int, src_step: int, dims: tuple[tuple[int, int], ...],
                blocks: int, sbuf_offset: int, out: list[Instruction]) -> None:
    """One DmaLoad per quadrant: blocks 4q..4q+3 to partitions quadrant*q .. +3."""
    per_quadrant = arch.quadrant // BLOCK_PARTITIONS  # 4 blocks of 8 partitions
    for g0 in range(0, blocks, per_quadrant):
        c = min(per_quadrant, blocks - g0)
        src = AccessPattern(Space.DRAM, 0, c, src_start + g0 * src_step, dims, "e8m0",
                            partition_step=src_step)
        dst = AccessPattern(Space.SBUF, arch.quadrant * (g0 // per_quadrant), c, sbuf_offset,
                            ((1, dims[-1][1]),), "e8m0")
        out.append(DmaLoad(src, dst))


def _operand(fmt: str, k: KTile, size: int, off: int, scale_at: int
             ) -> tuple[AccessPattern, AccessPattern]:
    parts = k.size // SLOTS
    data = AccessPattern(Space.SBUF, 0, parts, off, ((1, size),), fmt)
    scale = AccessPattern(Space.SBUF, 0, scale_span(parts), off + scale_at, ((1, size),),
                          "e8m0")
    return data, scale


def _stationary(arch: Arch, st: MxState, plan: TilePlan, lay: MxLayout, k: KTile, m: Span,
                out: list[Instruction]) -> tuple[AccessPattern, AccessPattern]:
    """DMA the a.T tile (k, m) into SBUF if not resident; its (data, scale) patterns."""
    cb, fmt = plan.itemsize, plan.spec.dtype
    off, resident = st.stat.get(("a", k.index, m.index))
    data, scale = _operand(fmt, k, m.size, off, st.stat_scale)
    if not resident:
        row = lay.kp // SLOTS  # containers per row of a
        src = AccessPattern(Space.DRAM, 0, data.partitions,
                            lay.a_offset + (m.start * row + k.start // SLOTS) * cb,
                            ((row, m.size),), fmt, partition_step=cb)
        out.append(DmaLoad(src, data))
        blocks_per_row = lay.kp // BLOCK
        _scale_dmas(arch, lay.a_scale_offset + m.start * blocks_per_row + k.start // BLOCK,
                    1, ((blocks_per_row, m.size),), k.size // BLOCK, scale.offset, out)
    return data, scale


def _moving(arch: Arch, st: MxState, plan: TilePlan, lay: MxLayout, k: KTile, n: Span,
            out: list[Instruction]) -> tuple[AccessPattern, AccessPattern]:
    """DMA the b tile (k, n) into SBUF if not resident; its (data, scale) patterns."""
    cb, big_n, fmt = plan.itemsize, plan.spec.n, plan.spec.dtype
    off, resident = st.mov.get(("b", k.index, n.index))
    data, scale = _operand(fmt, k, n.size, off, st.mov_scale)
    if not resident:
        src = AccessPattern(Space.DRAM, 0, data.partitions,
                            lay.b_offset + ((k.start // SLOTS) * big_n + n.start) * cb,
                            ((1, n.size),), fmt, partition_step=big_n * cb)
        out.append(DmaLoad(src, data))
        _scale_dmas(arch, lay.b_scale_offset + (k.start // BLOCK) * big_n + n.start, big_n,
                    ((1, n.size),), k.size // BLOCK, scale.offset, out)
    return data, scale


def emit(arch: Arch, plan: TilePlan, steps: list[Step | ReadStep]
         ) -> tuple[list[Instruction], MxLayout]:
    """Pass 4 for the MX formats: the instructions of ``steps`` and the DRAM layout."""
    lay = plan_mx_layout(plan)
    st = MxState.for_plan(arch, plan)
    fmt = plan.spec.dtype
    out: list[Instruction] = []
    for step in steps:
        if isinstance(step, ReadStep):
            out.append(read_out(arch, plan, lay.out_offset, step))
            continue
        sdata, sscale = _stationary(arch, st, plan, lay, step.k, step.m, out)
        mdata, mscale = _moving(arch, st, plan, lay, step.k, step.n, out)
        rg = row_group(0, sdata.partitions)
        dst = AccessPattern(Space.PSUM, 0, step.m.size, step.bank * arch.psum_bank_bytes,
                            ((1, step.n.size),), "fp32")
        out.append(LdWeightMx(sdata, sscale, 0, rg, fmt))
        out.append(MatmultMx(mdata, mscale, dst, acc_byte(step.first, step.last),
                             fmt, fmt, rg, step.bank))
    return out, lay
