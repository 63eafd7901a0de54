"""Figures: the Tensor Engine timeline, the loss bar of a workload, the roofline.

matplotlib (a regular dependency) is imported inside the functions (it is slow to import,
and a broken or missing install then fails as one line naming ``systolic[plots]``), on the
Agg canvas, so no display is needed. Every function writes PNG or SVG by
the path's suffix and sizes the figure in pixels: figsize = pixels / DPI, so a PNG comes out
exactly ``width`` x ``height`` pixels. Each returns the path written.

* :func:`timeline_plot` draws a report's schedule like a hardware profile (seed 003,
  Neuron Explorer): LDWEIGHTS on the Tensor row, MATMUL on the TensorMatrix row, plus the
  PSUM read-out engine. A MatMul's bar is the time its moving tile streams in, [start,
  start + min(period x N, duration)), as in :mod:`systolic.trace`: back-to-back MatMuls
  then touch, and every gap between bars is time the whole array is dark. The last
  MatMul's fill and drain (hidden under the next MatMul for every other one) is hatched.
* :func:`loss_bar_plot` stacks each op's breakdown percentages (``workload_json`` data).
* :func:`roofline_plot` draws ``systolic roofline --json`` data.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .artifacts import check_artifact_path, open_artifact
from .errors import SystolicError
from .geometry import interval_union
from .isa import Program
from .report import CAUSES, Report
from .sim.timing import Kind

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["CAUSE_COLOURS", "check_plot_path", "loss_bar_plot", "roofline_plot",
           "timeline_plot"]

DPI = 100
SUFFIXES = (".png", ".svg")
# Okabe-Ito colours (distinguishable with the common colour-vision deficiencies).
_ROWS = ((Kind.LOAD, "LDWEIGHTS\n(Tensor)", "#e69f00"),
         (Kind.COMPUTE, "MATMUL\n(TensorMatrix)", "#0072b2"),
         (Kind.READOUT, "PSUM\nread-out", "#009e73"))
CAUSE_COLOURS = {"useful": "#009e73", "rows_idle": "#56b4e9", "cols_idle": "#0072b2",
                 "short_moving": "#cc79a7", "fp32_passes": "#d55e00",
                 "weight_load": "#e69f00", "fill_drain": "#999999", "readout": "#f0e442",
                 "idle": "#444444"}
ZOOM_MATMULS = 16  # the zoom panel shows the first this many MatMuls, one bar each


def check_plot_path(path: str | os.PathLike[str]) -> Path:
    """The path as a Path if its suffix names a format we write and it may be written
    (:func:`systolic.artifacts.check_artifact_path`); else a SystolicError."""
    p = Path(path)
    if os.fspath(path) == "":
        raise SystolicError("the plot path is empty; name the file .png or .svg")
    if p.suffix.lower() not in SUFFIXES:
        raise SystolicError(f"{p}: cannot tell the image format from {p.suffix or 'no suffix'!r};"
                            f" name the file .png or .svg")
    check_artifact_path(p, "plot")
    return p


class PlotDependencyError(SystolicError):
    """matplotlib is missing or broken."""


def _figure(width: int, height: int) -> Figure:
    if width < 100 or height < 100:
        raise SystolicError(f"a plot needs at least 100 x 100 pixels, got {width} x {height}")
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise PlotDependencyError(f"plots need matplotlib, which did not import ({exc}); "
                                  f"pip install 'systolic[plots]'") from None

    fig = Figure(figsize=(width / DPI, height / DPI), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: Path) -> Path:
    with open_artifact(path, "plot", binary=True) as f:
        fig.savefig(f, dpi=DPI, format=path.suffix.lower()[1:])
    return path


# -- timeline --------------------------------------------------------------------------------

def _row_intervals(report: Report) -> list[tuple[np.ndarray, np.ndarray]]:
    """[start, end) per instruction of each timeline row (MatMuls: their streaming time)."""
    sch = report.schedule
    out = []
    for kind, _, _ in _ROWS:
        idx = sch.rows_of(kind)
        lo, hi = sch.starts[idx], sch.ends[idx]
        if kind is Kind.COMPUTE:  # rows_of keeps program order, as compute.index does
            cc = sch.compute
            hi = lo + np.minimum(cc.period * cc.n, cc.duration)
        out.append((lo, hi))
    return out


def _busy_per_bin(lo: np.ndarray, hi: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Fraction of each [edges[j], edges[j+1]) covered by disjoint sorted intervals."""
    covered = np.concatenate([[0], np.cumsum(hi - lo)]).astype(np.float64)

    def before(t: np.ndarray) -> np.ndarray:  # busy time in [0, t)
        k = np.searchsorted(lo, t, side="right")
        prev = np.maximum(k - 1, 0)
        inside = np.where(k > 0, np.clip(t - lo[prev], 0, hi[prev] - lo[prev]), 0)
        return covered[prev] * (k > 0) + inside

    return np.diff(before(edges)) / np.diff(edges)


