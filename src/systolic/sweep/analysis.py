"""Reading a store: the feasible points, the best ones, the Pareto front of two figures.

A row is feasible when it ran (status ``ok``), has the objective and meets every constraint
of the sweep; only feasible rows are ranked. Directions: the objective's own, and for other
figures ``max:NAME`` / ``min:NAME``, else the default of the figure (``MAXIMIZE``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import SweepError
from .evaluate import MAXIMIZE
from .spec import _CONSTRAINT, Constraint, Objective

__all__ = ["best", "best_per", "direction", "feasible", "objective_of", "pareto"]


def objective_of(meta: dict[str, Any]) -> Objective:
    o = meta.get("objective") or {"figure": "latency_us", "maximize": False}
    return Objective(str(o["figure"]), bool(o["maximize"]))


def constraints_of(meta: dict[str, Any]) -> list[Constraint]:
    out = []
    for text in meta.get("constraints", []):
        m = _CONSTRAINT.match(text)
        if m is None:  # written by this module's own parser: cannot happen unless edited
            raise SweepError(f"the store's constraint {text!r} does not parse")
        field, op, raw = m.groups()
        try:
            value: float | str = float(raw)
        except ValueError:
            value = raw
        out.append(Constraint(field, op, value, text))
    return out


def _number(v: Any) -> float:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else math.nan


def feasible(rows: Sequence[dict[str, Any]], meta: dict[str, Any]) -> np.ndarray:
    """One bool per row: ran, has a numeric objective, meets every constraint."""
    obj = objective_of(meta)
    ok = np.array([r.get("status") == "ok" and not math.isnan(_number(r.get(obj.figure)))
                   for r in rows], dtype=bool)
    for c in constraints_of(meta):
        ok &= c.holds(np.array([r.get(c.field) for r in rows], dtype=object))
    return ok


def best(rows: Sequence[dict[str, Any]], meta: dict[str, Any], top: int = 10
         ) -> list[dict[str, Any]]:
    """The ``top`` feasible rows, best objective first (ties: sweep order)."""
    obj = objective_of(meta)
    idx = np.flatnonzero(feasible(rows, meta)).tolist()
    vals = np.array([_number(rows[i][obj.figure]) for i in idx])
    order = np.argsort(-vals if obj.maximize else vals, kind="stable")
    return [rows[idx[j]] for j in order[:top].tolist()]


def best_per(rows: Sequence[dict[str, Any]], meta: dict[str, Any], names: Sequence[str]
             ) -> list[dict[str, Any]]:
    """The best feasible row of each combination of the inputs ``names`` (the best block
    size per shape and arch), in the order the combinations first appear in the sweep; a
    combination with no feasible row is left out."""
    for name in names:
        if name not in meta.get("inputs", []):
            raise SweepError(f"--best-per {name}: not an input of this sweep; inputs: "
                             f"{', '.join(meta.get('inputs', []))}")
    out: dict[tuple[str, ...], dict[str, Any]] = {}
    for r in best(rows, meta, len(rows)):  # best first: the first of each group wins
        out.setdefault(tuple(str(r.get(n)) for n in names), r)
    first: dict[tuple[str, ...], int] = {}
    for i, r in enumerate(rows):
        first.setdefault(tuple(str(r.get(n)) for n in names), i)
    return [out[g] for g in sorted(out, key=lambda g: first[g])]


def direction(spec: str, meta: dict[str, Any]) -> tuple[str, bool]:
    """``max:NAME`` / ``min:NAME`` / ``NAME`` -> (NAME, maximize)."""
    way, sep, name = spec.partition(":")
    if sep:
        if way not in ("max", "min"):
            raise SweepError(f"{spec!r}: write max:NAME or min:NAME")
        return name, way == "max"
    obj = objective_of(meta)
    return spec, (obj.maximize if spec == obj.figure else spec in MAXIMIZE)


def pareto(rows: Sequence[dict[str, Any]], meta: dict[str, Any], x: str, y: str
           ) -> list[dict[str, Any]]:
    """Feasible rows no other feasible row beats on both ``x`` and ``y`` (each ``NAME`` or
    ``max:NAME``/``min:NAME``); sorted by x, best first. Equal points are all kept."""
    (xn, xmax), (yn, ymax) = direction(x, meta), direction(y, meta)
    for name in (xn, yn):
        if not any(name in r for r in rows):
            raise SweepError(f"--pareto: no row has {name!r}; columns: "
                             f"{', '.join(sorted({k for r in rows for k in r}))}")
        texts = [r[name] for r in rows if name in r and math.isnan(_number(r[name]))
                 and r[name] is not None]
        if texts and not any(not math.isnan(_number(r.get(name))) for r in rows):
            raise SweepError(f"--pareto: {name} is not a number (values like "
                             f"{texts[0]!r}); name two numeric figures or inputs")
    idx = [i for i in np.flatnonzero(feasible(rows, meta)).tolist()
           if not math.isnan(_number(rows[i].get(xn))) and
           not math.isnan(_number(rows[i].get(yn)))]
    # Minimise both after flipping the maximised ones; sort by x then y, sweep y's best.
    pts = sorted(((-1 if xmax else 1) * _number(rows[i][xn]),
                  (-1 if ymax else 1) * _number(rows[i][yn]), i) for i in idx)
    front: list[int] = []
    best_y = math.inf
    j = 0
    while j < len(pts):  # a run of equal x: only its lowest y (and its ties) can be on it
        k = j
        while k < len(pts) and pts[k][0] == pts[j][0]:
            k += 1
        low = pts[j][1]
        if low < best_y:
            front.extend(p[2] for p in pts[j:k] if p[1] == low)
            best_y = low
        j = k
    return [rows[i] for i in front]
