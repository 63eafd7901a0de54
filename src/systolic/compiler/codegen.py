"""Pass 4, dense codegen: instructions, the weight-tile cache, fp32 two-pass, DMA.

Codegen is a function of its inputs: :func:`emit` walks the ordered steps with a
:class:`DenseState` made for that one call (SBUF slots, the weight-tile cache), so two calls
on the same inputs give the same Program. They share only equal access patterns (frozen
objects, ``_PATTERNS``: one object per distinct pattern, for the memos by object
downstream), never state.

One MatMul is :func:`emit_nc_matmul`, a pure step on an explicit :class:`WeightTileState`;
the dense codegen calls it for every step and the NKI front end for every ``nc_matmul``, so
there is one path from "a matmul on these operands" to instructions:

* The WeightTileState cache (seed 000) is keyed on the (row group, column group) pair. A hit
  needs the same weights (the same SBUF pattern), the same perf signature and no
  intervening writer: then the MatMul is emitted alone. A miss emits LoadStationary, then
  MatMul; a load replaces every cached tile on the PEs it covers.
* fp32 always lowers to LoadStationary(hi), MatMul(START part), LoadStationary(lo),
  MatMul(STOP part) and then invalidates the cache (never cached).
* The generations differ in the calc-flag bits written (seed 000 "The Flag Byte"): gen2
  START/STOP only; gen3 also ACCUMULATE, unless the arch level is above 40; gen4 as gen3,
  its byte checked by the verifier to lie in {0,1,2,3,4,6} (:func:`calc_flags`).
* fp32r forces the column group to 15 (seed 000 translateToColGroup ``force``).

Operands live in device memory: a [M, K] row-major, then b [K, N], then the result [M, N];
tiles are brought into SBUF by DmaLoad into slots that the compiler manages as an LRU cache
(a tile already resident is not copied again), and results leave PSUM by ReadOut.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from functools import lru_cache

from ..arch import Arch
from ..geometry import Rect
from ..isa import (
    FULL_COL_GROUP_FORMATS,
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
    TileGroup,
    col_group,
    row_group,
)
from ..isa.generation import rules
from .schedule import ReadStep, Step
from .tiling import KTile, Span, TilePlan

__all__ = ["ALIGN", "CachedTile", "DenseState", "Layout", "SlotCache", "WeightTileState",
           "align", "calc_flags", "emit", "emit_nc_matmul", "plan_layout", "read_out",
           "writes_accumulate_bit"]

ALIGN = 64  # byte alignment of every DRAM region and SBUF slot


def align(x: int) -> int:
    return (x + ALIGN - 1) // ALIGN * ALIGN


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
    b_off = align(a_bytes)
    out_off = align(b_off + s.k * s.n * plan.itemsize)
    return Layout(0, b_off, out_off, out_off + s.m * s.n * plan.acc_itemsize)


class SlotCache:
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


# -- the weight-tile cache and one matmul -------------------------------------------------


@dataclass(frozen=True, slots=True)
class CachedTile:
    """A tile latched on the PEs ``rect`` (rows x columns) from SBUF ``stationary``, which
    occupies ``region`` (partitions x bytes, ``AccessPattern.rect``)."""

    group: tuple[int, int]
    stationary: AccessPattern
    perf_mode: PerfMode
    rect: Rect
    region: Rect


@dataclass(frozen=True, slots=True)
class WeightTileState:
    """seed 000's WeightTileState: the tiles known to be latched, at most one per tile group.

    Immutable: every operation returns a new state. Start from ``WeightTileState()`` (nothing
    known to be latched)."""

    tiles: tuple[CachedTile, ...] = ()

    def is_latched(self, group: tuple[int, int], stationary: AccessPattern,
                   perf_mode: PerfMode, rect: Rect) -> bool:
        """True when the tile of ``group`` is ``stationary`` latched on the PEs ``rect`` in
        ``perf_mode`` (seed 000: same weights, same perf signature, no intervening writer)."""
        for t in self.tiles:
            if (t.group == group and (t.stationary is stationary or t.stationary == stationary)
                    and t.perf_mode is perf_mode and t.rect == rect):
                return True
        return False

    def loaded(self, rect: Rect, tile: CachedTile | None = None) -> WeightTileState:
        """After a LoadStationary on the PEs ``rect``: every tile there (and the entry of
        ``tile``'s group: the cache is keyed on the group) is replaced, and ``tile`` (None
        for a load that is never cached, the fp32 halves) is latched."""
        r0, r1, c0, c1 = rect.row, rect.row + rect.rows, rect.col, rect.col + rect.cols
        group = None if tile is None else tile.group
        # Rect.overlaps written out, a list first (as in written): one per weight load
        kept = [t for t in self.tiles
                if not (t.rect.row < r1 and r0 < t.rect.row + t.rect.rows
                        and t.rect.col < c1 and c0 < t.rect.col + t.rect.cols)
                and (group is None or t.group != group)]
        if tile is not None:
            kept.append(tile)
        return WeightTileState(tuple(kept))

    def written(self, region: AccessPattern) -> WeightTileState:
        """After a write into SBUF ``region``: a cached tile read from there is stale."""
        if not self.tiles or region.space is not Space.SBUF:
            return self
        r = region.rect
        r0, r1, c0, c1 = r.row, r.row + r.rows, r.col, r.col + r.cols
        # Rect.overlaps written out: asked for every DMA of a kernel
        kept = tuple([t for t in self.tiles  # (a list first: no generator per call)
                      if not (t.region.row < r1 and r0 < t.region.row + t.region.rows
                              and t.region.col < c1 and c0 < t.region.col + t.region.cols)])
        return self if len(kept) == len(self.tiles) else WeightTileState(kept)


@lru_cache(maxsize=256)
def _groups(row: int, rows: int, col: int, cols: int, force: bool) -> tuple[TileGroup,
                                                                            TileGroup]:
    return row_group(row, rows), col_group(col, cols, force=force)


def writes_accumulate_bit(arch: Arch) -> bool:
    """gen2 writes only START/STOP; gen3 also ACCUMULATE, unless the arch level is above 40
    (seed 000 "The Flag Byte" and its QUIRK); gen4's dense path follows gen3. Read from the
    generation table, :mod:`systolic.isa.generation`."""
    return rules(arch.generation).writes_accumulate(arch.arch_level)


def calc_flags(arch: Arch, first: bool, last: bool) -> CalcFlags:
    """The calc flags of one MatMul of an accumulation group on ``arch``: START on the first,
    STOP on the last, ACCUMULATE on every other where the generation writes it."""
    key = (arch.generation, arch.arch_level, first, last)
    got = _FLAGS.get(key)
    if got is None:
        got = _FLAGS[key] = rules(arch.generation).calc_flags(first, last, arch.arch_level)
    return got


# calc_flags by (generation, arch level, first, last): the generation table's answer, kept
_FLAGS: dict[tuple[int, int, bool, bool], CalcFlags] = {}


def emit_nc_matmul(state: WeightTileState, arch: Arch, *, stationary: AccessPattern,
                   moving: AccessPattern, dst: AccessPattern, flags: CalcFlags,
                   perf_mode: PerfMode = PerfMode.NONE, dtype: str | None = None,
                   tile_position: tuple[int, int] | None = None,
                   tile_size: tuple[int, int] | None = None,
                   zero_points: tuple[int, int] = (0, 0),
                   ) -> tuple[list[Instruction], WeightTileState]:
    """The instructions of ONE dense matmul ``dst[M, N] (+)= stationary[K, M].T @ moving[K, N]``
    and the weight-tile cache state after them. Pure: ``state`` is not changed.

    ``stationary`` and ``moving`` are SBUF patterns (K on partitions; DoubleRow's pair of
    contraction rows as the leading free dim of 2), ``dst`` the PSUM pattern (M on
    partitions). ``flags`` are the group's calc flags as for a single pass (START on the
    first matmul of an accumulation group, STOP on the last, ACCUMULATE where the generation
    writes it: :func:`calc_flags`). ``dtype`` is the stationary format (default
    ``stationary.dtype``); ``perf_mode`` is copied to both instructions. ``tile_position``
    (row, column) and ``tile_size`` (rows, columns) place the tile on the array (NKI
    ``tile_position`` / ``tile_size``); they default to (stationary.partition,
    dst.partition) and (stationary.partitions, M) and give the tile group by the quadrant
    rule. A tile is latched into the array rows its SBUF partitions name, so the row must be
    ``stationary.partition`` (and ``moving.partition``) and the column ``dst.partition``
    for the Program to verify. ``zero_points`` is (stationary, moving), integer formats
    only.

    Returns:

    * a cache hit (same group, same SBUF pattern, perf mode and PEs, no write since):
      ``[MatMul]``;
    * a miss: ``[LoadStationary, MatMul]``, the tile cached;
    * fp32: ``[LoadStationary(hi), MatMul(flags without STOP, fp32_pass=Fp32Pass.HI),
      LoadStationary(lo), MatMul(flags without START, fp32_pass=Fp32Pass.LO)]`` and an empty cache
      (seed 000: fp32 is never cached).

    A DMA (or any write) into SBUF must be told to the state with
    :meth:`WeightTileState.written` before the next call. Nothing is checked here; the
    Program is checked by :func:`systolic.verify`.
    """
    dtype = stationary.dtype if dtype is None else dtype
    row, col = (stationary.partition, dst.partition) if tile_position is None else tile_position
    rows, cols = ((stationary.partitions, stationary.dims[-1][1]) if tile_size is None
                  else tile_size)
    rg, cg = _groups(row, rows, col, cols, dtype in FULL_COL_GROUP_FORMATS)
    rect = Rect(row, rows, col, cols)
    zp_stationary, zp_moving = zero_points

    if dtype == "fp32":
        # seed 000: LoadWeights, MatMul(START), LoadWeights, MatMul(STOP), invalidate.
        second = flags & ~CalcFlags.START
        if writes_accumulate_bit(arch):
            second |= CalcFlags.ACCUMULATE
        return [LoadStationary(stationary, col, rg, cg, perf_mode, Fp32Pass.HI),
                MatMul(moving=moving, dst=dst, flags=flags & ~CalcFlags.STOP,
                       stationary_dtype=dtype, stationary_partition=row,
                       row_group=rg, col_group=cg,
                       perf_mode=perf_mode, zp_moving=zp_moving, zp_stationary=zp_stationary,
                       fp32_pass=Fp32Pass.HI),
                LoadStationary(stationary, col, rg, cg, perf_mode, Fp32Pass.LO),
                MatMul(moving=moving, dst=dst, flags=second,
                       stationary_dtype=dtype, stationary_partition=row,
                       row_group=rg, col_group=cg,
                       perf_mode=perf_mode, zp_moving=zp_moving, zp_stationary=zp_stationary,
                       fp32_pass=Fp32Pass.LO)], WeightTileState()
    mm = MatMul(moving=moving, dst=dst, flags=flags,
                stationary_dtype=dtype, stationary_partition=row,
                row_group=rg, col_group=cg,
                perf_mode=perf_mode, zp_moving=zp_moving, zp_stationary=zp_stationary)
    if state.is_latched((rg, cg), stationary, perf_mode, rect):
        return [mm], state  # WeightTileState hit: the weights are warm, the MatMul alone
    tile = CachedTile((rg, cg), stationary, perf_mode, rect, stationary.rect)
    return [LoadStationary(stationary, col, rg, cg, perf_mode), mm], state.loaded(rect, tile)


# -- the dense codegen step ----------------------------------------------------------------


@dataclass
class DenseState:
    """What dense codegen carries from one step to the next, made fresh by each :func:`emit`
    call: the SBUF slots of stationary and moving tiles, and the weight-tile cache."""

    stat: SlotCache
    mov: SlotCache
    weights: WeightTileState = field(default_factory=WeightTileState)
    # equal patterns built once and shared: a product names the same few SBUF slots, PSUM
    # banks and (for a reloaded operand) DRAM tiles thousands of times, and shared objects
    # make every later dict lookup on them (verify, the simulator, the timing's memos by
    # object) cheaper. ``for_plan`` hands every emit call the one module-wide dict
    # (_PATTERNS): the products of a sweep name mostly the same patterns (issue 20), and a
    # frozen pattern is safe to share between Programs as it is within one
    patterns: dict[tuple[object, ...], AccessPattern] = field(default_factory=dict)

    def ap(self, space: Space, partitions: int, offset: int,
           dims: tuple[tuple[int, int], ...], dtype: str, partition_step: int = 0
           ) -> AccessPattern:
        """``AccessPattern(space, 0, partitions, offset, dims, dtype, partition_step)``, the
        same object for equal arguments (within one emit call, and across calls while
        ``_PATTERNS`` keeps it)."""
        return _shared(self.patterns, space, partitions, offset, dims, dtype, partition_step)

    @classmethod
    def for_plan(cls, arch: Arch, plan: TilePlan, *, stat_slots: int | None = None
                 ) -> DenseState:
        """The state for ``plan``: a quarter of SBUF for stationary tiles, the rest for
        moving ones. ``stat_slots`` (private: systolic.extrapolate's K stand-ins) uses only
        that many stationary slots, the first of the window (at least 2, at most the
        window's); nothing else changes: the moving window, the slot size and the keys."""
        isz = plan.itemsize
        fold = max(k.fold for k in plan.k_tiles)
        stat_slot = align(fold * arch.cols * isz)
        mov_slot = align(fold * max(n.size for n in plan.n_tiles) * isz)
        stat_window = arch.sbuf_bytes // 4
        count = max(2, stat_window // stat_slot)
        if stat_slots is not None:
            if not 2 <= stat_slots <= count:
                raise ValueError(f"stat_slots must be 2 .. {count}, not {stat_slots}")
            count = stat_slots
        return cls(SlotCache(0, stat_slot, count),
                   SlotCache(stat_window, mov_slot,
                             max(2, (arch.sbuf_bytes - stat_window) // mov_slot)),
                   patterns=_PATTERNS)


# DenseState.ap's patterns, kept across emit calls (see DenseState.patterns), and
# read_out's; cleared when full (_shared), so a long run of distinct products holds a
# bounded number
_PATTERNS: dict[tuple[object, ...], AccessPattern] = {}
_PATTERNS_MAX = 1 << 16


def _shared(patterns: dict[tuple[object, ...], AccessPattern], space: Space, partitions: int,
            offset: int, dims: tuple[tuple[int, int], ...], dtype: str,
            partition_step: int = 0) -> AccessPattern:
    """``AccessPattern(space, 0, partitions, offset, dims, dtype, partition_step)``, the
    one kept in ``patterns`` for equal arguments."""
    # Space hashes by identity, in C (isa/fields.py)
    key = (space, partitions, offset, dims, dtype, partition_step)
    got = patterns.get(key)
    if got is None:
        if len(patterns) >= _PATTERNS_MAX:  # only sharing is lost: equal patterns are equal
            patterns.clear()
        got = patterns[key] = AccessPattern(space, 0, partitions, offset, dims, dtype,
                                            partition_step)
    return got


def read_out(arch: Arch, plan: TilePlan, out_offset: int, r: ReadStep) -> ReadOut:
    """ReadOut of the finished output tile (m, n) from its bank to the result in DRAM."""
    s, isz, acc = plan.spec, plan.acc_itemsize, plan.acc_dtype
    # the patterns shared as DenseState.ap's are (_PATTERNS)
    src = _shared(_PATTERNS, Space.PSUM, r.m.size, r.bank * arch.psum_bank_bytes,
                  ((1, r.n.size),), acc)
    dst = _shared(_PATTERNS, Space.DRAM, r.m.size,
                  out_offset + (r.m.start * s.n + r.n.start) * isz, ((1, r.n.size),), acc,
                  s.n * isz)
    return ReadOut(src, dst)


def _stationary(st: DenseState, plan: TilePlan, lay: Layout, k: KTile, m: Span,
                out: list[Instruction]) -> AccessPattern:
    """DMA the a.T tile (k, m) into SBUF if not resident; return its SBUF pattern."""
    s, isz = plan.spec, plan.itemsize
    fold = k.fold  # read once: a property of the perf mode's (issue 20)
    parts = k.size // fold  # k.partitions
    off, resident = st.stat.get(("a", k.index, m.index, fold))
    if fold == 2:
        sb_dims: tuple[tuple[int, int], ...] = ((m.size, 2), (1, m.size))
        dr_dims: tuple[tuple[int, int], ...] = ((1, 2), (s.k, m.size))
    else:
        sb_dims, dr_dims = ((1, m.size),), ((s.k, m.size),)
    sb = st.ap(Space.SBUF, parts, off, sb_dims, s.dtype)
    if not resident:
        start = lay.a_offset + (m.start * s.k + k.start) * isz
        src = st.ap(Space.DRAM, parts, start, dr_dims, s.dtype, fold * isz)
        out.append(DmaLoad(src, sb))
        st.weights = st.weights.written(sb)
    return sb


def _moving(st: DenseState, plan: TilePlan, lay: Layout, k: KTile, n: Span
            ) -> tuple[AccessPattern, DmaLoad | None]:
    """The b tile (k, n)'s SBUF pattern, and the DmaLoad to bring it there if not resident."""
    s, isz = plan.spec, plan.itemsize
    fold = k.fold
    parts = k.size // fold  # k.partitions
    off, resident = st.mov.get(("b", k.index, n.index, fold))
    if fold == 2:
        sb_dims: tuple[tuple[int, int], ...] = ((n.size, 2), (1, n.size))
        dr_dims: tuple[tuple[int, int], ...] = ((s.n, 2), (1, n.size))
    else:
        sb_dims, dr_dims = ((1, n.size),), ((1, n.size),)
    sb = st.ap(Space.SBUF, parts, off, sb_dims, s.dtype)
    if not resident:
        start = lay.b_offset + (k.start * s.n + n.start) * isz
        src = st.ap(Space.DRAM, parts, start, dr_dims, s.dtype, fold * s.n * isz)
        # no weights.written(sb): the moving window never holds a stationary tile
        return sb, DmaLoad(src, sb)
    return sb, None


def emit(arch: Arch, plan: TilePlan, steps: list[Step | ReadStep], *,
         stat_slots: int | None = None) -> tuple[list[Instruction], Layout]:
    """Pass 4 for the dense formats: the instructions of ``steps`` and the DRAM layout
    (``stat_slots``: :meth:`DenseState.for_plan`'s, private)."""
    lay = plan_layout(plan)
    st = DenseState.for_plan(arch, plan, stat_slots=stat_slots)
    out: list[Instruction] = []
    spec = plan.spec
    for step in steps:
        if isinstance(step, ReadStep):
            out.append(read_out(arch, plan, lay.out_offset, step))
            continue
        sb = _stationary(st, plan, lay, step.k, step.m, out)
        mv, dma = _moving(st, plan, lay, step.k, step.n)
        dst = st.ap(Space.PSUM, step.m.size, step.bank * arch.psum_bank_bytes,
                    ((1, step.n.size),), plan.acc_dtype)
        insts, st.weights = emit_nc_matmul(
            st.weights, arch, stationary=sb, moving=mv, dst=dst,
            flags=calc_flags(arch, step.first, step.last), perf_mode=step.k.perf_mode,
            dtype=spec.dtype, zero_points=(spec.zp_a, spec.zp_b))
        if dma is not None:  # the moving tile arrives just before the first MatMul reads it
            insts.insert(next(i for i, x in enumerate(insts) if isinstance(x, MatMul)), dma)
        out.extend(insts)
    return out, lay
