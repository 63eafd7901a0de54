"""Tensor handles: ``nl.ndarray`` tensors, views of them, and the older API's index
expressions.

A :class:`Tensor` is an allocation request (shape, dtype, buffer, the line that made it);
its address is decided after recording (:mod:`systolic.nki.alloc`). A :class:`View` is a
strided window of a tensor: an element offset and one ``(stride, count)`` axis per
remaining dimension, one of which may be the partition axis. Indexing with ints, slices
and affine index expressions (``k * TILE_K + i.p``) gives views; views become the ISA's
:class:`~systolic.isa.AccessPattern` once the tensor has an address.

On chip (SBUF, PSUM) the partition dimension is the first one, or the one marked with
``nl.par_dim``; the other dimensions are laid out row-major in each partition's bytes. In
HBM every dimension is row-major.
"""

from __future__ import annotations

import itertools
from math import prod
from typing import Any, NamedTuple

import numpy as np

from ..errors import SystolicError
from ..isa.fields import INDEX_FORMATS
from .index import Expr, Grid, MultiExpr, whole
from .lazy import Arithmetic, LazyKind, NlOp, Pending, binary, is_number
from .lazy import as_view as _any_view
from .record import Loop, current, fail, here
from .types import BUFFERS, Buffer, DType, ParDim, fill_value

__all__ = ["Axis", "DynamicIndex", "DynamicView", "Expr", "Grid", "IndirectView", "LazyKind",
           "NlOp", "Outside", "Pending",
           "Tensor", "View", "as_view",
           "binary", "same_shape"]

_IDS = itertools.count()


class Axis(NamedTuple):
    """One axis of a view: ``stride`` elements (the partition axis: 1 partition), ``num``
    positions; a NamedTuple because a kernel makes hundreds of thousands of them."""

    stride: int
    num: int
    part: bool = False


_ALL = slice(None)


_LAYOUTS: dict[tuple[tuple[int, ...], int | None],
               tuple[tuple[int, ...], int, tuple[Axis, ...]]] = {}


def _layout(dims: tuple[int, ...], pdim: int | None
            ) -> tuple[tuple[int, ...], int, tuple[Axis, ...]]:
    """A tensor's row-major strides (the partition dimension, on chip, has none), its
    elements per partition, and its whole view's axes: immutable, so memoised."""
    key = (dims, pdim)
    got = _LAYOUTS.get(key)
    if got is None:
        strides, acc = [0] * len(dims), 1
        for i in range(len(dims) - 1, -1, -1):
            if i == pdim:
                continue
            strides[i] = acc
            acc *= dims[i]
        axes = tuple([Axis(1 if i == pdim else strides[i], d, i == pdim)
                      for i, d in enumerate(dims)])
        if len(_LAYOUTS) > 1 << 12:  # a kernel of many shapes: bounded
            _LAYOUTS.clear()
        got = _LAYOUTS[key] = (tuple(strides), acc, axes)
    return got


