"""SPMD launches: ``kernel[grid](...)`` runs one program instance per grid point.

``kernel[4, 2](a, b)`` (NKI docs, "SPMD programming model"; aws-neuron-sdk
``nki/test/test_nki_spmd_grid.py``) runs the kernel body 8 times; inside, ``nl.program_id(axis)``
is the instance's grid coordinate, ``nl.num_programs(axis)`` the grid's extent and
``nl.program_ndim()`` its rank. All instances are recorded into ONE Program, in row-major
grid order, as one NeuronCore runs them one after another (unsure: how the Neuron runtime
places instances that name no NeuronCore is not published; ``nl.nc(n)`` / ``nl.spmd_dim``,
which place them on several cores, are refused). The instances share their device-memory
tensors: the ``nl.ndarray(..., buffer=nl.shared_hbm)`` that instance k makes at a line is
the one instance 0 made there, so each instance writes its part of the one output; the
launch returns instance 0's result.
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod
from typing import Any

from ..errors import KernelError
from .record import _STACK, current, fail, here
from .run import Kernel, values
from .tensor import Tensor, View

__all__ = ["Launch", "SpmdKernel", "jit", "num_programs", "program_id", "program_ndim"]

# the grid of the launch being recorded and the current instance's coordinates
_GRID: list[tuple[tuple[int, ...], tuple[int, ...]]] = []


def _dims(grid: object, where: tuple[str, int]) -> tuple[int, ...]:
    dims = grid if isinstance(grid, tuple) else (grid,)
    out = []
    for d in dims:
        if not isinstance(d, int) or isinstance(d, bool) or d < 1:
            what = type(d).__name__
            raise fail(f"an SPMD grid is positive integers (kernel[4, 2]); got {what} "
                       f"{d!r}: placing instances on several NeuronCores (nl.nc, "
                       f"nl.spmd_dim) is not modelled", where)
        out.append(int(d))
    return tuple(out)


class Launch:
    """``kernel[grid]``: call it with the kernel's arguments (values, as the kernel would),
    or pass it to nki.simulate / nki.benchmark / systolic.nki.record like a kernel."""

    def __init__(self, kernel: Kernel, grid: tuple[int, ...]) -> None:
        # not named ``kernel``: run.py's unwrapping would take that and drop the grid
        self.target, self.grid = kernel, grid
        self.__name__ = f"{kernel.__name__}[{', '.join(map(str, grid))}]"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _STACK:  # recording: run every instance into the current recording
            return run_instances(self.target.func, self.grid, args, kwargs)
        return values(self, args, kwargs, arch=self.target.arch)


def run_instances(func: Callable[..., Any], grid: tuple[int, ...], args: tuple[Any, ...],
                  kwargs: dict[str, Any]) -> Any:
    """Record ``func`` once per grid point (row-major) into the current recording; the
    device-memory tensors each later instance makes are unified with instance 0's."""
    rec = current()
    first: list[Tensor] = []
    alias: dict[int, Tensor] = {}
    result: Any = None
    for n in range(prod(grid)):
        coords, rest = [], n
        for d in reversed(grid):
            coords.append(rest % d)
            rest //= d
        _GRID.append((grid, tuple(reversed(coords))))
        start = len(rec.tensors)
        try:
            out = func(*args, **kwargs)
            rec.flush()
        finally:
            _GRID.pop()
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
    """``@nki.jit`` with the launch grid: ``kernel[4, 2](a, b)``."""

    def __getitem__(self, grid: object) -> Launch:
        return Launch(self, _dims(grid, here()))


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
