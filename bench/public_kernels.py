"""Run the vendor's own NKI tests and example kernels (each with its own reference) on the
model.

    python bench/public_kernels.py /tmp/pub/nki/test [more test folders or files]
    python bench/public_kernels.py --examples /tmp/pub/sdk/nki/examples [more folders]

The paths are scratch checkouts of the public repositories (aws-neuron-sdk ``nki/test``,
``nki/examples``; nki-samples); their code never enters this repository. Every ``test_*.py``
runs under ``pytest -p systolic.nki.pytest_plugin``; each test is counted as **pass**,
**refused** (the model's one-line KernelError / SystolicError naming an unsupported feature)
or **crash** (any other failure: a wrong value, or a Python error).

``--examples``: every ``.py`` file with a ``__main__`` block runs as a script after
``systolic.nki.install()`` (its own inputs, its own comparison with its own reference),
counted as **match** (exit 0 and no line saying the results differ), **wrong** (its
comparison failed), **refused**, **crash**, or **not run** (it imports torch or jax and
this Python lacks it: ``pip install '.[frameworks]'``; the model takes their tensors,
docs/nki.md "PyTorch and JAX"). A folder named ``src`` above a file goes on
``PYTHONPATH`` (nki-samples' package layout).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

_SRC = str(Path(__file__).resolve().parent.parent / "src")
_LINE = re.compile(r"^(PASSED|FAILED|ERROR) (\S+)(?: - (.*))?$")
_REFUSED = ("KernelError", "SystolicError", "NotModelled", "ArtifactError")


def run(paths: list[str]) -> dict[str, list[str]]:
    files = sorted(str(f.resolve()) for p in paths for f in (
        Path(p).glob("test_*.py") if Path(p).is_dir() else [Path(p)]))
    out: dict[str, list[str]] = {"pass": [], "refused": [], "crash": []}
    for f in files:
        env = dict(os.environ, COLUMNS="2000",  # whole reasons in the summary
                   PYTHONPATH=os.pathsep.join([_SRC, *_src_dirs(Path(f))]))
        res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider",
                              "-p", "systolic.nki.pytest_plugin", f], capture_output=True,
                             text=True, cwd=os.path.dirname(f), env=env,
                             timeout=3600)  # flash attention backward: > 15 min here
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
        if not seen and res.returncode == 5:  # pytest: no tests collected (a file of kernels)
            continue
        if not seen:
            out["crash"].append(f"{os.path.basename(f)}  (no test result: rc {res.returncode})")
    return out


_MAIN = re.compile(r"""^if __name__ == ['"]__main__['"]""", re.M)
_DIFFER = re.compile(r"\bdiffer\b|mismatch|do not match|not match", re.I)
_FRAMEWORK = re.compile(r"No module named '(torch|jax|torch_xla|torch_neuronx|jaxlib)")
_SCRIPT = ("import runpy, sys; import systolic.nki as s; s.install(); "
           "sys.argv = [sys.argv[1]]; runpy.run_path(sys.argv[0], run_name='__main__')")


def _src_dirs(f: Path) -> list[str]:
    """Package roots of a scratch checkout: a folder named ``src`` above ``f`` or beside one
    of its parents (nki-samples' ``test/unit`` import ``nki_samples`` from ``src``)."""
    return [str(p) for p in f.parents if p.name == "src"] + [
        str(p / "src") for p in f.parents if (p / "src" / "nki_samples").is_dir()]


def run_examples(paths: list[str], timeout: int = 600) -> dict[str, list[str]]:
    files = sorted({f.resolve() for p in paths for f in (
        Path(p).rglob("*.py") if Path(p).is_dir() else [Path(p)])
        if _MAIN.search(f.read_text(errors="replace"))})
    out: dict[str, list[str]] = {k: [] for k in ("match", "wrong", "refused", "crash",
                                                 "not run")}
    for f in files:
        env = dict(os.environ, COLUMNS="2000",
                   PYTHONPATH=os.pathsep.join([_SRC, *_src_dirs(f)]))
        try:
            res = subprocess.run([sys.executable, "-c", _SCRIPT, str(f)], capture_output=True,
                                 text=True, cwd=f.parent, env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            out["crash"].append(f"{f}  (over {timeout} s)")
            continue
        last = (res.stderr.strip().splitlines() or [""])[-1]
        fw = _FRAMEWORK.search(res.stderr)
        kind = ("not run" if fw else
                "match" if res.returncode == 0 and not _DIFFER.search(res.stdout) else
                "wrong" if res.returncode == 0 or last.startswith("AssertionError") else
                "refused" if any(r in last for r in _REFUSED) else "crash")
        why = f"needs {fw.group(1)}" if fw else last
        out[kind].append(f"{f}  {why[:200]}")
    return out


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python bench/public_kernels.py [--examples] PATH [...]")
    if sys.argv[1] == "--examples":
        ex = run_examples(sys.argv[2:])
        for kind in ("wrong", "refused", "crash", "not run"):
            for line in ex[kind]:
                print(f"{kind:8} {line}")
        n = sum(len(v) for v in ex.values())
        print(f"{n} example files: {len(ex['match'])} match, {len(ex['wrong'])} wrong, "
              f"{len(ex['refused'])} refused, {len(ex['crash'])} crash, "
              f"{len(ex['not run'])} not run (torch/jax)")
        return
    res = run(sys.argv[1:])
    for kind in ("refused", "crash"):
        for line in res[kind]:
            print(f"{kind:8} {line}")
    total = sum(len(v) for v in res.values())
    print(f"{total} tests: {len(res['pass'])} pass, {len(res['refused'])} refused, "
          f"{len(res['crash'])} crash")


if __name__ == "__main__":
    main()
