"""One executor interface and one result type, shared by every executor of a Program.

Amaranth keeps the engines behind its simulator in ``sim/_base.py``: one small abstract
surface, many implementations. Here the executors are the functional simulator (values,
:mod:`systolic.sim.functional`), the register-level simulator (values and every PE per
cycle, :mod:`systolic.sim.systolic`), the Tensor Engine's timing (cycles,
:class:`systolic.timing.TimingExecutor`) and the whole core's
(:class:`systolic.timing.CoreExecutor`). Each is an :class:`Executor`: build it with an
Arch, call ``run(program)``, get a :class:`Run` carrying what that executor knows (memory
state, cycles, per-instruction starts and ends, the timing model's schedule, the whole
core's timing); fields an executor does not know stay ``None``.

This module imports nothing of the executors (it is the layer below them).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .arch import Arch
from .isa import Program

if TYPE_CHECKING:
    from .memory import Memory
    from .timing.result import CoreTiming
    from .timing.tensor_engine import Schedule

__all__ = ["Executor", "Run"]


@dataclass
class Run:
    """What one :meth:`Executor.run` did. Fields the executor does not know are ``None``.

    ``memory``: the machine's memories after the run (value executors). ``cycles``: the
    Tensor Engine's busy span in cycles from 0, ``starts``/``ends``: per instruction index
    (end exclusive, -1 where the model charges nothing) (timed executors). ``schedule``: the
    Tensor Engine timing's full :class:`~systolic.timing.tensor_engine.Schedule`
    (:class:`~systolic.timing.TimingExecutor`). ``core``: the whole NeuronCore's
    :class:`~systolic.timing.result.CoreTiming` (:class:`~systolic.timing.CoreExecutor`;
    its ``starts``/``ends`` are per op in ticks, so ``Run.starts``/``ends`` stay None).
    """

    executor: str = ""
    instructions: int = 0
    memory: Memory | None = None
    cycles: int | None = None
    starts: np.ndarray | None = None
    ends: np.ndarray | None = None
    schedule: Schedule | None = None
    core: CoreTiming | None = None


class Executor(abc.ABC):
    """Runs Programs on one Arch. ``run`` verifies first unless ``check=False`` (leave it on
    unless the Program was just verified, as the compiler's output is)."""

    name: str = ""
    arch: Arch

    @abc.abstractmethod
    def run(self, program: Program, *, check: bool = True) -> Run:
        """Execute ``program`` and return what this executor knows of it."""
