"""The Neuron compiler's part of the timing (issue 18): buffer rotation and PSUM zeroing in
the NKI front end's compiler stage, the list scheduler against program order, the
engine-cost table at the documents' own numbers, the read-after-write-only dependency
overhead and the what-if latencies. References are the documents' formulas and closed
forms, or the same Program timed in the other mode; none is the code's earlier output."""

from __future__ import annotations

from itertools import pairwise
from math import ceil
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from helpers import write_kernel
from hypothesis import given, settings
from hypothesis import strategies as st

import systolic.nki as snki
from systolic.arch import get_arch
from systolic.errors import KernelError, SystolicError
from systolic.isa import (
    AccessPattern,
    Activation,
    AluOp,
    DmaCopy,
    Engine,
    MatMul,
    Memset,
    Program,
    Space,
    TensorCopy,
    TensorTensor,
)
from systolic.nki.alloc import DEFAULT_BUFFERS
from systolic.timing.core import SCHEDULES, time_program
from systolic.timing.costs import engine_cycles
from systolic.timing.dma import queue_for

TRN1, TRN2 = get_arch("trn1"), get_arch("trn2")
EX = Path(__file__).resolve().parents[1] / "examples" / "kernels"


@pytest.fixture(autouse=True)
def _hook():
    snki.install("trn2")


def sb(n: int, off: int = 0, dtype: str = "bf16", step: int = 1, p: int = 128
       ) -> AccessPattern:
    return AccessPattern(Space.SBUF, 0, p, off, ((step, n),), dtype)


def ps(n: int, bank: int = 0) -> AccessPattern:
    return AccessPattern(Space.PSUM, 0, 128, bank * 2048, ((1, n),), "fp32")


def dram(n: int, off: int = 0, dtype: str = "bf16") -> AccessPattern:
    isz = 4 if dtype == "fp32" else 2
    return AccessPattern(Space.DRAM, 0, 128, off, ((1, n),), dtype, partition_step=n * isz)


# -- the engine-cost table at the nki.isa formulas (aws-neuron-sdk 7c165a3e) ----------------
@pytest.mark.parametrize(("ins", "arch", "cycles"), [
    # tensor_tensor: max(MIN_II, N) with one PSUM input, or all-bf16 SBUF add; else 2N
    (TensorTensor(ps(512), sb(512, 4096, "fp32"), sb(512, 8192, "fp32"), AluOp.ADD), TRN1,
     512),
    (TensorTensor(sb(512, 0, "fp32"), sb(512, 4096, "fp32"), sb(512, 8192, "fp32"),
                  AluOp.ADD), TRN1, 1024),
    (TensorTensor(sb(512), sb(512, 4096), sb(512, 8192), AluOp.ADD), TRN1, 512),
    (TensorTensor(sb(512), sb(512, 4096, "fp32"), sb(512, 8192), AluOp.ADD), TRN1, 1024),
    (TensorTensor(sb(512), sb(512, 4096), sb(512, 8192), AluOp.MAXIMUM), TRN1, 1024),
    (TensorTensor(sb(16), sb(16, 4096), sb(16, 8192), AluOp.ADD), TRN1, 64),  # MIN_II
    # memset: N/2 for zero in bf16/fp16, else N
    (Memset(sb(1024), 0.0), TRN1, 512),
    (Memset(sb(1024, 0, "fp32"), 0.0), TRN1, 1024),
    (Memset(sb(1024), 1.0), TRN1, 1024),
    # tensor_copy: N; trn2 Vector perf mode 4x SBUF->SBUF bf16 contiguous, 2x strided
    (TensorCopy(sb(1024), sb(1024, 4096)), TRN1, 1024),
    (TensorCopy(sb(1024), sb(1024, 4096)), TRN2, 256),
    (TensorCopy(sb(1024, 0, "bf16", 2), sb(1024, 8192)), TRN2, 512),
    (TensorCopy(ps(512), sb(512, 4096, "fp32")), TRN2, 512),  # fp32: no perf mode
    # activation on Scalar: N
    (Activation(sb(300), sb(300, 4096), engine=Engine.SCALAR), TRN2, 300),
])
def test_engine_costs_follow_the_documented_formulas(ins, arch, cycles) -> None:
    assert engine_cycles(ins, arch, ins.engine) == cycles


def test_an_instruction_kind_without_a_row_is_refused_in_one_line() -> None:
    with pytest.raises(SystolicError, match="engine"):
        engine_cycles(MatMul(sb(128), ps(128), 0, "bf16", 0, 15, 15), TRN2, Engine.VECTOR)


