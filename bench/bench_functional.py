"""Functional simulator speed and memory, side by side with numpy in one run.

For each size S, an S^3 bf16 product (S/128 x S/128 x S/512 MatMuls of 128x128x512 with
their loads) timed four ways against numpy's float32 ``a @ b`` of the same shape:

* ``floor 1T`` / ``floor 2T``: a standalone loop doing exactly what the ``fast`` order
  defines, one fp32 GEMM per MatMul instruction then the fp32 PSUM add in program order,
  with nothing else (no Program, no memory model, no allocation: a START's product is
  written into the output block, the others into one buffer then added in place, the least
  numpy work with these roundings); on one thread, and on two Python threads
  each owning half of the N tiles (disjoint PSUM regions, identical bits). The floor of what
  the simulator can reach on this machine.
* ``floor 2T fused``: the same on two threads with each accumulating product added by its
  own sgemm (beta = 1, :func:`systolic.sim.blas.accumulate`: the same bits where it is
  taken, one memory pass fewer); the floor of the simulator since issue 20's fused add.
* ``sim.run``: the FunctionalSimulator running the lowered Program (operands in DRAM).
* ``systolic.matmul``: the whole user call (encoding, the run, the read-back; the product
  was lowered by an earlier call, :func:`systolic.api.lowered_product` keeps it);
* ``matmul, 1st of a shape``: the same with its lowering (the first call of a shape).

BLAS threads are set explicitly: numpy's ``a @ b`` gets every core (``--numpy-threads``,
default the CPU count); the simulator and the floor hold BLAS to one thread per GEMM (the
bits of a GEMM depend on its thread count) and use Python threads instead. The functions
take turns so load drift hits all alike; the best of ``--repeat`` wall-clock and CPU times
(all threads' CPU seconds: the work done, less disturbed by other processes), and the
median over the rounds of each wall time over numpy's in the same round (the machine's
speed drifts by 5-10% within a run, and the two bests may come from different minutes).

Targets (issue 13 section 1, issue 20): ``systolic.matmul`` within 1.5x numpy at 2048^3 and
4096^3, 2x at 1024^3; peak memory under 3x the bytes of the bf16 inputs plus the fp32 output.
Run: ``python3 bench/bench_functional.py [--sizes 1024 2048 4096] [--repeat 5]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
import tracemalloc
from collections.abc import Callable

import numpy as np
from threadpoolctl import threadpool_limits
from timer import wall_and_cpu

import systolic
import systolic.api as api
from systolic import FunctionalSimulator, get_arch, round_to
from systolic.compiler import MatmulSpec, lower

try:
    from systolic.sim import blas
except ImportError:  # a tree before issue 20's fused add (bench/ runs against old trees)
    blas = None


def floor_loop(a: np.ndarray, b: np.ndarray, workers: int, fused: bool = False
               ) -> np.ndarray:
    """One GEMM per 128x128x512 instruction, fp32 PSUM adds in program order (K inner to
    each output block), N tiles split between ``workers`` Python threads; ``fused``: each
    add by the product's own sgemm where :func:`systolic.sim.blas.accumulate` takes it."""
    s = a.shape[0]
    wts = {(mi, ki): np.ascontiguousarray(a[mi:mi + 128, ki:ki + 128])
           for mi in range(0, s, 128) for ki in range(0, s, 128)}
    xs = {(ki, ni): np.ascontiguousarray(b[ki:ki + 128, ni:ni + 512])
          for ki in range(0, s, 128) for ni in range(0, s, 512)}
    out = np.empty((s, s), np.float32)

    def part(w: int) -> None:
        buf = np.empty((128, 512), np.float32)  # the least numpy work: no allocation
        for mi in range(0, s, 128):
            for ni in range(w * 512, s, workers * 512):
                acc = out[mi:mi + 128, ni:ni + 512]
                for ki in range(0, s, 128):
                    if ki == 0:  # START: the product is the block (one BLAS call)
                        np.matmul(wts[mi, ki], xs[ki, ni], out=acc)
                    elif not (fused and blas is not None
                              and blas.accumulate(acc, wts[mi, ki], xs[ki, ni])):
                        # the product, then one fp32 rounding per add
                        np.matmul(wts[mi, ki], xs[ki, ni], out=buf)
                        np.add(acc, buf, out=acc)

    with threadpool_limits(limits=1, user_api="blas"):
        threads = [threading.Thread(target=part, args=(w,)) for w in range(1, workers)]
        for t in threads:
            t.start()
        part(0)
        for t in threads:
            t.join()
    return out


