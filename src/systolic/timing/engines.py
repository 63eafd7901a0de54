"""Costs of the Vector, Scalar (Activation) and GpSimd engines' instructions, in cycles of
the engine's own clock (FACTS "The whole NeuronCore"; docs/timing.md "Engines").

The rules (NKI API pages, "estimated instruction cost"; the Trainium guide):

* one input tile of N elements per partition (``tensor_copy``, ``activation``, ``memset``,
  the PSUM evacuation of a ReadOut): ``max(MIN_II, ceil(N / w))`` cycles; a
  ``tensor_copy`` out of PSUM is the same rule at the rate of its fp32 source (the
  ``w`` of 4-byte formats); the Vector-engine half of a casting ``dma_copy`` (the NKI front
  end stages it as a DmaCopy plus a TensorCopy) is an ordinary ``tensor_copy``;
* ``quantize_mx`` (v4, Vector): one input tile of N bf16/fp16 elements per partition,
  ``max(MIN_II, ceil(N / w))`` at the 2-byte rate (unsure: its NKI page gives no estimated
  cost; the block maximum and scale are taken to pipeline with the element stream);
* two input tiles (``tensor_tensor``): ``max(MIN_II, ceil(2N / w))``;
* ``w`` is the engine's elements per partition per cycle: its data-path width over 128
  partitions, wider for 2-byte formats on v3/v4 (Arch ``*_elems_per_cycle``); an
  instruction runs at the rate of its widest operand format;
* plus ``engine_dep_overhead`` cycles when the instruction reads what the previous
  instruction of the same engine wrote (the pipeline must drain first); timing/core.py adds it,
  since only the scheduler knows the dependency.

The partition count does not enter: the 128 lanes work in parallel.
"""

from __future__ import annotations

from math import ceil

from ..arch import Arch
from ..dtypes import get_format
from ..errors import SystolicError
from ..isa import (
    AccessPattern,
    Activation,
    Engine,
    Memset,
    QuantizeMx,
    ReadOut,
    TensorCopy,
    TensorTensor,
)

__all__ = ["elems_per_cycle", "engine_cycles", "engine_hz"]

Elementwise = TensorCopy | TensorTensor | Memset | Activation | ReadOut | QuantizeMx


def engine_hz(arch: Arch, engine: Engine) -> int:
    """The clock of an engine, Hz (Arch; the Tensor Engine's is ``clock_hz``)."""
    if engine is Engine.TENSOR:
        return int(arch.clock_hz)
    if engine is Engine.VECTOR:
        return arch.vector_hz
    if engine is Engine.SCALAR:
        return arch.scalar_hz
    if engine is Engine.GPSIMD:
        return arch.gpsimd_hz
    raise SystolicError(f"{engine.value} is not a compute engine; DMA is timed by timing/dma.py")


def elems_per_cycle(arch: Arch, engine: Engine, aps: tuple[AccessPattern, ...]) -> int:
    """Elements per partition per cycle: the fast rate only if every operand is 2 bytes
    or narrower (FACTS: v3 Vector 512 bf16/fp16, 256 other types)."""
    table = {Engine.VECTOR: arch.vector_elems_per_cycle, Engine.SCALAR:
             arch.scalar_elems_per_cycle, Engine.GPSIMD: arch.gpsimd_elems_per_cycle}
    narrow, wide = table[engine]
    if all(get_format(ap.dtype).container_bytes <= 2 for ap in aps):
        return narrow
    return wide


def engine_cycles(ins: Elementwise, arch: Arch, engine: Engine) -> int:
    """Cycles of one elementwise instruction on ``engine``, without the dependency
    overhead (module docstring)."""
    if isinstance(ins, TensorTensor):
        aps: tuple[AccessPattern, ...] = (ins.a, ins.b, ins.dst)
        work = 2 * ins.dst.free_elems
    elif isinstance(ins, Memset):
        aps, work = (ins.dst,), ins.dst.free_elems
    else:
        aps, work = (ins.src, ins.dst), ins.src.free_elems
    if isinstance(ins, ReadOut):
        aps = (ins.src,)  # the evacuation reads fp32 PSUM
    elif isinstance(ins, QuantizeMx):
        aps = (ins.src,)  # bf16/fp16 in; the x4 containers out are one byte per element
    w = elems_per_cycle(arch, engine, aps)
    return max(arch.engine_min_ii, ceil(work / w))
