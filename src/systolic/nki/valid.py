"""Which elements hold values computed only from memory something wrote (a build pass).

A kernel may compute on a whole tile and keep only the part it wrote (a masked tail: load
100 rows of a 128-partition tile, square all 128, store the 100), so reading unwritten
memory is not by itself an error. It is one when such values leave the chip: whatever the
memory held (garbage on hardware, NaN in this model's fresh memory) would be the kernel's
output. :func:`check_values` follows every element through the recorded operations and
refuses, in one line, the first write into device memory (HBM) of an element whose value
depends on an element nothing wrote, naming the tile that was read unwritten and the line
that read it.

Per tensor, every element is *valid* (written with values computed from valid elements) or
not: the kernel's arguments and ``nl.shared_constant`` tensors are valid, everything else
starts invalid. How an operation combines its elements (:data:`RULES`):

* element-wise (DMA, copies, tensor_tensor, tensor_scalar, scalar_tensor_tensor, activation,
  reciprocal): element i of dst is valid when element i of every source is (a [P, 1]
  operand: element p of that partition);
* along each partition (tensor_reduce, the reduce of activation, bn_stats / bn_aggr, scans):
  every output element of partition p is valid when all elements of p read are;
* the Tensor Engine (nc_matmul): out[m, n] is valid when column m of the stationary and
  column n of the moving tile are valid over the whole contraction (a NaN or garbage value
  times anything is garbage), and an accumulating matmul keeps what was there;
* an indirect DMA: a gather's row k is valid where the index at partition k is and, for
  each element of a row, that element is valid in every row of the source tensor an index
  may name (which rows they name is known only when the kernel runs); a scatter must write
  valid values (its rows and indices wholly valid, and with ``dst_rmw_op`` the whole
  table, whose rows it reads), and leaves the table's validity as it was: the rows it
  writes are unknown here, so none is counted written (a kernel that scatters into fresh
  memory and then stores those rows elsewhere is refused, conservatively);
* ``tensor_copy_dynamic_dst``: its window lands where the offset, read when the kernel runs,
  says, so any element of the region it may write may or may not be written. Its src and
  offset wholly valid: the region's validity is left as it was (an element is not counted
  written, since the window may miss it; a valid one stays valid, since whatever lands on
  it is valid); else every element of the region may now hold an invalid value: none is
  valid (a kernel that fills a fresh tile by dynamic copies and stores it is refused,
  conservatively, as the scatter's fresh table; the message names the dynamic copy);
* memset and iota write valid elements; any other kind: all dst elements valid only when
  everything it reads is (the conservative rule, for kinds added later).

Cost: a tensor all of whose elements are valid keeps no map (most tiles: one whole write);
the others keep one byte per element, viewed through each access's strides (numpy
``as_strided``), never copied per element.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..errors import KernelError
from .opkind import DynamicCopyDstArgs, IndirectDmaArgs, OpKind
from .record import Op, Where
from .tensor import Tensor, View

__all__ = ["POLICY", "RULES", "UnwrittenWarning", "check_values"]

Cells = np.ndarray | None  # a bool array of a view's shape; None: every element valid


@dataclass
class _State:
    """One tensor: ``cells`` its elements' validity ([partitions, free] on chip, [elements]
    in device memory), None once all are valid, and ``missing`` how many are not;
    ``origin`` the first read of unwritten memory that its invalid values come from (the
    tensor read, the line)."""

    cells: np.ndarray | None
    missing: int = 0
    origin: tuple[Tensor, Where] | None = None
    # device memory written in parts and not read yet: the views written, their element
    # map made only when something reads it (an output stored tile by tile is never read:
    # its 64 MiB map cost 0.3 s of first page touches at 4096 x 8192 x 8192)
    pending: list[View] | None = None


# ``cells`` of a tensor whose map is pending: not None (so no fast path takes it as wholly
# valid), never indexed (every reader goes through _Tracker._get, which makes the map)
_PENDING = np.zeros(0, dtype=bool)


def _shape(t: Tensor) -> tuple[int, ...]:
    return (t.partitions, t.free_elems) if t.buffer.on_chip else (t.free_elems,)


def _window(m: np.ndarray, v: View) -> np.ndarray:
    """``m`` (a tensor's element map) seen through view ``v``: an array of the view's shape
    sharing ``m``'s memory (reads and writes go to the elements the view names)."""
    flat = m.reshape(-1)
    row = m.shape[1] if m.ndim == 2 else 0
    start = (v.p0 - v.tensor.p_base) * row + v.offset
    strides = tuple(row if a.part else a.stride for a in v.axes)  # bytes: bool is 1 byte
    return as_strided(flat[start:], shape=v.shape, strides=strides)


def _whole(v: View) -> bool:
    """``v`` names every element of its tensor once (``t``, ``t[...]``)."""
    return v.p0 == 0 and v.offset == 0 and v.axes == v.tensor.full_axes


class _Tracker:
    def __init__(self, valid: list[Tensor]) -> None:
        self.state: dict[int, _State] = {t.id: _State(None) for t in valid}

    def _get(self, t: Tensor) -> _State:
        st = self.state.get(t.id)
        if st is None:
            shape = _shape(t)
            st = self.state[t.id] = _State(np.zeros(shape, dtype=bool), int(np.prod(shape)))
        elif st.pending is not None:  # the map, from the writes kept so far
            views, st.pending = st.pending, None
            shape = _shape(t)
            st.cells, st.missing = np.zeros(shape, dtype=bool), int(np.prod(shape))
            for v in views:
                self.write(v, None, None)
        return st

    def read(self, v: View) -> Cells:
        st = self._get(v.tensor)
        if st.cells is None:
            return None
        w = _window(st.cells, v)
        return None if w.all() else w

    def origin(self, v: View, where: Where) -> tuple[Tensor, Where]:
        """Where the invalid values ``v`` reads come from: the tensor's own origin, or this
        read (of memory nothing wrote)."""
        st = self._get(v.tensor)
        return st.origin if st.origin is not None else (v.tensor, where)

    def write(self, v: View, cells: Cells, origin: tuple[Tensor, Where] | None) -> None:
        if cells is None and v.tensor.id not in self.state and _whole(v):
            self.state[v.tensor.id] = _State(None)  # the common first write: no map
            return
        if cells is None and not v.tensor.buffer.on_chip:  # valid values into device memory
            st0 = self.state.get(v.tensor.id)
            if st0 is None:
                self.state[v.tensor.id] = _State(_PENDING, pending=[v])
                return
            if st0.pending is not None:
                if _whole(v):
                    st0.cells, st0.missing, st0.origin, st0.pending = None, 0, None, None
                else:
                    st0.pending.append(v)
                return
        st = self._get(v.tensor)
        if st.cells is None:
            if cells is None:
                return
            st.cells, st.missing = np.ones(_shape(v.tensor), dtype=bool), 0
        if cells is None and _whole(v):
            st.cells, st.missing, st.origin = None, 0, None
            return
        w = _window(st.cells, v)
        once = all(a.stride != 0 or a.num == 1 for a in v.axes)  # each element named once
        before = int(np.count_nonzero(w)) if once else 0
        w[...] = True if cells is None else cells
        if once:
            st.missing -= int(np.count_nonzero(w)) - before
        else:
            st.missing = int(st.cells.size - np.count_nonzero(st.cells))
        if st.missing <= 0:  # exact again (an access naming an element twice over-counts)
            st.missing = int(st.cells.size - np.count_nonzero(st.cells))
        if st.missing == 0:
            st.cells, st.origin = None, None
        elif origin is not None and cells is not None and not cells.all():
            st.origin = st.origin or origin


# -- how each kind combines its elements --------------------------------------------------
Rule = Callable[[Op, list[Cells]], tuple[Cells, list[Cells]]]
"""(op, the cells of each source) -> (the dst's cells, the cells of each of ``op.outs``)."""


def _flat_like(c: np.ndarray, dst: View) -> np.ndarray | None:
    """Source cells arranged as dst's elements, or None when the shapes do not pair up."""
    if c.size == dst.size:
        return c.reshape(dst.shape)
    parts = dst.partitions
    if c.size == parts and dst.size % parts == 0:  # a [P, 1] operand: per partition
        return np.broadcast_to(c.reshape((parts,) + (1,) * (len(dst.shape) - 1)),
                               dst.shape)
    return None


def _all(cells: list[Cells]) -> bool:
    return all(c is None or bool(c.all()) for c in cells)


def _elementwise(op: Op, cells: list[Cells]) -> tuple[Cells, list[Cells]]:
    out: np.ndarray | None = None
    for c in cells:
        if c is None:
            continue
        arranged = _flat_like(c, op.dst)
        if arranged is None:  # shapes that do not pair element by element: all or none
            arranged = np.zeros(op.dst.shape, dtype=bool)
        out = arranged.copy() if out is None else out & arranged
    return out, [_per_partition(out, o, op.dst) for o in op.outs]


def _rows(c: np.ndarray, v: View) -> np.ndarray:
    """Per partition of ``v`` (its first axis when it has one), all elements valid."""
    if not v.axes or not v.axes[0].part:
        return np.array([bool(c.all())])
    return np.asarray(c.reshape(c.shape[0], -1).all(axis=1))


def _per_partition(dst_cells: Cells, out: View, like: View) -> Cells:
    """An output of one element per partition (a reduce_res) from dst's cells."""
    if dst_cells is None:
        return None
    rows = _rows(dst_cells, like)
    return _fit(rows, out)


def _fit(rows: np.ndarray, v: View) -> np.ndarray:
    """Per-partition validity spread over view ``v`` (one value per partition of it)."""
    if rows.size == v.partitions:
        return np.broadcast_to(rows.reshape((rows.size,) + (1,) * (len(v.shape) - 1)),
                               v.shape)
    return np.broadcast_to(np.array(bool(rows.all())), v.shape)


def _along_partitions(op: Op, cells: list[Cells]) -> tuple[Cells, list[Cells]]:
    if all(c is None for c in cells):
        return None, [None] * len(op.outs)
    rows: np.ndarray | None = None
    for c, v in zip(cells, op.srcs, strict=True):
        if c is None:
            continue
        r = _rows(c, v)
        if rows is not None and r.size != rows.size:
            r = np.full(rows.size, bool(r.all()))
        rows = r if rows is None else rows & r
    assert rows is not None
    return _fit(rows, op.dst), [_fit(rows, o) for o in op.outs]


def _matmul(op: Op, cells: list[Cells]) -> tuple[Cells, list[Cells]]:
    stat, mov = cells[0], cells[1]
    if stat is None and mov is None:
        return None, []
    m, n = op.srcs[0].shape[-1], op.srcs[1].shape[-1]
    cols_m = np.ones(m, bool) if stat is None else stat.reshape(-1, m).all(axis=0)
    cols_n = np.ones(n, bool) if mov is None else mov.reshape(-1, n).all(axis=0)
    return np.outer(cols_m, cols_n).reshape(op.dst.shape), []


def _written(op: Op, cells: list[Cells]) -> tuple[Cells, list[Cells]]:
    return None, [None] * len(op.outs)


def _whole_or_none(op: Op, cells: list[Cells]) -> tuple[Cells, list[Cells]]:
    if _all(cells):
        return None, [None] * len(op.outs)
    return (np.zeros(op.dst.shape, bool),
            [np.zeros(o.shape, bool) for o in op.outs])


def _transpose(op: Op, cells: list[Cells]) -> tuple[Cells, list[Cells]]:
    c = cells[0]
    if c is None:
        return None, []
    if c.ndim == 2 and c.T.shape == op.dst.shape:
        return c.T, []
    return _whole_or_none(op, cells)


def _gather(op: Op, cells: list[Cells]) -> tuple[Cells, list[Cells]]:
    table, index = cells[0], cells[1]
    k = op.dst.partitions
    out = np.ones((k, op.dst.size // k), dtype=bool)
    if table is not None:  # an element of a row: valid in every row an index may name
        cols: np.ndarray = np.asarray(table.reshape(table.shape[0], -1).all(axis=0))
        out &= cols[None, :]
    if index is not None:  # row k: its index valid
        rows: np.ndarray = np.asarray(index.reshape(k, -1).all(axis=1))
        out &= rows[:, None]
    return out.reshape(op.dst.shape), []


RULES: dict[OpKind, Rule] = {
    OpKind.DMA: _elementwise,
    OpKind.INDIRECT_DMA: _gather,  # a scatter never gets here (check_values)
    # the element an offset / index names is known only when the kernel runs: all of dst
    # valid when everything it may read (the whole region, the indices) is, else none
    OpKind.TENSOR_COPY_DYNAMIC: _whole_or_none,
    OpKind.GATHER_FLATTENED: _whole_or_none,
    OpKind.COPY: _elementwise,
    OpKind.TENSOR_TENSOR: _elementwise,
    OpKind.TENSOR_SCALAR: _elementwise,
    OpKind.RECIPROCAL: _elementwise,
    OpKind.SCALAR_TENSOR_TENSOR: _elementwise,
    OpKind.ACTIVATION: _elementwise,  # its reduce_res: per partition, as _elementwise's outs
    OpKind.TENSOR_REDUCE: _along_partitions,
    OpKind.BN_STATS: _along_partitions,
    OpKind.BN_AGGR: _along_partitions,
    OpKind.TENSOR_TENSOR_SCAN: _along_partitions,
    OpKind.MATMUL: _matmul,
    OpKind.MEMSET: _written,
    OpKind.IOTA: _written,
    OpKind.VECTOR_TRANSPOSE: _transpose,
}
"""How each kind combines elements (module docstring); a kind not listed: all or none."""


def check_values(ops: list[Op], valid: list[Tensor], accumulates: set[int]) -> None:
    """Refuse the first write into device memory of values that depend on memory nothing
    wrote (module docstring). ``valid``: the tensors whose every element is set before the
    kernel runs; ``accumulates``: indices of the matmuls that add onto their dst."""
    tr = _Tracker(valid)
    state = tr.state
    maybe: dict[int, Where] = {}  # tensor id -> the first dynamic copy that may write it
    for i, op in enumerate(ops):
        if isinstance(op.args, IndirectDmaArgs) and op.args.scatter:
            _scatter(tr, op)
            continue
        if isinstance(op.args, DynamicCopyDstArgs):
            _dynamic_dst(tr, op)
            maybe.setdefault(op.dst.tensor.id, op.where)
            continue
        # the common case first, in plain loops (a generator per op cost ~0.3 s of a
        # 100,000-op kernel): every source wholly valid, so whatever the op writes is valid
        # (an accumulating matmul: when its dst is wholly valid too)
        for v in op.srcs:
            st = state.get(v.tensor.id)
            if st is None or st.cells is not None:
                break
        else:
            st = state.get(op.dst.tensor.id)
            whole_dst = st is not None and st.cells is None
            if i not in accumulates or whole_dst:
                if not whole_dst:
                    tr.write(op.dst, None, None)
                for v in op.outs:
                    tr.write(v, None, None)
                continue
        cells = [tr.read(v) for v in op.srcs]
        if any(c is not None for c in cells):
            dst, outs = RULES.get(op.kind, _whole_or_none)(op, cells)
        else:  # every kind: what is computed from valid elements only is valid
            dst, outs = None, [None] * len(op.outs)
        origin = None
        if dst is not None or any(o is not None for o in outs):
            bad = next((v for v, c in zip(op.srcs, cells, strict=True) if c is not None),
                       None)
            origin = tr.origin(bad, op.where) if bad is not None else None
        if op.kind is OpKind.MATMUL and i in accumulates:
            old = tr.read(op.dst)
            if old is not None:
                dst = old.copy() if dst is None else dst & old
                origin = origin or tr.origin(op.dst, op.where)
        if dst is not None and not op.dst.buffer.on_chip and not dst.all():
            _refuse(op, origin, maybe)
        tr.write(op.dst, dst, origin)
        for v, c in zip(op.outs, outs, strict=True):
            tr.write(v, c, origin)


def _scatter(tr: _Tracker, op: Op) -> None:
    """An indirect store (module docstring): refused when what it writes, or with
    ``dst_rmw_op`` the table it adds onto, is not wholly valid; the table's validity is left
    as it was (the rows written are known only when the kernel runs)."""
    for v in op.srcs:
        if tr.read(v) is not None:
            _refuse(op, tr.origin(v, op.where))


class UnwrittenWarning(UserWarning):
    """Values computed from memory nothing wrote were stored to device memory (the
    ``"warn"`` policy of :data:`POLICY`); the message names the kernel's FILE:LINE."""


POLICY = "error"
"""What a store of values computed from memory nothing wrote does: ``"error"`` (the
default: a :class:`~systolic.errors.KernelError` before anything runs) or ``"warn"`` (an
:class:`UnwrittenWarning`, and the values are whatever the memory held: the model's fill
pattern, NaN for float formats, as hardware's "garbage data", nki_known_issues.rst). The
pytest plugin sets ``"warn"``: there a kernel's own test is the judge of its values, as on
hardware (aws-neuron-sdk's masked nc_match_replace8 test stores a partly written tile and
checks only the written part)."""


def _dynamic_dst(tr: _Tracker, op: Op) -> None:
    """``tensor_copy_dynamic_dst`` (module docstring): the region's validity as it was when
    src and offset are wholly valid, else none of it valid."""
    bad = next((v for v in op.srcs if tr.read(v) is not None), None)
    if bad is not None:
        tr.write(op.dst, np.zeros(op.dst.shape, dtype=bool), tr.origin(bad, op.where))


def _refuse(op: Op, origin: tuple[Tensor, Where] | None,
            maybe: dict[int, Where] | None = None) -> None:
    what = "memory nothing wrote"
    hint = ""
    if origin is not None:
        t, (_, line) = origin
        made = ("an argument" if t.is_input else
                f"{t.name or 'the tile'} made at line {t.where[1]}")
        what = f"part of {made} that nothing wrote, read at line {line}"
        dyn = (maybe or {}).get(t.id)
        if dyn is not None:
            hint = (f" (the tensor_copy_dynamic_dst at line {dyn[1]} may or may not write "
                    f"it: its offset is read when the kernel runs, so it is not counted)")
    if POLICY == "warn":
        import warnings

        file, line = op.where
        warnings.warn_explicit(
            f"{op.kind.value} writes device memory with values computed from {what}{hint}: "
            f"they are whatever that memory held (NaN here, garbage on hardware)",
            UnwrittenWarning, file, line)
        return
    raise KernelError(*op.where, (
        f"{op.kind.value} writes device memory with values computed from {what}{hint}: "
        f"they would be whatever that memory held; write the whole tile first, or mask the "
        f"accesses (mask=) to the part that was written"))
