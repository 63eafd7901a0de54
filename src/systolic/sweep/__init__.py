"""Sweeps and autotuning: many timing runs over a grid or a sample, into a store that
survives a crash (docs/sweep.md).

    import systolic.sweep as sw
    table = sw.run("examples/sweeps/swiglu_array_hbm.yaml", out="swiglu.sqlite")
    table = sw.load("swiglu.sqlite")         # pandas DataFrame if pandas is installed

The pieces: :mod:`.spec` (the sweep file; :mod:`.axes` its values, :mod:`.overrides` the
Arch fields), :mod:`.evaluate` (what a point runs),
:mod:`.store` (SQLite), :mod:`.executors` (serial, process pool, Dask), :mod:`.runner`
(resume and write), :mod:`.analysis` (best, Pareto), :mod:`.plot`.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import yaml

from .analysis import best, feasible, pareto
from .evaluate import evaluate_point
from .runner import Summary, execute
from .spec import SweepSpec, load_sweep, parse_sweep
from .store import read_rows

__all__ = ["Summary", "SweepSpec", "best", "evaluate_point", "execute", "feasible", "load",
           "load_sweep", "pareto", "parse_sweep", "run", "table"]


def table(rows: list[dict[str, Any]]) -> Any:
    """A pandas DataFrame of the rows if pandas is installed, else the rows themselves."""
    try:
        import pandas as pd
    except ImportError:
        return rows
    return pd.DataFrame(rows)


def load(results: str | os.PathLike[str]) -> Any:
    """Every row of a store, in sweep order, as :func:`table` gives it; with a ``feasible``
    column (ran and met the sweep's constraints)."""
    rows, meta = read_rows(results)
    for r, ok in zip(rows, feasible(rows, meta), strict=True):
        r["feasible"] = bool(ok)
    return table(rows)


def run(spec: SweepSpec | str | os.PathLike[str] | dict[str, Any],
        out: str | os.PathLike[str] | None = None, **options: Any) -> Any:
    """Run a sweep (a :class:`SweepSpec`, a sweep file's path, or its content as a dict,
    whose relative paths are then taken from the current directory) and return its
    results table (:func:`load`). ``out`` is the store (a temporary one if None); the
    options are those of :func:`~systolic.sweep.runner.execute` (``workers``, ``dask``,
    ``executor``, ``retry_failed``, ``progress``)."""
    if isinstance(spec, dict):
        spec = parse_sweep(yaml.safe_dump(spec, sort_keys=False), "<dict>")
    elif not isinstance(spec, SweepSpec):
        spec = load_sweep(spec)
    if out is not None:
        execute(spec, out, **options)
        return load(out)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "sweep.sqlite")
        execute(spec, path, **options)
        return load(path)
