"""Index expressions of the older NKI API: ``nl.mgrid[0:P, 0:F]`` gives ``.p`` / ``.x``,
``nl.arange(n)[:, None]`` the partition axis; ``k * TILE_K + i.p`` is affine in one axis."""

from __future__ import annotations

from typing import Any

import numpy as np

from .record import fail

__all__ = ["Expr", "Grid", "Mask", "MultiExpr", "check_mask", "reduce_axis", "whole"]


def whole(x: object) -> bool:
    """An int (numpy's too), not a bool."""
    return isinstance(x, int | np.integer) and not isinstance(x, bool)


def reduce_axis(axis: object, what: str, where: tuple[str, int] | None = None) -> None:
    """A reduction's ``axis``: None, an int or a tuple/list of ints (which ones the
    operation accepts is its own check)."""
    if axis is None or whole(axis) or (isinstance(axis, tuple | list) and axis
                                       and all(whole(a) for a in axis)):
        return
    raise fail(f"{what} axis={axis!r}: an axis is an int or a tuple of ints (1 for the "
               f"free axis of a [P, F] tile)", where)


class Expr:
    """An affine index ``const + coef * i`` over one iteration axis of an ``nl.mgrid`` /
    ``nl.arange``; ``pos`` is the axis's place in the result (0 = partition, 1 = free).
    ``grid``: the shape of the ``nl.mgrid`` it came from (a dense grid: "each returned
    argument has the same shape", NKI docs, nki.language.mgrid), None for ``nl.arange``."""

    __slots__ = ("coef", "const", "grid", "pos", "size")

    def __init__(self, pos: int, size: int, const: int = 0, coef: int = 1,
                 grid: tuple[int, ...] | None = None) -> None:
        self.pos, self.size, self.const, self.coef = pos, size, const, coef
        self.grid = grid

    def __add__(self, other: object) -> Any:
        if whole(other):
            return Expr(self.pos, self.size, self.const + int(other),  # type: ignore
                        self.coef, self.grid)
        if isinstance(other, Expr | MultiExpr):
            return MultiExpr.of(self) + other
        raise fail(f"an index expression adds integers and other index expressions "
                   f"(k * TILE + i.p, i_f1 * F2 + i_f2), not {type(other).__name__}")

    __radd__ = __add__

    def __sub__(self, other: object) -> Any:
        if isinstance(other, Expr | MultiExpr):
            return self + other * -1
        return self + (-other)  # type: ignore[operator]

    def __rsub__(self, other: object) -> Any:
        return self * -1 + other

    def __neg__(self) -> Expr:
        return self * -1

    def __mul__(self, other: object) -> Expr:
        if whole(other):
            k = int(other)  # type: ignore[call-overload]
            return Expr(self.pos, self.size, self.const * k, self.coef * k, self.grid)
        raise fail("an index expression multiplies only by integers")

    __rmul__ = __mul__

    def _cmp(self, op: str, other: object) -> Mask:
        return MultiExpr.of(self)._cmp(op, other)

    def __lt__(self, other: object) -> Mask:  # type: ignore[override]
        return self._cmp("<", other)

    def __le__(self, other: object) -> Mask:  # type: ignore[override]
        return self._cmp("<=", other)

    def __gt__(self, other: object) -> Mask:  # type: ignore[override]
        return self._cmp(">", other)

    def __ge__(self, other: object) -> Mask:  # type: ignore[override]
        return self._cmp(">=", other)

    def values(self) -> range:
        """The index's values over its axis."""
        return range(self.const, self.const + self.coef * self.size, self.coef or 1) \
            if self.coef else range(self.const, self.const + 1)

    def __getitem__(self, key: object) -> Expr:
        """``nl.arange(n)[:, None]`` is the partition axis, ``[None, :]`` the free one;
        ``[None, :, None]`` the second free axis: the axis is where the slice stands."""
        if isinstance(key, tuple) and len(key) >= 2:
            pos = next((i for i, k in enumerate(key) if k is not None), 0)
            return Expr(pos, self.size, self.const, self.coef, self.grid)
        return self

    @property
    def p(self) -> Expr:  # pragma: no cover - grids give p/x, kept for symmetry
        return self


