"""SPMD launches: ``kernel[grid](...)`` runs one program instance per grid point.

``kernel[4, 2](a, b)`` (NKI docs, "SPMD programming model"; aws-neuron-sdk
``nki/test/test_nki_spmd_grid.py``) runs the kernel body 8 times; inside, ``nl.program_id(axis)``
is the instance's grid coordinate, ``nl.num_programs(axis)`` the grid's extent and
``nl.program_ndim()`` its rank. All instances are recorded into ONE Program, in row-major
grid order, which gives the values (the instances write disjoint parts of their outputs).
The instances share their device-memory tensors: the ``nl.ndarray(..., buffer=nl.shared_hbm)``
that instance k makes at a line is the one instance 0 made there, so each instance writes its
part of the one output; the launch returns instance 0's result.

NeuronCores (nki.language.nc / spmd_dim): an axis written ``nl.spmd_dim(2, nl.nc(2))`` (or
``2 * nl.nc(2)``) has 4 instances, instance n on core n % 2; ``nl.spmd_dim(nl.nc(2), 2)``
(``nl.nc(2) * 2``) has instance n on core n // 2; ``nl.nc(2)`` alone, instance n on core n.
Each core's instances are timed as that core's own Program (nki/cores.py), the launch as the
longest core. A launch that names no core runs on one NeuronCore (unsure: how the runtime
places such instances is not published).
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod
from typing import Any

from ..errors import KernelError
from .record import _STACK, ThreadStack, current, fail, here
from .run import Kernel, values
from .tensor import Tensor, View

__all__ = ["NC", "Launch", "SpmdDim", "SpmdKernel", "core_of", "jit", "nc", "num_programs",
           "program_id", "program_ndim", "spmd_dim"]

# the grid of the launch being recorded and the current instance's coordinates
_GRID: ThreadStack[tuple[tuple[int, ...], tuple[int, ...]]] = ThreadStack()


class NC:
    """``nl.nc(n)``: a grid factor of ``n`` instances, one per NeuronCore."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __mul__(self, other: object) -> SpmdDim:
        return spmd_dim(self, other)

    def __rmul__(self, other: object) -> SpmdDim:
        return spmd_dim(other, self)

    def __repr__(self) -> str:
        return f"nl.nc({self.n})"


class SpmdDim:
    """``nl.spmd_dim(*factors)``: one grid axis of prod(factors) instances; an instance's
    index on the axis is mixed-radix over the factors (the first outermost), and the digits
    of ``nl.nc`` factors say its NeuronCore."""

    def __init__(self, factors: tuple[tuple[int, bool], ...]) -> None:
        self.factors = factors  # (size, names cores)

    def __mul__(self, other: object) -> SpmdDim:
        return spmd_dim(self, other)

    def __rmul__(self, other: object) -> SpmdDim:
        return spmd_dim(other, self)


def nc(n: Any, **kw: Any) -> NC:
    """``nl.nc(n)``: ``n`` instances of a grid axis, on ``n`` NeuronCores."""
    if kw or isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise fail(f"nl.nc(n) takes a positive number of NeuronCores, not {n!r}")
    return NC(int(n))


def spmd_dim(*factors: Any, **kw: Any) -> SpmdDim:
    """``nl.spmd_dim(a, b, ...)``: a grid axis of a * b * ... instances; an ``nl.nc(n)``
    factor places them on NeuronCores (module docstring)."""
    if kw or not factors:
        raise fail("nl.spmd_dim takes the axis's factors: whole numbers and nl.nc(n)")
    out: list[tuple[int, bool]] = []
    for f in factors:
        if isinstance(f, SpmdDim):
            out.extend(f.factors)
        elif isinstance(f, NC):
            out.append((f.n, True))
        elif isinstance(f, int) and not isinstance(f, bool) and f >= 1:
            out.append((int(f), False))
        else:
            raise fail(f"nl.spmd_dim factors are positive whole numbers and nl.nc(n), not "
                       f"{f!r}")
    return SpmdDim(tuple(out))


def _axes(grid: object, where: tuple[str, int]) -> tuple[tuple[tuple[int, bool], ...], ...]:
    """Per grid axis, its factors (size, names cores)."""
    dims = grid if isinstance(grid, tuple) else (grid,)
    out = []
    for d in dims:
        if isinstance(d, SpmdDim):
            out.append(d.factors)
        elif isinstance(d, NC):
            out.append(((d.n, True),))
        elif isinstance(d, int) and not isinstance(d, bool) and d >= 1:
            out.append(((int(d), False),))
        else:
            raise fail(f"an SPMD grid is positive integers, nl.nc(n) and nl.spmd_dim(...) "
                       f"(kernel[4, 2], kernel[nl.nc(2) * 2, 2]); got {type(d).__name__} "
                       f"{d!r}", where)
    return tuple(out)


def core_of(axes: tuple[tuple[tuple[int, bool], ...], ...], coords: tuple[int, ...]
            ) -> int:
    """The NeuronCore of the instance at ``coords``: the digits of its nl.nc factors, as one
    mixed-radix number (0 when the grid names no core)."""
    core = 0
    for factors, c in zip(axes, coords, strict=True):
        digits = []
        for size, _ in reversed(factors):
            digits.append(c % size)
            c //= size
        for (size, cores), digit in zip(factors, reversed(digits), strict=True):
            if cores:
                core = core * size + digit
    return core