@st.composite
def engine_programs(draw: st.DrawFn) -> list:
    """1-6 Vector/GpSimd/Scalar instructions on disjoint slots, mixed dtypes, strides and
    SBUF/PSUM operands."""
    dtypes = ("bf16", "fp32", "fp8_e4m3", "fp16")
    ops = []
    for j in range(draw(st.integers(1, 6))):
        n = draw(st.sampled_from((8, 64, 100, 512, 1024)))
        step = draw(st.sampled_from((1, 1, 2, 16)))
        d1, d2, d3 = (draw(st.sampled_from(dtypes)) for _ in range(3))
        off = j * 40_000  # disjoint slots per op: no dependencies among them
        a = sb(n, off, d1, step)
        b = ps(n, j % 8) if draw(st.booleans()) else sb(n, off + 20_000, d2)
        d = sb(n, off + 30_000, d3)
        kind = draw(st.sampled_from(("tt", "copy", "memset", "act")))
        eng = draw(st.sampled_from((Engine.VECTOR, Engine.GPSIMD)))
        if kind == "tt":
            ops.append(TensorTensor(a, b, d, AluOp.ADD, eng))
        elif kind == "copy":
            ops.append(TensorCopy(a, d, eng))
        elif kind == "memset":
            ops.append(Memset(d, draw(st.sampled_from((0.0, 1.0))), eng))
        else:
            ops.append(Activation(a, d, engine=Engine.SCALAR))
    return ops


@settings(max_examples=40, deadline=None)
@given(engine_programs(), st.sampled_from(("trn1", "trn2", "trn3")))
def test_each_op_lasts_its_cost_computed_alone(ops, arch_name) -> None:
    # issue 18: hand-written memo keys missed inputs, so an op's time depended on what ran
    # before it; every op's duration in a mixed program is its own table cost
    arch = get_arch(arch_name)
    ct = time_program(Program(ops), arch)
    for i, ins in enumerate(ops):
        per = arch.tick_hz // {Engine.VECTOR: arch.vector_hz, Engine.SCALAR: arch.scalar_hz,
                               Engine.GPSIMD: arch.gpsimd_hz}[ins.engine]
        assert ct.ends[i] - ct.starts[i] == engine_cycles(ins, arch, ins.engine) * per
        alone = time_program(Program([ins]), arch)
        assert alone.latency == ct.ends[i] - ct.starts[i]


# -- dependencies and scheduling ------------------------------------------------------------
def test_the_dependency_overhead_is_charged_on_read_after_write_only() -> None:
    a, b, c = sb(64), sb(64, 4096), sb(64, 8192)
    per = TRN2.tick_hz // TRN2.vector_hz
    raw = time_program(Program([TensorCopy(a, b), TensorCopy(b, c)]), TRN2)
    war = time_program(Program([TensorCopy(a, b), TensorCopy(c, a)]), TRN2)  # writes a read
    indep = time_program(Program([TensorCopy(a, b), TensorCopy(a, c)]), TRN2)
    assert raw.latency == indep.latency + TRN2.engine_dep_overhead * per
    assert war.latency == indep.latency == 2 * 64 * per
    assert war.starts[1] >= war.ends[0]  # the order is still kept


def _store_then_prefetch() -> Program:
    """load A; a long Vector op on A; store its result; load B (independent of all)."""
    a, c, b = sb(2048, 0, "fp32"), sb(2048, 16384, "fp32"), sb(2048, 32768, "fp32")
    return Program([
        DmaCopy(dram(2048, 0, "fp32"), a, queue_for(dram(1), a)),
        TensorTensor(a, a, c, AluOp.MAXIMUM),  # 2N = 4096 Vector cycles
        DmaCopy(c, dram(2048, 1 << 22, "fp32"), queue_for(c, dram(1))),
        DmaCopy(dram(2048, 1 << 23, "fp32"), b, queue_for(dram(1), b)),
    ])


def test_a_store_waiting_on_compute_no_longer_blocks_the_next_prefetch() -> None:
    prog = _store_then_prefetch()
    ls = time_program(prog, TRN2)
    po = time_program(prog, TRN2, schedule="program-order")
    assert SCHEDULES == ("list", "program-order")
    # the list scheduler moves the prefetch ahead of the store that waits on the Vector op
    assert ls.ends[3] <= ls.starts[2]
    # program order: the prefetch waits for the store on the same DMA engines
    assert po.starts[3] >= po.ends[2]
    assert ls.latency < po.latency
    assert ls.to_dict()["schedule"] == "list" and po.to_dict()["schedule"] == "program-order"


