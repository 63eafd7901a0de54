"""Kernel sweeps: a point is the NKI front end's recording timed on the whole NeuronCore; a
block that cannot run is a failed point with its reason, predicted here in closed form; the
first example sweep (252 kernel points) killed with SIGKILL resumes to the store of an
uninterrupted run.

To stay fast the example runs on 2 workers, and its uninterrupted store is made once for the
module (the failure and footprint checks read it too)."""

from __future__ import annotations

import dataclasses
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import store_rows

import systolic.sweep as sw
from systolic.arch import get_arch
from systolic.errors import SweepError
from systolic.nki import record_kernel
from systolic.sweep.evaluate import evaluate_point
from systolic.sweep.runner import execute
from systolic.sweep.store import read_rows
from systolic.timing.core import time_program

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = sorted((ROOT / "examples" / "sweeps").glob("*.yaml"))[0]
KERNEL = ROOT / "examples" / "kernels" / "blocked_matmul.py"
ISZ = {"bf16": 2, "fp8_e4m3": 1}




def _count(out: Path) -> int:
    try:
        con = sqlite3.connect(f"file:{out}?mode=ro", uri=True, timeout=1)
        try:
            return int(con.execute("SELECT count(*) FROM points").fetchone()[0])
        finally:
            con.close()
    except sqlite3.Error:
        return 0


