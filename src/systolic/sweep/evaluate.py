"""What one sweep point runs, and the flat dict of figures it returns.

A point is a dict of inputs (``arch``, Arch field overrides, ``dtype``, ``m`` ...); a target
says what to run with them:

* :class:`WorkloadTarget`: the ops of a workload file (``systolic run``), each timed with
  :func:`systolic.workload.time_op` (the whole NeuronCore and the Tensor Engine alone), the
  totals those of :func:`systolic.workload.workload_totals` (each op ``repeat`` times). A
  single matmul is a one-op workload (:func:`matmul_target`).
* :class:`KernelTarget`: an NKI kernel ``FILE.py:FUNCTION`` with argument shapes, recorded
  with :func:`systolic.nki.run.record` (the file loaded once per process) and timed with
  :func:`systolic.nki.timing.time_recorded` (:func:`kernel_figures`).

:func:`evaluate_point` raises on a point that cannot run; :func:`evaluate_chunk` (what a
worker runs) turns that into a failed result with the error's text, so the sweep goes on.
Figures (:mod:`.figures` names them) are plain ints, floats and strings, one level deep,
so that the store keeps one column per figure.
"""

from __future__ import annotations

import ast
import contextvars
import hashlib
import os
import sys
import time
import traceback
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from ..api import make_spec
from ..arch import Arch, get_arch
from ..compiler import MatmulSpec
from ..errors import SweepError, SystolicError
from ..nki.record import DEFAULT_MAX_OPS, DEFAULT_TIME_LIMIT_S
from ..nki.run import load_kernel, record, unwritten
from ..nki.timing import intensity as kernel_intensity
from ..nki.timing import time_recorded
from ..nki.types import TensorSpec, to_dtype
from ..timing.core import time_program
from ..views.report import Report
from ..workload import Op, OpResult, Workload, intensity, time_op, workload_totals
from .figures import (
    CORE_FIGURES,
    KERNEL_FIGURES,
    MAXIMIZE,
    PE_FIGURES,
    dma_transfers,
    flat_core,
    on_chip_high_water,
)
from .overrides import apply_overrides, overridable_fields
from .watchdog import PointTimeout, time_limit, timeout_error

__all__ = [
    "CORE_FIGURES",
    "KERNEL_FIGURES",
    "MAXIMIZE",
    "PE_FIGURES",
    "KernelTarget",
    "PointTimeout",
    "Target",
    "WorkloadTarget",
    "evaluate_chunk",
    "evaluate_one",
    "evaluate_point",
    "kernel_digest",
    "kernel_figures",
    "matmul_target",
    "point_arch",
    "target_figures",
    "time_limit",
    "workload_figures",
]


def _digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


