"""The whole-core timeline: one row per engine and DMA queue, like a Neuron Explorer
profile (the rows of ``--trace``'s "NeuronCore" process, drawn as a PNG or SVG).

Each row shows the union of its busy intervals (a DMA gang marks every queue it holds);
with more than ``bins`` intervals a row is drawn as ``bins`` columns shaded by how busy the
row is in each. The title carries the latency, the achieved rate and what bounds the kernel
(:mod:`systolic.sim.core`).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .geometry import interval_union
from .plots import _figure, _save, check_plot_path
from .report import _covered_before
from .sim.core import CAUSES, CoreTiming, queue_names

__all__ = ["core_timeline_plot"]

_COLOURS = {"tensor": "#0072b2", "vector": "#009e73", "scalar": "#cc79a7",
            "gpsimd": "#e69f00"}
_DMA = "#d55e00"


def _rows(core: CoreTiming) -> list[tuple[str, np.ndarray, np.ndarray]]:
    names = queue_names(core.arch)
    first_dma = len(names) - core.arch.dma_queues
    out = []
    for q, name in enumerate(names):
        if q < first_dma:
            sel = core.op_queue == q
        else:
            k = q - first_dma
            sel = (core.op_queue >= first_dma) & \
                ((k - (core.op_queue - first_dma)) % core.arch.dma_queues < core.op_queues)
        if np.any(sel):
            lo, hi = interval_union(core.starts[sel], core.ends[sel])
            out.append((name, lo, hi))
    return out


def core_timeline_plot(core: CoreTiming, path: str | os.PathLike[str], *,
                       width: int = 1200, bins: int = 600, title: str = "") -> Path:
    """Write the whole-core timeline of ``core`` to ``path`` (.png or .svg)."""
    out = check_plot_path(path)
    rows = _rows(core)
    height = max(240, 60 + 26 * len(rows))
    fig = _figure(width, height)
    ax = fig.subplots()
    us = 1e6 / core.tick_hz
    span = max(core.latency, 1)
    edges = np.linspace(0, span, bins + 1)
    for r, (name, lo, hi) in enumerate(rows):
        colour = _COLOURS.get(name, _DMA)
        y = len(rows) - 1 - r
        if len(lo) <= bins:
            ax.broken_barh([(a * us, (b - a) * us) for a, b in zip(lo.tolist(), hi.tolist(),
                                                                   strict=True)],
                           (y - 0.4, 0.8), facecolors=colour)
        else:
            covered = np.concatenate([[0], np.cumsum(hi - lo)])
            frac = np.diff(_covered_before(edges, lo, hi, covered)) / np.diff(edges)
            for j in np.flatnonzero(frac > 0.005).tolist():
                ax.broken_barh([(edges[j] * us, (edges[j + 1] - edges[j]) * us)],
                               (y - 0.4, 0.8), facecolors=colour, alpha=float(frac[j]))
    busy = core.busy()
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{n} ({100 * busy[n]:.0f}%)" for n, _, _ in reversed(rows)],
                       fontsize=8)
    ax.set_xlim(0, span * us)
    ax.set_xlabel("time (us)")
    head = title or f"{core.fmt} on {core.arch.name}"
    ax.set_title(f"{head}: {core.latency_us:,.2f} us, {core.tflops:.2f} of "
                 f"{core.peak_tflops:.2f} TFLOP/s (hfu {100 * core.hfu:.1f}%), bound by "
                 f"{CAUSES[core.bound]}", fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    return _save(fig, out)
