"""Values of the engine instructions: DmaCopy, TensorCopy, TensorTensor, Memset, Activation.

Each handler is a function of (memory, instruction), vectorised over the whole access
pattern with numpy. Semantics (NKI docs, nki.isa.*):

* ``DmaCopy`` moves bytes: element for element, no cast (the formats must match).
* ``TensorCopy`` casts through fp32 when the formats differ: the source is decoded to fp32
  (integers to int64), then rounded to the destination's format.
* ``TensorTensor`` computes op(a, b) in fp32 and rounds the result to dst's format.
* ``Memset`` writes ``value`` rounded to dst's format.
* ``Activation`` with copy/identity writes scale * x (fp32) rounded to dst's format.

Memory that nothing wrote reads as whatever bytes it holds: the NKI front end starts a run
with every byte 0xFF, a NaN in every float format, so a missing initialisation shows.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..isa import (
    AccessPattern,
    Activation,
    AluOp,
    DmaCopy,
    Instruction,
    Memset,
    TensorCopy,
    TensorTensor,
)
from ..memory import Memory

__all__ = ["HANDLERS", "destination", "execute_engine"]

_ALU: dict[AluOp, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    AluOp.ADD: np.add,
    AluOp.SUBTRACT: np.subtract,
    AluOp.MULTIPLY: np.multiply,
    AluOp.MAXIMUM: np.maximum,
    AluOp.MINIMUM: np.minimum,
}


def _read(mem: Memory, ap: AccessPattern, shape: tuple[int, ...]) -> np.ndarray:
    return mem.read(ap).reshape(shape)


def dma_copy(mem: Memory, ins: DmaCopy) -> None:
    mem.copy(ins.src, ins.dst)


def tensor_copy(mem: Memory, ins: TensorCopy) -> None:
    mem.write(ins.dst, _read(mem, ins.src, ins.dst.shape))


def tensor_tensor(mem: Memory, ins: TensorTensor) -> None:
    shape = ins.dst.shape
    a, b = _read(mem, ins.a, shape), _read(mem, ins.b, shape)
    if a.dtype.kind == "f" or b.dtype.kind == "f":
        a, b = a.astype(np.float32), b.astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):  # NaN/inf propagate as in hardware
        mem.write(ins.dst, _ALU[ins.op](a, b))


def memset(mem: Memory, ins: Memset) -> None:
    mem.write(ins.dst, np.full(ins.dst.shape, ins.value, dtype=np.float32))


def activation(mem: Memory, ins: Activation) -> None:
    x = _read(mem, ins.src, ins.dst.shape).astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        mem.write(ins.dst, x * np.float32(ins.scale))


HANDLERS: dict[type, Callable[[Memory, Instruction], None]] = {
    DmaCopy: dma_copy,  # type: ignore[dict-item]
    TensorCopy: tensor_copy,  # type: ignore[dict-item]
    TensorTensor: tensor_tensor,  # type: ignore[dict-item]
    Memset: memset,  # type: ignore[dict-item]
    Activation: activation,  # type: ignore[dict-item]
}


def destination(ins: Instruction) -> AccessPattern:
    return ins.dst  # type: ignore[union-attr]


def execute_engine(mem: Memory, ins: Instruction) -> None:
    HANDLERS[type(ins)](mem, ins)
