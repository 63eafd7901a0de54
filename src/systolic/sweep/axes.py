"""Axis values in a sweep file: each input's name and value checked, ranges expanded, with
the file and line of the value in every error (the workload parser's line-aware reader)."""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, overload

import yaml

from ..arch import ARCHS, get_arch
from ..errors import SweepError, SystolicError
from ..isa import PerfMode
from ..workload import OPERAND_FORMATS
from ..yaml_source import YamlSource
from .evaluate import Target
from .overrides import apply_overrides, check_value, overridable_fields

__all__ = ["Axis", "RangeValues", "Src", "parse_axis", "parse_input"]

NAME = re.compile(r"^[A-Za-z_]\w*$")


class Src(YamlSource):
    """The line-aware YAML reader, raising SweepError."""

    def __init__(self, path: str) -> None:
        super().__init__(path, SweepError)


# A range axis is never materialised: its values are computed from their index when a point
# needs them (issue 22 H2: a billion-value range with ``sample: {random: 3}`` runs 3 points).
# Up to this many values each one is checked when the file is read, as a listed axis is;
# above it the first and last are checked then and the others as points draw them.
CHECK_ALL_UP_TO = 100_000
# The most values one range may have: a grid index must stay a numpy int64 for the seeded
# sample (spec.py MAX_GRID), and no grid of a longer axis could ever finish.
MAX_RANGE = 10**12


@dataclass(frozen=True, slots=True)
class Axis:
    """One axis: ``names`` (several when zipped) and its values, one tuple per step (a tuple
    of listed values, or a lazy :class:`RangeValues`)."""

    names: tuple[str, ...]
    values: Sequence[tuple[Any, ...]]
    line: int

    @property
    def size(self) -> int:
        return len(self.values)


class RangeValues(Sequence[tuple[Any, ...]]):
    """The values of ``{from, to, step}`` (``lo + i * step``) or ``{from, to, times}``
    (``lo * times ** i``), computed from their index and checked as inputs of ``name`` the
    first time they are read."""

    def __init__(self, lo: int | float, rate: int | float, count: int, geometric: bool,
                 check: Callable[[Any], Any]) -> None:
        self.lo, self.rate, self.n, self.geometric = lo, rate, count, geometric
        self._check = check
        self._seen: dict[int, tuple[Any, ...]] = {}

    def __len__(self) -> int:
        return self.n

    def raw(self, i: int) -> int | float:
        return self.lo * self.rate ** i if self.geometric else self.lo + i * self.rate

    @overload
    def __getitem__(self, i: int) -> tuple[Any, ...]: ...

    @overload
    def __getitem__(self, i: slice) -> Sequence[tuple[Any, ...]]: ...

    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self.n))]
        if i < 0:
            i += self.n
        if not 0 <= i < self.n:
            raise IndexError(i)
        got = self._seen.get(i)
        if got is None:
            got = (self._check(self.raw(i)),)
            if len(self._seen) < 4096:  # the values a grid revisits; a sample's few
                self._seen[i] = got
        return got

    def check(self, indices: Iterable[int]) -> None:
        """Check the values at ``indices`` now (a SweepError names the first bad one)."""
        for i in indices:
            self[i]

    def describe(self) -> list[Any]:
        """What the values are, in a few numbers (the sweep's identity hashes it)."""
        return ["times" if self.geometric else "step", self.lo, self.rate, self.n]


def parse_input(src: Src, node: yaml.Node, name: str, target: Target) -> Any:
    """One input value, checked for its name."""
    value = src.scalar(node)
    kind = target.kind
    if not isinstance(value, int | float | str | None):  # a YAML date, bytes: no column type
        raise src.fail(node, f"{name}: write a number, a string, true or false, got "
                             f"{type(value).__name__} {node.value!r}")
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


