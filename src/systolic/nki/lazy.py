"""Lazy results and the operators that make them: ``nl.add`` and friends as objects
(:class:`NlOp`), the :class:`Pending` result of the older API (``nl.load``, ``nl.exp(t)``,
``a * b``), the Python operators on tiles (:class:`Arithmetic`, mixed into tensors, views
and lazy results) and their dispatch to tensor_tensor or tensor_scalar (:func:`binary`).

Below :mod:`systolic.nki.tensor`: tiles are reached through their ``view()`` method.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, TypeGuard

import numpy as np

from ..isa import ActivationFunc, AluOp
from .record import current, fail, here
from .types import DType

if TYPE_CHECKING:
    from .tensor import Tensor, View

__all__ = ["Arithmetic", "LazyKind", "NlOp", "Pending", "as_view", "binary", "is_number"]


class LazyKind(enum.Enum):
    """What a lazy result of the older API computes; nki/results.py ``LAZY`` has, per kind,
    the tile it lands in when used and how it is written when assigned."""

    LOAD = "nl.load"
    MATMUL = "nc_matmul"
    COPY = "tensor_copy"
    TENSOR_TENSOR = "tensor_tensor"
    TENSOR_SCALAR = "tensor_scalar"
    TENSOR_REDUCE = "tensor_reduce"
    ACTIVATION = "activation"
    TRANSPOSE = "nc_transpose"
    DMA_TRANSPOSE = "dma_transpose"
    BN_STATS = "bn_stats"
    BN_AGGR = "bn_aggr"
    IOTA = "iota"
    RECIPROCAL = "reciprocal"
    TENSOR_TENSOR_SCAN = "tensor_tensor_scan"
    SCALAR_TENSOR_TENSOR = "scalar_tensor_tensor"
    LOOP_REDUCE = "nl.loop_reduce"
    # issue 19, second part (nki/select.py, top8.py, gather.py, random.py: each kind's
    # rule is in its family's RULES)
    AFFINE_SELECT = "affine_select"
    RANGE_SELECT = "range_select"
    WHERE = "nl.where"
    PARTITION_REDUCE = "tensor_partition_reduce"
    MAX8 = "max8"
    FIND_INDEX8 = "nc_find_index8"
    MATCH_REPLACE8 = "nc_match_replace8"
    LOCAL_GATHER = "local_gather"
    TENSOR_COPY_DYNAMIC = "tensor_copy_dynamic_src"
    GATHER_FLATTENED = "gather_flattened"
    SEQUENCE_BOUNDS = "sequence_bounds"
    RAND = "nl.rand"
    DROPOUT = "dropout"


class NlOp:
    """``nl.add``, ``nl.exp`` and friends: usable as ``op=`` (its ``alu`` or ``act``)."""

    def __init__(self, name: str, alu: AluOp | None, act: ActivationFunc | None) -> None:
        self.name, self.alu, self.act = name, alu, act

    def __repr__(self) -> str:
        return f"nl.{self.name}"


_OPERATORS = {name: NlOp(name, alu, None) for name, alu in (
    ("add", AluOp.ADD), ("subtract", AluOp.SUBTRACT), ("multiply", AluOp.MULTIPLY),
    ("divide", AluOp.DIVIDE))}
_NEGATIVE = NlOp("negative", None, ActivationFunc.NEGATIVE)


def is_number(x: object) -> TypeGuard[int | float]:
    """A Python or numpy number (``total / np.int32(4)``), not a bool."""
    return (isinstance(x, int | float | np.integer | np.floating)
            and not isinstance(x, bool | np.bool_))


def _column(col: View, full: View) -> bool:
    """``col`` is one element per partition of ``full`` and ``full`` is wider: NKI
    broadcasts it along the free axis (a tensor_scalar with a [P, 1] operand)."""
    return (col.partitions == full.partitions and col.size == col.partitions
            and full.size > full.partitions)


_TS = LazyKind.TENSOR_SCALAR


def _partitions(a: View, b: View) -> tuple[View, View]:
    """numpy broadcasting along the partition axis: a one-partition ``a`` ([1, F], [1, 1])
    against a ``b`` of P partitions is read on every partition (``a.broadcast_to``: one DMA
    from the device memory it was loaded from, partition step 0; a tile computed on chip is
    refused there in one line)."""
    if (a.partitions == 1 and b.partitions > 1 and len(a.shape) == len(b.shape)
            and a.shape[0] == 1):
        return a.broadcast_to((b.partitions, *a.shape[1:])).full, b
    if not a.shape and b.partitions > 1:
        # a 0-d tile (one element, ``nl.load(sinks[b, h])``) broadcasts to any shape, numpy's
        # rule that nl.add & co. follow ("x.shape and y.shape must be broadcastable to a
        # common shape", nki.language.add): read as [1, 1] on every partition, a [P, 1]
        # column that the operation then broadcasts along the free axis
        return a.broadcast_to((b.partitions, 1)).full, b
    return a, b


def binary(op: NlOp, x: object, y: object, where: tuple[str, int], dtype: object = None
           ) -> Pending:
    """``op(x, y)`` of tiles and numbers: a tensor_scalar when one side is a number or a
    [P, 1] column of the other (broadcast along the free axis, reversed when it is on the
    left), else a tensor_tensor."""
    ts = {"op1": None, "operand1": None, "reverse1": False, "dtype": dtype}
    if is_number(y) and not is_number(x):
        return Pending(_TS, where, src=x, op0=op, operand0=float(y), reverse0=False, **ts)
    if is_number(x) and not is_number(y):
        return Pending(_TS, where, src=y, op0=op, operand0=float(x), reverse0=True, **ts)
    vx, vy = _partitions(as_view(x), as_view(y))
    vy, vx = _partitions(vy, vx)
    if _column(vy, vx):
        return Pending(_TS, where, src=vx, op0=op, operand0=vy, reverse0=False, **ts)
    if _column(vx, vy):
        return Pending(_TS, where, src=vy, op0=op, operand0=vx, reverse0=True, **ts)
    if vx.shape != vy.shape:
        # numpy broadcasting along free axes of size 1 ("x.shape and y.shape must be
        # broadcastable to a common shape", nki.language.add & co.): read with step 0
        vx = (vx.stretched(vy.shape) if vx.size < vy.size else None) or vx
        vy = (vy.stretched(vx.shape) if vy.size < vx.size else None) or vy
    return Pending(LazyKind.TENSOR_TENSOR, where, a=vx, b=vy, op=op, dtype=dtype)


class Arithmetic:
    """Python operators on tiles and lazy results, as NKI allows them (``a * b``,
    ``t / n``, ``-t``): each is the nl function of the same name."""

    __slots__ = ()

    def _op(self, name: str, other: object, swap: bool = False) -> Any:
        op, where = _OPERATORS[name], here()
        return binary(op, other, self, where) if swap else binary(op, self, other, where)

    def __add__(self, other: object) -> Any:
        return self._op("add", other)

    def __radd__(self, other: object) -> Any:
        return self._op("add", other, True)

    def __sub__(self, other: object) -> Any:
        return self._op("subtract", other)

    def __rsub__(self, other: object) -> Any:
        return self._op("subtract", other, True)

    def __mul__(self, other: object) -> Any:
        return self._op("multiply", other)

    def __rmul__(self, other: object) -> Any:
        return self._op("multiply", other, True)

    def __truediv__(self, other: object) -> Any:
        return self._op("divide", other)

    def __rtruediv__(self, other: object) -> Any:
        return self._op("divide", other, True)

    def __neg__(self) -> Any:
        return Pending(LazyKind.ACTIVATION, here(), src=self, op=_NEGATIVE, scale=1.0,
                       dtype=None)


class Pending(Arithmetic):
    """A lazy result of the older API (``nl.load``, ``nl.matmul``, ``nl.copy`` ...): written
    straight into its destination when assigned, or into a fresh tile when used."""

    __slots__ = ("args", "kind", "result", "where")

    def __init__(self, kind: LazyKind, where: tuple[str, int], **args: Any) -> None:
        self.kind, self.where, self.args = kind, where, args
        self.result: Tensor | None = None
        current().pending.append(self)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.materialize().shape

    @property
    def dtype(self) -> DType:
        return self.materialize().dtype

    def __getitem__(self, key: object) -> View:
        return self.materialize()[key]

    def __iadd__(self, other: object) -> Tensor:
        t = self.materialize()
        t += other
        return t

    def __setitem__(self, key: object, value: object) -> None:
        self.materialize()[key] = value

    def view(self) -> View:
        """The whole tile it lands in (materialised into a fresh tile when unassigned)."""
        return self.materialize().full

    def broadcast_to(self, shape: tuple[int, ...]) -> Tensor:
        return self.materialize().full.broadcast_to(shape)

    def materialize(self) -> Tensor:
        if self.result is not None:
            return self.result
        rec = current()
        rec.writing.add(id(self))
        try:
            self.result = rec.recording.materialize(self)
        finally:
            rec.writing.discard(id(self))
        return self.result

    def write_into(self, dst: View, accumulate: bool | None = None) -> None:
        self.result = dst.tensor  # consumed (set first: recording flushes pending results)
        rec = current()
        rec.writing.add(id(self))
        try:
            rec.recording.write(self, dst, accumulate)
        finally:
            rec.writing.discard(id(self))


def as_view(x: object) -> View:
    """A View of a tensor, a view, or a lazy result (materialised into a fresh tile)."""
    view = getattr(x, "view", None)
    if view is None:
        raise fail(f"expected a tensor or a tile, got {type(x).__name__}")
    return view()  # type: ignore[no-any-return]
