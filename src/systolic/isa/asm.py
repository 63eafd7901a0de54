"""The instruction text form: one instruction a line, ``Opcode field=value ...``.

Access patterns read ``SPACE[first:end]@offset(step:num)...:format``, with the byte stride
between rows as a third slice number for device memory (negative for rows stored
bottom-up): ``DRAM[0:128:4096]@0x0(1:512):bf16``. Flags read ``START|STOP`` (``NONE``);
perf modes and fp32 passes by their API spelling (``double_row``, ``hi``); tile groups as
their mask (``3``); engines, ALU operators and activation functions by their value
(``vector``, ``add``, ``copy``); floats as Python's ``repr`` writes them. Fields left at
their default are omitted, so small programs read like assembly::

    LoadStationary src=SBUF[0:128]@0x0(1:128):bf16
    MatMul moving=SBUF[0:128]@0x100(1:512):bf16 dst=PSUM[0:128]@0x0(1:512):fp32 \
flags=START|STOP stationary_dtype=bf16

Each field is formatted and parsed by its declared type (:data:`_CODECS`), never by the
spelling of its annotation. Parsing is strict: ASCII digits only (no ``1_0``, no other
scripts' digits), each field at most once, every value in the exact spelling the formatter
writes. Lines that are empty or start with ``#`` are ignored.

This module returns instructions, not a Program: :class:`systolic.isa.Program` builds on
it (``Program.text()`` / ``Program.parse()``), so the text form imports nothing above the
instructions.
"""

from __future__ import annotations

import dataclasses
import enum
import re
import typing
from collections.abc import Callable, Iterable
from functools import cache
from typing import Any

from ..errors import ParseError, SystolicError
from .fields import (
    AccessPattern,
    ActivationFunc,
    AluOp,
    CalcFlags,
    Engine,
    Fp32Pass,
    PerfMode,
    ReduceCmd,
    Space,
    TileGroup,
)
from .instructions import OPCODES, Instruction

__all__ = ["format_ap", "format_instruction", "format_program", "parse_ap",
           "parse_instructions"]

_OPS = {op.__name__: op for op in OPCODES}
# [0-9], never \d: a str pattern's \d also matches other scripts' digits
_INT = r"-?(?:0x[0-9a-fA-F]+|[0-9]+)"
_INT_RE = re.compile(rf"^{_INT}$")
_FLOAT_RE = re.compile(r"^-?(?:[0-9]+(?:\.[0-9]*)?(?:e[-+]?[0-9]+)?|inf|nan)$")
_NAME_RE = re.compile(r"^[a-z0-9_]+$")
_AP_RE = re.compile(
    r"^(SBUF|PSUM|DRAM)\[([0-9]+):([0-9]+)(?::(-?[0-9]+))?\]@(0x[0-9a-fA-F]+|[0-9]+)"
    r"((?:\(-?[0-9]+:[0-9]+\)){1,3}):([a-z0-9_]+)$"
)
_DIM_RE = re.compile(r"\((-?[0-9]+):([0-9]+)\)")


def format_ap(ap: AccessPattern) -> str:
    step = f":{ap.partition_step}" if ap.space is Space.DRAM else ""
    dims = "".join(f"({s}:{n})" for s, n in ap.dims)
    return (f"{ap.space.value}[{ap.partition}:{ap.partition + ap.partitions}{step}]"
            f"@{ap.offset:#x}{dims}:{ap.dtype}")


def parse_ap(text: str) -> AccessPattern:
    m = _AP_RE.match(text)
    if not m:
        raise ValueError(f"not an access pattern: {text!r}")
    space, first, end, pstep, off, dims, dtype = m.groups()
    if space != "DRAM" and pstep is not None:
        raise ValueError("only DRAM patterns carry a row stride")
    return AccessPattern(
        space=Space(space), partition=int(first), partitions=int(end) - int(first),
        offset=int(off, 0), dims=tuple((int(s), int(n)) for s, n in _DIM_RE.findall(dims)),
        dtype=dtype, partition_step=int(pstep) if pstep is not None else 0,
    )


def _parse_int(text: str) -> int:
    if not _INT_RE.match(text):
        raise ValueError(f"not an integer (ASCII digits, or 0x hex): {text!r}")
    return int(text, 16 if "0x" in text else 10)


def _parse_ints(text: str) -> tuple[int, ...]:
    """A tuple of integers written ``0,1,255`` (``-`` for the empty tuple)."""
    if text == "-":
        return ()
    return tuple(_parse_int(t) for t in text.split(","))


def _parse_float(text: str) -> float:
    if not _FLOAT_RE.match(text):
        raise ValueError(f"not a number as repr writes one: {text!r}")
    return float(text)


def _parse_name(text: str) -> str:
    if not _NAME_RE.match(text):
        raise ValueError(f"not a format name: {text!r}")
    return text


def _format_flags(value: CalcFlags) -> str:
    return "|".join(f.name for f in CalcFlags if f and f in value and f.name) or "NONE"


