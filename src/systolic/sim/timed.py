"""The timing model as an :class:`~systolic.sim._base.Executor`: a thin adapter over
:func:`systolic.sim.timing.schedule`, whose result it carries unchanged in ``Run.schedule``
(cycles, starts and ends copied to the common fields). It knows no values: ``memory`` is
None."""

from __future__ import annotations

from ..arch import Arch, get_arch
from ..isa import Program
from ._base import Executor, Run
from .timing import schedule

__all__ = ["TimingExecutor"]


class TimingExecutor(Executor):
    """Cycles of a Program by the rules of :mod:`systolic.sim.cost` (no values)."""

    name = "timing"

    def __init__(self, arch: Arch | str = "trn2") -> None:
        self.arch = get_arch(arch)

    def run(self, program: Program, *, check: bool = True) -> Run:
        sch = schedule(program, self.arch, check=check)
        return Run(executor=self.name, instructions=len(program), cycles=sch.cycles,
                   starts=sch.starts, ends=sch.ends, schedule=sch)
