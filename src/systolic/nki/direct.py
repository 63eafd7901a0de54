"""Direct allocation: a tile the kernel places itself (``ncc.sbuf.alloc(func)``,
``ncc.psum.alloc(func)``, ``mod_alloc``; aws-neuron-sdk 7c165a3e
``nki/nki_direct_allocation_guide.rst`` and the nki.compiler API reference).

The allocation function gives each logical block (the dimensions before ``par_dim``) its
physical tile: ``(start_partition, byte_addr)`` in SBUF, ``(bank_id, start_partition,
byte_addr)`` in PSUM (a block never crosses a bank). :func:`pin` evaluates it for every
block: the tensor is pinned at the lowest address, each block at its own offset from there,
and blocks the function puts at one place share that memory (modulo allocation's ``i % n``
double buffering), as do tensors the kernel places over each other. nki/alloc.py keeps a
pinned tensor where it asks and places the model's own tiles around it.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ..arch import Arch
from ..errors import KernelError
from .record import Recorder, fail
from .tensor import Axis, Tensor

__all__ = ["MAX_BLOCKS", "pin"]

# Blocks evaluated per tensor: the allocation function is the kernel's own Python, called
# once per block at declaration (the largest public kernel's tensors have 64).
MAX_BLOCKS = 65536


def pin(t: Tensor, rec: Recorder) -> Tensor:
    """``t`` added to the recording and placed where its buffer's allocation function says
    (module docstring). In an ``affine_range`` / ``sequential_range`` body NKI traces the
    body once, so its Python runs once: a declaration there is one tensor for the whole run
    of the outermost such loop, the one its first iteration made (each later iteration
    gets it back: it reads what the iteration before left, at the place the first
    iteration's address counter gave)."""
    loop, outer = rec.loops[-1] if rec.loops else None, None
    while loop is not None:
        if loop.kind != "static":
            outer = loop
        loop = loop.parent
    key = None if outer is None else (t.where, outer.id, t.shape, t.dtype.fmt,
                                      t.buffer.name)
    if key is not None and key in rec.direct:
        return rec.direct[key]  # type: ignore[no-any-return]
    rec.add_tensor(t)
    _apply(t, *_locate(t, rec.arch))  # a locate buffer is SBUF or PSUM: pdim is set
    if key is not None:
        rec.direct[key] = t
    return t


def _locate(t: Tensor, arch: Arch) -> tuple[int, int, Any]:
    """(partition, lowest byte, each block's element offset from it) of ``t``."""
    locate = t.buffer.locate
    assert locate is not None and t.pdim is not None
    nb = t.pdim
    grid = t.shape[:nb]
    if int(np.prod(grid)) > MAX_BLOCKS:
        raise fail(f"a directly allocated tensor of {int(np.prod(grid))} blocks: at most "
                   f"{MAX_BLOCKS} are modelled", t.where)
    psum = t.buffer.name == "psum"
    item = t.dtype.itemsize
    inner_elems = t.free_elems // max(1, int(np.prod(grid)))
    fbytes = inner_elems * item
    where = f"nki.compiler.{t.buffer.name} allocation"
    places: list[tuple[int, int]] = []  # (partition, byte from the buffer's start)
    for idx in itertools.product(*(range(n) for n in grid)):
        try:
            got = tuple(int(x) for x in locate(idx=idx, pdim_size=t.partitions,
                                                fdim_size=fbytes))
        except (TypeError, ValueError) as exc:
            raise fail(f"{where} of block {idx}: the function must return whole numbers "
                       f"({exc})", t.where) from None
        if len(got) != (3 if psum else 2) or min(got) < 0:
            want = "(bank_id, start_partition, byte_addr)" if psum else (
                "(start_partition, byte_addr)")
            raise fail(f"{where} of block {idx} returned {got}; expected {want} of "
                       f"non-negative whole numbers", t.where)
        if psum:
            bank, part, addr = got
            if bank >= arch.psum_banks or addr + fbytes > arch.psum_bank_bytes:
                raise fail(f"{where} puts block {idx} at bank {bank}, byte {addr}: a PSUM "
                           f"tile of {fbytes} bytes per partition stays within one of the "
                           f"{arch.psum_banks} banks of {arch.psum_bank_bytes} bytes",
                           t.where)
            places.append((part, bank * arch.psum_bank_bytes + addr))
        else:
            part, addr = got
            if addr + fbytes > arch.sbuf_bytes:
                raise fail(f"{where} puts block {idx} at byte {addr}; {fbytes} bytes per "
                           f"partition from there pass the end of SBUF ({arch.sbuf_bytes})",
                           t.where)
            places.append((part, addr))
    parts = {p for p, _ in places}
    if len(parts) > 1:
        raise fail(f"{where} puts the blocks on different start partitions {sorted(parts)}: "
                   f"not modelled (blocks on partitions 0 only)", t.where)
    p0 = parts.pop()
    if p0 + t.partitions > arch.rows:
        raise fail(f"{where}: a {t.partitions}-partition tile from partition {p0} ends past "
                   f"partition {arch.rows - 1}", t.where)
    addrs = np.array([a for _, a in places], dtype=np.int64)
    low = int(addrs.min())
    if np.any((addrs - low) % item):
        raise fail(f"{where}: block addresses are not whole {t.dtype} elements apart",
                   t.where)
    return p0, low, ((addrs - low) // item).reshape(grid)


def _apply(t: Tensor, p0: int, low: int, blocks: Any) -> None:
    if p0:
        t.at_partition(p0)
    t.pin = low
    if not blocks.ndim:
        return
    t.blocks = blocks
    t.free_elems = int(blocks.max()) + t.free_elems // blocks.size
    try:  # the whole tensor as one view where its blocks are evenly spaced from 0
        v = t[...]
        whole = v.offset == 0 and all(a.stride >= 0 for a in v.axes)
    except KernelError:
        whole = False
    # else its physical memory, partitions by elements
    t.full_axes = v.axes if whole else (Axis(1, t.partitions, True), Axis(1, t.free_elems))
