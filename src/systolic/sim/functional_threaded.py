"""The functional simulator's fast path: the same per-instruction products, on threads.

:func:`run_threaded` gives the bits of :func:`systolic.sim.functional.run_reference` (tests
check it bit for bit) and is faster in five ways:

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
  same bytes (see :class:`~.threaded_caches.DecodeCache`).
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
from ._base import Latched, MachineState, Order, apply_psum, dram_rows_overlap
from .products import moving_values, product, split_fp32, stationary_operand, tile_rect
from .threaded_caches import DecodeCache, Keys, PendingLoads

__all__ = ["default_workers", "run_threaded"]


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
                 plain_dma: bool = False, plain_stationary: bool = False,
                 sbuf: bool = True) -> None:
    """Run ``program`` on ``state`` with ``workers`` threads (see the module docstring);
    ``execute`` runs any instruction but a MatMul (the handler table's dispatch).
    ``plain_dma``: the DmaLoad handler is the plain copy, so a moving tile may be decoded
    from its source and the copy deferred (:class:`DecodeCache`, :class:`PendingLoads`);
    with a handler of its own, every DmaLoad runs in place and tiles decode from SBUF.
    ``plain_stationary``: the LoadStationary handler is the plain latch too, so one whose
    bytes a deferred DmaLoad brings decodes them from that load
    (:meth:`PendingLoads.transposed`). ``sbuf``: False when nothing reads SBUF after the
    run (systolic.matmul reads device memory only, then zeroes the rest): the deferred
    copies into SBUF that no instruction needed are dropped at the end, not landed (256
    a.T tiles and 64 moving tiles of a 2048^3 product, ~3.7 ms of the calling thread while
    the workers finish); device memory and PSUM end as with True."""
    instrs = program.instructions
    bank_bytes = state.arch.psum_bank_bytes
    order = state.order
    keys = Keys()
    pending = PendingLoads(state, execute, keys)
    cache = DecodeCache(state, pending, keys)
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

    def await_dram(ap: AccessPattern, lo: int, hi: int) -> None:
        """Wait for the pending ReadOuts that write bytes of device memory ``ap`` touches
        (bytes [lo, hi), its :class:`Keys` span)."""
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
        with blas.one_thread():
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
                        raw = pending.transposed(ls.src)
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
                    # each pattern's key looked up once for the caches below (several
                    # lookups a DmaLoad were ~10% of the calling thread at 4096^3)
                    sk = keys.of(src) if src.space is Space.DRAM else None
                    if sk is not None and writes:
                        await_dram(src, sk[5], sk[6])
                    if plain_dma and sk is not None and dst.space is Space.SBUF \
                            and src.dtype == dst.dtype and src.shape == dst.shape:
                        state.view(src), state.view(dst)  # bounds refused now, as executed
                        tk = keys.of(dst)
                        pending.defer(dma, tk, sk)
                        cache.loaded(tk, sk)
                    else:
                        if src.space is Space.SBUF:
                            pending.flush(src)
                        if dst.space is Space.SBUF:
                            pending.flush(dst)
                        else:
                            pending.flush_dram(*keys.of(dst)[5:7])
                        execute(state, dma)
                        if dst.space is Space.SBUF:
                            cache.forget(keys.of(dst))
                        else:
                            cache.dram_written(*keys.of(dst)[5:7])
                elif kind is ReadOut and len(banks := _banks(
                        (ro := cast(ReadOut, ins)).src, bank_bytes)) == 1 \
                        and ro.dst.space is Space.DRAM:
                    # after the bank's MatMuls on the same worker: program order for them;
                    # an earlier ReadOut on another worker into the same bytes lands first
                    span = keys.of(ro.dst)[5:7]
                    if writes:
                        await_dram(ro.dst, *span)
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
            if sbuf:
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
        if sbuf:
            pending.flush_all()  # SBUF as program order leaves it, also after a failure
