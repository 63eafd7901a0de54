"""What the functional simulator's fast path (functional_threaded.py) keeps between
instructions: each pattern object's key (:class:`Keys`), the decoded SBUF tiles, their
device-memory sources and latched weight tiles (:class:`DecodeCache`), and the DmaLoads whose
copy has not landed yet (:class:`PendingLoads`). Each is dropped when the bytes it was made
from may change; the runner says when.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..dtypes import decode
from ..isa import AccessPattern, DmaLoad, Fp32Pass, Instruction, Space
from . import blas
from ._base import Latched, MachineState, dram_span

__all__ = ["DecodeCache", "Key", "Keys", "PendingLoads"]

# (key, p0, p1, lo, hi, dram lo, dram hi, pattern): what :meth:`Keys.of` gives
Key = tuple[int, int, int, int, int, int, int, AccessPattern]

_BLOCK = 1024  # bytes of a partition per decode-cache bucket
# decoded device-memory tiles kept at most (oldest dropped first): a 4096^3 bf16 product
# reloads 256 moving tiles of 256 KiB decoded 32 times each, 64 MiB
_DRAM_CACHE_BYTES = 256 << 20


def _file(blocks: dict[int, set[int]], k: int, lo: int, hi: int) -> None:
    """File key ``k`` under the 1 KiB blocks its bytes [lo, hi) of a partition touch."""
    for b in range(lo // _BLOCK, (hi - 1) // _BLOCK + 1):
        blocks.setdefault(b, set()).add(k)


def _unfile(blocks: dict[int, set[int]], k: int, lo: int, hi: int) -> None:
    """Undo :func:`_file`."""
    for b in range(lo // _BLOCK, (hi - 1) // _BLOCK + 1):
        blocks[b].discard(k)


class Keys:
    """Each pattern object of one run, by its ``id``: an int key shared by equal patterns,
    the partitions and bytes it covers in a row, and for a device-memory pattern the bytes
    [lo, hi) it touches (:func:`~._base.dram_span`). A frozen dataclass hashes all its
    fields at every dict lookup, and the caches below look a pattern up several times an
    instruction (0.2 s of a 4096^3 product's 0.7 s of dispatch); an id lookup is one int.
    Each entry holds its pattern, so the id is not reused while the run lasts."""

    def __init__(self) -> None:
        self.by_id: dict[int, Key] = {}
        self.canon: dict[AccessPattern, int] = {}

    def of(self, ap: AccessPattern) -> Key:
        """(key, p0, p1, lo, hi, dram lo, dram hi, ap) of ``ap``."""
        got = self.by_id.get(id(ap))
        if got is None:
            key = self.canon.setdefault(ap, len(self.canon))
            lo, hi = ap.free_bytes_span
            da, dz = dram_span(ap) if ap.space is Space.DRAM else (lo, hi)
            got = self.by_id[id(ap)] = (key, ap.partition, ap.partition + ap.partitions, lo,
                                        hi, da, dz, ap)
        return got


class DecodeCache:
    """Decoded SBUF tiles of one run, indexed by the 1 KiB blocks of bytes they cover.

    A DmaLoad from device memory also records where its SBUF bytes came from, so a moving
    tile that a product DMAs again and again (one whose operand does not fit SBUF: every M
    tile reloads it) is decoded once, from the device-memory pattern, instead of once per
    load. decode is elementwise and the copy is ``dst[...] = src.reshape(dst.shape)``, so
    ``decode(src).reshape(dst.shape)`` is ``decode(dst)`` value for value; the record is
    dropped when either side's bytes may change (a DmaLoad over the SBUF bytes, a ReadOut
    into the device-memory bytes, any instruction that runs alone). Patterns are keyed by
    :class:`Keys`.
    """

    def __init__(self, state: MachineState, pending: PendingLoads, keys: Keys) -> None:
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
        key = self.keys.of(ap)
        k = key[0]
        hit = self.tiles.get(k)
        if hit is not None and hit[0] is not None:  # most reads: no unpacking (a list for *_)
            return hit[0], self.bounds[k]
        p0, p1, lo, hi = key[1:5]
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
            _file(self.blocks, k, lo, hi)
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
        k, p0, p1, lo, hi = self.keys.of(ap)[:5]
        if k not in self.tiles:  # registered by its bytes, so that forget() finds it
            self.tiles[k] = (None, p0, p1, lo, hi)
            _file(self.blocks, k, lo, hi)
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

    def loaded(self, dst: Key, src: Key) -> None:
        """A DmaLoad copied device-memory pattern ``src`` into SBUF pattern ``dst`` (their
        :meth:`Keys.of`)."""
        self.forget(dst)
        lo, hi = src[5:7]
        if self.source:
            lo, hi = min(lo, self.hull[0]), max(hi, self.hull[1])
        self.hull = (lo, hi)
        k, p0, p1, lo, hi = dst[:5]
        self.source[k] = src[7]
        self.tiles[k] = (None, p0, p1, lo, hi)
        _file(self.blocks, k, lo, hi)

    def dram_written(self, lo: int, hi: int) -> None:
        """Device-memory bytes [lo, hi) will change: forget every source that reads them."""
        if not self.source or hi <= self.hull[0] or self.hull[1] <= lo:
            return
        for dst, src in list(self.source.items()):
            sk, *_, a, z, _ = self.keys.of(src)
            if a < hi and lo < z:
                del self.source[dst]
                self._evict_dram(sk)  # its bytes left the count too
                if self.tiles[dst][0] is None:
                    self._drop(dst)

    def forget(self, dst: Key) -> None:
        """Drop every cached tile sharing a byte with SBUF pattern ``dst`` (its
        :meth:`Keys.of`)."""
        if not self.tiles:
            return
        p0, p1, lo, hi = dst[1:5]
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
        _unfile(self.blocks, k, a, z)

    def clear(self) -> None:
        self.tiles.clear()
        self.blocks.clear()
        self.source.clear()
        self.weights.clear()
        self.dram.clear()
        self.bounds.clear()
        self.dram_bounds.clear()
        self.dram_bytes = 0


class PendingLoads:
    """DmaLoads from device memory into SBUF whose copy has not happened yet.

    A product whose moving operand does not fit SBUF reloads every moving tile for every M
    tile, and its MatMuls read the decoded source (:class:`DecodeCache`), not the SBUF
    bytes; so the copy lands only when something reads or writes those SBUF bytes, when its
    device-memory source is about to change, or at the end of the run. A load into exactly
    the bytes of a pending one replaces it (the earlier copy would be overwritten whole);
    pending loads never overlap, so they land in any order with the same result.
    """

    def __init__(self, state: MachineState,
                 execute: Callable[[MachineState, Instruction], None], keys: Keys) -> None:
        self.state, self.execute, self.keys = state, execute, keys
        # SBUF key -> (the load, p0, p1, lo, hi of its destination)
        self.loads: dict[int, tuple[DmaLoad, int, int, int, int]] = {}
        self.blocks: dict[int, set[int]] = {}
        self.hull = (0, 0)  # device-memory bytes every pending source lies in

    def defer(self, dma: DmaLoad, dst: Key, src: Key) -> None:
        """Keep ``dma`` pending; ``dst`` and ``src`` are its patterns' :meth:`Keys.of`."""
        k, p0, p1, lo, hi = dst[:5]
        old = self.loads.get(k)
        if old is not None:
            self.loads[k] = (dma, *old[1:])
        else:
            self._flush(dst)
            self.loads[k] = (dma, p0, p1, lo, hi)
            _file(self.blocks, k, lo, hi)
        a, z = src[5:7]
        self.hull = (min(a, self.hull[0]), max(z, self.hull[1])) if len(self.loads) > 1 \
            else (a, z)

    def flush(self, ap: AccessPattern) -> None:
        """Land the pending loads sharing a byte with SBUF pattern ``ap``."""
        if self.loads:
            self._flush(self.keys.of(ap))

    def _flush(self, key: Key) -> None:
        p0, p1, lo, hi = key[1:5]
        for b in range(lo // _BLOCK, (hi - 1) // _BLOCK + 1):
            for d in list(self.blocks.get(b, ())):
                got = self.loads.get(d)
                if got is not None and got[1] < p1 and p0 < got[2] and got[3] < hi \
                        and lo < got[4]:
                    self._land(d)

    def transposed(self, ap: AccessPattern) -> np.ndarray | None:
        """The values the pending load into exactly SBUF pattern ``ap`` (a 2-D one) copies,
        transposed and C-contiguous in their storage format: [free, partitions], what a
        LoadStationary latches as its ``wt``; None when no pending load has exactly these
        bytes. One read of the source serves the decode: the a.T tiles of a product latch in
        38 us instead of 113 (copy, then decode the SBUF rows, then transpose the decoded
        tile). The load stays pending: its copy lands when something needs those SBUF
        bytes, or at the end of the run, and a later load into the same slot, the usual
        case, replaces it unlanded (1,024 SBUF copies of a 4096^3 product saved)."""
        got = self.loads.get(self.keys.of(ap)[0])
        if got is None or len(ap.dims) != 1:
            return None
        return np.ascontiguousarray(self.state.view(got[0].src).reshape(ap.shape).T)

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
        _unfile(self.blocks, d, a, z)
        self.execute(self.state, dma)
