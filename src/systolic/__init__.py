"""systolic: a model of a weight-stationary systolic matmul engine (Trainium PE class).

The names below are imported on first use (PEP 562), so ``import systolic`` and
``systolic --help`` cost little more than Python itself (issue 20): ``from systolic import
matmul`` imports the compiler, the executors and the timing model only then.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

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
from .version import __version__

if TYPE_CHECKING:  # what the lazy names are, for type checkers and editors
    from .api import MatmulResult, matmul
    from .arch import ARCHS, Arch, get_arch
    from .dtypes import FORMATS, Format, decode, encode, get_format, round_to
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
    from .views.report import Report, build_report
    from .views.trace import write_trace

# name -> the module (relative to this package) it lives in
_LAZY = {
    **dict.fromkeys(("MatmulResult", "matmul"), ".api"),
    **dict.fromkeys(("ARCHS", "Arch", "get_arch"), ".arch"),
    **dict.fromkeys(("FORMATS", "Format", "decode", "encode", "get_format", "round_to"),
                    ".dtypes"),
    **dict.fromkeys(("AccessPattern", "CalcFlags", "DmaLoad", "LdWeightMx", "LoadStationary",
                     "MatMul", "MatmultMx", "PerfMode", "Program", "ReadOut", "Space"), ".isa"),
    "FunctionalSimulator": ".sim.functional",
    **dict.fromkeys(("SystolicRun", "SystolicSimulator", "step_matmul"), ".sim.systolic"),
    **dict.fromkeys(("Schedule", "schedule"), ".timing.tensor_engine"),
    "verify": ".verify",
    **dict.fromkeys(("Report", "build_report"), ".views.report"),
    "write_trace": ".views.trace",
}


def __getattr__(name: str) -> Any:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value  # bound here, so later lookups skip this hook
    return value


class _Package(types.ModuleType):
    """``systolic.verify`` is both a subpackage and the function it exports; the function
    wins, as it did when this file imported it eagerly. Importing the subpackage (the
    compiler does) makes the import system bind it on this package; that one binding is
    dropped, so the name still resolves through :func:`__getattr__` to the function."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "verify" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


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
