"""``nki.compiler`` / ``neuronxcc.nki.compiler``: direct allocation and compiler directives.

A kernel that allocates its tiles itself (NKI "direct allocation": ``buffer=ncc.sbuf.
mod_alloc(base_addr=..., num_free_tiles=(2,))``, ``ncc.psum.mod_alloc(base_bank=...)``,
``ncc.sbuf.alloc(func)``) gets the buffer it names (SBUF or PSUM), and the model's
compiler stage places the tile (nki/alloc.py: first fit, ``affine_range`` tiles rotating
over physical copies), except a tile the kernel places itself: ``mod_alloc``'s modulo
placement (the API reference's ``modulo_allocate_func``: block ``(i, j, ..)`` at tile ``(i %
n0, j % n1, ..)`` past the base, a count not given being 1) and ``alloc(func)``'s function
are honoured, block by block (nki/direct.py), so blocks and tensors the kernel puts at one
place share its memory, as on hardware.
``skip_middle_end_transformations`` and the directives (``no_reorder()``) change nothing
here: the model applies no middle-end transformations and keeps program order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .record import fail
from .types import BUFFERS, Buffer

__all__ = ["enable_stack_allocator", "force_auto_alloc", "no_reorder", "psum", "sbuf",
           "skip_middle_end_transformations"]


def _whole(name: str, value: Any, what: str) -> None:
    least = 1 if name.startswith("num_") else 0  # a tile count: at least one tile
    ok = (isinstance(value, int) and not isinstance(value, bool) and value >= least) or (
        isinstance(value, tuple | list) and all(isinstance(v, int) and not isinstance(
            v, bool) and v > 0 for v in value))
    if not ok:
        raise fail(f"{what} {name}={value!r}: " + (
            "a tile count is a positive whole number or a tuple of them" if least else
            "a non-negative whole number"))


class _Space:
    """``ncc.sbuf`` / ``ncc.psum``: allocators that give the tile this buffer."""

    def __init__(self, name: str, keys: tuple[str, ...]) -> None:
        self.name, self._keys = name, keys

    def __repr__(self) -> str:
        return f"nki.compiler.{self.name}"

    def alloc(self, func: Callable[..., Any] | None = None, **kw: Any) -> Buffer:
        """``alloc(func)``: ``func(idx, pdim_size, fdim_size)`` gives each block's place:
        ``(start_partition, byte_addr)`` in SBUF, ``(bank_id, start_partition, byte_addr)``
        in PSUM (nki.compiler.sbuf.alloc / psum.alloc)."""
        if func is None or not callable(func) or kw:
            raise fail(f"nki.compiler.{self.name}.alloc takes one allocation function "
                       f"(block index, partition size, free size) -> address")
        return Buffer(self.name, func)

    def mod_alloc(self, *args: Any, **kw: Any) -> Buffer:
        """``mod_alloc(base_addr=|base_bank=, base_partition=, num_*_tiles=)``: the
        ``alloc`` function the API reference defines (``psum_modulo_alloc_func``)."""
        what = f"nki.compiler.{self.name}.mod_alloc"
        if args:
            kw = dict(zip(self._keys, args, strict=False)) | kw
        for k, v in kw.items():
            if k not in self._keys:
                raise fail(f"{what}: argument {k} is not one of {', '.join(self._keys)}")
            _whole(k, v, what)
        parts = [_modulo(kw.get("base_partition", 0), kw.get("num_par_tiles", ()), "p"),
                 _modulo(kw.get("base_addr", 0), kw.get("num_free_tiles", ()), "f")]
        if self.name == "psum":
            parts.insert(0, _modulo(kw.get("base_bank", 0), kw.get("num_bank_tiles", ()), 1))

        def locate(idx: tuple[int, ...], pdim_size: int, fdim_size: int) -> tuple[int, ...]:
            return tuple(f(idx, pdim_size, fdim_size) for f in parts)
        return Buffer(self.name, locate)

    def auto_alloc(self, *args: Any, **kw: Any) -> Buffer:
        return BUFFERS[self.name]


sbuf = _Space("sbuf", ("base_addr", "base_partition", "num_par_tiles", "num_free_tiles"))
psum = _Space("psum", ("base_bank", "base_addr", "base_partition", "num_bank_tiles",
                       "num_par_tiles", "num_free_tiles"))


def _modulo(base: int, tiles: Any, scale: int | str) -> Callable[[tuple[int, ...], int, int],
                                                                 int]:
    """The API reference's ``modulo_allocate_func``: ``base`` + the block index modulo
    ``tiles`` (1 where not given), linearised over ``tiles``, times ``scale`` (a number, or
    ``p`` / ``f``: the tile's partitions / bytes per partition)."""
    shape = tuple(tiles) if isinstance(tiles, tuple | list) else (tiles,)

    def f(idx: tuple[int, ...], pdim: int, fdim: int) -> int:
        s = shape or (1,) * len(idx)
        lin = 0
        for i, n in zip(idx, s, strict=False):
            lin = lin * n + i % n
        for n in s[len(idx):]:  # linearize over the whole allocate shape
            lin *= n
        unit = pdim if scale == "p" else fdim if scale == "f" else int(scale)
        return base + lin * unit
    return f


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
