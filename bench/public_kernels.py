"""Run the vendor's own NKI tests (each kernel with its own reference) on the model.

    python bench/public_kernels.py /tmp/pub/nki/test [more test folders or files]

The path is a scratch checkout of the public repositories (aws-neuron-sdk ``nki/test``);
their code never enters this repository. Every ``test_*.py`` runs under
``pytest -p systolic.nki.pytest_plugin``; each test is counted as **pass**, **refused** (the
model's one-line KernelError / SystolicError naming an unsupported feature) or **crash**
(any other failure: a wrong value, or a Python error), and the counts are printed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

_SRC = str(Path(__file__).resolve().parent.parent / "src")
_LINE = re.compile(r"^(PASSED|FAILED|ERROR) (\S+)(?: - (.*))?$")
_REFUSED = ("KernelError", "SystolicError")


def run(paths: list[str]) -> dict[str, list[str]]:
    files = sorted(str(f.resolve()) for p in paths for f in (
        Path(p).glob("test_*.py") if Path(p).is_dir() else [Path(p)]))
    env = dict(os.environ, PYTHONPATH=_SRC, COLUMNS="2000")  # whole reasons in the summary
    out: dict[str, list[str]] = {"pass": [], "refused": [], "crash": []}
    for f in files:
        res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider",
                              "-p", "systolic.nki.pytest_plugin", f], capture_output=True,
                             text=True, cwd=os.path.dirname(f), env=env, timeout=900)
        seen = False
        for line in res.stdout.splitlines():
            m = _LINE.match(line)
            if not m:
                continue
            seen = True
            what, name, why = m.group(1), m.group(2), m.group(3) or ""
            kind = ("pass" if what == "PASSED" else
                    "refused" if any(r in why for r in _REFUSED) else "crash")
            out[kind].append(f"{os.path.basename(f)}::{name.split('::')[-1]}  {why[:150]}")
        if not seen:
            out["crash"].append(f"{os.path.basename(f)}  (no test result: rc {res.returncode})")
    return out


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python bench/public_kernels.py PATH_TO/nki/test [...]")
    res = run(sys.argv[1:])
    for kind in ("refused", "crash"):
        for line in res[kind]:
            print(f"{kind:8} {line}")
    total = sum(len(v) for v in res.values())
    print(f"{total} tests: {len(res['pass'])} pass, {len(res['refused'])} refused, "
          f"{len(res['crash'])} crash")


if __name__ == "__main__":
    main()
