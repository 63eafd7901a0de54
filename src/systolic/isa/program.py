"""The Program: an ordered, immutable sequence of instructions, the pivot every executor
reads (DESIGN.md)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from .instructions import OPCODES, Instruction

__all__ = ["Program", "count_opcodes", "in_opcode_order"]


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
        return count_opcodes(self.instructions)

    def text(self) -> str:
        """The text form (:mod:`systolic.asm`), one instruction a line."""
        # the text form is imported on first use: a command that prints no program text
        # (systolic matmul --json) does not load it (start-up, issue 20)
        from .asm import format_program

        return format_program(self.instructions)

    @classmethod
    def parse(cls, text: str) -> Program:
        """The Program of a text form; raises :class:`~systolic.errors.ParseError`."""
        from .asm import parse_instructions  # see text() (issue 20)

        return cls(parse_instructions(text))

    def __repr__(self) -> str:
        counts = ", ".join(f"{k}={v}" for k, v in self.counts().items())
        return f"Program({len(self)} instructions: {counts})"


def count_opcodes(instructions: Iterable[Instruction]) -> dict[str, int]:
    """Number of ``instructions`` per opcode name, in opcode order (:meth:`Program.counts`;
    systolic.extrapolate counts a prefix of a Program with it)."""
    out: dict[str, int] = {}
    for ins in instructions:
        name = type(ins).__name__
        out[name] = out.get(name, 0) + 1
    return in_opcode_order(out)


def in_opcode_order(counts: dict[str, int]) -> dict[str, int]:
    """``counts`` (by opcode name) in opcode order: how every report lists them."""
    return {op.__name__: counts[op.__name__] for op in OPCODES if op.__name__ in counts}
