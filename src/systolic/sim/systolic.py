"""The register-level simulator: the array as R x C processing elements, one clock at a time.

Weight-stationary dataflow as seed 003 states it: PE(k, m) holds S[k, m]; the moving value
X[k, n] enters row k at cycle ``start + period*n + k`` (the skew: row k is k cycles late) and
moves one column per cycle, so it reaches PE(k, m) at ``start + period*n + k + m``; each PE
adds weight x input to the partial sum arriving from the PE above and passes it down; column
m drains into PSUM partition m. One instruction alone takes N + K + M - 2 cycles.

Lifecycle (one entry point): build ``SystolicSimulator(arch, rows, cols, dram_bytes,
record)``, place operands through ``.memory`` (a :class:`systolic.memory.Memory`), then
``run(program)`` returns a :class:`SystolicRun` (a :class:`~systolic.sim._base.Run`) with
the memory, per-instruction (start, end) cycles, busy PEs per cycle and, with
``record=True``, every cycle's registers (:class:`Frames`).

How it works: a first pass issues every instruction by the shared rules of
:mod:`systolic.timing.pe` (start cycles). A second pass executes the Program in order:
DmaLoad / LoadStationary / ReadOut go through the functional simulator's handlers (the
living definition, :func:`systolic.sim.functional.execute`) on the same
:class:`~systolic.sim._base.MachineState`; each MatMul is handed to the array, which is
stepped one cycle at a time (numpy over all PEs; the loop is over clock cycles only).
Moving values carry an instruction tag; a PE switches to the next instruction's weights
when that instruction's first value reaches it, so back-to-back MatMuls with different
weights overlap. Results
are added into PSUM in program order (fp32 with one rounding per add, or INT48 wrap), so
PSUM after a program is bit-identical to ``FunctionalSimulator(order="systolic")``. (A NaN
result is NaN in both, but its sign bit may differ: which operand's NaN numpy propagates
depends on its loop shapes, e.g. SIMD body versus scalar tail.)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import cast

import numpy as np

from ..arch import Arch, get_arch
from ..dtypes import get_format
from ..errors import SystolicError
from ..geometry import Rect
from ..isa import (
    AccessPattern,
    CalcFlags,
    DmaLoad,
    Group,
    LoadStationary,
    MatMul,
    Program,
    ReadOut,
    Space,
    col_group,
    row_group,
)
from ..memory import Memory
from ..timing import pe as cost
from ..verify import Checker, Tile
from ._base import Executor, MachineState, Run, dram_span, read_dram, write_dram
from .functional import execute
from .pe_array import Flight, Frames, Lane, make_flight

__all__ = ["Frames", "SystolicRun", "SystolicSimulator", "issue", "step_matmul"]

# record=True keeps every PE's registers for every cycle (about 30 bytes per PE-cycle).
RECORD_LIMIT = 1 << 23


_EMPTY = np.empty(0, np.int64)


@dataclass
class SystolicRun(Run):
    """What one :meth:`SystolicSimulator.run` did, in TensorE cycles from 0.

    ``starts``/``ends`` are per instruction index (``end`` exclusive; -1 for DmaLoad, which
    the rules treat as free). ``cycles`` is the end of the last MatMul; ``readout_tail`` the
    read-out time left after it. ``busy_per_cycle[t]`` counts PEs that did work in cycle t;
    ``macs`` counts multiply-accumulates (a DoubleRow PE does two per busy cycle);
    ``utilization`` = busy PE-cycles / (rows x cols x cycles). ``out`` is the result of
    :func:`step_matmul` (None from a plain run: read ``memory``).
    """

    cycles: int = 0  # always known here
    rows: int = 0
    cols: int = 0
    busy_per_cycle: np.ndarray = field(default_factory=lambda: _EMPTY)
    macs: int = 0
    utilization: float = 0.0
    readout_tail: int = 0
    frames: Frames | None = None
    out: np.ndarray | None = field(default=None, repr=False)


def issue(program: Program, arch: Arch) -> tuple[np.ndarray, np.ndarray]:
    """Start and end cycles of every instruction by the issue rules of
    :mod:`systolic.timing.pe` (its step functions, the same the timing model calls).

    MatMul ends here are planned (start + :func:`cost.matmul_duration`); the simulator
    reports the ends it observes in the array, which tests compare with closed forms.
    """
    starts = np.full(len(program), -1, dtype=np.int64)
    ends = np.full(len(program), -1, dtype=np.int64)
    pe = cost.PE_IDLE
    ro_free = 0  # the read-out engine's queue
    group_end: dict[Rect, int] = {}  # region -> its group's last end
    reads: list[tuple[Rect, int]] = []  # (region, end) of ReadOuts
    for i, ins in enumerate(program):
        if isinstance(ins, Group.LOAD):
            load = cast(cost.Load, ins)  # Group tuples do not narrow for mypy
            c = cost.load_cycles(load, arch)
            s, _, pe = cost.load_step(pe, c)
            starts[i], ends[i] = s, s + c
        elif isinstance(ins, Group.COMPUTE):
            comp = cast(cost.Compute, ins)
            ready = 0
            if CalcFlags.START in comp.flags:
                reg = comp.dst.rect
                ready = max((e for r, e in reads if r.overlaps(reg)), default=0)
            s, _, pe = cost.compute_step(pe, cost.matmul_interval(comp, arch), ready)
            starts[i], ends[i] = s, s + cost.matmul_duration(comp, arch)
            dreg = comp.dst.rect
            if CalcFlags.START in comp.flags or ends[i] > group_end.get(dreg, -1):
                group_end[dreg] = int(ends[i])
        elif isinstance(ins, ReadOut):
            reg = ins.src.rect
            done = [e for r, e in group_end.items() if r.overlaps(reg)]
            s = max(ro_free, *done) if done else ro_free
            starts[i], ends[i] = s, s + cost.readout_cycles(ins, arch)
            ro_free = int(ends[i])
            reads.append((reg, ro_free))
    return starts, ends


class SystolicSimulator(Executor):
    """Runs Programs on an R x C array stepped one clock at a time (see the module doc).

    ``rows``/``cols`` default to the Arch's (128 x 128); any size works (a 3 x 3 toy array).
    The simulator keeps memory and latched weights across runs; each run's clock starts at 0.
    """

    def __init__(self, arch: Arch | str = "trn2", rows: int | None = None,
                 cols: int | None = None, dram_bytes: int = 0, record: bool = False) -> None:
        base = get_arch(arch)
        self.rows = base.rows if rows is None else int(rows)
        self.cols = base.cols if cols is None else int(cols)
        if self.rows < 1 or self.cols < 1:
            raise SystolicError(f"the array needs at least 1 row and 1 column, not "
                                f"{self.rows} x {self.cols}")
        # Memory sizes SBUF and PSUM partitions by arch.rows; PSUM needs one partition per
        # column (seed 003), so a non-square toy array gets max(rows, cols) partitions.
        self.arch = replace(base, rows=max(self.rows, self.cols), cols=self.cols)
        self.record = record
        self.memory = Memory(self.arch, dram_bytes)
        self.state = MachineState(self.arch, self.memory, order="systolic")
        self._tiles: list[Tile] = []  # latched tiles, for verification across runs

    # -- state outside a program ----------------------------------------------------------
    def write_dram(self, offset: int, values: np.ndarray, dtype: str) -> None:
        """Encode ``values`` to ``dtype`` at byte ``offset`` of device memory."""
        write_dram(self.memory, offset, values, dtype)

    def read_dram(self, offset: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        return read_dram(self.memory, offset, shape, dtype)

    def preload(self, load: LoadStationary) -> None:
        """Latch weights before the next run without charging cycles, as if a previous
        program had loaded them (a WeightTileState hit): the run's MatMuls find them."""
        checker = Checker(self.arch, self.memory.dram.size, tiles=list(self._tiles))
        checker.step(0, load)
        self._check_rows(0, load.src.partition + load.src.partitions)
        self._tiles = checker.tiles
        execute(self.state, load)

    def _check_rows(self, i: int, end: int) -> None:
        if end > self.rows:
            raise SystolicError(f"instruction {i}: its tile reaches array row {end - 1}, but "
                                f"the array has {self.rows} rows; build it with more rows")

    # -- execution ------------------------------------------------------------------------
    name = "systolic"

    def run(self, program: Program, *, check: bool = True) -> SystolicRun:
        """Verify and execute ``program``; raises :class:`SystolicError` for a Program this
        simulator does not model (the MX pair, two MatMuls on one PE in one cycle). The
        checks are part of the model (they track latched tiles across runs), so ``check``
        is accepted for the interface and always on."""
        checker = Checker(self.arch, self.memory.dram.size, tiles=list(self._tiles))
        for i, ins in enumerate(program):
            if isinstance(ins, Group.MX):
                raise SystolicError(f"instruction {i}: the register-level simulator does not "
                                    f"model the MX pair (LdWeightMx/MatmultMx); run MX "
                                    f"programs on FunctionalSimulator")
            checker.step(i, ins)
            if isinstance(ins, MatMul | LoadStationary):
                ap = ins.moving if isinstance(ins, MatMul) else ins.src
                self._check_rows(i, ap.partition + ap.partitions)
        checker.finish()
        starts, planned = issue(program, self.arch)
        mm = [i for i, ins in enumerate(program) if isinstance(ins, MatMul)]
        total = int(max((planned[i] for i in mm), default=0))
        if self.record and total * self.rows * self.cols > RECORD_LIMIT:
            raise SystolicError(f"record=True keeps every PE per cycle and {total} cycles x "
                                f"{self.rows} x {self.cols} PEs exceed {RECORD_LIMIT}; "
                                f"record a smaller array or program")
        exe = _Execution(self, program, starts, total)
        exe.execute()
        self._tiles = checker.tiles
        ends = planned.copy()
        for i, end in exe.ends.items():
            ends[i] = end
        reads = [int(planned[i]) for i, ins in enumerate(program) if isinstance(ins, ReadOut)]
        busy = exe.busy
        pe_cycles = int(busy.sum())
        return SystolicRun(
            executor=self.name, instructions=len(program), memory=self.memory,
            rows=self.rows, cols=self.cols, cycles=total, starts=starts, ends=ends,
            busy_per_cycle=busy, macs=exe.macs,
            utilization=pe_cycles / (self.rows * self.cols * total) if total else 0.0,
            readout_tail=max(0, max(reads, default=0) - total), frames=exe.frames)