class MultiExpr:
    """An affine index over several iteration axes: ``const + sum(coef_k * i_k)``
    (``i_f1 * F2 + i_f2``; ``expr_a + expr_b`` of two nl.arange axes). ``terms`` are
    one-axis expressions with const 0, one per axis position, in order of position;
    ``grid`` the dense ``nl.mgrid`` shape they came from (:class:`Expr`)."""

    __slots__ = ("const", "grid", "terms")

    def __init__(self, terms: tuple[Expr, ...], const: int,
                 grid: tuple[int, ...] | None = None) -> None:
        self.terms, self.const, self.grid = terms, const, grid

    @staticmethod
    def of(e: Expr) -> MultiExpr:
        return MultiExpr((Expr(e.pos, e.size, 0, e.coef),), e.const, e.grid)

    def __add__(self, other: object) -> MultiExpr:
        if whole(other):
            return MultiExpr(self.terms, self.const + int(other),  # type: ignore[call-overload]
                             self.grid)
        if isinstance(other, Expr):
            other = MultiExpr.of(other)
        if not isinstance(other, MultiExpr):
            raise fail(f"an index expression adds integers and other index expressions, not "
                       f"{type(other).__name__}")
        by: dict[int, Expr] = {t.pos: t for t in self.terms}
        for t in other.terms:
            old = by.get(t.pos)
            if old is not None and old.size != t.size:
                raise fail(f"index expressions over axis {t.pos} of different sizes "
                           f"({old.size} and {t.size}) cannot be added")
            by[t.pos] = Expr(t.pos, t.size, 0, t.coef + (old.coef if old else 0))
        return MultiExpr(tuple(by[p] for p in sorted(by)),
                         self.const + other.const,
                         # an open nl.arange axis (None) takes the other's dense grid
                         self.grid if self.grid is not None else other.grid)

    __radd__ = __add__

    def __mul__(self, other: object) -> MultiExpr:
        if not whole(other):
            raise fail("an index expression multiplies only by integers")
        k = int(other)  # type: ignore[call-overload]
        return MultiExpr(tuple(Expr(t.pos, t.size, 0, t.coef * k) for t in self.terms),
                         self.const * k, self.grid)

    __rmul__ = __mul__

    def __sub__(self, other: object) -> MultiExpr:
        return self + (other * -1 if isinstance(other, Expr | MultiExpr)
                       else -other)  # type: ignore[operator]

    def __neg__(self) -> MultiExpr:
        return self * -1

    def bounds(self) -> tuple[int, int]:
        """The smallest and the largest value the index takes."""
        lo = self.const + sum(min(0, t.coef * (t.size - 1)) for t in self.terms)
        hi = self.const + sum(max(0, t.coef * (t.size - 1)) for t in self.terms)
        return lo, hi

    def _cmp(self, op: str, other: object) -> Mask:
        """``self op other`` as the clause ``self - other op 0``; other an integer or an
        index expression (``i_p < i_f``, ``i * 512 + i_f < 4000``)."""
        if whole(other) or isinstance(other, Expr | MultiExpr):
            return Mask(((self - other, op),))
        raise fail(f"a mask compares index expressions with integers or with each other "
                   f"(i * 128 + i_p < num_rows, i_p >= i_f), not {type(other).__name__}")

    def __lt__(self, other: object) -> Mask:  # type: ignore[override]
        return self._cmp("<", other)

    def __le__(self, other: object) -> Mask:  # type: ignore[override]
        return self._cmp("<=", other)

    def __gt__(self, other: object) -> Mask:  # type: ignore[override]
        return self._cmp(">", other)

    def __ge__(self, other: object) -> Mask:  # type: ignore[override]
        return self._cmp(">=", other)


def _span(s: object) -> str:
    if not isinstance(s, slice):
        return repr(s)
    parts = ["" if v is None else repr(v) for v in (s.start, s.stop, s.step)]
    return ":".join(parts if s.step is not None else parts[:2])


