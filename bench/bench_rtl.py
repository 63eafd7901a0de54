"""Throughput of the behavioural RTL arrays on a 128x128 integer product; MACs per second.

The weight-stationary model steps every one of the 128 x 128 cells on every clock edge
(numpy int64, loop over edges only); the adder-tree model evaluates a chunk of edges at once.
Baseline in the same run: numpy's int64 ``W.T @ X`` on the same operands, the floor any
cycle-level model pays for the arithmetic alone.

    python bench/bench_rtl.py [--size 128] [--n 128 1024 4096] [--repeat 3] [--bits 8 16]

Prints a Markdown section. "useful" MACs are K * M * N; "cell-edges" are rows * cols * cycles
(every PE stepped on every edge, fill and drain included). Plain products never leave 48 bits,
so ``matmul`` skips the per-edge wrap; the "WS, wrapping" column adds psum_in = 2**47 - 1 to
force the wrap on every edge (the worst case). Times are the best of ``--repeat``
rounds (wall clock, time.perf_counter), single-threaded numpy.
"""

from __future__ import annotations

import argparse
import os
import platform

import numpy as np
from timer import best

from systolic.rtl.array import AdderTreeArray, WeightStationaryArray


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--size", type=int, default=128, help="array rows = cols = K = M")
    ap.add_argument("--n", type=int, nargs="+", default=[128, 1024, 4096], help="moving columns")
    ap.add_argument("--bits", type=int, nargs="+", default=[8, 16], help="operand widths")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    size = args.size
    ws = WeightStationaryArray(size, size)
    tree = AdderTreeArray(size, size)
    print("## RTL behavioural array\n")
    print(
        f"`python bench/bench_rtl.py --size {size} --n {' '.join(map(str, args.n))} "
        f"--bits {' '.join(map(str, args.bits))} --repeat {args.repeat}`; best of "
        f"{args.repeat}; numpy {np.__version__}, Python {platform.python_version()}, "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores.\n"
    )
    print(
        "| operands | N | cycles | WS time (s) | WS useful (MMAC/s) | WS cell-edges (M/s) "
        "| WS edges/s | WS, wrapping (MMAC/s) | adder tree (MMAC/s) | numpy int64 matmul (MMAC/s) |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    rng = np.random.default_rng(0)
    for bits in args.bits:
        lo, hi = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        w = rng.integers(lo, hi, size=(size, size), endpoint=True)
        for n in args.n:
            x = rng.integers(lo, hi, size=(size, n), endpoint=True)
            want = w.T @ x
            assert np.array_equal(ws.matmul(w, x), want)  # a benchmark of a wrong answer is moot
            assert np.array_equal(tree.matmul(w, x), want)
            p = np.full((size, n), 2**47 - 1, np.int64)
            t_ws = best(lambda w=w, x=x: ws.matmul(w, x), args.repeat)
            t_wrap = best(lambda w=w, x=x, p=p: ws.matmul(w, x, p), args.repeat)
            t_tree = best(lambda w=w, x=x: tree.matmul(w, x), args.repeat)
            t_np = best(lambda w=w, x=x: w.T @ x, args.repeat)
            macs = size * size * n
            cycles = ws.cycles
            print(
                f"| int{bits} | {n} | {cycles} | {t_ws:.3f} | {macs / t_ws / 1e6:.0f} "
                f"| {size * size * cycles / t_ws / 1e6:.0f} | {cycles / t_ws:,.0f} "
                f"| {macs / t_wrap / 1e6:.0f} | {macs / t_tree / 1e6:.0f} "
                f"| {macs / t_np / 1e6:.0f} |"
            )


if __name__ == "__main__":
    main()