class Tensor(Arithmetic):
    """An ``nl.ndarray``: shape, dtype, buffer, and where the kernel made it."""

    def __init__(self, shape: tuple[Any, ...], dtype: DType, buffer: Buffer,
                 where: tuple[str, int], name: str = "", is_input: bool = False) -> None:
        pdim = 0
        dims: list[int] = []
        for i, s in enumerate(shape):
            if type(s) is int and s >= 1:  # nearly every dimension
                dims.append(s)
                continue
            if isinstance(s, ParDim):
                pdim = i
                s = s.size
            if not isinstance(s, int) or s < 1:
                raise fail(f"tensor dimension {s!r} must be a positive integer", where)
            dims.append(int(s))
        self.id = next(_IDS)
        self.shape = tuple(dims)
        self.dtype = dtype
        self.buffer = buffer
        self.where = where
        self.name = name
        self.is_input = is_input
        # the innermost loop the kernel was in when it made the tensor (Recorder.add_tensor)
        self.loop: Loop | None = None
        # the device-memory view a whole on-chip tile was last loaded from, if nothing has
        # written it since (nki/ops.py record_dma; broadcast_to reads it again)
        self.loaded_from: View | None = None
        self.pdim: int | None = pdim if buffer.on_chip else None
        # strides, elements per partition (on chip; all elements in HBM) and the whole
        # view's axes, shared by every tensor of this shape and layout (a loop body makes
        # the same tiles each iteration: 67,000 of them in the full-size tiled kernel)
        self.strides, self.free_elems, self.full_axes = _layout(self.shape, self.pdim)
        # the first partition on chip: 0, or where the older API's tile_position puts a
        # matmul operand or result (:meth:`at_partition`)
        self.p_base = 0
        # a tile the kernel places itself (nki/direct.py): its bytes per partition from the
        # start of SBUF/PSUM, and each block's element offset (an array over the block dims)
        self.pin: int | None = None
        self.blocks: Any = None

    @property
    def full(self) -> View:
        """The whole tensor, a view made when asked: a tensor keeping its own view would be
        a reference cycle, left for the garbage collector (600,000 objects a 100,000-op
        recording) where reference counts free the rest at once."""
        return View(self, 0, self.p_base, self.full_axes)

    def at_partition(self, p: int) -> Tensor:
        """Place this fresh on-chip tensor at partitions ``p``.. (the compiler allocates the
        older API's matmul operands and results where the PE reads and writes them: row r
        of a tile_position reads SBUF partition r, column m drains into PSUM partition m).
        Only before anything uses it."""
        if p + self.partitions > 128:
            raise fail(f"a {self.partitions}-partition tile placed at partition {p} ends past "
                       f"partition 127", self.where)
        self.p_base = p
        return self

    @property
    def partitions(self) -> int:
        return self.shape[self.pdim] if self.pdim is not None else 1

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"Tensor({self.name or self.id}, {list(self.shape)}, {self.dtype}, {self.buffer})"

    # indexing and in-place ops act on the whole-tensor view
    def __getitem__(self, key: object) -> View:
        return self.full[key] if self.blocks is None else self._block_view(key)

    def __setitem__(self, key: object, value: object) -> None:
        if self.blocks is None:
            self.full[key] = value
        else:
            self._block_view(key)[...] = value

    def _block_view(self, key: object) -> View:
        """A directly placed tensor indexed: the blocks its first (block) indices select,
        each where the allocation put it, as one view when they are evenly spaced."""
        keys = key if isinstance(key, tuple) else (key,)
        nb = self.blocks.ndim
        if keys == (Ellipsis,):
            keys = ()
        sel: list[object] = []
        for i, k in enumerate(keys[:nb]):
            if isinstance(k, slice):
                sel.append(k)
            elif whole(k) and 0 <= int(k) < self.shape[i]:  # type: ignore[call-overload]
                sel.append(int(k))  # type: ignore[call-overload]
            else:
                raise fail(f"block dimension {i} of this directly allocated tensor (size "
                           f"{self.shape[i]}) is indexed by {k!r}; index its blocks by an "
                           f"integer in range or a slice")
        table = self.blocks[tuple(sel)]
        base = int(table.flat[0])
        steps = [int(table[(0,) * d + (1,) + (0,) * (table.ndim - d - 1)]) - base
                 if n > 1 else 0 for d, n in enumerate(table.shape)]
        even = base + sum(np.arange(n).reshape((n,) + (1,) * (table.ndim - d - 1)) * st
                          for d, (n, st) in enumerate(zip(table.shape, steps, strict=True)))
        if not np.array_equal(table, np.broadcast_to(even, table.shape)):
            raise fail("these blocks of a directly allocated tensor are not evenly spaced "
                       "in memory; index one block at a time")
        pd = self.pdim or 0  # one block's axes: the partition and free dims, as laid out
        inner = tuple(Axis(1 if i == pd else self.strides[i], self.shape[i], i == pd)
                      for i in range(pd, self.ndim))
        v = View(self, base, self.p_base, tuple(
            Axis(st, n) for n, st in zip(table.shape, steps, strict=True)) + inner)
        rest = keys[nb:]
        return v[(slice(None),) * table.ndim + rest] if rest else v

    def __iadd__(self, other: object) -> Tensor:
        self.full.__iadd__(other)
        return self

    def view(self, dtype: Any = None) -> View:
        """The whole tensor; ``view(dtype)`` reinterprets its bytes as ``dtype`` of the same
        element size (numpy's ``ndarray.view``; the kernels' ``a.view(nl.float8_e5m2)``)."""
        return self.full if dtype is None else _retyped(self.full, dtype)

    def broadcast_to(self, shape: tuple[int, ...]) -> Tensor:
        return self.full.broadcast_to(shape)

    def ap(self, pattern: Any, offset: int = 0, dtype: Any = None, **kw: Any) -> View:
        """NKI's raw access pattern: ``[[step, count], ...]`` outermost first, in elements
        from ``offset``; on chip the first pair is the partition axis (step = the tile's
        elements per partition). ``dtype`` reinterprets the bytes (same element size)."""
        return _ap_view(self, pattern, offset, dtype)

    def reshape(self, shape: Any) -> View:
        return _reshape(self.full, tuple(shape))


