"""A sweep stopped with SIGTERM (``kill``, a job scheduler's stop) ends as Ctrl-C does
(issue 22): the pool's workers or the Dask cluster are shut down without a leaked-semaphore
warning or a worker's traceback, the store is a whole SQLite file with no ``-wal``/``-shm``
beside it, and the same command resumes it to every point, each stored once.

The stored figures are checked against ``systolic matmul --json`` of the same product (the
command a user would run for one point), not against the sweep's own earlier output."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import missing_extra, store_rows

import systolic.sweep as sw
from systolic.cli import main
from systolic.sweep.runner import execute
from systolic.sweep.store import read_rows

ROOT = Path(__file__).resolve().parents[1]
# 16 x 16 x 2 = 512 small matmul points: long enough on 2 workers to be stopped midway
GRID = """\
name: stopped
run: {matmul: {n: 512}}
axes:
  m: {from: 128, to: 2048, step: 128}
  k: {from: 128, to: 2048, step: 128}
  arch: [trn1, trn2]
"""
TOTAL = 512


def _count(out: Path) -> int:
    try:
        con = sqlite3.connect(f"file:{out}?mode=ro", uri=True, timeout=1)
        try:
            return int(con.execute("SELECT count(*) FROM points").fetchone()[0])
        finally:
            con.close()
    except sqlite3.Error:
        return 0


@pytest.mark.parametrize("where", [["--workers", "2"], ["--dask", "local:2"]],
                         ids=["pool", "dask"])
def test_sigterm_stops_a_sweep_cleanly_and_it_resumes(tmp_path: Path, where: list[str],
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    if where[0] == "--dask":
        try:
            import distributed  # noqa: F401
        except ImportError:
            missing_extra("dask[distributed]")
    spec_path = tmp_path / "grid.yaml"
    spec_path.write_text(GRID)
    out = tmp_path / "r.sqlite"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen([sys.executable, "-m", "systolic", "sweep", str(spec_path),
                             "--out", str(out), *where, "--no-progress"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300  # a guard against a stuck start, not a speed bound
    while _count(out) < 10 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGTERM)  # the sweep's process only, as `kill PID` sends it
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, (proc.returncode, stderr)
    assert "leaked semaphore" not in stderr and "Traceback" not in stderr, stderr
    assert stderr.splitlines()[-1] == (
        f"systolic: stopped by SIGTERM; the points that finished are in {out} (run the same "
        f"command again to resume)")
    assert stdout == ""
    assert not (tmp_path / "r.sqlite-wal").exists()
    assert not (tmp_path / "r.sqlite-shm").exists()
    con = sqlite3.connect(f"file:{out}?mode=ro", uri=True)
    try:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    finally:
        con.close()
    partial = store_rows(out)
    assert 10 <= len(partial) < TOTAL
    rows = {(r["m"], r["k"], r["arch"]): r for r in read_rows(out)[0]}
    assert all(r["status"] == "ok" for r in rows.values())
    for (m, k, arch), r in list(rows.items())[:3]:  # as the one-product command gives it
        assert main(["matmul", str(m), str(k), "512", "--arch", arch, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["core"]["latency_us"] == r["latency_us"]
    resumed = execute(sw.load_sweep(spec_path), out, workers=2)
    assert resumed.skipped == len(partial) and resumed.ran == TOTAL - len(partial)
    final = store_rows(out)
    assert len(final) == TOTAL
    assert set(partial) <= set(final)  # nothing finished before the stop was lost or redone