def _local_imports(path: str, root: str) -> set[str]:
    """The files under ``root`` that the module at ``path`` imports (``import a.b``,
    ``from a import b``, relative imports), as ``load_kernel`` puts the kernel's folder
    first on ``sys.path``; modules found elsewhere (installed ones) are not followed."""
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read(), path)
    except (OSError, SyntaxError, ValueError):
        return set()  # the point fails on it with its own error; its bytes are hashed
    here = os.path.dirname(path)
    found: set[str] = set()

    def add(base: str, dotted: str) -> None:
        parts = [p for p in dotted.split(".") if p]
        for i in range(1, len(parts) + 1):
            stem = os.path.join(base, *parts[:i])
            for cand in (stem + ".py", os.path.join(stem, "__init__.py")):
                if os.path.isfile(cand) and os.path.realpath(cand).startswith(root + os.sep):
                    found.add(os.path.realpath(cand))

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(root, alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here
                for _ in range(node.level - 1):
                    base = os.path.dirname(base)
            else:
                base = root
            mod = node.module or ""
            add(base, mod)
            for alias in node.names:  # from pkg import submodule
                add(base, f"{mod}.{alias.name}" if mod else alias.name)
    return found


def _kernel_files(path: str) -> tuple[str, str, set[str]]:
    """(the kernel's folder, the kernel file, it and every file it imports from its folder,
    followed recursively), all real paths."""
    root = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    first = os.path.realpath(path)
    seen: set[str] = set()
    todo = [first]
    while todo:
        f = todo.pop()
        if f in seen:
            continue
        seen.add(f)
        todo.extend(_local_imports(f, root) - seen)
    return root, first, seen


def kernel_digest(path: str) -> str:
    """SHA-256 (16 hex digits) of a kernel file and of every module it imports from its own
    folder, followed recursively (issue 21: an edited helper module must re-run the points
    as an edited kernel does). Each file is hashed with its path relative to the folder."""
    root, first, seen = _kernel_files(path)
    h = hashlib.sha256()
    for f in sorted(seen, key=lambda f: (f != first, f)):
        h.update(os.path.relpath(f, root).encode() + b"\0")
        with open(f, "rb") as fh:
            h.update(hashlib.sha256(fh.read()).digest())
    return h.hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class WorkloadTarget:
    """The ops of a workload; ``digest`` (of the file) goes into every point's key."""

    workload: Workload
    digest: str
    kind: str = "workload"

    def fingerprint(self) -> dict[str, Any]:
        return {"kind": self.kind, "file": self.digest}


def matmul_target() -> WorkloadTarget:
    """A single product: its shape, format and arch all come from the point's inputs."""
    return WorkloadTarget(Workload("<matmul>", "matmul", ()), "", kind="matmul")


@dataclass(frozen=True, slots=True)
class KernelTarget:
    """An NKI kernel ``path:function``; ``args`` are (name, dtype token, dim tokens), where a
    dtype token ``dtype`` and a dim token naming ``X`` are taken from the point's ``dtype``
    and ``dim.X`` inputs. ``max_ops``: the recording budget of each point (the sweep file's
    ``run: {max_ops: N}``; nki/record.py's default)."""

    path: str
    function: str
    args: tuple[tuple[str, str, tuple[str | int, ...]], ...]
    digest: str
    kind: str = "kernel"
    max_ops: int = DEFAULT_MAX_OPS

    def fingerprint(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "file": self.digest,
                               "function": self.function,
                               "args": [[n, d, list(s)] for n, d, s in self.args]}
        if self.max_ops != DEFAULT_MAX_OPS:  # the keys of a sweep without one stay as they were
            out["max_ops"] = self.max_ops
        return out

    def shapes(self, inputs: dict[str, Any]) -> dict[str, tuple[str, tuple[int, ...]]]:
        """``{arg: (dtype, shape)}`` for one point."""
        out = {}
        for name, dtype, dims in self.args:
            fmt = str(inputs["dtype"]) if dtype == "dtype" else dtype
            out[name] = (fmt, tuple(d if isinstance(d, int) else int(inputs[f"dim.{d}"])
                                    for d in dims))
        return out


Target = WorkloadTarget | KernelTarget


def point_arch(inputs: dict[str, Any], default: Arch | str = "trn2") -> Arch:
    """The point's arch: its ``arch`` preset (else ``default``) with its field overrides."""
    base = get_arch(inputs.get("arch", default))
    fields = overridable_fields()
    return apply_overrides(base, {k: v for k, v in inputs.items() if k in fields})


def target_figures(kind: str) -> tuple[str, ...]:
    """The figures a target of ``kind`` reports (objectives and constraints name these)."""
    own = KERNEL_FIGURES if kind == "kernel" else PE_FIGURES
    return tuple(dict.fromkeys((*CORE_FIGURES, *own)))


# -- workload and matmul points ----------------------------------------------------------------

@lru_cache(maxsize=8)
def _timed(spec: MatmulSpec, arch: Arch) -> Report:
    """Time one product; cached per process, as the ops of a workload (a MLP's gate and up)
    and consecutive points of a sweep over the ops' own inputs share products. Small: a
    Report lowered whole keeps its Program (one object per instruction). Its whole core is
    timed without the what-if plans (``what_if=False``): no figure reads them, and the
    schedule is the same op for op."""
    report = time_op(spec, arch)[0]
    if report.core_timing is None and report.program is not None:
        core = time_program(report.program, report.arch, fmt=report.fmt,
                            perf_mode=report.perf_mode, what_if=False)
        report = replace(report, core_timing=core)
    return report


def _ops(target: WorkloadTarget, inputs: dict[str, Any]) -> list[Op]:
    if target.kind == "matmul":
        arch = point_arch(inputs)
        spec = make_spec(int(inputs["m"]), int(inputs["k"]), int(inputs["n"]),
                         str(inputs.get("dtype", "bf16")), arch,
                         str(inputs.get("perf_mode", "none")))
        return [Op("matmul", spec, arch, 1, 0)]
    ops = []
    for op in target.workload.ops:
        arch = point_arch(inputs, op.arch)
        dtype = str(inputs.get("dtype", op.spec.dtype))
        mode = str(inputs.get("perf_mode", op.spec.perf_mode.spelling))
        spec = make_spec(op.spec.m, op.spec.k, op.spec.n, dtype, arch, mode)
        ops.append(replace(op, spec=spec, arch=arch))
    return ops


# Opcodes that are (or end in) one DMA transfer each: a ReadOut is the PSUM evacuation then
# a DMA store of its bytes (timing/core.py).
_DMA_OPCODES = ("DmaLoad", "DmaCopy", "DmaIndirect", "ReadOut")


def workload_figures(target: WorkloadTarget, inputs: dict[str, Any]) -> dict[str, Any]:
    """The totals of :func:`systolic.workload.workload_totals` as flat figures (the whole
    core's, then the Tensor Engine's as ``cycles``, ``pe_us``, ``pe_tflops``, ``utilization``,
    ``pe_pct_CAUSE``), plus an ideal roofline: each op's operands and fp32 result moved once
    (``workload.intensity``) at the arch's ``hbm_bytes_per_s``, and ``roofline_us`` = the sum
    of max(Tensor Engine time, that memory time) per op: what the whole-core ``latency_us``
    would be with perfect reuse and perfect overlap."""
    results = [OpResult(op, _timed(op.spec, op.arch)) for op in _ops(target, inputs)]
    t = workload_totals(results, views=False)
    out = flat_core(t, sum(sum(r.report.counts.get(op, 0) for op in _DMA_OPCODES)
                           * r.op.repeat for r in results))
    out.update({"intensity": t["intensity"], "flops": t["flops"],
                "useful_macs": sum(r.report.useful_macs * r.op.repeat for r in results),
                "instructions": sum(sum(r.report.counts.values()) * r.op.repeat
                                    for r in results),
                "cycles": t["cycles"], "pe_us": t["pe_us"], "pe_tflops": t["pe_tflops"],
                "utilization": t["utilization"]})
    for cause, part in t["breakdown"].items():
        out[f"pe_pct_{cause}"] = part["percent"]
    hbm_bytes = hbm_s = roof_s = 0.0
    for r in results:
        moved = r.op.flops / intensity(r.op.spec)
        mem_s = moved / r.op.arch.hbm_bytes_per_s
        hbm_bytes += moved * r.op.repeat
        hbm_s += mem_s * r.op.repeat
        roof_s += max(r.report.seconds, mem_s) * r.op.repeat
    pe_s = t["pe_us"] * 1e-6
    out.update({"ideal_hbm_bytes": hbm_bytes,
                "ideal_intensity": t["flops"] / hbm_bytes if hbm_bytes else 0.0,
                "hbm_us": hbm_s * 1e6, "roofline_us": roof_s * 1e6,
                "roofline_bound": "memory" if hbm_s > pe_s else "compute"})
    return out


# -- kernel points -------------------------------------------------------------------------------

# Set while a point runs under the sweep's own time limit (evaluate_one): the recording then
# needs no timer thread of its own (nki.record's time_guard starts one per call, ~0.15 ms of
# a 1-2 ms kernel point).
_TIMED: contextvars.ContextVar[bool] = contextvars.ContextVar("_TIMED", default=False)


@lru_cache(maxsize=16)
def _kernel_function(path: str, function: str, digest: str) -> Any:
    """``path:function`` loaded once per process and per version of its files (``digest``:
    :func:`kernel_digest`, which the target's key carries): every point of a sweep records
    the same function, and loading the file (compile + exec) was ~0.5 ms of each point."""
    _forget_local_modules(path)
    return load_kernel(path, function)


def _forget_local_modules(path: str) -> None:
    """Drop from ``sys.modules`` the modules of the files the kernel imports from its folder
    (those :func:`kernel_digest` hashes), so that loading a new version of the kernel
    imports them again. The serial executor runs points in this process, where a helper
    module imported for one version stayed for the next (issue 22): its points re-ran, with
    the old helper's code. Dropped by file and by the name the folder gives the file."""
    root, first, files = _kernel_files(path)
    names = set()
    for f in files - {first}:
        rel = os.path.splitext(os.path.relpath(f, root))[0].split(os.sep)
        names.add(".".join(rel[:-1] if rel[-1] == "__init__" else rel))
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if name in names or (isinstance(file, str) and os.path.realpath(file) in files
                             and module is not sys.modules.get("__main__")):
            del sys.modules[name]


def kernel_figures(target: KernelTarget, inputs: dict[str, Any]) -> dict[str, Any]:
    """Record the kernel with the NKI front end for the point's arch, argument shapes and
    ``param.*`` keyword arguments, and time its Program on the whole NeuronCore.

    A point the kernel cannot run (an SBUF or PSUM overflow of a too-large block, an
    assertion, a shape the kernel refuses) raises the front end's one-line error. A
    Program that leaves part of an output unwritten (a block size that does not divide the
    shape, so a loop runs zero times) raises too: it is fast because it does less."""
    arch = point_arch(inputs)
    params = {k.removeprefix("param."): v for k, v in inputs.items() if k.startswith("param.")}
    args = [TensorSpec(shape, to_dtype(fmt)) for fmt, shape in target.shapes(inputs).values()]
    fn = _kernel_function(target.path, target.function, target.digest)
    try:
        recorded = record(fn, args, params, arch=arch, max_ops=target.max_ops,
                          time_limit_s=None if _TIMED.get() else DEFAULT_TIME_LIMIT_S)
    except TypeError as exc:  # a param.NAME the kernel does not take
        raise SweepError(f"{target.function}: {exc}") from None
    why = unwritten(recorded)
    if why:
        raise SweepError(f"the kernel {why}")
    timing = time_recorded(recorded)  # a launch on several NeuronCores: its longest core
    out = flat_core(timing.to_dict(), dma_transfers(timing))
    sbuf, psum = on_chip_high_water(recorded.program)
    out.update({"intensity": kernel_intensity(timing), "flops": 2 * timing.useful_macs,
                "useful_macs": timing.useful_macs,
                "instructions": len(recorded.program), "nki_ops": recorded.ops,
                "sbuf_bytes": sbuf, "psum_bytes": psum})
    return out
def evaluate_point(target: Target, inputs: dict[str, Any]) -> dict[str, Any]:
    """The figures of one point; a SystolicError for a point that cannot run."""
    if isinstance(target, KernelTarget):
        return kernel_figures(target, inputs)
    return workload_figures(target, inputs)


def _where(exc: BaseException, target: Target) -> str:
    """The last line of the kernel file (else of any file) the traceback reached."""
    frames = traceback.extract_tb(exc.__traceback__)
    path = os.path.realpath(target.path) if isinstance(target, KernelTarget) else None
    own = [f for f in frames if path is not None and os.path.realpath(f.filename) == path]
    picked = own or frames
    return f"{picked[-1].filename}:{picked[-1].lineno}" if picked else "its start"


def evaluate_chunk(target: Target, chunk: list[tuple[str, dict[str, Any]]],
                   timeout: float | None = None) -> list[dict[str, Any]]:
    """Run points ``[(key, inputs)]``, each stopped after ``timeout`` seconds; each result is
    ``{key, status, error, elapsed_s, figures}``. A point that raises or runs too long is a
    failed result; the others still run."""
    return [evaluate_one(target, key, inputs, timeout) for key, inputs in chunk]


def evaluate_one(target: Target, key: str, inputs: dict[str, Any],
                 timeout: float | None = None) -> dict[str, Any]:
    """One point of :func:`evaluate_chunk`."""
    t0 = time.perf_counter()
    timed = _TIMED.set(bool(timeout))
    try:
        with time_limit(timeout):
            figures = evaluate_point(target, inputs)
        status, error = "ok", None
    except PointTimeout as exc:
        figures, status = {}, "failed"
        error = timeout_error(timeout or 0.0, _where(exc, target))
    except SystolicError as exc:
        figures, status, error = {}, "failed", str(exc)
    except (OverflowError, ZeroDivisionError) as exc:
        # an Arch override far outside every preset (hbm_bytes_per_s 1e-300) makes a time
        # too large for the timing model's integer ticks: the inputs', not the code's, fault
        overrides = {k: v for k, v in inputs.items() if k in overridable_fields()}
        figures, status = {}, "failed"
        error = (f"the timing model's numbers overflow at this point ({type(exc).__name__}: "
                 f"{exc}); Arch overrides {overrides or 'none'} are far from every preset")
    except Exception as exc:  # a bug must not stop the sweep: record where it happened
        where = traceback.extract_tb(exc.__traceback__)[-1]
        figures, status = {}, "failed"
        error = (f"{type(exc).__name__}: {exc} (at {where.filename}:{where.lineno}; "
                 f"please report this)")
    finally:
        _TIMED.reset(timed)
    if error is not None and "\n" in error:
        error = " ".join(error.split())
    return {"key": key, "status": status, "error": error,
            "elapsed_s": time.perf_counter() - t0, "figures": figures}
