"""Executors of a Program: functional (values), systolic (register level), timing (cycles).

All three are :class:`Executor` s: ``Executor(arch, ...).run(program) -> Run``."""

from ._base import Executor, MachineState, Run
from .functional import FunctionalSimulator, register, systolic_sum, wrap48
from .systolic import SystolicRun, SystolicSimulator
from .timed import TimingExecutor

__all__ = ["Executor", "FunctionalSimulator", "MachineState", "Run", "SystolicRun",
           "SystolicSimulator", "TimingExecutor", "register", "systolic_sum", "wrap48"]
