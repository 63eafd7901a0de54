"""The timing model against closed forms (seed 003, FACTS) and an independent rule checker.

Closed forms used (cost.py's rules, worked by hand):
* one MatMul alone takes N + K + M - 2 cycles (seed 003: 3x3x3 on a 3x3 array in 7);
* T back-to-back MatMuls with one weight load L: L + (T-1)*max(N, 64) + (N + K + M - 2);
* a load that cannot hide (load > issue interval) paces the MatMuls at the load time;
* with two PSUM banks and a read-out c >= the MatMul duration D, one-K-tile groups cost
  L + 2D + (T-2)*c (each START waits for the read-out of the group two before it).
"""

from __future__ import annotations

import dataclasses
from math import ceil

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from systolic.arch import get_arch
from systolic.compiler import MatmulSpec, lower
from systolic.errors import SystolicError
from systolic.isa import (
    AccessPattern,
    CalcFlags,
    DmaLoad,
    LdWeightMx,
    LoadStationary,
    MatMul,
    MatmultMx,
    PerfMode,
    Program,
    ReadOut,
    Space,
    col_group,
    row_group,
)
from systolic.sim.systolic import SystolicSimulator
from systolic.timing.tensor_engine import Cause, Kind, schedule

TRN2 = get_arch("trn2")
START, STOP, ACC = CalcFlags.START, CalcFlags.STOP, CalcFlags.ACCUMULATE


class Build:
    """Hand-built dense programs: weights at SBUF 0.., moving tiles at SBUF 64 KiB.."""

    def __init__(self, arch=TRN2) -> None:
        self.arch, self.ins = arch, []

    def load(self, k: int, m: int, offset: int = 0, dtype: str = "bf16") -> Build:
        src = AccessPattern(Space.SBUF, 0, k, offset, ((1, m),), dtype)
        self.ins.append(LoadStationary(src, 0, row_group(0, k), col_group(0, m)))
        return self

    def mm(self, k: int, m: int, n: int, flags: CalcFlags, bank: int = 0,
           dtype: str = "bf16") -> Build:
        mv = AccessPattern(Space.SBUF, 0, k, 65536, ((1, n),), dtype)
        dst = AccessPattern(Space.PSUM, 0, m, bank * self.arch.psum_bank_bytes, ((1, n),),
                            "fp32")
        self.ins.append(MatMul(mv, dst, flags, dtype, 0, row_group(0, k), col_group(0, m)))
        return self

    def read(self, m: int, n: int, bank: int = 0) -> Build:
        src = AccessPattern(Space.PSUM, 0, m, bank * self.arch.psum_bank_bytes, ((1, n),),
                            "fp32")
        dst = AccessPattern(Space.DRAM, 0, m, 0, ((1, n),), "fp32", partition_step=4 * n)
        self.ins.append(ReadOut(src, dst))
        return self

    def chain(self, t: int, k: int, m: int, n: int, new_weights: bool = False) -> Build:
        """One accumulation group of ``t`` MatMuls (START, ACCUMULATE..., STOP), read out;
        a load before the first, or before each if ``new_weights``."""
        for j in range(t):
            if j == 0 or new_weights:
                self.load(k, m, offset=(j % 64) * 256)
            flags = (START if j == 0 else ACC) | (STOP if j == t - 1 else CalcFlags.NONE)
            self.mm(k, m, n, flags)
        return self.read(m, n)

    def program(self) -> Program:
        return Program(self.ins)


def compute_rows(sch):
    return sch.rows_of(Kind.COMPUTE)


# -- seed 003 ---------------------------------------------------------------------------
def test_seed_3x3x3_on_3x3_takes_7_cycles():
    arch = dataclasses.replace(TRN2, rows=3, cols=3)
    prog = Build(arch).load(3, 3).mm(3, 3, 3, START | STOP).read(3, 3).program()
    sch = schedule(prog, arch, check=True)
    load = ceil(3 / arch.ldweights_speedup)
    assert (sch.starts[0], sch.ends[0]) == (0, load)
    assert sch.ends[1] - sch.starts[1] == 7
    assert sch.cycles == load + 7


