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

import os
from collections.abc import Callable
from typing import Any

from ..errors import SystolicError
from ..timing.core import CoreTiming
from . import compiler, isa, language, typing
from .build import Recorded
from .hook import install, uninstall
from .run import (
    Kernel,
    execute,
    load_kernel,
    parse_arg,
    record,
    record_kernel,
    values,
)
from .spmd import jit  # NKI's jit: a Kernel launchable on a grid, kernel[4, 2](...)
from .timing import time_recorded  # a recorded kernel's whole-core timing

# ``nki.trace`` of the older neuronxcc API decorates a kernel for tracing (then
# nki.simulate_kernel / baremetal run it): here, as every decorator, a recorded kernel
trace = jit

__all__ = [
    "BenchmarkResult",
    "Kernel",
    "LatencyResult",
    "Recorded",
    "baremetal",
    "benchmark",
    "compiler",
    "execute",
    "install",
    "isa",
    "jit",
    "language",
    "load_kernel",
    "parse_arg",
    "profile",
    "record",
    "record_kernel",
    "simulate",
    "simulate_kernel",
    "time_recorded",
    "trace",
    "typing",
    "uninstall",
    "values",
]


class _Simulated:
    """``nki.simulate(kernel)`` / ``nki.baremetal(kernel)``: called with arrays, the
    kernel's outputs; ``[grid]`` the SPMD launch of it (``baremetal(k)[2, 4](...)``), also
    usable as the kernel of ``nki.simulate_kernel``."""

    def __init__(self, kernel: Any, arch: Any) -> None:
        self.kernel, self.arch = kernel, arch
        # the kernel's names, as a decorated function keeps them (the attention tutorial
        # prints ``version.__name__`` of a baremetal kernel)
        for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
            if hasattr(kernel, attr):
                setattr(self, attr, getattr(kernel, attr))

    def __getitem__(self, grid: Any) -> _Simulated:
        return _Simulated(self.kernel[grid], self.arch)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from .record import _STACK

        if _STACK:  # called as a kernel inside a recording (simulate_kernel(sim, ...))
            return self.kernel(*args, **kwargs)
        return values(self.kernel, args, kwargs, arch=self.arch)


def simulate(kernel: Any, **options: Any) -> Callable[..., Any]:
    """``nki.simulate(kernel)(*arrays)``: the kernel's outputs as numpy arrays."""
    return _Simulated(kernel, options.get("arch"))


def simulate_kernel(kernel: Any, *args: Any, **kwargs: Any) -> Any:
    """``nki.simulate_kernel(kernel, *arrays, **kwargs)`` of the older API."""
    return values(kernel, args, kwargs)


def baremetal(kernel: Any = None, **options: Any) -> Any:
    """``nki.baremetal(kernel)(*arrays)`` / ``@nki.baremetal(...)``: on hardware, run the
    kernel on a NeuronCore and return its outputs; here the model's values, as
    :func:`simulate` (its options: save_neff_name, artifacts_dir ... change nothing)."""
    if kernel is None:
        return lambda k: simulate(k, **options)
    return simulate(kernel, **options)


def profile(kernel: Any = None, **options: Any) -> Any:
    """``nki.profile(working_directory=ABS, ...)(kernel)(*arrays)``: records and times the
    kernel and writes, in ``working_directory``, the model's analogues of a device profile
    (:mod:`systolic.nki.profile_files`: its Program as text at ``save_neff_name``, its Perfetto
    trace at each profiled execution's ``.ntff`` name, ``json_reports/``); returns None,
    as on hardware. The options are checked when the decorator is made."""
    from .profile_files import ProfileOptions

    opts = ProfileOptions(options)
    if kernel is None:
        return lambda k: _Profiled(k, opts)
    return _Profiled(kernel, opts)


class _Profiled:
    def __init__(self, kernel: Any, opts: Any) -> None:
        self.kernel, self.opts = kernel, opts
        for attr in ("__name__", "__qualname__", "__doc__", "__module__"):
            if hasattr(kernel, attr):
                setattr(self, attr, getattr(kernel, attr))

    def __getitem__(self, grid: Any) -> _Profiled:
        return _Profiled(self.kernel[grid], self.opts)

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        from .profile_files import write_profile

        rec = record(self.kernel, args, kwargs)
        write_profile(rec, self.opts, _kernel_name(self.kernel))


