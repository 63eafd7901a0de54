"""The recording: every NKI call appends one operation carrying the kernel's file and line.

A kernel runs as ordinary Python over tensor handles; the calls of ``nki.isa`` and
``nki.language`` do not compute anything, they append an :class:`Op` to the current
:class:`Recorder`. After the kernel returns, :mod:`systolic.nki.build` turns the list into
one Program. Errors found while recording are raised at once as :class:`KernelError` at the
calling line of the kernel, so nothing half-built is ever returned.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from ..arch import Arch
from ..errors import KernelError
from .opkind import OpArgs, OpKind

if TYPE_CHECKING:
    from .lazy import Pending
    from .tensor import Tensor, View

__all__ = ["DEFAULT_MAX_OPS", "DEFAULT_TIME_LIMIT_S", "Loop", "NotModelled", "Op", "Recorder",
           "Recording", "RecordingTimeout", "Where", "current", "fail", "here",
           "missing_names", "time_guard"]

Where = tuple[str, int]

# The recording budget (issue 22 H4: kernel code is unbounded), a default that every public
# kernel we run fits in. The largest, measured 2026-12-04 on the 2-core machine
# (record + build, bench/public_kernels.py's kernels at their perf tests' sizes):
# nki-samples' flash attention backward at 32K x 128, 4 heads, with sinks: 1,810,211 NKI
# operations (2,176,803 instructions), 104 s and 3.1 GB; its forward at 32K x 32K, 6 heads
# (3 KV heads): 453,567 operations, 39 s, 0.9 GB; the tiled matmul tutorial at 4096 x 8192 x
# 8192: 100,352. A kernel whose loops are far too large (tiled_matmul at bf16[65536, 65536]:
# 10^8 operations) is stopped after about two minutes and 3.5 GB, where it would otherwise
# run for days and out of memory; `--max-ops` / ``max_ops=`` lower it.
DEFAULT_MAX_OPS = 2_000_000
# Seconds the kernel's own Python may run while it is recorded: the flash attention backward
# above records in about 70 s of its 104 here, so 180 s leaves room for a slower machine,
# and a kernel stuck in a pure Python loop (``while True: pass``, ``affine_range(10**12)``
# with no NKI call) that the op budget cannot see is stopped within three minutes.
DEFAULT_TIME_LIMIT_S = 180.0

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


class NotModelled(KernelError, AttributeError):
    """A name of ``nki``, ``nki.isa``, ``nki.language`` ... that the model does not have:
    one line at the kernel's line naming it (a KernelError), and still an AttributeError,
    so ``hasattr`` and ``getattr(m, name, default)`` behave as on a module."""


def missing_names(module: str) -> Any:
    """A module ``__getattr__`` refusing every public name the module lacks, as
    ``module.name is not modelled`` (``nisa.tensor_tensor_scan is not modelled ...``)."""

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        path, line = here()
        raise NotModelled(path, line, f"{module}.{name} is not modelled by systolic's NKI "
                                      f"front end (docs/nki.md lists what is)")

    return __getattr__


class Op:
    """One recorded NKI operation: ``args`` its typed record (nki/opkind.py), whose class
    names its :class:`OpKind` (``kind``, kept on the op: the build passes read it five
    times per op); ``dst``/``srcs`` are views (``srcs`` every view it reads, per-partition
    operands included); ``outs`` the views it writes besides ``dst`` (an activation's
    ``reduce_res``, quantize_mx's scales)."""

    __slots__ = ("args", "dst", "kind", "outs", "srcs", "where")

    def __init__(self, args: OpArgs, dst: View, srcs: tuple[View, ...], where: Where,
                 outs: tuple[View, ...] = ()) -> None:
        self.args, self.dst, self.srcs, self.where, self.outs = args, dst, srcs, where, outs
        self.kind: OpKind = args.KIND

    def __repr__(self) -> str:
        return (f"Op({self.kind.value}, dst={self.dst!r}, srcs={list(self.srcs)!r}, "
                f"where={self.where!r})")

    def views(self) -> tuple[View, ...]:
        """Every view it touches: written first, then read."""
        return (self.dst, *self.outs, *self.srcs)


class Recording(Protocol):
    """The recording functions tensor handles and lazy results call (``x[...] = y``,
    ``+=``, a lazy result used or assigned). The tensors sit below the recording functions
    (nki/ops.py imports them), so the :class:`Recorder` carries these, passed in by whoever
    makes it (nki/run.py passes :data:`systolic.nki.results.RECORDING`)."""

    def dma(self, dst: View, src: View, where: Where) -> None: ...

    def copy(self, dst: View, src: View, eng: object, where: Where) -> None: ...

    def tensor_tensor(self, dst: View, a: View, b: View, op: object, eng: object,
                      where: Where) -> None: ...

    def memset(self, dst: View, value: float, eng: object, where: Where) -> None: ...

    def materialize(self, p: Pending) -> Tensor:
        """The fresh tile a lazy result lands in when it is used, written."""
        ...

    def write(self, p: Pending, dst: View, accumulate: bool | None) -> None:
        """A lazy result written into ``dst`` (assigned, or ``+=`` with accumulate)."""
        ...


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
    """The operations of one kernel run, and the tensors they touch, in program order.
    ``recording``: the recording functions tensor handles call (:class:`Recording`).
    ``max_ops``: the most operations, and the most tensors, a kernel may record
    (:data:`DEFAULT_MAX_OPS`); one more is a :class:`KernelError` at its line."""

    def __init__(self, arch: Arch, recording: Recording,
                 max_ops: int = DEFAULT_MAX_OPS) -> None:
        self.arch = arch
        self.recording = recording
        self.max_ops = max_ops
        self.ops: list[Op] = []
        self.tensors: list[Tensor] = []
        self.inputs: list[Tensor] = []
        # nl.shared_constant: device-memory tensors whose values the kernel gives (numpy
        # arrays already in the tensor's dtype), written before the Program runs
        self.constants: list[tuple[Tensor, Any]] = []
        self.pending: list[Any] = []  # lazy results of the older API (nl.load, nl.matmul)
        self.writing: set[int] = set()  # ids of the lazy results being written now
        self.loops: list[Loop] = []  # the loops the kernel is in now, innermost last
        self.loop_ends: dict[int, int] = {}  # loop id -> index of the first op after it
        self._loop_ids = 0
        # direct allocation: a loop body's declaration -> the tensor its first iteration
        # made (nki/direct.py pin)
        self.direct: dict[Any, Any] = {}
        # SPMD instances placed on NeuronCores (nl.nc, nki/spmd.py): (first op, end op,
        # core) per instance; empty when the launch names no cores (nki/cores.py)
        self.core_ops: list[tuple[int, int, int]] = []
        # the mask= of the NKI call being recorded: each op becomes the ops over what it
        # selects (nki/mask.py applying / split), None when the call has none
        self.mask: Callable[[Op], list[Op]] | None = None

    def add_tensor(self, t: Tensor) -> None:
        """A tensor the kernel made, tagged with the loop it was made in (the compiler's
        buffer rotation, nki/alloc.py, keys on it)."""
        t.loop = self.loops[-1] if self.loops else None
        if len(self.tensors) >= self.max_ops:
            raise KernelError(*t.where, self._over("tensors"))
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

    def _over(self, what: str) -> str:
        return (f"the kernel made more than {self.max_ops:,} {what}, the recording budget "
                f"(max_ops); its loops run far more often than a kernel needs: use a smaller "
                f"shape, or raise max_ops")

    def add(self, op: Op) -> None:
        if len(self.ops) >= self.max_ops:
            raise KernelError(*op.where, self._over("NKI operations"))
        if self.pending:
            self.flush(op)
        dst = op.dst
        if self.mask is None and not op.outs and dst.outside is None:
            for s in op.srcs:
                if s.outside is not None:
                    break
            else:  # nearly every op: unmasked, one view written, no index past a dimension
                dst.tensor.loaded_from = None
                self.ops.append(op)
                return
        for o in ([op] if self.mask is None else self.mask(op)):
            for v in o.views():  # an index past its dimension that no mask cut off
                if v.outside is not None:
                    v.outside.check(o.where)
            for v in (o.dst, *o.outs):  # written: no longer a copy of what it was loaded from
                v.tensor.loaded_from = None
            self.ops.append(o)

    def flush(self, op: Op | None = None) -> None:
        """Materialise lazy results not consumed by ``op``: keeps program order exact. A
        lazy result made after one that is being written now (``writing``: ``op`` may be
        that write, or an operand it materialises first) waits until that write is
        recorded, since it may read it (``m = nl.max(t)`` after ``t = nl.load(x)``)."""
        waiting, self.pending = self.pending, []
        used = set() if op is None else {id(v) for v in (op.dst, *op.srcs)}
        for j, p in enumerate(waiting):
            if id(p) in self.writing:  # kept while written: a later flush waits on it too
                self.pending = [q for q in waiting[j:] if q.result is None
                                or id(q) in self.writing] + self.pending
                return
            if id(p) not in used and p.result is None:
                p.materialize()


_T = TypeVar("_T")


class ThreadStack(threading.local, Generic[_T]):
    """A stack of its own in each thread (a list's ``append``, ``pop``, ``[-1]`` and truth;
    ``items`` is this thread's list, for the hot readers).
    What a kernel's recording is inside of (the recorders, the SPMD launch being recorded)
    belongs to the thread recording it: with one stack for the process, two threads
    recording kernels at once pushed onto each other's, and each recorded into the other's
    kernel (wrong values, or a kernel refused for reading what it never wrote)."""

    def __init__(self) -> None:  # run once in each thread that touches the stack
        self.items: list[_T] = []

    def __bool__(self) -> bool:
        return bool(self.items)

    def __getitem__(self, i: int) -> _T:
        return self.items[i]

    def append(self, item: _T) -> None:
        self.items.append(item)

    def pop(self) -> _T:
        return self.items.pop()


_STACK: ThreadStack[Recorder] = ThreadStack()
DEFAULT_ARCH: dict[str, Any] = {"arch": "trn2"}


def set_default_arch(arch: Any) -> None:
    """The machine of kernels that name no ``platform_target`` (``install(arch)``)."""
    from ..arch import get_arch

    get_arch(arch)  # unknown names fail here
    DEFAULT_ARCH["arch"] = arch


def current() -> Recorder:
    items = _STACK.items  # this thread's (one lookup: called at every NKI call)
    if not items:
        raise fail("this NKI call runs only inside a kernel: call it through nki.simulate, "
                   "nki.simulate_kernel, nki.benchmark or systolic.nki.record_kernel")
    return items[-1]


def push(rec: Recorder) -> None:
    _STACK.append(rec)


def pop() -> None:
    _STACK.pop()


class RecordingTimeout(BaseException):
    """Raised in a kernel whose Python runs past its time limit while it is recorded. A
    BaseException, so that the kernel's own ``except Exception`` cannot swallow it."""


@contextlib.contextmanager
def time_guard(seconds: float | None) -> Iterator[None]:
    """Raise :class:`RecordingTimeout` in the calling thread once the code inside has run
    ``seconds`` (None or 0: no limit). A timer thread raises it with
    ``PyThreadState_SetAsyncExc`` (delivered between two bytecodes, as a signal handler's
    exception is), so it works in any thread and leaves SIGALRM to whoever else uses it (the
    sweep's point timeout). A long call into C returns first."""
    if not seconds:
        yield
        return
    tid = threading.get_ident()
    lock = threading.Lock()
    state = {"done": False, "fired": False}

    def fire() -> None:
        with lock:
            if not state["done"]:
                state["fired"] = True
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid),
                                                           ctypes.py_object(RecordingTimeout))

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        with lock:
            state["done"] = True
            timer.cancel()
            if state["fired"]:  # fired but maybe not delivered yet: withdraw it
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid), None)
