"""DMA transfer costs, the engines a transfer uses and its queue (docs/timing.md "DMA";
aws-neuron-sdk ``nki/get-started/about/nki-dma-overview.rst``, ``nki-dma-bandwidth-guide.rst``,
``nki-dge.rst``, trainium2_arch.rst "DMA Transpose").

One DMA instruction (``DmaCopy``, the compiler's ``DmaLoad``, the store half of a
``ReadOut``) moves ``bytes`` between device memory (HBM) and SBUF (or SBUF to SBUF, HBM to
HBM). The model:

* **Engines.** A NeuronCore has ``dma_engines`` (16) DMA engines; "each DMA engine is
  typically responsible for moving data for eight SBUF partitions", so partitions
  ``8e .. 8e + 7`` of the SBUF side go to engine ``e`` and a transfer uses the engines of the
  bands its partitions cover ("a DMA transfer of 4 partitions ... a single DMA engine
  active"). An HBM-to-HBM transfer spreads its rows the same way from engine 0. The pieces
  run together; the transfer holds its engines for its largest piece.
* **Queues.** "There are 16 DMA queues per DMA engine ... A given DMA transfer can be
  submitted to a single queue ID across all 16x DMA engines ... DMA transfers within a queue
  on the same DMA engine are executed in order. DMA transfers from different DMA queues
  are scheduled in a round robin fashion." The queue ID is ``DmaCopy.queue``; "the queue ID
  is typically tied to the trigger engine", and the model's stated rule (unsure: the docs
  give no mapping) is :func:`queue_for`: loads into SBUF on queue 0, stores out of SBUF on
  queue 1, SBUF-to-SBUF on queue 2, HBM-to-HBM on queue 3. The scheduler (timing/core.py)
  keeps FIFO order per (engine, queue) and lets another queue's transfer use an engine a
  waiting one leaves idle.
* **Time on an engine.** Bytes over ``dma_engine_bytes_per_ns`` times the efficiency the
  overview's throughput figure gives for the transfer's descriptor size (the contiguous
  bytes it moves at a time, at most one partition's bytes on the SBUF side;
  :func:`curve_fraction`); a transposing pattern (device memory contiguous along
  partitions) at ``dma_transpose_efficiency`` of that.
* **Fixed cost.** ``dma_fixed_ns`` passes between the moment the transfer may start (its
  inputs are ready) and its first byte; the engines serve other transfers meanwhile.
* **HBM.** Every engine of the core shares ``hbm_bytes_per_s``: the scheduler reserves the
  HBM bytes of each transfer on one shared server, so no interval ever moves more.
* **Descriptors.** Static patterns use host-generated descriptors ("dge none: zero on-device
  overhead", nki-dge.rst), which is what every instruction of this ISA but DmaIndirect is;
  the Arch keeps the hardware and software DGE costs for instructions that will ask for
  them.
* **Indirect DMA** (``DmaIndirect``, a gather or scatter by a tile of indices): timed as
  a DMA of the same bytes, K rows between the table and K SBUF partitions, whose rows are
  not contiguous with one another (the indices put them anywhere): no run crosses a row,
  so it takes at least one descriptor per row (:func:`indirect_rows`). The software DGE's
  descriptor generation on GpSimd is not charged (unsure: ``dge_sw_cycles`` has no
  published source).

A contiguous run is the longest byte range the pattern touches in order: the innermost
dims merge while each dim's stride equals the run so far; in device memory the partition
axis (``partition_step``) merges too, in SBUF/PSUM it never does (each partition is its own
memory).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, replace
from functools import lru_cache
from math import ceil, log2

import numpy as np

from ..arch import Arch
from ..isa import AccessPattern, Space

__all__ = ["DmaCost", "contiguous_run", "curve_fraction", "dma_cost", "engines_for",
           "indirect_rows", "queue_for"]


@dataclass(frozen=True, slots=True)
class DmaCost:
    """The cost of one transfer: the ``engines`` it holds, ``engine_ns`` on each (its
    largest piece), ``bytes`` in all, ``hbm_bytes`` of it to or from device memory,
    ``descriptors`` contiguous runs of ``run`` bytes at ``efficiency`` of the plateau."""

    bytes: int
    hbm_bytes: int
    descriptors: int
    run: int
    efficiency: float
    engines: tuple[int, ...]
    engine_ns: float
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


def curve_fraction(arch: Arch, run: int) -> float:
    """The fraction of an engine's plateau bandwidth a transfer of ``run``-byte descriptors
    reaches: the overview's figure at its points (``Arch.dma_curve``), linear in log2(bytes)
    between them, the plateau above the last, and a constant time per descriptor below the
    first (the fraction proportional to the bytes)."""
    pts = arch.dma_curve
    if run >= pts[-1][0]:
        return pts[-1][1]
    if run <= pts[0][0]:
        return pts[0][1] * run / pts[0][0]
    i = bisect_left([b for b, _ in pts], run)
    (b0, f0), (b1, f1) = pts[i - 1], pts[i]
    return f0 + (f1 - f0) * (log2(run) - log2(b0)) / (log2(b1) - log2(b0))


def engines_for(partition: int, partitions: int, arch: Arch) -> tuple[int, ...]:
    """The DMA engines serving partitions ``partition .. partition + partitions - 1``
    (eight per engine; wraps past the last engine)."""
    per = arch.dma_partitions_per_engine
    first, last = partition // per, (partition + max(partitions, 1) - 1) // per
    count = min(arch.dma_engines, last - first + 1)
    return tuple((first + j) % arch.dma_engines for j in range(count))


def _largest_piece(p0: int, parts: int, arch: Arch) -> int:
    """Partitions of the fullest engine: bands of eight from ``p0``, the first and last
    possibly partial, dealt round the engines. Past ``dma_engines`` bands (an HBM-to-HBM
    transfer of more than 128 rows) an engine takes a second band, and the partial last
    band may land on the engine holding the partial first one: 130 rows give engine 0
    bands 0 and 16, 8 + 2 rows, not two full bands."""
    per, n_eng = arch.dma_partitions_per_engine, arch.dma_engines
    nb = (p0 + parts - 1) // per - p0 // per + 1
    if nb == 1:
        return parts
    first, last = per - p0 % per, (p0 + parts - 1) % per + 1
    # engine j (counted from the first band's) holds bands j, j + n_eng, ...
    rounds, rem = divmod(nb, n_eng)
    held = np.full(min(nb, n_eng), rounds * per)
    held[:rem] += per
    held[0] -= per - first
    held[(nb - 1) % n_eng] -= per - last
    return int(held.max())


def dma_cost(src: AccessPattern, dst: AccessPattern, arch: Arch) -> DmaCost:
    """The cost of moving ``src`` to ``dst`` (same shape) by the module's rules."""
    nbytes = src.partitions * src.free_elems * src.itemsize
    run_s, tr_s = contiguous_run(src)
    run_d, tr_d = contiguous_run(dst)
    run = max(1, min(run_s, run_d, nbytes))
    descriptors = ceil(nbytes / run)
    side = dst if dst.space is not Space.DRAM else src
    parts = max(src.partitions, dst.partitions)
    p0 = side.partition if side.space is not Space.DRAM else 0
    engines = engines_for(p0, parts, arch)
    share = _largest_piece(p0, parts, arch) / parts
    transposed = tr_s or tr_d
    eff = curve_fraction(arch, run) * (arch.dma_transpose_efficiency if transposed else 1.0)
    engine_ns = share * nbytes / (arch.dma_engine_bytes_per_ns * eff)
    hbm = nbytes if Space.DRAM in (src.space, dst.space) else 0
    return DmaCost(nbytes, hbm, descriptors, run, eff, engines, engine_ns, transposed)


def queue_for(src: AccessPattern, dst: AccessPattern) -> int:
    """The queue ID of a transfer by the model's stated rule (module docstring): loads into
    SBUF 0, stores out of SBUF 1, SBUF to SBUF 2, HBM to HBM 3."""
    s, d = src.space is Space.DRAM, dst.space is Space.DRAM
    if s and not d:
        return 0
    if d and not s:
        return 1
    return 2 if not s else 3


@lru_cache(maxsize=1 << 12)
def indirect_rows(table: AccessPattern, rows: int) -> AccessPattern:
    """The device-memory side of an indirect DMA as the cost rules see it: ``rows`` rows of
    ``table``'s row pattern that never merge into one run (row pitch 0: the partition axis
    of :func:`contiguous_run` never continues a run), so each row is its own descriptor(s).
    The transfer is then :func:`dma_cost` of this and the SBUF side."""
    return replace(table, partition=0, partitions=rows, partition_step=0)
