"""Digests of whole-core timings, to show that a change to timing/ or extrapolate.py moved
no figure (house rule: never change a latency figure by speeding up).

    python bench/timing_digest.py > after.txt      # one line per case
    python bench/timing_digest.py --nki-full       # also the full-size NKI tiled kernel
    PYTHONPATH=/path/to/old/src python bench/timing_digest.py > before.txt
    diff before.txt after.txt                      # empty: every figure is identical

Cases: lowered matmul products (several shapes, formats, perf modes and archs; list and
program-order schedules), the example NKI kernels at small sizes, random programs drawn
(derandomized) from tests/test_reference_scheduler.py's strategy, and the ``systolic
matmul M K N --json`` output of products on the extrapolation path. Each line hashes
every per-op start and end, queue, cause, the critical path, busy times, counts, bytes
and the what-if latencies. ``--nki-full`` adds the NKI tiled kernel at the size of issue
20's NKI row (133,120 instructions, both schedules; about a minute).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PRODUCTS = [
    (128, 128, 512, "bf16", "none", "trn2"), (384, 640, 448, "bf16", "none", "trn2"),
    (1024, 384, 2048, "bf16", "none", "trn2"), (1000, 1000, 1000, "bf16", "none", "trn1"),
    (640, 2304, 1536, "bf16", "none", "trn2"), (512, 512, 512, "fp32", "none", "trn2"),
    (768, 1024, 640, "fp8_e4m3", "double_row", "trn2"), (512, 256, 1024, "bf16", "none", "trn3"),
    (300, 500, 700, "bf16", "none", "inf2"), (1024, 1024, 1024, "mxfp8_e4m3", "none", "trn3"),
    (2048, 2048, 2048, "bf16", "none", "trn2"),
]
KERNELS = [
    ("tiled_matmul.py", "tiled_matmul", ["bf16[512,256]", "bf16[512,1024]"]),
    ("basic_matmul.py", "basic_matmul", ["bf16[128,64]", "bf16[128,512]"]),
    ("layernorm.py", "layernorm", ["fp32[256,1024]", "fp32[1024]", "fp32[1024]"]),
    ("attention.py", "attention", ["bf16[128,128]"] * 3),
    ("transpose.py", "transpose", ["bf16[256,384]"]),
    ("spmd_add.py", "add", ["fp32[256,1024]"] * 2),
    ("softmax.py", "softmax", ["bf16[512,2048]"]),
    ("rmsnorm.py", "rmsnorm", ["bf16[512,2048]"]),
]
CLI = ["4096 4096 4096", "8192 8192 8192", "16384 16384 16384", "3000 5000 7000",
       "4096 4096 16384", "16384 2048 4096", "2500 20000 3000 --dtype fp32",
       "1280 8192 8192 --arch trn1", "4096 8192 6000 --dtype fp8_e4m3 --perf-mode double_row",
       "16384 16384 65536", "2048 4096 65536", "4096 2048 40000 --arch trn1",
       "8192 8192 50000 --dtype fp32"]


def digest_timing(ct: object) -> str:
    h = hashlib.sha256()
    for name in ("latency", "op_instr", "op_queue", "op_queues", "starts", "ends",
                 "op_cause"):
        v = getattr(ct, name)
        h.update(repr(v.tolist() if hasattr(v, "tolist") else v).encode())
    for name in ("bound_ticks", "busy_ticks", "instructions", "what_if"):
        h.update(repr(sorted(dict(getattr(ct, name)).items())).encode())
    h.update(repr((ct.dma_bytes, ct.hbm_bytes, ct.useful_macs, ct.fmt,  # type: ignore
                   ct.perf_mode, ct.schedule)).encode())  # type: ignore[attr-defined]
    return h.hexdigest()[:16]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--random", type=int, default=300, help="random programs (300)")
    ap.add_argument("--no-cli", action="store_true", help="skip the CLI products")
    ap.add_argument("--nki-full", action="store_true",
                    help="also the NKI tiled kernel at 4096 x 8192 (issue 20's NKI row)")
    args = ap.parse_args()
    from systolic.api import make_spec
    from systolic.arch import get_arch
    from systolic.compiler import lower
    from systolic.timing.core import time_program

    for m, k, n, dt, mode, arch in PRODUCTS:
        a = get_arch(arch)
        prog = lower(make_spec(m, k, n, dt, a, mode), a, check=False).program
        for sched in ("list", "program-order"):
            ct = time_program(prog, a, schedule=sched)
            print(f"matmul {m}x{k}x{n} {dt} {mode} {arch} {sched}: {len(prog)} instr "
                  f"latency {ct.latency} {digest_timing(ct)}")
    from systolic import nki as snki

    for file, fn, kargs in KERNELS:
        rec = snki.record_kernel(str(ROOT / "examples" / "kernels" / file), fn, kargs, {},
                                 arch="trn2")
        ct = time_program(rec.program, "trn2")
        print(f"kernel {file}:{fn} {kargs}: {len(rec.program)} instr latency {ct.latency} "
              f"{digest_timing(ct)}")
    if args.nki_full:
        kargs = ["bf16[4096,8192]", "bf16[4096,8192]"]
        rec = snki.record_kernel(str(ROOT / "examples" / "kernels" / "tiled_matmul.py"),
                                 "tiled_matmul", kargs, {}, arch="trn2")
        for sched in ("list", "program-order"):
            ct = time_program(rec.program, "trn2", schedule=sched)
            print(f"kernel tiled_matmul.py:tiled_matmul {kargs} {sched}: {len(rec.program)} "
                  f"instr latency {ct.latency} {digest_timing(ct)}")
    sys.path.insert(0, str(ROOT / "tests"))
    from hypothesis import HealthCheck, given, settings
    from test_reference_scheduler import programs

    got: list[object] = []

    @settings(derandomize=True, max_examples=args.random, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(programs())
    def collect(p: object) -> None:
        got.append(p)

    collect()
    h = hashlib.sha256()
    for p in got:
        for sched in ("list", "program-order"):
            h.update(digest_timing(time_program(p, "trn2", schedule=sched)).encode())
    print(f"random programs: {len(got)} x 2 schedules {h.hexdigest()[:16]}")
    if not args.no_cli:
        from systolic.cli import main as cli

        for line in CLI:
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                cli(["matmul", *line.split(), "--json"])
            print(f"systolic matmul {line} --json: "
                  f"{hashlib.sha256(buf.getvalue().encode()).hexdigest()[:16]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
