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
* **Latched weight tiles are kept** too, by the SBUF bytes they were latched from and their
  fp32 pass, and dropped with the decoded tiles: a product whose N does not fit PSUM at
  once latches each weight tile again for every part of N, and the second latch of the
  same bytes reuses the decoded, transposed tile (at 4096^3 on trn2, 1,024 of the 2,048
  LoadStationary instructions: ~0.3 s of decoding and transposing on the calling thread).
* **Views are kept** (:meth:`MachineState.view`), so no per-instruction bounds check.
* **The PSUM add is fused** into an accumulating MatMul's own sgemm (beta = 1,
  :mod:`systolic.sim.blas`) where that gives the two calls' bits: a layout its probes
  proved, and a product that is surely finite (the largest magnitudes of the decoded
  moving tile and of the latched weight tile, kept with them, bound it).
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from typing import cast

import numpy as np
from threadpoolctl import threadpool_limits

from ..dtypes import decode
from ..errors import SystolicError
from ..geometry import Rect
from ..isa import (
    AccessPattern,
    CalcFlags,
    DmaLoad,
    Fp32Pass,
    Instruction,
    LoadStationary,
    MatMul,
    Program,
    ReadOut,
    Space,
)
from . import blas
from ._base import Latched, MachineState, Order, apply_psum, dram_rows_overlap, dram_span
from .products import moving_values, product, split_fp32, stationary_operand, tile_rect

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


def _blasable(view: np.ndarray) -> bool:
    """Whether numpy's matmul writes a float32 product straight into ``view`` with one BLAS
    call (rows of contiguous elements at a stride BLAS accepts as its ldc), as it does into
    a fresh array: the same call, so the same bits."""
    return (view.ndim == 2 and view.dtype == np.float32 and view.strides[1] == 4
            and view.strides[0] % 4 == 0 and view.strides[0] >= 4 * view.shape[1])


def _task(view: np.ndarray, direct: bool, flags: CalcFlags, wt: np.ndarray, x: np.ndarray,
          order: Order, exact: bool, finite: bool, bufs: dict[tuple[int, int], np.ndarray]
          ) -> None:
    """One MatMul's product and PSUM update on its bank's worker. ``direct`` (the region is
    float32 and :func:`_blasable`): START writes the fp32 product into PSUM itself, and an
    accumulating product goes through the worker's own buffer ``bufs`` and adds in place,
    with no allocation; the same product (one BLAS call) and the same one rounding per add
    as :func:`~._base.apply_psum` (5-8% less time per 128x128x512 instruction here). An
    accumulating product that is surely ``finite`` is added by the same BLAS call instead
    (beta = 1, :func:`systolic.sim.blas.accumulate`: the same bits, one memory pass fewer,
    ~15 us of ~160 per 128x128x512 instruction)."""
    shape = (wt.shape[0], x.shape[1])
    if not (direct and order == "fast" and view.shape == shape
            and wt.dtype == x.dtype == np.float32):
        apply_psum(view, flags, product(wt, x, order, exact))
        return
    start = CalcFlags.START in flags
    if finite and not start and blas.accumulate(view, wt, x):  # the same bits, one call
        return
    # IEEE specials propagate as fp32 hardware's do (inf * 0 = NaN): not a warning
    with np.errstate(invalid="ignore", over="ignore"):
        if start:
            np.matmul(wt, x, out=view)
            return
        buf = bufs.get(shape)
        if buf is None:
            buf = bufs[shape] = np.empty(shape, np.float32)
        np.matmul(wt, x, out=buf)
        np.add(view, buf, out=view)


