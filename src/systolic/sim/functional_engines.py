"""Values of the engine instructions: DmaCopy, DmaIndirect, TensorCopy, TensorTensor,
Memset, Activation, TensorScalar, TensorReduce, QuantizeMx.

Each handler is a function of (memory, instruction) (wrapped as (state, instruction) for the
simulator's handler table), vectorised over the whole access
pattern with numpy. Semantics (NKI docs, nki.isa.*):

* ``DmaCopy`` moves bytes: element for element, no cast (the formats must match).
* ``DmaIndirect`` reads its indices from SBUF when it executes, then moves whole rows:
  gathers table rows into the SBUF partitions, or scatters the partitions into table rows
  (in partition order; with ``accumulate`` each row is added in fp32 and rounded to the
  table's format). An index outside the table is a one-line
  :class:`~systolic.errors.IndirectIndexError`, or with ``skip_oob`` its row is left out.
* ``TensorCopy`` casts through fp32 when the formats differ: the source is decoded to fp32
  (integers to int64), then rounded to the destination's format.
* ``TensorTensor`` computes op(a, b) in fp32 (integer add, subtract, multiply of integer
  tiles on GpSimd: integer math) and rounds the result to dst's format.
* ``Memset`` writes ``value`` rounded to dst's format.
* ``Activation`` writes func(x * scale + bias) rounded to dst's format: x, scale and bias in
  fp32 (scale a constant or one value per partition, bias one per partition), the function
  evaluated exactly in float64 and rounded to fp32 (docs/NUMERICS.md "Activation
  functions"); with ``acc`` each partition's fp32 results are reduced (add, max, min) into
  it, rounded to its format.
* ``TensorScalar`` computes (x op0 c0) op1 c1 in fp32, each c a constant or one value per
  partition (``reverse``: c on the left); with ``acc`` (tensor_scalar_reduce) each
  partition's fp32 results are reduced into it as Activation's are.
* ``TensorReduce`` reduces each partition's free elements (the innermost runs, one per dst
  element of the partition) with op in fp32 (negated when
  asked), rounded to dst's format.
* ``QuantizeMx`` (NKI docs, nki.isa.quantize_mx; OCP MX v1.0 section 6.3): per group of 8
  partitions x 4 consecutive elements, the E8M0 scale code is the largest fp32 biased
  exponent of the group minus the element format's emax (clamped to 0..254); the elements
  are x / 2^(code - 127), saturated to the format's largest finite value, rounded to nearest
  even, four to an x4 container. The NKI docs of some releases describe a scale twice as
  large (unsure which the hardware uses); the public MX tutorial's reference uses this one.

Memory that nothing wrote reads as whatever bytes it holds: the NKI front end starts a run
with every byte 0xFF, a NaN in every float format, so a missing initialisation shows.
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod
from typing import Any

import ml_dtypes
import numpy as np

from ..dtypes import OverflowPolicy, decode, encode
from ..errors import IndirectIndexError
from ..isa import (
    AccessPattern,
    Activation,
    ActivationFunc,
    AluOp,
    DmaCopy,
    DmaIndirect,
    Engine,
    Instruction,
    Memset,
    QuantizeMx,
    TensorCopy,
    TensorReduce,
    TensorScalar,
    TensorTensor,
)
from ..memory import Memory
from ._base import MachineState

__all__ = ["HANDLERS"]

# An engine's cast follows the format's own overflow rule (inf, NaN or saturation, as the
# hardware's convert does), not the input policy that refuses out-of-range user data.
_CAST: OverflowPolicy = "format"

_ALU: dict[AluOp, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    AluOp.ADD: np.add,
    AluOp.SUBTRACT: np.subtract,
    AluOp.MULTIPLY: np.multiply,
    AluOp.MAXIMUM: np.maximum,
    AluOp.MINIMUM: np.minimum,
    AluOp.DIVIDE: np.divide,
    # comparisons: 1.0 where true, 0.0 where false; mod: x - y * floor(x / y), the sign of y
    AluOp.EQUAL: lambda a, b: np.equal(a, b).astype(np.float32),
    AluOp.NOT_EQUAL: lambda a, b: np.not_equal(a, b).astype(np.float32),
    AluOp.LESS: lambda a, b: np.less(a, b).astype(np.float32),
    AluOp.LESS_EQUAL: lambda a, b: np.less_equal(a, b).astype(np.float32),
    AluOp.GREATER: lambda a, b: np.greater(a, b).astype(np.float32),
    AluOp.GREATER_EQUAL: lambda a, b: np.greater_equal(a, b).astype(np.float32),
    AluOp.MOD: np.mod,
}
# reductions along the free axis: the operator's ufunc reduce
_REDUCE: dict[AluOp, Callable[..., np.ndarray]] = {
    AluOp.ADD: np.sum, AluOp.MULTIPLY: np.prod, AluOp.MAXIMUM: np.max, AluOp.MINIMUM: np.min}


# y = f(x), exact in float64 (x already scaled and biased in fp32)
_FUNCS: dict[ActivationFunc, Callable[[np.ndarray], np.ndarray]] = {
    ActivationFunc.COPY: lambda x: x,
    ActivationFunc.IDENTITY: lambda x: x,
    ActivationFunc.EXP: np.exp,
    ActivationFunc.LOG: np.log,
    ActivationFunc.SQRT: np.sqrt,
    ActivationFunc.RSQRT: lambda x: 1.0 / np.sqrt(x),
    ActivationFunc.SQUARE: np.square,
    ActivationFunc.ABS: np.abs,
    ActivationFunc.RELU: lambda x: np.maximum(x, 0.0),
    ActivationFunc.SIGMOID: lambda x: 1.0 / (1.0 + np.exp(-x)),
    ActivationFunc.TANH: np.tanh,
    ActivationFunc.SILU: lambda x: x / (1.0 + np.exp(-x)),
    ActivationFunc.GELU_APPRX_TANH: lambda x: 0.5 * x * (1.0 + np.tanh(
        0.7978845608028654 * (x + 0.044715 * x ** 3))),
    ActivationFunc.RECIPROCAL: lambda x: 1.0 / x,
    ActivationFunc.NEGATIVE: np.negative,
}


def _read(mem: Memory, ap: AccessPattern, shape: tuple[int, ...]) -> np.ndarray:
    return mem.read(ap).reshape(shape)


def dma_copy(mem: Memory, ins: DmaCopy) -> None:
    mem.copy(ins.src, ins.dst)


def dma_indirect(mem: Memory, ins: DmaIndirect) -> None:
    """Gather or scatter rows by the index values in SBUF now (module docstring)."""
    idx = mem.read(ins.index).reshape(-1)  # int64
    rows = ins.table.partitions
    table, data = mem.view(ins.table), mem.view(ins.data)  # [rows, ...], [K, ...]
    bad = (idx < 0) | (idx >= rows)
    if bad.any() and not ins.skip_oob:
        k = int(np.flatnonzero(bad)[0])
        v = int(idx[k])
        kind = "scatter" if ins.scatter else "gather"
        raise IndirectIndexError(
            f"indirect DMA ({kind}): index {v} at partition {k} of the index tile is outside "
            f"the table's {rows} rows (0..{rows - 1}); keep the indices in range, or skip "
            f"such rows with oob_mode.skip", partition=k, value=v, rows=rows,
            offset=ins.table.offset, row_step=ins.table.partition_step,
            itemsize=ins.table.itemsize)
    keep = np.flatnonzero(~bad)
    at = idx[keep]
    row_shape = (len(keep), *table.shape[1:])
    if not ins.scatter:
        data[keep] = table[at].reshape((len(keep), *data.shape[1:]))
        return
    if not ins.accumulate:  # numpy assigns in index order: a repeated index's last row wins
        table[at] = data[keep].reshape(row_shape)
        return
    # repeats add up in partition order, each sum rounded: the k-th occurrence of every
    # index is added in one numpy step, after the (k-1)-th (the rows of a step differ)
    fmt = ins.table.dtype
    order = np.argsort(at, kind="stable")
    ranks = np.empty(len(at), dtype=np.int64)
    sorted_at = at[order]
    first = np.r_[True, sorted_at[1:] != sorted_at[:-1]]
    starts = np.maximum.accumulate(np.where(first, np.arange(len(at)), 0))
    ranks[order] = np.arange(len(at)) - starts  # how many earlier partitions name the row
    for r in range(int(ranks.max()) + 1 if len(at) else 0):
        step = ranks == r
        rows = at[step]
        old = decode(table[rows], fmt)
        new = decode(data[keep[step]], fmt).reshape(old.shape)
        with np.errstate(invalid="ignore", over="ignore"):
            table[rows] = encode(old + new, fmt, overflow=_CAST)


def tensor_copy(mem: Memory, ins: TensorCopy) -> None:
    mem.write(ins.dst, _read(mem, ins.src, ins.dst.shape), overflow=_CAST)


# integer add, multiply and subtract run as integer math on GpSimd; every other arithmetic
# operator, and any on Vector, casts its inputs to float32 (nki.isa.tensor_tensor docs)
_INT_OPS = frozenset({AluOp.ADD, AluOp.SUBTRACT, AluOp.MULTIPLY})


def tensor_tensor(mem: Memory, ins: TensorTensor) -> None:
    shape = ins.dst.shape
    a, b = _read(mem, ins.a, shape), _read(mem, ins.b, shape)
    if a.dtype.kind == "f" or b.dtype.kind == "f" or not (
            ins.engine is Engine.GPSIMD and ins.op in _INT_OPS):
        a, b = a.astype(np.float32), b.astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):  # NaN/inf propagate as in hardware
        mem.write(ins.dst, _ALU[ins.op](a, b), overflow=_CAST)


def memset(mem: Memory, ins: Memset) -> None:
    mem.write(ins.dst, np.full(ins.dst.shape, ins.value, dtype=np.float32), overflow=_CAST)


def _per_partition(mem: Memory, ap: AccessPattern, shape: tuple[int, ...]) -> np.ndarray:
    """A [P, 1] operand as fp32, shaped to broadcast over ``shape``'s free dims."""
    return mem.read(ap).astype(np.float32).reshape((shape[0],) + (1,) * (len(shape) - 1))


