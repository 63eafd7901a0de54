"""systolic: a model of a weight-stationary systolic matmul engine (Trainium PE class)."""

from __future__ import annotations

from .api import MatmulResult, matmul
from .arch import ARCHS, Arch, get_arch
from .dtypes import FORMATS, Format, decode, encode, get_format, round_to
from .errors import (
    ArchError,
    BundleError,
    FormatError,
    ParseError,
    ShapeError,
    SystolicError,
    VerifyError,
    WorkloadError,
)
from .isa import (
    AccessPattern,
    CalcFlags,
    DmaLoad,
    LdWeightMx,
    LoadStationary,
    MatMul,
    MatmultMx,
    PerfMode,
    Program,
    ReadOut,
    Space,
)
from .sim.functional import FunctionalSimulator
from .sim.systolic import SystolicRun, SystolicSimulator, step_matmul
from .timing.tensor_engine import Schedule, schedule
from .verify import verify
from .version import __version__
from .views.report import Report, build_report
from .views.trace import write_trace

__all__ = [
    "ARCHS",
    "FORMATS",
    "AccessPattern",
    "Arch",
    "ArchError",
    "BundleError",
    "CalcFlags",
    "DmaLoad",
    "Format",
    "FormatError",
    "FunctionalSimulator",
    "LdWeightMx",
    "LoadStationary",
    "MatMul",
    "MatmulResult",
    "MatmultMx",
    "ParseError",
    "PerfMode",
    "Program",
    "ReadOut",
    "Report",
    "Schedule",
    "ShapeError",
    "Space",
    "SystolicError",
    "SystolicRun",
    "SystolicSimulator",
    "VerifyError",
    "WorkloadError",
    "__version__",
    "build_report",
    "decode",
    "encode",
    "get_arch",
    "get_format",
    "matmul",
    "round_to",
    "schedule",
    "step_matmul",
    "verify",
    "write_trace",
]
