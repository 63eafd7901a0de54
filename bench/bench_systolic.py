"""Speed of the register-level simulator: PE-cycles per second on one full-size instruction.

One MatMul stationary[128, 128].T @ moving[128, N] with the weights already latched, run by
the register-level simulator (``record=False``: every PE stepped on every cycle of the
instruction's N + K + M - 2) and, as the baseline in the same run, by the functional
simulator on the same instruction (``order="systolic"``, the one the register-level
simulator is bit-identical to, and ``order="fast"``, one BLAS product). A compiled
multi-instruction product is timed as well.

    python bench/bench_systolic.py [--n 512] [--dtype bf16] [--repeat 5] [--product 512]

Prints a Markdown section. Times are the best of ``--repeat`` rounds (wall clock,
time.perf_counter; single-threaded numpy); "PE-cycles" are rows x cols x cycles.
"""

from __future__ import annotations

import argparse
import os
import platform
from collections.abc import Callable

import numpy as np
from timer import best

from systolic import AccessPattern, CalcFlags, LoadStationary, MatMul, Program, Space
from systolic.arch import get_arch
from systolic.compiler import MatmulSpec, lower
from systolic.sim.functional import FunctionalSimulator
from systolic.sim.systolic import SystolicSimulator


def one_instruction(n: int, dtype: str, repeat: int) -> list[str]:
    arch = get_arch("trn2")
    k = m = 128
    acc = "int48" if dtype.startswith("int") else "fp32"
    s_ap = AccessPattern(Space.SBUF, 0, k, 0, ((1, m),), dtype)
    x_ap = AccessPattern(Space.SBUF, 0, k, 4096, ((1, n),), dtype)
    dst = AccessPattern(Space.PSUM, 0, m, 0, ((1, n),), acc)
    load = LoadStationary(s_ap, 0, 15, 15)
    mm = Program([MatMul(x_ap, dst, CalcFlags.START | CalcFlags.STOP, dtype, 0, 15, 15)])
    rng = np.random.default_rng(0)
    if acc == "int48":
        s, x = rng.integers(-128, 128, (k, m)), rng.integers(-128, 128, (k, n))
    else:
        s = rng.standard_normal((k, m)).astype(np.float32)
        x = rng.standard_normal((k, n)).astype(np.float32)

    def systolic() -> int:
        sim = SystolicSimulator(arch)
        sim.memory.write(s_ap, s)
        sim.memory.write(x_ap, x)
        sim.preload(load)
        return sim.run(mm).cycles

    def functional(order: str) -> Callable[[], None]:
        def go() -> None:
            sim = FunctionalSimulator(arch, order=order)  # type: ignore[arg-type]
            sim.memory.write(s_ap, s)
            sim.memory.write(x_ap, x)
            sim.execute(load)
            sim.run(mm, check=False)
        return go

    cycles = systolic()
    pe_cycles = k * m * cycles
    t_sys = best(systolic, repeat)
    t_sum = best(functional("systolic"), repeat)
    t_fast = best(functional("fast"), repeat)
    return [
        f"One MatMul 128 x 128 x {n} {dtype} on 128 x 128 PEs: {cycles} cycles, "
        f"{pe_cycles / 1e6:.2f} M PE-cycles.\n",
        "| executor | time (ms) | PE-cycles/s | register-level time / this time |",
        "| --- | ---: | ---: | ---: |",
        f"| register-level (`SystolicSimulator`, record=False) | {t_sys * 1e3:.1f} | "
        f"{pe_cycles / t_sys:.3g} | 1 |",
        f"| functional, order=systolic | {t_sum * 1e3:.1f} | - | {t_sys / t_sum:.1f} |",
        f"| functional, order=fast (BLAS) | {t_fast * 1e3:.1f} | - | {t_sys / t_fast:.1f} |",
    ]


def product(size: int, repeat: int) -> list[str]:
    arch = get_arch("trn2")
    spec = MatmulSpec(size, size, size, "bf16")
    low = lower(spec, arch)
    rng = np.random.default_rng(1)
    a = rng.standard_normal((size, size)).astype(np.float32)
    b = rng.standard_normal((size, size)).astype(np.float32)
    runs: dict[str, object] = {}

    def systolic() -> None:
        sim = SystolicSimulator(arch, dram_bytes=low.layout.dram_bytes)
        sim.write_dram(low.layout.a_offset, a, "bf16")
        sim.write_dram(low.layout.b_offset, b, "bf16")
        runs["run"] = sim.run(low.program)

    def functional() -> None:
        sim = FunctionalSimulator(arch, order="systolic", dram_bytes=low.layout.dram_bytes)
        sim.write_dram(low.layout.a_offset, a, "bf16")
        sim.write_dram(low.layout.b_offset, b, "bf16")
        sim.run(low.program)

    t_sys = best(systolic, max(1, repeat // 2))
    t_fun = best(functional, max(1, repeat // 2))
    run = runs["run"]
    pe_cycles = 128 * 128 * run.cycles  # type: ignore[attr-defined]
    counts = ", ".join(f"{v} {k}" for k, v in low.program.counts().items())
    return [
        f"\nCompiled product {size}^3 bf16 on trn2 ({counts}): {run.cycles} cycles "  # type: ignore[attr-defined]
        f"({100 * run.utilization:.1f}% of PE-cycles busy).\n",  # type: ignore[attr-defined]
        "| executor | time (s) | PE-cycles/s | register-level time / this time |",
        "| --- | ---: | ---: | ---: |",
        f"| register-level | {t_sys:.2f} | {pe_cycles / t_sys:.3g} | 1 |",
        f"| functional, order=systolic | {t_fun:.2f} | - | {t_sys / t_fun:.1f} |",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--n", type=int, default=512, help="moving columns N (default 512)")
    ap.add_argument("--dtype", default="bf16", help="operand format (default bf16)")
    ap.add_argument("--repeat", type=int, default=5, help="rounds; the best counts")
    ap.add_argument("--product", type=int, default=512,
                    help="size of the compiled square product (0: skip)")
    args = ap.parse_args()
    print("## Register-level simulator\n")
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, numpy {np.__version__}, load average "
          f"{os.getloadavg()[0]:.1f} at start.\n")
    print("\n".join(one_instruction(args.n, args.dtype, args.repeat)))
    if args.product:
        print("\n".join(product(args.product, args.repeat)))


if __name__ == "__main__":
    main()