class Launch:
    """``kernel[grid]``: call it with the kernel's arguments (values, as the kernel would),
    or pass it to nki.simulate / nki.benchmark / systolic.nki.record like a kernel."""

    def __init__(self, kernel: Kernel, axes: tuple[tuple[tuple[int, bool], ...], ...]
                 ) -> None:
        # not named ``kernel``: run.py's unwrapping would take that and drop the grid
        self.target, self.axes = kernel, axes
        self.grid = tuple(prod(s for s, _ in f) for f in axes)
        self.__name__ = f"{kernel.__name__}[{', '.join(map(str, self.grid))}]"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _STACK:  # recording: run every instance into the current recording
            return run_instances(self.target.func, self.grid, args, kwargs, self.axes)
        return values(self, args, kwargs, arch=self.target.arch)


def run_instances(func: Callable[..., Any], grid: tuple[int, ...], args: tuple[Any, ...],
                  kwargs: dict[str, Any],
                  axes: tuple[tuple[tuple[int, bool], ...], ...] = ()) -> Any:
    """Record ``func`` once per grid point (row-major) into the current recording; the
    device-memory tensors each later instance makes are unified with instance 0's. With
    ``axes`` naming NeuronCores, each instance's operations are noted with its core
    (``Recorder.core_ops``)."""
    rec = current()
    cores = any(c for f in axes for _, c in f)
    first: list[Tensor] = []
    alias: dict[int, Tensor] = {}
    result: Any = None
    for n in range(prod(grid)):
        coords, rest = [], n
        for d in reversed(grid):
            coords.append(rest % d)
            rest //= d
        point = tuple(reversed(coords))
        _GRID.append((grid, point))
        start = len(rec.tensors)
        first_op = len(rec.ops)
        try:
            out = func(*args, **kwargs)
            rec.flush()
        finally:
            _GRID.pop()
        if cores:
            rec.core_ops.append((first_op, len(rec.ops), core_of(axes, point)))
        made = [t for t in rec.tensors[start:] if not t.buffer.on_chip]
        if n == 0:
            first, result = made, out
            continue
        if [(t.shape, t.dtype, t.buffer) for t in made] != [
                (t.shape, t.dtype, t.buffer) for t in first]:
            where = made[0].where if made else here()
            raise KernelError(*where, "SPMD instances make different device-memory tensors; "
                                      "each instance must make the same nl.ndarray outputs")
        alias.update({t.id: t0 for t, t0 in zip(made, first, strict=True)})
    if alias:
        _unify(rec.ops, alias)
    return result


def _unify(ops: list[Any], alias: dict[int, Tensor]) -> None:
    """Point every view of a later instance's device-memory tensor at instance 0's."""
    def fix(v: View) -> View:
        t = alias.get(v.tensor.id)
        return v if t is None else View(t, v.offset, v.p0, v.axes, v.dt)

    for op in ops:
        op.dst = fix(op.dst)
        op.srcs = tuple(fix(s) for s in op.srcs)
        op.outs = tuple(fix(o) for o in op.outs)


class SpmdKernel(Kernel):
    """``@nki.jit`` with the launch grid: ``kernel[4, 2](a, b)``, ``kernel[nl.nc(2) * 2,
    2](a, b)``."""

    def __getitem__(self, grid: object) -> Launch:
        return Launch(self, _axes(grid, here()))


def jit(func: Callable[..., Any] | None = None, **options: Any) -> Any:
    """``@nki.jit`` / ``@nki.jit(platform_target=...)`` / ``nki.jit(f, mode=...)``, the
    kernel launchable on a grid."""
    if func is None:
        return lambda f: SpmdKernel(_func(f), **options)
    return SpmdKernel(_func(func), **options)


def _func(f: Any) -> Callable[..., Any]:
    return f.func if isinstance(f, Kernel) else f  # nki.jit(an already-jitted kernel)


def _axis(axis: object, what: str) -> int:
    if not isinstance(axis, int) or isinstance(axis, bool) or axis < 0:
        raise fail(f"nl.{what}(axis): axis is a non-negative integer, not {axis!r}")
    return int(axis)


def program_id(axis: int) -> int:
    """The current instance's coordinate along ``axis`` (0 along every axis outside a grid
    launch: the kernel is then one program)."""
    a = _axis(axis, "program_id")
    if not _GRID:  # one program: every coordinate 0
        return 0
    grid, coords = _GRID[-1]
    if a >= len(grid):
        raise fail(f"nl.program_id({a}) of a {len(grid)}-dimensional launch grid")
    return coords[a]


def num_programs(axes: Any = None) -> int:
    """The grid's extent along ``axes`` (an axis or a tuple of axes; None: the number of
    programs in the whole grid, NKI docs); 1 outside a grid launch."""
    grid = _GRID[-1][0] if _GRID else ()
    if axes is None:
        return prod(grid)
    out = 1
    for axis in axes if isinstance(axes, tuple | list) else (axes,):
        a = _axis(axis, "num_programs")
        if grid and a >= len(grid):
            raise fail(f"nl.num_programs({a}) of a {len(grid)}-dimensional launch grid")
        out *= grid[a] if grid else 1
    return out


def program_ndim() -> int:
    """The launch grid's number of dimensions (0 outside a grid launch)."""
    return len(_GRID[-1][0]) if _GRID else 0
