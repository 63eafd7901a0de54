"""Sweep throughput, for two 1,000-point sweeps in one run:

* a matmul sweep (m, k, n each in 64..640, bf16 on trn2: 10 x 10 x 10 small products, each
  timed on the whole NeuronCore and on the Tensor Engine, ``systolic.workload.time_op``);
* a kernel sweep of a small kernel (examples/kernels/basic_matmul.py: one Tensor Engine
  tile, M in 8..128 x N in 64..512 x 1..16 DMA queues on trn2), each point recorded by the
  NKI front end and timed on the whole NeuronCore.

Each sweep runs first as a bare loop over what its points cost (the baseline: ``time_op``,
or ``record_kernel`` + ``time_program``, no sweep machinery), then through
``systolic.sweep`` into a fresh store each time: in this process, on the local pool with 1
and 2 workers, and on a Dask LocalCluster of 2 single-threaded worker processes.

    python3 bench/bench_sweep.py [--repeat 3]

Overhead per point = (sweep wall time - direct loop time) / points, in this process and with
one worker (the pool with 2 workers shows the parallel speed-up instead); and, less noisy,
the sweep's wall time minus the time each point spent in the evaluator (stored per point as
elapsed_s). The Dask cluster's start-up is timed apart: a cluster is started once for many
sweeps. The matmul sweep's floor (``floor_matmul``) is the arithmetic its points cannot do
without, in CPU seconds, best of ``--repeat``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from timer import best_interleaved, wall_and_cpu

from systolic.api import make_spec
from systolic.arch import get_arch
from systolic.compiler import lower
from systolic.nki import record_kernel
from systolic.sweep import SweepSpec, parse_sweep
from systolic.sweep.runner import execute
from systolic.sweep.store import read_rows
from systolic.timing.core import time_program
from systolic.timing.tensor_engine import schedule
from systolic.workload import time_op

ROOT = Path(__file__).resolve().parents[1]
KERNEL = ROOT / "examples" / "kernels" / "basic_matmul.py"

MATMUL = """\
run: {matmul: null}
fixed: {arch: trn2}
axes:
  m: [64, 128, 192, 256, 320, 384, 448, 512, 576, 640]
  k: [64, 128, 192, 256, 320, 384, 448, 512, 576, 640]
  n: [64, 128, 192, 256, 320, 384, 448, 512, 576, 640]
"""
KERNEL_SWEEP = f"""\
run:
  kernel: {KERNEL}:basic_matmul
  args: {{lhsT: "bf16[128, M]", rhs: "bf16[128, N]"}}
fixed: {{arch: trn2}}
axes:
  dim.M: [8, 16, 24, 32, 48, 64, 80, 96, 112, 128]
  dim.N: [64, 112, 160, 208, 256, 304, 352, 400, 448, 512]
  dma_engines: [1, 2, 3, 4, 6, 8, 10, 12, 14, 16]