class _Worker:
    """One computing thread and its queue of calls, run in order. Lighter than a
    ThreadPoolExecutor (no Future per call: ~20 us of the GIL per MatMul at 8,192 MatMuls a
    4096^3 product); a call waited on carries an Event. An exception is kept in ``errors``
    (the run's, shared) and every later call is skipped."""

    def __init__(self, errors: list[BaseException]) -> None:
        self.errors = errors
        self.queue: queue.SimpleQueue[tuple[Callable[..., None], tuple[object, ...],
                                            threading.Event | None] | None] = \
            queue.SimpleQueue()
        self.bufs: dict[tuple[int, int], np.ndarray] = {}  # _task's product buffers
        self.busy = False  # calls queued since the last barrier
        self.thread = threading.Thread(target=self._loop, name="systolic-functional",
                                       daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        get = self.queue.get
        while (item := get()) is not None:
            fn, args, done = item
            if not self.errors:
                try:
                    fn(*args)
                except BaseException as exc:
                    self.errors.append(exc)
            if done is not None:
                done.set()

    def put(self, fn: Callable[..., None], args: tuple[object, ...],
            done: threading.Event | None = None) -> None:
        self.busy = True
        self.queue.put((fn, args, done))

    def barrier(self) -> None:
        """Wait until every call queued so far has run."""
        if self.busy:
            done = threading.Event()
            self.queue.put((_noop, (), done))
            done.wait()
            self.busy = False

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join()


def _noop() -> None:
    pass


class _Keys:
    """Each pattern object of one run, by its ``id``: an int key shared by equal patterns,
    the partitions and bytes it covers in a row, and for a device-memory pattern the bytes
    [lo, hi) it touches (:func:`~._base.dram_span`). A frozen dataclass hashes all its
    fields at every dict lookup, and the caches below look a pattern up several times an
    instruction (0.2 s of a 4096^3 product's 0.7 s of dispatch); an id lookup is one int.
    Each entry holds its pattern, so the id is not reused while the run lasts."""

    def __init__(self) -> None:
        self.by_id: dict[int, tuple[int, int, int, int, int, int, int, AccessPattern]] = {}
        self.canon: dict[AccessPattern, int] = {}

    def of(self, ap: AccessPattern) -> tuple[int, int, int, int, int, int, int, AccessPattern]:
        """(key, p0, p1, lo, hi, dram lo, dram hi, ap) of ``ap``."""
        got = self.by_id.get(id(ap))
        if got is None:
            key = self.canon.setdefault(ap, len(self.canon))
            lo, hi = ap.free_bytes_span
            da, dz = dram_span(ap) if ap.space is Space.DRAM else (lo, hi)
            got = self.by_id[id(ap)] = (key, ap.partition, ap.partition + ap.partitions, lo,
                                        hi, da, dz, ap)
        return got


class _DecodeCache:
    """Decoded SBUF tiles of one run, indexed by the 1 KiB blocks of bytes they cover.

    A DmaLoad from device memory also records where its SBUF bytes came from, so a moving
    tile that a product DMAs again and again (one whose operand does not fit SBUF: every M
    tile reloads it) is decoded once, from the device-memory pattern, instead of once per
    load. decode is elementwise and the copy is ``dst[...] = src.reshape(dst.shape)``, so
    ``decode(src).reshape(dst.shape)`` is ``decode(dst)`` value for value; the record is
    dropped when either side's bytes may change (a DmaLoad over the SBUF bytes, a ReadOut
    into the device-memory bytes, any instruction that runs alone). Patterns are keyed by
    :class:`_Keys`.
    """

    def __init__(self, state: MachineState, pending: _PendingLoads, keys: _Keys) -> None:
        self.state, self.pending, self.keys = state, pending, keys
        # SBUF key -> (decoded or None while only its source is known, p0, p1, lo, hi)
        self.tiles: dict[int, tuple[np.ndarray | None, int, int, int, int]] = {}
        self.blocks: dict[int, set[int]] = {}
        self.source: dict[int, AccessPattern] = {}  # SBUF key -> DRAM pattern
        self.dram: dict[int, np.ndarray] = {}  # DRAM key -> decoded, in order
        # the largest magnitude of each decoded tile (SBUF key) and source (DRAM key): with
        # the weight tile's, whether a product is surely finite (systolic.sim.blas)
        self.bounds: dict[int, float] = {}
        self.dram_bounds: dict[int, float] = {}
        # SBUF key -> {fp32 pass: the tile a LoadStationary of those bytes latched}
        self.weights: dict[int, dict[Fp32Pass, Latched]] = {}
        self.dram_bytes = 0
        self.hull = (0, 0)  # device-memory bytes every recorded source lies in

    def read(self, ap: AccessPattern) -> tuple[np.ndarray, float]:
        """The decoded values of SBUF pattern ``ap`` and their largest magnitude."""
        k, p0, p1, lo, hi, *_ = self.keys.of(ap)
        hit = self.tiles.get(k)
        if hit is not None and hit[0] is not None:
            return hit[0], self.bounds[k]
        src = self.source.get(k) if hit is not None else None
        if src is not None:
            dk = self.keys.of(src)[0]
            values = self.dram.get(dk)
            if values is None:
                values = self._decode_dram(src, dk)
            bound = self.dram_bounds[dk]
            values = np.ascontiguousarray(values.reshape(ap.shape))
        else:
            self.pending.flush(ap)
            values = decode(self.state.view(ap), ap.dtype)
            bound = blas.max_abs(values)
        if hit is None:
            hit = (values, p0, p1, lo, hi)
            for b in range(lo // _BLOCK, (hi - 1) // _BLOCK + 1):
                self.blocks.setdefault(b, set()).add(k)
        self.tiles[k] = (values, *hit[1:])
        self.bounds[k] = bound
        return values, bound

    def weight(self, ap: AccessPattern, fp32_pass: Fp32Pass) -> Latched | None:
        """The tile latched earlier from SBUF pattern ``ap`` in this pass, while its bytes
        are unchanged (None otherwise)."""
        got = self.weights.get(self.keys.of(ap)[0])
        return None if got is None else got.get(fp32_pass)

    def keep_weight(self, ap: AccessPattern, fp32_pass: Fp32Pass, tile: Latched) -> None:
        """Keep ``tile``, latched from SBUF pattern ``ap``, until those bytes change."""
        k, p0, p1, lo, hi, *_ = self.keys.of(ap)
        if k not in self.tiles:  # registered by its bytes, so that forget() finds it
            self.tiles[k] = (None, p0, p1, lo, hi)
            for b in range(lo // _BLOCK, (hi - 1) // _BLOCK + 1):
                self.blocks.setdefault(b, set()).add(k)
        self.weights.setdefault(k, {})[fp32_pass] = tile

    def _decode_dram(self, src: AccessPattern, dk: int) -> np.ndarray:
        values = self.dram[dk] = decode(self.state.view(src), src.dtype)
        self.dram_bounds[dk] = blas.max_abs(values)
        self.dram_bytes += values.nbytes
        while self.dram_bytes > _DRAM_CACHE_BYTES and len(self.dram) > 1:
            self._evict_dram(next(iter(self.dram)))
        return values

    def _evict_dram(self, dk: int) -> None:
        """Forget a decoded device-memory pattern, and its bytes from the cache's count."""
        values = self.dram.pop(dk, None)
        if values is not None:
            self.dram_bytes -= values.nbytes
            del self.dram_bounds[dk]

    def loaded(self, dst: AccessPattern, src: AccessPattern) -> None:
        """A DmaLoad copied device-memory pattern ``src`` into SBUF pattern ``dst``."""
        self.forget(dst)
        lo, hi = self.keys.of(src)[5:7]
        if self.source:
            lo, hi = min(lo, self.hull[0]), max(hi, self.hull[1])
        self.hull = (lo, hi)
        k, p0, p1, lo, hi, *_ = self.keys.of(dst)
        self.source[k] = src
        self.tiles[k] = (None, p0, p1, lo, hi)
        for b in range(lo // _BLOCK, (hi - 1) // _BLOCK + 1):
            self.blocks.setdefault(b, set()).add(k)

    def dram_written(self, lo: int, hi: int) -> None:
        """Device-memory bytes [lo, hi) will change: forget every source that reads them."""
        if not self.source or hi <= self.hull[0] or self.hull[1] <= lo:
            return
        for dst, src in list(self.source.items()):
            sk, *_, a, z, _ = self.keys.of(src)
            if a < hi and lo < z:
                del self.source[dst]
                self._evict_dram(sk)  # its bytes left the count too (they stayed before)
                if self.tiles[dst][0] is None:
                    self._drop(dst)

    def forget(self, dst: AccessPattern) -> None:
        """Drop every cached tile sharing a byte with ``dst`` (an SBUF pattern)."""
        if not self.tiles:
            return
        _, p0, p1, lo, hi, *_ = self.keys.of(dst)
        for b in range(lo // _BLOCK, (hi - 1) // _BLOCK + 1):
            for k in list(self.blocks.get(b, ())):
                _, q0, q1, a, z = self.tiles[k]
                if q0 < p1 and p0 < q1 and a < hi and lo < z:
                    self._drop(k)

    def _drop(self, k: int) -> None:
        _, _, _, a, z = self.tiles.pop(k)
        self.source.pop(k, None)
        self.weights.pop(k, None)
        self.bounds.pop(k, None)
        for c in range(a // _BLOCK, (z - 1) // _BLOCK + 1):
            self.blocks[c].discard(k)

    def clear(self) -> None:
        self.tiles.clear()
        self.blocks.clear()
        self.source.clear()
        self.weights.clear()
        self.dram.clear()
        self.bounds.clear()
        self.dram_bounds.clear()
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
                 execute: Callable[[MachineState, Instruction], None], keys: _Keys) -> None:
        self.state, self.execute, self.keys = state, execute, keys
        # SBUF key -> (the load, p0, p1, lo, hi of its destination)
        self.loads: dict[int, tuple[DmaLoad, int, int, int, int]] = {}
        self.blocks: dict[int, set[int]] = {}
        self.hull = (0, 0)  # device-memory bytes every pending source lies in

    def defer(self, dma: DmaLoad) -> None:
        k, p0, p1, lo, hi, *_ = self.keys.of(dma.dst)
        old = self.loads.get(k)
        if old is not None:
            self.loads[k] = (dma, *old[1:])
        else:
            self.flush(dma.dst)
            self.loads[k] = (dma, p0, p1, lo, hi)
            for b in range(lo // _BLOCK, (hi - 1) // _BLOCK + 1):
                self.blocks.setdefault(b, set()).add(k)
        a, z = self.keys.of(dma.src)[5:7]
        self.hull = (min(a, self.hull[0]), max(z, self.hull[1])) if len(self.loads) > 1 \
            else (a, z)

    def flush(self, ap: AccessPattern) -> None:
        """Land the pending loads sharing a byte with SBUF pattern ``ap``."""
        if not self.loads:
            return
        _, p0, p1, lo, hi, *_ = self.keys.of(ap)
        for b in range(lo // _BLOCK, (hi - 1) // _BLOCK + 1):
            for d in list(self.blocks.get(b, ())):
                got = self.loads.get(d)
                if got is not None and got[1] < p1 and p0 < got[2] and got[3] < hi \
                        and lo < got[4]:
                    self._land(d)

    def land_transposed(self, ap: AccessPattern) -> np.ndarray | None:
        """Land the pending load into exactly SBUF pattern ``ap`` (a 2-D one) and return the
        values it copied, transposed and C-contiguous in their storage format: [free,
        partitions], what a LoadStationary latches as its ``wt``. None (nothing landed)
        when no pending load has exactly these bytes. One read of the source serves the
        copy and the decode: the a.T tiles of a product land and latch in 38 us instead of
        113 (copy, then decode the SBUF rows, then transpose the decoded tile)."""
        k = self.keys.of(ap)[0]
        got = self.loads.get(k)
        if got is None or len(ap.dims) != 1:
            return None
        dma, _, _, a, z = self.loads.pop(k)
        for c in range(a // _BLOCK, (z - 1) // _BLOCK + 1):
            self.blocks[c].discard(k)
        dst = self.state.view(ap)
        raw = np.ascontiguousarray(self.state.view(dma.src).reshape(dst.shape).T)
        dst[...] = raw.T  # the plain copy's bytes (dma_load), read from cache
        return raw

    def flush_dram(self, lo: int, hi: int) -> None:
        """Land the pending loads reading device-memory bytes [lo, hi) before they change."""
        if not self.loads or hi <= self.hull[0] or self.hull[1] <= lo:
            return
        for d, got in list(self.loads.items()):
            a, z = self.keys.of(got[0].src)[5:7]
            if a < hi and lo < z:
                self._land(d)

    def flush_all(self) -> None:
        for d in list(self.loads):
            self._land(d)

    def _land(self, d: int) -> None:
        dma, _, _, a, z = self.loads.pop(d)
        for c in range(a // _BLOCK, (z - 1) // _BLOCK + 1):
            self.blocks[c].discard(d)
        self.execute(self.state, dma)


def _latch_transposed(state: MachineState, ls: LoadStationary, raw: np.ndarray) -> Latched:
    """What the LoadStationary handler does (systolic.sim.functional.load_stationary), from
    the tile's stored values already transposed ([M, K], ``raw``): decode is elementwise and
    so is the fp32 two-pass split, so this latches the same values, and their C-contiguous
    ``wt`` needs no second transpose."""
    wt = decode(raw, ls.src.dtype)
    if ls.fp32_pass is not Fp32Pass.FULL:
        hi, lo = split_fp32(wt)
        wt = hi if ls.fp32_pass is Fp32Pass.HI else lo
    return state.latch(_ls_rect(ls), wt.T)


def _ls_rect(ls: LoadStationary) -> Rect:
    """The PEs a LoadStationary latches (systolic.sim.functional.load_stationary)."""
    src = ls.src
    return Rect(src.partition, src.partitions, ls.column, src.dims[-1][1])


def _banks(ap: AccessPattern, bank_bytes: int) -> range:
    lo, hi = ap.free_bytes_span
    return range(lo // bank_bytes, (hi - 1) // bank_bytes + 1)


def run_threaded(state: MachineState, program: Program, workers: int,
                 execute: Callable[[MachineState, Instruction], None],
                 progress: Callable[[int], None] | None = None, *,
                 plain_dma: bool = False, plain_stationary: bool = False) -> None:
    """Run ``program`` on ``state`` with ``workers`` threads (see the module docstring);
    ``execute`` runs any instruction but a MatMul (the handler table's dispatch).
    ``plain_dma``: the DmaLoad handler is the plain copy, so a moving tile may be decoded
    from its source and the copy deferred (:class:`_DecodeCache`, :class:`_PendingLoads`);
    with a handler of its own, every DmaLoad runs in place and tiles decode from SBUF.
    ``plain_stationary``: the LoadStationary handler is the plain latch too, so one whose
    bytes a deferred DmaLoad brings decodes them from that load
    (:meth:`_PendingLoads.land_transposed`)."""
    instrs = program.instructions
    bank_bytes = state.arch.psum_bank_bytes
    order = state.order
    keys = _Keys()
    pending = _PendingLoads(state, execute, keys)
    cache = _DecodeCache(state, pending, keys)
    errors: list[BaseException] = []  # raised on a worker; re-raised here at the next wait
    pool = [_Worker(errors) for _ in range(workers - 1)]
    own_bufs: dict[tuple[int, int], np.ndarray] = {}
    # ReadOuts run on their bank's worker: device-memory bytes they will write, until done
    writes: list[tuple[int, int, AccessPattern, threading.Event]] = []
    # per PSUM destination: its view, whether _task may write it directly, its owner, and
    # whether it is an exact int48 region
    dsts: dict[int, tuple[np.ndarray, bool, int, bool]] = {}

    def raise_failure() -> None:
        if errors:
            raise errors[0]

    def wait(owners: range | list[int]) -> None:
        for w in owners:
            if w:
                pool[w - 1].barrier()
        raise_failure()

    hull = [0, 0]  # device-memory bytes every entry of ``writes`` lies in

    def await_dram(ap: AccessPattern) -> None:
        """Wait for the pending ReadOuts that write bytes of device memory ``ap`` touches."""
        lo, hi = keys.of(ap)[5:7]
        if hi <= hull[0] or hull[1] <= lo:  # most loads: a and b lie below C
            return
        for a, z, wap, f in writes:
            # the spans first (cheap), then row by row: the tiles of one row band of C
            # share a span but no byte, and their ReadOuts run on different workers
            if a < hi and lo < z and not f.is_set() and dram_rows_overlap(ap, wap):
                f.wait()
        if len(writes) > 64:  # drop the finished ones now and then, not at every call
            writes[:] = [w for w in writes if not w[3].is_set()]
            hull[:] = [min((w[0] for w in writes), default=0),
                       max((w[1] for w in writes), default=0)]
        raise_failure()

    every = list(range(workers))

    def owner(bank: int) -> int:
        """The worker of a PSUM bank: a pool thread (bank mod the pool), so the calling
        thread only dispatches; 10-12% faster at 2048^3 and 4096^3 on 2 cores than giving
        it banks too, as its dispatch holds the GIL. Alone, the calling thread."""
        return 1 + bank % (workers - 1) if workers > 1 else 0

    finished = False
    try:
        with threadpool_limits(limits=1, user_api="blas"):
            done = 0
            for i, ins in enumerate(instrs):
                kind = type(ins)
                if kind is MatMul:
                    mm = cast(MatMul, ins)
                    tile = state.tile(tile_rect(mm))
                    decoded, x_bound = cache.read(mm.moving)
                    x = moving_values(decoded, mm)
                    if (w_bound := tile.bound) is None:
                        w_bound = tile.bound = blas.max_abs(tile.wt)
                    got = dsts.get(dk := keys.of(mm.dst)[0])
                    if got is None:
                        view = state.view(mm.dst)
                        got = dsts[dk] = (view, _blasable(view),
                                              owner(_banks(mm.dst, bank_bytes)[0]),
                                              view.dtype == np.int64)
                    # surely finite (no inf, no NaN): the fused add's bits (systolic.sim.blas)
                    finite = x.shape[0] * (w_bound + abs(mm.zp_stationary)) * (
                        x_bound + abs(mm.zp_moving)) <= blas.FINITE_BOUND
                    args = (got[0], got[1], mm.flags, stationary_operand(tile.wt, mm), x,
                            order, got[3], finite)
                    if got[2]:
                        worker = pool[got[2] - 1]
                        worker.put(_task, (*args, worker.bufs))
                    else:
                        _task(*args, own_bufs)
                elif kind is LoadStationary:
                    ls = cast(LoadStationary, ins)
                    if not plain_stationary:
                        pending.flush(ls.src)
                        execute(state, ins)
                    elif (kept := cache.weight(ls.src, ls.fp32_pass)) is not None:
                        state.latch_tile(_ls_rect(ls), kept)
                    else:
                        raw = pending.land_transposed(ls.src)
                        if raw is None:
                            pending.flush(ls.src)
                            execute(state, ins)
                            latched = state.tile(_ls_rect(ls))
                        else:
                            latched = _latch_transposed(state, ls, raw)
                        cache.keep_weight(ls.src, ls.fp32_pass, latched)
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
                            pending.flush_dram(*keys.of(dst)[5:7])
                        execute(state, dma)
                        if dst.space is Space.SBUF:
                            cache.forget(dst)
                        else:
                            cache.dram_written(*keys.of(dst)[5:7])
                elif kind is ReadOut and len(banks := _banks(
                        (ro := cast(ReadOut, ins)).src, bank_bytes)) == 1 \
                        and ro.dst.space is Space.DRAM:
                    # after the bank's MatMuls on the same worker: program order for them;
                    # an earlier ReadOut on another worker into the same bytes lands first
                    if writes:
                        await_dram(ro.dst)
                    span = keys.of(ro.dst)[5:7]
                    pending.flush_dram(*span)
                    cache.dram_written(*span)
                    w = owner(banks[0])
                    if w:
                        written = threading.Event()
                        pool[w - 1].put(execute, (state, ro), written)
                        writes.append((*span, ro.dst, written))
                        hull[:] = ([min(hull[0], span[0]), max(hull[1], span[1])]
                                   if len(writes) > 1 else list(span))
                    else:
                        execute(state, ro)
                else:  # anything else may read or write any memory: run it alone
                    wait(every)
                    pending.flush_all()
                    execute(state, ins)
                    cache.clear()
                if progress is not None and i + 1 - done >= 256:
                    progress(i + 1 - done)
                    done = i + 1
            # land the deferred copies while the workers finish their products, not after:
            # the queued work reads decoded copies (decode always copies), never SBUF, and
            # writes no device-memory byte a pending load reads (a ReadOut into one landed
            # it first, a later load of such bytes waited for the ReadOut)
            pending.flush_all()
            wait(every)
        finished = True
        if progress is not None and len(instrs) > done:
            progress(len(instrs) - done)
    finally:
        if not finished and not errors:  # this thread failed: the workers skip the rest
            errors.append(SystolicError("the run stopped"))
        for worker in pool:
            worker.close()
        pending.flush_all()  # SBUF as program order leaves it, also after a failure