def activation(mem: Memory, ins: Activation) -> None:
    shape = ins.dst.shape
    x = _read(mem, ins.src, shape).astype(np.float32)
    scale = (_per_partition(mem, ins.scales, shape) if ins.scales is not None
             else np.float32(ins.scale))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        x = x * scale
        if ins.bias is not None:
            x = x + _per_partition(mem, ins.bias, shape)
        y = _FUNCS[ins.func](x.astype(np.float64)).astype(np.float32)
        mem.write(ins.dst, y, overflow=_CAST)
        _reduce_into(mem, ins.acc, ins.acc_op, y)


def _reduce_into(mem: Memory, acc: AccessPattern | None, op: AluOp, y: np.ndarray) -> None:
    """``reduce_res``: each partition's fp32 results (y, before they are rounded to dst's
    format) reduced with ``op`` in fp32, rounded to acc's format."""
    if acc is not None:
        red = _REDUCE[op](y.reshape(y.shape[0], -1), axis=1)
        mem.write(acc, red.astype(np.float32).reshape(acc.shape), overflow=_CAST)


def _operand(mem: Memory, c: float, ap: AccessPattern | None, shape: tuple[int, ...]
             ) -> np.ndarray:
    if ap is not None:
        return _per_partition(mem, ap, shape)
    return np.asarray(c, dtype=np.float32)


