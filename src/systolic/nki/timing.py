"""A recorded kernel's whole-core timing: its Program timed on the modelled NeuronCore
(:func:`systolic.timing.core.time_program`), per NeuronCore for a launch on several, and
the keys ``systolic kernel --json`` reports. No values are computed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..isa import Program
from ..schema import BOUND_KINDS
from ..schema import bound_kind as schema_bound_kind
from ..timing.core import CoreTiming, time_program
from .build import Recorded

__all__ = ["BOUND_KINDS", "bound_kind", "intensity", "longest_core", "time_cores",
           "time_recorded", "timing_fields"]


def bound_kind(core: CoreTiming) -> str:
    """The kind (:data:`systolic.schema.BOUND_KINDS`, the one grouping of the critical-path
    causes) with the largest share of the core's critical path: schema.bound_kind of its
    ticks per cause ("sync" when nothing is on it)."""
    return schema_bound_kind(core.bound_ticks)


def time_recorded(rec: Recorded, schedule: str = "list") -> CoreTiming:
    """The whole-core timing of a recorded kernel (no values are computed); ``schedule``
    is ``list`` (the compiler's, default) or ``program-order`` (timing/core.py). A launch
    on several NeuronCores (``rec.cores``) takes as long as its longest core: that core's
    timing (:func:`time_cores` gives each)."""
    return longest_core(rec, time_cores(rec, schedule))[0]


def longest_core(rec: Recorded, timings: Sequence[CoreTiming]) -> tuple[CoreTiming, Program]:
    """Of ``timings`` (:func:`time_cores`'s, in core order), the one a launch takes as long
    as, and the Program it timed: what a launch's report, trace and profile show."""
    i = max(range(len(timings)), key=lambda j: timings[j].latency_us)
    return timings[i], (rec.cores or (rec.program,))[i]


def time_cores(rec: Recorded, schedule: str = "list") -> list[CoreTiming]:
    """Each NeuronCore's timing of a launch on several (nki/cores.py), in core order; the
    one core's timing otherwise."""
    progs = rec.cores or (rec.program,)
    return [time_program(p, rec.arch, schedule=schedule) for p in progs]


def timing_fields(core: CoreTiming) -> dict[str, Any]:
    """``systolic kernel --json``'s whole-core keys: those of ``CoreTiming.to_dict()``
    (latency_us, tflops, peak_tflops, hfu, engines, dma, bound) with ``bound.kind``
    (:func:`bound_kind`) and ``intensity`` (useful FLOPs per HBM byte moved)."""
    d = core.to_dict()
    d["bound"]["kind"] = bound_kind(core)
    d["intensity"] = intensity(core)
    return d


def intensity(core: CoreTiming) -> float:
    """Useful FLOPs per HBM byte the timed kernel moved (0 when it moved none)."""
    return 2 * core.useful_macs / core.hbm_bytes if core.hbm_bytes else 0.0
