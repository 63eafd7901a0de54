"""Figures: the timeline of a report, the loss bar of a workload, the roofline.

Every function writes PNG or SVG by the path's suffix, sizes the figure in pixels (exactly
``width`` x ``height`` for a PNG) and returns the path written; matplotlib is imported
only when a figure is drawn (:mod:`systolic.views.plot_base`).

* :func:`timeline_plot` draws a report's whole-core timeline like a hardware profile
  (seed 003, Neuron Explorer): Tensor (LDWEIGHTS), TensorMatrix (MATMUL), Vector, Scalar,
  GpSimd and the DMA queues (:func:`systolic.views.core_plot.core_timeline_plot`), with the
  Tensor Engine's own figures (seed 003's view: cycles, utilization) in the title.
* :func:`loss_bar_plot` stacks each op's breakdown percentages (``workload_json`` data).
* :func:`roofline_plot` draws ``systolic roofline --json`` data.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..isa import Program
from .plot_base import check_plot_path, figure, save
from .report import CAUSES, Report

__all__ = ["CAUSE_COLOURS", "check_plot_path", "loss_bar_plot", "roofline_plot",
           "timeline_plot"]

CAUSE_COLOURS = {"useful": "#009e73", "rows_idle": "#56b4e9", "cols_idle": "#0072b2",
                 "short_moving": "#cc79a7", "fp32_passes": "#d55e00",
                 "weight_load": "#e69f00", "fill_drain": "#999999", "readout": "#f0e442",
                 "idle": "#444444"}


# -- timeline --------------------------------------------------------------------------------

def timeline_plot(report: Report, program: Program, path: str | os.PathLike[str], *,
                  width: int = 1200, height: int = 520, title: str | None = None) -> Path:
    """Plot the whole-core timeline of ``report`` (one row per engine and DMA queue, the
    Tensor Engine split into its LDWEIGHTS and MATMUL rows; :mod:`systolic.views.core_plot`).

    ``program`` is the Program the report timed (its instruction counts go in the title).
    The title's last line is the Tensor Engine's own view (seed 003: DMA free)."""
    from .core_plot import core_timeline_plot

    counts = ", ".join(f"{v:,} {k}" for k, v in program.counts().items())
    mode = "" if report.perf_mode == "none" else f" {report.perf_mode}"
    head = title or f"{report.fmt}{mode} on {report.arch.name}"
    sub = (f"Tensor Engine alone (operands on chip): {report.cycles:,} cycles "
           f"({report.seconds * 1e6:,.2f} us), utilization {100 * report.utilization:.2f}%;"
           f" {counts}")
    return core_timeline_plot(report.core, path, width=width, height=height, title=head,
                              subtitle=sub)


# -- loss bar --------------------------------------------------------------------------------

def loss_bar_plot(data: dict[str, Any], path: str | os.PathLike[str], *, width: int = 1200,
                  height: int | None = None) -> Path:
    """Stacked horizontal bars of where each op's cycles went (``workload_json`` data), one
    per op plus the workload total (each op counted ``repeat`` times)."""
    out = check_plot_path(path)
    bars = [(f"{op['name']} (x{op['repeat']})" if op["repeat"] > 1 else op["name"],
             op["breakdown"], op["utilization"]) for op in data["ops"]]
    total = data["total"]
    bars.append(("total", total["breakdown"], total["utilization"]))
    fig = figure(width, height or max(260, 90 + 42 * len(bars)))
    ax = fig.subplots()
    y = np.arange(len(bars))[::-1]
    used = [k for k in CAUSES if any(b[1][k]["percent"] > 0 for b in bars)]
    left = np.zeros(len(bars))
    for key in used:
        pct = np.array([b[1][key]["percent"] for b in bars])
        ax.barh(y, pct, left=left, color=CAUSE_COLOURS.get(key, "#888888"),
                label=CAUSES[key], edgecolor="white", linewidth=0.5, height=0.7)
        left += pct
    for yy, (_, _, util) in zip(y, bars, strict=True):
        ax.text(1, yy, f"{100 * util:.1f}% useful", va="center", fontsize=8, color="white",
                fontweight="bold")
    ax.set_yticks(y, [b[0] for b in bars], fontsize=9)
    ax.set_xlim(0, 100)
    ax.set_xlabel("percent of the op's cycles", fontsize=9)
    ax.set_title(f"where the cycles went: {data.get('name', '')}", fontsize=10)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    return save(fig, out)


# -- roofline --------------------------------------------------------------------------------

def _clusters(items: Sequence[dict[str, Any]], key: str, ratio: float = 1.06
              ) -> list[list[dict[str, Any]]]:
    """Group items whose ``key`` values lie within ``ratio`` of each other (labels that
    would print on top of one another become one label)."""
    groups: list[list[dict[str, Any]]] = []
    for it in sorted(items, key=lambda d: d[key]):
        if groups and it[key] <= groups[-1][0][key] * ratio:
            groups[-1].append(it)
        else:
            groups.append([it])
    return groups


def ceiling_label(group: Sequence[dict[str, Any]]) -> str:
    """The text beside one dashed ceiling line: a line per ceiling of the group."""
    return "\n".join(f"{c['name']}: {c['tflops']:.1f} TFLOP/s ({c['what']})"
                     for c in sorted(group, key=lambda c: -c["tflops"]))


def _nice_ticks(lo: float, hi: float) -> list[float]:
    """1-2-5 ticks in [lo, hi], labelled as plain numbers (a log axis only labels decades,
    and these axes often span one or two)."""
    first = int(np.floor(np.log10(lo)))
    return [m * 10.0**e for e in range(first, int(np.ceil(np.log10(hi))) + 1)
            for m in (1, 2, 5) if lo <= m * 10.0**e <= hi]


def roofline_plot(data: dict[str, Any], path: str | os.PathLike[str], *, width: int = 1200,
                  height: int = 800) -> Path:
    """Roofs per format, the HBM slope, the timing model's ceilings, and workload points
    (``systolic roofline --json`` data), on log-log axes."""
    out = check_plot_path(path)
    bw = data["hbm_bytes_per_s"] / 1e12  # TB/s, so intensity x bw is TFLOP/s
    roofs, ceilings, points = data["roofs"], data["ceilings"], data["points"]
    peaks = [r["peak_tflops"] for r in roofs]
    xs = [p["intensity"] for p in points]
    lows = ([c["tflops"] for c in ceilings] + [p["tflops"] for p in points]
            + [p["hbm_bound_tflops"] for p in points])
    y_lo = min([min(peaks) / 6, *(v / 2 for v in lows)])
    x_lo = min([y_lo / bw, *(x / 2 for x in xs)])  # the slope enters at the lower left
    x_hi = max([16 * max(peaks) / bw, *(x * 4 for x in xs)])
    fig = figure(width, height)
    ax = fig.subplots()
    ax.set_xscale("log")
    ax.set_yscale("log")
    colours = ["#0072b2", "#d55e00", "#cc79a7", "#009e73", "#e69f00"]
    top = max(peaks)
    ax.plot([x_lo, top / bw], [x_lo * bw, top], color="black", linewidth=1.5,
            label=f"HBM {data['hbm_bytes_per_s'] / 1e9:,.0f} GB/s per core")
    for roof, colour in zip(roofs, colours, strict=False):
        ridge = roof["peak_tflops"] / bw
        ax.plot([ridge, x_hi], [roof["peak_tflops"]] * 2, color=colour, linewidth=2)
        ax.text(x_hi / 1.05, roof["peak_tflops"] * 1.04,
                f"{roof['name']}  {roof['peak_tflops']:.1f} TFLOP/s", color=colour,
                ha="right", va="bottom", fontsize=8, fontweight="bold")
    for i, group in enumerate(_clusters(ceilings, "tflops")):
        level = float(np.mean([c["tflops"] for c in group]))
        ax.plot([level / bw, x_hi], [level, level], color="#555555", linestyle="--",
                linewidth=1,
                label="ceilings (Tensor Engine alone, timing model)" if i == 0 else None)
        # one line per ceiling, each with its own value and reason: ceilings that meet at
        # one level (K = 64, M = 64, N = 32 all halve the peak) still read apart
        ax.text(level / bw * 1.15, level / 1.04, ceiling_label(group), color="#555555",
                ha="left", va="top", fontsize=7.5, linespacing=1.3)
    by_pos: dict[tuple[float, float], list[dict[str, Any]]] = {}
    for p in points:
        by_pos.setdefault((round(p["intensity"], 6), round(p["tflops"], 6)), []).append(p)
    above = False
    labels: list[tuple[float, float, str]] = []
    for j, ((x, y), group) in enumerate(sorted(by_pos.items())):
        ax.scatter([x], [y], s=36, color="black", zorder=5,
                   label="workload ops (whole-core timing, measured intensity)" if j == 0
                   else None)
        cap = group[0]["hbm_bound_tflops"]
        if cap < y:  # the model keeps operands on chip; HBM would hold the op down to here
            ax.plot([x, x], [cap, y], color="black", linestyle=":", linewidth=1)
            ax.scatter([x], [cap], s=30, marker="v", facecolors="white", edgecolors="black",
                       zorder=5, label=None if above else "same op, bound by HBM")
            above = True
        labels.append((x, y, ", ".join(
            p["name"] + (f" ({p['bound']}-bound)" if p.get("bound") else "") for p in group)))
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(y_lo, top * 1.8)
    for axis, (lo, hi) in ((ax.xaxis, (x_lo, x_hi)), (ax.yaxis, (y_lo, top * 1.8))):
        ticks = _nice_ticks(lo, hi)
        axis.set_ticks(ticks, [f"{t:g}" for t in ticks], fontsize=8)
    ax.set_xlabel("arithmetic intensity (FLOP per byte of HBM traffic)", fontsize=9)
    ax.set_ylabel("TFLOP/s", fontsize=9)
    title = (f"roofline of one {data['arch']} NeuronCore: Tensor Engine of "
             f"{data['rows']}x{data['cols']} PEs at {data['clock_hz'] / 1e9:g} GHz, HBM "
             f"{data['hbm_bytes_per_s'] / 1e9:,.0f} GB/s; points placed by the HBM bytes "
             f"their DMAs move")
    # wrapped to the figure's width (about 8 px a character at 10 pt): a narrow figure
    # clipped the one-line title at its right edge
    ax.set_title(textwrap.fill(title, max(40, width // 8)), fontsize=10)
    ax.grid(which="both", alpha=0.2)
    legend = ax.legend(loc="lower right", fontsize=8)
    place_labels(fig, ax, labels, [*ax.texts, legend])
    return save(fig, out)


def place_labels(fig: Any, ax: Any, labels: list[tuple[float, float, str]],
                 obstacles: list[Any]) -> None:
    """Annotate each (x, y, text) point at the first of a few offsets around it whose box
    stays inside the axes and meets no obstacle (the texts and legend already drawn), no
    point and no label placed before; the first offset when none is free. Boxes are
    measured after one layout pass, where the saved figure draws them."""
    from matplotlib.transforms import Bbox

    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    taken = [o.get_window_extent(renderer) for o in obstacles]
    for x, y in ((x, y) for x, y, _ in labels):  # the points themselves, 5 px around
        px, py = ax.transData.transform((x, y))
        taken.append(Bbox.from_extents(px - 5, py - 5, px + 5, py + 5))
    offsets = [(6, 6), (6, -14), (-6, 6), (-6, -14), (6, 18), (6, -26)]  # points
    for x, y, text in labels:
        for dx, dy in offsets:
            ann = ax.annotate(text, (x, y), fontsize=7.5, xytext=(dx, dy),
                              textcoords="offset points", ha="left" if dx > 0 else "right")
            box = ann.get_window_extent(renderer)
            free = (frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0
                    and box.y1 <= frame.y1 and not any(box.overlaps(t) for t in taken))
            if free:
                break
            ann.remove()
        else:
            ann = ax.annotate(text, (x, y), fontsize=7.5, xytext=offsets[0],
                              textcoords="offset points")
            box = ann.get_window_extent(renderer)
        taken.append(box)
