"""Running sweeps: every point once, the same store on every executor, the whole-core figures
beside the Tensor Engine's, failed points recorded, the best point the true minimum, the
Pareto front (kernel sweeps and the resume after SIGKILL: test_sweep_kernel.py)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import sqlite3
import subprocess
import sys
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import missing_extra, store_rows

import systolic.sweep as sw
from systolic.api import make_spec
from systolic.arch import get_arch
from systolic.compiler import lower
from systolic.errors import SweepError
from systolic.isa import DmaLoad, ReadOut
from systolic.sweep import evaluate as ev
from systolic.sweep.analysis import pareto
from systolic.sweep.runner import execute
from systolic.sweep.store import Store, read_rows
from systolic.timing.core import time_program
from systolic.views.report import build_report

ROOT = Path(__file__).resolve().parents[1]
GRID = """\
name: small grid
run: {matmul: {n: 256}}
axes:
  m: [128, 256]
  k: [64, 128, 256]
  arch: [trn1, trn2]
  dtype: [bf16, fp8_e4m3]
constraints: ["utilization >= 0.3"]
"""
GRID_POINTS = list(itertools.product([128, 256], [64, 128, 256], ["trn1", "trn2"],
                                     ["bf16", "fp8_e4m3"]))


def _write(tmp_path: Path, text: str, name: str = "sweep.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path




def test_a_grid_runs_every_point_exactly_once(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[Any, ...]] = []
    real = ev.evaluate_point

    def counting(target: Any, inputs: dict[str, Any]) -> dict[str, Any]:
        calls.append((inputs["m"], inputs["k"], inputs["arch"], inputs["dtype"]))
        return real(target, inputs)

    monkeypatch.setattr(ev, "evaluate_point", counting)
    spec = sw.parse_sweep(GRID, str(tmp_path / "g.yaml"))
    out = tmp_path / "r.sqlite"
    first = execute(spec, out, executor="serial")
    assert sorted(calls) == sorted(GRID_POINTS)  # each once
    assert (first.ran, first.skipped, first.failed) == (24, 0, 0)
    again = execute(spec, out, executor="serial")
    assert (again.ran, again.skipped) == (0, 24) and len(calls) == 24
    rows = store_rows(out)
    assert len(rows) == 24 and len({dict(r)["key"] for r in rows}) == 24
    got = {(d["m"], d["k"], d["arch"], d["dtype"]) for d in map(dict, rows)}
    assert got == set(GRID_POINTS)


def test_a_point_s_figures_are_the_timing_model_s(tmp_path: Path) -> None:
    rows = sw.run(sw.parse_sweep(GRID), tmp_path / "r.sqlite", executor="serial")
    rows = rows.to_dict("records") if hasattr(rows, "to_dict") else rows
    for r in rows:
        arch = get_arch(r["arch"])
        spec = make_spec(r["m"], r["k"], r["n"], r["dtype"], arch, "none")
        program = lower(spec, arch).program
        core = time_program(program, arch)  # the whole Program, not the sweep's fast path
        assert r["latency_us"] == pytest.approx(core.latency_us, rel=1e-12)
        assert r["bound"] == core.bound and r["hbm_bytes"] == core.hbm_bytes
        flops = 2 * r["m"] * r["k"] * r["n"]
        assert r["flops"] == flops
        assert r["tflops"] == pytest.approx(flops / core.seconds / 1e12, rel=1e-12)
        assert r["hfu"] == pytest.approx(r["tflops"] * 1e12 / arch.peak_flops(r["dtype"]))
        # the Tensor Engine's own view, under its own names
        rep = build_report(program, arch, spec)
        assert r["cycles"] == rep.cycles
        assert r["pe_us"] == pytest.approx(rep.cycles / arch.clock_hz * 1e6, rel=1e-12)
        assert r["pe_tflops"] == pytest.approx(flops / (rep.cycles / arch.clock_hz) / 1e12)
        assert r["utilization"] == pytest.approx(rep.utilization)
        assert r["ins_dma"] == sum(isinstance(i, DmaLoad | ReadOut) for i in program)
        # the core waits for data the PE view takes as there: never faster than the PE alone
        assert r["latency_us"] >= r["pe_us"] * (1 - 1e-12)
        # roofline: operands + fp32 result moved once, at the arch's HBM bandwidth
        nbytes = (r["m"] * r["k"] + r["k"] * r["n"]) * (1 if "fp8" in r["dtype"] else 2) \
            + 4 * r["m"] * r["n"]
        assert r["ideal_hbm_bytes"] == pytest.approx(nbytes)
        assert r["roofline_us"] == pytest.approx(
            max(r["pe_us"], nbytes / arch.hbm_bytes_per_s * 1e6))


def test_an_hbm_bandwidth_axis_moves_the_latency_of_a_memory_bound_product() -> None:
    # K = 64 (seed 003's short-K case): 128 FLOPs per fp32 result element of 4 bytes, far
    # below any arch's ridge point, so the DMA, not the PE, sets the pace
    bws = [2.5e10, 5.0e10, 1.0e11, 2.0e11]
    table = sw.run({"run": {"matmul": {"m": 2048, "k": 64, "n": 2048}},
                    "fixed": {"arch": "trn2"}, "axes": {"hbm_bytes_per_s": bws}},
                   executor="serial")
    rows = table.to_dict("records") if hasattr(table, "to_dict") else table
    rows.sort(key=lambda r: r["hbm_bytes_per_s"])
    lat = [r["latency_us"] for r in rows]
    assert all(a > b for a, b in pairwise(lat)), lat  # more bandwidth, less time
    for r in rows:
        assert r["bound"] == "dma"
        # the data cannot arrive faster than the HBM moves it: the roof holds at every point
        assert r["latency_us"] * 1e-6 >= r["hbm_bytes"] / r["hbm_bytes_per_s"]
        assert r["dma_gbps"] * 1e9 <= r["hbm_bytes_per_s"] * (1 + 1e-9)
    # at low bandwidth the latency is mostly HBM time: halving the bandwidth nearly doubles it
    assert lat[0] / lat[1] > 1.8
    # the Tensor Engine's own view does not see HBM at all
    assert len({r["cycles"] for r in rows}) == 1 and len({r["pe_us"] for r in rows}) == 1


def test_workload_points_sum_the_ops_times_their_repeats(tmp_path: Path) -> None:
    wl = _write(tmp_path, "defaults: {arch: trn2}\nops:\n  - {name: a, m: 256, k: 512, "
                          "n: 128, repeat: 3}\n  - {name: b, m: 128, k: 128, n: 640}\n",
                "wl.yaml")
    sweep = _write(tmp_path, f"run: {{workload: {wl.name}}}\naxes:\n  rows: [64, 128]\n")
    rows = sw.run(sweep, executor="serial")
    rows = rows.to_dict("records") if hasattr(rows, "to_dict") else rows
    # rows 128 is trn2 itself: the totals are those of `systolic run --json`
    proc = subprocess.run([sys.executable, "-m", "systolic", "run", str(wl), "--json"],
                          capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    total = json.loads(proc.stdout)["total"]
    [plain] = [r for r in rows if r["rows"] == 128]
    for key in ("latency_us", "tflops", "peak_tflops", "hfu", "cycles", "pe_us", "pe_tflops",
                "flops", "utilization", "intensity"):
        assert plain[key] == pytest.approx(total[key], rel=1e-12), key
    assert plain["bound"] == total["bound"]["by"]
    # the store's names are the views' (docs/json.md): bound_kind is core.bound.kind
    assert plain["bound_kind"] == total["core"]["bound"]["kind"]
    assert plain["latency_us"] == pytest.approx(total["core"]["latency_us"], rel=1e-12)
    assert plain["pe_tflops"] == pytest.approx(total["pe"]["tflops"], rel=1e-12)
    for cause, part in total["breakdown"].items():
        assert plain[f"pe_pct_{cause}"] == pytest.approx(part["percent"], rel=1e-9, abs=1e-12)
    for cause, part in total["bound"]["causes"].items():
        assert plain[f"pct_{cause}"] == pytest.approx(part["percent"], rel=1e-9, abs=1e-12)
    for r in rows:
        arch = dataclasses.replace(get_arch("trn2"), rows=r["rows"])
        programs = [lower(make_spec(m, k, n, "bf16", arch), arch).program
                    for m, k, n in ((256, 512, 128), (128, 128, 640))]
        cyc = [build_report(p, arch).cycles for p in programs]
        lat = [time_program(p, arch).latency_us for p in programs]
        assert r["cycles"] == 3 * cyc[0] + cyc[1]
        assert r["latency_us"] == pytest.approx(3 * lat[0] + lat[1], rel=1e-12)
        assert r["tflops"] == pytest.approx(r["flops"] / (r["latency_us"] * 1e-6) / 1e12)


def test_the_pool_and_a_dask_local_cluster_give_identical_stores(tmp_path: Path) -> None:
    if not _has("distributed"):
        missing_extra("dask[distributed]")
    spec = sw.parse_sweep(GRID)
    execute(spec, tmp_path / "pool.sqlite", workers=2)
    notes: list[str] = []
    execute(spec, tmp_path / "dask.sqlite", dask="local:2", dask_processes=False,
            announce=notes.append)
    assert any("dashboard http" in n for n in notes)
    pool, dask = store_rows(tmp_path / "pool.sqlite"), store_rows(tmp_path / "dask.sqlite")
    assert len(pool) == 24 and pool == dask


def test_a_failing_point_is_recorded_and_the_sweep_goes_on(tmp_path: Path) -> None:
    text = ("run: {matmul: {m: 1024, k: 1024, n: 1024}}\naxes:\n  arch: [trn1, trn2]\n"
            "  perf_mode: [none, double_row]\n  sbuf_bytes: [1024, 65536]\n"
            "fixed: {dtype: fp8_e4m3}\n")
    out = tmp_path / "r.sqlite"
    summary = execute(sw.parse_sweep(text), out, workers=2)
    rows, _ = read_rows(out)
    assert summary.ran == 8 and len(rows) == 8
    by = {(r["arch"], r["perf_mode"], r["sbuf_bytes"]): r for r in rows}
    for (arch, mode, sbuf), r in by.items():
        if arch == "trn1" and mode == "double_row":
            assert r["status"] == "failed" and "not supported on trn1" in r["error"]
        elif sbuf == 1024:  # the SBUF holds no tile: a verify error, an overflow
            assert r["status"] == "failed" and "outside the 1024-byte partition" in r["error"]
        else:
            assert r["status"] == "ok" and r["error"] is None and r["cycles"] > 0
    assert summary.failed == sum(r["status"] == "failed" for r in rows) == 5


def test_two_sweeps_on_one_store_are_refused(tmp_path: Path) -> None:
    out = tmp_path / "r.sqlite"
    spec = sw.parse_sweep(GRID)
    with Store(out), pytest.raises(SweepError, match="another sweep is writing this store"):
        execute(spec, out, executor="serial")
    other = sw.parse_sweep("run: {kernel: 'k.py:f', args: {a: 'bf16[4]'}}\n")
    execute(spec, out, executor="serial")
    with pytest.raises(SweepError, match="holds the results of another sweep"):
        execute(other, out, executor="serial")


def test_show_reports_the_true_minimum_and_the_constraints(tmp_path: Path) -> None:
    out = tmp_path / "r.sqlite"
    execute(sw.parse_sweep(GRID), out, executor="serial")
    proc = subprocess.run([sys.executable, "-m", "systolic", "sweep", "show", str(out),
                           "--json", "--top", "3"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, check=True)
    shown = json.loads(proc.stdout)
    con = sqlite3.connect(out)
    (lowest,) = con.execute("SELECT min(latency_us) FROM points WHERE status = 'ok' AND "
                            "utilization >= 0.3").fetchone()
    (unconstrained,) = con.execute("SELECT min(latency_us) FROM points").fetchone()
    con.close()
    assert shown["best"][0]["latency_us"] == lowest
    assert unconstrained < lowest  # the constraint changed the answer: it was applied
    assert [b["latency_us"] for b in shown["best"]] == sorted(b["latency_us"]
                                                              for b in shown["best"])


def test_pareto_front_matches_a_brute_force_search() -> None:
    rng = np.random.default_rng(3)
    rows = [{"status": "ok", "latency_us": float(rng.integers(1, 30)),
             "tflops": float(rng.integers(1, 30))} for _ in range(300)]
    meta = {"objective": {"figure": "latency_us", "maximize": False}}
    front = pareto(rows, meta, "latency_us", "tflops")  # tflops maximised by default

    def dominated(r: dict[str, Any]) -> bool:
        return any(o["latency_us"] <= r["latency_us"] and o["tflops"] >= r["tflops"] and
                   (o["latency_us"], o["tflops"]) != (r["latency_us"], r["tflops"])
                   for o in rows)

    assert {id(r) for r in front} == {id(r) for r in rows if not dominated(r)}


def test_show_table_csv_and_plot(tmp_path: Path) -> None:
    if not _has("matplotlib"):
        missing_extra("matplotlib")
    out = tmp_path / "r.sqlite"
    execute(sw.parse_sweep(GRID), out, executor="serial")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    png, csv_path = tmp_path / "p.png", tmp_path / "r.csv"
    proc = subprocess.run([sys.executable, "-m", "systolic", "sweep", "show", str(out),
                           "--top", "2", "--pareto", "latency_us,max:utilization", "--plot",
                           str(png), "--x", "m", "--y", "k", "--csv", str(csv_path)],
                          capture_output=True, text=True, env=env, check=True)
    assert "24 points, 0 failed" in proc.stdout and "best 2 by latency_us" in proc.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    lines = csv_path.read_text().splitlines()
    assert len(lines) == 25 and "latency_us" in lines[0]
    if not _has("pyarrow"):
        proc = subprocess.run([sys.executable, "-m", "systolic", "sweep", "show", str(out),
                               "--parquet", str(tmp_path / "r.parquet")], capture_output=True,
                              text=True, env=env)
        assert proc.returncode == 2
        assert proc.stderr.strip() == ("systolic: error: --parquet needs pandas and pyarrow: "
                                       "pip install 'systolic[parquet]'")


def test_show_prints_each_failure_on_one_line_when_piped(tmp_path: Path) -> None:
    # issue 22: piped (no terminal), text was wrapped at 40 columns: "2 failed like: ..."
    # came out in pieces, and the summary line split after "feasible;"
    spec = _write(tmp_path, "name: wide\nrun: {matmul: {m: 128, k: 128, dtype: fp8_e4m3}}\n"
                            "fixed: {arch: trn1}\n"
                            "axes:\n  n: [128, 256]\n  perf_mode: [none, double_row]\n")
    out = tmp_path / "r.sqlite"
    execute(sw.load_sweep(spec), out, executor="serial")
    errors = [r["error"] for r in read_rows(out)[0] if r["status"] != "ok"]
    assert len(errors) == 2 and all(len(e) > 50 for e in errors)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "40"}
    proc = subprocess.run([sys.executable, "-m", "systolic", "sweep", "show", str(out)],
                          capture_output=True, text=True, env=env, check=True)
    lines = proc.stdout.splitlines()
    assert lines[0] == "wide: 4 points, 2 failed, 2 feasible; objective min latency_us"
    shown = [ln for ln in lines if " failed like: " in ln]
    assert len(shown) == 1 and shown[0].endswith(errors[0][-30:]), lines


def _has(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def test_load_returns_a_table_with_feasibility(tmp_path: Path) -> None:
    out = tmp_path / "r.sqlite"
    execute(sw.parse_sweep(GRID), out, executor="serial")
    table = sw.load(out)
    rows = table.to_dict("records") if hasattr(table, "to_dict") else table
    assert len(rows) == 24
    assert all(r["feasible"] == (r["utilization"] >= 0.3) for r in rows)
    assert not any(math.isnan(r["latency_us"]) for r in rows)


def test_run_takes_a_dict_and_returns_one_row_per_point() -> None:
    table = sw.run({"run": {"matmul": {"m": 128, "n": 128}},
                    "axes": {"k": [32, 64, 96], "arch": ["trn1", "trn2"]}}, executor="serial")
    rows = table.to_dict("records") if hasattr(table, "to_dict") else table
    assert sorted((r["k"], r["arch"]) for r in rows) == sorted(
        itertools.product([32, 64, 96], ["trn1", "trn2"]))
    assert all(r["status"] == "ok" and r["feasible"] for r in rows)


def test_show_best_per_group_is_each_group_s_true_minimum(tmp_path: Path) -> None:
    out = tmp_path / "r.sqlite"
    execute(sw.parse_sweep(GRID), out, executor="serial")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run([sys.executable, "-m", "systolic", "sweep", "show", str(out),
                           "--json", "--best-per", "arch,dtype"], capture_output=True,
                          text=True, env=env, check=True)
    per = json.loads(proc.stdout)["best_per"]
    con = sqlite3.connect(out)
    want = con.execute("SELECT arch, dtype, min(latency_us) FROM points WHERE status = 'ok' "
                       "AND utilization >= 0.3 GROUP BY arch, dtype").fetchall()
    con.close()
    assert per["inputs"] == ["arch", "dtype"]
    assert sorted((r["arch"], r["dtype"], r["latency_us"]) for r in per["rows"]) == sorted(want)
    assert len(want) == 4
    bad = subprocess.run([sys.executable, "-m", "systolic", "sweep", "show", str(out),
                          "--best-per", "shape"], capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert "--best-per shape: not an input of this sweep" in bad.stderr


# -- bounds on user code, and one-line errors (issue 22) ---------------------------------------

EVIL = """\
import os
import signal
import time

