"""The register-level simulator against seed 003's numbers, closed forms of the dataflow, the
issue rules of cost.py worked by hand, and the functional simulator (bit for bit)."""

from __future__ import annotations

import dataclasses
from math import ceil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from systolic import (
    AccessPattern,
    CalcFlags,
    DmaLoad,
    FunctionalSimulator,
    LdWeightMx,
    LoadStationary,
    MatMul,
    PerfMode,
    Program,
    ReadOut,
    Space,
    SystolicError,
    get_arch,
)
from systolic.compiler import MatmulSpec, lower
from systolic.isa import col_group, row_group
from systolic.sim.systolic import SystolicSimulator, step_matmul
from systolic.timing.tensor_engine import schedule

TRN2 = get_arch("trn2")
# A toy arch the compiler tiles into many instructions: 8 x 8 PEs, 16 fp32 per PSUM bank.
TOY = dataclasses.replace(TRN2, rows=8, cols=8, psum_bank_bytes=64, psum_banks=4)
FP32_PERIOD = 4  # seed 003: fp32 inputs cost roughly 4x (one pass streams at 1/4 rate)


def arrivals(k: int, m: int, n: int, period: int = 1) -> np.ndarray:
    """Busy PEs per cycle from seed 003's rule alone: X[k, n] is at PE(k, m) at p*n + k + m."""
    kk, mm, nn = np.meshgrid(np.arange(k), np.arange(m), np.arange(n), indexing="ij")
    return np.bincount((period * nn + kk + mm).ravel())


# -- seed 003 --------------------------------------------------------------------------------
def test_seed_3x3x3_takes_7_cycles_at_43_percent() -> None:
    rng = np.random.default_rng(3)
    s, x = rng.integers(-3, 4, (3, 3)), rng.integers(-3, 4, (3, 3))
    run = step_matmul(s, x, 3, 3)
    assert run.cycles == 7
    assert run.busy_per_cycle.tolist() == [1, 3, 6, 7, 6, 3, 1]
    assert run.macs == 27
    assert run.utilization == pytest.approx(27 / 63)
    assert run.utilization == pytest.approx(0.43, abs=0.005)
    np.testing.assert_array_equal(run.out, s.T.astype(np.float64) @ x)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 9), st.integers(1, 9), st.integers(1, 20), st.integers(0, 4),
       st.integers(0, 4), st.sampled_from(["bf16", "fp32", "int8"]), st.integers(0, 2**31))
