"""SBUF, PSUM and device memory as byte arrays, read and written through access patterns.

SBUF and PSUM are [partitions, bytes-per-partition] arrays sized by the Arch (FACTS: SBUF
192/224/256 KiB per partition, PSUM 16 KiB = 8 banks x 2 KiB). Device memory (DRAM) is a
flat byte array sized by the caller. Every access is a numpy view built with strides, so a
tile read is one vectorised copy, never a Python loop over elements.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .arch import Arch
from .dtypes import OverflowPolicy, decode, encode, get_format
from .errors import ShapeError
from .isa import AccessPattern, Space

__all__ = ["Memory", "check_bounds", "psum_bank"]


def psum_bank(ap: AccessPattern, arch: Arch) -> int:
    """The PSUM bank an access pattern lies in; raises if it spans two (seed 000 GOTCHA:
    "PSUM accumulation does not span banks")."""
    lo, hi = ap.free_bytes_span
    first, last = lo // arch.psum_bank_bytes, (hi - 1) // arch.psum_bank_bytes
    if first != last:
        raise ShapeError(
            f"PSUM bytes {lo:#x}..{hi:#x} span banks {first} and {last}; an accumulation "
            f"group must fit one {arch.psum_bank_bytes}-byte bank"
        )
    return first


def check_bounds(ap: AccessPattern, arch: Arch, dram_bytes: int | None = None) -> None:
    """Raise :class:`ShapeError` if ``ap`` reaches outside its memory or is misaligned."""
    isz = ap.itemsize
    if ap.offset % isz:
        raise ShapeError(f"offset {ap.offset:#x} is not aligned to the {isz}-byte {ap.dtype}")
    lo, hi = ap.free_bytes_span
    if ap.space is Space.DRAM:
        pstep = ap.partition_step
        rows_lo = min(0, pstep * (ap.partitions - 1))
        rows_hi = max(0, pstep * (ap.partitions - 1))
        if pstep % isz:
            raise ShapeError(f"DRAM row stride {pstep} is not a multiple of {isz} bytes")
        if lo + rows_lo < 0 or (dram_bytes is not None and hi + rows_hi > dram_bytes):
            raise ShapeError(f"DRAM access {lo + rows_lo:#x}..{hi + rows_hi:#x} lies outside "
                             f"device memory of {dram_bytes} bytes")
        return
    row_bytes = arch.sbuf_bytes if ap.space is Space.SBUF else arch.psum_bytes
    # SBUF partitions feed the array rows; PSUM partitions take the array columns (seed 003:
    # "column m drains into PSUM partition m").
    parts = arch.rows if ap.space is Space.SBUF else arch.cols
    if ap.partition + ap.partitions > parts:
        last = ap.partition + ap.partitions - 1
        raise ShapeError(f"{ap.space.value} partitions {ap.partition}..{last} exceed the "
                         f"{parts} partitions")
    if lo < 0 or hi > row_bytes:
        raise ShapeError(f"{ap.space.value} bytes {lo:#x}..{hi:#x} lie outside the "
                         f"{row_bytes}-byte partition")


class Memory:
    """The machine's memories. ``sbuf`` and ``psum`` are uint8 [partitions, bytes]."""

    def __init__(self, arch: Arch, dram_bytes: int = 0) -> None:
        self.arch = arch
        self.sbuf = np.zeros((arch.rows, arch.sbuf_bytes), dtype=np.uint8)
        self.psum = np.zeros((arch.cols, arch.psum_bytes), dtype=np.uint8)
        self.dram = np.zeros(dram_bytes, dtype=np.uint8)

    def _buffer(self, space: Space) -> np.ndarray:
        return {Space.SBUF: self.sbuf, Space.PSUM: self.psum, Space.DRAM: self.dram}[space]

    def view(self, ap: AccessPattern) -> np.ndarray:
        """A writable strided view of ``ap`` in its format's storage dtype, shape ap.shape."""
        check_bounds(ap, self.arch, self.dram.size)
        f = get_format(ap.dtype)
        isz = ap.itemsize
        storage = f.storage if f.kind != "mx" else np.dtype(f"<u{isz}")
        # as_strided cannot carry ml_dtypes types: stride an unsigned view of the same size
        carrier = np.dtype(f"<u{isz}")
        buf = self._buffer(ap.space)
        if ap.space is Space.DRAM:
            start = ap.offset
            pstride = ap.partition_step
        else:
            start = ap.partition * buf.shape[1] + ap.offset
            pstride = buf.shape[1]
        flat = buf.reshape(-1)[start:].view(np.uint8)
        if start >= buf.size:
            raise ShapeError(f"access at byte {start:#x} lies outside {ap.space.value}")
        typed = flat[: (flat.size // isz) * isz].view(carrier)
        return as_strided(
            typed, shape=ap.shape,
            strides=(pstride, *(step * isz for step, _ in ap.dims)), writeable=True,
        ).view(storage)

    def read(self, ap: AccessPattern) -> np.ndarray:
        """Decoded values (float32, or int64 for integer formats), shape ap.shape."""
        return decode(self.view(ap), ap.dtype)

    def write(self, ap: AccessPattern, values: np.ndarray, *,
              overflow: OverflowPolicy = "error") -> None:
        """Encode ``values`` (shape ap.shape, or broadcastable) into ``ap``; ``overflow`` is
        the policy for values beyond the format's range (:func:`systolic.dtypes.encode`):
        the default refuses them (inputs), an engine's own cast passes ``"format"``."""
        self.view(ap)[...] = encode(values, ap.dtype, overflow=overflow)

    def copy(self, src: AccessPattern, dst: AccessPattern) -> None:
        """Element-for-element copy; formats must match (a DMA converts nothing)."""
        if src.dtype != dst.dtype:
            raise ShapeError(f"a copy keeps its format: {src.dtype} -> {dst.dtype}")
        s, d = self.view(src), self.view(dst)
        if s.size != d.size:
            raise ShapeError(f"copy of {s.size} elements into {d.size}")
        d[...] = s.reshape(d.shape)