def _range(src: Src, node: yaml.Node, name: str, target: Target) -> RangeValues:
    """``{from: A, to: B, step: S}`` (arithmetic) or ``{from, to, times: F}`` (geometric),
    both including B when a step lands on it; sized in closed form, never listed."""
    fields = src.mapping(node, f"the range of {name}", ("from", "to", "step", "times"))
    if "from" not in fields or "to" not in fields or ("step" in fields) == ("times" in fields):
        raise src.fail(node, f"a range of {name} needs from, to and one of step or times")
    num: dict[str, int | float] = {}
    for k, (v_node, _) in fields.items():
        v = src.scalar(v_node)
        if isinstance(v, str):
            try:
                v = float(v)
            except ValueError:
                raise src.fail(v_node, f"{k} of {name} must be a number") from None
        elif isinstance(v, bool) or not isinstance(v, int | float):
            raise src.fail(v_node, f"{k} of {name} must be a number")
        if isinstance(v, float) and not math.isfinite(v):
            raise src.fail(v_node, f"{k} of {name} must be a finite number, got {v}")
        num[k] = v
    lo, hi = num["from"], num["to"]
    exact = all(isinstance(v, int) for v in num.values())
    geometric = "times" in num
    rate = num["times"] if geometric else num["step"]
    if geometric:
        if rate <= 1 or lo <= 0:
            raise src.fail(node, f"a geometric range of {name} needs from > 0 and times > 1")
        # below this ratio neighbouring float values are no longer distinct
        if not exact and rate - 1 < 16 * sys.float_info.epsilon:
            raise src.fail(fields["times"][0], f"times {rate!r} of {name} is too close to 1: "
                                               f"its values would repeat")
        count = _geometric_count(lo, hi, rate, exact)
    else:
        if rate <= 0:
            raise src.fail(fields["step"][0], f"step of {name} must be above 0")
        if exact:
            count = max(int(hi - lo) // int(rate) + 1, 0)
        else:
            if rate < 4 * math.ulp(max(abs(lo), abs(hi))):
                raise src.fail(fields["step"][0], f"step {rate!r} of {name} is below the "
                                                  f"spacing of floats near {hi!r}: its values "
                                                  f"would repeat")
            steps = (hi - lo) / rate
            count = 0 if steps < 0 else MAX_RANGE + 1 if steps > MAX_RANGE else \
                math.floor(steps + 1e-9) + 1
    if count < 1:
        raise src.fail(node, f"the range of {name} is empty (from {lo} to {hi})")
    if count > MAX_RANGE:
        raise src.fail(node, f"the range of {name} has more than {MAX_RANGE:,} values")

    def check(value: int | float) -> Any:
        return parse_input(src, _literal(node, value), name, target)

    values = RangeValues(lo, rate, count, geometric, check)
    values.check(range(count) if count <= CHECK_ALL_UP_TO else (0, count - 1))
    return values


def _geometric_count(lo: int | float, hi: int | float, rate: int | float, exact: bool) -> int:
    """How many of ``lo * rate ** i`` are at most ``hi`` (with the 1e-9 slack of a float
    product that should land on ``hi``)."""
    if exact:  # integers: count exactly
        count, v = 0, lo
        while v <= hi:
            count, v = count + 1, v * rate
            if count > MAX_RANGE:
                break
        return count
    if hi < lo:
        return 0
    count = math.floor(math.log(hi / lo) / math.log(rate)) + 1
    count = min(count, MAX_RANGE + 1)
    while count > 0 and lo * rate ** (count - 1) > hi * (1 + 1e-9):
        count -= 1
    while count <= MAX_RANGE and lo * rate ** count <= hi * (1 + 1e-9):
        count += 1
    return count


def parse_axis(src: Src, key_node: yaml.Node, node: yaml.Node, target: Target) -> Axis:
    names = tuple(n.strip() for n in str(src.scalar(key_node)).split(","))
    line = key_node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        if len(names) > 1:
            raise src.fail(node, "a zipped axis takes a list of lists, not a range")
        # distinct by construction: rising, and spaced above the float resolution
        return Axis(names, _range(src, node, names[0], target), line)
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
