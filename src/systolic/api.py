"""``systolic.matmul``: numpy semantics on the modelled engine, one entry point for every format.

``matmul(a, b)`` takes a [M, K] and b [K, N] (read as float32, or integers for the integer
formats), lowers the product to a Program (:func:`systolic.compiler.lower`), places the
operands in device memory as the lowering's layout says, runs the Program on the functional
simulator and returns a :class:`MatmulResult` with the result ``out``, the ``program`` and,
computed on first use, the timing ``report``. The operands enter device memory by format:

* dense formats: rounded to ``dtype`` as they are written;
* MX formats (``mxfp8_e4m3``, ``mxfp8_e5m2``, ``mxfp4``; gen4 only): K padded to whole
  blocks of 32 with zeros (a zero adds nothing to a block's dot product and changes no other
  element's code), both operands quantized along K with the blocks the hardware sees
  (:func:`systolic.mx.layout.quantize_hw` of a.T [K, M] and of b [K, N], contiguous layout:
  the OCP blocks of 32 consecutive k) under ``mx_rule`` (``trainium``, the default, or
  ``ocp``; docs/mx_layout.md), packed four to a container as
  :mod:`systolic.compiler.codegen_mx` lays them out. ``out`` is then the fp32 product of
  the *dequantized* operands, as the engine computes it; its difference from ``a @ b`` is
  the quantization error (docs/NUMERICS.md).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .arch import Arch, get_arch
from .compiler import Lowered, MatmulSpec, lower
from .compiler.tiling import padded_k
from .dtypes import get_format
from .errors import ArchError, FormatError, ShapeError, SystolicError
from .isa import PerfMode, Program
from .isa.generation import UNENCODED_PERF_MODES

if TYPE_CHECKING:  # imported where used: a command that only times (systolic matmul) does
    # not run the simulator or quantize, nor lay out an MX product
    from .compiler.codegen_mx import MxLayout
    from .memory import Memory
    from .mx.quantize import MXTensor, ScaleRule
    from .sim.functional import FunctionalSimulator
    from .views.report import Report

__all__ = ["LOWERED_CACHE_INSTRUCTIONS", "SIMULATOR_CACHE_BYTES", "MatmulResult",
           "lowered_product", "make_spec", "matmul", "quantize_operands", "write_operands"]


def _perf_mode(value: object) -> PerfMode:
    try:
        return PerfMode.parse(value)  # type: ignore[arg-type]
    except SystolicError:
        raise
    except (ValueError, TypeError, AttributeError):
        names = ", ".join(m.spelling for m in PerfMode)
        raise ArchError(f"unknown perf mode {value!r}; choose one of {names}") from None


def _zero_points(value: object) -> tuple[int, int]:
    ok = (isinstance(value, (tuple, list)) and len(value) == 2
          and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value))
    if not ok:
        raise FormatError(f"zero_points must be two integers (zp_a, zp_b), got {value!r}")
    return int(value[0]), int(value[1])  # type: ignore[index]


def make_spec(m: int, k: int, n: int, dtype: str, arch: Arch,
              perf_mode: str | PerfMode | None = None, zero_points: tuple[int, int] = (0, 0)
              ) -> MatmulSpec:
    """Validate a product's parameters against ``arch``; one clear error per bad input."""
    for name, v in (("M", m), ("K", k), ("N", n)):
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise ShapeError(f"{name} must be a positive integer, got {v!r}")
    fmt = get_format(dtype)
    if fmt.kind in ("scale",) or fmt.name == "int48" or fmt.name == "fp4_e2m1":
        raise FormatError(f"{dtype} is not a matmul operand format; use one of "
                          f"{', '.join(arch.formats + arch.mx_formats)}")
    if fmt.kind == "mx" and not arch.mx_formats:
        raise ArchError(f"{dtype} needs the MX path of gen4 (trn3); {arch.name} is "
                        f"gen{arch.generation}")
    if not arch.supports_format(dtype):
        raise ArchError(f"{dtype} is not supported on {arch.name}; use one of "
                        f"{', '.join(arch.formats + arch.mx_formats)}")
    mode = _perf_mode(perf_mode)
    if mode is not PerfMode.NONE:
        if fmt.kind == "mx":
            raise ArchError("the MX path has no perf mode (seed 000); use perf_mode none")
        if not arch.supports_perf_mode(mode.spelling):
            raise ArchError(f"perf mode {mode.spelling} is not supported on {arch.name} "
                            f"(gen{arch.generation}); DoubleRow needs gen3 or later")
        if mode in UNENCODED_PERF_MODES:
            raise ArchError(f"{mode.spelling} passes the validator but no encoding is known "
                            f"for it (seed 000 GOTCHA); the compiler emits none or double_row")
        if mode.k_fold == 2 and get_format(dtype).family != "fp8":
            raise FormatError(f"{mode.spelling} packs two fp8 elements per PE; {dtype} is "
                              f"not fp8")
    zp_a, zp_b = _zero_points(zero_points)
    if (zp_a or zp_b) and not fmt.is_int:
        raise FormatError("zero points belong to the integer formats (int8, uint8, int16)")
    if fmt.is_int:
        info = np.iinfo(fmt.storage)
        for zp in (zp_a, zp_b):
            if not info.min <= zp <= info.max:
                raise FormatError(f"zero point {zp} lies outside {dtype}'s range")
    return MatmulSpec(int(m), int(k), int(n), dtype, mode, int(zp_a), int(zp_b))


