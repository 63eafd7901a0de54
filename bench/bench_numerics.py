"""Accuracy of the formats end to end: relative error of ``systolic.matmul`` against float64.

For each format, data distribution and K, ``--trials`` products a[M, K] @ b[K, N] are run
through :func:`systolic.matmul` (the compiler and the functional simulator, ``fast`` order)
and compared with the float64 product of the same float32 inputs. The error of one product
is the Frobenius-norm relative error ``||C - C64||_F / ||C64||_F``; the table gives its median
and maximum over the trials. Rounding the inputs dominates: the fp32 accumulation adds
about 1e-7.

Formats: fp32 (the two-pass hi/lo lowering), fp32r (one pass on operands rounded to a
10-bit mantissa), bf16, fp8_e4m3 and fp8_e5m2 on the dense path of trn2 (operands cast to
the format, no scaling: what does not fit saturates or overflows as the format says), and
MXFP8 (e4m3, e5m2) and MXFP4 on trn3 under both scale rules (``ocp``, ``trainium``; blocks of
32 along K, docs/mx_layout.md).

Data: ``normal`` (standard normal a and b) and ``heavy`` (Student-t with 3 degrees of
freedom: finite variance, outliers a few hundred times the median magnitude).

Run: ``python3 bench/bench_numerics.py [--m 128] [--n 128] [--trials 5] [--json]``; the
table in docs/NUMERICS.md is this script's output with the defaults.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import numpy as np

import systolic

KS = (256, 1024, 4096)
# (label, dtype, arch, mx rule)
FORMATS: list[tuple[str, str, str, str]] = [
    ("fp32 (two-pass)", "fp32", "trn2", "trainium"),
    ("fp32r", "fp32r", "trn2", "trainium"),
    ("bf16", "bf16", "trn2", "trainium"),
    ("fp8_e4m3", "fp8_e4m3", "trn2", "trainium"),
    ("fp8_e5m2", "fp8_e5m2", "trn2", "trainium"),
    ("mxfp8_e4m3 ocp", "mxfp8_e4m3", "trn3", "ocp"),
    ("mxfp8_e4m3 trainium", "mxfp8_e4m3", "trn3", "trainium"),
    ("mxfp8_e5m2 ocp", "mxfp8_e5m2", "trn3", "ocp"),
    ("mxfp8_e5m2 trainium", "mxfp8_e5m2", "trn3", "trainium"),
    ("mxfp4 ocp", "mxfp4", "trn3", "ocp"),
    ("mxfp4 trainium", "mxfp4", "trn3", "trainium"),
]
DATA: dict[str, Callable[[np.random.Generator, tuple[int, int]], np.ndarray]] = {
    "normal": lambda rng, shape: rng.standard_normal(shape),
    "heavy": lambda rng, shape: rng.standard_t(3, shape),
}


def product_error(a: np.ndarray, b: np.ndarray, ref: np.ndarray, dtype: str, arch: str,
                  rule: str) -> float | None:
    """The product's relative error, or None where the operands do not fit the format
    (dtypes refuses values beyond its range: docs/NUMERICS.md "Out-of-range values")."""
    try:
        out = systolic.matmul(a, b, dtype=dtype, arch=arch, mx_rule=rule).out
    except systolic.FormatError:
        return None
    return rel_error(out, ref)


def rel_error(out: np.ndarray, ref: np.ndarray) -> float:
    """Frobenius-norm relative error; inf if the result holds inf or NaN."""
    if not np.all(np.isfinite(out)):
        return float("inf")
    return float(np.linalg.norm(out.astype(np.float64) - ref) / np.linalg.norm(ref))


def measure(m: int, n: int, trials: int, seed: int) -> list[dict[str, object]]:
    rows = []
    for data, draw in DATA.items():
        # the same operands for every format: trial t, K k
        operands = {}
        for k in KS:
            for t in range(trials):
                rng = np.random.default_rng([seed, k, t, len(data)])
                a = draw(rng, (m, k)).astype(np.float32)
                b = draw(rng, (k, n)).astype(np.float32)
                operands[k, t] = (a, b, a.astype(np.float64) @ b.astype(np.float64))
        for label, dtype, arch, rule in FORMATS:
            row: dict[str, object] = {"format": label, "data": data, "arch": arch}
            for k in KS:
                got = [product_error(a, b, ref, dtype, arch, rule)
                       for a, b, ref in (operands[k, t] for t in range(trials))]
                errs = [e for e in got if e is not None]
                # a refused trial has no error to rank: the cell says so (None)
                row[f"median_k{k}"] = float(np.median(errs)) if 2 * len(errs) > trials else None
                row[f"max_k{k}"] = float(np.max(errs)) if len(errs) == trials else None
            rows.append(row)
    return rows


def _cell(value: object) -> str:
    return "refused" if value is None else f"{value:.2e}"


def markdown(rows: list[dict[str, object]]) -> str:
    head = "| format | arch | data | " + " | ".join(
        f"K={k} median | K={k} max" for k in KS) + " |"
    sep = "| --- | --- | --- | " + " | ".join("---: | ---:" for _ in KS) + " |"
    lines = [head, sep]
    for r in rows:
        cells = []
        for k in KS:
            cells += [_cell(r[f"median_k{k}"]), _cell(r[f"max_k{k}"])]
        lines.append(f"| {r['format']} | {r['arch']} | {r['data']} | " + " | ".join(cells)
                     + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=int, default=128, help="rows of a (128)")
    ap.add_argument("--n", type=int, default=128, help="columns of b (128)")
    ap.add_argument("--trials", type=int, default=5, help="products per cell (5)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    args = ap.parse_args()
    t0 = time.perf_counter()
    rows = measure(args.m, args.n, args.trials, args.seed)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"M={args.m}, N={args.n}, {args.trials} trials per cell, seed {args.seed}; "
          f"Frobenius relative error against float64 ({time.perf_counter() - t0:.1f} s)\n")
    print(markdown(rows))


if __name__ == "__main__":
    main()
