"""Lowering of an MX product (gen4): LdWeightMx / MatmultMx pairs, nothing cached.

The passes mirror the dense path (:mod:`systolic.compiler`), minus what seed 000 says the
MX dispatch does not have (no weight cache, no fp32 two-pass, no perf mode)::

    plan  = tile_mx(spec, arch)              # 1. K tiles of <= 512, M <= 128, N <= 512
    steps = order_for_reuse(plan, arch)      # 2. the dense loop order (shared)
    steps = legalize_groups(steps, plan)     # 3. START ... STOP groups, one bank each
    insts = MxCodegen(arch, plan).emit(steps)  # 4. DMA, then LdWeightMx + MatmultMx, always both
    verify(Program(insts), arch)             # 5. checked like every Program

K is padded up to a multiple of 32 (whole MX blocks, OCP MX v1.0) with zeros: a zero
element adds nothing to a block's dot product and changes no other element's code, so the
padded product is the unpadded one. The plan's K tiles cover the padded K (``kp``).

Device memory (byte offsets in :class:`MxLayout`, each region 64-byte aligned):

* ``a``: a [M, Kp] row-major with K packed four to a container: [M, Kp/4] containers;
* ``a_scale``: a's E8M0 scales [M, Kp/32], one byte per block of 32 k of a row;
* ``b``: b [Kp, N] packed along K: [Kp/4, N] containers (container r holds k = 4r..4r+3);
* ``b_scale``: b's scales [Kp/32, N];
* ``out``: the fp32 result [M, N].

In SBUF a tile's data sits at partitions 0..K/4-1 (k = 4p + q), its scales in the same slot
after the data, block g at partition 32*(g//4) + g%4 (scale offset 0; FACTS "Hardware").
The scales reach SBUF by one DmaLoad per quadrant (a pattern's partitions are consecutive).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..arch import Arch
from ..dtypes import get_format
from ..errors import ArchError
from ..isa import (
    AccessPattern,
    CalcFlags,
    DmaLoad,
    Instruction,
    LdWeightMx,
    MatmultMx,
    PerfMode,
    Program,
    Space,
    row_group,
)
from ..mx import BLOCK, SLOTS, TILE_K
from ..verify import verify
from ..verify_mx import scale_span
from . import Lowered
from .codegen import Layout, StepEmitter, _align, _SlotCache
from .schedule import Step, legalize_groups, order_for_reuse
from .tiling import KTile, MatmulSpec, Span, TilePlan, _spans

__all__ = ["MxCodegen", "MxLayout", "lower_mx", "padded_k", "tile_mx"]

_QUADRANT = 32


def padded_k(k: int) -> int:
    """K rounded up to whole MX blocks of 32."""
    return -(-k // BLOCK) * BLOCK


@dataclass(frozen=True, slots=True)
class MxLayout(Layout):
    """The dense :class:`Layout` plus the scale planes and the padded K."""

    a_scale_offset: int = 0
    b_scale_offset: int = 0
    kp: int = 0


def tile_mx(spec: MatmulSpec, arch: Arch) -> TilePlan:
    """Pass 1: K tiles of up to 512 logical elements over the padded K (KTile sizes are
    logical K; a tile spans size/4 partitions), M tiles of the array's columns, N tiles of
    one fp32 PSUM bank."""
    kp = padded_k(spec.k)
    k_tiles = tuple(KTile(s.index, s.start, s.size, PerfMode.NONE)
                    for s in _spans(kp, min(TILE_K, arch.rows * SLOTS)))
    return TilePlan(spec=spec, k_tiles=k_tiles, m_tiles=_spans(spec.m, arch.cols),
                    n_tiles=_spans(spec.n, arch.psum_bank_bytes // 4),
                    itemsize=get_format(spec.dtype).container_bytes, acc_dtype="fp32",
                    acc_itemsize=4)


def plan_mx_layout(plan: TilePlan) -> MxLayout:
    s, cb = plan.spec, plan.itemsize
    kp = padded_k(s.k)
    a_scale = _align(s.m * kp // SLOTS * cb)
    b_off = _align(a_scale + s.m * kp // BLOCK)
    b_scale = _align(b_off + kp // SLOTS * s.n * cb)
    out = _align(b_scale + kp // BLOCK * s.n)
    return MxLayout(0, b_off, out, out + s.m * s.n * 4, a_scale_offset=a_scale,
                    b_scale_offset=b_scale, kp=kp)


class MxCodegen(StepEmitter):
    """Pass 4 for MX: DMA tiles into SBUF slots (LRU, as the dense path), then always the
    pair LdWeightMx + MatmultMx (seed 000: visitInstMatmultMx is generateLdweightMx; jmp
    generateMatmultMx), and ReadOut of finished banks."""

    def __init__(self, arch: Arch, plan: TilePlan) -> None:
        self.arch, self.plan = arch, plan
        self.layout = plan_mx_layout(plan)
        self.fmt = plan.spec.dtype
        cb = plan.itemsize
        n_max = max(n.size for n in plan.n_tiles)
        # a slot holds a tile's containers, then its scale bytes
        self.stat_scale = _align(arch.cols * cb)
        self.mov_scale = _align(n_max * cb)
        stat_slot = self.stat_scale + _align(arch.cols)
        mov_slot = self.mov_scale + _align(n_max)
        window = arch.sbuf_bytes // 4
        self.stat = _SlotCache(0, stat_slot, max(2, window // stat_slot))
        self.mov = _SlotCache(window, mov_slot, max(2, (arch.sbuf_bytes - window) // mov_slot))
        self.out: list[Instruction] = []

    @staticmethod
    def acc_byte(first: bool, last: bool) -> CalcFlags:
        """gen4 accumulate byte: START first, ACCUMULATE after, STOP last (seed 000)."""
        f = CalcFlags.START if first else CalcFlags.ACCUMULATE
        if last:
            f |= CalcFlags.STOP
        return f

    def _scale_dmas(self, src_start: int, src_step: int, dims: tuple[tuple[int, int], ...],
                    blocks: int, sbuf_offset: int) -> None:
        """One DmaLoad per quadrant: blocks 4q..4q+3 to partitions 32q..32q+3."""
        for g0 in range(0, blocks, 4):
            c = min(4, blocks - g0)
            src = AccessPattern(Space.DRAM, 0, c, src_start + g0 * src_step, dims, "e8m0",
                                partition_step=src_step)
            dst = AccessPattern(Space.SBUF, _QUADRANT * (g0 // 4), c, sbuf_offset,
                                ((1, dims[-1][1]),), "e8m0")
            self.out.append(DmaLoad(src, dst))

    def _operand(self, k: KTile, size: int, off: int, scale_at: int
                 ) -> tuple[AccessPattern, AccessPattern]:
        parts = k.size // SLOTS
        data = AccessPattern(Space.SBUF, 0, parts, off, ((1, size),), self.fmt)
        scale = AccessPattern(Space.SBUF, 0, scale_span(parts), off + scale_at, ((1, size),),
                              "e8m0")
        return data, scale

    def _stationary(self, k: KTile, m: Span) -> tuple[AccessPattern, AccessPattern]:
        """DMA the a.T tile (k, m) into SBUF if not resident; its (data, scale) patterns."""
        lay, cb = self.layout, self.plan.itemsize
        off, resident = self.stat.get(("a", k.index, m.index))
        data, scale = self._operand(k, m.size, off, self.stat_scale)
        if not resident:
            row = lay.kp // SLOTS  # containers per row of a
            src = AccessPattern(Space.DRAM, 0, data.partitions,
                                lay.a_offset + (m.start * row + k.start // SLOTS) * cb,
                                ((row, m.size),), self.fmt, partition_step=cb)
            self.out.append(DmaLoad(src, data))
            blocks_per_row = lay.kp // BLOCK
            self._scale_dmas(lay.a_scale_offset + m.start * blocks_per_row + k.start // BLOCK,
                             1, ((blocks_per_row, m.size),), k.size // BLOCK, scale.offset)
        return data, scale

    def _moving(self, k: KTile, n: Span) -> tuple[AccessPattern, AccessPattern]:
        """DMA the b tile (k, n) into SBUF if not resident; its (data, scale) patterns."""
        lay, cb, big_n = self.layout, self.plan.itemsize, self.plan.spec.n
        off, resident = self.mov.get(("b", k.index, n.index))
        data, scale = self._operand(k, n.size, off, self.mov_scale)
        if not resident:
            src = AccessPattern(Space.DRAM, 0, data.partitions,
                                lay.b_offset + ((k.start // SLOTS) * big_n + n.start) * cb,
                                ((1, n.size),), self.fmt, partition_step=big_n * cb)
            self.out.append(DmaLoad(src, data))
            self._scale_dmas(lay.b_scale_offset + (k.start // BLOCK) * big_n + n.start, big_n,
                             ((1, n.size),), k.size // BLOCK, scale.offset)
        return data, scale

    def emit_step(self, st: Step) -> None:
        sdata, sscale = self._stationary(st.k, st.m)
        mdata, mscale = self._moving(st.k, st.n)
        rg = row_group(0, sdata.partitions)
        dst = AccessPattern(Space.PSUM, 0, st.m.size, st.bank * self.arch.psum_bank_bytes,
                            ((1, st.n.size),), "fp32")
        self.out.append(LdWeightMx(sdata, sscale, 0, rg, self.fmt))
        self.out.append(MatmultMx(mdata, mscale, dst, self.acc_byte(st.first, st.last),
                                  self.fmt, self.fmt, rg, st.bank))



def lower_mx(spec: MatmulSpec, arch: Arch, *, check: bool = True) -> Lowered:
    """Lower an MX ``spec`` for a gen4 ``arch``; raises :class:`ArchError` for an arch
    without the MX path or a perf mode (seed 000: MX has none)."""
    if spec.dtype not in arch.mx_formats:
        raise ArchError(f"{spec.dtype} needs the MX path of gen4 (trn3); {arch.name} is "
                        f"gen{arch.generation}")
    if spec.perf_mode is not PerfMode.NONE:
        raise ArchError("the MX path has no perf mode (seed 000); use perf_mode none")
    plan = tile_mx(spec, arch)
    steps = legalize_groups(order_for_reuse(plan, arch), plan)
    gen = MxCodegen(arch, plan)
    program = Program(gen.emit(steps))
    if check:
        verify(program, arch, gen.layout.dram_bytes)
    return Lowered(program, plan, gen.layout)
