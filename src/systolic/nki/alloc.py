"""On-chip memory for ``nl.ndarray`` tiles: SBUF bytes per partition, PSUM banks, and the
Neuron compiler's buffer rotation.

Each SBUF tensor takes ``free elements x itemsize`` bytes of every partition, rounded up to
:data:`SBUF_ALIGN`; each PSUM tensor takes whole 2 KiB banks (a matmul's accumulation stays
within one bank, FACTS / NKI docs). A tensor is placed at its first use and its space is
free again after its last use (first fit, lowest address), so a later tenant reuses the
same addresses and the Program shows the reuse. Running out raises :class:`KernelError` at
the line that made the tensor.

**Rotation** (aws-neuron-sdk ``nki/nki_direct_allocation_guide.rst``, "logical" vs
"physical" tiles): a tile made in the body of an ``affine_range`` loop is a new logical
tile each iteration, and the compiler backs it with several physical tiles used in turn, so
that iteration i+1's writer (a DMA, say) need not wait for iteration i's readers ("double
buffering ... we reuse, or rotate, the same physical tiles across the loop iterations").
Here a dead tile of such a declaration (same kernel line, in one run of the outermost loop
around it) keeps its space while ``(buffers - 1) x peak`` later dead tiles of that
declaration are held, ``peak`` being the most of its tiles live at once, or until that loop
ends; so ``buffers`` consecutive iterations use different addresses. The ``peak`` factor
makes a block built as a list of tiles in an inner loop (``[nl.ndarray(...) for k in
...]``) rotate as a whole, as the tutorial's single block tensor ``nl.ndarray((TILES_K,
nl.par_dim(128), BLOCK_M))`` declared in the loop body does. The compiler's count is a
heuristic it does not publish (the guide: "decide how many physical tiles are allocated to
each tensor"); ``buffers`` (``systolic kernel --buffers``) defaults to
:data:`DEFAULT_BUFFERS`, the guide's double-buffering example (unsure). Where the held
tiles leave no room for a new one, the held tile that died first, of any declaration, is
given up (its readers are the likeliest to be done; unsure: the compiler's policy is not
published), and the report counts it ("did not fit 2 times over"). Tiles made in a
``sequential_range`` or ``static_range`` body, or outside any loop, get one buffer:
"sequential_range informs Neuron compiler to respect inter-loop dependency and perform much
more conservative loop-level optimizations compared to affine_range" (its docstring,
aws-neuron-sdk 7c165a3e), and the recording cannot tell which tiles carry a value across
iterations.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import NoReturn

from ..arch import Arch
from ..errors import KernelError
from .tensor import Tensor

__all__ = ["DEFAULT_BUFFERS", "SBUF_ALIGN", "OnChip", "Rotation"]

# Physical buffers per rotating tile. Unsure: the Neuron compiler's allocator is a heuristic
# it does not publish; 2 is the direct-allocation guide's double-buffering example.
DEFAULT_BUFFERS = 2

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

    def pin(self, key: int, lo: int, hi: int) -> None:
        """Hold [lo, hi) for the whole kernel: a tile the kernel placed itself
        (nki/direct.py); such tiles may overlap each other, and nothing else is placed there."""
        self.used[key] = (lo, hi)
        self._refree()

    def _refree(self) -> None:
        """The free intervals: what no placed or pinned tile holds."""
        free, at = [], 0
        for a, b in sorted(self.used.values()):
            if a > at:
                free.append((at, a))
            at = max(at, b)
        if at < self.size:
            free.append((at, self.size))
        self.free = free

    @property
    def in_use(self) -> int:
        return sum(hi - lo for lo, hi in self.used.values())


@dataclass
class Rotation:
    """What the rotation did for one declaration (a kernel line in one loop body)."""

    where: tuple[str, int]
    buffer: str  # sbuf or psum
    bytes: int  # per partition, of one physical tile
    tiles: int = 0  # logical tiles placed
    addresses: set[int] = field(default_factory=set)  # distinct physical tiles used
    short: int = 0  # times a held tile was given up for room

    @property
    def buffers(self) -> int:
        return len(self.addresses)


Site = tuple[str, int, int, str]


def _site(t: Tensor) -> Site | None:
    """The rotation key of a tile made in an affine_range body, else None: its kernel line,
    the run of its outermost loop (the compiler allocates the unrolled nest, so a
    declaration's physical tiles keep rotating when an inner loop starts again) and its
    buffer (one line can make an SBUF and a PSUM tile: ``nl.store(out, nl.matmul(...))``,
    and each rotates in its own space)."""
    loop = t.loop
    if loop is None or loop.kind != "affine":
        return None
    while loop.parent is not None:
        loop = loop.parent
    return (t.where[0], t.where[1], loop.id, t.buffer.name)


class OnChip:
    """SBUF and PSUM of one NeuronCore; ``place`` returns a byte offset per partition.
    ``buffers`` physical tiles per rotating declaration (module docstring)."""

    def __init__(self, arch: Arch, buffers: int = DEFAULT_BUFFERS) -> None:
        self.arch = arch
        self.buffers = buffers
        self.sbuf = _FirstFit(arch.sbuf_bytes // SBUF_ALIGN)
        self.psum = _FirstFit(arch.psum_banks)
        self.held: dict[Site, deque[tuple[int, Tensor]]] = {}
        self.deaths = 0  # order of release, for giving up the held tile that died first
        self.by_loop: dict[int, list[Site]] = {}
        self.report: dict[Site, Rotation] = {}
        self.live: dict[Site, int] = {}  # placed, not yet dead
        self.peak: dict[Site, int] = {}  # most live at once

    def _space(self, t: Tensor) -> _FirstFit:
        return self.psum if t.buffer.name == "psum" else self.sbuf

    def _give_up_oldest(self, t: Tensor) -> bool:
        """Free the held tile in ``t``'s space that died first, of any declaration: the
        one whose readers are most likely done (module docstring)."""
        best: tuple[int, Site] | None = None
        for k, q in self.held.items():
            if q and q[0][1].buffer.name == t.buffer.name and (best is None
                                                               or q[0][0] < best[0]):
                best = (q[0][0], k)
        if best is None:
            return False
        k = best[1]
        old = self.held[k].popleft()[1]
        self._space(old).give(old.id)
        self.report[k].short += 1
        return True

    def place(self, t: Tensor) -> int:
        if t.pin is not None:  # held since build.place reserved it (reserve)
            return t.pin
        while True:
            got = self._try_place(t)
            if got is not None or not self._give_up_oldest(t):
                break
        if got is None:
            self._full(t)
        key = _site(t)
        if key is not None:
            r = self.report.get(key)
            if r is None:
                r = self.report[key] = Rotation(t.where, t.buffer.name,
                                                t.free_elems * t.dtype.itemsize)
                self.by_loop.setdefault(key[2], []).append(key)
            r.tiles += 1
            r.addresses.add(int(got))
            n = self.live[key] = self.live.get(key, 0) + 1
            self.peak[key] = max(self.peak.get(key, 0), n)
        return int(got)

    def reserve(self, t: Tensor) -> None:
        """Hold a directly allocated tile's place for the whole kernel, before anything is
        placed, so the model's own tiles (a casting DMA's staging tile) go around it; NKI
        does not mix automatic and direct allocation in one kernel (nki.compiler docs)."""
        assert t.pin is not None
        unit = self.arch.psum_bank_bytes if t.buffer.name == "psum" else SBUF_ALIGN
        end = t.pin + t.free_elems * t.dtype.itemsize
        self._space(t).pin(t.id, t.pin // unit, -(-end // unit))

    def _try_place(self, t: Tensor) -> int | None:
        nbytes = t.free_elems * t.dtype.itemsize
        if t.buffer.name == "psum":
            got = self.psum.take(t.id, -(-nbytes // self.arch.psum_bank_bytes))
            return None if got is None else got * self.arch.psum_bank_bytes
        got = self.sbuf.take(t.id, -(-nbytes // SBUF_ALIGN))
        return None if got is None else got * SBUF_ALIGN

    def _full(self, t: Tensor) -> NoReturn:
        nbytes = t.free_elems * t.dtype.itemsize
        path, line = t.where
        if t.buffer.name == "psum":
            banks = -(-nbytes // self.arch.psum_bank_bytes)
            raise KernelError(path, line, (
                f"PSUM is full: this tile needs {banks} bank(s) of 2 KiB per partition and "
                f"{self.psum.in_use} of the {self.arch.psum_banks} banks hold live tiles; "
                f"copy results out of PSUM sooner or use fewer PSUM tiles at once (the "
                f"model does not reorder loops or spill PSUM as a compiler might)"))
        granules = -(-nbytes // SBUF_ALIGN)
        live = self.sbuf.in_use * SBUF_ALIGN
        raise KernelError(path, line, (
            f"SBUF is full: this tile needs {granules * SBUF_ALIGN} bytes per partition "
            f"and {live} of the {self.arch.sbuf_bytes} bytes per partition hold "
            f"{len(self.sbuf.used)} live tiles; keep fewer tiles alive at once (smaller "
            f"blocks) or reuse tiles"))

    def release(self, t: Tensor) -> None:
        """``t`` is dead: free its space, or hold it among the last ``(buffers - 1) x
        peak`` dead tiles of its declaration (rotation, module docstring)."""
        if t.pin is not None:  # held for the whole kernel (reserve)
            return
        key = _site(t)
        if key is not None and key in self.live:
            self.live[key] -= 1
        if key is None or self.buffers <= 1 or key not in self.peak:
            self._space(t).give(t.id)
            return
        q = self.held.setdefault(key, deque())
        self.deaths += 1
        q.append((self.deaths, t))
        while len(q) > (self.buffers - 1) * self.peak[key]:
            old = q.popleft()[1]
            self._space(old).give(old.id)

    def end_loop(self, loop_id: int) -> None:
        """A loop finished: its declarations' held tiles are free."""
        for key in self.by_loop.pop(loop_id, ()):
            for _, t in self.held.pop(key, ()):
                self._space(t).give(t.id)
            self.live.pop(key, None)
            self.peak.pop(key, None)
