"""Where a recording's time goes beyond its per-op work: the garbage collector.

    python bench/nki_gc.py SRC [SRC ...]            # collections inside the measured call
    python bench/nki_gc.py --loop 5 SRC [SRC ...]   # per recording, 5 in one process
    valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \\
        python bench/nki_gc.py --records N --size 2048,4096 SRC   # N = 1, then 2

Each SRC (a checkout's ``src`` folder) runs in its own process, as ``bench_nki.py
--against`` runs it: the full-size tiled tutorial kernel recorded once to warm up, then
measured. Default: the collections that ran inside the measured recording (generation,
objects freed, CPU seconds), from ``gc.callbacks``. ``--loop N``: N recordings in a row
with the collector on, CPU per recording and the collector's share. ``--records N``: only
N recordings of the first SRC, in this process (no warm-up, no output but the op count):
two runs under cachegrind, with 1 and 2, give one recording's instruction count without
the machine's noise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

KERNEL = str(Path(__file__).resolve().parents[1] / "examples" / "kernels" / "tiled_matmul.py")

_CHILD = """
import gc, json, sys, time
sys.path.insert(0, sys.argv[1])
import systolic.nki as snki
snki.install("trn2")
kernel = snki.load_kernel(sys.argv[2], "tiled_matmul")
k, n = sys.argv[4].split(",")
specs = [snki.parse_arg(f"bf16[{k},{n}]"), snki.parse_arg(f"bf16[{k},{n}]")]
mode, count = sys.argv[3].split(":")
if mode == "records":
    for _ in range(int(count)):
        rec = snki.record(kernel, specs, check=False)
    print(json.dumps({"ops": rec.ops}))
    raise SystemExit
snki.record(kernel, specs, check=False)  # warm: imports, caches (bench_nki's child)
events, t0, on = [], [0.0], [True]
def watch(phase, info):
    if not on[0]:
        return
    if phase == "start":
        t0[0] = time.process_time()
    else:
        events.append((info["generation"], info["collected"], time.process_time() - t0[0]))
gc.callbacks.append(watch)
c0 = time.process_time()
for _ in range(int(count)):
    rec = snki.record(kernel, specs, check=False)
    if mode == "loop":
        junk = [[] for _ in range(1000)]  # the caller's next allocations: a due collection
cpu = (time.process_time() - c0) / int(count)
on[0] = False
print(json.dumps({"cpu": cpu, "events": events, "n": int(count)}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("src", nargs="+", help="checkouts' src folders")
    ap.add_argument("--loop", type=int, default=0, help="recordings in a row per process")
    ap.add_argument("--records", type=int, default=0, help="only record N times (cachegrind)")
    ap.add_argument("--size", default="4096,8192", help="K,N of both operands (bf16)")
    args = ap.parse_args()
    mode = (f"records:{args.records}" if args.records else
            f"loop:{args.loop}" if args.loop else "inside:1")
    if args.records:  # in this process, so that cachegrind counts it
        src = os.path.abspath(args.src[0])
        sys.argv = ["nki_gc", src, KERNEL, mode, args.size]
        exec(compile(_CHILD, "<nki_gc child>", "exec"), {"__name__": "nki_gc_child"})
    for src in args.src:
        src = os.path.abspath(src)
        res = subprocess.run([sys.executable, "-c", _CHILD, src, KERNEL, mode, args.size],
                             check=True, capture_output=True, text=True,
                             env=dict(os.environ, PYTHONPATH=src))
        r = json.loads(res.stdout.strip().splitlines()[-1])
        if args.records:
            print(f"{src}: {args.records} recording(s) of {r['ops']:,} NKI ops")
        elif args.loop:
            spent = sum(t for _, _, t in r["events"]) / r["n"]
            print(f"{src}: {r['cpu']:.2f} s CPU per recording, of it the collector "
                  f"{spent:.2f} s ({len(r['events'])} collections in {r['n']} recordings)")
        else:
            inside = ", ".join(f"generation {g}, {n:,} freed, {t:.2f} s"
                               for g, n, t in r["events"]) or "none"
            print(f"{src}: recording {r['cpu']:.2f} s CPU; collections inside: {inside}")


if __name__ == "__main__":
    main()