def test_an_unknown_schedule_is_refused() -> None:
    with pytest.raises(SystolicError, match="schedule must be one of"):
        time_program(_store_then_prefetch(), TRN2, schedule="greedy")


def test_what_if_latencies_bracket_the_bound() -> None:
    prog = _store_then_prefetch()
    ct = time_program(prog, TRN2)
    w = ct.what_if
    assert set(w) == {"dma_free", "engines_free", "pe_free"}
    assert all(0 < v <= ct.latency for v in w.values())
    assert w["pe_free"] == ct.latency  # no PE instruction: nothing to gain
    # with DMA free, what is left is the Vector op (2N cycles) and its sync latencies
    per = TRN2.tick_hz // TRN2.vector_hz
    assert 4096 * per <= w["dma_free"] < ct.latency
    assert set(ct.to_dict()["what_if_us"]) == set(w)


# -- the compiler stage of the NKI front end ------------------------------------------------
def _addresses(rec: snki.Recorded, line_text: str, src: Path) -> list[int]:
    """SBUF offsets of the DmaCopy destinations made by the kernel line containing
    ``line_text``."""
    lines = src.read_text().splitlines()
    want = next(i + 1 for i, t in enumerate(lines) if line_text in t)
    return [ins.dst.offset for ins, (_, ln) in zip(rec.program.instructions, rec.lines,
                                                    strict=True)
            if isinstance(ins, DmaCopy) and ln == want]


def test_affine_loop_tiles_rotate_over_the_buffers_and_one_buffer_restores_reuse() -> None:
    src = EX / "tiled_matmul.py"
    args = ["bf16[512,256]", "bf16[512,1024]"]
    two = snki.record_kernel(str(src), "tiled_matmul", args, {}, arch="trn2")
    one = snki.record_kernel(str(src), "tiled_matmul", args, {}, arch="trn2", buffers=1)
    a2 = _addresses(two, "nisa.dma_copy(dst=a,", src)
    a1 = _addresses(one, "nisa.dma_copy(dst=a,", src)
    assert len(a2) == len(a1) == 2 * 2 * 4
    assert DEFAULT_BUFFERS == 2 and two.allocation.buffers == 2
    # consecutive iterations write different physical tiles, so iteration i+1's load need
    # not wait for iteration i's matmul (direct-allocation guide, "double buffering")
    assert all(x != y for x, y in pairwise(a2))
    assert len(set(a1)) == 1  # one buffer: every iteration reuses the same bytes
    assert time_program(two.program, "trn2").latency < time_program(one.program,
                                                                    "trn2").latency


def test_rotation_shows_in_the_program_listing(capsys: pytest.CaptureFixture[str]) -> None:
    from systolic.cli import main

    argv = ["kernel", f"{EX / 'tiled_matmul.py'}:tiled_matmul", "--arg", "lhsT=bf16[512,128]",
            "--arg", "rhs=bf16[512,512]", "--program"]
    dsts = {}
    for n in (1, 2):
        assert main([*argv, "--buffers", str(n)]) == 0
        out = capsys.readouterr().out
        dsts[n] = [ln.split("dst=")[1].split("(")[0] for ln in out.splitlines()
                   if ln.startswith("DmaCopy") and "dst=SBUF" in ln]
    assert len(set(dsts[2])) > len(set(dsts[1]))


def test_buffers_must_be_a_positive_count() -> None:
    from systolic.cli import main

    with pytest.raises(SystemExit):
        main(["kernel", f"{EX / 'tiled_matmul.py'}:tiled_matmul", "--arg",
              "lhsT=bf16[128,128]", "--arg", "rhs=bf16[128,512]", "--buffers", "0"])


SEQ = '''
@nki.jit
def k(x):
    out = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.{rng}(4):
        t = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[i * 128:(i + 1) * 128, :])
        nisa.dma_copy(dst=out, src=t)
    return out
'''


@pytest.mark.parametrize(("rng", "distinct"), [("affine_range", 2), ("sequential_range", 1)])
def test_only_affine_range_bodies_rotate(tmp_path: Path, rng: str, distinct: int) -> None:
    p = write_kernel(tmp_path, SEQ.format(rng=rng))
    rec = snki.record_kernel(str(p), "k", ["bf16[512,512]"], {}, arch="trn2")
    loads = [ins.dst.offset for ins in rec.program.instructions
             if isinstance(ins, DmaCopy) and ins.dst.space is Space.SBUF]
    assert len(loads) == 4 and len(set(loads)) == distinct


