"""An SPMD launch over several NeuronCores (``kernel[nl.nc(2) * 2, 2]``, nki/spmd.py): one
Program per core, for timing.

The values come from the one Program of every instance (nki/build.py): the instances write
disjoint parts of their outputs, so where they run changes nothing. The timing does: each
core runs its own instances on its own engines, SBUF and PSUM, so :func:`core_programs`
builds each core's operations alone through the same passes (groups, lifetimes, place,
lower; the whole Program was verified already), and the launch takes as long as its longest
core (:func:`systolic.nki.timing.time_recorded`).

Shared between the cores, and how the model treats it (unsure: the docs do not say how
concurrent cores share these): device memory (HBM) is shared by the device's cores; the
whole-core timing gives each core its own share of the device's HBM bandwidth
(``Arch.hbm_bytes_per_s``, the device figure over the cores per device), so cores running
at once do not slow each other down in the model, which holds as long as the other cores of
the device are idle or stay within their own shares. The launch's fixed cost (the runtime
starting each core) is not modelled. Operations recorded outside any instance (the kernel's
code around the launch) are timed on core 0.
"""

from __future__ import annotations

from bisect import bisect_left

from ..isa import Program
from .build import groups, lifetimes, lower, place
from .record import Recorder
from .tensor import Tensor

__all__ = ["core_programs"]


def _ops_by_core(rec: Recorder) -> dict[int, list[int]]:
    """The indices of each core's operations, in program order (core 0 takes those outside
    every instance)."""
    owner = [0] * len(rec.ops)
    for first, end, core in rec.core_ops:
        owner[first:end] = [core] * (end - first)
    out: dict[int, list[int]] = {}
    for i, core in enumerate(owner):
        out.setdefault(core, []).append(i)
    return out


def core_programs(rec: Recorder, outputs: list[Tensor], buffers: int) -> tuple[Program, ...]:
    """One Program per NeuronCore the launch names, in core order (empty when it names
    none). Each is its core's operations through the build passes, on its own SBUF/PSUM."""
    if not rec.core_ops:
        return ()
    progs = []
    for _, keep in sorted(_ops_by_core(rec).items()):
        sub = Recorder(rec.arch, rec.recording, rec.max_ops)
        sub.ops = [rec.ops[i] for i in keep]
        sub.tensors, sub.inputs, sub.constants = rec.tensors, rec.inputs, rec.constants
        # a loop ends before the first of this core's operations at or after its end
        sub.loop_ends = {lid: bisect_left(keep, at) for lid, at in rec.loop_ends.items()}
        grp = groups(sub.ops)
        life = lifetimes(sub, outputs, grp.dead)
        placed = place(sub, life, grp.dead, buffers)
        progs.append(Program(lower(sub, grp, placed.addresses).instructions))
    return tuple(progs)