def _why_not(p: dict[str, Any]) -> str | None:
    """Closed form for examples/kernels/blocked_matmul.py: which points cannot run, from the
    kernel's text. Its block is TILES_N moving tiles of 512 columns: ``N // BN`` blocks, so
    a BN that does not divide N leaves columns unwritten; one fp32 [128, 512] PSUM tile (one
    2 KiB bank) per moving tile; K/128 resident [128, BN] tiles plus the [128, BN] result row
    in SBUF."""
    k, n, tn = p["dim.K"], p["dim.N"], p["param.TILES_N"]
    arch = get_arch(p["arch"])
    bn = 512 * tn
    if n % bn:
        return "writes only"
    if tn > arch.psum_banks:
        return "PSUM is full"
    if (k // 128 + 1) * bn * ISZ[p["dtype"]] > arch.sbuf_bytes:
        return "SBUF is full"
    return None


def _check_rotated_peaks(got: dict[str, Any], m: int, k: int, n: int, tn: int, isz: int,
                        arch: Any) -> None:
    """Peak SBUF and PSUM from the kernel's text and the compiler stage's rotation rule
    (nki/alloc.py: each affine_range declaration keeps DEFAULT_BUFFERS = 2 physical copies
    of all its tiles live at once, once it has a second tile to place; held copies are
    given up when space runs out). Live at once: K/128 moving tiles of one N block (a
    second set from the next N block), the output row and one stationary tile (a second
    from the next M tile or K step), TILES_N PSUM banks (a second set from the next M
    tile)."""
    bn = 512 * tn
    two = {True: 2, False: 1}
    one = (k // 128 + 1) * bn * isz + 128 * isz
    peak = ((k // 128) * bn * isz * two[n // bn > 1] + bn * isz * two[m > 128]
            + 128 * isz * 2)
    if peak <= arch.sbuf_bytes:
        assert got["sbuf_bytes"] == peak
    else:  # the rotation did not fit: between one copy and the whole SBUF
        assert one <= got["sbuf_bytes"] <= arch.sbuf_bytes
    banks = tn * two[m > 128 or n // bn > 1]
    assert got["psum_bytes"] == min(banks, arch.psum_banks) * arch.psum_bank_bytes


@pytest.fixture(scope="module")
def clean_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tune") / "clean.sqlite"
    summary = execute(sw.load_sweep(EXAMPLE), out, workers=2)
    assert summary.ran == summary.total == 252
    return out


def test_the_first_example_is_a_kernel_sweep_of_at_least_200_points() -> None:
    spec = sw.load_sweep(EXAMPLE)
    assert EXAMPLE.name == "blocked_matmul_tune.yaml"
    assert spec.target.kind == "kernel" and spec.size == 252 >= 200
    assert {p["arch"] for _, p in spec.points()} == {"trn1", "trn2"}
    assert len({(p["dim.M"], p["dim.K"], p["dim.N"]) for _, p in spec.points()}) == 3


@pytest.mark.parametrize("pick", [
    {"dim.K": 1024, "arch": "trn2", "dtype": "bf16", "dma_engines": 16, "param.TILES_N": 4},
    {"dim.K": 4096, "arch": "trn1", "dtype": "fp8_e4m3", "dma_engines": 4, "param.TILES_N": 6},
    {"dim.K": 512, "arch": "trn1", "dtype": "bf16", "dma_engines": 8, "param.TILES_N": 8},
], ids=["square-trn2", "deepK-trn1-fp8", "wideN-trn1"])
def test_a_kernel_point_is_record_kernel_then_time_program(pick: dict[str, Any]) -> None:
    spec = sw.load_sweep(EXAMPLE)
    [p] = [p for _, p in spec.points() if all(p[k] == v for k, v in pick.items())]
    got = evaluate_point(spec.target, p)
    m, k, n, tn, fmt = p["dim.M"], p["dim.K"], p["dim.N"], p["param.TILES_N"], p["dtype"]
    arch = dataclasses.replace(get_arch(p["arch"]), dma_engines=p["dma_engines"])
    rec = record_kernel(str(KERNEL), "blocked_matmul", [f"{fmt}[{k},{m}]", f"{fmt}[{k},{n}]"],
                        {"TILES_N": tn}, arch)
    ct = time_program(rec.program, arch)
    assert got["latency_us"] == ct.latency_us and got["bound"] == ct.bound
    assert got["busy_tensor"] == ct.busy()["tensor"] and got["dma_bytes"] == ct.dma_bytes
    counts = rec.counts()
    assert got["ins_tensor"] == counts["tensor"] and got["ins_dma"] == counts["dma"]
    assert got["instructions"] == len(rec.program) and got["nki_ops"] == rec.ops
    # closed forms from the kernel's text, not from the model
    isz, bn = ISZ[fmt], 512 * tn
    assert got["flops"] == 2 * m * k * n
    assert got["hfu"] == pytest.approx(2 * m * k * n / (ct.seconds * arch.peak_flops(fmt)))
    # lhsT is loaded once per N block, rhs and the result move once
    assert got["hbm_bytes"] == (n // bn) * k * m * isz + k * n * isz + m * n * isz
    _check_rotated_peaks(got, m, k, n, tn, isz, arch)
    # no point beats the HBM roof or the PE peak
    assert got["latency_us"] * 1e-6 >= got["hbm_bytes"] / arch.hbm_bytes_per_s
    assert 0 < got["hfu"] <= 1
    assert sum(got[f"pct_{c}"] for c in ct.bound_ticks) == pytest.approx(100.0)


def test_a_block_that_cannot_run_is_a_failed_point_with_its_reason(clean_store: Path
                                                                    ) -> None:
    rows, _ = read_rows(clean_store)
    assert len(rows) == 252
    reasons: dict[str | None, int] = {}
    for r in rows:
        why = _why_not(r)
        reasons[why] = reasons.get(why, 0) + 1
        if why is None:
            assert r["status"] == "ok" and r["error"] is None, r
            isz = ISZ[r["dtype"]]
            arch = dataclasses.replace(get_arch(r["arch"]), dma_engines=r["dma_engines"])
            tn = r["param.TILES_N"]
            _check_rotated_peaks(r, r["dim.M"], r["dim.K"], r["dim.N"], tn, isz, arch)
        else:
            assert r["status"] == "failed" and why in r["error"], (r, why)
            assert "\n" not in r["error"]
    # every kind of failure occurs, and SBUF fails on trn1 only (trn2 has 224 KiB)
    assert set(reasons) == {None, "writes only", "PSUM is full", "SBUF is full"}
    assert {r["arch"] for r in rows if _why_not(r) == "SBUF is full"} == {"trn1"}


def test_a_parameter_the_kernel_does_not_take_fails_the_point() -> None:
    rows = sw.run({"run": {"kernel": f"{KERNEL}:blocked_matmul",
                           "args": {"lhsT": "bf16[128, 128]", "rhs": "bf16[128, 512]"}},
                   "axes": {"param.TILES_M": [1, 2]}}, executor="serial")
    rows = rows.to_dict("records") if hasattr(rows, "to_dict") else rows
    assert [r["status"] for r in rows] == ["failed", "failed"]
    assert all("unexpected keyword argument 'TILES_M'" in r["error"] for r in rows)


def test_the_first_example_killed_with_sigkill_resumes_to_the_uninterrupted_store(
        tmp_path: Path, clean_store: Path) -> None:
    killed = tmp_path / "killed.sqlite"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen([sys.executable, "-m", "systolic", "sweep", str(EXAMPLE), "--out",
                             str(killed), "--workers", "2", "--no-progress"], env=env,
                            start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 300
    while _count(killed) < 20 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGKILL)  # the parent and its pool workers, at once
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the sweep finished before it was killed"
    partial = store_rows(killed)
    assert 20 <= len(partial) < 252
    resumed = execute(sw.load_sweep(EXAMPLE), killed, workers=2)
    assert resumed.skipped == len(partial) and resumed.ran == 252 - len(partial)
    final, clean = store_rows(killed), store_rows(clean_store)
    assert len(final) == 252 and len({dict(r)["key"] for r in final}) == 252
    assert final == clean
    assert set(partial) <= set(final)  # nothing finished before the kill was lost or redone


_TWICE = '''
import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def k(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    a = nl.ndarray((K, M), dtype=lhsT.dtype, buffer=nl.sbuf)
    b = nl.ndarray((K, N), dtype=rhs.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=lhsT)
    nisa.dma_copy(dst=b, src=rhs)
    acc = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    for _ in range(REPEAT):
        nisa.nc_matmul(dst=acc, stationary=a, moving=b)
    res = nl.ndarray((M, N), dtype=out.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out
'''


def test_a_kernel_file_is_loaded_once_per_version(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 20: the points of a sweep record the function of one load of the file; an
    # edited file (a new digest in the target's key) is loaded again and its points use it
    import systolic.sweep.evaluate as ev

    path = tmp_path / "twice.py"
    loads: list[str] = []
    real = ev.load_kernel
    monkeypatch.setattr(ev, "load_kernel", lambda p, f: (loads.append(p), real(p, f))[1])

    def sweep(repeat: int) -> list[dict[str, Any]]:
        path.write_text(_TWICE.replace("REPEAT", str(repeat)))
        spec = sw.parse_sweep(f"run: {{kernel: '{path}:k', args: {{lhsT: 'bf16[128, 64]', "
                              f"rhs: 'bf16[128, N]'}}}}\naxes: {{dim.N: [64, 128, 256]}}\n")
        return [ev.evaluate_point(spec.target, p) for _, p in spec.points()]

    once = sweep(1)
    assert len(loads) == 1
    thrice = sweep(3)
    assert len(loads) == 2
    # two more MatMuls a point (closed form: one per nc_matmul of a [128, 64] x [128, N] tile)
    for a, b in zip(once, thrice, strict=True):
        assert b["ins_tensor"] - a["ins_tensor"] == 2
        assert b["flops"] == 3 * a["flops"]


def test_a_kernel_point_under_the_sweep_timeout_is_stopped_without_its_own_timer(
        tmp_path: Path) -> None:
    # the recording's own time guard is left out when the sweep's point timeout runs (one
    # timer thread fewer a point): a kernel whose Python never ends is still stopped, by the
    # sweep's limit, and named at its line
    import threading

    from systolic.sweep.evaluate import evaluate_one

    path = tmp_path / "forever.py"
    path.write_text(_TWICE.replace("for _ in range(REPEAT):", "while True:"))
    spec = sw.parse_sweep(f"run: {{kernel: '{path}:k', args: {{lhsT: 'bf16[128, 64]', "
                          f"rhs: 'bf16[128, 64]'}}}}\naxes: {{dma_engines: [4]}}\n")
    [(key, p)] = list(spec.points())
    before = threading.active_count()
    got = evaluate_one(spec.target, key, p, timeout=0.5)  # returns: the limit stopped it
    assert got["status"] == "failed"
    assert got["error"].startswith("the point ran past its time limit of 0.5 s")
    assert f"{path}:" in got["error"]
    assert threading.active_count() <= before + 1  # at most the sweep's watchdog, once


def test_a_kernel_sweep_bounds_each_recording_by_its_max_ops(tmp_path: Path) -> None:
    # issue 22 H4: the recording budget of `systolic kernel --max-ops`, as the sweep file's
    # run: {max_ops: N}. The kernel records 2 + R + 2 operations (two loads, R matmuls, a
    # copy out of PSUM, a store) and 7 tensors: R = 2 fits a budget of 10, R = 20 goes over
    # it at the matmul line
    path = tmp_path / "reps.py"
    path.write_text(_TWICE.replace("def k(lhsT, rhs):", "def k(lhsT, rhs, R=1):")
                    .replace("range(REPEAT)", "range(R)"))
    line = 1 + _TWICE.splitlines().index("        nisa.nc_matmul(dst=acc, stationary=a, "
                                         "moving=b)")
    head = (f"run: {{kernel: '{path}:k', args: {{lhsT: 'bf16[128, 64]', rhs: 'bf16[128, 64]'}}"
            f"MAXOPS}}\naxes: {{param.R: [2, 20]}}\n")
    spec = sw.parse_sweep(head.replace("MAXOPS", ", max_ops: 10"))
    out = tmp_path / "r.sqlite"
    execute(spec, out, executor="serial")
    rows = {r["param.R"]: r for r in read_rows(out)[0]}
    assert rows[2]["status"] == "ok" and rows[2]["nki_ops"] == 6
    assert rows[20]["status"] == "failed"
    assert rows[20]["error"].startswith(f"{path}:{line}: the kernel made more than 10 NKI "
                                        f"operations, the recording budget (max_ops)")
    # without the key, the default budget: both run, and their keys are those of a sweep file
    # written before the key existed (the fingerprint leaves the default out)
    plain = sw.parse_sweep(head.replace("MAXOPS", ""))
    assert "max_ops" not in plain.target.fingerprint()
    assert [evaluate_point(plain.target, p)["nki_ops"] for _, p in plain.points()] == [6, 24]
    for bad in ("0", "true", "2.5", "-3"):
        with pytest.raises(SweepError, match=r":1: max_ops .*: the recording budget is a "
                                             r"number of NKI operations, at least 1"):
            sw.parse_sweep(head.replace("MAXOPS", f", max_ops: {bad}"))
    with pytest.raises(SweepError, match=":1: max_ops belongs to a kernel sweep"):
        sw.parse_sweep("run: {matmul: {m: 128, k: 128, n: 128}, max_ops: 10}\n")