from basic_matmul import basic_matmul


def k(lhsT, rhs, MODE=0):
    if MODE == 1:
        os._exit(0)
    if MODE == 2:
        while True:
            pass
    if MODE == 3:  # the limit's signal cannot reach it: the parent kills the worker
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(60)
    return basic_matmul(lhsT, rhs)
"""
EVIL_ARGS = {"lhsT": "bf16[128, 64]", "rhs": "bf16[128, 128]"}


def _evil(tmp_path: Path) -> str:
    (tmp_path / "basic_matmul.py").write_text(
        (ROOT / "examples" / "kernels" / "basic_matmul.py").read_text())
    (tmp_path / "evil.py").write_text(EVIL)
    return str(tmp_path / "evil.py")


def test_a_point_that_exits_or_loops_is_a_failed_point_and_the_pool_goes_on(
        tmp_path: Path) -> None:
    kernel = _evil(tmp_path)
    out = tmp_path / "r.sqlite"
    spec = sw.parse_sweep(f"run: {{kernel: '{kernel}:k', args: {json.dumps(EVIL_ARGS)}}}\n"
                          f"axes:\n  param.MODE: [0, 1, 2, 4, 5, 6]\n", "s.yaml")
    summary = execute(spec, out, workers=2, point_timeout=1.0)
    rows, _ = read_rows(out)
    by = {r["param.MODE"]: r for r in rows}
    assert summary.ran == 6 and sorted(by) == [0, 1, 2, 4, 5, 6]
    for mode in (0, 4, 5, 6):  # the points after the dead worker ran on a new one
        assert by[mode]["status"] == "ok" and by[mode]["hbm_bytes"] == (
            128 * 64 + 128 * 128 + 64 * 128) * 2
    assert by[1]["status"] == "failed"
    assert "worker process exited with status 0" in by[1]["error"]
    assert by[2]["status"] == "failed"
    # the kernel line the loop was on (lines 12 and 13 of EVIL: ``while True: pass``)
    assert by[2]["error"] in [("the point ran past its time limit of 1 s (--point-timeout) "
                               f"and was stopped at {kernel}:{line}") for line in (12, 13)]
    assert summary.failed == 2


def test_a_dead_or_stuck_worker_costs_its_point_only(tmp_path: Path) -> None:
    from systolic.sweep.executors import run_pool

    kernel = _evil(tmp_path)
    spec = sw.parse_sweep(f"run: {{kernel: '{kernel}:k', args: {json.dumps(EVIL_ARGS)}}}\n"
                          f"axes: {{param.MODE: [0, 1, 3, 7, 8]}}\n", "s.yaml")
    points = [(f"key{p['param.MODE']}", p) for _, p in spec.points()]
    # one chunk: the worker dies at its second point, its replacement is stuck at the third
    got = [r for batch in run_pool(spec.target, [points], 1, timeout=0.5) for r in batch]
    by = {r["key"]: r for r in got}
    assert sorted(by) == ["key0", "key1", "key3", "key7", "key8"] and len(got) == 5
    assert [by[k]["status"] for k in ("key0", "key7", "key8")] == ["ok"] * 3
    assert "exited with status 0" in by["key1"]["error"]
    assert by["key3"]["error"] == ("the point ran past its time limit of 0.5 s "
                                   "(--point-timeout) and was stopped at a call that never "
                                   "returned (its worker was killed)")


def test_the_time_limit_stops_a_point_in_a_thread_as_on_a_dask_worker(tmp_path: Path) -> None:
    import threading

    kernel = _evil(tmp_path)
    spec = sw.parse_sweep(f"run: {{kernel: '{kernel}:k', args: {json.dumps(EVIL_ARGS)}}}\n"
                          f"fixed: {{param.MODE: 2}}\n", "s.yaml")
    [(_, p)] = list(spec.points())
    got: list[dict[str, Any]] = []
    t = threading.Thread(target=lambda: got.append(ev.evaluate_one(spec.target, "k", p, 0.3)))
    t.start()
    t.join(30)
    assert not t.is_alive() and got[0]["status"] == "failed"
    assert got[0]["error"].endswith((f"stopped at {kernel}:13", f"stopped at {kernel}:12"))
    # the same in this (main) thread, through SIGALRM; a point within its limit is untouched
    assert ev.evaluate_one(spec.target, "k", p, 0.3)["error"].endswith((f"{kernel}:13",
                                                                        f"{kernel}:12"))
    ok = ev.evaluate_one(spec.target, "k", {**p, "param.MODE": 0}, 60.0)
    assert ok["status"] == "ok" and ok["figures"]["flops"] == 2 * 128 * 64 * 128


def test_an_arch_override_that_overflows_the_timing_is_a_clean_failed_point() -> None:
    rows = sw.run({"run": {"matmul": {"m": 128, "k": 128, "n": 128}},
                   "axes": {"dma_engine_bytes_per_ns": [1.0e-300, 10.0]}}, executor="serial")
    rows = rows.to_dict("records") if hasattr(rows, "to_dict") else rows
    bad, good = sorted(rows, key=lambda r: r["dma_engine_bytes_per_ns"])
    assert good["status"] == "ok"
    assert bad["status"] == "failed" and "please report" not in bad["error"]
    assert "overflow" in bad["error"] and "dma_engine_bytes_per_ns" in bad["error"]


def test_a_billion_point_grid_runs_its_first_point_before_hashing_the_rest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from systolic.sweep import runner

    hashed = 0
    real_key = runner.point_key

    def key(*a: Any) -> str:
        nonlocal hashed
        hashed += 1
        if hashed > 10_000:
            raise AssertionError("every key hashed before the points run")
        return real_key(*a)

    class Stop(Exception):
        pass

    ran: list[int] = []

    def progress(n: int, failed: int, skipped: int) -> None:
        ran.append(n)
        if sum(ran) >= 3:
            raise Stop

    monkeypatch.setattr(runner, "point_key", key)
    axis = "{from: 1, to: 1000, step: 1}"
    spec = sw.parse_sweep(f"run: {{matmul: null}}\naxes:\n  m: {axis}\n  k: {axis}\n"
                          f"  n: {axis}\n")
    assert spec.size == 10**9
    with pytest.raises(Stop):
        execute(spec, tmp_path / "r.sqlite", executor="serial", progress=progress)
    assert hashed <= 4
    rows, _ = read_rows(tmp_path / "r.sqlite")
    assert [(r["m"], r["k"], r["n"]) for r in rows] == [(1, 1, 1), (1, 1, 2), (1, 1, 3)]


def test_the_cli_refuses_bad_run_and_show_options_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from systolic.cli import main
    from systolic.commands import sweep as cmd
    from systolic.sweep.runner import DEFAULT_POINT_TIMEOUT

    assert cmd.DEFAULT_POINT_TIMEOUT == DEFAULT_POINT_TIMEOUT  # the help says the same
    spec = _write(tmp_path, "run: {matmul: {m: 128, k: 128, n: 128}}\naxes:\n  arch: [trn1, "
                            "trn2]\n")
    out = str(tmp_path / "r.sqlite")
    execute(sw.parse_sweep(spec.read_text()), out, executor="serial")
    cases = [
        (["sweep", str(spec), "--out", out, "--workers", "99999999999999999999"],
         "99999999999999999999 is more than 1,024"),
        (["sweep", str(spec), "--out", out, "--dask", "bogus"],
         "--dask 'bogus': expected local, local:N or a scheduler address"),
        (["sweep", str(spec), "--out", out, "--dask", "local:0"], "worker count from 1"),
        (["sweep", str(spec), "--out", out, "--point-timeout", "0"], "above 0"),
        (["sweep", str(spec), "--out", out, "--point-timeout", "nan"], "above 0"),
        (["sweep", "show", out, "--pareto", "bound,latency_us"], "bound is not a number"),
        (["sweep", "show", out, "--x", "arch"], "--x sets an axis of the plot; add --plot"),
        (["sweep", "show", out, "--y", "arch"], "--y sets an axis of the plot"),
        (["sweep", "show", out, "--best-per", ""], "--best-per '': name inputs"),
        (["sweep", "show", out, "--best-per", "arch,"], "name inputs"),
        (["sweep", "show", out, "--point-timeout", "3"], "--point-timeout belong to a run"),
        (["sweep", str(spec), "--out", out, "--all"], "--all: only with systolic sweep show"),
    ]
    for argv, fragment in cases:
        parsed_by_argparse = "--workers" in argv or ("--point-timeout" in argv
                                                     and "show" not in argv)
        with pytest.raises(SystemExit) if parsed_by_argparse else _nothing():
            rc = main(argv)
            assert rc == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("systolic: error: ") and err.count("\n") == 1, (argv, err)
        assert fragment in err, (argv, err)


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_finished_points_are_stored_in_batches_and_when_the_run_stops(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The serial executor's points are stored in batches (a transaction per point cost
    ~6% of a matmul point, issue 20), and a run stopped mid-batch (here by its progress
    callback, as by Ctrl-C or SIGTERM) still stores every point that finished, once; the
    rerun runs only the rest."""
    from systolic.sweep import runner

    writes: list[int] = []
    real = Store.write

    def write(self: Store, batch: list[Any], sweep_id: str | None = None) -> None:
        writes.append(len(batch))
        real(self, batch, sweep_id)

    monkeypatch.setattr(Store, "write", write)
    monkeypatch.setattr(runner, "WRITE_EVERY_S", 3600.0)

    class Stop(Exception):
        pass

    seen: list[int] = []

    def progress(n: int, failed: int, skipped: int) -> None:
        seen.append(n)
        if sum(seen) >= 5:
            raise Stop

    spec = sw.parse_sweep("run: {matmul: null}\naxes:\n  m: {from: 128, to: 1280, step: 128}\n"
                          "  k: [128]\n  n: [128]\n")
    out = tmp_path / "r.sqlite"
    with pytest.raises(Stop):
        execute(spec, out, executor="serial", progress=progress)
    assert writes == [5]  # one transaction, when the run stopped
    assert sorted(r["m"] for r in read_rows(out)[0]) == [128, 256, 384, 512, 640]
    writes.clear()
    again = execute(spec, out, executor="serial")
    assert (again.skipped, again.ran, writes) == (5, 5, [5])
    assert len(read_rows(out)[0]) == 10
