"""``systolic.matmul``: numpy semantics on the modelled engine.

``matmul(a, b)`` takes a [M, K] and b [K, N] (read as float32, or integers for the integer
formats), rounds them to ``dtype``, lowers the product to a Program, runs it on the
functional simulator and returns a :class:`MatmulResult` with the fp32 result ``out``, the
``program`` and, computed on first use, the timing ``report``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .arch import Arch, get_arch
from .compiler import Lowered, MatmulSpec, lower
from .dtypes import get_format
from .errors import ArchError, FormatError, ShapeError, SystolicError
from .isa import PerfMode, Program
from .sim.functional import FunctionalSimulator
from .verify import UNENCODED_PERF_MODES

if TYPE_CHECKING:
    from .report import Report

__all__ = ["MatmulResult", "check_spec", "make_spec", "matmul"]


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
    mode = PerfMode.parse(perf_mode)
    if mode is not PerfMode.NONE:
        if fmt.kind == "mx":
            raise ArchError("the MX path has no perf mode (seed 000); use perf_mode none")
        if not arch.supports_perf_mode(mode.spelling):
            raise ArchError(f"perf mode {mode.spelling} is not supported on {arch.name} "
                            f"(gen{arch.generation}); DoubleRow needs gen3 or later")
        if mode in UNENCODED_PERF_MODES:
            raise ArchError(f"{mode.spelling} passes the validator but no encoding is known "
                            f"for it (seed 000 GOTCHA); the compiler emits none or double_row")
        if mode.k_fold == 2 and not dtype.startswith("fp8"):
            raise FormatError(f"{mode.spelling} packs two fp8 elements per PE; {dtype} is "
                              f"not fp8")
    zp_a, zp_b = zero_points
    if (zp_a or zp_b) and not fmt.is_int:
        raise FormatError("zero points belong to the integer formats (int8, uint8, int16)")
    if fmt.is_int:
        info = np.iinfo(fmt.storage)
        for zp in (zp_a, zp_b):
            if not info.min <= zp <= info.max:
                raise FormatError(f"zero point {zp} lies outside {dtype}'s range")
    return MatmulSpec(int(m), int(k), int(n), dtype, mode, int(zp_a), int(zp_b))


def check_spec(spec: MatmulSpec, arch: Arch) -> None:
    make_spec(spec.m, spec.k, spec.n, spec.dtype, arch, spec.perf_mode,
              (spec.zp_a, spec.zp_b))


def _operand(x: Any, name: str) -> np.ndarray:
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
            from .report import build_report

            self._report = build_report(self.program, self.arch, self.spec)
        return self._report

    def __repr__(self) -> str:
        s = self.spec
        counts = ", ".join(f"{k} {v}" for k, v in self.program.counts().items())
        return (f"<MatmulResult {s.m}x{s.k}x{s.n} {s.dtype} on {self.arch.name}"
                f"{'' if s.perf_mode is PerfMode.NONE else ' ' + s.perf_mode.spelling}: "
                f"out {self.out.shape} {self.out.dtype}; {counts}>")

    def _repr_html_(self) -> str:
        from .report import result_html

        return result_html(self)


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
    spec = make_spec(a_.shape[0], a_.shape[1], b_.shape[1], dtype, arch_, perf_mode,
                     zero_points)
    if get_format(dtype).kind == "mx":
        from .mx_matmul import run_mx

        return run_mx(a_, b_, spec, arch_, numerics, mx_rule, progress)
    lowered = lower(spec, arch_)
    sim = FunctionalSimulator(arch_, order=numerics,  # type: ignore[arg-type]
                              dram_bytes=lowered.layout.dram_bytes)
    lay = lowered.layout
    sim.write_dram(lay.a_offset, a_, dtype)
    sim.write_dram(lay.b_offset, b_, dtype)
    sim.run(lowered.program, check=False, progress=progress)
    out = sim.read_dram(lay.out_offset, (spec.m, spec.n), lowered.plan.acc_dtype).copy()
    return MatmulResult(out, lowered.program, arch_, spec, lowered)
