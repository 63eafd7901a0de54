"""How an NKI call's arguments are read, for every ``nki.isa`` / ``nki.language`` family.

NKI has two API generations: the current one passes ``dst`` first (or as ``dst=``) and
returns nothing; the older one returns the result, written where it is assigned
(:class:`~systolic.nki.tensor.Pending`). Each entry point reads its arguments with
:func:`take` (by position in its documented order, or by keyword; anything it does not
model and anything missing is one line naming it) and then either records into ``dst`` or
returns the lazy result (:func:`emit`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .lazy import LazyKind
from .mask import applying
from .record import Where, fail
from .tensor import Pending, Tensor, View, as_view

__all__ = ["current_api", "emit", "named", "need", "no_extra", "take"]

RecordFn = Callable[[View, dict[str, Any], Where], None]


def current_api(args: tuple[Any, ...], kw: dict[str, Any], n: int, at: int = 0) -> bool:
    """The current API: ``dst=`` given, or ``n`` or more positional arguments with a tile
    at position ``at`` (``dst`` first; tensor_tensor_scan's third argument tells them
    apart)."""
    return "dst" in kw or (len(args) >= n and isinstance(args[at], Tensor | View))


def no_extra(kw: dict[str, Any], what: str, where: Where) -> None:
    """Arguments left over after a call took its own: one line naming them."""
    if kw:
        raise fail(f"{what}: argument(s) {', '.join(sorted(kw))} not modelled", where)


def need(vals: dict[str, Any], names: tuple[str, ...], what: str, where: Where) -> None:
    """Each of ``names`` given (by position or keyword): else one line naming the missing."""
    missing = [n for n in names if n not in vals]
    if missing:
        raise fail(f"{what}: missing argument(s) {', '.join(missing)}", where)


def named(args: tuple[Any, ...], kw: dict[str, Any], names: tuple[str, ...],
          what: str) -> dict[str, Any]:
    """The call's arguments in ``names``, by position in that order or by keyword (popped
    from ``kw``); the caller reads its options from ``kw`` next, then :func:`no_extra`.
    More positional arguments than ``names`` is one line (they were dropped silently)."""
    if len(args) > len(names):
        raise fail(f"{what} takes at most {len(names)} positional arguments "
                   f"({', '.join(names)}), not {len(args)}")
    vals = dict(zip(names, args, strict=False))
    for k in names:
        if k in kw:
            vals[k] = kw.pop(k)
    return vals


def take(args: tuple[Any, ...], kw: dict[str, Any], names: tuple[str, ...], what: str,
         where: Where, required: int) -> dict[str, Any]:
    """The call's arguments by name (positional in ``names`` order, or keywords); the first
    ``required`` must be given and not None; anything else is one line naming it."""
    vals = named(args, kw, names, what)
    kw.pop("name", None)
    no_extra(kw, what, where)
    missing = [n for n in names[:required] if vals.get(n) is None]
    if missing:
        raise fail(f"{what}: missing argument(s) {', '.join(missing)}", where)
    return vals


def emit(kind: LazyKind, dst: Any, args: dict[str, Any], where: Where,
         record: RecordFn) -> Pending | None:
    """Record into ``dst`` now with ``record`` (the current API), or return the lazy result
    (the older API's: written where it is assigned, else into a fresh tile; the kind's rule
    in nki/results.py). A ``mask`` in ``args`` (the call's ``mask=``) applies to the record
    here, and a lazy result keeps it to apply when it is written (results.write)."""
    if dst is not None:
        with applying(args.get("mask"), args.get("what") or kind.value, where):
            record(as_view(dst), args, where)
        return None
    return Pending(kind, where, **args)
