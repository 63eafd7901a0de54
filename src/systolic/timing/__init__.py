"""Timing of a Program (docs/timing.md), in two views:

* the Tensor Engine alone (seed 003): :mod:`.pe` (the PE issue rules),
  :mod:`.tensor_engine` (``schedule`` -> ``Schedule``: cycles, utilization, loss by cause);
* the whole NeuronCore: :mod:`.core` (``time_program`` -> :class:`CoreTiming`, in
  :mod:`.result`), with the costs of :mod:`.engines` and :mod:`.dma` and the dependencies
  of :mod:`.deps`.

:mod:`.executors` puts both behind the common :class:`~systolic.executor.Executor`
interface.
"""

from __future__ import annotations

from .core import time_program
from .executors import CoreExecutor, TimingExecutor
from .result import CoreTiming
from .tensor_engine import Schedule, schedule

__all__ = ["CoreExecutor", "CoreTiming", "Schedule", "TimingExecutor", "schedule", "time_program"]
