"""The attention tutorial's 12 kernel versions, each through the tutorial's own test function.

    python bench/attention_tutorial.py SAMPLES/src/nki_samples/tutorials/attention_fwd_performance

nki-samples' attention tutorial (``attention_kernels.py``: ``attn_fwd_v1`` .. ``v11`` and
``v8a``) ships ``test_attention.py`` whose ``test_attn_tutorial(mode, version)`` takes no
pytest fixtures, so pytest gives it no result (bench/public_kernels.py counts that file as
giving none); the tutorial calls it by hand. This script does what the tutorial does, from
a scratch checkout (the tutorial's code stays out of this repository): after
``systolic.nki.install()`` it imports the tutorial's test module and calls its function for
every version in its three modes: ``accuracy`` (fp32 q, k, v at the tutorial's sizes, the
kernel's values against its own numpy reference at its own ``atol=1e-2``), ``benchmark``
(bf16, recorded and timed on the modelled NeuronCore; the modelled latency is printed) and
``profile`` (``nki.profile``: the model's profile files, src/systolic/nki/profile_files.py,
in a fresh temporary directory standing for the tutorial's ``/home/ubuntu/attention/``).
Each call runs in its own process, as the tutorial runs one version per run of its test
file (``main``). Each call is counted as **pass**, **refused** (the model's one-line
error), **xfail** (the tutorial's own ``pytest.xfail``) or **crash**.
"""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

_SRC = str(Path(__file__).resolve().parent.parent / "src")
if _SRC not in sys.path:
    sys.path.insert(0, _SRC)

MODES = ("accuracy", "benchmark", "profile")


def _import(folder: str) -> object:
    import pytest

    import systolic.nki as snki

    snki.install("trn2")
    sys.path.insert(0, folder)
    with contextlib.redirect_stdout(io.StringIO()):  # its import runs v1 once, printing
        import test_attention  # type: ignore[import-not-found]
    test_attention.pytest = pytest  # the file calls pytest.xfail without importing pytest
    # the tutorial's profiles go to its author's home directory; here a fresh one
    test_attention.WORKING_DIRECTORY = tempfile.mkdtemp(prefix="attention-profiles-")
    return test_attention


def one(folder: str, name: str, mode: str) -> tuple[str, str]:
    """One call of the tutorial's test function, in this (fresh) process: its kind and
    why (the latency when it passes)."""
    import pytest

    from systolic.errors import SystolicError

    test_attention = _import(folder)
    version = getattr(test_attention, name)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            test_attention.test_attn_tutorial(mode, version)
        return "pass", out.getvalue().strip().replace(f"{name} : ", "latency ")
    except pytest.xfail.Exception as exc:
        return "xfail", str(exc)
    except SystolicError as exc:
        return "refused", str(exc).splitlines()[0]
    except Exception as exc:  # any other: a crash, named in its row
        return "crash", "".join(traceback.format_exception_only(type(exc), exc)).strip()


def main(folder: str) -> int:
    """Every call in its own process, as the tutorial runs it (test_attention.py calls one
    version at its end): the v9 / v10 kernels take their SBUF addresses from the module's
    ``SBufAllocator``, which counts on across calls in one process, and a direct
    allocation past the end of SBUF is a compile error in NKI too (nki_direct_allocation_
    guide: ``byte_addr`` below 192 KiB - 16 KiB on NeuronCore-v2), so calls sharing a
    process would refuse a kernel the tutorial runs."""
    with contextlib.redirect_stdout(io.StringIO()):
        test_attention = _import(folder)
    names = sorted((n for n in dir(test_attention) if n.startswith("attn_fwd_v")),
                   key=lambda n: (len(n), n))
    counts: dict[str, int] = {}
    for name in names:
        for mode in MODES:
            t0 = time.perf_counter()
            res = subprocess.run([sys.executable, __file__, folder, name, mode],
                                 capture_output=True, text=True)
            line = res.stdout.strip().splitlines()[-1:] or [""]
            kind, _, why = line[0].partition("\t")
            if res.returncode or kind not in ("pass", "xfail", "refused", "crash"):
                kind, why = "crash", (res.stderr.strip().splitlines() or ["no result"])[-1]
            counts[kind] = counts.get(kind, 0) + 1
            print(f"{kind:8} {name:13} {mode:9} {time.perf_counter() - t0:6.1f} s  {why[:160]}",
                  flush=True)
    total = sum(counts.values())
    print(f"{total} calls: " + ", ".join(f"{counts.get(k, 0)} {k}"
                                         for k in ("pass", "refused", "xfail", "crash")))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4:  # one call, in this process
        kind, why = one(*sys.argv[1:])
        print(f"{kind}\t{why}")
        raise SystemExit(0)
    if len(sys.argv) != 2:
        raise SystemExit(__doc__.split("\n\n")[1])
    raise SystemExit(main(sys.argv[1]))