def _operand(x: Any, name: str) -> np.ndarray:
    if np.ma.isMaskedArray(x):
        raise FormatError(f"{name} is a masked array and the engine has no mask: pass "
                          f"{name}.filled(0) (masked entries as zeros) or {name}.data")
    try:
        arr = np.asarray(x)
    except Exception as exc:
        raise ShapeError(f"{name} is not an array: {exc}") from None
    if arr.ndim != 2:
        raise ShapeError(f"{name} must be 2-D, got shape {arr.shape}")
    if arr.dtype.kind not in "fiub" and arr.dtype.kind != "V":
        raise FormatError(f"{name} has dtype {arr.dtype}; expected numbers")
    return arr


@dataclass
class MatmulResult:
    """The outcome of :func:`matmul`: ``out`` float32 [M, N] (fp32 PSUM, integers too)."""

    out: np.ndarray
    program: Program
    arch: Arch
    spec: MatmulSpec
    lowered: Lowered
    _report: Report | None = field(default=None, repr=False)

    @property
    def report(self) -> Report:
        """The timing model's cycles, utilization and loss breakdown for this program."""
        if self._report is None:
            from .views.report import build_report

            self._report = build_report(self.program, self.arch, self.spec)
        return self._report

    def __repr__(self) -> str:
        s = self.spec
        counts = ", ".join(f"{k} {v}" for k, v in self.program.counts().items())
        return (f"<MatmulResult {s.m}x{s.k}x{s.n} {s.dtype} on {self.arch.name}"
                f"{'' if s.perf_mode is PerfMode.NONE else ' ' + s.perf_mode.spelling}: "
                f"out {self.out.shape} {self.out.dtype}; {counts}>")

    def _repr_html_(self) -> str:
        from .views.notebook import result_html

        return result_html(self)


def _rule(mx_rule: object) -> ScaleRule:
    if mx_rule not in ("ocp", "trainium"):
        raise FormatError(f"unknown MX scale rule {mx_rule!r}; use 'trainium' or 'ocp'")
    return mx_rule  # type: ignore[return-value]


def quantize_operands(a: np.ndarray, b: np.ndarray, fmt: str, mx_rule: str = "trainium"
                      ) -> tuple[MXTensor, MXTensor]:
    """MX-quantize a [M, K] and b [K, N] along K, K zero-padded to a multiple of 32.

    Returns (a.T quantized [Kp, M], b quantized [Kp, N]), each from :func:`quantize_hw`.
    """
    a32 = np.asarray(a, dtype=np.float32)
    b32 = np.asarray(b, dtype=np.float32)
    k = a32.shape[1]
    kp = padded_k(k)
    at = np.zeros((kp, a32.shape[0]), np.float32)
    at[:k] = a32.T
    bp = np.zeros((kp, b32.shape[1]), np.float32)
    bp[:k] = b32
    rule = _rule(mx_rule)
    from .mx.layout import quantize_hw

    return quantize_hw(at, fmt, rule=rule), quantize_hw(bp, fmt, rule=rule)


def _put(dram: np.ndarray, offset: int, values: np.ndarray) -> None:
    raw = np.ascontiguousarray(values).reshape(-1).view(np.uint8)
    dram[offset:offset + raw.size] = raw


