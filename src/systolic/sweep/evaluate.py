"""What one sweep point runs, and the flat dict of figures it returns.

A point is a dict of inputs (``arch``, Arch field overrides, ``dtype``, ``m`` ...); a target
says what to run with them:

* :class:`WorkloadTarget`: the ops of a workload file (``systolic run``), each timed with
  :func:`systolic.workload.time_op` (the whole NeuronCore and the Tensor Engine alone), the
  totals those of :func:`systolic.workload.workload_totals` (each op ``repeat`` times). A
  single matmul is a one-op workload (:func:`matmul_target`).
* :class:`KernelTarget`: an NKI kernel ``FILE.py:FUNCTION`` with argument shapes, recorded
  with :func:`systolic.nki.record_kernel` and timed with
  :func:`systolic.timing.core.time_program` (:func:`kernel_figures`).

:func:`evaluate_point` raises on a point that cannot run; :func:`evaluate_chunk` (what a
worker runs) turns that into a failed result with the error's text, so the sweep goes on.
Figures (:mod:`.figures` names them) are plain ints, floats and strings, one level deep,
so that the store keeps one column per figure.
"""

from __future__ import annotations

import hashlib
import time
import traceback
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from ..api import make_spec
from ..arch import Arch, get_arch
from ..compiler import MatmulSpec
from ..errors import SweepError, SystolicError
from ..nki import record_kernel
from ..nki.run import unwritten
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

__all__ = ["CORE_FIGURES", "KERNEL_FIGURES", "MAXIMIZE", "PE_FIGURES", "KernelTarget",
           "Target", "WorkloadTarget", "evaluate_chunk", "evaluate_point", "kernel_figures",
           "matmul_target", "point_arch", "target_figures", "workload_figures"]


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


def target_figures(kind: str) -> tuple[str, ...]:
    """The figures a target of ``kind`` reports (objectives and constraints name these)."""
    own = KERNEL_FIGURES if kind == "kernel" else PE_FIGURES
    return tuple(dict.fromkeys((*CORE_FIGURES, *own)))


# -- workload and matmul points ----------------------------------------------------------------

@lru_cache(maxsize=8)
def _timed(spec: MatmulSpec, arch: Arch) -> Report:
    """Time one product; cached per process, as the ops of a workload (a MLP's gate and up)
    and consecutive points of a sweep over the ops' own inputs share products. Small: a
    Report lowered whole keeps its Program (one object per instruction)."""
    return time_op(spec, arch)[0]


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
_DMA_OPCODES = ("DmaLoad", "DmaCopy", "ReadOut")


def workload_figures(target: WorkloadTarget, inputs: dict[str, Any]) -> dict[str, Any]:
    """The totals of :func:`systolic.workload.workload_totals` as flat figures (the whole
    core's, then the Tensor Engine's as ``cycles``, ``pe_us``, ``pe_tflops``, ``utilization``,
    ``pe_pct_CAUSE``), plus an ideal roofline: each op's operands and fp32 result moved once
    (``workload.intensity``) at the arch's ``hbm_bytes_per_s``, and ``roofline_us`` = the sum
    of max(Tensor Engine time, that memory time) per op: what the whole-core ``latency_us``
    would be with perfect reuse and perfect overlap."""
    results = [OpResult(op, _timed(op.spec, op.arch)) for op in _ops(target, inputs)]
    t = workload_totals(results)
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

def kernel_figures(target: KernelTarget, inputs: dict[str, Any]) -> dict[str, Any]:
    """Record the kernel with the NKI front end for the point's arch, argument shapes and
    ``param.*`` keyword arguments, and time its Program on the whole NeuronCore.

    A point the kernel cannot run (an SBUF or PSUM overflow of a too-large block, an
    assertion, a shape the kernel refuses) raises the front end's one-line error. A
    Program that leaves part of an output unwritten (a block size that does not divide the
    shape, so a loop runs zero times) raises too: it is fast because it does less."""
    arch = point_arch(inputs)
    params = {k.removeprefix("param."): v for k, v in inputs.items() if k.startswith("param.")}
    args = [(shape, fmt) for fmt, shape in target.shapes(inputs).values()]
    try:
        recorded = record_kernel(target.path, target.function, args, params=params,
                                     arch=arch)
    except TypeError as exc:  # a param.NAME the kernel does not take
        raise SweepError(f"{target.function}: {exc}") from None
    why = unwritten(recorded)
    if why:
        raise SweepError(f"the kernel {why}")
    timing = time_program(recorded.program, arch)
    out = flat_core(timing.to_dict(), dma_transfers(timing))
    sbuf, psum = on_chip_high_water(recorded.program)
    out.update({"intensity": 2 * timing.useful_macs / timing.hbm_bytes if timing.hbm_bytes
                else 0.0, "flops": 2 * timing.useful_macs, "useful_macs": timing.useful_macs,
                "instructions": len(recorded.program), "nki_ops": recorded.ops,
                "sbuf_bytes": sbuf, "psum_bytes": psum})
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