@given(n=st.integers(1, 512), k=st.integers(1, 128), m=st.integers(1, 128))
def test_one_instruction_alone_takes_n_plus_k_plus_m_minus_2(n, k, m):
    prog = Build().load(k, m).mm(k, m, n, START | STOP).read(m, n).program()
    sch = schedule(prog, TRN2, check=True)
    assert sch.ends[1] - sch.starts[1] == n + k + m - 2
    assert sch.cycles == ceil(m / 4) + n + k + m - 2
    assert sch.cause[1] == Cause.WEIGHT_LOAD and sch.cause[0] == -1


@pytest.mark.parametrize("n", [1, 16, 32, 63, 64, 65, 100, 512])
def test_back_to_back_matmuls_issue_every_max_n_64(n):
    t = 40
    sch = schedule(Build().chain(t, 128, 128, n).program(), TRN2, check=True)
    s = sch.starts[compute_rows(sch)]
    assert np.all(np.diff(s) == max(n, 64))
    assert sch.cycles == 32 + (t - 1) * max(n, 64) + (n + 128 + 128 - 2)
    assert np.all(sch.cause[compute_rows(sch)][1:] == Cause.INTERVAL)


def test_weight_loads_hide_behind_the_issue_interval():
    # a new 32-cycle load before each N=32 MatMul: hidden by the 64-cycle interval (FACTS)
    t = 50
    sch = schedule(Build().chain(t, 128, 128, 32, new_weights=True).program(), TRN2,
                   check=True)
    assert sch.cycles == 32 + (t - 1) * 64 + (32 + 254)
    causes = sch.cause[compute_rows(sch)]
    assert causes[0] == Cause.WEIGHT_LOAD and np.all(causes[1:] == Cause.INTERVAL)
    loads = sch.rows_of(Kind.LOAD)
    # each load starts with the MatMul before it (its shadow latches are free then)
    assert np.array_equal(sch.starts[loads[1:]], sch.starts[compute_rows(sch)[:-1]])


def test_weight_loads_that_cannot_hide_pace_the_array():
    arch = dataclasses.replace(TRN2, ldweights_speedup=1)  # 128-cycle loads > 64 interval
    t = 30
    sch = schedule(Build(arch).chain(t, 128, 128, 32, new_weights=True).program(), arch,
                   check=True)
    mm = compute_rows(sch)
    assert np.all(np.diff(sch.starts[mm]) == 128)
    assert np.all(sch.cause[mm] == Cause.WEIGHT_LOAD)
    assert sch.cycles == 128 * t + (32 + 254)


def readout_bound_case(t: int = 8):
    arch = dataclasses.replace(TRN2, psum_banks=2, readout_elems_per_cycle=0.25)
    low = lower(MatmulSpec(128, 128, 512 * t, "bf16"), arch)
    c = arch.readout_fixed_cycles + ceil(512 / 0.25)
    d = 512 + 254
    return arch, low.program, c, d


def test_readout_stalls_when_banks_are_too_few():
    arch, prog, c, d = readout_bound_case(8)
    assert c >= d  # the closed form below needs the read-out to outlast a MatMul
    sch = schedule(prog, arch)
    assert sch.cycles == 32 + 2 * d + (8 - 2) * c
    assert np.all(sch.cause[compute_rows(sch)][2:] == Cause.READOUT)
    ro = sch.rows_of(Kind.READOUT)
    assert np.all(np.diff(sch.starts[ro]) == c)  # the read-out engine never rests
    assert sch.readout_tail == sch.ends[ro[-1]] - sch.cycles > 0


def test_fp32_costs_four_times_bf16():
    bf = schedule(lower(MatmulSpec(512, 512, 512, "bf16"), TRN2).program, TRN2)
    f32 = schedule(lower(MatmulSpec(512, 512, 512, "fp32"), TRN2).program, TRN2)
    t = 16  # (512/128)^2 steps; fp32 is two passes each, 2 cycles per column (seed 000/003)
    assert bf.cycles == 32 + (t - 1) * 512 + (511 + 255)
    assert f32.cycles == 32 + (2 * t - 1) * 1024 + (2 * 511 + 255)
    assert 3.85 < f32.cycles / bf.cycles <= 4.0  # seed 003 "roughly 4x"
    assert np.all(f32.compute.period == 2) and np.all(f32.compute.passes == 2)


def test_double_row_fp8_runs_twice_as_fast_as_bf16_on_trn2():
    bf = schedule(lower(MatmulSpec(512, 1024, 512, "bf16"), TRN2).program, TRN2)
    spec = MatmulSpec(512, 1024, 512, "fp8_e4m3", PerfMode.DOUBLE_ROW)
    dr = schedule(lower(spec, TRN2).program, TRN2)
    assert 1.95 < bf.cycles / dr.cycles <= 2.0
    assert np.all(dr.compute.fold == 2) and np.all(dr.compute.rows == 128)


