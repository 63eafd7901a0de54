"""``sweep show --plot``: the objective against one axis (best value per x) or two (a
heatmap of the best value per cell; by default the first two axes that vary, ``--x`` alone
asks for one), and with ``--pareto X,Y`` a second panel of the two
figures with the Pareto front drawn; the front's points are ringed in the first panel too.
Only feasible points are drawn; a cell with none is grey. matplotlib is imported lazily."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from ..artifacts import open_artifact
from ..errors import SweepError
from .analysis import direction, feasible, objective_of, pareto

__all__ = ["sweep_plot"]

DPI = 100
_BEST, _ALL, _FRONT = "#0072b2", "#999999", "#d55e00"  # Okabe-Ito


def _sortable(values: list[Any]) -> list[Any]:
    try:
        return sorted(set(values))
    except TypeError:
        return sorted(set(values), key=str)


def _label(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def _numeric(values: list[Any]) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def sweep_plot(rows: list[dict[str, Any]], meta: dict[str, Any], path: str,
               x: str | None = None, y: str | None = None,
               pareto_of: list[str] | None = None, width: int = 1200,
               height: int = 520) -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    out = Path(path)
    obj = objective_of(meta)
    ok = feasible(rows, meta)
    good = [r for r, f in zip(rows, ok, strict=True) if f]
    if not good:
        raise SweepError("no feasible point to plot (all failed or broke a constraint)")
    # One name per axis (a zipped axis such as rows,cols plots as its first name).
    varied = [names[0] for names in meta.get("axes", [])
              if len({str(r.get(names[0])) for r in good}) > 1]
    if x is None:  # neither named: the first two axes that vary (a heatmap), or the one
        if not varied:
            raise SweepError("the sweep has no axis with more than one value; name one "
                             "with --x")
        x, y = varied[0], y or (varied[1] if len(varied) > 1 else None)
    for name in (x, y):
        if name is not None and not any(name in r for r in rows):
            raise SweepError(f"--plot: no input or figure {name!r}; inputs: "
                             f"{', '.join(meta.get('inputs', []))}")
    front = pareto(rows, meta, *pareto_of) if pareto_of else []
    front_ids = {id(r) for r in front}
    fig = Figure(figsize=(width / DPI, height / DPI), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    panels = fig.subplots(1, 2 if pareto_of else 1, squeeze=False)[0]
    way = "max" if obj.maximize else "min"
    fig.suptitle(str(meta.get("name", "")), fontsize=12)
    title = f"{way} {obj.figure}" + ("" if y is None else " (best point per cell)")
    if y is None:
        _line(panels[0], good, x, obj.figure, obj.maximize, front_ids)
    else:
        _heatmap(fig, panels[0], good, x, y, obj.figure, obj.maximize, front_ids)
    panels[0].set_title(title, fontsize=11)
    if pareto_of:
        _pareto_panel(panels[1], good, front, pareto_of, meta)
    with open_artifact(out, "plot", binary=True) as f:
        fig.savefig(f, dpi=DPI, format=out.suffix.lower()[1:])
    return out


def _best_of(rows: list[dict[str, Any]], figure: str, maximize: bool) -> dict[str, Any]:
    pick = max if maximize else min
    return pick(rows, key=lambda r: float(r[figure]))


def _line(ax: Any, good: list[dict[str, Any]], x: str, fig_name: str, maximize: bool,
          front_ids: set[int]) -> None:
    xs = _sortable([r[x] for r in good if x in r])
    numeric = _numeric(xs)
    pos = {v: (v if numeric else i) for i, v in enumerate(xs)}
    ax.scatter([pos[r[x]] for r in good], [r[fig_name] for r in good], s=10, color=_ALL,
               alpha=0.5, label="every feasible point")
    bests = [_best_of([r for r in good if r[x] == v], fig_name, maximize) for v in xs]
    ax.plot([pos[v] for v in xs], [b[fig_name] for b in bests], "-o", color=_BEST, ms=4,
            label=f"best per {x}")
    ring = [r for r in good if id(r) in front_ids]
    if ring:
        ax.scatter([pos[r[x]] for r in ring], [r[fig_name] for r in ring], s=80,
                   facecolors="none", edgecolors=_FRONT, linewidths=1.5, label="Pareto front")
    top = _best_of(good, fig_name, maximize)
    ax.scatter([pos[top[x]]], [top[fig_name]], marker="*", s=220, color=_FRONT, zorder=5,
               label=f"best: {_label(top[fig_name])}")
    if numeric and min(xs) > 0 and max(xs) / min(xs) >= 16:
        ax.set_xscale("log", base=2)
    if not numeric:
        ax.set_xticks(range(len(xs)), [_label(v) for v in xs])
    ax.set_xlabel(x)
    ax.set_ylabel(fig_name)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def _heatmap(fig: Any, ax: Any, good: list[dict[str, Any]], x: str, y: str, fig_name: str,
             maximize: bool, front_ids: set[int]) -> None:
    xs = _sortable([r[x] for r in good if x in r])
    ys = _sortable([r[y] for r in good if y in r])
    ix, iy = {v: i for i, v in enumerate(xs)}, {v: i for i, v in enumerate(ys)}
    grid = np.full((len(ys), len(xs)), math.nan)
    ring = np.zeros_like(grid, dtype=bool)
    for r in good:
        if x not in r or y not in r:
            continue
        j, i, v = iy[r[y]], ix[r[x]], float(r[fig_name])
        cur = grid[j, i]
        if math.isnan(cur) or (v > cur if maximize else v < cur):
            grid[j, i] = v
        ring[j, i] |= id(r) in front_ids
    from matplotlib import colormaps

    # bright = good either way; cells no point reached (NaN) grey
    cmap = colormaps["viridis" if maximize else "viridis_r"].with_extremes(bad="#dddddd")
    lo, hi = np.nanmin(grid), np.nanmax(grid)
    norm = None
    if lo > 0 and hi / lo >= 20:  # figures spanning decades: equal steps per decade
        from matplotlib.colors import LogNorm

        norm = LogNorm(lo, hi)
    im = ax.imshow(grid, origin="lower", aspect="auto", cmap=cmap, norm=norm)
    fig.colorbar(im, ax=ax, label=f"best {fig_name} per cell")
    if grid.size <= 400:
        for (j, i), v in np.ndenumerate(grid):
            if not math.isnan(v):
                frac = float(im.norm(v)) if hi > lo else 0.5
                light = frac > 0.5 if not maximize else frac < 0.5
                ax.text(i, j, f"{v:.3g}", ha="center", va="center", fontsize=8,
                        color="white" if light else "black")
    jj, ii = np.nonzero(ring)
    if len(ii):
        ax.scatter(ii, jj, s=600, facecolors="none", edgecolors=_FRONT, linewidths=2,
                   label="holds a Pareto-front point")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0, -0.12))
    jb, ib = np.unravel_index(np.nanargmax(grid) if maximize else np.nanargmin(grid),
                              grid.shape)
    # in the best cell's top-left corner: on its centre the star hid the cell's value
    ax.scatter([ib - 0.32], [jb + 0.28], marker="*", s=160, color=_FRONT, zorder=5)
    ax.set_xticks(range(len(xs)), [_label(v) for v in xs])
    ax.set_yticks(range(len(ys)), [_label(v) for v in ys])
    ax.set_xlabel(x)
    ax.set_ylabel(y)


def _pareto_panel(ax: Any, good: list[dict[str, Any]], front: list[dict[str, Any]],
                  names: list[str], meta: dict[str, Any]) -> None:
    (xn, xmax), (yn, ymax) = direction(names[0], meta), direction(names[1], meta)
    pts = [r for r in good if xn in r and yn in r]
    ax.scatter([r[xn] for r in pts], [r[yn] for r in pts], s=10, color=_ALL, alpha=0.5,
               label="feasible points")
    ax.plot([r[xn] for r in front], [r[yn] for r in front], "-o", color=_FRONT, ms=6,
            label=f"Pareto front ({len(front)})")
    ax.set_xlabel(f"{xn} ({'higher' if xmax else 'lower'} is better)")
    ax.set_ylabel(f"{yn} ({'higher' if ymax else 'lower'} is better)")
    ax.set_title(f"Pareto front of {xn} and {yn}", fontsize=11)
    for axis, name in ((ax.xaxis, xn), (ax.yaxis, yn)):
        vals = [float(r[name]) for r in pts]
        if vals and min(vals) > 0 and max(vals) / min(vals) >= 20:
            (ax.set_xscale if axis is ax.xaxis else ax.set_yscale)("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