ZEROS = '''
@nki.jit
def k(lhsT, rhs):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
    {peek}
    for kk in nl.affine_range(lhsT.shape[0] // 128):
        a = nl.load(lhsT[kk * 128:(kk + 1) * 128, :])
        b = nl.load(rhs[kk * 128:(kk + 1) * 128, :])
        acc += nl.matmul(a, b, transpose_x=True)
    nl.store(out, value=nl.copy(acc, dtype=nl.float32))
    return out
'''


def test_psum_zeros_then_accumulate_become_the_start_flag(tmp_path: Path) -> None:
    p = write_kernel(tmp_path, ZEROS.format(peek=""))
    rec = snki.record_kernel(str(p), "k", ["bf16[384,128]", "bf16[384,512]"], {}, arch="trn2")
    ins = rec.program.instructions
    assert not any(isinstance(i, Memset) for i in ins)
    mms = [i for i in ins if isinstance(i, MatMul)]
    assert len(mms) == 3 and mms[0].flags & 1 and not mms[1].flags & 1  # START on the first
    assert rec.allocation.memsets_to_start == 1
    # and the values are still the product (the START overwrites what the memset zeroed)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((384, 128)).astype(np.float32)
    y = rng.standard_normal((384, 512)).astype(np.float32)
    got = snki.values(snki.load_kernel(str(p), "k"), [x.astype(ml_dtypes.bfloat16),
                                                      y.astype(ml_dtypes.bfloat16)])
    ref = _bf16(x).T @ _bf16(y)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4)  # fp32 accumulation of 384


def test_zeros_that_are_read_before_the_matmul_stay_a_memset(tmp_path: Path) -> None:
    peek = ("z = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)\n"
            "    nisa.tensor_copy(dst=z, src=acc)")
    p = write_kernel(tmp_path, ZEROS.format(peek=peek))
    rec = snki.record_kernel(str(p), "k", ["bf16[256,128]", "bf16[256,512]"], {}, arch="trn2")
    assert sum(isinstance(i, Memset) for i in rec.program.instructions) == 1
    assert rec.allocation.memsets_to_start == 0


def test_psum_that_cannot_hold_the_live_groups_is_a_one_line_error(tmp_path: Path) -> None:
    body = '''
@nki.jit
def k(x):
    accs = [nl.zeros((128, 512), nl.float32, buffer=nl.psum) for _ in range(9)]
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    for a in accs:
        nl.store(out, value=nl.copy(a, dtype=nl.float32))
    return out
'''
    p = write_kernel(tmp_path, body)
    with pytest.raises(KernelError, match="PSUM is full"):
        snki.record_kernel(str(p), "k", ["bf16[128,128]"], {}, arch="trn2")


def test_fixed_dma_cost_rounds_to_whole_ticks() -> None:
    ct = time_program(Program([DmaCopy(dram(64), sb(64), 0)]), TRN2)
    assert ct.starts[0] >= ceil(TRN2.dma_fixed_ns * TRN2.tick_hz / 1e9)



def _bf16(a: np.ndarray) -> np.ndarray:
    return a.astype(ml_dtypes.bfloat16).astype(np.float64)


def test_kernel_json_reports_the_allocation_what_if_and_schedule(
        capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from systolic.cli import main

    argv = ["kernel", f"{EX / 'tiled_matmul.py'}:tiled_matmul", "--arg", "lhsT=bf16[256,128]",
            "--arg", "rhs=bf16[256,512]", "--json"]
    got = {}
    for mode in SCHEDULES:
        assert main([*argv, "--schedule", mode]) == 0
        got[mode] = json.loads(capsys.readouterr().out)
    d = got["list"]
    a = d["allocation"]
    assert a["buffers"] == DEFAULT_BUFFERS and a["memsets_to_start"] == 0
    # the kernel's a and b tiles (two per iteration, K/128 = 2 iterations) and its PSUM tile
    by_line = {r["line"]: r for r in a["rotations"]}
    assert all(r["physical"] <= r["tiles"] for r in by_line.values())
    assert {r["buffer"] for r in by_line.values()} == {"sbuf", "psum"}
    assert set(d["what_if_us"]) == {"dma_free", "engines_free", "pe_free"}
    assert all(v <= d["latency_us"] + 1e-9 for v in d["what_if_us"].values())
    assert d["schedule"] == "list" and got["program-order"]["schedule"] == "program-order"
    # the keys that were there before keep their meaning: the latency is time_program's
    rec = snki.record_kernel(str(EX / "tiled_matmul.py"), "tiled_matmul",
                             ["bf16[256,128]", "bf16[256,512]"], {}, arch="trn2")
    for mode in SCHEDULES:
        assert got[mode]["latency_us"] == time_program(rec.program, "trn2",
                                                       schedule=mode).latency_us