def _retyped(v: View, dtype: Any) -> View:
    from .types import to_dtype

    try:
        d = to_dtype(dtype)
    except SystolicError as exc:
        raise fail(f"view({dtype!r}): {exc}") from None
    if d.itemsize != v.dtype.itemsize:
        raise fail(f"view({d!r}) reinterprets bytes in place: a {v.dtype} element is "
                   f"{v.dtype.itemsize} byte(s), a {d} element {d.itemsize}; use a dtype "
                   f"of the same size, or a copy (nisa.tensor_copy) to convert")
    return View(v.tensor, v.offset, v.p0, v.axes, d)


def _ap_view(t: Tensor, pattern: Any, offset: int, dtype: Any) -> View:
    from .types import to_dtype

    if not isinstance(pattern, tuple | list) or not all(
            isinstance(p, tuple | list) and len(p) == 2 and whole(p[0]) and whole(p[1])
            for p in pattern) or not whole(offset):
        raise fail(f"ap(pattern={pattern!r}, offset={offset!r}): a pattern is a list of "
                   f"[step, count] pairs of whole numbers, outermost first, and the offset "
                   f"a whole number of elements")
    pairs = [(int(a), int(b)) for a, b in pattern]
    if not pairs:
        raise fail("an access pattern needs at least one [step, count] pair")
    if min(n for _, n in pairs) < 1 or offset < 0:
        raise fail(f"ap(pattern={pattern!r}, offset={offset}): every count is at least 1 "
                   f"and the offset is not negative")
    dt = None
    if dtype is not None:
        dt = to_dtype(dtype)
        if dt.itemsize != t.dtype.itemsize:
            raise fail(f"ap(dtype={dt}) reinterprets {t.dtype} bytes: the element sizes "
                       f"({dt.itemsize} and {t.dtype.itemsize}) must match")
    if t.buffer.on_chip:
        (pstep, pcount), rest = pairs[0], pairs[1:]
        if pstep != t.free_elems and pcount > 1:
            raise fail(f"the first [step, count] of an on-chip pattern is the partition axis: "
                       f"step {t.free_elems} (elements per partition), not {pstep}")
        p0, off = divmod(int(offset), t.free_elems)
        if p0 + pcount > t.partitions:
            raise fail(f"the pattern reaches partition {p0 + pcount - 1} of a "
                       f"{t.partitions}-partition tile")
        _in_bounds(off, rest, t.free_elems, f"each partition's {t.free_elems} elements "
                   f"of the {list(t.shape)} tile")
        return View(t, off, p0, (Axis(1, pcount, True), *(Axis(s, n) for s, n in rest)), dt)
    _in_bounds(int(offset), pairs, t.free_elems,
               f"the {t.free_elems} elements of the {list(t.shape)} tensor")
    return View(t, int(offset), 0, tuple(Axis(s, n) for s, n in pairs), dt)


def _in_bounds(offset: int, pairs: list[tuple[int, int]], size: int, what: str) -> None:
    """Every element a raw access pattern reaches lies in its tensor (issue 21 defect 2:
    an HBM pattern past its tensor read the next tensor's bytes)."""
    lo = offset + sum(min(0, s * (n - 1)) for s, n in pairs)
    hi = offset + sum(max(0, s * (n - 1)) for s, n in pairs)
    if lo < 0 or hi >= size:
        raise fail(f"the access pattern reaches elements {lo}..{hi}, outside {what} "
                   f"(0..{size - 1}); an access stays inside its own tensor")


def _reshape(v: View, shape: tuple[int, ...]) -> View:
    """A contiguous view read in a new shape (on chip the partition axis stays first)."""
    if v.outside is not None:
        v.outside.check()
    axes = v.axes
    part = [a for a in axes if a.part]
    free = [a for a in axes if not a.part]
    if part and axes[0] is not part[0]:
        raise fail("reshape needs the partition dimension first")
    n = prod(a.num for a in free)
    acc = 1
    for a in reversed(free):  # the free axes must be one contiguous row-major run
        if a.num > 1 and a.stride != acc:
            raise fail("reshape of a strided view is not modelled; copy it to a tile first")
        acc *= a.num
    new_free = shape[1:] if part else shape
    if (part and shape[0] != part[0].num) or prod(new_free) != n:
        raise fail(f"cannot reshape {list(v.shape)} to {list(shape)}")
    strides, acc = [], 1
    for d in reversed(new_free):
        strides.append(acc)
        acc *= d
    new = tuple(Axis(s, d) for s, d in zip(reversed(strides), new_free, strict=True))
    return View(v.tensor, v.offset, v.p0, (*part, *new), v.dt)


def as_view(x: object) -> View:
    """A View of a tensor, a view, or a lazy result (lazy.as_view), the two common cases
    first: every NKI call asks it of each operand (233,000 times in the full-size tiled
    kernel). A plain ``View`` is itself and a ``Tensor`` its whole view, as their
    ``view()`` gives them (tests/test_nki_speed.py holds the two to it)."""
    if type(x) is View:  # (exact types: IndirectView and DynamicView go the long way)
        return x
    if type(x) is Tensor:
        return View(x, 0, x.p_base, x.full_axes)  # Tensor.full
    return _any_view(x)


