"""Values of the selection, top-8, gather and random instructions (issue 19, second part):
AffineSelect, RangeSelect, Select, CopyPredicated, PartitionReduce, Max8, FindIndex8,
MatchReplace8, StreamShuffle, LocalGather, SequenceBounds, Rand, Dropout, TensorCopyDynamic,
TensorCopyDynamicDst, GatherFlattened (their offset / indices read from SBUF when they
execute; out of range: a one-line SystolicError).

Semantics (NKI docs, nki.isa.* at aws-neuron-sdk 7c165a3e; each "NumPy equivalent" there is
what the model computes):

* Selections copy values: the chosen element is the source's value (read as fp32) or the
  fp32 fill, rounded once to dst's format. Predicates are "nonzero" tests of the predicate
  tile's values; the affine and range predicates are evaluated exactly (integers).
* The accumulation register of RangeSelect / Select is one fp32 value per partition
  (:attr:`MachineState.accumulators`, key ``"vector"``), shared by both kinds (the docs:
  "shared for other Vector Engine accumulation instructions"): ``reset_reduce`` sets it
  to this instruction's row maximum, ``reduce`` takes the maximum with it, ``reset`` sets
  it to -inf, ``idle`` leaves it undefined (NaN; the docs: "the accumulator state may still
  be modified"). ``acc`` receives the register after the instruction; with ``idle`` it
  receives this instruction's own row maximum (unsure: the docs do not say).
* PartitionReduce adds (or takes the maximum) over partitions in fp32, in partition order
  (unsure: the hardware's order is not published), rounded once to dst's format.
* Max8 / FindIndex8 / MatchReplace8 compare in fp32 (max8: "converts them to fp32
  internally"). A value of ``vals`` not found gives index 0 and no replacement (the docs'
  NumPy equivalent; they call it undefined behaviour).
* Rand / Dropout: uniform draws in [0, 1) from numpy's Philox counter-based generator keyed
  by the instruction's seed, one fp32 draw per element in dst's row-major order. The
  hardware generator is not published, so these values cannot match a device's bits; they
  are reproducible for a seed (docs/nki.md "Random numbers").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from ..dtypes import OverflowPolicy
from ..errors import SystolicError
from ..isa import AccessPattern, AluOp
from ..isa.fields import ReduceCmd
from ..memory import Memory
from ._base import MachineState

__all__ = ["COMPARE", "HANDLERS", "uniform"]

_CAST: OverflowPolicy = "format"  # an engine's cast follows the format's own overflow rule

COMPARE: dict[AluOp, Callable[[Any, Any], Any]] = {
    AluOp.EQUAL: np.equal, AluOp.NOT_EQUAL: np.not_equal, AluOp.LESS: np.less,
    AluOp.LESS_EQUAL: np.less_equal, AluOp.GREATER: np.greater,
    AluOp.GREATER_EQUAL: np.greater_equal}


def _f32(mem: Memory, ap: AccessPattern, p: int) -> np.ndarray:
    """``ap``'s values as fp32, [P, free elements]."""
    return mem.read(ap).astype(np.float32).reshape(p, -1)


def _column(mem: Memory, ap: AccessPattern) -> np.ndarray:
    """A [P, 1] operand as a fp32 column [P, 1]."""
    return mem.read(ap).astype(np.float32).reshape(-1, 1)


def _accumulate(state: MachineState, y: np.ndarray, cmd: ReduceCmd,
                acc: AccessPattern | None) -> None:
    """The Vector engine's per-partition accumulation register (module docstring)."""
    p = y.shape[0]
    regs = state.accumulators.setdefault("vector", np.full(128, np.nan, dtype=np.float32))
    with np.errstate(invalid="ignore"):
        own = y.max(axis=1) if y.shape[1] else np.full(p, -np.inf, dtype=np.float32)
    if cmd is ReduceCmd.RESET_REDUCE:
        regs[:p] = own
    elif cmd is ReduceCmd.REDUCE:
        regs[:p] = np.maximum(regs[:p], own)
    elif cmd is ReduceCmd.RESET:
        regs[:p] = -np.inf
    out = regs[:p].copy() if cmd is not ReduceCmd.IDLE else own
    if cmd is ReduceCmd.IDLE:
        regs[:p] = np.nan
    if acc is not None:
        state.memory.write(acc, out.reshape(acc.shape), overflow=_CAST)