def _kernel_name(kernel: Any) -> str:
    return str(getattr(kernel, "__name__", None) or getattr(kernel, "name", None) or kernel)


class LatencyResult:
    """``benchmark_result.nc_latency``: NKI's latency percentiles, in microseconds.

    The model is deterministic, so every percentile (and every one of ``warmup + iters``
    runs) is the one modelled latency, :attr:`CoreTiming.latency_us
    <systolic.timing.core.CoreTiming.latency_us>` of ``time_program(program, arch)``."""

    def __init__(self, timing: CoreTiming) -> None:
        self.timing = timing

    def get_latency_percentile(self, p: float) -> float:
        """The ``p``-th percentile latency in microseconds (0 <= p <= 100)."""
        if not 0 <= float(p) <= 100:
            raise SystolicError(f"a latency percentile is between 0 and 100, not {p}")
        return self.timing.latency_us


class BenchmarkResult:
    """What ``nki.benchmark`` leaves on the kernel: the recording, its whole-core timing
    (``timing``: a :class:`~systolic.timing.core.CoreTiming`) and ``nc_latency``."""

    def __init__(self, recorded: Recorded, timing: CoreTiming, warmup: int,
                 iters: int) -> None:
        self.recorded = recorded
        self.program = recorded.program
        self.timing = timing
        self.warmup, self.iters = warmup, iters
        self.nc_latency = LatencyResult(timing)


class _Benchmarked:
    def __init__(self, kernel: Any, warmup: int, iters: int, arch: Any,
                 trace: str | None = None, neff: str | None = None) -> None:
        self.kernel, self.warmup, self.iters, self.arch = kernel, warmup, iters, arch
        self.trace, self.neff = trace, neff
        self.benchmark_result: BenchmarkResult | None = None

    def __getitem__(self, grid: Any) -> _Benchmarked:
        """``benchmark(...)(kernel)[grid](...)``: the SPMD launch, benchmarked."""
        return _Benchmarked(self.kernel[grid], self.warmup, self.iters, self.arch,
                            self.trace, self.neff)

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        from .profile_files import write_benchmark_files
        from .timing import longest_core, time_cores

        rec = record(self.kernel, args, kwargs, arch=self.arch)
        # a launch on several NeuronCores takes its longest core's time (nki/cores.py)
        core, program = longest_core(rec, time_cores(rec))
        write_benchmark_files(rec, core, program, self.neff, self.trace,
                              _kernel_name(self.kernel))
        self.benchmark_result = BenchmarkResult(rec, core, self.warmup, self.iters)


def benchmark(kernel: Any = None, *, warmup: int = 5, iters: int = 10,
              **options: Any) -> Any:
    """``nki.benchmark(warmup=, iters=)(kernel)(*args)``: records the kernel (arguments may
    be arrays or ``nt.tensor[[shape], dtype]``; no values are computed) and times it on
    the whole NeuronCore (:func:`systolic.timing.core.time_program`). Then
    ``.benchmark_result.nc_latency.get_latency_percentile(p)`` is the modelled latency in
    microseconds for every ``p``; ``.benchmark_result.timing`` the CoreTiming. ``arch=``
    overrides the kernel's ``platform_target`` and the installed default.
    ``save_neff_name=`` / ``save_trace_name=`` write, at those paths, the kernel's Program
    as text and its Perfetto trace (:mod:`systolic.nki.profile_files`: the model's analogues of
    a NEFF and an NTFF, whose formats are the Neuron tools' own)."""
    if warmup < 0 or iters < 1:
        raise SystolicError(f"nki.benchmark needs warmup >= 0 and iters >= 1, got "
                            f"warmup={warmup}, iters={iters}")
    arch = options.get("arch")
    trace, neff = (None if options.get(o) is None else os.fspath(options[o])
                   for o in ("save_trace_name", "save_neff_name"))
    if kernel is None:
        return lambda k: _Benchmarked(k, warmup, iters, arch, trace, neff)
    return _Benchmarked(kernel, warmup, iters, arch, trace, neff)