class Grid:
    """``nl.mgrid[0:P, 0:F, ...]``: ``.p``, ``.x``, ``.y``, ``.z`` (also unpackable as
    ``i_p, i_f, ...``)."""

    def __init__(self, spans: tuple[Any, ...]) -> None:
        for s in spans:
            if not isinstance(s, slice) or not whole(s.stop) or not all(
                    v is None or whole(v) for v in (s.start, s.step)):
                raise fail(f"nl.mgrid takes ranges start:stop[:step] of whole numbers with a "
                           f"stop (nl.mgrid[0:128, 0:512]), not {_span(s)}")
            if (s.step is not None and s.step < 1) or len(range(s.start or 0, s.stop)) < 1:
                raise fail(f"nl.mgrid range {_span(s)} must have a step of at least 1 and "
                           f"cover at least one index")
        sizes = tuple(len(range(s.start or 0, s.stop, s.step or 1)) for s in spans)
        self.axes = [Expr(i, n, s.start or 0, s.step or 1, sizes)
                     for i, (s, n) in enumerate(zip(spans, sizes, strict=True))]

    def _axis(self, i: int, name: str) -> Expr:
        if i >= len(self.axes):
            raise fail(f"nl.mgrid of {len(self.axes)} dimension(s) has no .{name} (.p, .x, .y, "
                       f".z name dimensions 1 to 4)")
        return self.axes[i]

    @property
    def p(self) -> Expr:
        return self._axis(0, "p")

    @property
    def x(self) -> Expr:
        return self._axis(1, "x")

    @property
    def y(self) -> Expr:
        return self._axis(2, "y")

    @property
    def z(self) -> Expr:
        """The fourth dimension (nki-samples' select_and_scatter: ``window.z`` of
        ``nl.mgrid[0:p, 0:w, 0:h, 0:w]``)."""
        return self._axis(3, "z")

    def __iter__(self) -> Any:
        return iter(self.axes)


_TESTS = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal}


class Mask:
    """An NKI mask: comparisons of affine index expressions, joined by ``&``; each clause
    is ``expr op 0`` (``i * 128 + i_p < num_rows`` is ``i_p + i * 128 - num_rows < 0``).
    ``grid()`` evaluates it over the iteration axes it names (position 0 the partition
    axis, 1.. the free axes, as ``nl.arange(n)[:, None]`` / ``nl.mgrid`` place them)."""

    __slots__ = ("clauses",)

    def __init__(self, clauses: tuple[tuple[MultiExpr, str], ...]) -> None:
        self.clauses = clauses

    def __and__(self, other: object) -> Mask:
        if isinstance(other, bool | np.bool_):
            return self if other else False  # type: ignore[return-value]
        if not isinstance(other, Mask):
            raise fail("a mask joins other masks (or True) with &")
        return Mask(self.clauses + other.clauses)

    __rand__ = __and__

    def __bool__(self) -> bool:
        raise fail("a mask is not a Python truth value: join comparisons with &, not `and`, "
                   "and pass it as mask=")

    def sizes(self) -> dict[int, int]:
        """Iteration axis position -> its size, for the axes the clauses name."""
        out: dict[int, int] = {}
        for e, _ in self.clauses:
            for t in e.terms:
                if out.setdefault(t.pos, t.size) != t.size:
                    raise fail(f"a mask compares index expressions over axis {t.pos} of "
                               f"different sizes ({out[t.pos]} and {t.size})")
        return out

    def grid(self) -> tuple[list[int], np.ndarray]:
        """(the positions named, in order; the selection as a bool array over them)."""
        sizes = self.sizes()
        pos = sorted(sizes)
        sel = np.ones([sizes[p] for p in pos], dtype=bool)
        for e, op in self.clauses:
            value = np.full(sel.shape, e.const, dtype=np.int64)
            for t in e.terms:
                shape = [1] * len(pos)
                shape[pos.index(t.pos)] = t.size
                value = value + (t.coef * np.arange(t.size, dtype=np.int64)).reshape(shape)
            sel &= _TESTS[op](value, 0)
        return pos, sel


def check_mask(mask: object, what: str, where: tuple[str, int] | None = None
               ) -> Mask | bool | None:
    """A call's ``mask=``: None when it selects everything (no mask, True, or a mask true
    everywhere), False when it selects nothing (the instruction is not made: a comparison
    of plain integers such as ``q_tile * 128 >= k_tile * 512``), else the Mask (applied by
    nki/mask.py)."""
    if mask is None or mask is True or (isinstance(mask, np.bool_) and bool(mask)):
        return None
    if mask is False or isinstance(mask, np.bool_):
        return False
    if not isinstance(mask, Mask):
        raise fail(f"{what}: mask= must be a comparison of index expressions "
                   f"(i * 128 + i_p < n), not {type(mask).__name__}", where)
    sel = mask.grid()[1]
    if sel.all():
        return None
    return mask if sel.any() else False