# Drawing small events honestly in the overview (issue 13, 3.10): a bar narrower than a
# pixel is widened to one pixel only while the row has few bars (at most one per SPARSE
# pixels), so widened bars cannot merge into a solid band; a denser row is drawn as one
# tint per pixel column, its strength the column's true busy share (MIN_TINT for any work
# at all, so a 1%-busy row stays visible without looking busy). The caption says so.
SPARSE = 3
MIN_TINT = 0.2
OVERVIEW_NOTE = (f"overview: a bar under 1 pixel is drawn 1 pixel wide while its row has at "
                 f"most 1 bar per {SPARSE} pixels;\na denser row is tinted per pixel by its "
                 f"busy share (any work: at least {MIN_TINT:.0%}); under each row name, the "
                 f"share of the run it is busy")


def row_ink(lo: np.ndarray, hi: np.ndarray, span: tuple[float, float], pixels: int
            ) -> tuple[str, np.ndarray, np.ndarray]:
    """How the overview draws one row: ``("bars", lo, hi)`` (widened to >= 1 pixel) or
    ``("tint", edges, strength)`` with strength in [0, 1] per pixel column."""
    lo, hi = interval_union(lo, hi)  # the true busy time, disjoint
    width = (span[1] - span[0]) / pixels
    if len(lo) * SPARSE <= pixels:
        wlo, whi = interval_union(lo, np.maximum(hi, lo + width))
        return "bars", wlo, whi
    edges = np.linspace(span[0], span[1], pixels + 1)
    busy = _busy_per_bin(lo.astype(np.float64), hi.astype(np.float64), edges)
    return "tint", edges, np.where(busy > 0, MIN_TINT + (1 - MIN_TINT) * busy, 0.0)


def _draw_rows(ax: Axes, rows: list[tuple[np.ndarray, np.ndarray]], span: tuple[int, int],
               pixels: int, *, separate: bool) -> None:
    """One broken_barh per row; ``separate`` draws every instruction with an edge, else
    what :func:`row_ink` says, with each row's busy share in its label."""
    import matplotlib.colors as mcolors

    lane = len(_ROWS)
    labels = []
    for r, ((lo, hi), (_, label, colour)) in enumerate(zip(rows, _ROWS, strict=True)):
        y = lane - 1 - r
        keep = (hi > span[0]) & (lo < span[1])
        lo, hi = lo[keep], hi[keep]
        if separate:
            ax.broken_barh(list(zip(lo, hi - lo, strict=True)), (y - 0.35, 0.7),
                           facecolors=colour, edgecolors="white", linewidth=0.8)
            labels.append(label)
            continue
        ulo, uhi = interval_union(lo, hi)
        share = float((np.minimum(uhi, span[1]) - np.maximum(ulo, span[0])).sum()) / max(
            span[1] - span[0], 1)
        labels.append(f"{label}\n{100 * share:.1f}%")
        how, a, b = row_ink(lo, hi, span, pixels)
        if how == "bars":
            ax.broken_barh(list(zip(a, b - a, strict=True)), (y - 0.35, 0.7),
                           facecolors=colour)
            continue
        rgb = np.array(mcolors.to_rgb(colour))
        shades = [(*(1 - f * (1 - rgb)), 1.0) for f in b]  # white -> colour by strength
        ax.broken_barh(list(zip(a[:-1], np.diff(a), strict=True)), (y - 0.35, 0.7),
                       facecolors=shades, linewidth=0)
    ax.set_yticks(range(lane), list(reversed(labels)), fontsize=8)
    ax.set_ylim(-0.6, lane - 0.4)
    ax.set_xlim(*span)
    ax.xaxis.set_major_formatter(_thousands())
    ax.grid(axis="x", alpha=0.3)


def _thousands() -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _: f"{v:,.0f}")


