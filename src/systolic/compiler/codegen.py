"""Pass 4, codegen: instructions, the weight-tile cache, fp32 two-pass.

The generations differ here only in which calc-flag bits are written (gen2: START/STOP
only; gen3: also ACCUMULATE, unless the arch level is above 40; gen4 as gen3), and that
rule is read from the generation table, :mod:`systolic.generation`.

The WeightTileState cache (seed 000) is keyed on the (row group, column group) pair. A hit
needs the same weights (SBUF address), the same perf signature and no intervening writer:
then the MatMul is emitted alone. A miss, or a changed tiling config, emits LoadStationary
then MatMul. fp32 always lowers to LoadStationary(hi), MatMul(START part), LoadStationary(lo),
MatMul(STOP part) and then invalidates the cache (never cached).

Operands live in device memory: a [M, K] row-major, then b [K, N], then the result [M, N];
tiles are brought into SBUF by DmaLoad into slots that the compiler manages as an LRU cache
(a tile already resident is not copied again), and results leave PSUM by ReadOut.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from ..arch import Arch
from ..generation import rules
from ..isa import (
    AccessPattern,
    CalcFlags,
    DmaLoad,
    Fp32Pass,
    Instruction,
    LoadStationary,
    MatMul,
    PerfMode,
    ReadOut,
    Space,
    col_group,
    row_group,
)
from .schedule import ReadStep, Step
from .tiling import KTile, Span, TilePlan

__all__ = ["Codegen", "Layout", "StepEmitter", "codegen_for"]

_ALIGN = 64


def _align(x: int) -> int:
    return (x + _ALIGN - 1) // _ALIGN * _ALIGN


@dataclass(frozen=True, slots=True)
class Layout:
    """Where the operands and the result sit in device memory (byte offsets)."""

    a_offset: int
    b_offset: int
    out_offset: int
    dram_bytes: int


def plan_layout(plan: TilePlan) -> Layout:
    s = plan.spec
    a_bytes = s.m * s.k * plan.itemsize
    b_off = _align(a_bytes)
    out_off = _align(b_off + s.k * s.n * plan.itemsize)
    return Layout(0, b_off, out_off, out_off + s.m * s.n * plan.acc_itemsize)


class _SlotCache:
    """SBUF slots of a fixed size in a byte window, reused least-recently first."""

    def __init__(self, base: int, slot_bytes: int, count: int) -> None:
        self.base, self.slot_bytes = base, slot_bytes
        self.free = list(range(count - 1, -1, -1))
        self.held: OrderedDict[object, int] = OrderedDict()

    def get(self, key: object) -> tuple[int, bool]:
        """(byte offset, already resident) for a tile key; evicts the LRU tile if full."""
        if key in self.held:
            self.held.move_to_end(key)
            return self.base + self.held[key] * self.slot_bytes, True
        slot = self.free.pop() if self.free else self.held.popitem(last=False)[1]
        self.held[key] = slot
        return self.base + slot * self.slot_bytes, False


@dataclass
class _CacheEntry:
    offset: int
    perf: PerfMode
    half: Fp32Pass
    rect: tuple[int, int, int, int]


class StepEmitter:
    """What every codegen shares: walk the ordered steps, and read finished tiles out.

    Subclasses set ``arch``, ``plan``, ``layout`` and ``out``, and define ``emit_step``."""

    arch: Arch
    plan: TilePlan
    layout: Any  # a Layout, or the MX path's layout: both have out_offset
    out: list[Instruction]

    def emit_step(self, step: Step) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def emit_read(self, r: ReadStep) -> None:
        """ReadOut of the finished output tile (m, n) from its bank to the result in DRAM."""
        s, isz, acc = self.plan.spec, self.plan.acc_itemsize, self.plan.acc_dtype
        src = AccessPattern(Space.PSUM, 0, r.m.size, r.bank * self.arch.psum_bank_bytes,
                            ((1, r.n.size),), acc)
        dst = AccessPattern(Space.DRAM, 0, r.m.size,
                            self.layout.out_offset + (r.m.start * s.n + r.n.start) * isz,
                            ((1, r.n.size),), acc, partition_step=s.n * isz)
        self.out.append(ReadOut(src, dst))

    def emit(self, steps: list[Step | ReadStep]) -> list[Instruction]:
        for s in steps:
            if isinstance(s, Step):
                self.emit_step(s)
            else:
                self.emit_read(s)
        return self.out


class Codegen(StepEmitter):
    """Dense codegen; the calc-flag bits of each generation come from its rules."""

    def __init__(self, arch: Arch, plan: TilePlan) -> None:
        self.arch, self.plan = arch, plan
        self.layout = plan_layout(plan)
        isz = plan.itemsize
        fold = max(k.fold for k in plan.k_tiles)
        stat_slot = _align(fold * arch.cols * isz)
        mov_slot = _align(fold * max(n.size for n in plan.n_tiles) * isz)
        stat_window = arch.sbuf_bytes // 4
        self.stat = _SlotCache(0, stat_slot, max(2, stat_window // stat_slot))
        self.mov = _SlotCache(stat_window, mov_slot,
                              max(2, (arch.sbuf_bytes - stat_window) // mov_slot))
        self.cache: dict[tuple[int, int], _CacheEntry] = {}
        self.out: list[Instruction] = []

    # -- calc flags ---------------------------------------------------------------------
    def flags(self, first: bool, last: bool) -> CalcFlags:
        return rules(self.arch.generation).calc_flags(first, last, self.arch.arch_level)

    # -- operands ------------------------------------------------------------------------
    def _stationary(self, k: KTile, m: Span) -> AccessPattern:
        """DMA the a.T tile (k, m) into SBUF if not resident; return its SBUF pattern."""
        s, isz = self.plan.spec, self.plan.itemsize
        off, resident = self.stat.get(("a", k.index, m.index, k.fold))
        if k.fold == 2:
            sb_dims: tuple[tuple[int, int], ...] = ((m.size, 2), (1, m.size))
            dr_dims: tuple[tuple[int, int], ...] = ((1, 2), (s.k, m.size))
        else:
            sb_dims, dr_dims = ((1, m.size),), ((s.k, m.size),)
        sb = AccessPattern(Space.SBUF, 0, k.partitions, off, sb_dims, s.dtype)
        if not resident:
            start = self.layout.a_offset + (m.start * s.k + k.start) * isz
            src = AccessPattern(Space.DRAM, 0, k.partitions, start, dr_dims, s.dtype,
                                partition_step=k.fold * isz)
            self.out.append(DmaLoad(src, sb))
            self._invalidate_writer(off)
        return sb

    def _moving(self, k: KTile, n: Span) -> AccessPattern:
        s, isz = self.plan.spec, self.plan.itemsize
        off, resident = self.mov.get(("b", k.index, n.index, k.fold))
        if k.fold == 2:
            sb_dims: tuple[tuple[int, int], ...] = ((n.size, 2), (1, n.size))
            dr_dims: tuple[tuple[int, int], ...] = ((s.n, 2), (1, n.size))
        else:
            sb_dims, dr_dims = ((1, n.size),), ((1, n.size),)
        sb = AccessPattern(Space.SBUF, 0, k.partitions, off, sb_dims, s.dtype)
        if not resident:
            start = self.layout.b_offset + (k.start * s.n + n.start) * isz
            src = AccessPattern(Space.DRAM, 0, k.partitions, start, dr_dims, s.dtype,
                                partition_step=k.fold * s.n * isz)
            self.out.append(DmaLoad(src, sb))
        return sb

    def _psum(self, m: Span, n: Span, bank: int) -> AccessPattern:
        return AccessPattern(Space.PSUM, 0, m.size, bank * self.arch.psum_bank_bytes,
                             ((1, n.size),), self.plan.acc_dtype)

    def _invalidate_writer(self, offset: int) -> None:
        """A DMA into a slot is an intervening writer for any cached tile read from it."""
        for key in [k for k, e in self.cache.items() if e.offset == offset]:
            del self.cache[key]

    # -- emission ------------------------------------------------------------------------
    def _load(self, sb: AccessPattern, k: KTile, m: Span,
              half: Fp32Pass = Fp32Pass.FULL) -> None:
        rg, cg = row_group(0, k.partitions), col_group(0, m.size)
        rect = (0, k.partitions, 0, m.size)
        hit = self.cache.get((rg, cg))
        if (half is Fp32Pass.FULL and hit is not None and hit.offset == sb.offset
                and hit.perf == k.perf_mode and hit.half == half and hit.rect == rect):
            return  # WeightTileState hit: the weights are warm, emit the MatMul alone
        self.out.append(LoadStationary(sb, 0, rg, cg, k.perf_mode, half))
        # a load replaces any tile on the PEs it covers
        for key in [key for key, e in self.cache.items() if _rect_overlap(e.rect, rect)]:
            del self.cache[key]
        if half is Fp32Pass.FULL:
            self.cache[(rg, cg)] = _CacheEntry(sb.offset, k.perf_mode, half, rect)

    def _matmul(self, step: Step, flags: CalcFlags,
                two_pass: Fp32Pass = Fp32Pass.FULL) -> None:
        k, m = step.k, step.m
        spec = self.plan.spec
        self.out.append(MatMul(
            moving=self._moving(k, step.n), dst=self._psum(m, step.n, step.bank), flags=flags,
            stationary_dtype=spec.dtype, stationary_partition=0,
            row_group=row_group(0, k.partitions), col_group=col_group(0, m.size),
            perf_mode=k.perf_mode, zp_moving=spec.zp_b, zp_stationary=spec.zp_a,
            fp32_pass=two_pass,
        ))

    def emit_step(self, step: Step) -> None:
        sb = self._stationary(step.k, step.m)
        if self.plan.spec.dtype == "fp32":
            # seed 000: LoadWeights, MatMul(START), LoadWeights, MatMul(STOP), invalidate.
            self._load(sb, step.k, step.m, Fp32Pass.HI)
            self._matmul(step, self.flags(step.first, False), two_pass=Fp32Pass.HI)
            self._load(sb, step.k, step.m, Fp32Pass.LO)
            self._matmul(step, self.flags(False, step.last), two_pass=Fp32Pass.LO)
            self.cache.clear()
            return
        self._load(sb, step.k, step.m)
        self._matmul(step, self.flags(step.first, step.last))


def _rect_overlap(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> bool:
    return a[0] < b[0] + b[1] and b[0] < a[0] + a[1] and a[2] < b[2] + b[3] and b[2] < a[2] + a[3]


def codegen_for(arch: Arch, plan: TilePlan) -> Codegen:
    return Codegen(arch, plan)
