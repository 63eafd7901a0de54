"""Whole-core timing of NKI kernels: nki.benchmark, `systolic kernel --json`, the bound of
the four matmul variants of docs/tutorial.md, QuantizeMx and casting-DMA costs, and the
DMA queue spreading of the front end. References are closed forms (bytes a kernel must
move, an engine's documented cycle rule) or the scheduler called directly."""

from __future__ import annotations

import json
from math import ceil
from pathlib import Path

import numpy as np
import pytest
from helpers import QUANTIZE_MX_KERNEL, write_kernel

import systolic.nki as snki
from systolic.arch import get_arch
from systolic.errors import SystolicError
from systolic.isa import DmaCopy, QuantizeMx, TensorCopy
from systolic.nki.timing import bound_kind, time_recorded, timing_fields
from systolic.timing.core import time_program
from systolic.timing.dma import dma_cost

EX = Path(__file__).resolve().parents[1] / "examples" / "kernels"
VARIANTS = ("tiled_matmul", "hoisted_matmul", "block_free_matmul", "block_all_matmul")


@pytest.fixture(autouse=True)
def _hook():
    snki.install("trn2")


def _rec(name: str, k: int, m: int, n: int, arch: str = "trn2", **params: int
         ) -> snki.Recorded:
    return snki.record_kernel(str(EX / f"{name}.py"), name,
                              [f"bf16[{k},{m}]", f"bf16[{k},{n}]"], params, arch=arch)




