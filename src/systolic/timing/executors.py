"""The two timing views as :class:`~systolic.executor.Executor` s, thin adapters that carry
their result unchanged: :class:`TimingExecutor` (the Tensor Engine,
:func:`systolic.timing.tensor_engine.schedule`, in ``Run.schedule``; cycles, starts and
ends copied to the common fields) and :class:`CoreExecutor` (the whole NeuronCore,
:func:`systolic.timing.core.time_program`, in ``Run.core``). Neither knows values:
``memory`` is None."""

from __future__ import annotations

from ..arch import Arch, get_arch
from ..executor import Executor, Run
from ..isa import Program
from .core import time_program
from .tensor_engine import schedule

__all__ = ["CoreExecutor", "TimingExecutor"]


class TimingExecutor(Executor):
    """Cycles of a Program by the rules of :mod:`systolic.timing.pe` (no values)."""

    name = "timing"

    def __init__(self, arch: Arch | str = "trn2") -> None:
        self.arch = get_arch(arch)

    def run(self, program: Program, *, check: bool = True) -> Run:
        sch = schedule(program, self.arch, check=check)
        return Run(executor=self.name, instructions=len(program), cycles=sch.cycles,
                   starts=sch.starts, ends=sch.ends, schedule=sch)


class CoreExecutor(Executor):
    """The whole-NeuronCore latency of a Program (:func:`~systolic.timing.core.time_program`;
    no values)."""

    name = "core"

    def __init__(self, arch: Arch | str = "trn2") -> None:
        self.arch = get_arch(arch)

    def run(self, program: Program, *, check: bool = True) -> Run:
        if check:
            # imported here, as timing.tensor_engine does: importing systolic.timing (the
            # matmul command does) then does not load the verifier (start-up, issue 20)
            from ..verify import verify

            verify(program, self.arch)
        core = time_program(program, self.arch)
        return Run(executor=self.name, instructions=len(program), core=core)