def write_operands(dram: np.ndarray, layout: MxLayout, qa: MXTensor, qb: MXTensor) -> None:
    """Place quantized operands in device memory as :mod:`systolic.compiler.codegen_mx` lays
    them out: a as [M, Kp/4] containers and [M, Kp/32] scales, b as [Kp/4, N] and
    [Kp/32, N]. Containers are little-endian (element 0 in the low bits; FACTS)."""
    from .mx.layout import pack_x4

    kp, n = qb.elements.shape
    word = "<u2" if qa.fmt == "mxfp4" else "<u4"  # x4 container: 2 bytes fp4, 4 bytes fp8
    _put(dram, layout.a_offset, pack_x4(qa.elements.T, qa.fmt).astype(word))
    _put(dram, layout.a_scale_offset, qa.scales.T)
    # b [Kp, N]: container (r, n) holds k = 4r..4r+3 -> [Kp/4, N, 4] then pack the last axis
    b4 = qb.elements.reshape(kp // 4, 4, n).transpose(0, 2, 1)
    _put(dram, layout.b_offset, pack_x4(b4, qb.fmt).astype(word))
    _put(dram, layout.b_scale_offset, qb.scales)


# Lowered products kept for the next call of the same product on the same Arch (a Program
# is immutable; a model, a test suite or a notebook calls matmul with the same shapes again
# and again): lowering was 22 ms of a 2048^3 bf16 call, 0.2x numpy's product
# (docs/PERFORMANCE.md). At most this many instructions in all, the oldest dropped first, so
# a huge product does not stay in memory after its result is gone.
LOWERED_CACHE_INSTRUCTIONS = 60_000
_lowered: OrderedDict[tuple[MatmulSpec, Arch], Lowered] = OrderedDict()
_lowered_lock = threading.Lock()  # guards this cache and the simulators' below


def lowered_product(spec: MatmulSpec, arch: Arch) -> Lowered:
    """``lower(spec, arch)``, not verified (the compiler's own output verifies for every spec
    :func:`make_spec` accepts: tests/test_compiler.py::test_lower_output_verifies), kept per
    process for the next call (:data:`LOWERED_CACHE_INSTRUCTIONS`)."""
    key = (spec, arch)
    with _lowered_lock:
        got = _lowered.get(key)
        if got is not None:
            _lowered.move_to_end(key)
            return got
    got = lower(spec, arch, check=False)
    if len(got.program) <= LOWERED_CACHE_INSTRUCTIONS:
        with _lowered_lock:
            _lowered[key] = got
            total = sum(len(v.program) for v in _lowered.values())
            while total > LOWERED_CACHE_INSTRUCTIONS:
                total -= len(_lowered.popitem(last=False)[1].program)
    return got


# Simulators kept between calls by (arch, order, device-memory bytes), their memories zeroed
# and weight tiles dropped after each call: a fresh one's SBUF and device memory (60 MiB for
# a 2048^3 bf16 product) page-fault on first touch and its views of the Program's patterns
# are built again, 30-50 ms of a 2048^3 call (docs/PERFORMANCE.md); zeroing is a memset. At
# most this many bytes kept, the oldest dropped first.
SIMULATOR_CACHE_BYTES = 256 << 20
_sims: dict[tuple[Arch, str, int], FunctionalSimulator] = {}
# the thread zeroing each kept simulator's memories, by the same key: the memset (1.4 ms at
# 2048^3, 3.6 ms at 4096^3; numpy's fill releases the GIL) runs after the call returns,
# and the next call that takes the simulator waits for it
_zeroing: dict[tuple[Arch, str, int], threading.Thread] = {}


def _take_simulator(arch: Arch, order: str, dram_bytes: int) -> FunctionalSimulator:
    with _lowered_lock:
        sim = _sims.pop((arch, order, dram_bytes), None)
        zeroing = _zeroing.pop((arch, order, dram_bytes), None)
    if zeroing is not None:
        zeroing.join()
    if sim is None:
        from .sim.functional import FunctionalSimulator

        sim = FunctionalSimulator(arch, order=order,  # type: ignore[arg-type]
                                  dram_bytes=dram_bytes)
    return sim


def _nbytes(sim: FunctionalSimulator) -> int:
    m = sim.memory
    return m.sbuf.nbytes + m.psum.nbytes + m.dram.nbytes


def _keep_simulator(sim: FunctionalSimulator) -> None:
    """Keep ``sim`` for the next call, reset to a fresh one's state: no latched tile, and its
    memories zeroed on a thread of its own (:data:`_zeroing`), which the next call that
    takes it waits for."""
    if _nbytes(sim) > SIMULATOR_CACHE_BYTES:
        return
    m = sim.memory
    sim.state.tiles.clear()
    zeroing = threading.Thread(target=_zero, args=(m,), name="systolic-zero", daemon=True)
    zeroing.start()
    key = (sim.arch, sim.order, m.dram.size)
    with _lowered_lock:
        _sims[key] = sim
        _zeroing[key] = zeroing
        total = sum(_nbytes(v) for v in _sims.values())
        while total > SIMULATOR_CACHE_BYTES:
            old = next(iter(_sims))
            total -= _nbytes(_sims.pop(old))
            _zeroing.pop(old, None)  # a dropped simulator's thread finishes on its own


def _zero(memory: Memory) -> None:
    for buf in (memory.sbuf, memory.psum, memory.dram):
        buf.fill(0)


# elements of b from which it is written on a second thread while a is written (a thread
# costs ~0.1 ms to start; two 2048^2 bf16 operands take 4.4 ms one after the other)
_PARALLEL_WRITE = 1 << 20


def _write_dense(sim: FunctionalSimulator, a_offset: int, a: np.ndarray, b_offset: int,
                 b: np.ndarray, dtype: str) -> None:
    """Both operands into device memory; a large b on a second thread meanwhile (the cast
    releases the GIL: two 2048^2 bf16 operands 4.4 -> 2.4 ms). They are disjoint bytes. An
    error is raised as one after the other raises it: a's, else b's."""
    if b.size < _PARALLEL_WRITE:
        sim.write_dram(a_offset, a, dtype)
        sim.write_dram(b_offset, b, dtype)
        return
    failed: list[BaseException] = []

    def write_b() -> None:
        try:
            sim.write_dram(b_offset, b, dtype)
        except BaseException as exc:  # re-raised on the calling thread
            failed.append(exc)

    other = threading.Thread(target=write_b, name="systolic-operand", daemon=True)
    other.start()
    try:
        sim.write_dram(a_offset, a, dtype)
    finally:
        other.join()
    if failed:
        raise failed[0]


def matmul(a: Any, b: Any, *, dtype: str = "bf16", arch: str | Arch = "trn2",
           perf_mode: str | PerfMode | None = None, numerics: str = "fast",
           zero_points: tuple[int, int] = (0, 0), mx_rule: str = "trainium",
           progress: Callable[[int], None] | None = None) -> MatmulResult:
    """``a @ b`` on the modelled engine.

    a: [M, K], b: [K, N], any positive sizes. ``dtype`` names the operand format (see
    ``systolic.FORMATS``); ``perf_mode`` is ``none`` or ``double_row`` (fp8, gen3+);
    ``numerics`` is the accumulation order, ``fast`` or ``systolic``; ``zero_points``
    (zp_a, zp_b) are subtracted on the integer path; ``mx_rule`` picks the MX scale rule.
    Raises a :class:`SystolicError` subclass with one sentence for any bad input.
    """
    arch_ = get_arch(arch)
    a_, b_ = _operand(a, "a"), _operand(b, "b")
    if a_.shape[1] != b_.shape[0]:
        raise ShapeError(f"a is {a_.shape[0]}x{a_.shape[1]} and b is {b_.shape[0]}x"
                         f"{b_.shape[1]}: a's columns must equal b's rows")
    if numerics not in ("fast", "systolic"):
        raise SystolicError(f"numerics must be 'fast' or 'systolic', not {numerics!r}")
    if progress is not None and not callable(progress):
        raise SystolicError(f"progress must be a callable taking the instructions done, or "
                            f"None, not {progress!r}")
    rule = _rule(mx_rule)
    spec = make_spec(a_.shape[0], a_.shape[1], b_.shape[1], dtype, arch_, perf_mode,
                     zero_points)
    lowered = lowered_product(spec, arch_)
    lay = lowered.layout
    sim = _take_simulator(arch_, numerics, lay.dram_bytes)
    from .compiler.codegen_mx import MxLayout  # see TYPE_CHECKING above (issue 20)

    if isinstance(lay, MxLayout):
        qa, qb = quantize_operands(a_, b_, spec.dtype, rule)
        write_operands(sim.memory.dram, lay, qa, qb)
    else:
        _write_dense(sim, lay.a_offset, a_, lay.b_offset, b_, dtype)
    # only device memory is read after the run, and the rest is zeroed for the next call
    sim.run(lowered.program, check=False, progress=progress, sbuf=False)
    out = sim.read_dram(lay.out_offset, (spec.m, spec.n), lowered.plan.acc_dtype).copy()
    _keep_simulator(sim)  # only after a run that finished: a failed one is dropped
    return MatmulResult(out, lowered.program, arch_, spec, lowered)
