"""Axis values in a sweep file: each input's name and value checked, ranges expanded, with
the file and line of the value in every error (the workload parser's line-aware reader)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import yaml

from ..arch import ARCHS, get_arch
from ..errors import SweepError, SystolicError
from ..isa import PerfMode
from ..workload import OPERAND_FORMATS
from ..yaml_source import YamlSource
from .evaluate import Target
from .overrides import apply_overrides, check_value, overridable_fields

__all__ = ["Axis", "Src", "parse_axis", "parse_input"]

NAME = re.compile(r"^[A-Za-z_]\w*$")


class Src(YamlSource):
    """The line-aware YAML reader, raising SweepError."""

    def __init__(self, path: str) -> None:
        super().__init__(path, SweepError)


@dataclass(frozen=True, slots=True)
class Axis:
    """One axis: ``names`` (several when zipped) and its values, one tuple per step."""

    names: tuple[str, ...]
    values: tuple[tuple[Any, ...], ...]
    line: int


def parse_input(src: Src, node: yaml.Node, name: str, target: Target) -> Any:
    """One input value, checked for its name."""
    value = src.scalar(node)
    kind = target.kind
    try:
        if name == "arch":
            if value not in ARCHS:
                raise SweepError(f"unknown arch {value!r}; expected one of {', '.join(ARCHS)}")
        elif name == "dtype":
            if str(value).lower() not in OPERAND_FORMATS:
                raise SweepError(f"unknown dtype {value!r}; expected one of "
                                 f"{', '.join(OPERAND_FORMATS)}")
            value = str(value).lower()
        elif name == "perf_mode":
            value = PerfMode.parse(str(value)).spelling
        elif name in ("m", "k", "n") or name.startswith("dim."):
            if kind != ("matmul" if name in ("m", "k", "n") else "kernel"):
                raise SweepError(f"{name} is an input of "
                                 f"{'a matmul' if len(name) == 1 else 'a kernel'} sweep, "
                                 f"not of a {kind} sweep")
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SweepError(f"{name} must be a positive integer, got {node.value!r}")
        elif name.startswith("param."):
            if kind != "kernel" or not NAME.match(name[6:]):
                raise SweepError(f"{name}: param.NAME inputs are keyword arguments of a "
                                 f"kernel sweep")
        elif name in overridable_fields():
            value = check_value(name, value)
            # Alone on a preset (every preset has 32-lane quadrants): rows 100 fails here;
            # a combination with a quadrant axis is checked per point.
            apply_overrides(get_arch("trn2"), {name: value})
        else:
            own = {"matmul": "m, k, n, ", "kernel": "dim.NAME, param.NAME, "}.get(kind, "")
            raise SweepError(
                f"unknown input {name!r}: expected arch, dtype, perf_mode, {own}or an Arch "
                f"field ({', '.join(sorted(overridable_fields()))})")
    except SystolicError as exc:
        raise src.fail(node, str(exc)) from None
    return value


def _range(src: Src, node: yaml.Node, name: str) -> list[Any]:
    """``{from: A, to: B, step: S}`` (arithmetic) or ``{from, to, times: F}`` (geometric),
    both including B when a step lands on it."""
    fields = src.mapping(node, f"the range of {name}", ("from", "to", "step", "times"))
    if "from" not in fields or "to" not in fields or ("step" in fields) == ("times" in fields):
        raise src.fail(node, f"a range of {name} needs from, to and one of step or times")
    num = {k: src.scalar(v) for k, (v, _) in fields.items()}
    for k, v in num.items():
        if isinstance(v, str):
            try:
                num[k] = float(v)
            except ValueError:
                raise src.fail(fields[k][0], f"{k} of {name} must be a number") from None
        elif isinstance(v, bool) or not isinstance(v, int | float):
            raise src.fail(fields[k][0], f"{k} of {name} must be a number")
    lo, hi = num["from"], num["to"]
    out: list[Any] = []
    if "step" in num:
        if num["step"] <= 0:
            raise src.fail(fields["step"][0], f"step of {name} must be above 0")
        count = math.floor((hi - lo) / num["step"] + 1e-9) + 1
        out = [lo + i * num["step"] for i in range(max(count, 0))]
    else:
        if num["times"] <= 1 or lo <= 0:
            raise src.fail(node, f"a geometric range of {name} needs from > 0 and times > 1")
        v = lo
        while v <= hi * (1 + 1e-9):
            out.append(v)
            v *= num["times"]
    if not out:
        raise src.fail(node, f"the range of {name} is empty (from {lo} to {hi})")
    if all(isinstance(num[k], int) for k in num):
        out = [int(v) for v in out]
    if len(out) > 1_000_000:
        raise src.fail(node, f"the range of {name} has {len(out):,} values; at most 1,000,000")
    return out


def parse_axis(src: Src, key_node: yaml.Node, node: yaml.Node, target: Target) -> Axis:
    names = tuple(n.strip() for n in str(src.scalar(key_node)).split(","))
    line = key_node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        if len(names) > 1:
            raise src.fail(node, "a zipped axis takes a list of lists, not a range")
        values = [(parse_input(src, _literal(node, v), names[0], target),)
                  for v in _range(src, node, names[0])]
    elif isinstance(node, yaml.SequenceNode):
        if not node.value:
            raise src.fail(node, f"axis {', '.join(names)} has no values")
        values = []
        for item in node.value:
            if len(names) == 1:
                values.append((parse_input(src, item, names[0], target),))
                continue
            if not isinstance(item, yaml.SequenceNode) or len(item.value) != len(names):
                raise src.fail(item, f"each value of the zipped axis {', '.join(names)} is a "
                                     f"list of {len(names)} values")
            values.append(tuple(parse_input(src, v, n, target)
                                for v, n in zip(item.value, names, strict=True)))
    else:
        raise src.fail(node, f"axis {', '.join(names)} takes a list of values or a range "
                             f"{{from, to, step|times}}")
    seen: dict[tuple[Any, ...], int] = {}
    for i, v in enumerate(values):
        if v in seen:
            raise src.fail(node, f"axis {', '.join(names)} lists {v if len(v) > 1 else v[0]!r}"
                                 f" twice (values {seen[v] + 1} and {i + 1})")
        seen[v] = i
    return Axis(names, tuple(values), line)


def _literal(node: yaml.Node, value: Any) -> yaml.Node:
    """A scalar node holding ``value`` at ``node``'s position (range values are checked like
    listed ones, and their errors point at the range)."""
    tag = "tag:yaml.org,2002:int" if isinstance(value, int) else "tag:yaml.org,2002:float"
    return yaml.ScalarNode(tag, repr(value), node.start_mark, node.end_mark)
