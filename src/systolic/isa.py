"""The instruction set: its field types, its instructions, and the Program that holds them.

One immutable :class:`Program` type feeds every executor (DESIGN.md). The layers below it,
re-exported here so that ``systolic.isa`` names the whole instruction set:

* :mod:`systolic.isa_fields`: flags, perf modes, fp32 passes, tile groups, engines,
  operators, memory spaces, access patterns;
* :mod:`systolic.instructions`: the frozen, slotted instruction dataclasses, the
  :data:`Instruction` union, :data:`OPCODES` derived from it, and the named :class:`Group`\\ s;
* :mod:`systolic.asm`: the text form, one line per instruction, which parses back to an
  equal instruction.

The ISA knows nothing of bundles: the 64-byte encoding is the compiler's,
:func:`systolic.compiler.bundle.encode_program` / ``decode_program``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from .asm import format_program, parse_instructions
from .instructions import (
    OPCODES,
    Activation,
    DmaCopy,
    DmaLoad,
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
    TensorTensor,
)
from .isa_fields import (
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

__all__ = [
    "FULL_COL_GROUP_FORMATS",
    "OPCODES",
    "AccessPattern",
    "Activation",
    "ActivationFunc",
    "AluOp",
    "CalcFlags",
    "DmaCopy",
    "DmaLoad",
    "Engine",
    "Fp32Pass",
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
    "TensorTensor",
    "TileGroup",
    "col_group",
    "row_group",
    "tile_position_problem",
]


@dataclass(frozen=True, slots=True)
class Program:
    """An ordered, immutable sequence of instructions: the pivot every executor reads."""

    instructions: tuple[Instruction, ...]

    def __init__(self, instructions: object = ()) -> None:
        object.__setattr__(self, "instructions", tuple(instructions))  # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(self.instructions)

    def __iter__(self) -> Iterator[Instruction]:
        return iter(self.instructions)

    def __getitem__(self, i: int) -> Instruction:
        return self.instructions[i]

    def counts(self) -> dict[str, int]:
        """Number of instructions per opcode name, in opcode order."""
        out: dict[str, int] = {}
        for ins in self.instructions:
            name = type(ins).__name__
            out[name] = out.get(name, 0) + 1
        return {op.__name__: out[op.__name__] for op in OPCODES if op.__name__ in out}

    def text(self) -> str:
        """The text form (:mod:`systolic.asm`), one instruction a line."""
        return format_program(self.instructions)

    @classmethod
    def parse(cls, text: str) -> Program:
        """The Program of a text form; raises :class:`~systolic.errors.ParseError`."""
        return cls(parse_instructions(text))

    def __repr__(self) -> str:
        counts = ", ".join(f"{k}={v}" for k, v in self.counts().items())
        return f"Program({len(self)} instructions: {counts})"