def tensor_scalar(mem: Memory, ins: TensorScalar) -> None:
    shape = ins.dst.shape
    x = _read(mem, ins.src, shape).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        c0 = _operand(mem, ins.operand0, ins.operand0_ap, shape)
        y = _ALU[ins.op0](c0, x) if ins.reverse0 else _ALU[ins.op0](x, c0)
        if ins.op1 is not None:
            c1 = _operand(mem, ins.operand1, ins.operand1_ap, shape)
            y = _ALU[ins.op1](c1, y) if ins.reverse1 else _ALU[ins.op1](y, c1)
        y = np.asarray(y, dtype=np.float32)
        mem.write(ins.dst, y, overflow=_CAST)
        _reduce_into(mem, ins.acc, ins.acc_op, y)


def tensor_reduce(mem: Memory, ins: TensorReduce) -> None:
    p = ins.src.partitions
    x = mem.read(ins.src).astype(np.float32).reshape(p, ins.dst.free_elems, -1)
    with np.errstate(invalid="ignore", over="ignore"):
        y = _REDUCE[ins.op](x, axis=2).astype(np.float32)
        if ins.negate:
            y = -y
        mem.write(ins.dst, y.reshape(ins.dst.shape), overflow=_CAST)


def quantize_mx(mem: Memory, ins: QuantizeMx) -> None:
    from ..dtypes import get_format
    from ..verify.mx import scale_rows

    fmt = get_format(ins.dst.dtype)
    elem = get_format(fmt.element or "")
    parts, free = ins.src.partitions, ins.src.free_elems
    x = mem.read(ins.src).reshape(parts, free).astype(np.float32)
    groups = x.reshape(parts // 8, 8, free // 4, 4)
    bexp = (groups.view(np.uint32) >> 23) & 0xFF  # fp32 biased exponents
    code = np.clip(bexp.max(axis=(1, 3)).astype(np.int64) - int(elem.emax or 0), 0, 254)
    factor = np.exp2(code.astype(np.float64) - 127)[:, None, :, None]
    biggest = float(ml_dtypes.finfo(elem.storage).max)
    q = np.clip(groups.astype(np.float64) / factor, -biggest, biggest).astype(np.float32)
    codes = q.astype(elem.storage).reshape(parts, free)
    mem.view(ins.dst)[...] = codes.view(np.uint8).reshape(parts, free // 4, 4).view(
        mem.view(ins.dst).dtype).reshape(mem.view(ins.dst).shape)
    sc = mem.view(ins.scale).view(np.uint8).reshape(ins.scale.partitions, free // 4)
    sc[scale_rows(parts // 8)] = code.astype(np.uint8)


_ON_MEMORY: dict[type, Callable[[Memory, Instruction], None]] = {
    DmaCopy: dma_copy,  # type: ignore[dict-item]
    DmaIndirect: dma_indirect,  # type: ignore[dict-item]
    TensorCopy: tensor_copy,  # type: ignore[dict-item]
    TensorTensor: tensor_tensor,  # type: ignore[dict-item]
    Memset: memset,  # type: ignore[dict-item]
    Activation: activation,  # type: ignore[dict-item]
    QuantizeMx: quantize_mx,  # type: ignore[dict-item]
    TensorScalar: tensor_scalar,  # type: ignore[dict-item]
    TensorReduce: tensor_reduce,  # type: ignore[dict-item]
}


def _on_state(fn: Callable[[Memory, Instruction], None]) -> Callable[[MachineState, Any], None]:
    def handler(state: MachineState, ins: Instruction) -> None:
        fn(state.memory, ins)

    handler.__name__ = handler.__qualname__ = fn.__name__
    handler.__doc__ = fn.__doc__
    return handler


# The functional simulator's handler table entries (:data:`systolic.sim.functional.HANDLERS`
# takes them): functions of (MachineState, instruction).
HANDLERS: dict[type, Callable[[MachineState, Any], None]] = {
    kind: _on_state(fn) for kind, fn in _ON_MEMORY.items()}




# -- the NKI breadth of issue 19: Transpose, BnStats, BnAggr, Iota ---------------------------
# Their values (NKI docs, nki.isa.nc_transpose / bn_stats / bn_aggr / iota):
#
# * ``Transpose`` (Vector, <= 32 x 32) moves bytes: dst[f, p] = src[p, f], bit for bit.
# * ``BnStats``: per partition, the count, mean and sum of squared deviations (variance x
#   count) of the even-indexed and of the odd-indexed elements, in that order. The docs say
#   only "in float32 precision"; the order of the hardware's additions is not published, so
#   the model evaluates each statistic exactly (float64) and rounds it once to fp32 (unsure),
#   as it does the activation functions. An empty half (N = 1 has no odd element) is
#   (0, 0, 0) (unsure: the docs do not say).
# * ``BnAggr``: the triples (c, m, M2) combine as Chan et al.'s parallel variance: n = sum c,
#   mean = sum(c m) / n, variance = (sum M2 + sum c (m - mean)^2) / n (the population
#   variance, np.var's), again exact and rounded once to fp32.
# * ``Iota``: base + partition_step * p + free_step * j in 32-bit integer math (wrapping),
#   cast to dst's format; j split over outer axes when the instruction has them.


def transpose(mem: Memory, ins: Any) -> None:
    src = mem.view(ins.src).reshape(ins.src.partitions, ins.src.free_elems)
    dst = mem.view(ins.dst)
    dst[...] = np.ascontiguousarray(src.T).reshape(dst.shape)


def _moments(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(count, mean, sum of squared deviations) of each row of ``x`` (float64); an empty
    row gives (0, 0, 0)."""
    c = np.full(x.shape[0], float(x.shape[1]))
    if x.shape[1] == 0:
        z = np.zeros(x.shape[0])
        return c, z, z
    m = x.mean(axis=1)
    return c, m, ((x - m[:, None]) ** 2).sum(axis=1)


def bn_stats(mem: Memory, ins: Any) -> None:
    p = ins.src.partitions
    x = mem.read(ins.src).astype(np.float64).reshape(p, -1)
    with np.errstate(invalid="ignore", over="ignore"):
        cols = [*_moments(x[:, 0::2]), *_moments(x[:, 1::2])]
        out = np.stack(cols, axis=1).astype(np.float32)
    mem.write(ins.dst, out.reshape(ins.dst.shape), overflow=_CAST)


def bn_aggr(mem: Memory, ins: Any) -> None:
    p = ins.src.partitions
    t = mem.read(ins.src).astype(np.float64).reshape(p, -1, 3)
    c, m, m2 = t[..., 0], t[..., 1], t[..., 2]
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        n = c.sum(axis=1)
        mean = (c * m).sum(axis=1) / n
        var = (m2.sum(axis=1) + (c * (m - mean[:, None]) ** 2).sum(axis=1)) / n
        out = np.stack([mean, var], axis=1).astype(np.float32)
    mem.write(ins.dst, out.reshape(ins.dst.shape), overflow=_CAST)


def iota(mem: Memory, ins: Any) -> None:
    p, f = ins.dst.partitions, ins.dst.free_elems
    sizes = (*ins.outer_sizes, f // prod(ins.outer_sizes))
    free = np.zeros(sizes, dtype=np.int64)
    for k, (step, n) in enumerate(zip((*ins.outer_steps, ins.free_step), sizes, strict=True)):
        shape = [1] * len(sizes)
        shape[k] = n
        free = free + step * np.arange(n, dtype=np.int64).reshape(shape)  # one per axis
    v = (ins.base + ins.partition_step * np.arange(p, dtype=np.int64)[:, None]
         + free.reshape(1, f))
    v32 = v.astype(np.int32)  # 32-bit integer math: wraps as the engine's int32 does
    from ..dtypes import get_format

    if get_format(ins.dst.dtype).kind == "float":
        mem.write(ins.dst, v32.astype(np.float64).reshape(ins.dst.shape), overflow=_CAST)
    else:
        mem.write(ins.dst, v32.reshape(ins.dst.shape), overflow=_CAST)


# * ``Reciprocal`` (Vector): 1 / x in fp32 (IEEE division, correctly rounded; the docs do not
#   say the Vector engine approximates it, unsure), rounded to dst's format.
# * ``TensorTensorScan`` (Vector): the recurrence y[j] = (d0[j] op0 y[j-1]) op1 d1[j] in fp32,
#   each step rounded to fp32 (the engine "performs the computation in float32 math"), then
#   cast to dst's format. The recurrence is sequential by definition: one numpy step per
#   free element, vectorised over the partitions.


def reciprocal(mem: Memory, ins: Any) -> None:
    x = _read(mem, ins.src, ins.dst.shape).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        mem.write(ins.dst, np.float32(1.0) / x, overflow=_CAST)


def tensor_tensor_scan(mem: Memory, ins: Any) -> None:
    p = ins.dst.partitions
    d0 = mem.read(ins.data0).astype(np.float32).reshape(p, -1)
    d1 = mem.read(ins.data1).astype(np.float32).reshape(p, -1)
    prev = (mem.read(ins.initial_ap).astype(np.float32).reshape(p) if ins.initial_ap is not None
            else np.full(p, ins.initial, dtype=np.float32))
    op0, op1 = _ALU[ins.op0], _ALU[ins.op1]
    out = np.empty_like(d0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for j in range(d0.shape[1]):  # the scan axis (sequential); partitions vectorised
            a = op0(prev, d0[:, j]) if ins.reverse0 else op0(d0[:, j], prev)
            prev = op1(d1[:, j], a) if ins.reverse1 else op1(a, d1[:, j])
            out[:, j] = prev
    mem.write(ins.dst, out.reshape(ins.dst.shape), overflow=_CAST)


# * ``ScalarTensorTensor`` (Vector): (data op0 operand0) op1 operand1, every input cast to
#   fp32 and each operator's result an fp32 value, rounded once to dst's format: the Vector
#   engine's arithmetic, as nki.isa.tensor_tensor states it ("automatically casts input data
#   types to float32 and performs the element-wise operation in float32 math"); the
#   scalar_tensor_tensor page calls the instruction tensor_scalar then tensor_tensor
#   "back-to-back" (unsure: whether the intermediate is kept in fp32, as here).


def scalar_tensor_tensor(mem: Memory, ins: Any) -> None:
    shape = ins.dst.shape
    x = _read(mem, ins.data, shape).astype(np.float32)
    t = _read(mem, ins.operand1, shape).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        c0 = _operand(mem, ins.operand0, ins.operand0_ap, shape)
        y = np.asarray(_ALU[ins.op0](c0, x) if ins.reverse0 else _ALU[ins.op0](x, c0),
                       dtype=np.float32)
        y = _ALU[ins.op1](t, y) if ins.reverse1 else _ALU[ins.op1](y, t)
        mem.write(ins.dst, np.asarray(y, dtype=np.float32), overflow=_CAST)


def _register_breadth() -> None:
    from ..isa.instructions import (
        BnAggr,
        BnStats,
        Iota,
        Reciprocal,
        ScalarTensorTensor,
        TensorTensorScan,
        Transpose,
    )

    for kind, fn in ((Transpose, transpose), (BnStats, bn_stats), (BnAggr, bn_aggr),
                     (Iota, iota), (Reciprocal, reciprocal),
                     (TensorTensorScan, tensor_tensor_scan),
                     (ScalarTensorTensor, scalar_tensor_tensor)):
        HANDLERS[kind] = _on_state(fn)
    from .functional_select import HANDLERS as SELECT  # selection, top-8, gather, random

    HANDLERS.update(SELECT)


_register_breadth()
