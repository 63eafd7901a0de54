"""Quantize 64 Mi float32 values to each MX format; values per second.

Baseline, in the same run on the same values: numpy's plain float32 -> ml_dtypes cast to the
element format (no scales, no clamp), the one step quantize cannot avoid. The ratio
quantize / cast says what the block scales, the clamp and the NaN rules cost on top.

    python bench/bench_mx_quantize.py [--n 67108864] [--repeat 5] [--rule ocp]

Prints a Markdown table. Times are the best of ``--repeat`` rounds (wall clock,
time.perf_counter; quantize, cast and dequantize take turns within a round), single-threaded
numpy.
"""

from __future__ import annotations

import argparse
import platform

import ml_dtypes
import numpy as np
from timer import best_interleaved

from systolic import mx
from systolic.dtypes import get_format

FORMATS = ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp4"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=64 * 2**20, help="values (multiple of 32)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--rule", choices=["ocp", "trainium"], default="ocp")
    args = ap.parse_args()

    rng = np.random.default_rng(0)
    # Normal values with a per-block magnitude spread of 2**-20..2**20, so scales vary.
    x = rng.standard_normal(args.n, dtype=np.float32)
    x.reshape(-1, 32)[:] *= np.exp2(rng.integers(-20, 21, (args.n // 32, 1))).astype(np.float32)

    print(f"# {args.n:,} float32 values, rule={args.rule}, best of {args.repeat}; "
          f"numpy {np.__version__}, ml_dtypes {ml_dtypes.__version__}, "
          f"{platform.processor() or platform.machine()}")
    print("| format | quantize (Mvalues/s) | cast baseline (Mvalues/s) | quantize / cast "
          "| dequantize (Mvalues/s) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name in FORMATS:
        storage = get_format(get_format(name).element or name).storage
        t = mx.quantize(x, name, rule=args.rule)
        tq, tc, td = best_interleaved([lambda name=name: mx.quantize(x, name, rule=args.rule),
                           lambda storage=storage: x.astype(storage),
                           lambda t=t: mx.dequantize(t)], args.repeat)
        q, c, d = (args.n / s / 1e6 for s in (tq, tc, td))
        print(f"| {name} | {q:,.0f} | {c:,.0f} | {q / c:.2f} | {d:,.0f} |")


if __name__ == "__main__":
    main()
