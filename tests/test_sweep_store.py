"""The results store across runs (issue 21, issue 22): what re-runs a point (an edited kernel,
an edited module it imports, other args), what ``show`` ranks (the latest sweep's rows only),
what is refused (another sweep, a foreign or locked file), and what is left on disk.

Expected figures come from closed forms of the kernel's text (examples/kernels/
basic_matmul.py moves lhsT[128, M], rhs[128, N] in and out[M, N] back once), counts from the
sweep definition, file facts from the SQLite file format (https://sqlite.org/fileformat.html)."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import systolic.sweep as sw
from systolic.cli import main
from systolic.errors import SweepError
from systolic.sweep import evaluate as ev
from systolic.sweep.analysis import feasible
from systolic.sweep.runner import execute
from systolic.sweep.spec import Constraint
from systolic.sweep.store import WRITE_WAIT_S, read_rows, read_store

ROOT = Path(__file__).resolve().parents[1]
BASIC = ROOT / "examples" / "kernels" / "basic_matmul.py"
ISZ = {"bf16": 2, "fp8_e4m3": 1}


def _kernel_sweep(tmp_path: Path, dtype: str = "bf16", kernel: str = "basic_matmul.py",
                  function: str = "basic_matmul", n: tuple[int, ...] = (128, 256)) -> Path:
    spec = tmp_path / "tune.yaml"
    spec.write_text(f"name: tune\nrun:\n  kernel: {kernel}:{function}\n"
                    f"  args: {{lhsT: '{dtype}[128, M]', rhs: '{dtype}[128, N]'}}\n"
                    f"axes:\n  dim.M: [64, 128]\n  dim.N: {list(n)}\n")
    return spec


def _hbm_bytes(m: int, n: int, dtype: str) -> int:
    """basic_matmul.py: lhsT [128, M] and rhs [128, N] in, out [M, N] back, each once."""
    return (128 * m + 128 * n + m * n) * ISZ[dtype]


def _count_points(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []
    real = ev.evaluate_point

    def counting(target: Any, inputs: dict[str, Any]) -> dict[str, Any]:
        calls.append(inputs)
        return real(target, inputs)

    monkeypatch.setattr(ev, "evaluate_point", counting)
    return calls


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


# -- what re-runs a point ------------------------------------------------------------------------

def test_editing_the_kernel_file_reruns_every_point(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copy(BASIC, tmp_path / "basic_matmul.py")
    spec_file, out = _kernel_sweep(tmp_path), tmp_path / "r.sqlite"
    calls = _count_points(monkeypatch)
    assert execute(sw.load_sweep(spec_file), out, executor="serial").ran == 4
    assert execute(sw.load_sweep(spec_file), out, executor="serial").ran == 0
    assert len(calls) == 4
    with open(tmp_path / "basic_matmul.py", "a") as f:
        f.write("# an edit that changes nothing the model sees, but the file is another\n")
    again = execute(sw.load_sweep(spec_file), out, executor="serial")
    assert (again.ran, again.skipped, len(calls)) == (4, 0, 8)


def test_editing_a_module_the_kernel_imports_reruns_every_point(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    helpers = tmp_path / "kernel_parts"  # (not "helpers": tests/helpers.py is imported)
    helpers.mkdir()
    (helpers / "__init__.py").write_text("")
    shutil.copy(BASIC, helpers / "tiles.py")
    (tmp_path / "kern.py").write_text("from kernel_parts.tiles import basic_matmul\n\n\n"
                                      "def k(lhsT, rhs):\n    return basic_matmul(lhsT, rhs)\n")
    spec_file, out = _kernel_sweep(tmp_path, kernel="kern.py", function="k"), tmp_path / "r.sqlite"
    calls = _count_points(monkeypatch)
    first = execute(sw.load_sweep(spec_file), out, executor="serial")
    assert (first.ran, first.failed) == (4, 0)
    assert execute(sw.load_sweep(spec_file), out, executor="serial").ran == 0
    with open(helpers / "tiles.py", "a") as f:  # the kernel file itself is unchanged
        f.write("\nSCALE = 2  # a helper module edited\n")
    assert execute(sw.load_sweep(spec_file), out, executor="serial").ran == 4
    assert len(calls) == 8


REPS_KERNEL = """\
import nki
import nki.isa as nisa
import nki.language as nl

