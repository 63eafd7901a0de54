"""Sweep throughput: a 1,000-point matmul sweep (10 x 10 x 10 small shapes, one lowering
and timing each) run directly in a loop (the baseline: no sweep machinery), then through
``systolic.sweep`` in this process, on the local pool with 1 and 2 workers, and on a Dask
LocalCluster of 2 single-threaded worker processes, each into a fresh store, in one run.

    python3 bench/bench_sweep.py [--points-per-axis 10]

Overhead per point = (sweep wall time - direct loop time) / points, in this process and with
one worker (the pool with 2 workers shows the parallel speed-up instead); and, less noisy,
the sweep's wall time minus the time each point spent in the evaluator (stored per point as
elapsed_s). The Dask cluster's start-up is timed apart: a cluster is started once for many
sweeps.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from timer import best_interleaved

from systolic.api import make_spec
from systolic.arch import get_arch
from systolic.compiler import lower
from systolic.report import build_report
from systolic.sweep import parse_sweep
from systolic.sweep.runner import execute
from systolic.sweep.store import read_rows


def sweep_text(n: int) -> str:
    values = ", ".join(str(64 * (i + 1)) for i in range(n))
    return (f"run: {{matmul: null}}\nfixed: {{arch: trn2}}\naxes:\n  m: [{values}]\n"
            f"  k: [{values}]\n  n: [{values}]\n")


def direct(spec_points: list[dict[str, int]]) -> float:
    arch = get_arch("trn2")
    t0 = time.perf_counter()
    for p in spec_points:
        s = make_spec(p["m"], p["k"], p["n"], "bf16", arch, "none")
        build_report(lower(s, arch).program, arch, s)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--points-per-axis", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3, help="best of this many runs (3)")
    args = ap.parse_args()
    spec = parse_sweep(sweep_text(args.points_per_axis))
    points = [p for _, p in spec.points()]
    n = len(points)
    print(f"sweep of {n:,} matmul points (m, k, n in 64..{64 * args.points_per_axis}, bf16, "
          f"trn2) on {os.cpu_count()} cores")
    from distributed import Client, LocalCluster

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, \
            LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                         dashboard_address=":0", silence_logs=40) as cluster, \
            Client(cluster) as client:
        client.run(lambda: __import__("systolic.sweep.evaluate"))  # warm the imports
        start = time.perf_counter() - t0
        runs = 0

        inside: dict[str, float] = {}

        def sweep(**kw: object) -> None:
            nonlocal runs
            runs += 1  # a fresh store each time: every point runs
            out = os.path.join(tmp, f"{runs}.sqlite")
            s = execute(spec, out, **kw)  # type: ignore[arg-type]
            assert s.ran == n and s.failed == 0
            # time inside the evaluator, as each point recorded it
            work = sum(float(r["elapsed_s"]) for r in read_rows(out)[0])
            label = str(kw)
            inside[label] = min(inside.get(label, float("inf")), s.seconds - work)

        cases = {
            "direct loop (lower + build_report)": lambda: direct(points),
            "sweep, in this process": lambda: sweep(executor="serial"),
            "sweep, local pool, 1 worker": lambda: sweep(workers=1),
            "sweep, local pool, 2 workers": lambda: sweep(workers=2),
            "sweep, Dask LocalCluster, 2 workers": lambda: sweep(dask=client),
        }
        # the cases take turns, so a burst of load on the shared machine hits all alike
        walls = best_interleaved(list(cases.values()), args.repeat)
    rows = list(zip(cases, walls, strict=True))
    base, serial, one = walls[0], walls[1], walls[2]
    for label, wall in rows:
        print(f"  {label:<37}{wall:7.2f} s  {n / wall:8.1f} points/s")
    print(f"  Dask LocalCluster start-up           {start:7.2f} s (not in the row above)")
    own = inside[str({"executor": "serial"})]
    print(f"overhead per point against the direct loop: in this process "
          f"{1e3 * (serial - base) / n:+.2f} ms, 1-worker pool {1e3 * (one - base) / n:+.2f} ms "
          f"(a direct point takes {1e3 * base / n:.2f} ms)")
    print(f"time outside the evaluator (hash, store commit, bookkeeping), in this process: "
          f"{1e3 * own / n:.3f} ms per point")


if __name__ == "__main__":
    main()
