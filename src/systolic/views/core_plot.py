"""The timeline: the rows of a whole-core profile drawn as a PNG or SVG (the same rows as
``--trace``'s "NeuronCore" process, :mod:`systolic.views.profile_rows`).

Rows, top to bottom: Tensor (LDWEIGHTS), TensorMatrix (MATMUL), Vector, Scalar, GpSimd,
then the DMA engines. DMA engines whose slices are identical (a 128-partition transfer uses
all 16) share one row named for the range ("DMA engines 0-15"); idle ones are named too, so
every engine and queue is accounted for. A MatMul's bar ends where the next MatMul starts
(its fill and drain run under the next one), as in the trace.

The top panel spans the whole run (microseconds below, TensorE cycles above) and draws
small events as :data:`systolic.views.plot_base.OVERVIEW_NOTE` says (the caption repeats it);
when there are more than ``ZOOM_MATMULS`` MatMuls a second panel zooms on the start of
the run up to the end of that many, one bar per instruction. The title carries the
latency, the achieved rate, the hfu and what bounds the run (:mod:`systolic.timing.core`).
"""

from __future__ import annotations

import os
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..timing.core import CAUSES, CoreTiming
from .plot_base import OVERVIEW_NOTE, check_plot_path, figure, row_ink, save, thousands
from .profile_rows import ProfileRow, profile_rows

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["ZOOM_MATMULS", "PlotRow", "core_timeline_plot", "plot_rows"]

ZOOM_MATMULS = 16  # the zoom panel ends with this many MatMuls, one bar each
ZOOM_MIN_HEIGHT = 450  # pixels: a smaller figure has room for the overview only
# Okabe-Ito colours (distinguishable with the common colour-vision deficiencies).
_COLOURS = {"Tensor": "#e69f00", "TensorMatrix": "#0072b2", "Vector": "#009e73",
            "Scalar": "#cc79a7", "GpSimd": "#56b4e9"}
_DMA = "#d55e00"


@dataclass(frozen=True, eq=False)
class PlotRow:
    """One drawn row: its label, colour, slices [lo, hi) in ticks (as the trace shows
    them) and its busy share of the run (the union of its ops' full intervals)."""

    label: str
    colour: str
    lo: np.ndarray
    hi: np.ndarray
    busy: float
    queues: int  # profile rows merged into this one (DMA engines with identical slices)


def _same(a: ProfileRow, b: ProfileRow) -> bool:
    return bool(np.array_equal(a.starts, b.starts) and np.array_equal(a.shown, b.shown))


def plot_rows(core: CoreTiming) -> list[PlotRow]:
    """The rows the timeline draws: every engine row, then the DMA engines, consecutive
    queues with identical slices merged into one row."""
    lat = core.latency or 1
    out: list[PlotRow] = []
    groups: list[list[ProfileRow]] = []
    for row in profile_rows(core):
        if not row.queue.startswith("dma"):
            out.append(PlotRow(row.label, _COLOURS[row.name], row.starts, row.shown,
                               row.busy_ticks() / lat, 1))
        elif groups and _same(groups[-1][-1], row):
            groups[-1].append(row)
        else:
            groups.append([row])
    for g in groups:
        first, last = g[0].name.split()[-1], g[-1].name.split()[-1]
        label = g[0].name if len(g) == 1 else f"DMA engines {first}-{last}"
        out.append(PlotRow(label, _DMA, g[0].starts, g[0].shown, g[0].busy_ticks() / lat,
                           len(g)))
    return out


