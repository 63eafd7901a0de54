"""systolic's NKI front end: run NKI kernel files unmodified on the model.

    import systolic.nki
    systolic.nki.install("trn2")        # `import nki` / `neuronxcc.nki` now resolve here
    import nki, nki.isa as nisa, nki.language as nl
    out = nki.simulate(my_kernel)(a, b)  # bit-accurate values (numpy arrays)
    rec = systolic.nki.record_kernel("k.py", "my_kernel", ["bf16[128,512]", ...])
    rec.program                          # ONE Program of systolic.isa instructions

As imported by a kernel (``import nki``), this module is NKI's top level: ``jit``,
``simulate``, ``simulate_kernel``, ``benchmark``, and the ``isa`` / ``language`` /
``typing`` submodules. See docs/nki.md for what is supported.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import SystolicError
from . import isa, language, typing
from .build import Recorded
from .hook import install, uninstall
from .run import Kernel, execute, load_kernel, parse_arg, record, record_kernel, values

__all__ = ["Kernel", "Recorded", "benchmark", "execute", "install", "isa", "jit", "language",
           "load_kernel", "parse_arg", "record", "record_kernel", "simulate",
           "simulate_kernel", "typing", "uninstall", "values"]


def jit(func: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``@nki.jit`` or ``@nki.jit(platform_target="trn3", ...)``."""
    if func is None:
        return lambda f: Kernel(f, **options)
    return Kernel(func, **options)


def simulate(kernel: Any, **options: Any) -> Callable[..., Any]:
    """``nki.simulate(kernel)(*arrays)``: the kernel's outputs as numpy arrays."""

    def run(*args: Any, **kwargs: Any) -> Any:
        return values(kernel, args, kwargs, arch=options.get("arch"))

    return run


def simulate_kernel(kernel: Any, *args: Any, **kwargs: Any) -> Any:
    """``nki.simulate_kernel(kernel, *arrays, **kwargs)`` of the older API."""
    return values(kernel, args, kwargs)


class _Latency:
    def __init__(self, recorded: Recorded) -> None:
        self.recorded = recorded

    def get_latency_percentile(self, p: float) -> float:
        raise SystolicError("kernel timing comes with the whole-core timing model; the "
                            "recorded Program is benchmark_result.recorded.program")


class BenchmarkResult:
    """What ``nki.benchmark`` leaves on the kernel: the recording and (later) its timing."""

    def __init__(self, recorded: Recorded) -> None:
        self.recorded = recorded
        self.program = recorded.program
        self.nc_latency = _Latency(recorded)


class _Benchmarked:
    def __init__(self, kernel: Any, warmup: int, iters: int) -> None:
        self.kernel, self.warmup, self.iters = kernel, warmup, iters
        self.benchmark_result: BenchmarkResult | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self.benchmark_result = BenchmarkResult(record(self.kernel, args, kwargs))


def benchmark(kernel: Any = None, *, warmup: int = 5, iters: int = 10,
              **options: Any) -> Any:
    """``nki.benchmark(warmup=, iters=)(kernel)``: records the Program (arguments may be
    arrays or ``nt.tensor[[shape], dtype]``); ``.benchmark_result.program`` holds it."""
    if kernel is None:
        return lambda k: _Benchmarked(k, warmup, iters)
    return _Benchmarked(kernel, warmup, iters)
