"""Program checks: order, accumulation groups, banks, limits, arch gates.

:func:`verify` walks a Program once, tracking what the hardware would hold (latched weight
tiles, open and finished PSUM regions), and raises :class:`VerifyError` naming the
instruction index and what to do. Every executor runs it first, so a bad Program never
reaches numpy and never yields a silently wrong number.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from math import prod
from typing import Any, NoReturn

from ..arch import Arch, get_arch
from ..dtypes import accumulator_formats, get_format
from ..errors import ShapeError, SystolicError, VerifyError
from ..geometry import Rect
from ..isa import (
    FULL_COL_GROUP_FORMATS,
    AccessPattern,
    CalcFlags,
    DmaCopy,
    DmaIndirect,
    DmaLoad,
    Fp32Pass,
    Group,
    Instruction,
    LdWeightMx,
    LoadStationary,
    MatMul,
    MatmultMx,
    PerfMode,
    Program,
    ReadOut,
    Space,
    TileGroup,
    col_group,
    row_group,
    tile_position_problem,
)
from ..isa.generation import rules
from ..memory import check_bounds, psum_bank
from .engines import check_engine, check_indirect, replay_engines
from .mx import check_ld_weight_mx, check_matmult_mx
from .select import CHECKS as SELECT_CHECKS

__all__ = ["Checker", "Tile", "verify"]

@dataclass(frozen=True, slots=True)
class Tile:
    """A latched weight tile: array rows [row, row+rows), columns [col, col+cols)."""

    row: int
    rows: int
    col: int
    cols: int
    k: int
    dtype: str
    perf_mode: PerfMode
    fp32_pass: Fp32Pass
    index: int  # the instruction that latched it
    mx: bool = False  # latched by an LdWeightMx (only a MatmultMx may use it)

    @property
    def rect(self) -> Rect:
        return Rect(self.row, self.rows, self.col, self.cols)

    def overlaps(self, other: Tile) -> bool:
        # Rect.overlaps written out: the verifier asks this for every latched tile per load
        return (self.row < other.row + other.rows and other.row < self.row + self.rows
                and self.col < other.col + other.cols and other.col < self.col + self.cols)


# A Tile's fields but its index: what a LoadStationary's stateless checks leave to latch
_TileFields = tuple[int, int, int, int, int, str, PerfMode, Fp32Pass]


@dataclass
class Checker:
    """The verifier's state machine; :meth:`step` checks and applies one instruction."""

    arch: Arch
    dram_bytes: int | None = None
    tiles: list[Tile] = field(default_factory=list)
    # PSUM region -> (state, index of the START): state "open" or "done" (awaiting read-out)
    regions: dict[Rect, tuple[str, int]] = field(default_factory=dict)
    # Instructions whose stateless checks (everything that depends only on the instruction,
    # the Arch and dram_bytes) passed -> what the stateful checks need. A Program repeats
    # few distinct instructions (the same SBUF slots, banks and tiles over and over), so an
    # equal instruction later runs only the checks that depend on the machine state
    # (latched tiles, PSUM groups): the same checks in the same order, each still made.
    memo: dict[Instruction, Any] = field(default_factory=dict)

    # -- helpers -------------------------------------------------------------------------
    def _fail(self, i: int, msg: str) -> NoReturn:
        raise VerifyError(i, msg)

    def _bounds(self, i: int, ap: AccessPattern, role: str, space: Space) -> None:
        if ap.space is not space:
            self._fail(i, f"{role} must be in {space.value}, not {ap.space.value}")
        try:
            check_bounds(ap, self.arch, self.dram_bytes)
        except ShapeError as exc:
            self._fail(i, f"{role}: {exc}")

    def _format(self, i: int, dtype: str, role: str, mx: bool = False) -> None:
        if get_format(dtype).kind == "mx" and not mx:
            self._fail(i, f"{role} format {dtype} is block-scaled: it runs only on the MX pair "
                          f"LdWeightMx/MatmultMx, not LoadStationary/MatMul")
        if not self.arch.supports_format(dtype):
            self._fail(i, f"{role} format {dtype} is not supported on {self.arch.name} "
                          f"(gen{self.arch.generation}); use one of "
                          f"{', '.join(self.arch.formats + self.arch.mx_formats)}")

    def _perf(self, i: int, mode: PerfMode, dtype: str) -> None:
        if not self.arch.supports_perf_mode(mode.spelling):
            self._fail(i, f"perf mode {mode.spelling} is not supported on {self.arch.name} "
                          f"(gen{self.arch.generation}); use perf_mode none")
        if mode.k_fold == 2 and get_format(dtype).family != "fp8":
            self._fail(i, f"{mode.spelling} packs two fp8 elements per PE; {dtype} is not fp8")

    def _tile_k(self, ap: AccessPattern, mode: PerfMode, i: int, role: str) -> int:
        lead = prod(n for _, n in ap.dims[:-1])
        if lead != mode.k_fold:
            self._fail(i, f"{role} with perf mode {mode.spelling} needs "
                          f"{mode.k_fold} contraction element(s) per partition "
                          f"(leading free dims), got {lead}")
        return ap.partitions * lead

    def _open_region(self, i: int, reg: Rect) -> None:
        for other, (state, start) in list(self.regions.items()):
            if other.overlaps(reg):
                if state == "done":
                    self._fail(i, f"START over a PSUM result finished at or after instruction "
                                  f"{start} that was never read out; add a ReadOut first")
                if other != reg:
                    self._fail(i, f"START over part of an accumulation group opened at "
                                  f"instruction {start}; groups must not overlap")
                self._fail(i, f"START into a region whose group (opened at instruction "
                              f"{start}) never saw STOP")
        self.regions[reg] = ("open", i)

    def _accumulate(self, i: int, dst: AccessPattern, flags: CalcFlags) -> None:
        reg = dst.rect
        try:
            psum_bank(dst, self.arch)
        except ShapeError as exc:
            self._fail(i, str(exc))
        self._regions(i, reg, flags)

    def _regions(self, i: int, reg: Rect, flags: CalcFlags) -> None:
        """The accumulation-group bookkeeping of a compute instruction (state)."""
        if CalcFlags.START in flags:
            self._open_region(i, reg)
        else:
            state = self.regions.get(reg)
            if state is None or state[0] != "open":
                what = "ACCUMULATE" if CalcFlags.STOP not in flags else "STOP"
                self._fail(i, f"{what} into a PSUM region no START opened; flag the first "
                              f"MatMul of the group START")
        if CalcFlags.STOP in flags:
            self.regions[reg] = ("done", self.regions[reg][1])

    def _flags_for_gen(self, i: int, flags: CalcFlags) -> None:
        """The generation table's calc-byte rule, the same one the encoder applies."""
        if not isinstance(flags, CalcFlags):
            self._fail(i, f"flags must be CalcFlags (START, STOP, ACCUMULATE or'd together), "
                          f"not {flags!r}")
        problem = rules(self.arch.generation).calc_problem(flags, self.arch.arch_level)
        if problem:
            self._fail(i, problem)

    def _fp32_pass(self, i: int, value: object) -> Fp32Pass:
        if not isinstance(value, Fp32Pass):
            names = ", ".join(p.spelling for p in Fp32Pass)
            self._fail(i, f"fp32_pass must be an Fp32Pass ({names}), not {value!r}")
        return value

    # -- instructions --------------------------------------------------------------------
    def step(self, i: int, ins: Instruction) -> None:
        replay = _REPLAY.get(type(ins))
        if replay is not None:
            try:
                memo = self.memo.get(ins, _MISS)
            except TypeError:  # an unhashable field: no memo, every check runs
                memo = _MISS
            if memo is not _MISS and _typed(ins):
                try:
                    replay(self, i, ins, memo)
                except VerifyError:
                    raise
                except SystolicError as exc:
                    raise VerifyError(i, str(exc)) from None
                return
        try:
            if isinstance(ins, LoadStationary):
                memo = self._load(i, ins)
            elif isinstance(ins, MatMul):
                memo = self._matmul(i, ins)
            elif isinstance(ins, LdWeightMx):
                self._ld_mx(i, ins)
            elif isinstance(ins, MatmultMx):
                self._mm_mx(i, ins)
            elif isinstance(ins, DmaLoad):
                self._dma(i, ins)
                memo = None
            elif isinstance(ins, ReadOut):
                memo = self._readout(i, ins)
            elif type(ins) in SELECT_CHECKS:  # selection, top-8, gather, random kinds
                SELECT_CHECKS[type(ins)](self, i, ins)
                memo = None
            elif isinstance(ins, DmaIndirect):
                check_indirect(self, i, ins)
                memo = None
            elif isinstance(ins, (*Group.ELEMENTWISE, DmaCopy)):
                check_engine(self, i, ins)
                memo = None
            else:
                self._fail(i, f"unknown instruction {type(ins).__name__}")
        except VerifyError:
            raise
        except SystolicError as exc:
            raise VerifyError(i, str(exc)) from None
        if replay is not None and _typed(ins):
            with suppress(TypeError):
                self.memo[ins] = memo

    def _latch(self, tile: Tile) -> None:
        self.tiles = [t for t in self.tiles if not t.overlaps(tile)]
        self.tiles.append(tile)

    def _find_tile(self, i: int, row: int, rows: int, col: int, cols: int) -> Tile:
        for t in self.tiles:
            if (t.row, t.rows, t.col, t.cols) == (row, rows, col, cols):
                return t
        self._fail(i, f"no stationary tile latched at rows {row}..{row + rows - 1}, columns "
                      f"{col}..{col + cols - 1}; emit a LoadStationary of that tile first")

    def _load(self, i: int, ins: LoadStationary) -> _TileFields:
        src = ins.src
        self._bounds(i, src, "LoadStationary src", Space.SBUF)
        self._format(i, src.dtype, "stationary")
        self._perf(i, ins.perf_mode, src.dtype)
        k = self._tile_k(src, ins.perf_mode, i, "stationary")
        m = src.dims[-1][1]
        if src.partitions > self.arch.rows:
            self._fail(i, f"stationary K spans {src.partitions} partitions; the array has "
                          f"{self.arch.rows} rows")
        if ins.column < 0 or ins.column + m > self.arch.cols:
            self._fail(i, f"stationary M = {m} at column {ins.column} exceeds the "
                          f"{self.arch.cols} array columns; split M into tiles of "
                          f"{self.arch.cols}")
        split = self._fp32_pass(i, ins.fp32_pass)
        if split is not Fp32Pass.FULL and src.dtype != "fp32":
            self._fail(i, "the hi/lo split is the fp32 two-pass lowering; use fp32_pass=full")
        self._groups(i, ins.row_group, ins.col_group, src.partition, src.partitions,
                     ins.column, m, force_col=src.dtype in FULL_COL_GROUP_FORMATS)
        fields: _TileFields = (src.partition, src.partitions, ins.column, m, k, src.dtype,
                               ins.perf_mode, split)
        self._latch(Tile(*fields, i))
        return fields

    def _load_state(self, i: int, ins: LoadStationary, fields: _TileFields) -> None:
        self._latch(Tile(*fields, i))

    def _position(self, i: int, axis: str, pos: int, size: int) -> None:
        problem = tile_position_problem(pos, size, self.arch.quadrant)
        if problem:
            self._fail(i, f"tile {axis} {pos}..{pos + size - 1}: {problem}")

    def _groups(self, i: int, rg: TileGroup, cg: TileGroup, row: int, rows: int, col: int,
                cols: int, force_col: bool) -> None:
        q = self.arch.quadrant
        self._position(i, "rows", row, rows)
        if not force_col:
            self._position(i, "columns", col, cols)
        want_r, want_c = row_group(row, rows, q), col_group(col, cols, force_col, q)
        if (rg, cg) != (want_r, want_c):
            self._fail(i, f"tile group (row {rg}, col {cg}) does not match the tile's position: "
                          f"expected (row {want_r}, col {want_c}) by the quadrant rule")

    def _matmul(self, i: int, ins: MatMul) -> tuple[int, Rect]:
        mv, dst = ins.moving, ins.dst
        self._bounds(i, mv, "MatMul moving", Space.SBUF)
        self._bounds(i, dst, "MatMul dst", Space.PSUM)
        self._format(i, mv.dtype, "moving")
        self._format(i, ins.stationary_dtype, "stationary")
        self._perf(i, ins.perf_mode, mv.dtype)
        fam = {get_format(d).family == "fp32" for d in (mv.dtype, ins.stationary_dtype)}
        if len(fam) > 1:
            self._fail(i, f"fp32-family operands pair only with fp32-family ones: "
                          f"{ins.stationary_dtype} x {mv.dtype}")
        ints = {get_format(d).is_int for d in (mv.dtype, ins.stationary_dtype)}
        if len(ints) > 1:
            self._fail(i, f"integer operands pair only with integers: "
                          f"{ins.stationary_dtype} x {mv.dtype}")
        if {mv.dtype, ins.stationary_dtype} == {"fp8_e4m3", "fp8_e4m3fn"}:
            self._fail(i, "fp8_e4m3fn does not mix with the legacy fp8_e4m3 (NKI docs)")
        if not ints.pop() and (ins.zp_moving or ins.zp_stationary):
            self._fail(i, "zero points belong to the integer path")
        k = self._tile_k(mv, ins.perf_mode, i, "moving")
        m = dst.partitions
        n = mv.dims[-1][1]
        accs = accumulator_formats(mv.dtype, self.arch.generation)
        if dst.dtype not in accs:
            self._fail(i, f"the PSUM destination of a {mv.dtype} MatMul is "
                          f"{' or '.join(accs)}, not {dst.dtype}")
        acc = dst.dtype
        bank_elems = self.arch.psum_bank_bytes // get_format(acc).container_bytes
        if n > bank_elems or dst.free_elems != n:
            self._fail(i, f"moving N = {n} must equal the destination's {dst.free_elems} and "
                          f"fit one PSUM bank ({bank_elems} {acc}); split N into tiles")
        self._matmul_tile(i, ins, k)
        self._groups(i, ins.row_group, ins.col_group, mv.partition, mv.partitions,
                     dst.partition, m,
                     force_col=ins.stationary_dtype in FULL_COL_GROUP_FORMATS)
        self._flags_for_gen(i, ins.flags)
        self._fp32_pass(i, ins.fp32_pass)
        self._accumulate(i, dst, ins.flags)
        return k, dst.rect

    def _matmul_tile(self, i: int, ins: MatMul, k: int) -> None:
        """The MatMul checks against the latched tile (state)."""
        mv, dst = ins.moving, ins.dst
        tile = self._find_tile(i, mv.partition, mv.partitions, dst.partition, dst.partitions)
        if ins.stationary_partition != tile.row or ins.stationary_dtype != tile.dtype:
            self._fail(i, f"MatMul names stationary {ins.stationary_dtype} at partition "
                          f"{ins.stationary_partition}, but the latched tile (instruction "
                          f"{tile.index}) is {tile.dtype} at partition {tile.row}")
        if tile.perf_mode != ins.perf_mode:
            self._fail(i, f"perf mode {ins.perf_mode.spelling} differs from the latched tile's "
                          f"{tile.perf_mode.spelling} (instruction {tile.index})")
        if tile.k != k:
            self._fail(i, f"moving K = {k} differs from the latched tile's K = {tile.k}")

    def _matmul_state(self, i: int, ins: MatMul, memo: tuple[int, Rect]) -> None:
        self._matmul_tile(i, ins, memo[0])
        self._regions(i, memo[1], ins.flags)

    def _ld_mx(self, i: int, ins: LdWeightMx) -> None:
        src = ins.src
        m = check_ld_weight_mx(self, i, ins)
        self._latch(Tile(src.partition, src.partitions, 0, m, 4 * src.partitions, ins.fmt,
                         PerfMode.NONE, Fp32Pass.FULL, i, mx=True))

    def _mm_mx(self, i: int, ins: MatmultMx) -> None:
        check_matmult_mx(self, i, ins)
        self._flags_for_gen(i, ins.flags)
        self._accumulate(i, ins.dst, ins.flags)

    def _dma(self, i: int, ins: DmaLoad) -> None:
        self._bounds(i, ins.src, "DmaLoad src", Space.DRAM)
        self._bounds(i, ins.dst, "DmaLoad dst", Space.SBUF)
        if ins.src.dtype != ins.dst.dtype:
            self._fail(i, f"DmaLoad converts nothing: {ins.src.dtype} -> {ins.dst.dtype}")
        if prod(ins.src.shape) != prod(ins.dst.shape):
            self._fail(i, f"DmaLoad copies {prod(ins.src.shape)} elements into "
                          f"{prod(ins.dst.shape)}")

    def _readout(self, i: int, ins: ReadOut) -> Rect:
        self._bounds(i, ins.src, "ReadOut src", Space.PSUM)
        self._bounds(i, ins.dst, "ReadOut dst", Space.DRAM)
        if ins.src.dtype != ins.dst.dtype:
            self._fail(i, f"ReadOut converts nothing: {ins.src.dtype} -> {ins.dst.dtype}")
        if prod(ins.src.shape) != prod(ins.dst.shape):
            self._fail(i, f"ReadOut copies {prod(ins.src.shape)} elements into "
                          f"{prod(ins.dst.shape)}")
        reg = ins.src.rect
        self._readout_state(i, ins, reg)
        return reg

    def _readout_state(self, i: int, ins: ReadOut, reg: Rect) -> None:
        state = self.regions.get(reg)
        if state is None or state[0] != "done":
            why = "is still open (no STOP yet)" if state else "holds no finished group"
            self._fail(i, f"ReadOut of a PSUM region that {why}; a result leaves PSUM only "
                          f"after its group's STOP")
        del self.regions[reg]

    def _dma_state(self, i: int, ins: DmaLoad, _memo: None) -> None:
        """A DmaLoad has no state to check: every rule is about the instruction itself."""

    def finish(self) -> None:
        for _reg, (state, start) in self.regions.items():
            if state == "open":
                raise VerifyError(start, "this accumulation group never saw STOP; flag its "
                                         "last MatMul STOP")


_MISS = object()


def _typed(ins: Instruction) -> bool:
    """Whether the enum fields hold their own types: an int equal to an enum member makes an
    equal instruction whose type checks must run (they fail), so it never uses the memo."""
    for name, kind in _ENUMS:
        v = getattr(ins, name, None)
        if v is not None and type(v) is not kind:
            return False
    return True


_ENUMS = (("flags", CalcFlags), ("perf_mode", PerfMode), ("fp32_pass", Fp32Pass))
# The kinds whose stateless checks are memoized, and the stateful part each one replays
_REPLAY: dict[type, Callable[[Checker, int, Any, Any], None]] = {
    LoadStationary: Checker._load_state,
    MatMul: Checker._matmul_state,
    DmaLoad: Checker._dma_state,
    ReadOut: Checker._readout_state,
    **replay_engines(),
}


def verify(program: Program, arch: Arch | str, dram_bytes: int | None = None) -> None:
    """Check every rule; raises :class:`VerifyError` at the first instruction that breaks one."""
    checker = Checker(get_arch(arch), dram_bytes)
    for i, ins in enumerate(program):
        checker.step(i, ins)
    checker.finish()