def timeline_plot(report: Report, program: Program, path: str | os.PathLike[str], *,
                  width: int = 1200, height: int = 520, title: str | None = None) -> Path:
    """Plot the LDWEIGHTS / MATMUL / PSUM read-out rows of ``report``'s schedule over time.

    The top panel spans the whole run (cycles below, microseconds above); when the program
    has more than ``ZOOM_MATMULS`` MatMuls a second panel zooms on the first ones, one bar
    per instruction."""
    out = check_plot_path(path)
    sch = report.schedule
    rows = _row_intervals(report)
    n_mm = len(sch.compute.index)
    end = max(sch.cycles + sch.readout_tail, 1)
    zoom = n_mm > ZOOM_MATMULS
    fig = _figure(width, height)
    axes = fig.subplots(2 if zoom else 1, 1, squeeze=False)[:, 0]
    counts = ", ".join(f"{v:,} {k}" for k, v in program.counts().items() if k != "DmaLoad")
    mode = "" if report.perf_mode == "none" else f" {report.perf_mode}"
    head = title or f"{report.fmt}{mode} on {report.arch.name}"
    fig.suptitle(f"{head}\n{report.cycles:,} cycles ({report.seconds * 1e6:,.2f} us), "
                 f"utilization {100 * report.utilization:.2f}%; {counts}", fontsize=10)
    _draw_rows(axes[0], rows, (0, end), width, separate=n_mm <= ZOOM_MATMULS)
    clock = report.arch.clock_hz
    top = axes[0].secondary_xaxis("top", functions=(lambda c: c / clock * 1e6,
                                                    lambda us: us * clock / 1e6))
    top.set_xlabel("microseconds", fontsize=8)
    top.tick_params(labelsize=8)
    if n_mm:  # the last MatMul's fill and drain: the only one no later MatMul hides
        tail = (int(rows[1][1][-1]), sch.cycles)
        for ax in axes:
            ax.broken_barh([(tail[0], tail[1] - tail[0])], (len(_ROWS) - 2 - 0.35, 0.7),
                           facecolors="#cfe3f1", edgecolors="#0072b2", hatch="///",
                           linewidth=0.5, label="last MatMul's fill and drain")
        if tail[1] - tail[0] > end / 100:
            axes[0].legend(loc="upper right", bbox_to_anchor=(1.0, 0.72), fontsize=7,
                           frameon=False)
    axes[0].axvline(sch.cycles, color="#d55e00", linewidth=1, linestyle="--")
    axes[0].text(sch.cycles, len(_ROWS) - 0.43, "last MatMul ends ", color="#d55e00",
                 fontsize=7, va="top", ha="right")
    axes[0].tick_params(axis="x", labelsize=8)
    axes[-1].set_xlabel("TensorE cycles", fontsize=8)
    if n_mm > ZOOM_MATMULS:
        axes[0].set_title(OVERVIEW_NOTE, fontsize=7, loc="left", pad=22)
    if zoom:
        stop = int(rows[1][1][ZOOM_MATMULS - 1])  # end of the last zoomed MatMul's stream
        window = (0, int(stop * 1.04) + 1)
        _draw_rows(axes[1], rows, window, width, separate=True)
        axes[1].set_title(f"zoom: the first {ZOOM_MATMULS} of {n_mm:,} MatMuls, one bar per "
                          f"instruction; white gaps = the array is dark", fontsize=8)
        axes[1].tick_params(axis="x", labelsize=8)
    return _save(fig, out)


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
    fig = _figure(width, height or max(260, 90 + 42 * len(bars)))
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
    return _save(fig, out)


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
    fig = _figure(width, height)
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
                linewidth=1, label="ceilings (timing model)" if i == 0 else None)
        # one line per ceiling, each with its own value and reason: ceilings that meet at
        # one level (K = 64, M = 64, N = 32 all halve the peak) still read apart
        ax.text(level / bw * 1.15, level / 1.04, ceiling_label(group), color="#555555",
                ha="left", va="top", fontsize=7.5, linespacing=1.3)
    by_pos: dict[tuple[float, float], list[dict[str, Any]]] = {}
    for p in points:
        by_pos.setdefault((round(p["intensity"], 6), round(p["tflops"], 6)), []).append(p)
    above, prev, below = False, (0.0, 0.0), False
    for j, ((x, y), group) in enumerate(sorted(by_pos.items())):
        # a label goes above right of its point, below right if the previous point's label
        # would be in the way
        below = not below and x < prev[0] * 1.2 and prev[1] / 1.3 < y < prev[1] * 1.3
        prev = (x, y)
        ax.scatter([x], [y], s=36, color="black", zorder=5,
                   label="workload ops (timing model)" if j == 0 else None)
        cap = group[0]["hbm_bound_tflops"]
        if cap < y:  # the model keeps operands on chip; HBM would hold the op down to here
            ax.plot([x, x], [cap, y], color="black", linestyle=":", linewidth=1)
            ax.scatter([x], [cap], s=30, marker="v", facecolors="white", edgecolors="black",
                       zorder=5, label=None if above else "same op, bound by HBM")
            above = True
        ax.annotate(", ".join(p["name"] for p in group), (x, y), fontsize=7.5,
                    xytext=(6, -12 if below else 6), textcoords="offset points")
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(y_lo, top * 1.8)
    for axis, (lo, hi) in ((ax.xaxis, (x_lo, x_hi)), (ax.yaxis, (y_lo, top * 1.8))):
        ticks = _nice_ticks(lo, hi)
        axis.set_ticks(ticks, [f"{t:g}" for t in ticks], fontsize=8)
    ax.set_xlabel("arithmetic intensity (FLOP per byte of HBM traffic)", fontsize=9)
    ax.set_ylabel("TFLOP/s", fontsize=9)
    ax.set_title(f"roofline of one {data['arch']} NeuronCore Tensor Engine "
                 f"({data['rows']}x{data['cols']} PEs at {data['clock_hz'] / 1e9:g} GHz)",
                 fontsize=10)
    ax.grid(which="both", alpha=0.2)
    ax.legend(loc="lower right", fontsize=8)
    return _save(fig, out)