class _Execution:
    """One run: program-order data effects, the array stepped lazily in time order."""

    def __init__(self, sim: SystolicSimulator, program: Program, starts: np.ndarray,
                 total: int) -> None:
        self.sim, self.program, self.starts = sim, program, starts
        self.t = 0  # the next cycle to simulate
        self.busy = np.zeros(total, dtype=np.int64)
        self.macs = 0
        self.frames = Frames.empty(total, sim.rows, sim.cols) if sim.record else None
        self.lanes: dict[tuple[bool, int], Lane] = {}
        self.live: list[Flight] = []  # MatMuls that may still hold PEs, in start order
        self.ends: dict[int, int] = {}  # program index -> observed end
        # PSUM effects in program order: a MatMul's sum (once complete) or a ReadOut
        self.queue: list[Flight | ReadOut] = []
        self.head = 0

    def execute(self) -> None:
        state = self.sim.state
        for i, ins in enumerate(self.program):
            if isinstance(ins, MatMul):
                self._issue(i, ins)
            elif isinstance(ins, ReadOut):
                self.queue.append(ins)
                self._commit()
            else:
                if isinstance(ins, DmaLoad):
                    self._await_dram(ins.src)
                execute(state, ins)
        self._advance(len(self.busy))
        self._commit()

    def _issue(self, i: int, ins: MatMul) -> None:
        s = int(self.starts[i])
        # every MatMul starting before s is in the array (starts rise in program order):
        # simulate up to s, so only the MatMuls in flight hold registers
        self._advance(s)
        if s < self.t:
            raise SystolicError(
                f"instruction {i}: the timing rules start this MatMul at cycle {s}, before "
                f"cycle {self.t} when device memory it depends on (through ReadOut and "
                f"DmaLoad) is ready; run such chained programs on FunctionalSimulator")
        mv, dst = ins.moving, ins.dst
        w = self.sim.state.tile(Rect(mv.partition, mv.partitions, dst.partition,
                                     dst.partitions)).values
        x = self.sim.memory.read(mv).reshape(w.shape[0], mv.dims[-1][1])
        if get_format(mv.dtype).is_int:
            x, w = x - ins.zp_moving, w - ins.zp_stationary
        f = make_flight(i, ins, s, cost.column_period(ins, self.sim.arch), w, x)
        self.live = [g for g in self.live if g.planned > s]
        for g in self.live:
            if g.overlaps(f) and g.last_arrival() >= f.first_arrival():
                raise SystolicError(
                    f"instruction {i}: its tile shares PEs with instruction {g.index} while "
                    f"that one still streams (different tile origins); one PE cannot hold "
                    f"two MatMuls in one cycle, so start it later or at the same origin")
        self.live.append(f)
        self.queue.append(f)
        key = (f.is_int, f.fold)
        if key not in self.lanes:
            self.lanes[key] = Lane(self.sim.rows, self.sim.cols, f.fold,
                                   np.int64 if f.is_int else np.float32, self.sim.record)
        self.lanes[key].add(f)

    def _await_dram(self, src: AccessPattern) -> None:
        """Step the array until no pending ReadOut writes device memory that ``src`` reads."""
        lo, hi = dram_span(src)
        for k in range(len(self.queue) - 1, self.head - 1, -1):
            ro = self.queue[k]
            if isinstance(ro, ReadOut):
                rlo, rhi = dram_span(ro.dst)
                if rlo < hi and lo < rhi:
                    while self.head <= k and self.t < len(self.busy):
                        self._advance(self.t + 1)
                    return

    def _advance(self, until: int) -> None:
        """Simulate cycles self.t .. until-1 (idle stretches are skipped)."""
        lanes = list(self.lanes.values())
        with np.errstate(invalid="ignore", over="ignore"):  # idle PEs multiply stale values
            self._run_cycles(lanes, until)

    def _run_cycles(self, lanes: list[Lane], until: int) -> None:
        while self.t < until:
            t = self.t
            active = [lane for lane in lanes if lane.active(t)]
            if not active:
                nxt = min((lane.next_start(t) for lane in lanes), default=until)
                self.t = max(t + 1, min(until, nxt))
                continue
            finished = False
            for lane in active:
                busy, macs, fin = lane.step(t, self.frames)
                self.busy[t] += busy
                self.macs += macs
                if fin:
                    self.ends.update((f.index, f.end) for f in fin)
                    finished = True
            self.t = t + 1
            if finished:
                self._commit()

    def _commit(self) -> None:
        """Apply PSUM effects in program order as far as finished MatMuls allow."""
        state = self.sim.state
        while self.head < len(self.queue):
            item = self.queue[self.head]
            if isinstance(item, ReadOut):
                execute(state, item)
            elif item.end >= 0:
                state.accumulate(item.dst, item.flags, item.res)
                item.res = np.empty(0)
            else:
                return
            self.head += 1