"""


def direct_matmul(points: list[dict[str, Any]]) -> None:
    arch = get_arch("trn2")
    for p in points:
        report, _ = time_op(make_spec(p["m"], p["k"], p["n"], "bf16", arch, "none"), arch)
        report.core  # noqa: B018 (the whole-core timing is computed on first use)


def floor_inputs(points: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What the floor of each matmul point reads, found once and not timed: its tiles (the
    compiler's loop nest), its ops' durations, queues and dependencies as the whole-core
    scheduler found them (the what-if plans), and its MatMuls' issue intervals and durations
    (the Tensor Engine's view)."""
    arch = get_arch("trn2")
    per_chunk = max(1, arch.psum_banks // 2)
    out = []
    for p in points:
        spec = make_spec(p["m"], p["k"], p["n"], "bf16", arch, "none")
        low = lower(spec, arch, check=False)
        plan = low.plan
        plans = time_program(low.program, arch).what_if._plans  # type: ignore[attr-defined]
        ct = time_program(low.program, arch, what_if=False)
        cc = schedule(low.program, arch).compute
        out.append(([m.size for m in plan.m_tiles], [k.size for k in plan.k_tiles],
                    [n.size for n in plan.n_tiles], per_chunk, list(plans.dur),
                    list(plans.dep_end), list(plans.dep_op), list(plans.dep_lat),
                    ct.op_queue.tolist(), len(ct.busy_ticks), cc.interval.tolist(),
                    cc.duration.tolist()))
    return out


def floor_matmul(inputs: list[tuple[Any, ...]]) -> None:
    """The least work a matmul point is: the compiler's loop nest over its tiles (a tuple a
    step, no instruction objects), the whole core's schedule as one max per dependency and
    one per queue (no gap filling, no DMA engine or HBM timelines, no dependency search),
    each queue's busy time, and the Tensor Engine's issue arithmetic (one max a MatMul)."""
    for (ms, ks, ns, per_chunk, dur, dep_end, dep_op, dep_lat, queue, nq, te_iv,
         te_dur) in inputs:
        steps = []
        for mi, m in enumerate(ms):
            for c0 in range(0, len(ns), per_chunk):
                for ki, k in enumerate(ks):
                    for nj in range(c0, min(c0 + per_chunk, len(ns))):
                        steps.append((ki, mi, nj, k, m, ns[nj]))
        ends: list[int] = []
        free, busy = [0] * nq, [0] * nq
        lo = 0
        for op, d in enumerate(dur):
            t = 0
            hi = dep_end[op]
            for x in range(lo, hi):
                e = ends[dep_op[x]] + dep_lat[x]
                if e > t:
                    t = e
            lo = hi
            q = queue[op]
            if free[q] > t:
                t = free[q]
            ends.append(t + d)
            free[q] = t + d
            busy[q] += d
        max(ends)
        start = cycles = 0
        for iv, du in zip(te_iv, te_dur, strict=True):
            cycles = max(cycles, start + du)
            start += iv


def direct_kernel(points: list[dict[str, Any]]) -> None:
    base = get_arch("trn2")
    for p in points:
        arch = dataclasses.replace(base, dma_engines=p["dma_engines"])
        rec = record_kernel(str(KERNEL), "basic_matmul",
                            [f"bf16[128,{p['dim.M']}]", f"bf16[128,{p['dim.N']}]"], {}, arch)
        time_program(rec.program, arch)


def bench(title: str, spec: SweepSpec, direct: Callable[[list[dict[str, Any]]], None],
          baseline: str, client: Any, tmp: str, repeat: int, target: float) -> None:
    points = [p for _, p in spec.points()]
    n = len(points)
    runs = 0
    inside: dict[str, float] = {}

    def sweep(**kw: object) -> None:
        nonlocal runs
        runs += 1  # a fresh store each time: every point runs
        out = os.path.join(tmp, f"{title[:6]}{runs}.sqlite")
        s = execute(spec, out, **kw)  # type: ignore[arg-type]
        assert s.ran == n and s.failed == 0, s
        # time inside the evaluator, as each point recorded it
        work = sum(float(r["elapsed_s"]) for r in read_rows(out)[0])
        label = str(kw)
        inside[label] = min(inside.get(label, float("inf")), s.seconds - work)

    cases: dict[str, Callable[[], object]] = {
        f"direct loop ({baseline})": lambda: direct(points),
        "sweep, in this process": lambda: sweep(executor="serial"),
        "sweep, local pool, 1 worker": lambda: sweep(workers=1),
        "sweep, local pool, 2 workers": lambda: sweep(workers=2),
        "sweep, Dask LocalCluster, 2 workers": lambda: sweep(dask=client),
    }
    # the cases take turns, so a burst of load on the shared machine hits all alike
    walls = best_interleaved(list(cases.values()), repeat)
    # CPU seconds of this process (user + sys) for the in-process cases, least of repeat:
    # much less disturbed than wall time by other processes on the shared machine
    cpu: dict[str, float] = {}
    for label in list(cases)[:2]:
        for _ in range(repeat):
            c0 = time.process_time()
            cases[label]()
            cpu[label] = min(cpu.get(label, float("inf")), time.process_time() - c0)
    print(f"{title}: {n:,} points")
    width = max(len(c) for c in cases) + 2
    for label, wall in zip(cases, walls, strict=True):
        print(f"  {label:<{width}}{wall:7.2f} s  {n / wall:8.1f} points/s")
    base, serial, one = walls[0], walls[1], walls[2]
    own = inside[str({"executor": "serial"})]
    print(f"  overhead per point against the direct loop: in this process "
          f"{1e3 * (serial - base) / n:+.3f} ms, 1-worker pool {1e3 * (one - base) / n:+.3f} "
          f"ms (a direct point takes {1e3 * base / n:.3f} ms)")
    print(f"  time outside the evaluator (hash, store commit, bookkeeping), in this process: "
          f"{1e3 * own / n:.3f} ms per point")
    for label, c in cpu.items():
        print(f"  CPU (user + sys) {label}: {c:.2f} s = {n / c:,.1f} points per CPU second")
    print(f"  target (issue 20): {target:,.0f} points/s per core; in this process "
          f"{n / serial:,.0f} = {n / serial / target:.2f}x the target (wall), "
          f"{n / cpu[list(cases)[1]] / target:.2f}x (CPU)")


def _cpu(f: Callable[[], object]) -> float:
    return wall_and_cpu(f)[1]


def _warm() -> None:
    """Import the evaluator on a Dask worker before the timing. Returns nothing: the module
    (the lazy ``systolic`` package, ``__import__``'s value) cannot be pickled back."""
    import systolic.sweep.evaluate  # noqa: F401


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=3, help="best of this many runs (3)")
    args = ap.parse_args()
    print(f"two sweeps of 1,000 points on {len(os.sched_getaffinity(0))} cores "
          f"(load average {os.getloadavg()[0]:.1f} at the start)")
    from distributed import Client, LocalCluster

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, \
            LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                         dashboard_address=":0", silence_logs=40) as cluster, \
            Client(cluster) as client:
        client.run(_warm)
        start = time.perf_counter() - t0
        spec = parse_sweep(MATMUL)
        bench("matmul sweep (m, k, n in 64..640, bf16, trn2)", spec,
              direct_matmul, "time_op + .core", client, tmp, args.repeat, 1000.0)
        inputs = floor_inputs([p for _, p in spec.points()])
        floor = min(_cpu(lambda: floor_matmul(inputs)) for _ in range(args.repeat))
        print(f"  floor (the compiler's loop nest, both schedules' arithmetic, busy times; "
              f"floor_matmul): {floor:.3f} s CPU = {len(inputs) / floor:,.0f} points/s")
        bench("kernel sweep (basic_matmul.py: M 8..128 x N 64..512 x 1..16 DMA queues, trn2)",
              parse_sweep(KERNEL_SWEEP), direct_kernel, "record_kernel + time_program",
              client, tmp, args.repeat, 500.0)
    print(f"Dask LocalCluster start-up: {start:.2f} s (not in the rows above)")


if __name__ == "__main__":
    main()
