"""What one sweep point runs, and the flat dict of figures it returns.

A point is a dict of inputs (``arch``, Arch field overrides, ``dtype``, ``m`` ...); a target
says what to run with them:

* :class:`WorkloadTarget`: the ops of a workload file (``systolic run``), each lowered with
  :func:`systolic.compiler.lower` and timed with :func:`systolic.report.build_report`, the
  totals counting each op ``repeat`` times (``workload_json``'s definitions). A single
  matmul is a one-op workload (:func:`matmul_target`).
* :class:`KernelTarget`: an NKI kernel ``FILE.py:FUNCTION`` with argument shapes, through
  :func:`kernel_figures`, the one seam where the NKI front end (issue 10) and the
  whole-core timing (issue 11) plug in.

:func:`evaluate_point` raises on a point that cannot run; :func:`evaluate_chunk` (what a
worker runs) turns that into a failed result with the error's text, so the sweep goes on.
Figures are plain ints, floats and strings, one level deep, so that the store keeps one
column per figure and a new timing model only adds keys.
"""

from __future__ import annotations

import hashlib
import importlib
import time
import traceback
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from ..api import make_spec
from ..arch import Arch, get_arch
from ..compiler import MatmulSpec, lower
from ..errors import SweepError, SystolicError
from ..report import CAUSES, Report, build_report
from ..workload import Op, Workload, intensity
from .overrides import apply_overrides, overridable_fields

__all__ = ["CORE_FIGURES", "MAXIMIZE", "TENSOR_FIGURES", "KernelTarget", "Target",
           "WorkloadTarget", "evaluate_chunk", "evaluate_point", "kernel_figures",
           "matmul_target", "point_arch"]

# Figures of a workload/matmul point today (Tensor Engine timing plus a roofline estimate).
TENSOR_FIGURES = ("latency_us", "cycles", "seconds", "tflops", "peak_tflops", "utilization",
                  "flops", "useful_macs", "instructions", "intensity", "ideal_hbm_bytes",
                  "hbm_us", "roofline_us", "roofline_bound",
                  *(f"pct_{c}" for c in CAUSES))
# Keys the whole-core timing adds (issue 11 "JSON keys for scripts"), accepted as objectives
# and constraints of kernel sweeps before that timing lands.
CORE_FIGURES = ("latency_us", "tflops", "peak_tflops", "hfu", "bound", "dma_bytes", "dma_gbps")
# Figures where more is better; every other figure is minimised by default.
MAXIMIZE = frozenset({"tflops", "utilization", "hfu", "dma_gbps", "peak_tflops"})


def _digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:16]


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
    and ``dim.X`` inputs."""

    path: str
    function: str
    args: tuple[tuple[str, str, tuple[str | int, ...]], ...]
    digest: str
    kind: str = "kernel"

    def fingerprint(self) -> dict[str, Any]:
        return {"kind": self.kind, "file": self.digest, "function": self.function,
                "args": [[n, d, list(s)] for n, d, s in self.args]}

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


# -- workload and matmul points ----------------------------------------------------------------

@lru_cache(maxsize=32)
def _timed(spec: MatmulSpec, arch: Arch) -> tuple[Report, int]:
    """Lower (verified) and time one product; cached per process, as points of an
    architect's sweep often share a product (an HBM bandwidth axis does not change it)."""
    program = lower(spec, arch).program
    return build_report(program, arch, spec), len(program)


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


