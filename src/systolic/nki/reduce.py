"""``tensor_reduce`` over some of a tile's free axes (``nl.sum(x, axis=[2, 4])``,
``axis=(-2, -1)`` of a 3-d tile).

The Vector engine reduces the innermost free dimensions of its source access pattern:
"The reduction axes ... must start at the most minor free axis" and be consecutive (NKI docs,
nki.isa.tensor_reduce, aws-neuron-sdk 7c165a3e). An access pattern may walk a tile's axes in
any order, so the source is read with the kept axes outermost, in their order, and the
reduced axes innermost: ``TensorReduce`` writes one result per kept element (dst holds the
kept elements; see systolic.sim.functional_engines). That is the compiler's job in NKI and
the docs do not say how it lowers axes that are not innermost (unsure); reordering the
pattern is the one-instruction way. A pattern that still has more free dimensions than the
hardware takes (3, after merging contiguous runs) is split along its outermost kept axis
into one instruction per index (unsure: the compiler's split is not published).
"""

from __future__ import annotations

from math import prod
from typing import Any

from .record import fail
from .tensor import Axis, View

__all__ = ["MAX_FREE_DIMS", "as_column", "reduce_shape", "reduced_axes", "split_reduce"]

# free dimensions one engine access pattern takes (nki/build.py refuses more)
MAX_FREE_DIMS = 3


def as_column(src: View) -> View:
    """An on-chip [P] view (its free dimensions dropped) as the [P, 1] tile it is in memory,
    as it takes a second index (nki/tensor.py): its one free axis, axis 1, can be reduced.
    Flash attention backward (nki-samples) reduces ``axis=(1,)`` of a row sum times a
    [P, 1] column that its comment calls ``[par_dim(q), 1]``."""
    if len(src.shape) == 1 and src.buffer.on_chip and src.axes and src.axes[0].part:
        return src[:, :]
    return src


def reduced_axes(axis: Any, ndim: int, what: str, where: tuple[str, int]) -> list[int]:
    """The free axes ``axis`` names (None: all), as sorted non-negative ints."""
    free = list(range(1, ndim))
    if axis is None:
        return free
    names = [axis] if not isinstance(axis, tuple | list) else list(axis)
    out = sorted({int(a) + ndim if int(a) < 0 else int(a) for a in names})
    if not out or out[0] < 1 or out[-1] >= ndim:
        raise fail(f"{what} over axis {axis!r}: a {ndim}-d tile reduces free axes 1.."
                   f"{ndim - 1} (axis 0 is the partition axis: a partition reduction is a "
                   f"transpose or a matmul by ones, NKI docs)", where)
    return out


def reduce_shape(shape: tuple[int, ...], axes: list[int], keepdims: bool) -> tuple[int, ...]:
    """The result's shape: the reduced axes dropped, or kept as 1 (``keepdims``)."""
    if keepdims:
        return tuple(1 if d in axes else n for d, n in enumerate(shape))
    return tuple(n for d, n in enumerate(shape) if d not in axes)


def _dims(axes: tuple[Axis, ...]) -> int:
    """Free dimensions of a pattern after merging contiguous runs (nki/build.py _merge)."""
    out: list[tuple[int, int]] = []
    for a in axes:
        if a.part or a.num == 1:
            continue
        if out and out[-1][0] == a.stride * a.num:
            out[-1] = (a.stride, out[-1][1] * a.num)
        else:
            out.append((a.stride, a.num))
    return len(out)


def split_reduce(dst: View, src: View, axes: list[int], what: str,
                 where: tuple[str, int]) -> list[tuple[View, View]]:
    """(dst, src) pairs of TensorReduce instructions: src read kept axes first, reduced last;
    dst one element per kept element of each partition."""
    if not src.axes or not src.axes[0].part:
        raise fail(f"{what} reads a tile whose partition dimension comes first", where)
    kept = [src.axes[d] for d in range(1, len(src.axes)) if d not in axes]
    gone = [src.axes[d] for d in axes]
    want = src.partitions * prod(a.num for a in kept)
    if dst.partitions != src.partitions or dst.size != want:
        shape = [src.partitions, *(a.num for a in kept)] if kept else [src.partitions, 1]
        raise fail(f"{what} dst must be {shape} (the kept axes of each of the "
                   f"{src.partitions} partitions), not {list(dst.shape)}", where)
    dkept = [a for a in dst.axes if not a.part and a.num > 1]
    kept = [a for a in kept if a.num > 1]
    return _split(dst, dst.axes[0] if dst.axes and dst.axes[0].part else None, dkept,
                  src, kept, gone, what, where)


def _split(dst: View, dpart: Axis | None, dkept: list[Axis], src: View, kept: list[Axis],
           gone: list[Axis], what: str, where: tuple[str, int]) -> list[tuple[View, View]]:
    part = src.axes[0]
    s = View(src.tensor, src.offset, src.p0, (part, *kept, *gone), src.dt)
    d = View(dst.tensor, dst.offset, dst.p0,
             (*((dpart,) if dpart is not None else ()), *dkept), dst.dt)
    if _dims(s.axes) <= MAX_FREE_DIMS:
        return [(d, s)]
    if not kept or len(dkept) != len(kept) or any(
            a.num != b.num for a, b in zip(dkept, kept, strict=True)):
        raise fail(f"{what}: this reduction reads {_dims(s.axes)} free dimensions after "
                   f"merging; the hardware takes at most {MAX_FREE_DIMS}", where)
    out: list[tuple[View, View]] = []
    k0, d0 = kept[0], dkept[0]
    for j in range(k0.num):
        sj = View(src.tensor, src.offset + j * k0.stride, src.p0, src.axes, src.dt)
        dj = View(dst.tensor, dst.offset + j * d0.stride, dst.p0, dst.axes, dst.dt)
        out += _split(dj, dpart, dkept[1:], sj, kept[1:], gone, what, where)
    return out
