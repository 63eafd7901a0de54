"""The whole-core timing (timing/core.py) against closed forms, brute-force references and the
register-level simulator.

References, each independent of the scheduler's own bookkeeping:
* dependencies: a brute-force check over every pair of instructions, on the sets of bytes
  each one reads and writes (enumerated element by element from the access patterns);
* the PE part: the register-level simulator's observed starts and ends (seed 003 rules as
  the array runs them), on programs both can run;
* DMA: the HBM bandwidth in the Arch (no schedule may beat it) and hand-worked costs.
"""

from __future__ import annotations

import dataclasses
from math import ceil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from systolic.arch import get_arch
from systolic.compiler import MatmulSpec, lower
from systolic.isa import (
    AccessPattern,
    Activation,
    AluOp,
    CalcFlags,
    DmaCopy,
    DmaLoad,
    Engine,
    Group,
    LoadStationary,
    MatMul,
    Memset,
    Program,
    ReadOut,
    Space,
    TensorCopy,
    TensorTensor,
    col_group,
    row_group,
)
from systolic.sim.systolic import SystolicSimulator
from systolic.timing.core import CAUSES, time_program
from systolic.timing.dma import contiguous_run, dma_cost

TRN2 = get_arch("trn2")
START, STOP = CalcFlags.START, CalcFlags.STOP


def sb(p, off, n, dtype="bf16", part=0):
    return AccessPattern(Space.SBUF, part, p, off, ((1, n),), dtype)


def dram(p, off, n, dtype="bf16", pitch=None):
    isz = 4 if dtype == "fp32" else 2
    return AccessPattern(Space.DRAM, 0, p, off, ((1, n),), dtype,
                         partition_step=pitch or n * isz)


def psum(m, bank, n):
    return AccessPattern(Space.PSUM, 0, m, bank * 2048, ((1, n),), "fp32")


def matmul_kernel(t: int, reload: bool, n: int = 512) -> Program:
    """t one-K-tile products 128x128x n; each reloads its tiles from HBM (``reload``) or
    all reuse one resident pair; results read out (two banks alternate)."""
    ins: list = []
    w, x = sb(128, 0, 128), sb(128, 65536, n)
    for j in range(t):
        if reload or j == 0:
            ws = sb(128, (j % 8) * 256, 128)
            xs = sb(128, 65536 + (j % 8) * 2 * n, n)
            ins.append(DmaLoad(dram(128, j * 1 << 20, 128), ws))
            ins.append(DmaLoad(dram(128, j * 1 << 20 | 1 << 19, n), xs))
            w, x = ws, xs
        ins.append(LoadStationary(w, 0, row_group(0, 128), col_group(0, 128)))
        ins.append(MatMul(x, psum(128, j % 2, n), START | STOP, "bf16", 0,
                          row_group(0, 128), col_group(0, 128)))
        if reload or j == t - 1:
            ins.append(ReadOut(psum(128, j % 2, n), dram(128, 1 << 30 | j * 1 << 18, n,
                                                         "fp32")))
    return Program(ins)