def test_mx_instructions_follow_the_same_rules():
    arch = get_arch("trn3")
    data = AccessPattern(Space.SBUF, 0, 128, 0, ((1, 128),), "mxfp8_e4m3")
    scale = AccessPattern(Space.SBUF, 0, 4, 4096, ((1, 32),), "e8m0")
    mv = AccessPattern(Space.SBUF, 0, 128, 8192, ((1, 256),), "mxfp8_e4m3")
    mscale = AccessPattern(Space.SBUF, 0, 4, 16384, ((1, 64),), "e8m0")
    dst = AccessPattern(Space.PSUM, 0, 128, 0, ((1, 256),), "fp32")
    prog = Program([LdWeightMx(data, scale), MatmultMx(mv, mscale, dst, CalcFlags(1)),
                    MatmultMx(mv, mscale, dst, CalcFlags(6))])
    sch = schedule(prog, arch)
    assert (sch.starts[0], sch.ends[0]) == (0, 32)
    assert list(sch.starts[1:]) == [32, 32 + 256]
    assert sch.cycles == 32 + 256 + 256 + 128 + 128 - 2
    assert np.all(sch.compute.fold == 4)


def test_dma_is_free_and_unknown_instructions_are_refused():
    ap = AccessPattern(Space.SBUF, 0, 128, 0, ((1, 128),), "bf16")
    dram = AccessPattern(Space.DRAM, 0, 128, 0, ((1, 128),), "bf16", partition_step=256)
    sch = schedule(Program([DmaLoad(dram, ap)]), TRN2)
    assert (sch.starts[0], sch.ends[0], sch.cycles, sch.readout_tail) == (-1, -1, 0, 0)
    with pytest.raises(SystolicError, match="does not know"):
        schedule(Program([object()]), TRN2)


def test_cycles_is_the_latest_end_not_the_last_in_program_order():
    b = Build().load(128, 128).mm(128, 128, 512, START | STOP, bank=0)
    b.load(1, 1, offset=512).mm(1, 1, 1, START | STOP, bank=1).read(128, 512).read(1, 1, 1)
    sch = schedule(b.program(), TRN2, check=True)
    first, last = compute_rows(sch)
    assert sch.ends[last] < sch.ends[first] == sch.cycles == 32 + 512 + 254


# -- every rule, checked by an independent walker --------------------------------------
def _region(ap):
    return ap.partition, ap.partition + ap.partitions, ap.offset, ap.offset + 4 * ap.free_elems


def _overlap(a, b):
    return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]


def check_rules(prog: Program, arch, sch) -> None:
    """Each start equals the latest of its bounds (cost.py docstring), written here from
    the rules, not from the model: O(n^2) scans over the earlier instructions."""
    starts, ends = sch.starts.tolist(), sch.ends.tolist()
    kinds = [type(x) for x in prog]
    for i, ins in enumerate(prog):
        earlier = range(i)
        mms = [j for j in earlier if kinds[j] is MatMul]
        if isinstance(ins, DmaLoad):
            assert starts[i] == ends[i] == -1
        elif isinstance(ins, LoadStationary):
            loads = [j for j in earlier if kinds[j] is LoadStationary]
            bound = max(ends[loads[-1]] if loads else 0, starts[mms[-1]] if mms else 0)
            assert starts[i] == bound
            assert ends[i] - starts[i] == ceil(ins.src.dims[-1][1] / arch.ldweights_speedup)
        elif isinstance(ins, MatMul):
            fp32 = ins.moving.dtype == "fp32"
            period = (2 if ins.fp32_pass else 4) if fp32 else 1
            n, k, m = ins.moving.dims[-1][1], ins.moving.partitions, ins.dst.partitions
            bounds = [0]
            if mms:
                p = prog[mms[-1]]
                pp = (2 if p.fp32_pass else 4) if p.moving.dtype == "fp32" else 1
                bounds.append(starts[mms[-1]] + max(pp * p.moving.dims[-1][1],
                                                    arch.mm_init_latency))
            since = [j for j in range(mms[-1] + 1 if mms else 0, i)
                     if kinds[j] is LoadStationary]
            bounds += [ends[j] for j in since]
            if CalcFlags.START in ins.flags:
                bounds += [ends[j] for j in earlier if kinds[j] is ReadOut
                           and _overlap(_region(prog[j].src), _region(ins.dst))]
            assert starts[i] == max(bounds)
            assert ends[i] - starts[i] == period * (n - 1) + k + m - 1
        elif isinstance(ins, ReadOut):
            ros = [j for j in earlier if kinds[j] is ReadOut]
            bounds = [ends[ros[-1]] if ros else 0]
            # every MatMul of the region's group: the writers since its last START
            writers = [j for j in mms if _overlap(_region(prog[j].dst), _region(ins.src))]
            heads = [n for n, j in enumerate(writers) if CalcFlags.START in prog[j].flags]
            group = writers[heads[-1]:] if heads else writers
            bounds += [max(ends[j] for j in group)] if group else []
            assert starts[i] == max(bounds)
            n = ins.src.free_elems
            assert ends[i] - starts[i] == (arch.readout_fixed_cycles
                                           + ceil(n / arch.readout_elems_per_cycle))
    mm_ends = [ends[j] for j in range(len(prog)) if kinds[j] is MatMul]
    assert sch.cycles == max(mm_ends, default=0)


