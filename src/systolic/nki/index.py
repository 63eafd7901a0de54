"""Index expressions of the older NKI API: ``nl.mgrid[0:P, 0:F]`` gives ``.p`` / ``.x``,
``nl.arange(n)[:, None]`` the partition axis; ``k * TILE_K + i.p`` is affine in one axis."""

from __future__ import annotations

from typing import Any

from .record import fail

__all__ = ["Expr", "Grid"]


class Expr:
    """An affine index ``const + coef * i`` over one iteration axis of an ``nl.mgrid`` /
    ``nl.arange``; ``pos`` is the axis's place in the result (0 = partition, 1 = free)."""

    __slots__ = ("coef", "const", "pos", "size")

    def __init__(self, pos: int, size: int, const: int = 0, coef: int = 1) -> None:
        self.pos, self.size, self.const, self.coef = pos, size, const, coef

    def __add__(self, other: object) -> Expr:
        if isinstance(other, int):
            return Expr(self.pos, self.size, self.const + other, self.coef)
        raise fail("an index expression adds only integers (k * TILE + i.p); two iteration "
                   "axes in one index are not supported")

    __radd__ = __add__

    def __sub__(self, other: int) -> Expr:
        return self + (-other)

    def __mul__(self, other: object) -> Expr:
        if isinstance(other, int):
            return Expr(self.pos, self.size, self.const * other, self.coef * other)
        raise fail("an index expression multiplies only by integers")

    __rmul__ = __mul__

    def __getitem__(self, key: object) -> Expr:
        """``nl.arange(n)[:, None]`` is the partition axis, ``[None, :]`` the free one."""
        if isinstance(key, tuple) and len(key) == 2:
            return Expr(0 if key[1] is None else 1, self.size, self.const, self.coef)
        return self

    @property
    def p(self) -> Expr:  # pragma: no cover - grids give p/x, kept for symmetry
        return self


class Grid:
    """``nl.mgrid[0:P, 0:F]``: ``.p`` and ``.x`` (also unpackable as ``i_p, i_f``)."""

    def __init__(self, spans: tuple[slice, ...]) -> None:
        self.axes = [Expr(i, (s.stop - (s.start or 0)) // (s.step or 1), s.start or 0,
                          s.step or 1) for i, s in enumerate(spans)]

    @property
    def p(self) -> Expr:
        return self.axes[0]

    @property
    def x(self) -> Expr:
        return self.axes[1]

    @property
    def y(self) -> Expr:
        return self.axes[2]

    def __iter__(self) -> Any:
        return iter(self.axes)