def workload_figures(target: WorkloadTarget, inputs: dict[str, Any]) -> dict[str, Any]:
    """Totals over the ops (each ``repeat`` times, with ``workload_json``'s definitions),
    plus a roofline estimate: every op's ideal HBM traffic (operands and fp32 result moved
    once, ``workload.intensity``) at the arch's ``hbm_bytes_per_s``, and ``roofline_us`` =
    the sum of max(compute, memory) per op. The Tensor Engine timing does not see HBM, so
    this is what an HBM axis changes until the whole-core timing (issue 11) times the DMA."""
    cycles = count = macs = flops = 0
    seconds = capacity = hbm_bytes = hbm_s = roof_s = at_peak_s = 0.0
    causes = dict.fromkeys(CAUSES, 0.0)
    for op in _ops(target, inputs):
        rep, n_ins = _timed(op.spec, op.arch)
        r = op.repeat
        cycles += rep.cycles * r
        seconds += rep.seconds * r
        count += n_ins * r
        macs += rep.useful_macs * r
        flops += op.flops * r
        capacity += rep.cycles * op.arch.pes * rep.pack * r
        for k, v in rep.exact_breakdown().items():  # once per op: Fractions are slow
            causes[k] += float(v) * r
        moved = op.flops / intensity(op.spec)
        mem_s = moved / op.arch.hbm_bytes_per_s
        hbm_bytes += moved * r
        hbm_s += mem_s * r
        roof_s += max(rep.seconds, mem_s) * r
        at_peak_s += op.flops / (rep.peak_tflops * 1e12) * r
    out: dict[str, Any] = {
        "latency_us": seconds * 1e6, "cycles": cycles, "seconds": seconds,
        "tflops": flops / seconds / 1e12 if seconds else 0.0,
        "peak_tflops": flops / at_peak_s / 1e12 if at_peak_s else 0.0,
        "utilization": macs / capacity if capacity else 0.0, "flops": flops,
        "useful_macs": macs, "instructions": count,
        "intensity": flops / hbm_bytes if hbm_bytes else 0.0,
        "ideal_hbm_bytes": hbm_bytes, "hbm_us": hbm_s * 1e6, "roofline_us": roof_s * 1e6,
        "roofline_bound": "memory" if hbm_s > seconds else "compute",
    }
    for k, total in causes.items():
        out[f"pct_{k}"] = 100.0 * total / cycles if cycles else 0.0
    return out


# -- kernel points: the seam for issues 10 and 11 ------------------------------------------------

def kernel_figures(target: KernelTarget, inputs: dict[str, Any]) -> dict[str, Any]:
    """Record the kernel with the NKI front end and time its Program.

    Phase 2 (the lead wires it): ``systolic.nki.record_kernel`` records the kernel for the
    point's arch, argument shapes and ``param.*`` keyword arguments; the whole-core timing
    then adds its keys (CORE_FIGURES). Until the front end exists every kernel point fails
    with the sentence below and is stored as a failed point."""
    try:
        nki = importlib.import_module("systolic.nki")
    except ImportError:
        raise SweepError("kernel sweeps need systolic.nki, the NKI front end (issue 10), "
                         "which this build does not have; sweep a workload or a matmul "
                         "instead") from None
    arch = point_arch(inputs)
    params = {k.removeprefix("param."): v for k, v in inputs.items() if k.startswith("param.")}
    recorded = nki.record_kernel(target.path, target.function, target.shapes(inputs),
                                 params=params, arch=arch)
    report = build_report(recorded.program, arch)
    d = report.to_dict()
    out = {"latency_us": report.seconds * 1e6, "cycles": report.cycles,
           **{k: d[k] for k in ("seconds", "tflops", "peak_tflops", "utilization")},
           "instructions": len(recorded.program)}
    for cause, pct in report.percent().items():
        out[f"pct_{cause}"] = pct
    return out


def evaluate_point(target: Target, inputs: dict[str, Any]) -> dict[str, Any]:
    """The figures of one point; a SystolicError for a point that cannot run."""
    if isinstance(target, KernelTarget):
        return kernel_figures(target, inputs)
    return workload_figures(target, inputs)


def evaluate_chunk(target: Target, chunk: list[tuple[str, dict[str, Any]]]
                   ) -> list[dict[str, Any]]:
    """Run points ``[(key, inputs)]``; each result is ``{key, status, error, elapsed_s,
    figures}``. A point that raises is a failed result; the others still run."""
    out = []
    for key, inputs in chunk:
        t0 = time.perf_counter()
        try:
            figures, status, error = evaluate_point(target, inputs), "ok", None
        except SystolicError as exc:
            figures, status, error = {}, "failed", str(exc)
        except Exception as exc:  # a bug must not stop the sweep: record where it happened
            where = traceback.extract_tb(exc.__traceback__)[-1]
            figures, status = {}, "failed"
            error = (f"{type(exc).__name__}: {exc} (at {where.filename}:{where.lineno}; "
                     f"please report this)")
        out.append({"key": key, "status": status, "error": error,
                    "elapsed_s": time.perf_counter() - t0, "figures": figures})
    return out
