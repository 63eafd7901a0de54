"""Functional simulator speed and memory: a 2048^3 bf16 product as 1024 back-to-back
128x128x512 MatMuls with their loads, in ``fast`` order, against numpy's float32 ``a @ b``
of the same shape in the same run.

Target (issue 2): no more than 1.5x numpy's time; peak memory no more than 3x the bytes of
inputs plus output. Run: ``python3 bench/bench_functional.py [--size 2048] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import tracemalloc

import numpy as np
from timer import best

from systolic import FunctionalSimulator, get_arch
from systolic.compiler import MatmulSpec, lower


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--size", type=int, default=2048)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--arch", default="trn2")
    args = ap.parse_args()
    n = args.size
    arch = get_arch(args.arch)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    lowered = lower(MatmulSpec(n, n, n, "bf16"), arch)
    prog = lowered.program
    counts = prog.counts()

    sim = FunctionalSimulator(arch, order="fast", dram_bytes=lowered.layout.dram_bytes)
    sim.write_dram(lowered.layout.a_offset, a, "bf16")
    sim.write_dram(lowered.layout.b_offset, b, "bf16")

    t_numpy = best(lambda: a @ b, args.repeat)
    t_sim = best(lambda: sim.run(prog, check=False), args.repeat)
    t_sim_checked = best(lambda: sim.run(prog, check=True), 1)

    # peak memory of one run, numpy allocations traced (the state itself is counted: SBUF,
    # PSUM and device memory holding a, b and the result)
    tracemalloc.start()
    sim2 = FunctionalSimulator(arch, order="fast", dram_bytes=lowered.layout.dram_bytes)
    sim2.write_dram(lowered.layout.a_offset, a, "bf16")
    sim2.write_dram(lowered.layout.b_offset, b, "bf16")
    sim2.run(prog, check=False)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    io_bytes = 2 * n * n * 2 + n * n * 4  # bf16 a and b, fp32 out

    out = sim.read_dram(lowered.layout.out_offset, (n, n), "fp32")
    ref = a.astype(np.float64) @ b.astype(np.float64)
    err = float(np.abs(out - ref).max() / np.abs(ref).max())

    print(f"functional simulator, {n}^3 bf16 on {arch.name}: {counts}")
    print(f"  numpy float32 a @ b      {t_numpy * 1e3:9.1f} ms")
    print(f"  simulator (fast order)   {t_sim * 1e3:9.1f} ms   ratio {t_sim / t_numpy:5.2f}x")
    print(f"  simulator + verify       {t_sim_checked * 1e3:9.1f} ms   "
          f"ratio {t_sim_checked / t_numpy:5.2f}x")
    print(f"  peak traced memory       {peak / 2**20:9.1f} MiB = {peak / io_bytes:4.2f}x the "
          f"{io_bytes / 2**20:.0f} MiB of bf16 inputs + fp32 output")
    print(f"  max rel error vs float64 {err:.2e}")


if __name__ == "__main__":
    main()