SPECS = st.tuples(
    st.integers(1, 300), st.integers(1, 400), st.integers(1, 1100),
    st.sampled_from(["bf16", "fp32", "fp8_e4m3/double_row", "int8"]),
    st.sampled_from([("trn2", {}), ("trn1", {}), ("trn2", {"psum_banks": 2}),
                     ("trn2", {"ldweights_speedup": 1, "readout_elems_per_cycle": 0.1})]),
)


@given(SPECS)
def test_compiled_programs_obey_every_rule(case):
    m, k, n, dtype, (name, changes) = case
    arch = dataclasses.replace(get_arch(name), **changes)
    fmt, _, mode = dtype.partition("/")
    if mode and arch.generation < 3:
        mode = ""
    low = lower(MatmulSpec(m, k, n, fmt, PerfMode.parse(mode or None)), arch)
    sch = schedule(low.program, arch)
    check_rules(low.program, arch, sch)


# -- the register-level simulator (another executor) agrees start for start ------------
CROSS = [
    ("3x3x3 toy", None),
    ("200x300x600 bf16", (MatmulSpec(200, 300, 600, "bf16"), {})),
    ("100x130x1100 fp32", (MatmulSpec(100, 130, 1100, "fp32"), {})),
    ("read-out bound", (MatmulSpec(128, 128, 2048, "bf16"), {"psum_banks": 2})),
    ("slow loads", (MatmulSpec(64, 256, 700, "bf16"), {"ldweights_speedup": 1})),
]


@pytest.mark.parametrize("name, case", CROSS, ids=[c[0] for c in CROSS])
def test_register_level_simulator_agrees(name, case):
    if case is None:
        arch = dataclasses.replace(TRN2, rows=3, cols=3)
        prog = Build(arch).load(3, 3).mm(3, 3, 3, START | STOP).read(3, 3).program()
        dram = 64
    else:
        spec, changes = case
        arch = dataclasses.replace(TRN2, **changes)
        low = lower(spec, arch)
        prog, dram = low.program, low.layout.dram_bytes
    run = SystolicSimulator(arch, dram_bytes=dram).run(prog)
    sch = schedule(prog, arch)
    assert np.array_equal(run.starts, sch.starts)
    assert np.array_equal(run.ends, sch.ends)  # the ends the array was seen to reach
    assert (run.cycles, run.readout_tail) == (sch.cycles, sch.readout_tail)


def test_readout_waits_for_the_whole_group() -> None:
    # K = 129: a full 128-row MatMul, then a 1-row one that STOPs the group. With N = 1 the
    # first drains (1 + 128 + 128 - 2) after the STOP MatMul's end; the read-out waits for it.
    arch = get_arch("trn2")
    prog = lower(MatmulSpec(128, 129, 1, "bf16"), arch).program
    sch = schedule(prog, arch)
    mm = [i for i, x in enumerate(prog) if isinstance(x, MatMul)]
    ro = [i for i, x in enumerate(prog) if isinstance(x, ReadOut)]
    first, last = mm
    assert sch.ends[first] == sch.starts[first] + 1 + 128 + 128 - 2
    assert sch.ends[last] < sch.ends[first]
    assert sch.starts[ro[0]] == sch.ends[first]