class Outside(NamedTuple):
    """Where a view reaches past its tensor: per view axis the positions inside,
    ``[lo, hi)`` (None: all), and the one-line error if an operation uses it unmasked."""

    inside: tuple[tuple[int, int] | None, ...]
    message: str

    def check(self, where: tuple[str, int] | None = None) -> None:
        raise fail(self.message, where)


class View(Arithmetic):
    """A strided window of a tensor: element ``offset``, first partition ``p0``, axes."""

    __slots__ = ("axes", "buffer", "dt", "dtype", "offset", "outside", "p0", "shape", "tensor")

    def __init__(self, tensor: Tensor, offset: int, p0: int, axes: tuple[Axis, ...],
                 dt: DType | None = None, outside: Outside | None = None) -> None:
        self.tensor, self.offset, self.p0, self.axes = tensor, offset, p0, axes
        # the tensor's buffer, kept on the view: asked several times per operation
        self.buffer: Buffer = tensor.buffer
        self.dt = dt  # a reinterpreted dtype of the same size (``.ap(dtype=...)``)
        self.dtype: DType = dt if dt is not None else tensor.dtype  # what the view reads
        self.shape: tuple[int, ...] = tuple([a[1] for a in axes])
        # an index past its dimension, allowed until an operation uses the view: a mask=
        # on that operation may leave the outside part out (nki/mask.py)
        self.outside = outside

    def ap(self, pattern: Any, offset: int = 0, dtype: Any = None, **kw: Any) -> View:
        return _ap_view(self.tensor, pattern, offset, dtype)

    def reshape(self, shape: Any) -> View:
        return _reshape(self, tuple(shape))

    @property
    def partitions(self) -> int:
        for a in self.axes:
            if a.part:
                return a.num
        return 1

    @property
    def size(self) -> int:
        return prod(self.shape)

    def same_place(self, other: View) -> bool:
        return (self.tensor is other.tensor and self.offset == other.offset
                and self.p0 == other.p0 and self.axes == other.axes and self.dt == other.dt)

    def __repr__(self) -> str:
        return f"View({self.tensor!r}, shape={list(self.shape)})"

    def stretched(self, shape: tuple[int, ...]) -> View | None:
        """This on-chip view read as ``shape`` by repeating its free axes of size 1 (an
        access-pattern step of 0: numpy's broadcast along free axes, [P, W, 1, 1] against
        [P, W, 3, 3]); None when ``shape`` is not such a stretch of it."""
        if (not self.buffer.on_chip or self.outside is not None or len(shape) != len(self.axes)
                or not self.axes or not self.axes[0].part or shape[0] != self.axes[0].num
                or any(a.num not in (n, 1) for a, n in zip(self.axes[1:], shape[1:], strict=True))):
            return None
        return View(self.tensor, self.offset, self.p0, (self.axes[0], *(
            a if a.num == n else Axis(0, n) for a, n in zip(self.axes[1:], shape[1:],
                                                             strict=True))), self.dt)

    def __getitem__(self, key: object) -> View:
        if self.outside is None:
            got = self._plain(key)
            if got is not None:
                return got
        return self._index(key)

    def _plain(self, key: object) -> View | None:
        """The common key first: ints and step-1 slices of ints, every one inside its
        dimension (the tiled kernels' ``x[k * 128:(k + 1) * 128, m * 512:(m + 1) * 512]``,
        66,000 of them at full size). Exactly :meth:`_index`'s view; None for any other key,
        and for any it would refuse or mark as reaching outside, which :meth:`_index` then
        reads (tests/test_nki_speed.py holds the two to the same views and errors)."""
        keys = key if type(key) is tuple else (key,)
        axes = self.axes
        if len(keys) > len(axes):
            return None
        offset, p0 = self.offset, self.p0
        out: list[Axis] = []
        for d, (stride, count, part) in enumerate(axes):
            if d >= len(keys):
                out.append(Axis(1, count, True) if part else Axis(stride, count))
                continue
            k = keys[d]
            tk = type(k)
            if tk is slice:
                ks, ke = k.start, k.stop  # type: ignore[attr-defined]
                if (k.step is not None  # type: ignore[attr-defined]
                        or (ks is not None and type(ks) is not int)
                        or (ke is not None and (type(ke) is not int or ke > count))):
                    return None
                start, stop, _ = k.indices(count)  # type: ignore[attr-defined]
                if stop <= start:  # empty: _index's error
                    return None
                if part:
                    p0 += start
                    out.append(Axis(1, stop - start, True))
                else:
                    offset += start * stride
                    out.append(Axis(stride, stop - start))
            elif tk is int:
                if k < 0:  # type: ignore[operator]
                    k += count  # type: ignore[operator]
                if not 0 <= k < count:  # type: ignore[operator]
                    return None
                if part:
                    p0 += k  # type: ignore[operator]
                else:
                    offset += k * stride  # type: ignore[operator]
            else:
                return None
        return View(self.tensor, offset, p0, tuple(out), self.dt)

    def _index(self, key: object) -> View:
        """``view[key]``, any key: ints, slices, index expressions, tiles of indices."""
        axes = self.axes
        if self.outside is not None:
            self.outside.check()
        if type(key) is Grid:  # t[nl.mgrid[0:128, 0:512]]: each axis indexes its dimension
            key = tuple(key.axes)  # type: ignore[attr-defined]
        keys = list(key) if type(key) is tuple else [key]
        if Ellipsis in keys:
            i = keys.index(Ellipsis)
            keys[i:i + 1] = [slice(None)] * (len(axes) - (len(keys) - 1))
        if len(keys) > len(axes):
            if len(keys) != 2 or len(axes) != 1 or not axes[0].part or not self.buffer.on_chip:
                raise fail(f"{len(keys)} indices for a tensor of {len(axes)} dimensions "
                           f"(shape {list(self.shape)})")
            # A [P] view on chip (a free dimension dropped by an integer index, as NKI's
            # "Basic Tensor Indexing" documents) still lies in memory as partitions x one
            # element: "NKI expects tile indices to have at least two dimensions to match
            # the underlying memory (SBUF or PSUM)" (nki.errors, err_1d_arange_not_supported,
            # whose workaround indexes ``tmp[0:64, 0]``). So it takes a second index as a
            # [P, 1] tile: flash attention passes ``l_buffer[:, i]`` to a helper that reads
            # and writes ``l_buffer[:, 0]`` (docstring: "l_buffer: (B_P_SIZE, 1)").
            axes = (*axes, Axis(1, 1))
        offset, p0 = self.offset, self.p0
        out: list[tuple[float, Axis]] = []
        exprs = False
        inside: dict[int, tuple[int, int]] = {}  # id(axis entry) -> positions inside
        why = ""
        for d in range(len(axes)):
            stride, count, part = axes[d]
            k = keys[d] if d < len(keys) else _ALL
            tk = type(k)
            if tk is slice:
                ks, ke, kp = k.start, k.stop, k.step  # type: ignore[union-attr]
                if not ((ks is None or type(ks) is int) and (ke is None or type(ke) is int)
                        and (kp is None or (type(kp) is int and kp >= 1))) and (
                        not all(v is None or whole(v) for v in (ks, ke, kp))
                        or (kp is not None and kp < 1)):  # plain ints pass at once
                    raise fail(f"slice {_slice_text(k)} of dimension {d}: a slice is "  # type: ignore[arg-type]
                               f"start:stop[:step] of whole numbers with a step of at least 1")
                start, stop, step = k.indices(count)  # type: ignore[union-attr]
                n, order = len(range(start, stop, step)), float(d)
                if ke is not None and ke > count:
                    if ks is not None and ks > 0:
                        start = ks
                    n = len(range(start, ke, step))
                    inside[len(out)] = (0, len(range(start, count, step)))
                    why = why or (f"slice {ks}:{ke} is out of range for dimension "
                                  f"{d} of size {count}")
            elif tk is MultiExpr:  # several iteration axes: one view axis per axis
                exprs = True
                lo, hi = k.bounds()  # type: ignore[union-attr]
                if lo < 0 or hi >= count:
                    raise fail(f"index expression covers {lo}..{hi}, outside dimension {d} of "
                               f"size {count}")
                terms = k.terms  # type: ignore[union-attr]
                if any(t.coef < 1 for t in terms):
                    raise fail(f"index expression over several axes with a step below 1 "
                               f"(dimension {d}) is not modelled")
                if part:
                    if len(terms) != 1 or terms[0].coef != 1:
                        raise fail("the partition dimension is indexed by one iteration axis "
                                   "with step 1 (i_p + k), not a sum of several")
                    p0 += k.const  # type: ignore[union-attr]
                    out.append((terms[0].pos - 0.5, Axis(1, terms[0].size, True)))
                    continue
                offset += k.const * stride  # type: ignore[union-attr]
                for t in terms:
                    out.append((t.pos - 0.5, Axis(stride * t.coef, t.size)))
                continue
            elif tk is Expr:
                exprs = True
                start, step, n, order = k.const, k.coef, k.size, k.pos - 0.5  # type: ignore
                last = start + step * (n - 1)
                if step < 1:
                    raise fail(f"index expression covers {start}..{last} with a step below 1 "
                               f"(dimension {d}) is not modelled")
                if start < 0 or last >= count:
                    inside[len(out)] = (max(0, (step - 1 - start) // step),
                                        max(0, min(n, (count - 1 - start) // step + 1)))
                    why = why or (f"index expression covers {start}..{last}, outside "
                                  f"dimension {d} of size {count}")
            else:
                if tk is not int:
                    if isinstance(k, bool):
                        raise fail(f"index {k!r} is not an int, a slice or an index "
                                   f"expression")
                    if isinstance(k, DynamicIndex) or (
                            isinstance(k, Tensor | View) and self.buffer.on_chip and not part):
                        return _dynamic(self, keys, d)  # an offset read from SBUF
                    if isinstance(k, Tensor | View | Pending):  # a tile of indices
                        return _indirect(self, keys, d)
                    try:
                        k = int(k)  # type: ignore[call-overload,arg-type]  # numpy integers
                    except (TypeError, ValueError):
                        raise fail(f"index of type {type(k).__name__} is not an int, a slice "
                                   f"or an index expression") from None
                if k < 0:  # type: ignore[operator]
                    k += count  # type: ignore[operator]
                if not 0 <= k < count:  # type: ignore[operator]
                    raise fail(f"index {k} is out of range for dimension {d} of size {count}")
                if part:
                    p0 += k  # type: ignore[operator]
                else:
                    offset += k * stride  # type: ignore[operator]
                continue
            if n < 1:
                raise fail(f"empty slice of dimension {d}")
            if part:
                if step != 1:
                    raise fail("the partition dimension is sliced with step 1 only")
                p0 += start
                out.append((order, Axis(1, n, True)))
            else:
                offset += start * stride
                out.append((order, Axis(stride * step, n)))
        if not why:
            if exprs:
                out.sort(key=lambda t: t[0])
                if len(out) == 1 and out[0][0] < 0:
                    # only a partition-axis expression (nl.arange(n)[:, None], an [n, 1]
                    # index array) left an axis: NKI's index arrays broadcast, so the view
                    # is [n, 1] (x[i_p] of a 1-D tensor, x[i_p, 0]), as NKI's tile shape
                    out.append((0.5, Axis(1, 1)))
            return View(self.tensor, offset, p0, tuple([a for _, a in out]), self.dt)
        marked = [(o, a, inside.get(j)) for j, (o, a) in enumerate(out)]
        if exprs:
            marked.sort(key=lambda t: t[0])
        return View(self.tensor, offset, p0, tuple([a for _, a, _ in marked]), self.dt,
                    Outside(tuple([r for _, _, r in marked]),
                            f"{why}; a mask= on the operation that uses it can leave the "
                            f"outside part out"))

    def __add__(self, other: object) -> Any:
        if isinstance(other, Expr):  # offsets[0, i] + i_f: a free-axis index read from SBUF
            return DynamicIndex(self, other)
        return super().__add__(other)

    def __radd__(self, other: object) -> Any:
        if isinstance(other, Expr):
            return DynamicIndex(self, other)
        return super().__radd__(other)

    def __setitem__(self, key: object, value: object) -> None:
        target = self[key]
        if isinstance(value, View) and value.same_place(target):
            return  # the write-back of ``x[...] += y``: already recorded by __iadd__
        if isinstance(value, Tensor) and value.full.same_place(target):
            return
        assign(target, value)

    def __iadd__(self, other: object) -> View:
        if (isinstance(other, Pending) and other.kind is LazyKind.MATMUL
                and other.result is None):
            other.write_into(self, accumulate=True)
            return self
        b = as_view(other)
        current().recording.tensor_tensor(self, self, b, "add", None, here())
        return self

    def view(self, dtype: Any = None) -> View:
        return self if dtype is None else _retyped(self, dtype)

    def broadcast_to(self, shape: tuple[int, ...]) -> Tensor:
        """A [1, F] tile on every one of ``shape[0]`` partitions: a new SBUF tile, loaded
        again from the device memory the tile came from with a DMA whose partitions all read
        the same row (partition step 0). A tile computed on chip is refused (a partition
        broadcast on chip goes through the PE or GpSimd, not modelled yet)."""
        where = here()
        v = self
        shape = tuple(int(d) for d in shape)
        if (len(shape) >= 2 and v.buffer.on_chip and v.partitions == shape[0] > 1
                and v.size == v.partitions and v.axes and v.axes[0].part):
            # [P] / [P, 1] along the free axis: a Vector copy reading each partition's one
            # element with step 0 (numpy's broadcast_to as an access pattern)
            out = Tensor(shape, v.dtype, BUFFERS["sbuf"], where)
            rec = current()
            rec.add_tensor(out)
            col = View(v.tensor, v.offset, v.p0, (v.axes[0], Axis(0, prod(shape[1:]))), v.dt)
            rec.recording.copy(out.full, col, None, where)
            return out
        if v.partitions != 1 or len(shape) < 2 or prod(shape[1:]) != v.size:
            raise fail(f"broadcast_to({list(shape)}) of a {list(v.shape)} tile: this model "
                       f"broadcasts a one-partition tile [1, F] to [P, F]", where)
        src = v.tensor.loaded_from
        if src is None or v.size != v.tensor.full.size:
            raise fail("broadcast_to of a tile computed on chip is not modelled yet; "
                       "broadcast it from the device-memory tensor it was loaded from", where)
        rows = View(src.tensor, src.offset, 0, (Axis(0, shape[0]), *src.axes[1:]), src.dt)
        out = Tensor(shape, v.dtype, v.tensor.buffer, where)
        rec = current()
        rec.add_tensor(out)
        rec.recording.dma(out.full, rows, where)
        return out


class DynamicIndex:
    """``offsets[0, i] + i_f``: a free-axis index of an on-chip tile whose start is the
    value of a one-element SBUF tile, read when the kernel runs
    (the source of nki.isa.tensor_copy_dynamic_src, the destination of _dst); ``expr`` the
    static part (None: 0)."""

    __slots__ = ("expr", "tile")

    def __init__(self, tile: View, expr: Expr | None = None) -> None:
        self.tile, self.expr = tile, expr


_DYNAMIC_ONLY = ("a tile indexed by an offset read from SBUF (x[i_p, offsets[0, i] + i_f]) "
                 "is the source of nisa.tensor_copy_dynamic_src or the destination of "
                 "nisa.tensor_copy_dynamic_dst only")


class DynamicView(View):
    """The window of :class:`DynamicIndex` at offset 0 (``window``), its ``offset`` tile,
    ``step`` elements per unit of offset, offsets ``lo``..``hi`` inside the tile, and
    ``region``: every element it may reach. Only tensor_copy_dynamic_src (as its src) and
    tensor_copy_dynamic_dst (as its dst) may use it."""

    __slots__ = ("hi", "lo", "offset_tile", "region", "step", "window")

    def __init__(self, window: View, offset_tile: View, step: int, lo: int, hi: int,
                 region: View) -> None:
        super().__init__(window.tensor, window.offset, window.p0, window.axes, window.dt,
                         Outside(tuple([None] * len(window.axes)), _DYNAMIC_ONLY))
        self.window, self.offset_tile, self.region = window, offset_tile, region
        self.step, self.lo, self.hi = step, lo, hi


def _dynamic(v: View, keys: list[object], d: int) -> DynamicView:
    """``v[..., offsets[0, i] + i_f, ...]`` of an on-chip tile (nki.isa
    .tensor_copy_dynamic_src: "The dynamic offset must be a scalar value resided in SBUF")."""
    k = keys[d]
    dyn = k if isinstance(k, DynamicIndex) else DynamicIndex(as_view(k))
    tile = as_view(dyn.tile)
    if not v.buffer.on_chip or v.axes[d].part:
        raise fail("an offset read from SBUF indexes a free dimension of an SBUF/PSUM tile")
    if tile.outside is not None:
        tile.outside.check()
    if tile.buffer.name != "sbuf" or tile.size != 1 or tile.dtype.fmt not in INDEX_FORMATS:
        raise fail(f"a dynamic offset is one int32/uint32 element of an SBUF tile, not a "
                   f"{list(tile.shape)} {tile.dtype} {tile.buffer.name.upper()} tile")
    static: object = dyn.expr if dyn.expr is not None else 0
    lo, hi = 0, 0
    if isinstance(static, Expr):
        a, b = static.const, static.const + static.coef * (static.size - 1)
        lo, hi = min(a, b), max(a, b)
    count = v.axes[d].num
    at0 = list(keys)
    at0[d] = static  # the window at offset 0: the static part alone
    window = v[tuple(at0)]
    whole_axis = list(keys)
    whole_axis[d] = _ALL
    region = v[tuple(whole_axis)]
    for w in (window, region):
        if w.outside is not None:
            w.outside.check()
    # offset o moves the window o elements along the axis: lo + o >= 0, hi + o < count
    return DynamicView(window, tile, v.axes[d].stride, -lo, count - 1 - hi, region)


_INDIRECT_ONLY = ("a view indexed by a tile of indices (x[idx_tile, ...]) is the source or "
                  "destination of a DMA only: nl.load, nl.store, nl.atomic_rmw or "
                  "nisa.dma_copy; load the rows into a tile first")


class IndirectView(View):
    """``x[idx_tile, ...]`` of a device-memory tensor: the rows the int32 values of
    ``index`` (an SBUF tile [K, 1]) name along ``x``'s first dimension (or the first after
    integer indices: ``x[b, idx_tile, ...]``), resolved when the
    kernel runs (an indirect DMA: NKI docs, nki.language.load / store "indirect"). Its shape
    is [K, ...]; ``table`` is the plain view of every row an index may name (the other
    indices applied). Only a DMA may use it (nki/ops.py record_dma): it carries an
    :class:`Outside` whose message says so, which every other operation, a further index and
    a reshape raise (and a mask= cut never clears: no row is inside)."""

    __slots__ = ("index", "table")

    def __init__(self, table: View, index: View) -> None:
        head = table.axes[0]
        inside: tuple[tuple[int, int] | None, ...] = ((0, 0), *([None] * (len(table.axes) - 1)))
        super().__init__(table.tensor, table.offset, table.p0,
                         (Axis(head.stride, index.partitions), *table.axes[1:]), table.dt,
                         Outside(inside, _INDIRECT_ONLY))
        self.table, self.index = table, index




def _indirect(v: View, keys: list[object], d: int) -> IndirectView:
    """``v[idx_tile, ...]``: the rows of device-memory view ``v`` named by the values of an
    SBUF tile of int32 indices, one per partition ([K, 1]; NKI docs: "indices have to be in
    SBUF"), along ``v``'s first dimension, or the first left by integer indices before it
    (``x[b, idx_tile, i_f]``: nki-samples' resize_nearest, rows of batch b); the other keys
    index the rest as usual."""
    if (any(not whole(k) for k in keys[:d])
            or any(isinstance(k, Tensor | View | Pending) for k in keys[d + 1:])):
        raise fail("a tile of indices indexes the first dimension, or the first after integer "
                   "indices (x[idx_tile, i_f], x[b, idx_tile, i_f]: an indirect DMA of whole "
                   "rows); other dimensions take ints, slices and index expressions")
    if v.buffer.on_chip:
        raise fail(f"indexing a {v.buffer.name.upper()} tile with a tile of indices is not "
                   f"modelled; an indirect DMA gathers or scatters rows of a device-memory "
                   f"(HBM) tensor")
    idx = as_view(keys[d])
    if idx.outside is not None:
        idx.outside.check()
    if idx.buffer.name != "sbuf":
        raise fail(f"the indices of an indirect DMA are an SBUF tile (NKI docs: indices have "
                   f"to be in SBUF), not {idx.buffer.name.upper()}; load them with nl.load")
    if idx.dtype.fmt not in INDEX_FORMATS:
        raise fail(f"the indices of an indirect DMA are int32 or uint32, not {idx.dtype}")
    if not idx.axes or not idx.axes[0].part or idx.size != idx.partitions:
        raise fail(f"the indices of an indirect DMA are one per partition ([K, 1]), not a "
                   f"{list(idx.shape)} tile")
    head = v.axes[d]
    # every row, as a partition-axis index: the rows stay outermost beside index
    # expressions over the free axes (a slice would be ordered by its dimension)
    table = v[(*keys[:d], Expr(0, head.num), *keys[d + 1:])]
    if table.outside is not None:
        table.outside.check()
    if not table.axes or table.axes[0] != Axis(head.stride, head.num):
        raise fail("with a tile of indices, the other indices must keep the indexed rows "
                   "outermost (x[idx_tile, i_f]); this arrangement is not modelled")
    return IndirectView(table, idx)


def _slice_text(k: slice) -> str:
    parts = ["" if v is None else repr(v) for v in (k.start, k.stop, k.step)]
    return ":".join(parts if k.step is not None else parts[:2])


def same_shape(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    """Shapes agree up to dimensions of size 1 (NKI drops them freely)."""
    return a == b or tuple(s for s in a if s != 1) == tuple(s for s in b if s != 1)


def assign(target: View, value: object) -> None:
    """``target[...] = value``: a lazy result is written in place; a tile is copied (DMA
    when either side is in HBM, else a Vector engine copy); a number is a memset."""
    if isinstance(value, Pending) and value.result is None:
        value.write_into(target, accumulate=False)
        return
    if is_number(value) or isinstance(value, bool):  # bool: a memset of 1 / 0
        where = here()
        try:
            v = fill_value(value, target.dtype)
        except SystolicError as exc:
            raise fail(f"assigning a number (a memset): {exc}", where) from None
        current().recording.memset(target, v, None, where)
        return
    src = as_view(value)
    if not target.buffer.on_chip or not src.buffer.on_chip:
        current().recording.dma(target, src, here())
    else:
        current().recording.copy(target, src, None, here())
