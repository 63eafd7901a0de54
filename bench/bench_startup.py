"""Start-up: `import systolic` and `systolic --help` against `import numpy`, each in fresh
processes (median of N), with the ml_dtypes version in use (issue 20: ml_dtypes 0.7.0's
extension init dominated every command).

    python bench/bench_startup.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CASES = {
    "import numpy": [sys.executable, "-c", "import numpy"],
    "import ml_dtypes": [sys.executable, "-c", "import ml_dtypes"],
    "import systolic": [sys.executable, "-c", "import systolic"],
    # what a matmul needs: the compiler, executors, timing and views (all lazy since issue 20)
    "from systolic import matmul": [sys.executable, "-c", "from systolic import matmul"],
    "systolic --help": [sys.executable, "-m", "systolic", "--help"],
}


def wall(cmd: list[str], runs: int, env: dict[str, str]) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args(argv)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    import ml_dtypes

    print(f"ml_dtypes {ml_dtypes.__version__}, median of {args.runs} fresh processes")
    got = {name: wall(cmd, args.runs, env) for name, cmd in CASES.items()}
    base = got["import numpy"]
    for name, t in got.items():
        print(f"{name:<27} {t:6.3f} s  {t / base:5.2f}x import numpy")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