def test_one_instruction_follows_the_skew(k: int, m: int, n: int, extra_r: int, extra_c: int,
                                          dtype: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    s, x = rng.integers(-4, 5, (k, m)), rng.integers(-4, 5, (k, n))
    run = step_matmul(s, x, k + extra_r, m + extra_c, dtype=dtype)
    p = FP32_PERIOD if dtype == "fp32" else 1
    assert run.cycles == p * (n - 1) + k + m - 1  # N + K + M - 2 at p = 1 (seed 003)
    assert (run.starts[0], run.ends[0]) == (0, run.cycles)
    np.testing.assert_array_equal(run.busy_per_cycle, arrivals(k, m, n, p))
    assert run.macs == k * m * n
    assert run.utilization == pytest.approx(k * m * n / ((k + extra_r) * (m + extra_c)
                                                           * run.cycles))
    np.testing.assert_array_equal(run.out, s.T @ x)
    fr = run.frames
    assert fr is not None
    t, kk, mm = np.meshgrid(np.arange(run.cycles), np.arange(k + extra_r),
                            np.arange(m + extra_c), indexing="ij")
    d = t - kk - mm  # = p * n where X[k, n] sits at PE(k, m)
    want = (kk < k) & (mm < m) & (d >= 0) & (d % p == 0) & (d // p < n)
    np.testing.assert_array_equal(fr.busy, want)
    np.testing.assert_array_equal(fr.moving_n[want], (d // p)[want])
    np.testing.assert_array_equal(fr.moving[want], x[kk[want], (d // p)[want]])
    # column m drains out[m, n] into PSUM partition m at p*n + (k - 1) + m
    for col in range(m):
        for j in range(n):
            at = p * j + k - 1 + col
            assert (fr.out_n[at, col], fr.out[at, col]) == (j, (s.T @ x)[col, j])
    assert (fr.out_n >= 0).sum() == m * n


# -- whole programs, bit for bit against the functional simulator -----------------------------
def operands(spec: MatmulSpec, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    if spec.dtype.startswith(("int", "uint")):
        lo, hi = (0, 256) if spec.dtype == "uint8" else (-128, 128)
        return rng.integers(lo, hi, (spec.m, spec.k)), rng.integers(lo, hi, (spec.k, spec.n))
    scale = 3.0 if spec.dtype.startswith("fp8") else 1.0
    return ((rng.standard_normal((spec.m, spec.k)) * scale).astype(np.float32),
            (rng.standard_normal((spec.k, spec.n)) * scale).astype(np.float32))


def both(arch: object, dram: int) -> tuple[FunctionalSimulator, SystolicSimulator]:
    return (FunctionalSimulator(arch, order="systolic", dram_bytes=dram),  # type: ignore
            SystolicSimulator(arch, dram_bytes=dram))  # type: ignore[arg-type]


def check_timing(program: Program, run: object, arch: object) -> None:
    """Closed forms per instruction (seed 003 / cost.py text), independent of the sim."""
    mm = [i for i, ins in enumerate(program) if isinstance(ins, MatMul)]
    fp32 = round(1 / arch.rate_fp32)  # type: ignore[attr-defined]
    for i in mm:
        ins = program[i]
        assert isinstance(ins, MatMul)
        n = ins.moving.dims[-1][1]
        p = (fp32 // 2 if ins.fp32_pass else fp32) if ins.moving.dtype in ("fp32", "fp32r") else 1
        dur = p * (n - 1) + ins.moving.partitions + ins.dst.partitions - 1
        assert run.ends[i] - run.starts[i] == dur  # type: ignore[attr-defined]
    assert run.cycles == max(run.ends[i] for i in mm)  # type: ignore[attr-defined]
    pe = sum(program[i].moving.partitions * program[i].dst.partitions  # type: ignore
             * program[i].moving.dims[-1][1] for i in mm)  # type: ignore[union-attr]
    assert run.busy_per_cycle.sum() == pe  # type: ignore[attr-defined]


SPECS = st.one_of(
    st.builds(MatmulSpec, st.integers(1, 40), st.integers(1, 300), st.integers(1, 40),
              st.sampled_from(["bf16", "fp16", "fp8_e5m2", "fp32", "fp32r"])),
    st.builds(MatmulSpec, st.integers(1, 40), st.integers(2, 300), st.integers(1, 40),
              st.sampled_from(["fp8_e4m3", "fp8_e5m2"]), st.just(PerfMode.DOUBLE_ROW)),
    st.builds(MatmulSpec, st.integers(1, 40), st.integers(1, 200), st.integers(1, 40),
              st.just("int8"), st.just(PerfMode.NONE), st.integers(-128, 127),
              st.integers(-128, 127)),
)


@settings(max_examples=20, deadline=None)
@given(SPECS, st.sampled_from([TRN2, TOY]), st.integers(0, 2**31))
def test_compiled_programs_are_bit_identical(spec: MatmulSpec, arch: object,
                                             seed: int) -> None:
    if arch is TOY:  # small shapes already make dozens of instructions on 8 x 8 PEs
        spec = dataclasses.replace(spec, m=min(spec.m, 20), k=min(spec.k, 40))
    low = lower(spec, arch)  # type: ignore[arg-type]
    a, b = operands(spec, np.random.default_rng(seed))
    fsim, ssim = both(arch, low.layout.dram_bytes)
    fsim.write_dram(low.layout.a_offset, a, spec.dtype)
    fsim.write_dram(low.layout.b_offset, b, spec.dtype)
    ssim.memory.dram[:] = fsim.memory.dram
    fsim.run(low.program)
    run = ssim.run(low.program)
    np.testing.assert_array_equal(ssim.memory.psum, fsim.memory.psum)
    np.testing.assert_array_equal(ssim.memory.dram, fsim.memory.dram)
    check_timing(low.program, run, arch)
    # the timing model agrees on every instruction's start and end (issue 4's property)
    sched = schedule(low.program, arch)  # type: ignore[arg-type]
    np.testing.assert_array_equal(run.starts, sched.starts)
    np.testing.assert_array_equal(run.ends, sched.ends)
    assert (run.cycles, run.readout_tail) == (sched.cycles, sched.readout_tail)
    assert run.macs == sum(ins.moving.partitions * ins.perf_mode.k_fold * ins.dst.partitions
                           * ins.moving.dims[-1][1]
                           for ins in low.program if isinstance(ins, MatMul))


@pytest.mark.parametrize("spec", [MatmulSpec(50, 260, 70, "bf16"),
                                  MatmulSpec(30, 100, 40, "fp32"),
                                  MatmulSpec(20, 300, 30, "fp8_e5m2", PerfMode.DOUBLE_ROW)])
def test_special_values_match(spec: MatmulSpec) -> None:
    """inf, nan and signed zeros: every finite result and every inf bit for bit, and NaN
    where the functional simulator has NaN (a NaN's sign depends on numpy's loop shapes)."""
    rng = np.random.default_rng(11)
    a, b = operands(spec, rng)
    a[0, 5] = np.inf  # row 0: +-inf, or nan where it meets -inf below
    a[1, 7] = a[2, 9] = np.inf
    b[9, 3] = b[7, 4] = -np.inf  # (1, 4) is -inf; (2, 3) is -inf
    b[11, 6] = np.nan  # column 6: nan
    a[3] = -0.0  # row 3: zeros
    b[:, 8] = 0.0
    low = lower(spec, TRN2)
    fsim, ssim = both(TRN2, low.layout.dram_bytes)
    fsim.write_dram(low.layout.a_offset, a, spec.dtype)
    fsim.write_dram(low.layout.b_offset, b, spec.dtype)
    ssim.memory.dram[:] = fsim.memory.dram
    with np.errstate(invalid="ignore"):
        fsim.run(low.program)
        ssim.run(low.program)
    got = ssim.read_dram(low.layout.out_offset, (spec.m, spec.n), "fp32")
    want = fsim.read_dram(low.layout.out_offset, (spec.m, spec.n), "fp32")
    nan = np.isnan(want)
    assert nan.any() and np.isinf(want).any() and (want == 0).any()
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got.view(np.uint32)[~nan], want.view(np.uint32)[~nan])


# -- hand-built programs: tiles at other origins, mixed lanes, different weights ------------------
class Builder:
    """Writes operands into both simulators and emits the instructions that use them."""

    def __init__(self, arch: object = TRN2) -> None:
        self.arch = arch
        self.fsim, self.ssim = both(arch, 1 << 20)
        self.code: list[object] = []
        self.sb = self.dram = 0
        self.rng = np.random.default_rng(7)

    def _sbuf(self, part: int, parts: int, n: int, dtype: str, fold: int,
              values: np.ndarray) -> AccessPattern:
        dims = ((n, 2), (1, n)) if fold == 2 else ((1, n),)
        ap = AccessPattern(Space.SBUF, part, parts, self.sb, dims, dtype)
        self.sb += 64 * ceil(fold * n * 4 / 64)
        for sim in (self.fsim, self.ssim):
            sim.memory.write(ap, values.reshape(ap.shape))
        return ap

    def values(self, shape: tuple[int, int], dtype: str) -> np.ndarray:
        if dtype == "int8":
            return self.rng.integers(-128, 128, shape)
        return self.rng.standard_normal(shape).astype(np.float32)

    def load(self, r0: int, k: int, c0: int, m: int, dtype: str = "bf16",
             mode: PerfMode = PerfMode.NONE) -> None:
        fold = mode.k_fold
        src = self._sbuf(r0, k, m, dtype, fold, self.values((k * fold, m), dtype))
        self.code.append(LoadStationary(src, c0, row_group(r0, k), col_group(c0, m), mode))

    def matmul(self, r0: int, k: int, c0: int, m: int, n: int, bank: int, flags: CalcFlags,
               dtype: str = "bf16", mode: PerfMode = PerfMode.NONE) -> None:
        fold = mode.k_fold
        mv = self._sbuf(r0, k, n, dtype, fold, self.values((k * fold, n), dtype))
        acc = "int48" if dtype == "int8" else "fp32"
        dst = AccessPattern(Space.PSUM, c0, m, bank * 2048, ((1, n),), acc)
        self.code.append(MatMul(mv, dst, flags, dtype, r0, row_group(r0, k), col_group(c0, m),
                                mode, zp_moving=3 if dtype == "int8" else 0))

    def readout(self, c0: int, m: int, n: int, bank: int, dtype: str = "bf16") -> None:
        acc = "int48" if dtype == "int8" else "fp32"
        src = AccessPattern(Space.PSUM, c0, m, bank * 2048, ((1, n),), acc)
        isz = 8 if acc == "int48" else 4
        dst = AccessPattern(Space.DRAM, 0, m, self.dram, ((1, n),), acc,
                            partition_step=isz * n)
        self.dram += isz * m * n
        self.code.append(ReadOut(src, dst))

    def run(self) -> tuple[Program, object]:
        program = Program(self.code)
        self.fsim.run(program)
        run = self.ssim.run(program)
        np.testing.assert_array_equal(self.ssim.memory.psum, self.fsim.memory.psum)
        np.testing.assert_array_equal(self.ssim.memory.dram, self.fsim.memory.dram)
        check_timing(program, run, self.arch)
        return program, run


SS = CalcFlags.START | CalcFlags.STOP
DR = PerfMode.DOUBLE_ROW
# Disjoint tiles (r0, k, c0, m): row quadrants and column halves of the 128 x 128 array.
TILES = [(0, 32, 0, 64), (32, 32, 0, 64), (64, 64, 0, 64), (0, 128, 64, 64), (96, 20, 0, 50)]
DISJOINT = [[0, 1, 2, 3], [4, 3]]


@settings(max_examples=15, deadline=None)
@given(st.sampled_from(DISJOINT), st.lists(st.integers(1, 80), min_size=2, max_size=6),
       st.lists(st.sampled_from(["bf16", "int8", "fp8_e4m3"]), min_size=6, max_size=6),
       st.booleans())
def test_concurrent_tiles_at_other_origins(family: list[int], ns: list[int],
                                           dtypes: list[str], reuse: bool) -> None:
    """MatMuls on disjoint tiles (row tiling, column tiling), int and float lanes, DoubleRow,
    in flight at once: each group START|STOP into its own bank, read out at the end."""
    b = Builder()
    latched: dict[int, str] = {}  # tile -> the format of its latched weights
    used = []
    for j, n in enumerate(ns):
        tile = family[j % len(family)]
        r0, k, c0, m = TILES[tile]
        if reuse and tile in latched:  # a WeightTileState hit: no load, same format
            dtype = latched[tile]
        else:
            dtype = latched[tile] = dtypes[j]
            b.load(r0, k, c0, m, dtype, DR if dtype == "fp8_e4m3" else PerfMode.NONE)
        b.matmul(r0, k, c0, m, n, j, SS, dtype, DR if dtype == "fp8_e4m3" else PerfMode.NONE)
        used.append((c0, m, n, j, dtype))
    for c0, m, n, j, dtype in used:
        b.readout(c0, m, n, j, dtype)
    _, run = b.run()
    assert run.busy_per_cycle.max() <= 128 * 128  # type: ignore[attr-defined]


def test_different_weights_overlap_in_the_array() -> None:
    b = Builder()
    b.load(0, 128, 0, 128)
    b.matmul(0, 128, 0, 128, 64, 0, SS)
    b.load(0, 128, 0, 128)  # new weights, loaded in the background
    b.matmul(0, 128, 0, 128, 64, 1, SS)
    b.ssim.record = True
    _, run = b.run()
    # load 0: 0..32; MatMul 1 at 32; load 2 starts with MatMul 1 (32..64); MatMul 3 at
    # max(32 + max(64, 64), 64) = 96, while MatMul 1 runs until 32 + 63 + 255 = 350.
    assert run.starts.tolist() == [0, 32, 32, 96]  # type: ignore[attr-defined]
    fr = run.frames  # type: ignore[attr-defined]
    both_in_flight = [t for t in range(run.cycles)  # type: ignore[attr-defined]
                      if {1, 3} <= set(np.unique(fr.index[t]).tolist())]
    assert both_in_flight  # two weight sets in different PEs in one cycle


@pytest.mark.parametrize("n", [16, 64, 100, 512])
def test_back_to_back_steady_state_costs_max_n_64(n: int) -> None:
    b = Builder()
    b.load(0, 128, 0, 128)
    for j in range(8):
        b.matmul(0, 128, 0, 128, n, j % 8, SS)
    _, run = b.run()
    starts = run.starts[1:]  # type: ignore[attr-defined]
    assert np.diff(starts).tolist() == [max(n, 64)] * 7
    if n >= 64:  # wavefront follows wavefront: after the fill, every PE works every cycle
        # PE(k, m) is busy from starts[0] + k + m until starts[0] + 8n + k + m
        steady = run.busy_per_cycle[starts[0] + 254: starts[0] + 8 * n]  # type: ignore
        assert steady.size and steady.min() == 128 * 128
    else:  # one instruction's K*M*N PE-cycles per 64-cycle period, once periodic
        # (every instruction that reaches into [starts[5], starts[7]) exists: 270 < 5 * 64)
        span = run.busy_per_cycle[starts[5]: starts[7]]  # type: ignore[attr-defined]
        assert span.sum() == 2 * 128 * 128 * n


def test_readout_then_start_into_the_same_bank() -> None:
    b = Builder()
    b.load(0, 128, 0, 128)
    b.matmul(0, 128, 0, 128, 100, 0, SS)
    b.readout(0, 128, 100, 0)
    b.matmul(0, 128, 0, 128, 100, 0, SS)
    _, run = b.run()
    mm_end = 32 + 99 + 255
    ro_end = mm_end + TRN2.readout_fixed_cycles + ceil(100 / TRN2.readout_elems_per_cycle)
    assert run.starts.tolist() == [0, 32, mm_end, ro_end]  # type: ignore[attr-defined]
    assert run.cycles == ro_end + 99 + 255  # type: ignore[attr-defined]


def test_toy_array_runs_programs_for_its_size() -> None:
    b = Builder(dataclasses.replace(TRN2, rows=6, cols=4))
    b.load(0, 6, 0, 4)
    b.matmul(0, 6, 0, 4, 5, 0, SS)
    b.matmul(0, 6, 0, 4, 70, 1, SS)
    _, run = b.run()
    assert run.busy_per_cycle.max() <= 24  # type: ignore[attr-defined]


# -- refusals ----------------------------------------------------------------------------------
def test_two_matmuls_on_one_pe_in_one_cycle_are_refused() -> None:
    b = Builder()
    b.load(0, 128, 0, 128)
    b.matmul(0, 128, 0, 128, 64, 0, SS)
    b.load(64, 64, 0, 128)  # overlaps the tile above at another origin
    b.matmul(64, 64, 0, 128, 64, 1, SS)
    with pytest.raises(SystolicError, match=r"instruction 3: .*shares PEs"):
        b.ssim.run(Program(b.code))


def test_mx_instructions_are_refused() -> None:
    ap = AccessPattern(Space.SBUF, 0, 32, 0, ((1, 32),), "mxfp8_e4m3")
    sc = AccessPattern(Space.SBUF, 0, 4, 4096, ((1, 8),), "e8m0")
    with pytest.raises(SystolicError, match="MX pair"):
        SystolicSimulator("trn3").run(Program([LdWeightMx(ap, sc)]))


def chained(n: int) -> Builder:
    """MatMul -> ReadOut -> DmaLoad of that result -> LoadStationary -> MatMul on it."""
    b = Builder()
    b.load(0, 8, 0, 8)
    b.matmul(0, 8, 0, 8, n, 0, SS)
    b.readout(0, 8, n, 0)
    ro = b.code[-1]
    assert isinstance(ro, ReadOut)
    first = dataclasses.replace(ro.dst, dims=((1, 8),))
    back = AccessPattern(Space.SBUF, 0, 8, 0x8000, ((1, 8),), "fp32")
    b.code.append(DmaLoad(first, back))
    b.code.append(LoadStationary(back, 0, row_group(0, 8), col_group(0, 8)))
    b.matmul(0, 8, 0, 8, 8, 1, SS, "fp32")
    return b


def test_a_chained_program_runs_when_its_data_is_ready_in_time() -> None:
    b = chained(8)  # the first MatMul ends at 24; the rules start the second at 66
    _, run = b.run()
    assert run.starts[5] == 66 and run.ends[1] == 24  # type: ignore[attr-defined]


def test_a_matmul_timed_before_the_data_it_reads_is_refused() -> None:
    b = chained(200)  # the first MatMul ends at 216, the second would start at 66
    with pytest.raises(SystolicError, match=r"instruction 5: .*FunctionalSimulator"):
        b.ssim.run(Program(b.code))


@pytest.mark.parametrize("spec", [MatmulSpec(200, 300, 600, "bf16"),
                                  MatmulSpec(130, 70, 1100, "bf16")])
def test_observed_matmul_ends_follow_the_closed_form(spec: MatmulSpec) -> None:
    """Issue 17: the register-level array's observed ends against closed forms, not the
    scheduler's copy of the rules: a MatMul of N moving columns on K rows and M columns
    ends N + K + M - 2 cycles after it starts (seed 003's wavefront), and one MatMul starts
    no sooner than max(N, MM_INIT_LATENCY) after the previous one."""
    from systolic.isa import MatMul

    low = lower(spec, TRN2)
    run = SystolicSimulator(TRN2, dram_bytes=low.layout.dram_bytes).run(low.program)
    mms = [i for i, x in enumerate(low.program) if isinstance(x, MatMul)]
    assert len(mms) > 4
    prev = None
    for i in mms:
        ins = low.program[i]
        n, k, m = ins.moving.free_elems, ins.moving.partitions, ins.dst.partitions
        assert run.ends[i] - run.starts[i] == n + k + m - 2, (i, n, k, m)  # type: ignore
        if prev is not None:
            gap = run.starts[i] - run.starts[prev]  # type: ignore[attr-defined]
            assert gap >= max(low.program[prev].moving.free_elems, TRN2.mm_init_latency)
        prev = i


def test_cycle_counts_equal_the_timing_model() -> None:
    for spec in (MatmulSpec(200, 300, 600, "bf16"), MatmulSpec(40, 200, 600, "fp32"),
                 MatmulSpec(130, 520, 90, "fp8_e4m3", PerfMode.DOUBLE_ROW)):
        low = lower(spec, TRN2)
        run = SystolicSimulator(TRN2, dram_bytes=low.layout.dram_bytes).run(low.program)
        sched = schedule(low.program, TRN2)
        np.testing.assert_array_equal(run.starts, sched.starts)
        np.testing.assert_array_equal(run.ends, sched.ends)
        assert run.cycles == sched.cycles


# -- one executor interface ------------------------------------------------------------------
def test_every_executor_runs_a_program_into_one_result_type() -> None:
    from systolic.executor import Executor, Run
    from systolic.timing import CoreExecutor, TimingExecutor, time_program

    spec = MatmulSpec(20, 24, 40, "bf16")
    low = lower(spec, TOY)
    rng = np.random.default_rng(12)
    a = rng.standard_normal((spec.m, spec.k)).astype(np.float32)
    b = rng.standard_normal((spec.k, spec.n)).astype(np.float32)
    lay = low.layout
    runs: dict[str, Run] = {}
    executors: list[Executor] = [
        FunctionalSimulator(TOY, order="systolic", dram_bytes=lay.dram_bytes),
        SystolicSimulator(TOY, dram_bytes=lay.dram_bytes), TimingExecutor(TOY),
        CoreExecutor(TOY)]
    for ex in executors:
        if not isinstance(ex, TimingExecutor | CoreExecutor):
            ex.write_dram(lay.a_offset, a, "bf16")  # type: ignore[attr-defined]
            ex.write_dram(lay.b_offset, b, "bf16")  # type: ignore[attr-defined]
        run = ex.run(low.program, check=True)
        assert isinstance(run, Run) and run.instructions == len(low.program)
        runs[run.executor] = run
    assert set(runs) == {"functional", "systolic", "timing", "core"}
    fun, sys_, tim = runs["functional"], runs["systolic"], runs["timing"]
    # values: the register-level array and the functional systolic order agree bit for bit
    assert fun.memory is not None and sys_.memory is not None and tim.memory is None
    got = [r.memory.dram[lay.out_offset:lay.out_offset + 4 * spec.m * spec.n]  # type: ignore
           for r in (fun, sys_)]
    np.testing.assert_array_equal(got[0], got[1])
    # cycles: the timing adapter carries schedule() unchanged, and the array agrees with it
    sch = schedule(low.program, TOY)
    assert tim.schedule is not None and tim.cycles == sch.cycles == sys_.cycles
    np.testing.assert_array_equal(tim.starts, sch.starts)  # type: ignore[arg-type]
    np.testing.assert_array_equal(sys_.starts, sch.starts)  # type: ignore[arg-type]
    assert fun.cycles is None and fun.schedule is None
    # the whole core: the adapter carries time_program() unchanged, and knows no values
    core = runs["core"]
    assert core.memory is None and core.core is not None and fun.core is None
    assert core.core.latency == time_program(low.program, TOY).latency > 0
