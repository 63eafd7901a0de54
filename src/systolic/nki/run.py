"""Running a kernel: record it for given arguments, build the Program, and (for values)
execute it on the functional simulator.

* :func:`record` calls the kernel over tensor handles and returns a
  :class:`~systolic.nki.build.Recorded` (no values computed).
* :func:`values` places the input arrays in device memory (every other byte starts as
  0xFF, NaN in float formats), runs the Program bit-accurately, and reads the outputs.
* :func:`record_kernel` loads ``FILE.py:FUNCTION`` and records it: the entry point for
  the CLI and for sweeps.
* :func:`unwritten` says when a kernel's loops leave part of its output unwritten.

Timing a recorded kernel is nki/timing.py's (``time_recorded``, ``timing_fields``).
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import sysconfig
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..arch import Arch, get_arch
from ..collector import paused
from ..errors import IndirectIndexError, KernelError, SystolicError
from ..isa import AccessPattern, Program, Space
from . import record as _record
from .alloc import DEFAULT_BUFFERS
from .boolops import with_masks
from .build import Recorded, build
from .cores import core_programs
from .record import (
    DEFAULT_MAX_OPS,
    DEFAULT_TIME_LIMIT_S,
    Recorder,
    RecordingTimeout,
    time_guard,
)
from .results import RECORDING
from .tensor import Tensor
from .types import BUFFERS, TensorSpec, to_dtype

__all__ = ["Kernel", "load_kernel", "parse_arg", "record", "record_kernel",
           "set_default_arch", "unwritten", "values"]

_DEFAULT = _record.DEFAULT_ARCH
set_default_arch = _record.set_default_arch


class Kernel:
    """``@nki.jit``: the kernel function plus its options; calling it runs it for values."""

    def __init__(self, func: Callable[..., Any], **options: Any) -> None:
        self.func = with_masks(func)  # `and` joining masks, as NKI reads it (nki/boolops.py)
        self.options = options
        self.__name__ = getattr(func, "__name__", "kernel")
        self.__doc__ = func.__doc__
        # no ``__wrapped__``: pytest would follow it to the function and collect a kernel
        # named test_* (the vendor's test_nki_nl_broadcast.py) as a test needing fixtures

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _record._STACK:  # a kernel calling a kernel: inline it
            return self.func(*args, **kwargs)
        return values(self, args, kwargs)

    @property
    def arch(self) -> str | None:
        return self.options.get("platform_target")


def kernel_function(kernel: Any) -> Callable[..., Any]:
    """The Python function behind a kernel (an ``nki.jit`` object or a plain function)."""
    return _unwrap(kernel)[0]


def _unwrap(kernel: Any) -> tuple[Callable[..., Any], str | None]:
    if isinstance(kernel, Kernel):
        return kernel.func, kernel.arch
    inner = getattr(kernel, "kernel", None)
    if isinstance(inner, Kernel):
        return inner.func, inner.arch
    return with_masks(kernel), None


def _arch(kernel_arch: str | None, arch: str | Arch | None) -> Arch:
    if arch is not None:
        return get_arch(arch)
    return get_arch(kernel_arch or _DEFAULT["arch"])


# Where the model and the libraries it calls live: a frame in none of these is the kernel's
# (or a module the kernel imports), so an error names the kernel line that reached it, not
# enum.py or systolic/isa/fields.py.
_SYSTOLIC_DIR = os.path.dirname(_record._PKG_DIR)
_LIB_DIRS = tuple({os.path.realpath(p) for p in (sysconfig.get_paths()["stdlib"],
                                                  sysconfig.get_paths()["purelib"],
                                                  sysconfig.get_paths()["platlib"])})


def _library(filename: str) -> bool:
    if filename.startswith(_SYSTOLIC_DIR) or filename.startswith("<frozen"):
        return True
    real = os.path.realpath(filename)
    return real.startswith(_LIB_DIRS)


def _kernel_frames(tb: Any) -> tuple[tuple[str, int] | None, bool]:
    """The innermost kernel line of a traceback, and whether the frame it called is the
    model's (an NKI call that failed inside the model) rather than the kernel's own code."""
    frames = traceback.extract_tb(tb)
    for outside in (_library, lambda name: name.startswith(_SYSTOLIC_DIR)):
        # a kernel file installed among the libraries: the last frame outside the model
        for i in range(len(frames) - 1, -1, -1):
            f = frames[i]
            if not outside(f.filename):
                inside = i + 1 < len(frames) and frames[i + 1].filename.startswith(
                    _SYSTOLIC_DIR)
                return (f.filename, f.lineno or 0), inside
    return None, False


def _kernel_line(tb: Any) -> tuple[str, int]:
    return _kernel_frames(tb)[0] or ("<kernel>", 0)


def _budget(max_ops: Any, time_limit_s: Any) -> None:
    if isinstance(max_ops, bool) or not isinstance(max_ops, int) or max_ops < 1:
        raise SystolicError(f"max_ops must be a whole number of at least 1, not {max_ops!r}")
    if time_limit_s is not None and (isinstance(time_limit_s, bool) or not isinstance(
            time_limit_s, int | float) or not 0 < time_limit_s < float("inf")):
        raise SystolicError(f"time_limit_s must be a positive number of seconds (or None for "
                            f"no limit), not {time_limit_s!r}")


def record(kernel: Any, args: Sequence[Any], kwargs: dict[str, Any] | None = None, *,
           arch: str | Arch | None = None, check: bool = True,
           buffers: int = DEFAULT_BUFFERS, max_ops: int = DEFAULT_MAX_OPS,
           time_limit_s: float | None = DEFAULT_TIME_LIMIT_S) -> Recorded:
    """Record ``kernel(*args, **kwargs)``: arrays and tensor specs become HBM tensors.
    ``check=False`` skips verifying the built Program (``Recorded.checked`` says which);
    ``buffers``: physical tiles per tile made in an affine_range body (nki/alloc.py).
    ``max_ops``: the recording budget, the most NKI operations (and tensors) the kernel may
    record; ``time_limit_s``: the most seconds its Python may run (None: no limit). Past
    either, a :class:`KernelError` names the kernel line reached (nki/record.py)."""
    _budget(max_ops, time_limit_s)
    func, karch = _unwrap(kernel)
    rec = Recorder(_arch(karch, arch), RECORDING, max_ops)
    targs: list[Any] = []
    for i, a in enumerate(args):
        if isinstance(a, np.ndarray | TensorSpec):
            t = Tensor(tuple(int(s) for s in a.shape), to_dtype(a.dtype), BUFFERS["hbm"],
                       ("<argument>", i), name=f"arg{i}", is_input=True)
            rec.inputs.append(t)
            targs.append(t)
        else:
            targs.append(a)
    tkw: dict[str, Any] = {}
    for name, a in (kwargs or {}).items():  # arrays passed by name: inputs after the rest
        if isinstance(a, np.ndarray | TensorSpec):
            t = Tensor(tuple(int(s) for s in a.shape), to_dtype(a.dtype), BUFFERS["hbm"],
                       ("<argument>", len(rec.inputs)), name=name, is_input=True)
            rec.inputs.append(t)
            a = t
        tkw[name] = a
    # ~10 objects per NKI op, none cyclic: no collection until the Program is built (one
    # between the kernel and the build traversed every object the kernel made, 0.4-1.4 s of
    # 3.5 at 100,000 ops)
    with paused():
        result = _run_kernel(rec, func, targs, tkw, time_limit_s)
        outs = result if isinstance(result, tuple | list) else (result,)
        # a returned SBUF/PSUM tile (the vendor's range_select test returns one) is read
        # after the kernel ends, as NKI's simulator does; it lives to the end (lifetimes)
        outputs = [o for o in outs if isinstance(o, Tensor)]
        built = build(rec, result, outputs, check, buffers)
        built.cores = core_programs(rec, outputs, buffers)  # nl.nc launches (nki/cores.py)
        return built


def _run_kernel(rec: Recorder, func: Any, targs: list[Any], tkw: dict[str, Any],
                time_limit_s: float | None) -> Any:
    """``func(*targs, **tkw)`` recorded into ``rec``: what it returns; a failure inside is
    one :class:`KernelError` at the kernel line reached."""
    _record.push(rec)
    try:
        with time_guard(time_limit_s):
            return func(*targs, **tkw)
    except RecordingTimeout as exc:
        path, line = _kernel_line(exc.__traceback__)
        raise KernelError(path, line, (
            f"the kernel's Python ran past its time limit of {time_limit_s:g} s while it "
            f"was recorded (time_limit_s) and was stopped at this line; does a loop never "
            f"end, or run far more iterations than it needs?")
            ) from None
    except AssertionError as exc:
        path, line = _kernel_line(exc.__traceback__)
        raise KernelError(path, line, f"the kernel's assertion failed: {exc}") from None
    except KernelError:
        raise
    except SystolicError as exc:  # a check without a line (a dtype name): give it the line
        where = _kernel_frames(exc.__traceback__)[0]
        if where is None:
            raise
        raise KernelError(*where, str(exc)) from None
    except (MemoryError, RecursionError):
        raise
    except Exception as exc:
        where, inside = _kernel_frames(exc.__traceback__)
        if where is None:  # the call itself failed (arguments): the caller's mistake
            raise
        what = (f"an NKI call failed inside the model with {type(exc).__name__}: {exc} "
                f"(an argument it does not check yet; please report it)" if inside else
                f"the kernel raised {type(exc).__name__}: {exc}")
        raise KernelError(*where, what) from None
    finally:
        _record.pop()


def values(kernel: Any, args: Sequence[Any], kwargs: dict[str, Any] | None = None, *,
           arch: str | Arch | None = None, order: str = "fast") -> Any:
    """Run ``kernel`` on numpy arrays; returns its output array(s) as NKI would. Called
    with torch tensors or JAX arrays, it returns that framework's arrays
    (nki/frameworks.py)."""
    from .frameworks import unwrap

    args, kwargs, back = unwrap(args, kwargs or {})
    rec = record(kernel, args, kwargs, arch=arch)
    arrays = [a for a in (*args, *kwargs.values()) if isinstance(a, np.ndarray)]
    try:
        out = execute(rec, arrays, order=order)
    except IndirectIndexError as exc:  # a kernel called as NKI calls it: NKI's error
        raise _index_error(rec, exc) from exc
    return out if back is None else back(out)


def execute(rec: Recorded, arrays: Sequence[np.ndarray], *, order: str = "fast",
            fill: int = 0xFF) -> Any:
    """Run a recorded kernel on ``arrays``; every byte the inputs do not set starts as
    ``fill`` (0xFF: NaN in every float format, so a missing initialisation shows; a second
    run with another fill tells a kernel that reads memory nothing wrote, tests/
    test_nki_fuzz.py)."""
    from ..sim.functional import FunctionalSimulator

    if not isinstance(fill, int) or not 0 <= fill <= 0xFF:
        raise SystolicError(f"fill is a byte value 0..255, not {fill!r}")

    if len(arrays) != len(rec.inputs):
        raise SystolicError(f"the kernel takes {len(rec.inputs)} arrays, got {len(arrays)}")
    sim = FunctionalSimulator(rec.arch, order=order, dram_bytes=rec.dram_bytes)  # type: ignore
    mem = sim.memory
    for buf in (mem.sbuf, mem.psum, mem.dram):
        buf.fill(fill)  # 0xFF: unwritten memory reads as NaN (as in NKI's simulator)
    from ..dtypes import FORMATS

    for t, a in zip(rec.inputs, arrays, strict=True):
        at = rec.addresses[t.id]
        if t.dtype.fmt in FORMATS:
            sim.write_dram(at, np.asarray(a), t.dtype.fmt)
        else:  # raw words (uint32 MX containers): bytes as they are
            raw = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
            mem.dram[at:at + raw.size] = raw
    for t, v in rec.constants:  # nl.shared_constant: the kernel's own values
        sim.write_dram(rec.addresses[t.id], v, t.dtype.fmt)
    sim.run(rec.program, check=not rec.checked)  # verified once, when built or here
    outs = {t.id: _read_output(sim, rec.addresses[t.id], t) for t in rec.outputs}
    for t, a in zip(rec.inputs, arrays, strict=True):
        # an argument the kernel wrote (the older API's ``simulate_kernel(k, a, out)``):
        # its numpy array gets the values, in place, as NKI's simulator does
        if t.id in rec.written_inputs and isinstance(a, np.ndarray) and a.flags.writeable:
            a[...] = _read_output(sim, rec.addresses[t.id], t).reshape(a.shape)
    res = rec.result
    if isinstance(res, tuple | list):
        return type(res)(outs[r.id] if isinstance(r, Tensor) else r for r in res)
    return outs[res.id] if isinstance(res, Tensor) else res


def _index_error(rec: Recorded, exc: IndirectIndexError) -> IndexError:
    """An indirect DMA's index out of range, as NKI's simulator reports it to a kernel
    called from Python (:func:`values`: ``@nki.jit``, ``simulate_kernel``): a plain
    IndexError naming the flat element of the tensor the row starts at and the tensor's
    elements, numpy's words (the vendor's own tests, test_nki_isa_dma_copy.py, compare the
    type and the text: 'index 66048 is out of bounds for axis 0 with size 65536'). The
    simulator's one-line IndirectIndexError (which partition, which rows) is its cause, and
    is what :func:`execute` (the CLI) raises."""
    for t in (*rec.inputs, *rec.outputs):
        at = rec.addresses.get(t.id)
        size = t.free_elems * t.dtype.itemsize
        if at is not None and not t.buffer.on_chip and at <= exc.offset < at + size:
            flat = (exc.offset + exc.value * exc.row_step - at) // exc.itemsize
            return IndexError(f"index {flat} is out of bounds for axis 0 with size "
                              f"{t.free_elems}")
    return IndexError(f"index {exc.value} is out of bounds for axis 0 with size {exc.rows}")


def _read_output(sim: Any, at: int, t: Tensor) -> np.ndarray:
    from ..dtypes import FORMATS

    if t.buffer.on_chip:  # a returned tile: its partitions, each its free elements
        space = Space.SBUF if t.buffer.name == "sbuf" else Space.PSUM
        ap = AccessPattern(space, 0, t.partitions, at, ((1, t.free_elems),), t.dtype.fmt)
        return np.asarray(sim.memory.read(ap)).reshape(
            _chip_order(t)).transpose(_chip_axes(t)).copy()

    f = FORMATS.get(t.dtype.fmt)
    if f is not None and f.kind != "mx":
        return np.asarray(sim.read_dram(at, t.shape, t.dtype.fmt)).copy()
    # MX x4 containers and raw words come back as unsigned words of their size
    n = int(np.prod(t.shape)) * t.dtype.itemsize
    raw = sim.memory.dram[at:at + n].copy()
    return raw.view(f"<u{t.dtype.itemsize}").reshape(t.shape)


def _chip_order(t: Tensor) -> tuple[int, ...]:
    """An on-chip tensor's dims as memory holds them: the partition dim first."""
    pd = t.pdim or 0
    return (t.shape[pd], *(d for i, d in enumerate(t.shape) if i != pd))