def best_wall_and_cpu(fns: list[Callable[[], object]], repeat: int
                      ) -> tuple[list[tuple[float, float]], list[float]]:
    """Best wall-clock and best process CPU seconds of each function, taking turns (as
    timer.best_interleaved), and the median over the rounds of each function's wall time
    over the first function's in the same round. CPU time counts every thread's work and
    moves less than wall time when other processes share the cores; the per-round ratio
    moves less than either best when the machine's speed drifts during the run (the
    best of numpy and the best of ours may come from different minutes)."""
    best = [(float("inf"), float("inf"))] * len(fns)
    rounds: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            w, c, _ = wall_and_cpu(fn)
            best[i] = (min(best[i][0], w), min(best[i][1], c))
            rounds[i].append(w)
            # OpenBLAS's threads spin for ~0.1 s after a multithreaded call (numpy's): they
            # took a core from whatever ran next, 380 ms of CPU for 270 ms of a 1-thread loop
            time.sleep(0.2)
    ratios = [statistics.median(w / w0 for w, w0 in zip(r, rounds[0], strict=True))
              for r in rounds]
    return best, ratios


def bench(n: int, repeat: int, numpy_threads: int, arch_name: str) -> None:
    arch = get_arch(arch_name)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    ar, br = round_to(a, "bf16"), round_to(b, "bf16")
    lowered = lower(MatmulSpec(n, n, n, "bf16"), arch)
    lay = lowered.layout
    sim = FunctionalSimulator(arch, order="fast", dram_bytes=lay.dram_bytes)
    sim.write_dram(lay.a_offset, a, "bf16")
    sim.write_dram(lay.b_offset, b, "bf16")

    def numpy_ab() -> np.ndarray:
        with threadpool_limits(limits=numpy_threads, user_api="blas"):
            return a @ b

    def first_call() -> object:
        kept = getattr(api, "_lowered", None)  # (None in a tree before issue 20's cache)
        if kept is not None:
            kept.clear()  # as the first call of a shape in a process: lowered afresh
        return systolic.matmul(a, b, dtype="bf16", arch=arch)

    fns = [numpy_ab, lambda: floor_loop(ar, br, 1), lambda: floor_loop(ar, br, 2),
           lambda: floor_loop(ar, br, 2, fused=True),
           lambda: sim.run(lowered.program, check=False),
           lambda: systolic.matmul(a, b, dtype="bf16", arch=arch), first_call]
    names = ["numpy float32 a @ b", "floor 1T (GEMM/instr)", "floor 2T (GEMM/instr)",
             "floor 2T fused (beta=1)", "sim.run (fast order)", "systolic.matmul",
             "matmul, 1st of a shape"]
    times, per_round = best_wall_and_cpu(fns, repeat)

    got = systolic.matmul(a, b, dtype="bf16", arch=arch).out
    floor = floor_loop(ar, br, 2)
    same_floor = np.array_equal(got, floor)
    same_fused = np.array_equal(floor, floor_loop(ar, br, 2, fused=True))
    for kept in (getattr(api, "_sims", None), getattr(api, "_lowered", None)):
        if kept is not None:
            kept.clear()  # the peak of a first call: fresh machine memory, lowered afresh
    tracemalloc.start()
    systolic.matmul(a, b, dtype="bf16", arch=arch)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    io_bytes = 2 * n * n * 2 + n * n * 4  # bf16 a and b, fp32 out
    ref = ar.astype(np.float64) @ br.astype(np.float64)
    err = float(np.abs(got - ref).max() / np.abs(ref).max())

    print(f"{n}^3 bf16 on {arch.name} ({lowered.program.counts()['MatMul']} MatMuls), "
          f"numpy BLAS threads {numpy_threads}, load {os.getloadavg()[0]:.2f}")
    print(f"  {'':24s} {'wall ms':>9s}  {'ratio':>6s}  {'CPU ms':>9s}  {'ratio':>6s}  "
          f"{'median of rounds':>16s}")
    for name, (w, c), r in zip(names, times, per_round, strict=True):
        print(f"  {name:24s} {w * 1e3:9.1f}  {w / times[0][0]:5.2f}x  {c * 1e3:9.1f}  "
              f"{c / times[0][1]:5.2f}x  {r:15.2f}x")
    print(f"  systolic.matmul peak     {peak / 2**20:9.1f} MiB = {peak / io_bytes:4.2f}x the "
          f"{io_bytes / 2**20:.0f} MiB of bf16 inputs + fp32 output")
    print(f"  bits equal to floor 2T   {same_floor} (floor 2T fused: {same_fused}); max rel "
          f"error vs float64 {err:.2e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048, 4096])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--numpy-threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--arch", default="trn2")
    args = ap.parse_args()
    for n in args.sizes:
        bench(n, args.repeat, args.numpy_threads, args.arch)


if __name__ == "__main__":
    main()