def _draw(ax: Axes, rows: list[PlotRow], span: tuple[float, float], us: float,
          pixels: int, *, separate: bool) -> None:
    """One broken_barh per row, in microseconds; ``separate`` draws every op with an edge,
    else what :func:`systolic.views.plot_base.row_ink` says, with each row's busy share."""
    import matplotlib.colors as mcolors

    labels = []
    for r, row in enumerate(rows):
        y = len(rows) - 1 - r
        lo, hi = row.lo * us, row.hi * us
        keep = (hi > span[0]) & (lo < span[1])
        lo, hi = lo[keep], hi[keep]
        labels.append(row.label if separate else
                      f"{row.label}  {100 * row.busy:.1f}%" if len(row.lo) else
                      f"{row.label}  idle")
        if not len(lo):
            continue
        if separate:  # one bar per op, under a pixel drawn a pixel wide
            px = (span[1] - span[0]) / pixels
            hi = np.maximum(hi, lo + px)
            ax.broken_barh(list(zip(lo, hi - lo, strict=True)), (y - 0.35, 0.7),
                           facecolors=row.colour, edgecolors="white",  # no edge to hide
                           linewidths=np.where(hi - lo > 3 * px, 0.6, 0.0))  # a thin bar
            continue
        how, a, b = row_ink(lo, hi, span, pixels)
        if how == "bars":
            ax.broken_barh(list(zip(a, b - a, strict=True)), (y - 0.35, 0.7),
                           facecolors=row.colour)
            continue
        rgb = np.array(mcolors.to_rgb(row.colour))
        # white -> colour by strength, per pixel column (b in [0, 1]: busy_per_bin)
        shades = 1 - b[:, None] * (1 - rgb)
        # one image row: no seams between columns, whatever the axes' pixel width
        ax.imshow(shades[None, :, :], extent=(a[0], a[-1], y - 0.35, y + 0.35),
                  aspect="auto", interpolation="nearest", zorder=2)
    ax.set_yticks(range(len(rows)), list(reversed(labels)), fontsize=7.5)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_xlim(*span)
    ax.grid(axis="x", alpha=0.3)
    ax.tick_params(axis="x", labelsize=8)


def core_timeline_plot(core: CoreTiming, path: str | os.PathLike[str], *,
                       width: int = 1200, height: int = 520, title: str = "",
                       subtitle: str = "") -> Path:
    """Write the timeline of ``core`` to ``path`` (.png or .svg; module docstring).

    ``title`` names the run (default: its format and arch); ``subtitle`` adds a line under
    the whole-core figures."""
    out = check_plot_path(path)
    rows = plot_rows(core)
    us = 1e6 / core.tick_hz
    end = max(core.latency, 1) * us
    mm = next((r for r in rows if r.label.startswith("TensorMatrix")), None)
    n_mm = len(mm.lo) if mm is not None else 0
    zoom = n_mm > ZOOM_MATMULS and height >= ZOOM_MIN_HEIGHT
    fig = figure(width, height)
    axes = fig.subplots(2 if zoom else 1, 1, squeeze=False,
                        height_ratios=[3, 2] if zoom else [1])[:, 0]
    head = title or f"{core.fmt} on {core.arch.name}"
    lat = core.latency or 1
    bound = core.bound
    lines = [head, f"whole NeuronCore: {core.latency_us:,.2f} us, {core.tflops:.2f} of "
             f"{core.peak_tflops:.2f} TFLOP/s (hfu {100 * core.hfu:.1f}%), bound by "
             f"{CAUSES[bound]} ({100 * core.bound_ticks[bound] / lat:.0f}% of the critical "
             f"path)"]
    chars = max(30, int(width / 7))  # about 7 pixels a character at this font size
    fig.suptitle("\n".join(textwrap.fill(t, chars) for t in [*lines, subtitle] if t),
                 fontsize=9.5)
    pixels = int(width * 0.8)  # about the axes' width: the labels take the rest
    _draw(axes[0], rows, (0.0, end), us, pixels, separate=False)
    axes[0].axvline(end, color="#d55e00", linewidth=1, linestyle="--")
    clock = core.arch.clock_hz
    top = axes[0].secondary_xaxis("top", functions=(lambda t: t * clock / 1e6,
                                                    lambda c: c / clock * 1e6))
    top.set_xlabel("TensorE cycles", fontsize=8)
    top.tick_params(labelsize=8)
    top.xaxis.set_major_formatter(thousands())
    axes[0].set_title(textwrap.fill(OVERVIEW_NOTE.replace("\n", " "),
                                    max(40, int(width * 0.8 / 5))),
                      fontsize=7, loc="left", pad=20)
    axes[-1].set_xlabel("microseconds", fontsize=8)
    if zoom and mm is not None:
        stop = float(mm.hi[ZOOM_MATMULS - 1]) * us  # the end of the last zoomed MatMul
        busy = [r for r in rows if len(r.lo)]
        _draw(axes[1], busy, (0.0, stop * 1.04), us, pixels, separate=True)
        axes[1].set_title(f"zoom: from the start to the first {ZOOM_MATMULS} of {n_mm:,} "
                          f"MatMuls, one bar per instruction (under a pixel: 1 pixel; a MatMul's "
                          f"bar ends where the next starts); idle rows left out", fontsize=8)
    return save(fig, out)
