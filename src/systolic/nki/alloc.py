"""On-chip memory for ``nl.ndarray`` tiles: SBUF bytes per partition, PSUM banks.

Each SBUF tensor takes ``free elements x itemsize`` bytes of every partition, rounded up to
:data:`SBUF_ALIGN`; each PSUM tensor takes whole 2 KiB banks (a matmul's accumulation stays
within one bank, FACTS / NKI docs). A tensor is placed at its first use and its space is
free again after its last use (first fit, lowest address), so a later tenant reuses the
same addresses and the Program shows the reuse. Running out raises :class:`KernelError` at
the line that made the tensor.
"""

from __future__ import annotations

from ..arch import Arch
from ..errors import KernelError
from .tensor import Tensor

__all__ = ["SBUF_ALIGN", "OnChip"]

# Allocation granule in bytes per partition. Unsure: NKI does not publish its allocator's
# alignment; 64 bytes keeps every tile start aligned for every dtype and DMA descriptor.
SBUF_ALIGN = 64


class _FirstFit:
    """Free intervals [lo, hi) of one address range, first fit."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.free: list[tuple[int, int]] = [(0, size)]
        self.used: dict[int, tuple[int, int]] = {}

    def take(self, key: int, n: int) -> int | None:
        for i, (lo, hi) in enumerate(self.free):
            if hi - lo >= n:
                self.free[i:i + 1] = [(lo + n, hi)] if hi - lo > n else []
                self.used[key] = (lo, lo + n)
                return lo
        return None

    def give(self, key: int) -> None:
        lo, hi = self.used.pop(key)
        self.free.append((lo, hi))
        self.free.sort()
        merged: list[tuple[int, int]] = []
        for a, b in self.free:
            if merged and merged[-1][1] == a:
                merged[-1] = (merged[-1][0], b)
            else:
                merged.append((a, b))
        self.free = merged

    @property
    def in_use(self) -> int:
        return sum(hi - lo for lo, hi in self.used.values())


class OnChip:
    """SBUF and PSUM of one NeuronCore; ``place`` returns a byte offset per partition."""

    def __init__(self, arch: Arch) -> None:
        self.arch = arch
        self.sbuf = _FirstFit(arch.sbuf_bytes // SBUF_ALIGN)
        self.psum = _FirstFit(arch.psum_banks)

    def place(self, t: Tensor) -> int:
        nbytes = t.free_elems * t.dtype.itemsize
        path, line = t.where
        if t.buffer.name == "psum":
            banks = -(-nbytes // self.arch.psum_bank_bytes)
            got = self.psum.take(t.id, banks)
            if got is None:
                raise KernelError(path, line, (
                    f"PSUM is full: this tile needs {banks} bank(s) of 2 KiB per partition and "
                    f"{self.psum.in_use} of the {self.arch.psum_banks} banks hold live tiles; "
                    f"copy results out of PSUM sooner or use fewer PSUM tiles at once"))
            return got * self.arch.psum_bank_bytes
        granules = -(-nbytes // SBUF_ALIGN)
        got = self.sbuf.take(t.id, granules)
        if got is None:
            live = self.sbuf.in_use * SBUF_ALIGN
            raise KernelError(path, line, (
                f"SBUF is full: this tile needs {granules * SBUF_ALIGN} bytes per partition "
                f"and {live} of the {self.arch.sbuf_bytes} bytes per partition hold "
                f"{len(self.sbuf.used)} live tiles; keep fewer tiles alive at once (smaller "
                f"blocks) or reuse tiles"))
        return got * SBUF_ALIGN

    def release(self, t: Tensor) -> None:
        (self.psum if t.buffer.name == "psum" else self.sbuf).give(t.id)
