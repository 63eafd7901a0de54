"""Arch overrides by field name: which fields a sweep may change, and which values make sense.

The fields are read from :class:`~systolic.arch.Arch` itself (``dataclasses.fields``), so a
field added to the Arch later (DMA queues, engine clocks) is a sweep axis at once, with no
list to keep here. What is checked, by the field's declared type:

* ``int`` fields: an integer (not a YAML boolean); at least 1, or at least 0 for a field that
  is a latency, an overhead or a count of extra cycles (its name says so, see ``_MAY_BE_ZERO``);
* ``float`` fields: a finite number (``2.4e9`` written without a dot is accepted too); above 0,
  or at least 0 for the same latency-like names;
* ``bool`` fields: true or false;
* names, tuples (format lists) and derived fields are not overridable: pick an arch preset.

After the replacement the array must still split into whole quadrants (rows and cols
multiples of ``quadrant``: seed 000 "Partition Geometry" tiles the array by 32-lane quadrants).
"""

from __future__ import annotations

import dataclasses
import math
import typing
from functools import cache
from typing import Any

from ..arch import Arch
from ..errors import ArchError

__all__ = ["apply_overrides", "check_value", "overridable_fields"]

# Not axes: the preset's identity (use the ``arch`` axis) and its format tables.
_FIXED = frozenset({"name", "generation", "formats", "perf_modes"})
# Name parts of fields whose value may be 0: a latency or overhead can be absent.
_MAY_BE_ZERO = ("latency", "fixed", "overhead", "_cycles", "_ns", "_us", "level")


@cache
def overridable_fields() -> dict[str, type]:
    """Field name -> its type (int, float or bool) for every Arch field a sweep may set."""
    hints = typing.get_type_hints(Arch)
    out: dict[str, type] = {}
    for f in dataclasses.fields(Arch):
        kind = hints.get(f.name)
        if f.init and f.name not in _FIXED and kind in (int, float, bool):
            out[f.name] = kind
    return out


def check_value(name: str, value: Any) -> int | float | bool:
    """``value`` as the Arch field ``name`` takes it, or an ArchError saying what is wrong."""
    fields = overridable_fields()
    if name not in fields:
        raise ArchError(f"{name!r} is not an Arch field a sweep can set; fields: "
                        f"{', '.join(sorted(fields))}")
    kind = fields[name]
    if kind is bool:
        if not isinstance(value, bool):
            raise ArchError(f"{name} must be true or false, got {value!r}")
        return value
    zero_ok = any(part in name for part in _MAY_BE_ZERO)
    floor = "at least 0" if zero_ok else "above 0"
    if isinstance(value, bool):
        raise ArchError(f"{name} must be a number, got {value!r}")
    if kind is int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int):
            raise ArchError(f"{name} must be an integer, got {value!r}")
    else:
        if isinstance(value, str):  # YAML 1.1 reads 2.4e9 (no dot) as a string
            try:
                value = float(value)
            except ValueError:
                raise ArchError(f"{name} must be a number, got {value!r}") from None
        if not isinstance(value, int | float) or not math.isfinite(value):
            raise ArchError(f"{name} must be a finite number, got {value!r}")
        value = float(value)
    if value < 0 or (value == 0 and not zero_ok):
        raise ArchError(f"{name} = {value} makes no physical sense: it must be {floor}")
    return value


def apply_overrides(arch: Arch, overrides: dict[str, Any]) -> Arch:
    """``arch`` with the fields replaced (each checked), renamed ``NAME*`` when changed."""
    if not overrides:
        return arch
    values: dict[str, Any] = {k: check_value(k, v) for k, v in overrides.items()}
    try:
        new = dataclasses.replace(arch, name=f"{arch.name}*", **values)
    except (TypeError, ValueError) as exc:
        raise ArchError(f"cannot build the arch with {values}: {exc}") from None
    for dim in ("rows", "cols"):
        size = getattr(new, dim)
        if size % new.quadrant:
            raise ArchError(f"{dim} = {size} does not split into {new.quadrant}-lane "
                            f"quadrants; make it a multiple of {new.quadrant} or set quadrant")
    return new
