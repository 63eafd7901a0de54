"""The flat figures of one timed point, one store column each (docs/sweep.md "Figures").

Three groups, named so that no figure means two things:

* the whole NeuronCore (every target; :func:`systolic.timing.core.time_program`):
  ``latency_us``, ``tflops``, ``peak_tflops``, ``hfu``, ``bound`` (``core.bound.by`` of the
  JSON views, docs/json.md), ``bound_kind`` (``core.bound.kind``) and ``pct_CAUSE`` (the
  critical path by cause, summing to 100), ``dma_bytes``, ``hbm_bytes``, ``dma_gbps``,
  ``intensity`` (useful FLOPs per HBM byte moved), ``busy_ENGINE`` and ``ins_ENGINE`` (per
  compute engine; ``busy_dma`` is the busiest DMA queue, ``ins_dma`` the DMA transfers:
  one per DmaCopy or DmaLoad and one store per ReadOut);
* the Tensor Engine's own view (matmul and workload points; seed 003): ``cycles``,
  ``pe_us``, ``pe_tflops``, ``utilization``, ``pe_pct_CAUSE``, plus an ideal roofline
  (``ideal_hbm_bytes``: operands and fp32 result moved once, ``hbm_us``, ``roofline_us``);
* what a recorded kernel uses: ``nki_ops``, ``sbuf_bytes`` and ``psum_bytes`` (the highest
  byte per partition any instruction touches: the allocator's high-water mark).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..isa import AccessPattern, Program, Space
from ..schema import bound_kind
from ..timing.core import CAUSES as CORE_CAUSES
from ..timing.core import QUEUE_NAMES, CoreTiming
from ..views.report import CAUSES as PE_CAUSES

__all__ = ["CORE_FIGURES", "KERNEL_FIGURES", "MAXIMIZE", "PE_FIGURES", "dma_transfers", "flat_core",
           "on_chip_high_water"]

CORE_FIGURES = ("latency_us", "tflops", "peak_tflops", "hfu", "bound", "bound_kind", "dma_bytes",
                "hbm_bytes", "dma_gbps", "intensity", "flops", "useful_macs", "instructions",
                *(f"ins_{q}" for q in (*QUEUE_NAMES, "dma")),
                *(f"busy_{q}" for q in (*QUEUE_NAMES, "dma")),
                *(f"pct_{c}" for c in CORE_CAUSES))
PE_FIGURES = ("cycles", "pe_us", "pe_tflops", "utilization", "ideal_hbm_bytes",
              "ideal_intensity", "hbm_us", "roofline_us", "roofline_bound",
              *(f"pe_pct_{c}" for c in PE_CAUSES))
KERNEL_FIGURES = ("nki_ops", "sbuf_bytes", "psum_bytes")
# Figures where more is better; every other figure is minimised by default.
MAXIMIZE = frozenset({"tflops", "pe_tflops", "utilization", "hfu", "dma_gbps", "peak_tflops",
                      "intensity", "ideal_intensity"})


def flat_core(d: dict[str, Any], dma_transfers: int) -> dict[str, Any]:
    """The whole-core figures from a dict shaped like ``CoreTiming.to_dict()`` (latency_us,
    tflops, peak_tflops, hfu, engines, dma, bound); ``workload.workload_totals`` gives
    the same shape for a workload's total. ``ins_dma`` is ``dma_transfers``: a transfer
    spread over several queues holds a slot on each, so the queues' counts overcount it."""
    engines = d["engines"]
    dma = [e for q, e in engines.items() if q.startswith("dma")]
    out: dict[str, Any] = {
        "latency_us": d["latency_us"], "tflops": d["tflops"], "peak_tflops": d["peak_tflops"],
        "hfu": d["hfu"], "bound": d["bound"]["by"],
        # core.bound.kind of every command's JSON (docs/json.md), from the same causes
        "bound_kind": bound_kind({c: p["us"] for c, p in d["bound"]["causes"].items()}),
        "dma_bytes": d["dma"]["bytes"],
        "hbm_bytes": d["dma"]["hbm_bytes"], "dma_gbps": d["dma"]["gbps"],
    }
    for q in QUEUE_NAMES:
        out[f"ins_{q}"] = engines[q]["instructions"]
        out[f"busy_{q}"] = engines[q]["busy"]
    out["ins_dma"] = dma_transfers
    out["busy_dma"] = max((e["busy"] for e in dma), default=0.0)
    for cause, part in d["bound"]["causes"].items():
        out[f"pct_{cause}"] = part["percent"]
    return out


_FIELDS: dict[type, tuple[str, ...]] = {}


def _ap_fields(kind: type) -> tuple[str, ...]:
    names = _FIELDS.get(kind)
    if names is None:
        names = _FIELDS[kind] = tuple(f.name for f in dataclasses.fields(kind))
    return names


def dma_transfers(ct: CoreTiming) -> int:
    """DMA transfers of a whole-Program timing: ops whose (first) queue is a DMA queue."""
    return int(np.count_nonzero(ct.op_queue >= len(QUEUE_NAMES)))


def on_chip_high_water(program: Program) -> tuple[int, int]:
    """(SBUF, PSUM) bytes per partition up to the highest byte any instruction touches: the
    space a kernel needs, since the NKI allocator places first fit from address 0."""
    top = {Space.SBUF: 0, Space.PSUM: 0}
    for ins in program:
        for name in _ap_fields(type(ins)):
            ap = getattr(ins, name)
            if isinstance(ap, AccessPattern) and ap.space in top:
                top[ap.space] = max(top[ap.space], ap.free_bytes_span[1])
    return top[Space.SBUF], top[Space.PSUM]


