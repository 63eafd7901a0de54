"""The value executors of a Program: functional (the living definition) and systolic (the
register-level array, which also observes PE cycles). Timing executors are in
:mod:`systolic.timing`; every executor is an :class:`Executor`:
``Executor(arch, ...).run(program) -> Run``."""

from ._base import Executor, MachineState, Run
from .functional import FunctionalSimulator, register, systolic_sum, wrap48
from .systolic import SystolicRun, SystolicSimulator

__all__ = ["Executor", "FunctionalSimulator", "MachineState", "Run", "SystolicRun",
           "SystolicSimulator", "register", "systolic_sum", "wrap48"]