def _parse_flags(text: str) -> CalcFlags:
    if text == "NONE":
        return CalcFlags.NONE
    flags, seen = CalcFlags.NONE, set()
    for name in text.split("|"):
        if name in seen or name not in CalcFlags.__members__ or name == "NONE":
            raise ValueError(f"flags are START, STOP, ACCUMULATE joined by |, each once, "
                             f"or NONE; got {text!r}")
        seen.add(name)
        flags |= CalcFlags[name]
    return flags


def _parse_bool(text: str) -> bool:
    if text not in ("True", "False"):
        raise ValueError(f"a flag is True or False, not {text!r}")
    return text == "True"


def _enum_codec(cls: type[enum.Enum], spell: Callable[[Any], str]
                ) -> tuple[Callable[[Any], str], Callable[[str], Any]]:
    by_text = {spell(m): m for m in cls}

    def parse(text: str) -> Any:
        if text not in by_text:
            raise ValueError(f"{cls.__name__} is one of {', '.join(by_text)}")
        return by_text[text]

    return spell, parse


# type -> (format, parse): the text of every field type of the instructions
_CODECS: dict[object, tuple[Callable[[Any], str], Callable[[str], Any]]] = {
    AccessPattern: (format_ap, parse_ap),
    CalcFlags: (_format_flags, _parse_flags),
    PerfMode: _enum_codec(PerfMode, lambda m: m.spelling),
    Fp32Pass: _enum_codec(Fp32Pass, lambda m: m.spelling),
    TileGroup: _enum_codec(TileGroup, lambda m: str(int(m))),
    Engine: _enum_codec(Engine, lambda m: m.value),
    AluOp: _enum_codec(AluOp, lambda m: m.value),
    ActivationFunc: _enum_codec(ActivationFunc, lambda m: m.value),
    AccessPattern | None: (format_ap, parse_ap),  # an optional operand: left out when None
    AluOp | None: _enum_codec(AluOp, lambda m: m.value),
    ReduceCmd: _enum_codec(ReduceCmd, lambda m: m.value),
    tuple[int, ...]: (lambda v: ",".join(map(str, v)) or "-", lambda text: _parse_ints(text)),
    bool: (str, lambda text: _parse_bool(text)),
    int: (str, _parse_int),
    float: (repr, _parse_float),
    str: (str, _parse_name),
}


@cache
def _field_types(op: type) -> dict[str, object]:
    """Field name -> declared type, resolved from the annotations (not their spelling)."""
    hints = typing.get_type_hints(op)
    out = {}
    for f in dataclasses.fields(op):
        kind = hints[f.name]
        if kind not in _CODECS:
            raise TypeError(f"{op.__name__}.{f.name}: no text form for type {kind!r}")
        out[f.name] = kind
    return out


def _format_value(kind: object, value: Any) -> str:
    if kind in (int, float) and isinstance(value, bool):
        return str(value)  # not a number: parses back as an error, never as 0/1
    if kind is float and isinstance(value, int):
        value = float(value)
    if isinstance(kind, type) and issubclass(kind, enum.Enum) and not isinstance(value, kind):
        try:
            value = kind(value)  # a raw int where an IntEnum/IntFlag is declared
        except ValueError:
            return str(value)
    return _CODECS[kind][0](value)


def format_instruction(ins: Instruction) -> str:
    cls: type = type(ins)
    parts = [cls.__name__]
    kinds = _field_types(cls)
    for f in dataclasses.fields(ins):
        value = getattr(ins, f.name)
        if f.default is not dataclasses.MISSING and value == f.default:
            continue
        parts.append(f"{f.name}={_format_value(kinds[f.name], value)}")
    return " ".join(parts)


def format_program(instructions: Iterable[Instruction]) -> str:
    """The text of a sequence of instructions (a Program), one line each."""
    return "".join(format_instruction(ins) + "\n" for ins in instructions)


def parse_instructions(text: str) -> tuple[Instruction, ...]:
    """Parse the text form; raises :class:`ParseError` naming the line."""
    out = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        opname, *fields = line.split()
        op = _OPS.get(opname)
        if op is None:
            raise ParseError(lineno, f"unknown opcode {opname!r}; expected one of "
                                     f"{', '.join(_OPS)}")
        kinds = _field_types(op)
        kwargs: dict[str, Any] = {}
        for item in fields:
            key, sep, val = item.partition("=")
            if not sep or key not in kinds:
                raise ParseError(lineno, f"{opname} has no field {key!r}")
            if key in kwargs:
                raise ParseError(lineno, f"field {key} is given twice; give each field once")
            try:
                kwargs[key] = _CODECS[kinds[key]][1](val)
            except (ValueError, KeyError, SystolicError) as exc:
                raise ParseError(lineno, f"bad value for {key}: {val!r} ({exc})") from None
        try:
            out.append(op(**kwargs))
        except TypeError as exc:
            raise ParseError(lineno, f"{opname}: {exc}") from None
        except SystolicError as exc:
            raise ParseError(lineno, str(exc)) from None
    return tuple(out)