from stale_parts.reps import REPEAT


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
"""


def test_a_serial_sweep_runs_the_new_version_of_an_imported_module(tmp_path: Path) -> None:
    # issue 22: the serial executor runs points in this process, where the module a kernel
    # imports stayed in sys.modules; a sweep after the module was edited re-ran its points
    # (a new digest) with the old module's code. REPEAT matmuls of [128, M] x [128, N]: one
    # MatMul instruction each (closed form), so the edit from 1 to 3 adds 2 a point
    parts = tmp_path / "stale_parts"
    parts.mkdir()
    (parts / "__init__.py").write_text("")
    (parts / "reps.py").write_text("REPEAT = 1\n")
    (tmp_path / "kern.py").write_text(REPS_KERNEL)
    spec_file, out = _kernel_sweep(tmp_path, kernel="kern.py", function="k"), tmp_path / "r.sqlite"
    assert execute(sw.load_sweep(spec_file), out, executor="serial").failed == 0
    before = {(r["dim.M"], r["dim.N"]): r["ins_tensor"] for r in read_rows(out)[0]}
    (parts / "reps.py").write_text("REPEAT = 3  # edited between two sweeps\n")
    assert execute(sw.load_sweep(spec_file), out, executor="serial").ran == 4
    after = {(r["dim.M"], r["dim.N"]): r["ins_tensor"] for r in read_rows(out)[0]}
    assert after == {key: n + 2 for key, n in before.items()}


def test_other_args_rerun_and_show_ranks_only_the_latest_rows(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copy(BASIC, tmp_path / "basic_matmul.py")
    out = tmp_path / "r.sqlite"
    execute(sw.load_sweep(_kernel_sweep(tmp_path, "bf16")), out, executor="serial")
    second = execute(sw.load_sweep(_kernel_sweep(tmp_path, "fp8_e4m3")), out,
                     executor="serial")
    assert second.ran == 4  # the args are part of every key
    rows, _ = read_rows(out)
    assert len(rows) == 4
    for r in rows:  # the fp8 rows: one byte an element
        assert r["hbm_bytes"] == _hbm_bytes(r["dim.M"], r["dim.N"], "fp8_e4m3")
    view = read_store(out, every=True)
    assert (len(view.rows), view.hidden) == (8, 0)
    assert sorted(r["hbm_bytes"] for r in view.rows) == sorted(
        _hbm_bytes(m, n, d) for m in (64, 128) for n in (128, 256) for d in ISZ)
    rc, text, _ = _cli(capsys, "sweep", "show", str(out), "--json")
    shown = json.loads(text)
    assert (rc, shown["points"], shown["hidden"]) == (0, 4, 4)
    assert {b["hbm_bytes"] for b in shown["best"]} == {
        _hbm_bytes(m, n, "fp8_e4m3") for m in (64, 128) for n in (128, 256)}
    rc, text, _ = _cli(capsys, "sweep", "show", str(out), "--json", "--all")
    assert json.loads(text)["points"] == 8
    rc, text, _ = _cli(capsys, "sweep", "show", str(out))
    assert "4 points" in text and "4 rows of earlier versions" in " ".join(text.split())


def test_points_found_done_stay_in_show_when_an_axis_grows(tmp_path: Path) -> None:
    shutil.copy(BASIC, tmp_path / "basic_matmul.py")
    out = tmp_path / "r.sqlite"
    execute(sw.load_sweep(_kernel_sweep(tmp_path, n=(128,))), out, executor="serial")
    grown = execute(sw.load_sweep(_kernel_sweep(tmp_path, n=(128, 256))), out,
                    executor="serial")
    assert (grown.ran, grown.skipped) == (2, 2)
    rows, _ = read_rows(out)  # the two done points belong to the grown sweep too
    assert sorted((r["dim.M"], r["dim.N"]) for r in rows) == [(64, 128), (64, 256),
                                                              (128, 128), (128, 256)]


def test_retry_failed_stores_the_point_s_success(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    spec = sw.parse_sweep("run: {matmul: {m: 128, k: 128}}\naxes:\n  n: [128, 256]\n")
    out = tmp_path / "r.sqlite"
    real = ev.evaluate_point

    def flaky(target: Any, inputs: dict[str, Any]) -> dict[str, Any]:
        if inputs["n"] == 256:
            raise SweepError("a passing failure")
        return real(target, inputs)

    monkeypatch.setattr(ev, "evaluate_point", flaky)
    assert execute(spec, out, executor="serial").failed == 1
    monkeypatch.setattr(ev, "evaluate_point", real)
    assert execute(spec, out, executor="serial").ran == 0  # failed points are kept
    retried = execute(spec, out, executor="serial", retry_failed=True)
    assert (retried.ran, retried.failed, retried.skipped) == (1, 0, 1)
    rows, _ = read_rows(out)
    assert len(rows) == 2
    [row] = [r for r in rows if r["n"] == 256]
    assert row["status"] == "ok" and row["error"] is None
    assert row["flops"] == 2 * 128 * 128 * 256 and row["latency_us"] > 0


# -- constraints over missing values -----------------------------------------------------------

@pytest.mark.parametrize("op", ["<=", "<", ">=", ">", "==", "!="])
def test_a_missing_value_never_meets_a_constraint(op: str) -> None:
    column = np.array([None, math.nan, 5.0, "pe"], dtype=object)
    num = Constraint("x", op, 3.0, f"x {op} 3").holds(column)
    assert not num[0] and not num[1]
    assert num[2] == {"<=": False, "<": False, ">=": True, ">": True, "==": False,
                      "!=": True}[op]
    assert not num[3]  # a string is no number
    if op in ("==", "!="):
        text = Constraint("x", op, "pe", f"x {op} pe").holds(column)
        assert not text[0] and not text[1]
        assert text[3] == (op == "==") and text[2] == (op == "!=")


def test_a_row_without_the_constrained_figure_is_not_feasible() -> None:
    meta = {"objective": {"figure": "latency_us", "maximize": False},
            "constraints": ["bound != pe", "hfu != 0.5"]}
    rows = [{"status": "ok", "latency_us": 1.0, "bound": "dma", "hfu": 0.1},
            {"status": "ok", "latency_us": 2.0, "hfu": 0.1},
            {"status": "ok", "latency_us": 3.0, "bound": "dma"},
            {"status": "ok", "latency_us": 4.0, "bound": "dma", "hfu": math.nan}]
    assert feasible(rows, meta).tolist() == [True, False, False, False]


# -- what is refused -----------------------------------------------------------------------------

def test_another_sweep_in_the_store_is_refused_and_the_store_kept(tmp_path: Path) -> None:
    out = tmp_path / "r.sqlite"
    first = "name: one\nrun: {matmul: {m: 128, k: 128, n: 128}}\naxes: {arch: [trn1, trn2]}\n"
    execute(sw.parse_sweep(first), out, executor="serial")
    other = first.replace("name: one", "name: two") + "objective: {maximize: tflops}\n"
    with pytest.raises(SweepError, match="holds the results of another sweep") as err:
        execute(sw.parse_sweep(other), out, executor="serial")
    assert "'one'" in str(err.value) and "\n" not in str(err.value)
    assert "('one': matmul)" in str(err.value)  # the target's kind once, not "matmul matmul"
    rows, meta = read_rows(out)
    assert meta["name"] == "one" and meta["objective"]["figure"] == "latency_us"
    assert len(rows) == 2


def test_a_file_with_meta_but_no_points_table_is_refused(tmp_path: Path) -> None:
    import sqlite3

    out = tmp_path / "r.sqlite"
    con = sqlite3.connect(out)
    con.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    con.commit()
    con.close()
    spec = sw.parse_sweep("run: {matmul: {m: 128, k: 128, n: 128}}\n")
    for call in (lambda: execute(spec, out, executor="serial"), lambda: read_rows(out)):
        with pytest.raises(SweepError, match="not a results store") as err:
            call()
        assert "no points" in str(err.value) and "\n" not in str(err.value)
    con = sqlite3.connect(out)  # nothing was added to the foreign file
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    con.close()
    assert tables == {"meta"}


def test_a_store_write_locked_by_another_program_is_refused_at_once(tmp_path: Path) -> None:
    out = tmp_path / "r.sqlite"
    spec = sw.parse_sweep("run: {matmul: {m: 128, k: 128, n: 128}}\n")
    execute(spec, out, executor="serial")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sqlite3, sys, time\n"
         "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
         "c.execute('BEGIN IMMEDIATE')\nprint('locked', flush=True)\ntime.sleep(120)\n",
         str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        t0 = time.monotonic()
        with pytest.raises(SweepError, match="another program holds a write lock") as err:
            execute(spec, out, executor="serial", retry_failed=True)
        # refused, not after SQLite's 30 s wait for the lock
        assert time.monotonic() - t0 < WRITE_WAIT_S
        assert "\n" not in str(err.value)
        rows, _ = read_rows(out)  # a reader is not blocked by that writer
        assert len(rows) == 1
    finally:
        holder.kill()
        holder.wait()


def _lock_holder(path: Path, begin: str) -> subprocess.Popen[str]:
    """Another program: takes a write lock on ``path`` and holds it until a line on stdin."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sqlite3, sys\n"
         "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
         f"c.execute('{begin}')\nprint('locked', flush=True)\nsys.stdin.readline()\n"
         "c.execute('COMMIT')\n", str(path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
    return holder


def test_show_says_it_waits_for_another_programs_write_lock(tmp_path: Path) -> None:
    # issue 22: `sweep show` of a store an open sqlite3 session holds an exclusive lock on
    # (a finished store has a rollback journal: the lock blocks readers) waited 30 s without
    # a word; now it says so after a second, and reads the store once the lock goes
    out = tmp_path / "r.sqlite"
    execute(sw.parse_sweep("run: {matmul: {m: 128, k: 128, n: 128}}\n"), out,
            executor="serial")
    holder = _lock_holder(out, "BEGIN EXCLUSIVE")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    show = subprocess.Popen([sys.executable, "-m", "systolic", "sweep", "show", str(out),
                             "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        assert show.stderr is not None
        line = show.stderr.readline()  # blocks until the notice: no timing in the test
        assert line == (f"systolic: {out}: another program holds a write lock on this "
                        f"store; waiting up to {WRITE_WAIT_S:g} s for it\n")
        assert holder.stdin is not None
        holder.stdin.write("go\n")
        holder.stdin.flush()
        stdout, stderr = show.communicate(timeout=120)
        assert show.returncode == 0, stderr
        assert json.loads(stdout)["points"] == 1
    finally:
        holder.kill()
        show.kill()
        holder.wait()
        show.wait()


def test_a_run_says_it_waits_for_another_programs_write_lock(tmp_path: Path) -> None:
    # the same in the middle of a run: a write waited 30 s silently, then the sweep stopped
    from systolic.sweep.store import Store

    out = tmp_path / "r.sqlite"
    notes: list[str] = []
    with Store(out, notice=notes.append) as store:  # in WAL mode now: the holder can lock
        holder = _lock_holder(out, "BEGIN IMMEDIATE")
        assert holder.stdin is not None
        stdin = holder.stdin

        def release(text: str) -> None:
            notes.append(text)
            stdin.write("go\n")
            stdin.flush()

        store.notice = release
        try:
            store.set_meta(name="waited")  # waits for the holder, which the notice releases
        finally:
            holder.kill()
            holder.wait()
        assert store.meta()["name"] == "waited"
    assert notes == [f"{out}: another program holds a write lock on this store; waiting up "
                     f"to {WRITE_WAIT_S:g} s for it"]


def test_an_out_in_a_missing_directory_names_the_directory(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text("run: {matmul: {m: 128, k: 128, n: 128}}\n")
    rc, _, err = _cli(capsys, "sweep", str(spec), "--out", str(tmp_path / "nodir" / "x.sqlite"))
    assert rc == 2 and err.count("\n") == 1
    assert f"the directory {tmp_path / 'nodir'} does not exist" in err and ".lock" not in err


# -- what is left on disk ------------------------------------------------------------------------

def test_a_finished_store_is_one_file_in_rollback_journal_mode(tmp_path: Path) -> None:
    out = tmp_path / "r.sqlite"
    execute(sw.parse_sweep("run: {matmul: {m: 128, k: 128}}\naxes: {n: [128, 256]}\n"), out,
            workers=2)
    assert not (tmp_path / "r.sqlite-wal").exists()
    assert not (tmp_path / "r.sqlite-shm").exists()
    # file format, header offsets 18 and 19: 1 = rollback journal, 2 = WAL. A WAL file needs
    # a -shm beside it to be read, which a read-only directory cannot give
    header = out.read_bytes()[:100]
    assert header[:16] == b"SQLite format 3\x00" and (header[18], header[19]) == (1, 1)
    assert len(read_rows(out)[0]) == 2


def test_a_store_in_wal_mode_reads_immutable_from_a_read_only_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sqlite3

    out = tmp_path / "r.sqlite"
    execute(sw.parse_sweep("run: {matmul: {m: 128, k: 128, n: 128}}\n"), out,
            executor="serial")
    con = sqlite3.connect(out)
    con.execute("PRAGMA journal_mode=WAL")  # as a copy made during a run would be
    con.close()
    assert out.read_bytes()[18] == 2
    real_connect = sqlite3.connect

    def no_shm(database: str, *a: Any, **k: Any) -> sqlite3.Connection:
        if "mode=ro" in database:  # what SQLite says when it cannot make the -shm file
            raise sqlite3.OperationalError("unable to open database file")
        return real_connect(database, *a, **k)

    monkeypatch.setattr(sqlite3, "connect", no_shm)
    monkeypatch.setattr(os, "access", lambda path, mode: False)  # (tests run as root)
    rows, meta = read_rows(out)
    assert len(rows) == 1 and rows[0]["flops"] == 2 * 128 ** 3 and meta["name"] == "<sweep>"
