"""NKI's entry points as kernels use them: jit (bare and with options), benchmark with
nt.tensor specs, simulate on the jitted object, and the import hook's one-line warning."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import systolic.nki as snki
from systolic.errors import SystolicError

EX = Path(__file__).resolve().parents[1] / "examples" / "kernels"


@pytest.fixture(autouse=True)
def _hook():
    snki.install("trn2")


def test_benchmark_records_the_program_from_tensor_specs() -> None:
    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl
    import neuronxcc.nki.typing as nt

    kern = snki.load_kernel(str(EX / "tiled_matmul_legacy.py"), "tiled_matmul_legacy")
    bench = nki.benchmark(warmup=5, iters=10)(kern)
    bench(nt.tensor[[512, 256], nl.bfloat16], nt.tensor[[512, 1024], nl.bfloat16])
    res = bench.benchmark_result
    assert res is not None and res.program is res.recorded.program
    assert res.recorded.counts()["tensor"] == 2 * (2 * 2 * 4)  # LoadStationary + MatMul
    # timed since the whole-core timing (tests/test_nki_timing.py checks the figures)
    assert res.nc_latency.get_latency_percentile(99) == res.timing.latency_us > 0


def test_jit_options_pick_the_arch_and_calling_a_kernel_gives_values() -> None:
    import nki

    kern = snki.load_kernel(str(EX / "basic_matmul.py"), "basic_matmul")
    assert isinstance(kern, snki.Kernel)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((128, 64)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((128, 512)).astype(ml_dtypes.bfloat16)
    direct = kern(a, b)  # a jitted kernel called on arrays runs for values
    sim = nki.simulate(kern)(a, b)
    assert np.array_equal(direct.view(np.uint16), sim.view(np.uint16))
    dr = snki.load_kernel(str(EX / "fp8_double_row.py"), "fp8_double_row")
    assert dr.arch == "trn2"  # @nki.jit(platform_target="trn2")

    @nki.jit()
    def noop(x):
        return x

    assert isinstance(noop, snki.Kernel)


def test_install_names_a_real_nki_in_one_line(tmp_path: Path) -> None:
    fake = tmp_path / "nki"
    fake.mkdir()
    (fake / "__init__.py").write_text("REAL = True\n")
    snki.uninstall()
    sys.path.insert(0, str(tmp_path))
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            snki.install("trn2")
        assert len(seen) == 1 and "shadowed" in str(seen[0].message)
        import nki

        assert not hasattr(nki, "REAL") and hasattr(nki, "simulate")
    finally:
        sys.path.remove(str(tmp_path))
        snki.uninstall()
        snki.install("trn2")


def test_a_call_outside_a_kernel_is_a_clear_error() -> None:
    import nki.language as nl

    with pytest.raises(SystolicError, match="only inside a kernel"):
        nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)


def test_benchmark_writes_the_models_trace_and_program_at_the_names_asked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`save_trace_name=` / `save_neff_name=` (nki-samples' perf tests stat the trace, the
    mamba tutorial renames both): the trace is the whole core's Perfetto JSON of the very
    timing benchmark_result holds, the "NEFF" the Program's text, which parses back to it;
    relative names are in the working directory; each file is reported on stderr as what
    it is."""
    import json

    import neuronxcc.nki as nki
    import neuronxcc.nki.language as nl
    import neuronxcc.nki.typing as nt

    from systolic.isa import Program

    monkeypatch.chdir(tmp_path)
    kern = snki.load_kernel(str(EX / "tiled_matmul_legacy.py"), "tiled_matmul_legacy")
    bench = nki.benchmark(warmup=1, iters=1, save_trace_name="local_trace.ntff",
                          save_neff_name="file.neff")(kern)
    bench(nt.tensor[[512, 256], nl.bfloat16], nt.tensor[[512, 1024], nl.bfloat16])
    res = bench.benchmark_result
    assert res is not None
    trace = json.loads((tmp_path / "local_trace.ntff").read_text())
    assert trace["otherData"]["latency_us"] == res.nc_latency.get_latency_percentile(50)
    assert "not NTFF" in trace["otherData"]["format"]
    sliced = {e["args"]["index"] for e in trace["traceEvents"]
              if e.get("ph") == "X" and "index" in e.get("args", {})}
    assert sliced == set(range(len(res.program)))  # every instruction has its slice
    again = Program.parse((tmp_path / "file.neff").read_text())
    assert tuple(again) == tuple(res.program)
    err = capsys.readouterr().err
    assert "wrote local_trace.ntff (the model's Perfetto trace" in err
    assert "wrote file.neff (the model's Program as text" in err
    # a second run writes over them (each benchmark run saves anew), as on hardware
    (tmp_path / "local_trace.ntff").write_text("stale")
    (tmp_path / "file.neff").write_text("stale")
    bench(nt.tensor[[512, 256], nl.bfloat16], nt.tensor[[512, 1024], nl.bfloat16])
    assert json.loads((tmp_path / "local_trace.ntff").read_text()) == trace
    assert Program.parse((tmp_path / "file.neff").read_text()) == again


def test_baremetal_and_simulate_keep_the_kernels_name() -> None:
    """A decorated kernel keeps its name (the attention tutorial prints
    ``version.__name__`` of a ``@nki.baremetal`` kernel)."""
    import neuronxcc.nki as nki

    kern = snki.load_kernel(str(EX / "basic_matmul.py"), "basic_matmul")
    assert nki.baremetal(kern).__name__ == nki.simulate(kern).__name__ == "basic_matmul"
    assert nki.baremetal(additional_compile_opt="-O1")(kern).__name__ == "basic_matmul"


def test_two_threads_recording_kernels_at_once_each_get_their_own() -> None:
    # the recorder stack and the SPMD launch being recorded are each thread's own: with one
    # stack for the process, two threads recording at once recorded into each other's
    # kernel (wrong values, or a kernel refused for reading what it never wrote)
    import threading

    spmd = snki.load_kernel(str(EX / "spmd_add.py"), "add")
    softmax = snki.load_kernel(str(EX / "softmax.py"), "softmax")
    rng = np.random.default_rng(3)
    a = rng.standard_normal((512, 2048)).astype(np.float32)  # 16 instances each
    b = rng.standard_normal((512, 2048)).astype(np.float32)
    x = rng.standard_normal((128, 512)).astype(np.float32)
    jobs = [(spmd, [a, b]), (spmd, [b, a * 2]), (softmax, [x])]
    alone = [np.asarray(snki.values(k, args)) for k, args in jobs]  # one at a time
    assert np.array_equal(alone[0], a + b)
    wrong: list[str] = []

    def loop(j: int) -> None:
        kernel, args = jobs[j]
        for _ in range(25):
            try:
                got = np.asarray(snki.values(kernel, args))
            except SystolicError as exc:
                wrong.append(f"job {j}: {exc}")
                continue
            if not np.array_equal(got, alone[j]):
                wrong.append(f"job {j}: other values than alone")

    threads = [threading.Thread(target=loop, args=(j,)) for j in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []
