"""The Program text form: one instruction a line, ``Opcode field=value ...``.

Access patterns read ``SPACE[first:end]@offset(step:num)...:format``, with the byte stride
between rows as a third slice number for device memory: ``DRAM[0:128:4096]@0x0(1:512):bf16``.
Flags read ``START|STOP``; perf modes by their API spelling. Fields left at their default
are omitted, so small programs read like assembly::

    LoadStationary src=SBUF[0:128]@0x0(1:128):bf16
    MatMul moving=SBUF[0:128]@0x100(1:512):bf16 dst=PSUM[0:128]@0x0(1:512):fp32 \
flags=START|STOP stationary_dtype=bf16

Lines that are empty or start with ``#`` are ignored.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from .errors import ParseError, SystolicError
from .isa import OPCODES, AccessPattern, CalcFlags, PerfMode, Program, Space

__all__ = ["format_ap", "format_instruction", "format_program", "parse_ap", "parse_program"]

_OPS = {op.__name__: op for op in OPCODES}
_AP_RE = re.compile(
    r"^(SBUF|PSUM|DRAM)\[(\d+):(\d+)(?::(\d+))?\]@(0x[0-9a-fA-F]+|\d+)"
    r"((?:\(-?\d+:\d+\)){1,3}):([a-z0-9_]+)$"
)
_DIM_RE = re.compile(r"\((-?\d+):(\d+)\)")


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


def _format_value(value: Any) -> str:
    if isinstance(value, AccessPattern):
        return format_ap(value)
    if isinstance(value, CalcFlags):
        names = [f.name for f in CalcFlags if f and f in value and f.name]
        return "|".join(n for n in names if n) or "NONE"
    if isinstance(value, PerfMode):
        return value.spelling
    return str(value)


def _parse_value(kind: str, text: str) -> Any:
    if "AccessPattern" in kind:
        return parse_ap(text)
    if "CalcFlags" in kind:
        flags = CalcFlags.NONE
        for name in text.split("|"):
            flags |= CalcFlags[name]
        return flags
    if "PerfMode" in kind:
        return PerfMode.parse(text)
    if kind.startswith("int"):
        return int(text, 0)
    return text


def format_instruction(ins: object) -> str:
    parts = [type(ins).__name__]
    for f in dataclasses.fields(ins):  # type: ignore[arg-type]
        value = getattr(ins, f.name)
        if f.default is not dataclasses.MISSING and value == f.default:
            continue
        parts.append(f"{f.name}={_format_value(value)}")
    return " ".join(parts)


def format_program(program: Program) -> str:
    return "".join(format_instruction(ins) + "\n" for ins in program)


def parse_program(text: str) -> Program:
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
        kinds = {f.name: str(f.type) for f in dataclasses.fields(op)}
        kwargs: dict[str, Any] = {}
        for item in fields:
            key, sep, val = item.partition("=")
            if not sep or key not in kinds:
                raise ParseError(lineno, f"{opname} has no field {key!r}")
            try:
                kwargs[key] = _parse_value(kinds[key], val)
            except (ValueError, KeyError, SystolicError) as exc:
                raise ParseError(lineno, f"bad value for {key}: {val!r} ({exc})") from None
        try:
            out.append(op(**kwargs))
        except TypeError as exc:
            raise ParseError(lineno, f"{opname}: {exc}") from None
        except SystolicError as exc:
            raise ParseError(lineno, str(exc)) from None
    return Program(out)
