"""Partial masks: ``mask=`` that leaves out part of a tile.

NKI: "The mask field is an execution predicate known at compile-time, which informs the
compiler to skip generating the instruction or generate the instruction with a smaller
input tile shape. Masking is handled completely by Neuron compiler and hence does not incur
any performance overhead" (nki.api.shared.rst "NKI API Masking", aws-neuron-sdk 7c165a3e).
The model does the same: an operation recorded under a mask becomes the same operation
over each covered sub-rectangle of its tile, every access pattern cut to it, so masked-out
elements are neither read nor written and each instruction is timed by the cost table on
the elements it covers. A mask that selects nothing records no instruction. On an indirect
DMA the partition axis cuts the SBUF tile and its indices (the rows that move), a free axis
the tile and the table's rows alike.

The mask names iteration axes by position (``nl.arange(n)[:, None]`` is 0, the partition
axis; ``[None, :]`` is 1 ...); position k cuts axis k of each view of the operation whose
axis k has the mask's extent (an axis of 1, a [P, 1] operand's free axis or a reduction's
result, is left whole). A mask comparing two index expressions (``i_p >= i_f``, ``512 *
i_p + i_f < n``) is not one rectangle: it is cut into the fewest rectangles that a row by
row split gives (one instruction each; unsure: how the compiler lowers such a mask is not
published, and a triangle of 128 rows costs up to 128 instructions here).

The top-8 instructions (max8, nc_find_index8, nc_match_replace8) take a mask on data,
one rectangle; their [P, 8] values and indices keep their free axis.

Refused in one line: a mask that is not one rectangle on a reduction along the free axis
(its parts would overwrite each other's results), a mask on a free axis of tensor_reduce
(its source is read in another axis order), a partial mask on a matmul, a transpose or an
MX instruction (their axes do not line up with the result's), and a mask axis whose extent
matches no dimension of the tile.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace
from itertools import pairwise
from typing import Any

import numpy as np

from .index import Mask, check_mask
from .opkind import IndirectDmaArgs, IotaArgs, OpArgs, OpKind
from .record import Op, Where, current, fail
from .tensor import Axis, Outside, View

__all__ = ["NOT_CUT", "TRANSPOSED", "applying", "boxes", "split", "whole_only"]

Box = tuple[tuple[int, int] | None, ...]  # per mask position: [lo, hi), None = all

# kinds that combine elements along the free axis: one rectangle only
_ALONG = frozenset({OpKind.TENSOR_REDUCE, OpKind.BN_STATS, OpKind.BN_AGGR,
                    OpKind.TENSOR_TENSOR_SCAN})
# the top-8 family (nki/top8.py): "a mask is applied to the data tensor" (nki.isa
# nc_match_replace8); their [P, 8] views (the values, the indices) keep their free axis,
# so the mask is one rectangle. Per kind: whether the dst, then each src, is such a view.
_EIGHT: dict[OpKind, tuple[bool, ...]] = {OpKind.MAX8: (True, False),
                                          OpKind.FIND_INDEX8: (True, False, True),
                                          OpKind.MATCH_REPLACE8: (False, False, True)}
# kinds cut element for element (their views line up position by position)
_CUT = frozenset({OpKind.DMA, OpKind.COPY, OpKind.TENSOR_TENSOR, OpKind.TENSOR_SCALAR,
                  OpKind.ACTIVATION, OpKind.MEMSET, OpKind.IOTA, OpKind.RECIPROCAL,
                  OpKind.SCALAR_TENSOR_TENSOR})


_UNMASKED = contextlib.nullcontext()


def applying(mask: Mask | bool | None, what: str, where: Where
             ) -> contextlib.AbstractContextManager[None]:
    """Record the operations made inside under ``mask`` (as nki/index.py check_mask gives
    it: None for none, False for nothing selected). No mask inside no mask, nearly every
    call, is a shared no-op (a generator context per call was 0.2 s of a 100,000-op
    kernel's recording)."""
    rec = current()
    if mask is None and rec.mask is None:
        return _UNMASKED
    return _applying(rec, mask, what, where)


@contextlib.contextmanager
def _applying(rec: Any, mask: Mask | bool | None, what: str, where: Where
              ) -> Iterator[None]:
    before = rec.mask
    if mask is None:
        rec.mask = None
    else:  # the mask's rectangles found once for every op recorded under it
        grid = _grid(mask)
        rec.mask = lambda op: split(op, mask, what, where, grid)
    try:
        yield
    finally:
        rec.mask = before


# why whole_only refuses a partial mask, by the kind of call
TRANSPOSED = "a transpose's axes do not line up with its result's"
NOT_CUT = "these copies are not cut by a mask; index the tiles to the part to copy"


def whole_only(mask: object, what: str, where: Where, why: str) -> bool | None:
    """The ``mask=`` of a call whose views a mask does not cut position by position (a
    transpose, a gather, a dynamic copy), checked as every call's is (index.check_mask):
    one selecting all (None) or nothing (False: the caller makes no instruction,
    :func:`applying`), else one line saying ``why``."""
    mask = check_mask(mask, what, where)
    if isinstance(mask, Mask):
        raise fail(f"{what}: a mask that leaves out part of the tile is not modelled here "
                   f"({why})", where)
    return mask


def boxes(sel: np.ndarray) -> list[list[tuple[int, int]]]:
    """The selected cells of ``sel`` as rectangles ([lo, hi) per axis): consecutive
    indices of the first axis with the same selection below them form one band, each
    band cut the same way along the next axes."""
    if sel.ndim == 0:
        return [[]] if bool(sel) else []
    n = sel.shape[0]
    if n == 0:
        return []
    flat = sel.reshape(n, -1)
    cuts = [0, *(np.flatnonzero((flat[1:] != flat[:-1]).any(axis=1)) + 1).tolist(), n]
    out: list[list[tuple[int, int]]] = []
    for i, j in pairwise(cuts):  # one band per run of equal slices, found by numpy
        out += [[(i, j), *b] for b in boxes(sel[i])]
    return out


Grid = tuple[tuple[int, ...], dict[int, int], list[list[tuple[int, int]]]]
"""A mask's positions (the axes it names), each one's size, and its selected rectangles."""


def _grid(mask: Mask | bool) -> Grid | None:
    if not isinstance(mask, Mask):
        return None
    pos, sel = mask.grid()
    return tuple(pos), dict(zip(pos, sel.shape, strict=True)), boxes(sel)


def split(op: Op, mask: Mask | bool, what: str, where: Where,
          grid: Grid | None = None) -> list[Op]:
    """``op`` restricted to what ``mask`` selects: one op per covered rectangle
    (``grid``: the mask's, when found already)."""
    if mask is False:
        return []
    assert isinstance(mask, Mask)
    pos, sizes, rects = grid if grid is not None else _grid(mask)  # type: ignore[misc]
    kind = op.kind
    if kind is OpKind.INDIRECT_DMA:
        return [_indirect_cut(op, {p: iv for p, iv in zip(pos, r, strict=True)
                                   if iv != (0, sizes[p])}, sizes, what, where)
                for r in rects]
    if kind not in _CUT and kind not in _ALONG and kind not in _EIGHT:
        raise fail(f"{what}: a mask that leaves out part of the tile is not modelled on "
                   f"{kind.value} (its axes do not line up with its result's); use a tile "
                   f"of the part it should compute", where)
    if (kind in _ALONG or kind in _EIGHT or op.outs) and len(rects) > 1:
        raise fail(f"{what}: this mask is not one rectangle of the tile, and {kind.value} "
                   f"reduces along the free axis; split the call so each mask is one "
                   f"rectangle", where)
    if kind is OpKind.TENSOR_REDUCE and any(
            p != 0 and rects[0][k] != (0, sizes[p]) for k, p in enumerate(pos)):
        raise fail(f"{what}: a mask on a free axis of tensor_reduce is not modelled; mask "
                   f"the partitions (i_p < n), or reduce a tile of the part to keep", where)
    reduced = kind in _ALONG or bool(op.outs)
    eight = _EIGHT.get(kind, ())
    out: list[Op] = []
    for r in rects:
        box: dict[int, tuple[int, int]] = {p: iv for p, iv in zip(pos, r, strict=True)
                                           if iv != (0, sizes[p])}
        cut = [_cut(v, box, sizes, what, where, whole_ok=(reduced and i > 0) or (
                    i == 0 and eight[:1] == (True,))) for i, v in enumerate((op.dst, *op.outs))]
        srcs = tuple(_cut(v, box, sizes, what, where, whole_ok=eight[i + 1:i + 2] == (True,))
                     for i, v in enumerate(op.srcs))
        args = _iota_moved(op, box, sizes, what, where) if kind is OpKind.IOTA else op.args
        out.append(Op(args, cut[0], srcs, op.where, tuple(cut[1:])))
    return out


def _indirect_cut(op: Op, box: dict[int, tuple[int, int]], sizes: dict[int, int], what: str,
                  where: Where) -> Op:
    """An indirect DMA cut to ``box``: the partition axis cuts the SBUF tile and its indices
    (which rows move), a free axis the tile and every row of the table alike (the table's
    first axis is its rows, which no mask position names)."""
    a = op.args
    assert isinstance(a, IndirectDmaArgs)
    data, table = (op.srcs[0], op.dst) if a.scatter else (op.dst, op.srcs[0])
    part = {k: iv for k, iv in box.items() if k == 0}
    free = {k: iv for k, iv in box.items() if k > 0}
    data = _cut(data, box, sizes, what, where, whole_ok=False)
    index = _cut(op.srcs[1], part, sizes, what, where, whole_ok=False)
    table = _cut(table, free, sizes, what, where, whole_ok=False)
    if a.scatter:
        return Op(a, table, (data, index, *((table,) if a.accumulate else ())), op.where)
    return Op(a, data, (table, index), op.where)


def _iota_moved(op: Op, box: dict[int, tuple[int, int]], sizes: dict[int, int], what: str,
                where: Where) -> OpArgs:
    """An iota's values depend on where the element is: cut to ``box`` (the axes _cut cut)
    it starts at the value of the box's first element."""
    a = op.args
    assert isinstance(a, IotaArgs)
    axes = op.dst.axes
    free = len(axes) - 1
    box = {k: iv for k, iv in box.items() if k < len(axes) and axes[k].num == sizes[k]}
    if not a.outer_steps and free > 1 and any(k > 0 for k in box):
        raise fail(f"{what}: a mask on a free axis of an iota into a tile of "
                   f"{free} free axes is not modelled; mask the partitions", where)
    steps = (a.partition_step, *a.outer_steps, a.free_step)
    return replace(a, base=a.base + sum(steps[k] * lo for k, (lo, _) in box.items()))


def _cut(v: View, box: dict[int, tuple[int, int]], sizes: dict[int, int], what: str,
         where: Where, whole_ok: bool) -> View:
    """``v`` cut to ``box`` (mask position k -> view axis k); ``whole_ok``: a reduction's
    one-element-per-partition output, which the free positions leave whole."""
    if not box:
        return v
    offset, p0 = v.offset, v.p0
    axes = list(v.axes)
    inside: list[tuple[int, int] | None] = (list(v.outside.inside) if v.outside is not None
                                            else [None] * len(axes))
    for k, (lo, hi) in box.items():
        if k >= len(axes) or axes[k].num != sizes[k]:
            if k > 0 and (whole_ok or (k < len(axes) and axes[k].num == 1)):
                continue
            n = axes[k].num if k < len(axes) else None
            raise fail(f"{what}: the mask's axis {k} has {sizes[k]} positions, but this "
                       f"operation's tile {list(v.shape)} has "
                       f"{'no axis ' + str(k) if n is None else f'{n} there'}; index the "
                       f"tile with the same nl.arange / nl.mgrid as the mask", where)
        a = axes[k]
        if a.part:
            p0 += lo
        else:
            offset += lo * a.stride
        axes[k] = Axis(a.stride, hi - lo, a.part)
        if inside[k] is not None:
            ilo, ihi = inside[k]  # type: ignore[misc]
            inside[k] = None if ilo <= lo and hi <= ihi else (ilo - lo, ihi - lo)
    outside = None
    if v.outside is not None and any(r is not None for r in inside):
        outside = Outside(tuple(inside), v.outside.message)
    return View(v.tensor, offset, p0, tuple(axes), v.dt, outside)
