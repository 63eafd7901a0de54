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
from .verify import verify

__version__ = "0.1.0"

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
    "ShapeError",
    "Space",
    "SystolicError",
    "VerifyError",
    "WorkloadError",
    "__version__",
    "decode",
    "encode",
    "get_arch",
    "get_format",
    "matmul",
    "round_to",
    "verify",
]