def affine_select(state: MachineState, ins: Any) -> None:
    mem = state.memory
    p = ins.dst.partitions
    x = _f32(mem, ins.src, p)
    v = (ins.base + ins.partition_step * np.arange(p, dtype=np.int64)[:, None]
         + ins.free_step * np.arange(x.shape[1], dtype=np.int64)[None, :])
    y = np.where(COMPARE[ins.cmp](v, 0), x, np.float32(ins.fill))
    mem.write(ins.dst, y.reshape(ins.dst.shape), overflow=_CAST)


def range_select(state: MachineState, ins: Any) -> None:
    mem = state.memory
    p = ins.dst.partitions
    x = _f32(mem, ins.src, p)
    idx = (ins.range_start + np.arange(x.shape[1], dtype=np.float64)).astype(np.float32)
    b0, b1 = _column(mem, ins.bound0), _column(mem, ins.bound1)
    keep = COMPARE[ins.cmp0](idx[None, :], b0) & COMPARE[ins.cmp1](idx[None, :], b1)
    y = np.where(keep, x, np.float32(ins.fill)).astype(np.float32)
    mem.write(ins.dst, y.reshape(ins.dst.shape), overflow=_CAST)
    _accumulate(state, y, ins.reduce_cmd, ins.acc)


def select(state: MachineState, ins: Any) -> None:
    mem = state.memory
    p = ins.dst.partitions
    pred = mem.read(ins.predicate).reshape(p, -1) != 0
    if ins.reverse_pred:
        pred = ~pred
    x = _f32(mem, ins.on_true, p)
    other: Any = np.float32(ins.on_false)
    if ins.on_false_ap is not None:
        other = _f32(mem, ins.on_false_ap, p)  # [P, 1] broadcasts along the row
    y = np.where(pred, x, other).astype(np.float32)
    mem.write(ins.dst, y.reshape(ins.dst.shape), overflow=_CAST)
    if ins.acc is not None or ins.reduce_cmd is not ReduceCmd.IDLE:
        _accumulate(state, y, ins.reduce_cmd, ins.acc)


def copy_predicated(state: MachineState, ins: Any) -> None:
    mem = state.memory
    p = ins.dst.partitions
    pred = mem.read(ins.predicate).reshape(p, -1) != 0
    if ins.reverse_pred:
        pred = ~pred
    old = mem.read(ins.dst).reshape(p, -1)
    new = (mem.read(ins.src_ap).reshape(p, -1) if ins.src_ap is not None
           else np.full(old.shape, ins.value))
    if old.dtype.kind == "f" or new.dtype.kind == "f":
        old, new = old.astype(np.float32), new.astype(np.float32)
    mem.write(ins.dst, np.where(pred, new, old).reshape(ins.dst.shape), overflow=_CAST)


def partition_reduce(state: MachineState, ins: Any) -> None:
    mem = state.memory
    x = _f32(mem, ins.src, ins.src.partitions)
    acc = x[0].copy()
    with np.errstate(invalid="ignore", over="ignore"):
        for row in x[1:]:  # fp32 at every step, in partition order
            acc = acc + row if ins.op is AluOp.ADD else np.maximum(acc, row)
    mem.write(ins.dst, acc.reshape(ins.dst.shape), overflow=_CAST)


def max8(state: MachineState, ins: Any) -> None:
    mem = state.memory
    p = ins.dst.partitions
    x = _f32(mem, ins.src, p)
    top = -np.sort(-x, axis=1, kind="stable")[:, :8]  # descending; NaN sorts last
    mem.write(ins.dst, top.reshape(ins.dst.shape), overflow=_CAST)


