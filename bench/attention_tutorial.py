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
Each call is counted as **pass**, **refused** (the model's one-line error), **xfail** (the
tutorial's own ``pytest.xfail``) or **crash**.
"""

from __future__ import annotations

import contextlib
import io
import sys
import tempfile
import time
import traceback
from pathlib import Path

_SRC = str(Path(__file__).resolve().parent.parent / "src")
if _SRC not in sys.path:
    sys.path.insert(0, _SRC)

MODES = ("accuracy", "benchmark", "profile")


def main(folder: str) -> int:
    import pytest

    import systolic.nki as snki
    from systolic.errors import SystolicError

    snki.install("trn2")
    sys.path.insert(0, folder)
    with contextlib.redirect_stdout(io.StringIO()):  # its import runs v1 once, printing
        import test_attention  # type: ignore[import-not-found]
    test_attention.pytest = pytest  # the file calls pytest.xfail without importing pytest
    # the tutorial's profiles go to its author's home directory; here a fresh one
    test_attention.WORKING_DIRECTORY = tempfile.mkdtemp(prefix="attention-profiles-")
    versions = sorted((getattr(test_attention, n) for n in dir(test_attention)
                       if n.startswith("attn_fwd_v")),
                      key=lambda k: (len(k.__name__), k.__name__))
    counts: dict[str, int] = {}
    for version in versions:
        for mode in MODES:
            name = getattr(version, "__name__", str(version))
            t0 = time.perf_counter()
            out = io.StringIO()
            try:
                with contextlib.redirect_stdout(out):
                    test_attention.test_attn_tutorial(mode, version)
                kind, why = "pass", out.getvalue().strip().replace(f"{name} : ", "latency ")
            except pytest.xfail.Exception as exc:
                kind, why = "xfail", str(exc)
            except SystolicError as exc:
                kind, why = "refused", str(exc).splitlines()[0]
            except Exception as exc:  # any other: a crash, named in its row
                kind = "crash"
                why = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            counts[kind] = counts.get(kind, 0) + 1
            print(f"{kind:8} {name:13} {mode:9} {time.perf_counter() - t0:6.1f} s  {why[:160]}",
                  flush=True)
    total = sum(counts.values())
    print(f"{total} calls: " + ", ".join(f"{counts.get(k, 0)} {k}"
                                         for k in ("pass", "refused", "xfail", "crash")))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__.split("\n\n")[1])
    raise SystemExit(main(sys.argv[1]))