def accumulate_kernel(t: int, n: int = 512) -> Program:
    """Tiles resident in SBUF, every MatMul on its own weights, long K accumulation groups:
    the PE is the bound."""
    ins: list = [DmaLoad(dram(128, 0, 128 * 8), sb(128, 0, 128 * 8)),
                 DmaLoad(dram(128, 1 << 20, n), sb(128, 65536, n))]
    for j in range(t):
        flags = (START if j % 16 == 0 else CalcFlags.ACCUMULATE) | \
            (STOP if j % 16 == 15 else CalcFlags.NONE)
        ins.append(LoadStationary(sb(128, (j % 8) * 256, 128), 0, 15, 15))
        ins.append(MatMul(sb(128, 65536, n), psum(128, (j // 16) % 2, n), flags, "bf16",
                          0, 15, 15))
        if j % 16 == 15:
            ins.append(ReadOut(psum(128, (j // 16) % 2, n), dram(128, 1 << 30, n, "fp32")))
    return Program(ins)


def test_every_matmul_reloading_its_tiles_is_dma_bound():
    ct = time_program(matmul_kernel(64, reload=True), TRN2)
    assert ct.bound == "dma"
    assert ct.hbm_bytes / ct.seconds <= TRN2.hbm_bytes_per_s
    # 64 x (32 KiB + 128 KiB in, 256 KiB out) through the shared HBM, at best
    assert ct.seconds >= ct.hbm_bytes / TRN2.hbm_bytes_per_s
    assert ct.hfu < 0.5


def test_resident_tiles_are_pe_bound():
    ct = time_program(accumulate_kernel(512), TRN2)
    assert ct.bound == "pe"
    assert ct.hfu > 0.8


@pytest.mark.parametrize("arch", ["trn1", "trn2", "trn3"])
@pytest.mark.parametrize("prog", ["reload", "resident", "lowered"])
def test_breakdown_adds_up_exactly_and_busy_is_a_fraction(arch, prog):
    a = get_arch(arch)
    p = {"reload": lambda: matmul_kernel(20, True), "resident": lambda: accumulate_kernel(64),
         "lowered": lambda: lower(MatmulSpec(300, 700, 1100, "bf16"), a).program}[prog]()
    ct = time_program(p, a)
    assert set(ct.bound_ticks) == set(CAUSES)
    assert sum(ct.bound_ticks.values()) == ct.latency
    assert all(v >= 0 for v in ct.bound_ticks.values())
    assert all(0 <= b <= 1 for b in ct.busy().values())
    d = ct.to_dict()
    assert abs(sum(c["percent"] for c in d["bound"]["causes"].values()) - 100) < 1e-9
    assert d["dma"]["gbps"] * 1e9 <= a.hbm_bytes_per_s * (1 + 1e-12)


# -- the PE part equals the register-level simulator ------------------------------------
@pytest.mark.parametrize("spec, changes", [
    (MatmulSpec(200, 300, 600, "bf16"), {}),
    (MatmulSpec(100, 130, 700, "fp32"), {}),
    (MatmulSpec(64, 256, 700, "bf16"), {"ldweights_speedup": 1}),
])
def test_pe_part_equals_the_register_level_simulator(spec, changes):
    arch = dataclasses.replace(TRN2, **changes)
    low = lower(spec, arch)
    # the PE's own instructions (no other engine to wait for): both executors can run it
    prog = Program([i for i in low.program if isinstance(i, Group.PE)])
    run = SystolicSimulator(arch, dram_bytes=low.layout.dram_bytes).run(prog)
    ct = time_program(prog, arch)
    r = ct.tick_hz // int(arch.clock_hz)
    assert np.array_equal(ct.starts, run.starts * r)
    assert np.array_equal(ct.ends, run.ends * r)
    assert ct.latency == run.cycles * r


# -- DMA costs by hand -------------------------------------------------------------------
def test_dma_cost_of_a_full_tile_by_hand():
    src, dst = dram(128, 0, 2048), sb(128, 0, 2048)  # 4 KiB per partition, contiguous
    c = dma_cost(src, dst, TRN2)
    assert (c.bytes, len(c.engines), c.descriptors, c.run) == (128 * 4096, 16, 128, 4096)
    # eight partitions per engine, at 97% of 23 B/ns (the overview's figure at 4 KiB)
    assert c.engine_ns == pytest.approx(8 * 4096 / (23.0 * 0.97))
    assert not c.transposed
    # a 32-partition tile uses 4 engines (8 partitions each); 4 partitions one engine
    assert dma_cost(dram(32, 0, 64), sb(32, 0, 64), TRN2).engines == (0, 1, 2, 3)
    assert dma_cost(dram(4, 0, 4096), sb(4, 0, 4096), TRN2).engines == (0,)
    # partitions 60..67 straddle two bands: engines 7 and 8, four partitions each
    c = dma_cost(dram(8, 0, 1024), sb(8, 0, 1024, part=60), TRN2)
    assert c.engines == (7, 8)
    assert c.engine_ns == pytest.approx(4 * 2048 / (23.0 * 0.81))


def test_the_throughput_curve_at_its_documented_points():
    from systolic.timing.dma import curve_fraction

    # nki-dma-overview.rst figure, read at its points (FACTS)
    for nbytes, frac in ((32, 0.014), (128, 0.05), (256, 0.10), (512, 0.21), (1024, 0.42),
                         (2048, 0.81), (4096, 0.97), (32768, 1.0)):
        assert curve_fraction(TRN2, nbytes) == pytest.approx(frac)
    assert curve_fraction(TRN2, 1 << 20) == 1.0  # the plateau
    assert curve_fraction(TRN2, 16) == pytest.approx(0.007)  # constant time per descriptor
    # between points: linear in log2(bytes), so 1.5 KiB sits between 1 and 2 KiB's
    mid = curve_fraction(TRN2, 1536)
    assert 0.42 < mid < 0.81 and mid == pytest.approx(0.42 + 0.39 * np.log2(1.5))


def test_a_1kib_per_partition_load_runs_at_42_percent_of_the_plateau_on_trn1():
    # issue 18: a [128, 512] bf16 HBM->SBUF load on trn1 ran at 217.6 GB/s before; the
    # overview's figure gives ~42% of the 16 x 17 B/ns plateau
    trn1 = get_arch("trn1")
    c = dma_cost(dram(128, 0, 512), sb(128, 0, 512), trn1)
    gbps = c.bytes / c.engine_ns
    assert gbps == pytest.approx(16 * 17 * 0.42)


def test_short_runs_cost_more_per_byte():
    long = dma_cost(dram(128, 0, 2048), sb(128, 0, 2048), TRN2)
    short = dma_cost(dram(128, 0, 64, pitch=4096), sb(128, 0, 64), TRN2)
    assert short.engine_ns / short.bytes == pytest.approx(
        long.engine_ns / long.bytes * 0.97 / 0.05)


def test_transposing_pattern_is_detected():
    # a.T tile: partition k is contiguous in device memory (partition_step = itemsize)
    ap = AccessPattern(Space.DRAM, 0, 128, 0, ((4096, 128),), "bf16", partition_step=2)
    assert contiguous_run(ap) == (256, True)
    assert contiguous_run(dram(128, 0, 512)) == (128 * 1024, False)


def test_a_dma_waits_its_fixed_cost_and_hbm_is_shared():
    # 32 independent 4 KiB-per-partition loads: at least HBM time, plus one fixed cost
    ins = [DmaCopy(dram(128, j * 524288, 2048), sb(128, (j % 4) * 4096, 2048), queue=0)
           for j in range(32)]
    ct = time_program(Program(ins), TRN2)
    hbm_s = 32 * 128 * 4096 / TRN2.hbm_bytes_per_s
    assert ct.seconds >= hbm_s + TRN2.dma_fixed_ns * 1e-9
    assert ct.seconds < 1.3 * hbm_s + 2e-6


# -- dependencies: a property test against brute force ---------------------------------
def _bytes(ap: AccessPattern) -> set[tuple[str, int, int]]:
    """Every (space, partition, byte) the pattern touches (DRAM: partition 0, flat)."""
    out = set()
    isz = ap.itemsize
    idx = np.zeros(1, dtype=np.int64)
    for step, num in ap.dims:
        idx = (idx[:, None] + np.arange(num) * step).ravel()
    for p in range(ap.partitions):
        for e in idx.tolist():
            for b in range(isz):
                if ap.space is Space.DRAM:
                    out.add(("DRAM", 0, ap.offset + p * ap.partition_step + e * isz + b))
                else:
                    out.add((ap.space.value, ap.partition + p, ap.offset + e * isz + b))
    return out


def _rw(ins) -> tuple[set, set]:
    if isinstance(ins, DmaCopy | TensorCopy | Activation):
        return _bytes(ins.src), _bytes(ins.dst)
    if isinstance(ins, TensorTensor):
        return _bytes(ins.a) | _bytes(ins.b), _bytes(ins.dst)
    return set(), _bytes(ins.dst)


@st.composite
def programs(draw):
    n = draw(st.integers(1, 25))
    ins = []
    for _ in range(n):
        def tile(space, dtype="bf16"):
            p0 = draw(st.integers(0, 6))
            p = draw(st.integers(1, 4))
            off = draw(st.integers(0, 12)) * 4
            num = draw(st.integers(1, 6))
            if space is Space.DRAM:
                return AccessPattern(Space.DRAM, 0, p, 64 * p0 + off, ((1, num),), dtype,
                                     partition_step=draw(st.sampled_from([16, 32, 64])))
            return AccessPattern(space, p0, p, off, ((1, num),), dtype)
        kind = draw(st.sampled_from(["dma_in", "dma_out", "copy", "tt", "memset", "act"]))
        eng = draw(st.sampled_from([Engine.VECTOR, Engine.GPSIMD, Engine.SCALAR]))
        if kind == "dma_in":
            src = tile(Space.DRAM)
            dst = AccessPattern(Space.SBUF, draw(st.integers(0, 4)), src.partitions,
                                draw(st.integers(0, 12)) * 4, src.dims, "bf16")
            ins.append(DmaCopy(src, dst, queue=draw(st.integers(0, 15))))
        elif kind == "dma_out":
            dst = tile(Space.DRAM)
            src = AccessPattern(Space.SBUF, draw(st.integers(0, 4)), dst.partitions,
                                draw(st.integers(0, 12)) * 4, dst.dims, "bf16")
            ins.append(DmaCopy(src, dst, queue=draw(st.integers(0, 15))))
        else:
            space = draw(st.sampled_from([Space.SBUF, Space.PSUM])) \
                if eng is not Engine.GPSIMD else Space.SBUF
            a = tile(space)
            dst = AccessPattern(Space.SBUF, draw(st.integers(0, 4)), a.partitions,
                                draw(st.integers(0, 12)) * 4, a.dims, "bf16")
            if kind == "copy":
                ins.append(TensorCopy(a, dst, eng))
            elif kind == "tt":
                b = AccessPattern(Space.SBUF, a.partition, a.partitions,
                                  draw(st.integers(0, 12)) * 4, a.dims, "bf16")
                ins.append(TensorTensor(a, b, dst, AluOp.ADD, eng))
            elif kind == "memset":
                ins.append(Memset(dst, 0.0, eng))
            else:
                ins.append(Activation(a, dst, engine=eng))
    return Program(ins)


@settings(max_examples=150, deadline=None)
@given(programs())
def test_no_dependency_is_ever_violated(prog):
    ct = time_program(prog, TRN2)
    assert len(ct.starts) == len(prog)  # one op per instruction here
    rw = [_rw(i) for i in prog]
    for j in range(len(prog)):
        rj, wj = rw[j]
        for i in range(j):
            ri, wi = rw[i]
            if wi & (rj | wj) or ri & wj:
                assert ct.starts[j] >= ct.ends[i], (i, j)
    assert sum(ct.bound_ticks.values()) == ct.latency
    assert all(0 <= b <= 1 for b in ct.busy().values())


def test_same_engine_dependency_pays_the_static_overhead():
    a, b, c = sb(128, 0, 64), sb(128, 4096, 64), sb(128, 8192, 64)
    indep = time_program(Program([TensorCopy(a, b), TensorCopy(a, c)]), TRN2)
    dep = time_program(Program([TensorCopy(a, b), TensorCopy(b, c)]), TRN2)
    per = TRN2.tick_hz // TRN2.vector_hz
    assert dep.latency - indep.latency == TRN2.engine_dep_overhead * per
    # two 64-element copies at max(MIN_II, ceil(64/4)) = 64 cycles each
    assert indep.latency == 2 * 64 * per


def test_cross_engine_wait_pays_the_sync_latency_and_the_access_overhead():
    a, b, c = sb(128, 0, 64), sb(128, 4096, 64), sb(128, 8192, 64)
    ct = time_program(Program([TensorCopy(a, b), TensorCopy(b, c, Engine.GPSIMD)]), TRN2)
    sync = ceil(TRN2.sync_ns * TRN2.tick_hz / 1e9)
    # the producer's SBUF write lands ~60 of its cycles after it ends (v2 guide)
    access = TRN2.engine_access_overhead * (TRN2.tick_hz // TRN2.vector_hz)
    assert ct.starts[1] == ct.ends[0] + sync + access
    assert ct.bound_ticks["sync"] == sync + access


def test_a_prefix_summary_equals_timing_the_prefix_alone():
    from systolic.timing.core import time_prefixes

    prog = lower(MatmulSpec(600, 300, 900, "bf16"), TRN2).program
    cuts = (1, 20, 51, len(prog))
    for cut, ct in zip(cuts, time_prefixes(prog, TRN2, cuts), strict=True):
        alone = time_program(Program(prog.instructions[:cut]), TRN2)
        assert ct.latency == alone.latency
        assert ct.bound_ticks == alone.bound_ticks and ct.busy_ticks == alone.busy_ticks
        assert (ct.dma_bytes, ct.useful_macs) == (alone.dma_bytes, alone.useful_macs)


def test_small_k_matmul_is_not_near_peak_when_its_data_cannot_arrive():
    import systolic

    rng = np.random.default_rng(0)
    a = rng.standard_normal((1024, 384)).astype(np.float32)
    b = rng.standard_normal((384, 2048)).astype(np.float32)
    rep = systolic.matmul(a, b, arch="trn2").report
    assert rep.utilization > 0.95  # the Tensor Engine alone: streaming flat out
    core = rep.core
    # 2 x 1024 x 384 x 2048 FLOPs against at least the HBM time of the operands and the
    # fp32 result: intensity ~ 130 FLOP/byte, below the ridge (~ 217 on trn2)
    need = (1024 * 384 * 2 + 384 * 2048 * 2 + 1024 * 2048 * 4) / TRN2.hbm_bytes_per_s
    assert core.seconds >= need
    assert core.hfu < 0.6 and core.bound == "dma"
    assert rep.to_dict()["hfu"] == core.hfu


@pytest.mark.parametrize("spec", [MatmulSpec(1024, 128, 2048, "bf16"),
                                  MatmulSpec(2048, 2048, 2048, "bf16"),
                                  MatmulSpec(512, 512, 512, "fp32"),
                                  MatmulSpec(256, 4096, 512, "fp8_e4m3")])
def test_roofline_point_never_exceeds_a_roof(spec):
    from systolic.views.report import build_report

    rep = build_report(lower(spec, TRN2).program, TRN2, spec)
    tflops = rep.core.tflops
    assert tflops <= rep.peak_tflops * (1 + 1e-12)
    assert tflops <= rep.intensity * TRN2.hbm_bytes_per_s / 1e12 * (1 + 1e-12)


def test_core_timeline_plot_draws_every_engine_and_queue(tmp_path):
    from systolic.views.core_plot import core_timeline_plot, plot_rows

    ct = time_program(matmul_kernel(6, reload=True), TRN2)
    rows = plot_rows(ct)
    labels = [r.label for r in rows]
    assert labels[:5] == ["Tensor (LDWEIGHTS)", "TensorMatrix (MATMUL)", "Vector", "Scalar",
                          "GpSimd"]
    # the DMA rows account for every queue exactly once (identical queues share a row)
    assert sum(r.queues for r in rows[5:]) == TRN2.dma_engines
    assert all(r.label.startswith("DMA engine") for r in rows[5:])
    assert len(rows[1].lo) == 6 and len(rows[0].lo) == 6  # 6 MatMuls, 6 weight loads
    out = core_timeline_plot(ct, tmp_path / "t.png", width=600)
    assert out.stat().st_size > 1000 and out.read_bytes()[:4] == b"\x89PNG"


def test_core_timeline_plot_shades_dense_rows(tmp_path):
    from systolic.views.core_plot import core_timeline_plot, plot_rows
    from systolic.views.plot_base import MIN_TINT, row_ink

    ct = time_program(accumulate_kernel(400), TRN2)  # 400 short weight loads, ~6% busy
    ld, mm = plot_rows(ct)[:2]
    how, _, strength = row_ink(ld.lo, ld.hi, (0, ct.latency), 300)
    assert how == "tint" and 0 < strength.max() <= 1
    assert strength.mean() < MIN_TINT + 2 * ld.busy  # faint, not a solid band
    how, lo, hi = row_ink(mm.lo, mm.hi, (0, ct.latency), 300)  # back to back: stays solid
    assert how == "bars" and (hi - lo).sum() > 0.9 * ct.latency
    out = core_timeline_plot(ct, tmp_path / "t.svg", width=400)
    assert out.stat().st_size > 1000


def test_matmul_command_reports_the_whole_core(tmp_path, capsys):
    import json

    from systolic.cli import main

    png = tmp_path / "core.png"
    assert main(["matmul", "256", "384", "1024", "--json", "--core-timeline", str(png)]) == 0
    d = json.loads(capsys.readouterr().out)
    for key in ("cycles", "utilization", "breakdown", "latency_us", "tflops", "peak_tflops",
                "hfu", "engines", "dma", "bound"):
        assert key in d
    assert set(d["engines"]) == {"tensor", "vector", "scalar", "gpsimd",
                                 *(f"dma{q}" for q in range(16))}
    assert all(set(v) == {"busy", "instructions"} for v in d["engines"].values())
    assert d["bound"]["by"] in CAUSES
    assert d["tflops"] <= d["pe_tflops"] * (1 + 1e-12)
    assert png.read_bytes()[:4] == b"\x89PNG"
