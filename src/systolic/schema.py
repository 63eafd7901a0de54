"""The JSON shape every command shares: the Tensor Engine's view under ``pe``, the whole
NeuronCore's under ``core``, and a ``schema`` version (docs/json.md).

``systolic matmul``, ``run`` (per op and in total), ``kernel`` ``--json`` and the metadata of
their traces (``otherData``) all carry::

    "schema": 2,
    "pe":   {"cycles", "seconds", "tflops", "peak_tflops", "utilization", "useful_macs",
             "breakdown": {cause: {"cycles", "percent"}}, "readout_tail"},
    "core": {"latency_us", "tflops", "peak_tflops", "hfu", "engines", "dma",
             "bound": {"by", "kind", "causes": {cause: {"us", "percent"}}}, "intensity"}

built here and only here (:func:`pe_view`, :func:`core_view`, or :func:`pe_fields` /
:func:`core_fields` from sums, as a workload's total is), so a store or a new command reads
the same names. Version 1 was the flat keys (``cycles``, ``pe_tflops``, ``latency_us``,
``tflops``, ``bound`` ...) side by side in one object; they are still written beside
``pe`` and ``core`` for one release and go in the next.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from .arch import Arch
from .timing.result import CAUSES as CORE_CAUSES
from .timing.result import CoreTiming


class Report(Protocol):
    """What :func:`pe_view` reads of a :class:`systolic.views.report.Report` (a protocol,
    so this module sits below the views that use it: docs/DESIGN-NOTES.md layers)."""

    @property
    def arch(self) -> Arch: ...
    @property
    def cycles(self) -> int: ...
    @property
    def useful_macs(self) -> int: ...
    @property
    def pack(self) -> int: ...
    @property
    def readout_tail(self) -> int: ...
    @property
    def seconds(self) -> float: ...
    @property
    def peak_tflops(self) -> float: ...
    @property
    def breakdown(self) -> dict[str, float]: ...

__all__ = ["BOUND_KINDS", "SCHEMA_VERSION", "bound_kind", "core_fields", "core_view",
           "pe_fields", "pe_view", "views"]

# 1: the flat keys (until issue 22); 2: the views under "pe" and "core", flat keys kept.
SCHEMA_VERSION = 2

# The whole core's critical-path causes (timing/result.py CAUSES) in four kinds: the answer
# a kernel engineer acts on (make the PE busier, move fewer or larger DMAs, take work off the
# other engines, cut the waits between engines).
BOUND_KINDS: dict[str, tuple[str, ...]] = {
    "pe": ("pe", "weight_load"),
    "dma": ("dma", "dma_latency"),
    "engines": ("psum_evacuation", "vector", "scalar", "gpsimd"),
    "sync": ("sync", "idle"),
}
assert sorted(c for cs in BOUND_KINDS.values() for c in cs) == sorted(CORE_CAUSES)


def bound_kind(causes: Mapping[str, float]) -> str:
    """The kind (:data:`BOUND_KINDS`) with the largest share of ``causes`` (critical-path
    time per cause, in any one unit); the first kind on a tie, "sync" when all are 0."""
    share = {k: sum(causes.get(c, 0) for c in cs) for k, cs in BOUND_KINDS.items()}
    best = max(share, key=lambda k: share[k])
    return best if share[best] > 0 else "sync"


def pe_fields(*, cycles: float, seconds: float, useful_macs: int, capacity_macs: float,
              peak_tflops: float, breakdown: Mapping[str, float], readout_tail: float
              ) -> dict[str, Any]:
    """The ``pe`` object from its sums: ``capacity_macs`` = cycles x rows x cols x pack (the
    MACs the array could have done), ``breakdown`` cycles per cause (they sum to cycles)."""
    return {
        "cycles": cycles, "seconds": seconds,
        "tflops": 2 * useful_macs / seconds / 1e12 if seconds else 0.0,
        "peak_tflops": peak_tflops,
        "utilization": useful_macs / capacity_macs if capacity_macs else 0.0,
        "useful_macs": useful_macs,
        "breakdown": {k: {"cycles": c, "percent": 100.0 * c / cycles if cycles else 0.0}
                      for k, c in breakdown.items()},
        "readout_tail": readout_tail,
    }


def pe_view(report: Report) -> dict[str, Any]:
    """The Tensor Engine alone (seed 003, operands on chip) of a Report."""
    arch = report.arch
    return pe_fields(cycles=report.cycles, seconds=report.seconds,
                     useful_macs=report.useful_macs,
                     capacity_macs=report.cycles * arch.rows * arch.cols * report.pack,
                     peak_tflops=report.peak_tflops, breakdown=report.breakdown,
                     readout_tail=report.readout_tail)


def core_fields(*, latency_s: float, flops: float, peak_flops_s: float,
                bound_s: Mapping[str, float], busy_s: Mapping[str, float],
                instructions: Mapping[str, int], dma_bytes: int, hbm_bytes: int
                ) -> dict[str, Any]:
    """The ``core`` object from its sums: ``flops`` useful FLOPs, ``peak_flops_s`` the time
    they would take at the format's peak, ``bound_s`` / ``busy_s`` seconds per cause / per
    queue."""
    lat = latency_s
    by = max(bound_s, key=lambda k: bound_s[k]) if bound_s else "idle"
    return {
        "latency_us": lat * 1e6,
        "tflops": flops / lat / 1e12 if lat else 0.0,
        "peak_tflops": flops / peak_flops_s / 1e12 if peak_flops_s else 0.0,
        "hfu": peak_flops_s / lat if lat else 0.0,
        "engines": {k: {"busy": busy_s[k] / lat if lat else 0.0,
                        "instructions": instructions.get(k, 0)} for k in busy_s},
        "dma": {"bytes": dma_bytes, "hbm_bytes": hbm_bytes,
                "gbps": hbm_bytes / lat / 1e9 if lat else 0.0},
        "bound": {"by": by, "kind": bound_kind(bound_s),
                  "causes": {k: {"us": v * 1e6, "percent": 100.0 * v / lat if lat else 0.0}
                             for k, v in bound_s.items()}},
        "intensity": flops / hbm_bytes if hbm_bytes else None,
    }


def core_view(core: CoreTiming) -> dict[str, Any]:
    """The whole NeuronCore of one timing (every engine, DMA queue and HBM)."""
    hz = core.tick_hz
    flops = 2 * core.useful_macs
    peak = core.peak_tflops * 1e12
    out = core_fields(latency_s=core.seconds, flops=flops,
                      peak_flops_s=flops / peak if peak else 0.0,
                      bound_s={k: v / hz for k, v in core.bound_ticks.items()},
                      busy_s={k: v / hz for k, v in core.busy_ticks.items()},
                      instructions=core.instructions, dma_bytes=core.dma_bytes,
                      hbm_bytes=core.hbm_bytes)
    # the timing's own figures (the same floats as schema 1's flat keys); peak_tflops is the
    # format's also when no FLOP was done
    out.update(latency_us=core.latency_us, tflops=core.tflops, peak_tflops=core.peak_tflops,
               hfu=core.hfu)
    out["bound"]["by"] = core.bound  # the scheduler's own choice on a tie
    return out


def views(pe: Report | None, core: CoreTiming | None) -> dict[str, Any]:
    """``{"schema", "pe", "core"}``; a view that does not exist is null."""
    return {"schema": SCHEMA_VERSION, "pe": None if pe is None else pe_view(pe),
            "core": None if core is None else core_view(core)}
