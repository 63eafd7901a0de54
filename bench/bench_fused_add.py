"""The fused PSUM add (systolic.sim.blas) on and off, side by side in one process.

For each size S, an S^3 bf16 product: ``sim.run`` on a kept simulator and the whole
``systolic.matmul`` call, each with the fused add (an accumulating MatMul's add inside its
own sgemm, beta = 1) and without it (the symbol hidden: the two calls, matmul then add),
taking turns for ``--repeat`` rounds so load drift hits both alike; medians of wall and CPU
(all threads) time, and whether the results' bits agree.
Run: ``python3 bench/bench_fused_add.py [--sizes 2048 4096] [--repeat 5]``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
from timer import wall_and_cpu

import systolic
from systolic import FunctionalSimulator, get_arch
from systolic.compiler import MatmulSpec, lower
from systolic.sim import blas


def bench(n: int, repeat: int) -> None:
    arch = get_arch("trn2")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    low = lower(MatmulSpec(n, n, n, "bf16"), arch)
    sim = FunctionalSimulator(arch, order="fast", dram_bytes=low.layout.dram_bytes)
    sim.write_dram(low.layout.a_offset, a, "bf16")
    sim.write_dram(low.layout.b_offset, b, "bf16")
    if not blas.available():
        print("numpy's OpenBLAS has no scipy_cblas_sgemm64_ here: nothing to compare")
        return
    sgemm = blas._sgemm[0]
    times: dict[tuple[str, bool], list[tuple[float, float]]] = {}
    outs: dict[bool, np.ndarray] = {}
    calls: list[tuple[str, Callable[[], object]]] = [
        ("sim.run", lambda: sim.run(low.program, check=False)),
        ("systolic.matmul", lambda: systolic.matmul(a, b, dtype="bf16", arch=arch))]
    for _ in range(repeat):
        for fused in (True, False):
            blas._sgemm[:] = [sgemm if fused else None]  # None: as a numpy without it
            blas._proven.clear()
            sim.run(low.program, check=False)  # the probes, outside the timing
            for name, fn in calls:
                w, c, got = wall_and_cpu(fn)
                times.setdefault((name, fused), []).append((w, c))
                if isinstance(got, systolic.MatmulResult):
                    outs[fused] = got.out
                time.sleep(0.1)
    blas._sgemm[:] = [sgemm]
    blas._proven.clear()
    for (name, fused), ts in sorted(times.items()):
        print(f"{n}^3 {name:16s} fused {'on ' if fused else 'off'}  wall median "
              f"{statistics.median(t[0] for t in ts) * 1e3:8.1f} ms  CPU median "
              f"{statistics.median(t[1] for t in ts) * 1e3:8.1f} ms")
    same = np.array_equal(outs[True].view(np.uint32), outs[False].view(np.uint32))
    print(f"{n}^3 bits equal with and without the fused add: {same}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    for n in args.sizes:
        bench(n, args.repeat)


if __name__ == "__main__":
    main()
