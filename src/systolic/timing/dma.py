"""DMA transfer costs and queue assignment (FACTS "The whole NeuronCore"; docs/timing.md
"DMA").

One DMA instruction (``DmaCopy``, the compiler's ``DmaLoad``, the store half of a
``ReadOut``) moves ``bytes`` between device memory (HBM) and SBUF (or SBUF to SBUF). The
model:

* **Queues.** The transfer is split by partitions over ``q = min(dma_queues,
  ceil(P / dma_partitions_per_queue))`` queues (the v2 guide's 128-partition load as 16
  transfers of 8 partitions; fewer partitions use fewer queues). ``DmaCopy.queue`` names
  the first; the others follow it modulo ``dma_queues``. A ``DmaLoad`` or ReadOut store has
  no queue field: queue j serves partitions ``8j .. 8j + 7`` (assumed, after the v2 guide's
  split), so such a transfer starts on the queue of its first SBUF/PSUM partition. The NKI
  front end gives each ``DmaCopy`` the same first queue (:func:`first_queue`) when it
  builds the Program, as the Neuron compiler assigns queues to ``nisa.dma_copy`` (NKI has
  no queue argument); the scheduler honours whatever ``DmaCopy.queue`` says. The
  pieces run as one gang: they start together when all their queues are free, so each
  piece takes the largest piece's time.
* **Time on a queue.** Every contiguous run (descriptor) costs its bytes plus
  ``dma_descriptor_bytes`` at ``dma_queue_bytes_per_ns``; a transposing transfer (device
  memory contiguous along partitions) runs at ``dma_transpose_efficiency`` of that.
* **Fixed cost.** ``dma_fixed_ns`` passes between the moment the transfer may start (its
  inputs are ready) and its first byte; the queue serves other transfers meanwhile.
* **HBM.** Every queue of the core shares ``hbm_bytes_per_s``: timing/core.py serves the HBM
  bytes of the transfers in program order at that rate, so no interval ever moves more.

A contiguous run is the longest byte range the pattern touches in order: the innermost
dims merge while each dim's stride equals the run so far; in device memory the partition
axis (``partition_step``) merges too, in SBUF/PSUM it never does (each partition is its own
memory).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from ..arch import Arch
from ..isa import AccessPattern, Space

__all__ = ["DmaCost", "contiguous_run", "dma_cost", "first_queue", "queues_for"]


@dataclass(frozen=True, slots=True)
class DmaCost:
    """The cost of one transfer: ``queues`` pieces of ``queue_ns`` each (their longest),
    ``bytes`` in all, ``hbm_bytes`` of it to or from device memory, ``descriptors`` runs."""

    bytes: int
    hbm_bytes: int
    descriptors: int
    queues: int
    queue_ns: float
    transposed: bool


def contiguous_run(ap: AccessPattern) -> tuple[int, bool]:
    """(bytes of the longest in-order contiguous run, whether the partition axis is the
    innermost contiguous one: a transposing device-memory pattern)."""
    isz = ap.itemsize
    axes = [(step * isz, num) for step, num in ap.dims if num > 1]
    part_axis = None
    if ap.space is Space.DRAM and ap.partitions > 1:
        part_axis = (ap.partition_step, ap.partitions)
        axes.append(part_axis)
    run, first_merged = isz, None
    merged = True
    while merged:
        merged = False
        for ax in axes:
            if ax[0] == run:
                run *= ax[1]
                if first_merged is None:
                    first_merged = ax
                axes.remove(ax)
                merged = True
                break
    return run, part_axis is not None and first_merged is part_axis


def dma_cost(src: AccessPattern, dst: AccessPattern, arch: Arch) -> DmaCost:
    """The cost of moving ``src`` to ``dst`` (same shape) by the module's rules."""
    nbytes = src.partitions * src.free_elems * src.itemsize
    run_s, tr_s = contiguous_run(src)
    run_d, tr_d = contiguous_run(dst)
    run = max(1, min(run_s, run_d, nbytes))
    descriptors = ceil(nbytes / run)
    parts = max(src.partitions, dst.partitions)
    queues = max(1, min(arch.dma_queues, ceil(parts / arch.dma_partitions_per_queue)))
    share = ceil(parts / queues) / parts  # the largest piece's share of the partitions
    transposed = tr_s or tr_d
    rate = arch.dma_queue_bytes_per_ns * (arch.dma_transpose_efficiency if transposed else 1)
    queue_ns = share * (nbytes + descriptors * arch.dma_descriptor_bytes) / rate
    hbm = nbytes if Space.DRAM in (src.space, dst.space) else 0
    return DmaCost(nbytes, hbm, descriptors, queues, queue_ns, transposed)


def queues_for(first: int, count: int, total: int) -> tuple[int, ...]:
    """The queues of a transfer of ``count`` pieces whose first piece is on ``first``."""
    return tuple((first + j) % total for j in range(count))


def first_queue(src: AccessPattern, dst: AccessPattern, arch: Arch) -> int:
    """The first queue of a transfer, spread the way the compiler spreads them (module
    docstring): the queue serving the band of partitions its SBUF/PSUM side starts in (the
    destination's for SBUF to SBUF); an HBM-to-HBM copy starts on queue 0."""
    side = dst if dst.space is not Space.DRAM else src
    if side.space is Space.DRAM:
        return 0
    return (side.partition // arch.dma_partitions_per_queue) % arch.dma_queues
