"""``systolic.matmul`` and numpy's ``a @ b`` taking turns in one process: the median and
the best of N calls each, and the median over the calls of the ratio of neighbours.

For comparing two trees of the package, where one run of bench_functional.py cannot: run
this once per tree in alternating fresh processes, each with ``PYTHONPATH`` at its
``src``, and compare the medians (the machine's speed drifts by 5-10% between minutes, so
one process per tree, taking turns, several rounds):

    for i in 1 2 3 4; do
      PYTHONPATH=/path/to/old/src python bench/bench_matmul_calls.py 2048
      PYTHONPATH=src python bench/bench_matmul_calls.py 2048
    done

The first call of the shape (lowering, a fresh simulator) is made before the timed ones.
numpy's product gets every core (``--numpy-threads``, default the CPU count), as in
bench_functional.py.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
from threadpoolctl import threadpool_limits

import systolic
from systolic import get_arch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("size", type=int, help="S of the S^3 bf16 product")
    ap.add_argument("--calls", type=int, default=11)
    ap.add_argument("--numpy-threads", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    n = args.size
    arch = get_arch("trn2")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    systolic.matmul(a, b, dtype="bf16", arch=arch)  # the first call of the shape
    ours: list[float] = []
    theirs: list[float] = []
    for _ in range(args.calls):
        t = time.perf_counter()
        systolic.matmul(a, b, dtype="bf16", arch=arch)
        ours.append(time.perf_counter() - t)
        time.sleep(0.05)
        with threadpool_limits(limits=args.numpy_threads, user_api="blas"):
            t = time.perf_counter()
            a @ b
            theirs.append(time.perf_counter() - t)
        time.sleep(0.2)  # OpenBLAS's threads spin after numpy's product (bench_functional)
    ratio = statistics.median(o / t for o, t in zip(ours, theirs, strict=True))
    print(f"{n}^3 bf16, {args.calls} calls each, load {os.getloadavg()[0]:.2f}: "
          f"systolic.matmul median {statistics.median(ours) * 1e3:.1f} ms, best "
          f"{min(ours) * 1e3:.1f} | numpy a @ b median {statistics.median(theirs) * 1e3:.1f}"
          f" ms, best {min(theirs) * 1e3:.1f} | best / best {min(ours) / min(theirs):.2f}x,"
          f" median of the calls' ratios {ratio:.2f}x")


if __name__ == "__main__":
    main()
