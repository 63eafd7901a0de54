"""The result of the whole-core timing: :class:`CoreTiming` (per-op starts and ends in
ticks, the critical path by cause, busy time per queue) and the names it is read by
(:data:`CAUSES`, :data:`QUEUE_NAMES`). The scheduler that builds it is
:mod:`systolic.timing.core`; docs/timing.md "The whole core" has the rules.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from ..arch import Arch

__all__ = ["CAUSES", "QUEUE_NAMES", "WHAT_IF", "Cause", "CoreTiming", "queue_names"]


class Cause(enum.IntEnum):
    """A critical-path cause, in display order (the value is the op record's cause id)."""

    PE, WEIGHT_LOAD, DMA, DMA_LATENCY, PSUM_EVACUATION = range(5)
    VECTOR, SCALAR, GPSIMD, SYNC, IDLE = range(5, 10)

    @property
    def key(self) -> str:
        """Its name in :data:`CAUSES` and in the JSON."""
        return self.name.lower()


# What-if schedules (issue 18 part 5): the same Program with one set of costs at zero.
WHAT_IF: dict[str, str] = {
    "dma_free": "DMA transfers and their fixed cost take no time",
    "engines_free": "Vector, Scalar and GpSimd instructions take no time",
    "pe_free": "Tensor Engine loads and MatMuls take no time",
}

# Critical-path causes, in display order, with their labels.
CAUSES: dict[str, str] = {
    "pe": "PE compute (Tensor Engine)",
    "weight_load": "PE weight loads",
    "dma": "DMA transfers (queues / HBM)",
    "dma_latency": "DMA fixed cost",
    "psum_evacuation": "PSUM evacuation",
    "vector": "Vector engine",
    "scalar": "Scalar engine",
    "gpsimd": "GpSimd engine",
    "sync": "cross-engine synchronisation",
    "idle": "idle",
}
assert list(CAUSES) == [c.key for c in Cause]
QUEUE_NAMES = ("tensor", "vector", "scalar", "gpsimd")


def queue_names(arch: Arch) -> tuple[str, ...]:
    """Queue names by id: the four compute engines, then the DMA engines ``dma0`` ...
    (Neuron Explorer's per-engine rows)."""
    return _queue_names(arch.dma_engines)


@lru_cache(maxsize=64)
def _queue_names(dma_engines: int) -> tuple[str, ...]:
    return QUEUE_NAMES + tuple(f"dma{q}" for q in range(dma_engines))


@dataclass(frozen=True, eq=False)
class CoreTiming:
    """The whole-core schedule of one Program.

    Per op (program order; a ReadOut is two ops): ``op_instr`` its instruction, ``op_queue``
    its (first) queue id (:func:`queue_names`), ``op_queues`` how many queues it holds (the
    DMA engines of a transfer, consecutive modulo their count), ``starts``/``ends`` in ticks
    of ``tick_hz`` (a DMA's start is its first byte). ``bound_ticks`` is the critical path
    by cause (sums to ``latency``); ``busy_ticks`` the union of each queue's busy
    intervals; ``instructions`` ops per queue; ``what_if`` the latency in ticks of the same
    schedule with one set of costs at zero (:data:`WHAT_IF`; empty when not asked for;
    the three computed together when one is first read: ``timing.whatif.LazyWhatIf``);
    ``schedule`` the scheduling mode (``list`` or ``program-order``).
    """

    arch: Arch
    tick_hz: int
    latency: int
    op_instr: np.ndarray
    op_queue: np.ndarray
    op_queues: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    bound_ticks: dict[str, int]
    busy_ticks: dict[str, int]
    instructions: dict[str, int]
    dma_bytes: int
    hbm_bytes: int
    useful_macs: int
    fmt: str
    perf_mode: str
    # per op, the CAUSES index its own time is charged to: on the tensor queue "pe" marks a
    # MatMul (the profile's MATMUL row, TensorMatrix) and "weight_load" a LoadStationary
    # (LDWEIGHTS, on the Tensor row); None on timings built without it
    op_cause: np.ndarray | None = None
    what_if: Mapping[str, int] = field(default_factory=dict)
    schedule: str = "list"

    @property
    def seconds(self) -> float:
        return self.latency / self.tick_hz

    @property
    def latency_us(self) -> float:
        # seconds, then microseconds: the same float a sweep's or a workload's total gives
        # for one op (workload.totals sums seconds); latency * 1e6 / tick_hz differed from
        # it in the last bit for 152 of 512 products
        return self.seconds * 1e6

    @property
    def tflops(self) -> float:
        return 2 * self.useful_macs / self.seconds / 1e12 if self.latency else 0.0

    @property
    def peak_tflops(self) -> float:
        return self.arch.peak_flops(self.fmt, self.perf_mode) / 1e12

    @property
    def hfu(self) -> float:
        """Useful FLOPs over latency x the format's peak."""
        return self.tflops / self.peak_tflops if self.peak_tflops else 0.0

    @property
    def bound(self) -> str:
        """The cause with the largest share of the critical path."""
        return max(self.bound_ticks, key=lambda k: self.bound_ticks[k])

    def busy(self) -> dict[str, float]:
        """Busy fraction of each queue, in [0, 1]."""
        lat = self.latency or 1
        return {k: v / lat for k, v in self.busy_ticks.items()}

    def to_dict(self) -> dict[str, Any]:
        """The whole-core JSON keys: latency_us, tflops, peak_tflops, hfu, engines, dma,
        bound."""
        lat = self.latency or 1
        busy = self.busy()
        return {
            "latency_us": self.latency_us, "tflops": self.tflops,
            "peak_tflops": self.peak_tflops, "hfu": self.hfu,
            "engines": {k: {"busy": busy[k], "instructions": self.instructions[k]}
                        for k in self.busy_ticks},
            "dma": {"bytes": self.dma_bytes, "hbm_bytes": self.hbm_bytes,
                    "gbps": self.hbm_bytes / self.seconds / 1e9 if self.latency else 0.0},
            "bound": {"by": self.bound,
                      "causes": {k: {"us": v * 1e6 / self.tick_hz, "percent": 100 * v / lat}
                                 for k, v in self.bound_ticks.items()}},
            "what_if_us": {k: v * 1e6 / self.tick_hz for k, v in self.what_if.items()},
            "schedule": self.schedule,
        }

    def __repr__(self) -> str:
        return (f"<CoreTiming {self.arch.name}: {self.latency_us:,.2f} us, {self.tflops:.2f} "
                f"of {self.peak_tflops:.2f} TFLOP/s (hfu {100 * self.hfu:.1f}%), bound by "
                f"{self.bound}>")
