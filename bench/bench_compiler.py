"""Compiler speed: lowering alone (instructions per second) for 2048^3 and 8192^3 bf16,
and the full ``systolic.matmul`` at 2048^3 (round, lower, verify, simulate) against numpy's
float32 ``a @ b`` of the same shape in the same run (target: within 1.5x).

Run: ``python3 bench/bench_compiler.py [--repeat 3] [--skip-large]``.
"""

from __future__ import annotations

import argparse

import numpy as np
from timer import timed

import systolic
from systolic import get_arch
from systolic.compiler import MatmulSpec, lower


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--arch", default="trn2")
    ap.add_argument("--skip-large", action="store_true", help="skip the 8192^3 lowering")
    args = ap.parse_args()
    arch = get_arch(args.arch)
    sizes = [2048] if args.skip_large else [2048, 8192]
    print(f"lowering bf16 products on {arch.name} (verify included)")
    for n in sizes:
        t, lowered = timed(lambda n=n: lower(MatmulSpec(n, n, n, "bf16"), arch),
                           1 if n > 4096 else args.repeat)
        count = len(lowered.program)  # type: ignore[union-attr]
        print(f"  {n}^3: {count:8d} instructions in {t * 1e3:8.1f} ms = "
              f"{count / t / 1e3:7.1f} k instructions/s  {lowered.program.counts()}")  # type: ignore[union-attr]

    n = 2048
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    t_np, _ = timed(lambda: a @ b, args.repeat)
    t_mm, _ = timed(lambda: systolic.matmul(a, b, dtype="bf16", arch=arch), args.repeat)
    print(f"full matmul {n}^3 bf16: systolic.matmul {t_mm * 1e3:.1f} ms, numpy float32 "
          f"a @ b {t_np * 1e3:.1f} ms, ratio {t_mm / t_np:.2f}x")


if __name__ == "__main__":
    main()
