"""``nki.compiler`` / ``neuronxcc.nki.compiler``: direct allocation and compiler directives.

A kernel that allocates its tiles itself (NKI "direct allocation": ``buffer=ncc.sbuf.
mod_alloc(base_addr=..., num_free_tiles=(2,))``, ``ncc.psum.mod_alloc(base_bank=...)``,
``ncc.sbuf.alloc(func)``) gets the buffer it names (SBUF or PSUM), and the model's
compiler stage places the tile (nki/alloc.py: first fit, ``affine_range`` tiles rotating
over physical copies). ``mod_alloc``'s tile counts are honoured: logical block ``(i, j,
..)`` of the tensor is physical tile ``(i % n0, j % n1, ..)``, a count missing or not
given being 1 (the API reference's ``modulo_allocate_func``, nki.compiler.sbuf.mod_alloc /
psum.mod_alloc; ``num_par_tiles`` and ``num_free_tiles`` / ``num_bank_tiles`` together: two
blocks share a tile when both indices agree, so the least common multiple), so blocks
that share a physical tile share its memory, as on hardware (nki/tensor.py). The base
addresses and ``alloc(func)``'s addresses are checked for type and sign and otherwise NOT
honoured (unsure how far this moves the timing: the placement decides which instructions
wait on which through reused addresses, not any value).
``skip_middle_end_transformations`` and the directives (``no_reorder()``) change nothing
here: the model applies no middle-end transformations and keeps program order.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .record import fail
from .types import BUFFERS, Buffer

__all__ = ["enable_stack_allocator", "force_auto_alloc", "no_reorder", "psum", "sbuf",
           "skip_middle_end_transformations"]


def _whole(name: str, value: Any, what: str) -> None:
    ok = (isinstance(value, int) and not isinstance(value, bool) and value >= 0) or (
        isinstance(value, tuple | list) and all(isinstance(v, int) and not isinstance(
            v, bool) and v > 0 for v in value))
    if not ok:
        raise fail(f"{what} {name}={value!r}: a non-negative whole number (or a tuple of "
                   f"positive ones for a tile count)")


class _Space:
    """``ncc.sbuf`` / ``ncc.psum``: allocators that give the tile this buffer."""

    def __init__(self, name: str, keys: tuple[str, ...]) -> None:
        self.name, self._keys = name, keys

    def __repr__(self) -> str:
        return f"nki.compiler.{self.name}"

    def alloc(self, func: Callable[..., Any] | None = None, **kw: Any) -> Buffer:
        """``alloc(func)``: ``func(idx, pdim_size, fdim_size)`` would give each block's
        address; the model places the tile itself (module docstring)."""
        if func is None or not callable(func) or kw:
            raise fail(f"nki.compiler.{self.name}.alloc takes one allocation function "
                       f"(block index, partition size, free size) -> address")
        return BUFFERS[self.name]

    def mod_alloc(self, *args: Any, **kw: Any) -> Buffer:
        """``mod_alloc(base_addr=|base_bank=, base_partition=, num_*_tiles=)``."""
        what = f"nki.compiler.{self.name}.mod_alloc"
        if args:
            kw = dict(zip(self._keys, args, strict=False)) | kw
        for k, v in kw.items():
            if k not in self._keys:
                raise fail(f"{what}: argument {k} is not one of {', '.join(self._keys)}")
            _whole(k, v, what)
        counts = [tuple(c) if isinstance(c, tuple | list) else (c,) for c in (
            kw.get(k, ()) for k in self._keys if k.startswith("num_"))]
        tiles = tuple(math.lcm(*(c[d] if d < len(c) else 1 for c in counts))
                      for d in range(max(map(len, counts))))
        return Buffer(self.name, tiles)

    def auto_alloc(self, *args: Any, **kw: Any) -> Buffer:
        return BUFFERS[self.name]


sbuf = _Space("sbuf", ("base_addr", "base_partition", "num_par_tiles", "num_free_tiles"))
psum = _Space("psum", ("base_bank", "base_addr", "base_partition", "num_bank_tiles",
                       "num_par_tiles", "num_free_tiles"))


def skip_middle_end_transformations(func: Any) -> Any:
    """A decorator: the kernel as it is (the model makes no middle-end transformations)."""
    return func


def enable_stack_allocator(func: Any = None, **kw: Any) -> Any:
    return func if func is not None else (lambda f: f)


def force_auto_alloc(func: Any = None, **kw: Any) -> Any:
    return func if func is not None else (lambda f: f)


class _Directive:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"nki.compiler.{self.name}()"


def no_reorder() -> _Directive:
    """``directives=ncc.no_reorder()`` on a range: the model keeps program order anyway."""
    return _Directive("no_reorder")
