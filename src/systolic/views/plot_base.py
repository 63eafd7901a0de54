"""What every figure shares: the pixel-exact matplotlib figure, the artifact writer, the
path check, and how small events are drawn honestly in an overview (issue 13, 3.10).

matplotlib (a regular dependency) is imported inside the functions (it is slow to import,
and a broken or missing install then fails as one line naming ``systolic[plots]``), on the
Agg canvas, so no display is needed. A figure is sized in pixels: figsize = pixels / DPI,
so a PNG comes out exactly ``width`` x ``height`` pixels.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..artifacts import check_artifact_path, open_artifact
from ..errors import SystolicError
from ..geometry import interval_union

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["DPI", "MIN_TINT", "OVERVIEW_NOTE", "SPARSE", "SUFFIXES", "PlotDependencyError",
           "busy_per_bin", "check_plot_path", "figure", "row_ink", "save", "thousands"]

DPI = 100
SUFFIXES = (".png", ".svg")


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


def figure(width: int, height: int) -> Figure:
    """An empty figure of exactly ``width`` x ``height`` pixels on the Agg canvas."""
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


def save(fig: Figure, path: Path) -> Path:
    """Write ``fig`` in the format its suffix names, through the artifact writer."""
    with open_artifact(path, "plot", binary=True) as f:
        fig.savefig(f, dpi=DPI, format=path.suffix.lower()[1:])
    return path


def thousands() -> Any:
    """A tick formatter with thousands separators."""
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _: f"{v:,.0f}")


def busy_per_bin(lo: np.ndarray, hi: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Fraction of each [edges[j], edges[j+1]) covered by disjoint sorted intervals."""
    covered = np.concatenate([[0], np.cumsum(hi - lo)]).astype(np.float64)

    def before(t: np.ndarray) -> np.ndarray:  # busy time in [0, t)
        k = np.searchsorted(lo, t, side="right")
        prev = np.maximum(k - 1, 0)
        inside = np.where(k > 0, np.clip(t - lo[prev], 0, hi[prev] - lo[prev]), 0)
        return covered[prev] * (k > 0) + inside

    # a fraction by definition: the differences of float running sums stray by ~1e-14 past
    # 0 and 1, which made matplotlib warn "Clipping input data to the valid range for imshow"
    # on every tinted row (issue 22); clipped here, where the error arises
    return np.clip(np.diff(before(edges)) / np.diff(edges), 0.0, 1.0)


# Drawing small events honestly in the overview (issue 13, 3.10): a bar narrower than a
# pixel is widened to one pixel only while the row has few bars (at most one per SPARSE
# pixels), so widened bars cannot merge into a solid band; a denser row is drawn as one
# tint per pixel column, its strength the column's true busy share (MIN_TINT for any work
# at all, so a 1%-busy row stays visible without looking busy). The caption says so.
SPARSE = 3
MIN_TINT = 0.2
OVERVIEW_NOTE = (f"overview: a bar under 1 pixel is drawn 1 pixel wide while its row has at "
                 f"most 1 bar per {SPARSE} pixels; a denser row is tinted per pixel by its "
                 f"busy share\n(any work: at least {MIN_TINT:.0%}); beside each row name, the "
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
    busy = busy_per_bin(lo.astype(np.float64), hi.astype(np.float64), edges)
    return "tint", edges, np.where(busy > 0, MIN_TINT + (1 - MIN_TINT) * busy, 0.0)