def step_matmul(stationary: np.ndarray, moving: np.ndarray, rows: int | None = None,
                cols: int | None = None, *, dtype: str = "bf16", arch: Arch | str = "trn2",
                record: bool = True) -> SystolicRun:
    """One ``stationary.T @ moving`` instruction on a (toy) array, weights already latched.

    ``stationary`` [K, M] and ``moving`` [K, N] are rounded to ``dtype``; the array is
    ``rows`` x ``cols`` (default K x M). The MatMul starts at cycle 0, as seed 003 draws it:
    a 3x3x3 product on a 3x3 array takes 7 cycles. The result [M, N] is in ``run.out``.
    """
    s, x = np.asarray(stationary), np.asarray(moving)
    if s.ndim != 2 or x.ndim != 2 or s.shape[0] != x.shape[0]:
        raise SystolicError(f"stationary [K, M] and moving [K, N] must share K; got "
                            f"{s.shape} and {x.shape}")
    k, m = s.shape
    n = x.shape[1]
    sim = SystolicSimulator(arch, rows=k if rows is None else rows,
                            cols=m if cols is None else cols, record=record)
    if k > sim.rows or m > sim.cols:
        raise SystolicError(f"a [{k}, {m}] stationary tile needs a {k} x {m} array; the "
                            f"array is {sim.rows} x {sim.cols}")
    isz = get_format(dtype).container_bytes
    acc = "fp32"  # seed 000: fp32 PSUM whatever the input (int48 is a Program option)
    s_ap = AccessPattern(Space.SBUF, 0, k, 0, ((1, m),), dtype)
    x_ap = AccessPattern(Space.SBUF, 0, k, -(-m * isz // 64) * 64, ((1, n),), dtype)
    out = AccessPattern(Space.PSUM, 0, m, 0, ((1, n),), acc)
    sim.memory.write(s_ap, s)
    sim.memory.write(x_ap, x)
    rg, cg = row_group(0, k), col_group(0, m)
    sim.preload(LoadStationary(s_ap, 0, rg, cg))
    run = sim.run(Program([MatMul(x_ap, out, CalcFlags.START | CalcFlags.STOP, dtype, 0,
                                  rg, cg)]))
    return replace(run, out=sim.memory.read(out).copy())
