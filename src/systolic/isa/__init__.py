"""The instruction set: its field types, its instructions, and the Program that holds them.

One immutable :class:`Program` type feeds every executor (DESIGN.md). The layers below it,
re-exported here so that ``systolic.isa`` names the whole instruction set:

* :mod:`systolic.isa.fields`: flags, perf modes, fp32 passes, tile groups, engines,
  operators, memory spaces, access patterns;
* :mod:`systolic.isa.instructions`: the frozen, slotted instruction dataclasses, the
  :data:`Instruction` union, :data:`OPCODES` derived from it, and the named :class:`Group`\\ s;
* :mod:`systolic.isa.program`: :class:`Program`;
* :mod:`systolic.isa.generation`: what differs between generations, as one table;
* :mod:`systolic.isa.asm`: the text form, one line per instruction, which parses back to an
  equal instruction.

The ISA knows nothing of bundles: the 64-byte encoding is the compiler's,
:func:`systolic.compiler.bundle.encode_program` / ``decode_program``.
"""

from __future__ import annotations

from .fields import (
    FULL_COL_GROUP_FORMATS,
    AccessPattern,
    ActivationFunc,
    AluOp,
    CalcFlags,
    Engine,
    Fp32Pass,
    PerfMode,
    Space,
    TileGroup,
    col_group,
    row_group,
    tile_position_problem,
)
from .instructions import (
    ACCESS,
    OPCODES,
    Activation,
    DmaCopy,
    DmaIndirect,
    DmaLoad,
    GatherFlattened,
    Group,
    Instruction,
    LdWeightMx,
    LoadStationary,
    MatMul,
    MatmultMx,
    Memset,
    QuantizeMx,
    ReadOut,
    TensorCopy,
    TensorCopyDynamic,
    TensorCopyDynamicDst,
    TensorReduce,
    TensorScalar,
    TensorTensor,
    reads,
    writes,
)
from .program import Program

__all__ = [
    "ACCESS",
    "FULL_COL_GROUP_FORMATS",
    "OPCODES",
    "AccessPattern",
    "Activation",
    "ActivationFunc",
    "AluOp",
    "CalcFlags",
    "DmaCopy",
    "DmaIndirect",
    "DmaLoad",
    "Engine",
    "Fp32Pass",
    "GatherFlattened",
    "Group",
    "Instruction",
    "LdWeightMx",
    "LoadStationary",
    "MatMul",
    "MatmultMx",
    "Memset",
    "PerfMode",
    "Program",
    "QuantizeMx",
    "ReadOut",
    "Space",
    "TensorCopy",
    "TensorCopyDynamic",
    "TensorCopyDynamicDst",
    "TensorReduce",
    "TensorScalar",
    "TensorTensor",
    "TileGroup",
    "col_group",
    "reads",
    "row_group",
    "tile_position_problem",
    "writes",
]
