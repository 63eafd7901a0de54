"""NKI front end: recording + lowering speed, and the values path against numpy.

    python bench/bench_nki.py [--repeat N]

1. ``examples/kernels/tiled_matmul.py`` on lhsT [4096, 8192], rhs [4096, 8192] bf16: about
   100,000 NKI operations (64 x 16 output tiles x (32 K tiles x 3 + 2)) recorded, placed and
   lowered to one Program, without and with verifying it; figure: NKI operations per second
   (target >= 50,000), by wall clock and by CPU time (the CPU figure is what a quiet machine
   shows; a loaded one inflates the wall clock).
2. The same kernel recorded AND timed on the whole NeuronCore (``nki.benchmark``'s path:
   record + lower + verify, then ``systolic.timing.core.time_program``), target under 5 s,
   beside the recording alone (the baseline the timing adds to), in the same run.
3. The values path of a 2048 x 2048 x 2048 bf16 tiled kernel (record + functional
   simulation) beside numpy's float32 ``a @ b`` of the same operands, in the same run.

``--against OTHER/src`` runs only the recording (record + lower, no verify) of step 1 for
this tree and for another checkout's ``src`` (e.g. ``git archive`` of the commit before a
change), each in its own process, taking turns ``--repeat`` times, and prints both side by
side: the best CPU seconds of each (what a quiet machine shows) and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np
from timer import timed

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import systolic.nki as snki  # noqa: E402
from systolic.timing.core import time_program  # noqa: E402

# One recording in a fresh process of the tree at argv[1]: its best CPU and wall seconds.
_CHILD = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
import systolic.nki as snki
snki.install("trn2")
kernel = snki.load_kernel(sys.argv[2], "tiled_matmul")
specs = [snki.parse_arg("bf16[4096,8192]"), snki.parse_arg("bf16[4096,8192]")]
snki.record(kernel, specs, check=False)  # warm: imports, caches
c0, w0 = time.process_time(), time.perf_counter()
rec = snki.record(kernel, specs, check=False)
print(json.dumps({"ops": rec.ops, "instructions": len(rec.program),
                  "cpu": time.process_time() - c0, "wall": time.perf_counter() - w0}))
"""


def against(other: str, repeat: int) -> None:
    """This tree's recording beside ``other``'s (a ``src`` folder), interleaved."""
    path = str(ROOT / "examples" / "kernels" / "tiled_matmul.py")
    trees = {"this tree": str(ROOT / "src"), "other": os.path.abspath(other)}
    best: dict[str, dict[str, float]] = {}
    for _ in range(max(1, repeat)):
        for name, src in trees.items():
            res = subprocess.run([sys.executable, "-c", _CHILD, src, path], check=True,
                                 capture_output=True, text=True, env=dict(os.environ,
                                                                          PYTHONPATH=src))
            r = json.loads(res.stdout.strip().splitlines()[-1])
            b = best.setdefault(name, r)
            b["cpu"], b["wall"] = min(b["cpu"], r["cpu"]), min(b["wall"], r["wall"])
    for name, src in trees.items():
        r = best[name]
        print(f"{name:10} {src}: {r['ops']:,} NKI ops -> {r['instructions']:,} instructions; "
              f"record + lower best CPU {r['cpu']:.2f} s = {r['ops'] / r['cpu']:,.0f} ops/s "
              f"(wall {r['wall']:.2f} s)")
    print(f"CPU ratio this tree / other: {best['this tree']['cpu'] / best['other']['cpu']:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--against", metavar="SRC", help="another checkout's src folder: compare "
                    "the recording speed side by side, in the same run")
    args = ap.parse_args()
    if args.against:
        against(args.against, args.repeat)
        return
    snki.install("trn2")
    path = str(ROOT / "examples" / "kernels" / "tiled_matmul.py")
    kernel = snki.load_kernel(path, "tiled_matmul")
    specs = [snki.parse_arg("bf16[4096,8192]"), snki.parse_arg("bf16[4096,8192]")]
    for check in (False, True):
        c0 = time.process_time()
        sec, rec = timed(lambda c=check: snki.record(kernel, specs, check=c), args.repeat)
        cpu = (time.process_time() - c0) / max(1, args.repeat)
        what = "record + lower + verify" if check else "record + lower"
        print(f"{what}: {rec.ops:,} NKI ops -> {len(rec.program):,} instructions: best wall "
              f"{sec:.2f} s = {rec.ops / sec:,.0f} ops/s; CPU {cpu:.2f} s = "
              f"{rec.ops / cpu:,.0f} ops/s (target >= 50,000)")

    def record_and_time() -> tuple[snki.Recorded, object]:
        r = snki.record(kernel, specs)
        return r, time_program(r.program, r.arch)

    c0 = time.process_time()
    sec_t, (rec, core) = timed(record_and_time, args.repeat)
    cpu_t = (time.process_time() - c0) / max(1, args.repeat)
    sec_r, _ = timed(lambda: snki.record(kernel, specs), args.repeat)
    sec_s, _ = timed(lambda: time_program(rec.program, rec.arch), args.repeat)
    print(f"record + lower + verify + time: {rec.ops:,} NKI ops, {len(rec.program):,} "
          f"instructions: best wall {sec_t:.2f} s (CPU {cpu_t:.2f} s; target < 5 s); of it "
          f"time_program {sec_s:.2f} s = {len(rec.program) / sec_s:,.0f} instructions/s; "
          f"recording alone {sec_r:.2f} s; modelled {core}")

    rng = np.random.default_rng(0)
    a = rng.standard_normal((2048, 2048)).astype(np.float32).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((2048, 2048)).astype(np.float32).astype(ml_dtypes.bfloat16)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    sec_v, out = timed(lambda: snki.values(kernel, [a, b]), 1)
    sec_np, ref = timed(lambda: a32.T @ b32, args.repeat)
    err = float(np.abs(out.astype(np.float32) - ref).max())
    print(f"values 2048^3 bf16 (record + functional sim): {sec_v:.2f} s; numpy float32 "
          f"a.T @ b: {sec_np:.3f} s ({sec_v / sec_np:.0f}x); max |diff| {err:.3g} "
          f"(bf16 output rounding)")


if __name__ == "__main__":
    main()
