"""The recording: every NKI call appends one operation carrying the kernel's file and line.

A kernel runs as ordinary Python over tensor handles; the calls of ``nki.isa`` and
``nki.language`` do not compute anything, they append an :class:`Op` to the current
:class:`Recorder`. After the kernel returns, :mod:`systolic.nki.build` turns the list into
one Program. Errors found while recording are raised at once as :class:`KernelError` at the
calling line of the kernel, so nothing half-built is ever returned.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..arch import Arch
from ..errors import KernelError

if TYPE_CHECKING:
    from .tensor import Tensor, View

__all__ = ["Loop", "Op", "Recorder", "current", "fail", "here"]

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))


def here() -> tuple[str, int]:
    """(file, line) of the innermost frame outside this package: the kernel's own line."""
    f = sys._getframe(1)
    while f is not None and f.f_code.co_filename.startswith(_PKG_DIR):
        f = f.f_back  # type: ignore[assignment]
    if f is None:  # pragma: no cover - called only from kernels
        return ("<unknown>", 0)
    return (f.f_code.co_filename, f.f_lineno)


def fail(message: str, where: tuple[str, int] | None = None) -> KernelError:
    path, line = where if where is not None else here()
    return KernelError(path, line, message)


@dataclass(slots=True)
class Op:
    """One recorded NKI operation. ``kind`` is dma, copy, tt, ts (tensor_scalar), reduce,
    memset, act, qmx, mm or mmx; ``dst``/``srcs`` are views (``srcs`` every view it reads,
    per-partition operands included); ``outs`` the views it writes besides ``dst`` (an
    activation's ``reduce_res``); ``attrs`` the operation's own fields."""

    kind: str
    dst: View
    srcs: tuple[View, ...]
    where: tuple[str, int]
    attrs: dict[str, Any] = field(default_factory=dict)
    outs: tuple[View, ...] = ()

    def views(self) -> tuple[View, ...]:
        """Every view it touches: written first, then read."""
        return (self.dst, *self.outs, *self.srcs)


@dataclass(frozen=True, slots=True)
class Loop:
    """One run of an ``nl.affine_range`` / ``sequential_range`` / ``static_range`` loop:
    its kind, a number unique in the recording, and the loop it runs in. ``end`` is set on
    the Recorder (``loop_ends``) when the loop finishes: the index of the first operation
    after it."""

    kind: str
    id: int
    parent: Loop | None


class Recorder:
    """The operations of one kernel run, and the tensors they touch, in program order."""

    def __init__(self, arch: Arch) -> None:
        self.arch = arch
        self.ops: list[Op] = []
        self.tensors: list[Tensor] = []
        self.inputs: list[Tensor] = []
        self.pending: list[Any] = []  # lazy results of the older API (nl.load, nl.matmul)
        self.writing: set[int] = set()  # ids of the lazy results being written now
        self.loops: list[Loop] = []  # the loops the kernel is in now, innermost last
        self.loop_ends: dict[int, int] = {}  # loop id -> index of the first op after it
        self._loop_ids = 0

    def add_tensor(self, t: Tensor) -> None:
        """A tensor the kernel made, tagged with the loop it was made in (the compiler's
        buffer rotation, nki/alloc.py, keys on it)."""
        t.loop = self.loops[-1] if self.loops else None
        self.tensors.append(t)

    def enter_loop(self, kind: str) -> Loop:
        self._loop_ids += 1
        loop = Loop(kind, self._loop_ids, self.loops[-1] if self.loops else None)
        self.loops.append(loop)
        return loop

    def exit_loop(self, loop: Loop) -> None:
        if loop in self.loops:  # a loop left by break/return/exception closes here too
            del self.loops[self.loops.index(loop):]
        self.loop_ends.setdefault(loop.id, len(self.ops))

    def add(self, op: Op) -> None:
        if self.pending:
            self.flush(op)
        for v in (op.dst, *op.outs):  # written: no longer a copy of what it was loaded from
            v.tensor.loaded_from = None
        self.ops.append(op)

    def flush(self, op: Op | None = None) -> None:
        """Materialise lazy results not consumed by ``op``: keeps program order exact. A
        lazy result made after one that is being written now (``writing``: ``op`` may be
        that write, or an operand it materialises first) waits until that write is
        recorded, since it may read it (``m = nl.max(t)`` after ``t = nl.load(x)``)."""
        waiting, self.pending = self.pending, []
        used = set() if op is None else {id(v) for v in (op.dst, *op.srcs)}
        for j, p in enumerate(waiting):
            if id(p) in self.writing:
                self.pending = [q for q in waiting[j + 1:] if q.result is None] + self.pending
                return
            if id(p) not in used and p.result is None:
                p.materialize()


_STACK: list[Recorder] = []
# The recording functions of systolic.nki.isa, registered there at import, so that tensor
# handles (systolic.nki.tensor) can record ``+=`` and assignments without importing it.
HOOKS: dict[str, Any] = {}
DEFAULT_ARCH: dict[str, Any] = {"arch": "trn2"}


def set_default_arch(arch: Any) -> None:
    """The machine of kernels that name no ``platform_target`` (``install(arch)``)."""
    from ..arch import get_arch

    get_arch(arch)  # unknown names fail here
    DEFAULT_ARCH["arch"] = arch


def current() -> Recorder:
    if not _STACK:
        raise fail("this NKI call runs only inside a kernel: call it through nki.simulate, "
                   "nki.simulate_kernel, nki.benchmark or systolic.nki.record_kernel")
    return _STACK[-1]


def push(rec: Recorder) -> None:
    _STACK.append(rec)


def pop() -> None:
    _STACK.pop()
