"""The notebook view of a product (``MatmulResult._repr_html_``): its report table and an
inline-SVG timeline of the whole core."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

import numpy as np

from ..geometry import interval_union
from ..timing.core import CoreTiming
from .plot_base import busy_per_bin
from .profile_rows import profile_rows

if TYPE_CHECKING:
    from ..api import MatmulResult

__all__ = ["result_html", "timeline_svg"]

_SVG_COLOURS = {"tensor": "#0072b2", "vector": "#009e73", "scalar": "#cc79a7",
                "gpsimd": "#e69f00"}
_DMA_COLOUR = "#d55e00"


def timeline_svg(core: CoreTiming, width: int = 720, bins: int = 360) -> str:
    """An inline-SVG timeline of the whole core: the profile's rows (Tensor (LDWEIGHTS),
    TensorMatrix (MATMUL), Vector, Scalar, GpSimd, the DMA queues; idle rows left out), the
    same rows as the trace and ``--timeline`` (:mod:`systolic.views.profile_rows`).

    Up to ``bins`` intervals per row are drawn as they are (at least half a pixel wide); more
    are drawn as ``bins`` columns shaded by the fraction of the column the row is busy."""
    rows = [r for r in profile_rows(core) if len(r.ops)]
    span = max(core.latency, 1)
    left, lane = 150, 22
    scale = (width - left) / span
    us = 1e6 / core.tick_hz
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' "
             f"height='{lane * len(rows) + 18}' font-family='sans-serif' font-size='11'>"]
    for r, row in enumerate(rows):
        y = r * lane + 2
        colour = "#56b4e9" if row.what == "LDWEIGHTS" else _SVG_COLOURS.get(row.queue,
                                                                             _DMA_COLOUR)
        parts.append(f"<text x='2' y='{y + 14}'>{html.escape(row.label)}</text>")
        lo, hi = interval_union(row.starts, row.ends)
        if len(lo) <= bins:
            parts.extend(f"<rect x='{left + a * scale:.2f}' y='{y}' "
                         f"width='{max((b - a) * scale, 0.5):.2f}' height='{lane - 6}' "
                         f"fill='{colour}'><title>{html.escape(row.label)} "
                         f"{a * us:,.3f}-{b * us:,.3f} us</title></rect>"
                         for a, b in zip(lo.tolist(), hi.tolist(), strict=True))
            continue
        busy = busy_per_bin(lo, hi, np.linspace(0, span, bins + 1))
        w = (width - left) / bins
        parts.extend(f"<rect x='{left + j * w:.2f}' y='{y}' width='{w:.2f}' "
                     f"height='{lane - 6}' fill='{colour}' fill-opacity='{f:.2f}'/>"
                     for j, f in enumerate(busy.tolist()) if f > 0.005)
    parts.append(f"<text x='{left}' y='{lane * len(rows) + 14}'>0</text>"
                 f"<text x='{width - 4}' y='{lane * len(rows) + 14}' text-anchor='end'>"
                 f"{core.latency_us:,.2f} us</text></svg>")
    return "".join(parts)


def result_html(result: MatmulResult) -> str:
    """Notebook view of a :class:`~systolic.api.MatmulResult`: report table and the
    whole-core timeline."""
    rep = result.report
    return (f"<div><p><code>{html.escape(repr(result))}</code></p>{rep.to_html()}"
            f"{timeline_svg(rep.core)}</div>")