def _first_matches(data: np.ndarray, vals: np.ndarray, replace: bool
                   ) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the index of the first element equal to each value in turn; with
    ``replace`` a matched element is taken out of later searches (it becomes imm)."""
    found = np.zeros(vals.shape, dtype=np.int64)
    taken = np.zeros(data.shape, dtype=bool)
    rows = np.arange(data.shape[0])
    for k in range(vals.shape[1]):  # the 8 values in turn; rows vectorised
        hit = (data == vals[:, k:k + 1]) & ~taken
        any_hit = hit.any(axis=1)
        first = np.argmax(hit, axis=1)
        found[:, k] = np.where(any_hit, first, 0)
        if replace:
            taken[rows[any_hit], first[any_hit]] = True
    return found, taken


def find_index8(state: MachineState, ins: Any) -> None:
    mem = state.memory
    p = ins.dst.partitions
    idx, _ = _first_matches(_f32(mem, ins.data, p), _f32(mem, ins.vals, p), replace=False)
    mem.write(ins.dst, idx.reshape(ins.dst.shape), overflow=_CAST)


def match_replace8(state: MachineState, ins: Any) -> None:
    mem = state.memory
    p = ins.dst.partitions
    data = _f32(mem, ins.data, p)
    idx, taken = _first_matches(data, _f32(mem, ins.vals, p), replace=True)
    out = np.where(taken, np.float32(ins.imm), data)
    if ins.dst_idx is not None:  # read before dst is written: dst may be data itself
        mem.write(ins.dst_idx, idx.reshape(ins.dst_idx.shape), overflow=_CAST)
    mem.write(ins.dst, out.reshape(ins.dst.shape), overflow=_CAST)


def stream_shuffle(state: MachineState, ins: Any) -> None:
    mem = state.memory
    src = mem.view(ins.src).reshape(ins.src.partitions, -1).copy()  # in place allowed
    view = mem.view(ins.dst)
    dst = view.reshape(ins.dst.partitions, -1).copy()
    for i in range(ins.dst.partitions):
        m = ins.shuffle_mask[i % 32]
        if m != 255:
            dst[i] = src[(i // 32) * 32 + m]
    view[...] = dst.reshape(view.shape)  # bytes as they are: dst has src's dtype


def local_gather(state: MachineState, ins: Any) -> None:
    mem = state.memory
    p, k = ins.src.partitions, ins.num_elem_per_idx
    src = mem.view(ins.src).reshape(p, -1)
    index = mem.read(ins.index).reshape(p, -1).astype(np.int64)
    view = mem.view(ins.dst)
    dst = np.empty((p, ins.num_valid_indices * k), dtype=src.dtype)
    for c in range(p // 16):  # each GpSimd core: its 16 partitions, its own indices
        flat = index[16 * c:16 * c + 16].flatten(order="F")[:ins.num_valid_indices]
        cols = (flat[:, None] + np.arange(k)[None, :]).reshape(-1)
        dst[16 * c:16 * c + 16] = src[16 * c:16 * c + 16][:, cols]
    view[...] = dst.reshape(view.shape)  # bytes as they are: no cast (the docs)


def _offset(mem: Any, ins: Any, what: str) -> int:
    """The offset a dynamic copy reads from SBUF now, inside ``lo..hi`` (else one line)."""
    o = int(mem.read(ins.offset).reshape(-1)[0])
    if not ins.lo <= o <= ins.hi:
        raise SystolicError(f"{what}: the offset read from SBUF is {o}; the window stays "
                            f"inside its tile for offsets {ins.lo}..{ins.hi}")
    return o


def tensor_copy_dynamic(state: MachineState, ins: Any) -> None:
    """The window moved by the offset in SBUF now, copied (cast as tensor_copy)."""
    mem = state.memory
    o = _offset(mem, ins, "tensor_copy_dynamic_src")
    src = dataclasses.replace(ins.src, offset=ins.src.offset + o * ins.step)
    mem.write(ins.dst, mem.read(src).reshape(ins.dst.shape), overflow=_CAST)


def tensor_copy_dynamic_dst(state: MachineState, ins: Any) -> None:
    """src copied (cast as tensor_copy) into the dst window moved by the offset in SBUF now;
    the rest of the region keeps its values. Out of range: a one-line error, as _src, and
    nothing written (on the device: unsure, the docs do not say)."""
    mem = state.memory
    o = _offset(mem, ins, "tensor_copy_dynamic_dst")
    dst = dataclasses.replace(ins.dst, offset=ins.dst.offset + o * ins.step)
    mem.write(dst, mem.read(ins.src).reshape(dst.shape), overflow=_CAST)


def gather_flattened(state: MachineState, ins: Any) -> None:
    """dst[p, j] = data[p, indices[p, j]], the free dimensions flattened."""
    mem = state.memory
    p = ins.data.partitions
    data = mem.view(ins.data).reshape(p, -1)
    idx = mem.read(ins.indices).reshape(p, -1).astype(np.int64)
    n = data.shape[1]
    bad = (idx < 0) | (idx >= n)
    if bad.any():
        q, j = (int(v[0]) for v in np.nonzero(bad))
        raise SystolicError(f"gather_flattened: index {int(idx[q, j])} at partition {q}, "
                            f"element {j} of the indices is outside the {n} elements of a "
                            f"data partition (0..{n - 1})")
    view = mem.view(ins.dst)
    view[...] = np.take_along_axis(data, idx, axis=1).reshape(view.shape)  # no cast


def sequence_bounds(state: MachineState, ins: Any) -> None:
    mem = state.memory
    ids = mem.read(ins.src).astype(np.float64).reshape(-1)
    n = ids.size
    pos = np.arange(n)
    new_run = np.r_[True, ids[1:] != ids[:-1]]
    start = np.maximum.accumulate(np.where(new_run, pos, 0))
    end_run = np.r_[ids[1:] != ids[:-1], True]
    end = np.minimum.accumulate(np.where(end_run, pos + 1, n + 1)[::-1])[::-1]
    pad = ids == 0
    out = np.stack([np.where(pad, n, start), np.where(pad, -1, end)]).astype(np.float64)
    mem.write(ins.dst, out.reshape(ins.dst.shape), overflow=_CAST)


def uniform(seed: int, shape: tuple[int, ...]) -> np.ndarray:
    """The model's random numbers: fp32 uniform in [0, 1) from Philox keyed by ``seed``,
    in row-major order of ``shape`` (reproducible; not the hardware's generator)."""
    gen = np.random.Generator(np.random.Philox(key=seed & (2 ** 64 - 1)))
    return gen.random(shape, dtype=np.float32)


def rand(state: MachineState, ins: Any) -> None:
    shape = (ins.dst.partitions, ins.dst.free_elems)
    state.memory.write(ins.dst, uniform(ins.seed, shape).reshape(ins.dst.shape),
                       overflow=_CAST)


def dropout(state: MachineState, ins: Any) -> None:
    mem = state.memory
    p = ins.dst.partitions
    x = mem.read(ins.src).reshape(p, -1)
    prob = (_column(mem, ins.prob_ap) if ins.prob_ap is not None
            else np.float32(ins.prob))
    drop = uniform(ins.seed, x.shape) < prob
    y = np.where(drop, np.zeros((), dtype=x.dtype), x)
    mem.write(ins.dst, y.reshape(ins.dst.shape), overflow=_CAST)


def _handlers() -> dict[type, Callable[[MachineState, Any], None]]:
    from ..isa import instructions as i

    return {i.AffineSelect: affine_select, i.RangeSelect: range_select, i.Select: select,
            i.CopyPredicated: copy_predicated, i.PartitionReduce: partition_reduce,
            i.Max8: max8, i.FindIndex8: find_index8, i.MatchReplace8: match_replace8,
            i.StreamShuffle: stream_shuffle, i.LocalGather: local_gather,
            i.SequenceBounds: sequence_bounds, i.Rand: rand, i.Dropout: dropout,
            i.TensorCopyDynamic: tensor_copy_dynamic,
            i.TensorCopyDynamicDst: tensor_copy_dynamic_dst, i.GatherFlattened: gather_flattened}


HANDLERS = _handlers()
