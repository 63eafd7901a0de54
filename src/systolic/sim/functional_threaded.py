"""The functional simulator's fast path: the same per-instruction products, on threads.

:func:`run_threaded` gives the bits of :func:`systolic.sim.functional.run_reference` (tests
check it bit for bit) and is faster in three ways:

* **Threads own PSUM.** Each MatMul's product and its PSUM add run on the worker that owns
  the destination's PSUM bank (one of the ``workers - 1`` pool threads, bank mod their
  number, while the calling thread dispatches; with one worker the calling thread does
  everything). A worker
  applies its updates in program order, and regions in different banks are disjoint, so
  every region sees its adds in program order: the reference's bits. BLAS is held to one
  thread (its bits depend on the thread count); the workers use the cores instead. A
  ReadOut of one bank into device memory runs on that bank's worker, after its MatMuls; a
  DmaLoad that reads, or a ReadOut that writes, device memory a pending ReadOut writes
  waits for it. Any other
  instruction (the MX pair, engine instructions, a DMA touching PSUM) waits for every
  worker and runs alone, so a handler added to the table needs no threading code. An
  exception on a worker is raised in the caller at the next wait.
* **Decoded moving tiles are kept** for the run (a resident moving tile is read by every
  M tile of a product) and dropped when a DmaLoad writes over any byte of them; the check
  looks only at the cached tiles in the 1 KiB blocks the DmaLoad touches. A tile DMA'd
  from device memory is decoded from its source pattern, once for all the loads of the
  same bytes (see :class:`_DecodeCache`).
* **Views are kept** (:meth:`MachineState.view`), so no per-instruction bounds check.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import cast

import numpy as np
from threadpoolctl import threadpool_limits

from ..dtypes import decode
from ..isa import (
    AccessPattern,
    CalcFlags,
    DmaLoad,
    Instruction,
    LoadStationary,
    MatMul,
    Program,
    ReadOut,
    Space,
)
from ._base import MachineState, Order, apply_psum, dram_span
from .products import moving_values, product, stationary_operand, tile_rect

__all__ = ["default_workers", "run_threaded"]

_BLOCK = 1024  # bytes of a partition per decode-cache bucket
# decoded device-memory tiles kept at most (oldest dropped first): a 4096^3 bf16 product
# reloads 256 moving tiles of 256 KiB decoded 32 times each, 64 MiB
_DRAM_CACHE_BYTES = 256 << 20


def default_workers() -> int:
    """The calling thread plus one computing thread per core (at most 8), or the calling
    thread alone on one core. The calling thread decodes and dispatches; the pool threads
    compute (see ``owner`` in :func:`run_threaded`)."""
    cores = os.cpu_count() or 1
    return 1 if cores < 2 else min(cores, 8) + 1


def _task(view: np.ndarray, flags: CalcFlags, wt: np.ndarray, x: np.ndarray, order: Order,
          exact: bool) -> None:
    apply_psum(view, flags, product(wt, x, order, exact))


class _DecodeCache:
    """Decoded SBUF tiles of one run, indexed by the 1 KiB blocks of bytes they cover.

    A DmaLoad from device memory also records where its SBUF bytes came from, so a moving
    tile that a product DMAs again and again (one whose operand does not fit SBUF: every M
    tile reloads it) is decoded once, from the device-memory pattern, instead of once per
    load. decode is elementwise and the copy is ``dst[...] = src.reshape(dst.shape)``, so
    ``decode(src).reshape(dst.shape)`` is ``decode(dst)`` value for value; the record is
    dropped when either side's bytes may change (a DmaLoad over the SBUF bytes, a ReadOut
    into the device-memory bytes, any instruction that runs alone).
    """

    def __init__(self, state: MachineState, pending: _PendingLoads) -> None:
        self.state, self.pending = state, pending
        # SBUF pattern -> (decoded or None while only its source is known, p0, p1, lo, hi)
        self.tiles: dict[AccessPattern, tuple[np.ndarray | None, int, int, int, int]] = {}
        self.blocks: dict[int, set[AccessPattern]] = {}
        self.source: dict[AccessPattern, AccessPattern] = {}  # SBUF pattern -> DRAM pattern
        self.dram: dict[AccessPattern, np.ndarray] = {}  # DRAM pattern -> decoded, in order
        self.dram_bytes = 0
        self.hull = (0, 0)  # device-memory bytes every recorded source lies in

    def read(self, ap: AccessPattern) -> np.ndarray:
        hit = self.tiles.get(ap)
        if hit is not None and hit[0] is not None:
            return hit[0]
        src = self.source.get(ap) if hit is not None else None
        if src is not None:
            values = self.dram.get(src)
            if values is None:
                values = self._decode_dram(src)
            values = np.ascontiguousarray(values.reshape(ap.shape))
        else:
            self.pending.flush(ap)
            values = decode(self.state.view(ap), ap.dtype)
        if hit is None:
            lo, hi = ap.free_bytes_span
            hit = (values, ap.partition, ap.partition + ap.partitions, lo, hi)
            for b in range(lo // _BLOCK, (hi - 1) // _BLOCK + 1):
                self.blocks.setdefault(b, set()).add(ap)
        self.tiles[ap] = (values, *hit[1:])
        return values

    def _decode_dram(self, src: AccessPattern) -> np.ndarray:
        values = self.dram[src] = decode(self.state.view(src), src.dtype)
        self.dram_bytes += values.nbytes
        while self.dram_bytes > _DRAM_CACHE_BYTES and len(self.dram) > 1:
            oldest = next(iter(self.dram))
            self.dram_bytes -= self.dram.pop(oldest).nbytes
        return values

    def loaded(self, dst: AccessPattern, src: AccessPattern) -> None:
        """A DmaLoad copied device-memory pattern ``src`` into SBUF pattern ``dst``."""
        self.forget(dst)
        lo, hi = dram_span(src)
        if self.source:
            lo, hi = min(lo, self.hull[0]), max(hi, self.hull[1])
        self.hull = (lo, hi)
        self.source[dst] = src
        lo, hi = dst.free_bytes_span
        self.tiles[dst] = (None, dst.partition, dst.partition + dst.partitions, lo, hi)
        for b in range(lo // _BLOCK, (hi - 1) // _BLOCK + 1):
            self.blocks.setdefault(b, set()).add(dst)

    def dram_written(self, lo: int, hi: int) -> None:
        """Device-memory bytes [lo, hi) will change: forget every source that reads them."""
        if not self.source or hi <= self.hull[0] or self.hull[1] <= lo:
            return
        for dst, src in list(self.source.items()):
            a, z = dram_span(src)
            if a < hi and lo < z:
                del self.source[dst]
                self.dram.pop(src, None)
                if self.tiles[dst][0] is None:
                    self._drop(dst)

    def forget(self, dst: AccessPattern) -> None:
        """Drop every cached tile sharing a byte with ``dst`` (an SBUF pattern)."""
        if not self.tiles:
            return
        lo, hi = dst.free_bytes_span
        p0, p1 = dst.partition, dst.partition + dst.partitions
        for b in range(lo // _BLOCK, (hi - 1) // _BLOCK + 1):
            for ap in list(self.blocks.get(b, ())):
                _, q0, q1, a, z = self.tiles[ap]
                if q0 < p1 and p0 < q1 and a < hi and lo < z:
                    self._drop(ap)

    def _drop(self, ap: AccessPattern) -> None:
        _, _, _, a, z = self.tiles.pop(ap)
        self.source.pop(ap, None)
        for c in range(a // _BLOCK, (z - 1) // _BLOCK + 1):
            self.blocks[c].discard(ap)

    def clear(self) -> None:
        self.tiles.clear()
        self.blocks.clear()
        self.source.clear()
        self.dram.clear()
        self.dram_bytes = 0


class _PendingLoads:
    """DmaLoads from device memory into SBUF whose copy has not happened yet.

    A product whose moving operand does not fit SBUF reloads every moving tile for every M
    tile, and its MatMuls read the decoded source (:class:`_DecodeCache`), not the SBUF
    bytes; so the copy lands only when something reads or writes those SBUF bytes, when its
    device-memory source is about to change, or at the end of the run. A load into exactly
    the bytes of a pending one replaces it (the earlier copy would be overwritten whole);
    pending loads never overlap, so they land in any order with the same result.
    """

    def __init__(self, state: MachineState,
                 execute: Callable[[MachineState, Instruction], None]) -> None:
        self.state, self.execute = state, execute
        self.loads: dict[AccessPattern, tuple[DmaLoad, int, int, int, int]] = {}
        self.blocks: dict[int, set[AccessPattern]] = {}
        self.hull = (0, 0)  # device-memory bytes every pending source lies in

    def defer(self, dma: DmaLoad) -> None:
        dst = dma.dst
        old = self.loads.get(dst)
        if old is not None:
            self.loads[dst] = (dma, *old[1:])
        else:
            self.flush(dst)
            lo, hi = dst.free_bytes_span
            self.loads[dst] = (dma, dst.partition, dst.partition + dst.partitions, lo, hi)
            for b in range(lo // _BLOCK, (hi - 1) // _BLOCK + 1):
                self.blocks.setdefault(b, set()).add(dst)
        a, z = dram_span(dma.src)
        self.hull = (min(a, self.hull[0]), max(z, self.hull[1])) if len(self.loads) > 1 \
            else (a, z)

    def flush(self, ap: AccessPattern) -> None:
        """Land the pending loads sharing a byte with SBUF pattern ``ap``."""
        if not self.loads:
            return
        lo, hi = ap.free_bytes_span
        p0, p1 = ap.partition, ap.partition + ap.partitions
        for b in range(lo // _BLOCK, (hi - 1) // _BLOCK + 1):
            for d in list(self.blocks.get(b, ())):
                got = self.loads.get(d)
                if got is not None and got[1] < p1 and p0 < got[2] and got[3] < hi \
                        and lo < got[4]:
                    self._land(d)

    def flush_dram(self, lo: int, hi: int) -> None:
        """Land the pending loads reading device-memory bytes [lo, hi) before they change."""
        if not self.loads or hi <= self.hull[0] or self.hull[1] <= lo:
            return
        for d, got in list(self.loads.items()):
            a, z = dram_span(got[0].src)
            if a < hi and lo < z:
                self._land(d)

    def flush_all(self) -> None:
        for d in list(self.loads):
            self._land(d)

    def _land(self, d: AccessPattern) -> None:
        dma, _, _, a, z = self.loads.pop(d)
        for c in range(a // _BLOCK, (z - 1) // _BLOCK + 1):
            self.blocks[c].discard(d)
        self.execute(self.state, dma)


def _banks(ap: AccessPattern, bank_bytes: int) -> range:
    lo, hi = ap.free_bytes_span
    return range(lo // bank_bytes, (hi - 1) // bank_bytes + 1)


def run_threaded(state: MachineState, program: Program, workers: int,
                 execute: Callable[[MachineState, Instruction], None],
                 progress: Callable[[int], None] | None = None, *,
                 plain_dma: bool = False) -> None:
    """Run ``program`` on ``state`` with ``workers`` threads (see the module docstring);
    ``execute`` runs any instruction but a MatMul (the handler table's dispatch).
    ``plain_dma``: the DmaLoad handler is the plain copy, so a moving tile may be decoded
    from its source and the copy deferred (:class:`_DecodeCache`, :class:`_PendingLoads`);
    with a handler of its own, every DmaLoad runs in place and tiles decode from SBUF."""
    instrs = program.instructions
    bank_bytes = state.arch.psum_bank_bytes
    order = state.order
    pending = _PendingLoads(state, execute)
    cache = _DecodeCache(state, pending)
    pools = [ThreadPoolExecutor(max_workers=1) for _ in range(workers - 1)]
    last: list[Future[None] | None] = [None] * workers
    # ReadOuts run on their bank's worker: device-memory bytes they will write, until done
    writes: list[tuple[int, int, Future[None]]] = []
    # per PSUM destination: its view, its owner, whether it is an exact int48 region
    dsts: dict[AccessPattern, tuple[np.ndarray, int, bool]] = {}

    errors: list[BaseException] = []  # raised on a worker; re-raised here at the next wait

    def guarded(fn: Callable[..., None], *args: object) -> None:
        if errors:
            return  # the run has failed: do nothing more
        try:
            fn(*args)
        except BaseException as exc:
            errors.append(exc)

    def submit(owner: int, fn: Callable[..., None], *args: object) -> Future[None] | None:
        if owner == 0:  # worker 0 is this thread
            fn(*args)
            return None
        fut = last[owner] = pools[owner - 1].submit(guarded, fn, *args)
        return fut

    def wait(owners: range | list[int]) -> None:
        for w in owners:
            fut = last[w]
            if fut is not None:
                last[w] = None
                fut.result()
        if errors:
            raise errors[0]

    def await_dram(ap: AccessPattern) -> None:
        """Wait for the pending ReadOuts that write bytes of device memory ``ap`` touches."""
        writes[:] = [(a, z, f) for a, z, f in writes if not f.done()]
        lo, hi = dram_span(ap)
        for a, z, f in writes:
            if a < hi and lo < z:
                f.result()
        if errors:
            raise errors[0]

    every = list(range(workers))

    def owner(bank: int) -> int:
        """The worker of a PSUM bank: a pool thread (bank mod the pool), so the calling
        thread only dispatches; 10-12% faster at 2048^3 and 4096^3 on 2 cores than giving
        it banks too, as its dispatch holds the GIL. Alone, the calling thread."""
        return 1 + bank % (workers - 1) if workers > 1 else 0

    try:
        with threadpool_limits(limits=1, user_api="blas"):
            done = 0
            for i, ins in enumerate(instrs):
                kind = type(ins)
                if kind is MatMul:
                    mm = cast(MatMul, ins)
                    tile = state.tile(tile_rect(mm))
                    x = moving_values(cache.read(mm.moving), mm)
                    got = dsts.get(mm.dst)
                    if got is None:
                        view = state.view(mm.dst)
                        got = dsts[mm.dst] = (view, owner(_banks(mm.dst, bank_bytes)[0]),
                                              view.dtype == np.int64)
                    submit(got[1], _task, got[0], mm.flags, stationary_operand(tile.wt, mm), x,
                           order, got[2])
                elif kind is LoadStationary:
                    pending.flush(cast(LoadStationary, ins).src)
                    execute(state, ins)
                elif kind is DmaLoad and Space.PSUM not in (
                        (dma := cast(DmaLoad, ins)).src.space, dma.dst.space):
                    src, dst = dma.src, dma.dst
                    if src.space is Space.DRAM and writes:
                        await_dram(src)
                    if plain_dma and src.space is Space.DRAM and dst.space is Space.SBUF \
                            and src.dtype == dst.dtype and src.shape == dst.shape:
                        state.view(src), state.view(dst)  # bounds refused now, as executed
                        pending.defer(dma)
                        cache.loaded(dst, src)
                    else:
                        if src.space is Space.SBUF:
                            pending.flush(src)
                        if dst.space is Space.SBUF:
                            pending.flush(dst)
                        else:
                            pending.flush_dram(*dram_span(dst))
                        execute(state, dma)
                        if dst.space is Space.SBUF:
                            cache.forget(dst)
                        else:
                            cache.dram_written(*dram_span(dst))
                elif kind is ReadOut and len(banks := _banks(
                        (ro := cast(ReadOut, ins)).src, bank_bytes)) == 1 \
                        and ro.dst.space is Space.DRAM:
                    # after the bank's MatMuls on the same worker: program order for them;
                    # an earlier ReadOut on another worker into the same bytes lands first
                    if writes:
                        await_dram(ro.dst)
                    pending.flush_dram(*dram_span(ro.dst))
                    cache.dram_written(*dram_span(ro.dst))
                    fut = submit(owner(banks[0]), execute, state, ro)
                    if fut is not None:
                        writes.append((*dram_span(ro.dst), fut))
                else:  # anything else may read or write any memory: run it alone
                    wait(every)
                    pending.flush_all()
                    execute(state, ins)
                    cache.clear()
                if progress is not None and i + 1 - done >= 256:
                    progress(i + 1 - done)
                    done = i + 1
            wait(every)
        if progress is not None and len(instrs) > done:
            progress(len(instrs) - done)
    finally:
        for pool in pools:
            pool.shutdown(wait=True, cancel_futures=True)
        pending.flush_all()  # SBUF as program order leaves it, also after a failure