def _chip_axes(t: Tensor) -> tuple[int, ...]:
    """The transpose putting :func:`_chip_order` back in the tensor's own dim order."""
    pd = t.pdim or 0
    order = [pd, *(i for i in range(len(t.shape)) if i != pd)]
    return tuple(order.index(i) for i in range(len(t.shape)))


_ARG = re.compile(r"^\s*([A-Za-z0-9_]+)\s*\[\s*([0-9,\s]+)\]\s*$")


def parse_arg(text: str) -> TensorSpec:
    """``DTYPE[D0,D1,...]`` (NKI or project dtype names), e.g. ``bfloat16[128,512]``."""
    m = _ARG.match(text)
    if not m:
        raise SystolicError(f"argument {text!r} is not DTYPE[D0,D1,...], e.g. bf16[128,512]")
    shape = tuple(int(s) for s in m.group(2).split(",") if s.strip())
    if not shape or min(shape) < 1:
        raise SystolicError(f"argument {text!r} needs positive dimensions")
    return TensorSpec(shape, to_dtype(m.group(1)))


def load_kernel(path: str, function: str) -> Any:
    """Import ``path`` (with the nki hook installed) and return its ``function``."""
    from .hook import install

    install(_DEFAULT["arch"])  # type: ignore[arg-type]
    if not os.path.isfile(path):
        raise SystolicError(f"{path}: no such kernel file")
    name = "_systolic_kernel_" + re.sub(r"\W", "_", os.path.abspath(path))
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystolicError(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    try:
        with open(path, "rb") as f:
            # compiled under the path as the user wrote it (the loader would make it
            # absolute), so every FILE:LINE error names the file the way it was given
            code = compile(f.read(), path, "exec")
    except (OSError, SyntaxError, ValueError) as exc:
        line = f":{exc.lineno}" if isinstance(exc, SyntaxError) and exc.lineno else ""
        raise SystolicError(f"{path}{line}: cannot load the kernel file: "
                            f"{getattr(exc, 'msg', None) or exc}") from None
    folder = os.path.dirname(os.path.abspath(path))
    sys.path.insert(0, folder)  # a kernel file may import its neighbours
    sys.modules[name] = module  # registered while it runs (dataclasses look it up)
    try:
        exec(code, module.__dict__)
    except ModuleNotFoundError as exc:
        lineno = _kernel_line(exc.__traceback__)[1]
        missing = exc.name or str(exc)
        top = missing.split(".")[0]
        what = ("a part of the NKI API this model does not provide yet (docs/nki.md, "
                "Supported)" if top in ("nki", "neuronxcc") else
                "a module that is not installed")
        raise SystolicError(f"{path}:{lineno}: the kernel imports {missing}, {what}") from None
    except SystolicError:
        raise
    except Exception as exc:
        lineno = _kernel_line(exc.__traceback__)[1]
        raise SystolicError(f"{path}:{lineno}: loading the kernel file raised "
                            f"{type(exc).__name__}: {exc}") from None
    finally:
        sys.path.remove(folder)
    fn = getattr(module, function, None)
    if fn is None:
        raise SystolicError(f"{path} has no function {function!r}")
    return fn


def record_kernel(path: str, function: str, args: Sequence[Any],
                  params: dict[str, Any] | None = None, arch: str | Arch = "trn2",
                  buffers: int = DEFAULT_BUFFERS, max_ops: int = DEFAULT_MAX_OPS,
                  time_limit_s: float | None = DEFAULT_TIME_LIMIT_S) -> Recorded:
    """Load ``path:function`` and record it for ``args`` (TensorSpec, ``(shape, dtype)``,
    ``"DTYPE[D0,...]"`` or arrays) and keyword ``params`` on ``arch``; no values.
    ``max_ops`` and ``time_limit_s`` bound the recording (:func:`record`)."""
    fn = load_kernel(path, function)
    specs: list[Any] = []
    for a in args:
        if isinstance(a, str):
            specs.append(parse_arg(a))
        elif isinstance(a, tuple) and len(a) == 2 and isinstance(a[0], tuple | list):
            specs.append(TensorSpec(tuple(int(s) for s in a[0]), to_dtype(a[1])))
        else:
            specs.append(a)
    return record(fn, specs, params, arch=arch, buffers=buffers, max_ops=max_ops,
                  time_limit_s=time_limit_s)


def unwritten_outputs(program: Program, outputs: list[tuple[str, int, int]]
                      ) -> list[tuple[str, int, int]]:
    """``(name, bytes written, bytes)`` of each output ``(name, address, bytes)`` of device
    memory that the Program's writes there do not fill: a kernel whose loop bounds skip
    part of its result (a block size that does not divide the shape: ``N // BN`` is 0) runs
    fast because it does less, and must not win a sweep. Writes are counted in bytes, so an
    output written twice over one half and never over the other is not caught; that takes
    a byte map and no kernel of ours writes a result twice."""
    if not outputs:
        return []
    starts = np.array([a for _, a, _ in outputs], dtype=np.int64)
    order = np.argsort(starts)
    written = np.zeros(len(outputs), dtype=np.int64)
    for ins in program:
        dst = getattr(ins, "dst", None)
        if isinstance(dst, AccessPattern) and dst.space is Space.DRAM:
            i = int(np.searchsorted(starts[order], dst.offset, side="right")) - 1
            if i >= 0:
                j = int(order[i])
                _, at, size = outputs[j]
                if dst.offset < at + size:
                    written[j] += dst.partitions * dst.free_elems * dst.itemsize
    return [(name, int(w), size) for (name, _, size), w in zip(outputs, written, strict=True)
            if w < size]


def unwritten(rec: Recorded) -> str | None:
    """Why a recorded kernel's output is not all written (one line), or None: a kernel
    whose loop bounds skip part of its result is fast because it does less, and its values
    read as NaN; ``systolic kernel`` and the sweep both refuse it."""
    outs = [(f"{t.name or f'#{i + 1}'} {list(t.shape)} {t.dtype.nki}",
             rec.addresses[t.id], t.free_elems * t.dtype.itemsize)
            for i, t in enumerate(rec.outputs) if not t.buffer.on_chip]
    short = unwritten_outputs(rec.program, outs)
    if not short:
        return None
    name, wrote, size = short[0]
    return (f"writes only {wrote:,} of the {size:,} bytes of its output {name}, so it would "
            f"be timed on less work and the rest would read as NaN; does a block or tile "
            f"size not divide the shape?")