def test_a_kernel_that_reloads_every_tile_is_dma_bound() -> None:
    k, m, n = 512, 512, 1024
    rec = _rec("tiled_matmul", k, m, n)
    ct = time_recorded(rec)
    assert bound_kind(ct) == "dma" and ct.bound in ("dma", "dma_latency")
    # every matmul loads its [128,128] and [128,512] bf16 tiles; the output is stored once
    tiles = (m // 128) * (n // 512) * (k // 128)
    assert ct.hbm_bytes == tiles * (128 * 128 + 128 * 512) * 2 + m * n * 2
    gbps = timing_fields(ct)["dma"]["gbps"]
    assert 0 < gbps * 1e9 <= ct.arch.hbm_bytes_per_s


def test_a_kernel_that_blocks_all_three_dimensions_is_pe_bound() -> None:
    rec = _rec("block_all_matmul", 2048, 2048, 2048)
    ct = time_recorded(rec)
    assert ct.bound == "pe" and bound_kind(ct) == "pe"
    assert rec.cache_hits > 0  # one latched stationary tile serves TILES_N moving tiles
    assert ct.tflops <= ct.peak_tflops
    # its HBM traffic: the moving operand once, the stationary once per N block, out once
    k = m = n = 2048
    assert ct.hbm_bytes == (k * n + k * m * (n // 1024) + m * n) * 2


def test_each_variant_is_faster_and_the_bound_moves_from_dma_to_pe() -> None:
    timed = [time_recorded(_rec(v, 2048, 2048, 2048)) for v in VARIANTS]
    lat = [ct.latency for ct in timed]
    assert lat == sorted(lat, reverse=True) and len(set(lat)) == 4
    assert bound_kind(timed[0]) == "dma" and bound_kind(timed[-1]) == "pe"


@pytest.mark.parametrize("name", VARIANTS)
def test_breakdown_adds_up_and_no_queue_is_busy_more_than_the_latency(name: str) -> None:
    ct = time_recorded(_rec(name, 512, 512, 1024))
    assert sum(ct.bound_ticks.values()) == ct.latency
    assert all(0 <= b <= 1 for b in ct.busy().values())
    d = timing_fields(ct)
    assert sum(c["percent"] for c in d["bound"]["causes"].values()) == pytest.approx(100)
    assert sum(e["instructions"] for k, e in d["engines"].items()
               if not k.startswith("dma")) == sum(
        v for k, v in snki.Recorded.counts(_rec(name, 512, 512, 1024)).items() if k != "dma")


def test_benchmark_percentiles_are_the_time_program_latency() -> None:
    import nki
    import nki.language as nl
    import nki.typing as nt

    kern = snki.load_kernel(str(EX / "hoisted_matmul.py"), "hoisted_matmul")
    bench = nki.benchmark(warmup=2, iters=3)(kern)
    bench(nt.tensor[[512, 256], nl.bfloat16], nt.tensor[[512, 1024], nl.bfloat16])
    res = bench.benchmark_result
    want = time_program(res.program, "trn2").latency_us
    assert res.timing.latency_us == want > 0
    for p in (0, 1, 50, 90, 99, 100):
        assert res.nc_latency.get_latency_percentile(p) == want
    with pytest.raises(SystolicError, match="between 0 and 100"):
        res.nc_latency.get_latency_percentile(101)


def test_cli_json_agrees_with_the_python_api(capsys: pytest.CaptureFixture[str]) -> None:
    from systolic.cli import main

    target = f"{EX / 'block_free_matmul.py'}:block_free_matmul"
    assert main(["kernel", target, "--arg", "lhsT=bf16[512,1024]", "--arg",
                 "rhs=bf16[512,2048]", "--param", "TILES_M=4", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    rec = _rec("block_free_matmul", 512, 1024, 2048, TILES_M=4)
    want = json.loads(json.dumps(timing_fields(time_program(rec.program, "trn2"))))
    for key in ("latency_us", "tflops", "peak_tflops", "hfu", "engines", "dma", "bound",
                "intensity"):
        assert info[key] == want[key], key
    assert info["counts"] == rec.counts() and "outputs" not in info  # no values computed


def test_cli_human_output_shows_latency_bound_and_breakdown(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from systolic.cli import main

    trace = tmp_path / "k.json"
    target = f"{EX / 'tiled_matmul.py'}:tiled_matmul"
    assert main(["kernel", target, "--arg", "lhsT=bf16[256,128]", "--arg",
                 "rhs=bf16[256,512]", "--trace", str(trace)]) == 0
    out = capsys.readouterr().out
    ct = time_recorded(_rec("tiled_matmul", 256, 128, 512))
    assert f"whole NeuronCore: {ct.latency_us:,.2f} us" in out
    assert "critical path" in out and "DMA fixed cost" in out and "total" in out
    doc = json.loads(trace.read_text())
    rows = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    assert {"Tensor (LDWEIGHTS)", "TensorMatrix (MATMUL)", "Vector", "DMA engine 0",
            "DMA engine 15"} <= rows
    slices = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    assert slices and all(e["args"]["line"].startswith("tiled_matmul.py:") for e in slices)
    assert doc["otherData"]["latency_us"] == ct.latency_us




def test_quantize_mx_costs_the_one_input_rule(tmp_path: Path) -> None:
    import ml_dtypes

    arch = get_arch("trn3")
    x = np.zeros((128, 2048), ml_dtypes.bfloat16)
    # without the scale memset the QuantizeMx waits on no Vector op before it, so its
    # duration is the bare cost rule (no dependency overhead)
    body = QUANTIZE_MX_KERNEL.replace("    nisa.memset(dst=s, value=0)\n", "")
    assert body != QUANTIZE_MX_KERNEL
    kernel = snki.load_kernel(str(write_kernel(tmp_path, body)), "k")
    rec = snki.record(kernel, [x], arch=arch)
    ct = time_recorded(rec)
    (i,) = [j for j, ins in enumerate(rec.program) if isinstance(ins, QuantizeMx)]
    (op,) = np.flatnonzero(ct.op_instr == i)
    # trainium3_arch.rst QuantizeMX: four elements per partition per cycle
    cycles = max(arch.engine_min_ii, ceil(2048 / 4))
    assert ct.ends[op] - ct.starts[op] == cycles * (ct.tick_hz // arch.vector_hz)
    assert ct.instructions["vector"] == 1


CAST = '''
@nki.jit
def k(x):
    P, F = x.shape
    t = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)            # bf16 HBM -> fp32 SBUF: a casting DMA
    out = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out
'''


def test_a_casting_dma_is_a_dma_and_a_timed_vector_copy(tmp_path: Path) -> None:
    import ml_dtypes

    arch = get_arch("trn2")
    x = np.zeros((128, 1024), ml_dtypes.bfloat16)
    rec = snki.record(snki.load_kernel(str(write_kernel(tmp_path, CAST)), "k"), [x])
    kinds = [type(ins) for ins in rec.program]
    assert kinds == [DmaCopy, TensorCopy, DmaCopy]
    ct = time_recorded(rec)
    (op,) = np.flatnonzero(ct.op_instr == 1)
    # bf16 in, fp32 out: no perf mode (trainium2_arch.rst: both in BF16/FP16), so the
    # nki.isa tensor_copy formula max(MIN_II, N) as written
    cycles = max(arch.engine_min_ii, 1024)
    assert ct.ends[op] - ct.starts[op] == cycles * (ct.tick_hz // arch.vector_hz)
    assert ct.hbm_bytes == 128 * 1024 * (2 + 4)


NARROW = '''
@nki.jit
def k(x):
    P, F = x.shape
    t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    for p in nl.affine_range(P // 8):  # one 8-partition band per dma_copy
        nisa.dma_copy(dst=t[p * 8:(p + 1) * 8, :], src=x[p * 8:(p + 1) * 8, :])
    out = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out
'''


def test_narrow_dma_copies_are_spread_over_the_engines(tmp_path: Path) -> None:
    import ml_dtypes

    x = np.zeros((128, 4096), ml_dtypes.bfloat16)
    rec = snki.record(snki.load_kernel(str(write_kernel(tmp_path, NARROW)), "k"), [x])
    loads = [ins for ins in rec.program if isinstance(ins, DmaCopy)][:16]
    # the stated queue rule: every load into SBUF on queue 0 (timing/dma.py queue_for)
    assert [ins.queue for ins in loads] == [0] * 16
    # eight partitions per DMA engine: band p is moved by engine p
    assert [dma_cost(ins.src, ins.dst, get_arch("trn2")).engines for ins in loads] == [
        (p,) for p in range(16)]
    ct = time_recorded(rec)
    assert all(ct.instructions[f"dma{q}"] == 2 for q in range(16))  # its load + the store
    # on one queue the 16 loads would queue up: spread, they overlap
    first = np.flatnonzero(np.isin(ct.op_instr, np.arange(16)))
    serial = int(np.sum(ct.ends[first] - ct.starts[first]))
    assert int(ct.ends[first].max() - ct.starts[first].min()) < serial / 4
    assert values_match(rec, x)


def values_match(rec: snki.Recorded, x: np.ndarray) -> bool:
    """The queue spreading changes no value: the copy returns its input."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal(x.shape).astype(x.dtype)
    out = snki.execute(rec, [a])
    return bool(np.array_equal(np.asarray(out).view(np.uint16), a.view(np.uint16)))


@pytest.mark.parametrize(("name", "args", "arch"), [
    ("basic_matmul", ["bf16[128,128]", "bf16[128,512]"], "trn2"),
    ("tiled_matmul_legacy", ["bf16[256,256]", "bf16[256,1024]"], "trn2"),
    ("blocked_matmul", ["bf16[256,256]", "bf16[256,2048]"], "trn2"),
    ("fp8_double_row", ["fp8_e4m3[512,256]", "fp8_e4m3[512,1024]"], "trn2"),
    ("mx_matmul", ["uint32[256,256]", "uint8[32,256]", "uint32[256,1024]", "uint8[32,1024]"],
     "trn3"),
])
def test_every_example_kernel_is_timed(name: str, args: list[str], arch: str) -> None:
    rec = snki.record_kernel(str(EX / f"{name}.py"), name, args, arch=arch)
    ct = time_recorded(rec)
    assert sum(ct.bound_ticks.values()) == ct.latency > 0
    assert 0 < ct.hfu <= 1 and ct.tflops <= ct.peak_tflops
    # every instruction is one op, a ReadOut none here: the ops are the Program
    assert sorted(set(ct.op_instr.tolist())) == list(range(len(rec.program)))


@pytest.mark.parametrize(("name", "k", "m", "n", "params"), [
    ("hoisted_matmul", 384, 256, 1024, {}),
    ("block_free_matmul", 384, 512, 2048, {"TILES_M": 2, "TILES_N": 2}),
    ("block_all_matmul", 512, 512, 2048, {"TILES_M": 2, "TILES_N": 2, "TILES_K": 2}),
])
def test_the_tutorial_kernels_compute_the_product(name: str, k: int, m: int, n: int,
                                                  params: dict[str, int]) -> None:
    """Several blocks in every dimension; float64 numpy of the bf16 operands, within fp32
    accumulation error in any order (PSUM and the SBUF sums) plus the bf16 output rounding."""
    import ml_dtypes
    from helpers import fp32_bound

    rng = np.random.default_rng(7)
    a = rng.standard_normal((k, m)).astype(np.float32).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(np.float32).astype(ml_dtypes.bfloat16)
    out = snki.values(snki.load_kernel(str(EX / f"{name}.py"), name), [a, b], params)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = a64.T @ b64
    bound = fp32_bound(a64.T, b64) + np.abs(ref) * 2.0 ** -8  # bf16: half an ulp, 2^-8 rel
    err = np.abs(out.astype(np.float64) - ref)
    assert out.shape == (m, n) and np.all(err <= bound), float((err - bound).max())


def test_cli_timeline_writes_the_whole_core_rows(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from systolic.cli import main

    png = tmp_path / "k.png"
    target = f"{EX / 'basic_matmul.py'}:basic_matmul"
    assert main(["kernel", target, "--arg", "lhsT=bf16[128,128]", "--arg", "rhs=bf16[128,512]",
                 "--timeline", str(png), "--width", "640", "--json"]) == 0
    cap = capsys.readouterr()
    assert json.loads(cap.out)["latency_us"] > 0  # stdout stays one JSON object
    assert f"wrote {png}" in cap.err
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(SystemExit) as exc:  # refused before any work, one line, exit 2
        main(["kernel", target, "--arg", "lhsT=bf16[128,128]", "--arg", "rhs=bf16[128,512]",
              "--timeline", str(tmp_path / "k.gif")])
    assert exc.value.code == 2 and "name the file .png or .svg" in capsys.readouterr().err
