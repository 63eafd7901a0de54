"""The compiler's placement of a PSUM tensor block by block.

An ``nl.ndarray((B0, B1, nl.par_dim(P), F), buffer=nl.psum)`` has ``B0 x B1`` logical
tiles, and "the block dimension describes how many (P, F) logical tiles this tensor has,
but does not reflect the number of physical tiles being allocated" (nki.compiler.psum.alloc,
aws-neuron-sdk 7c165a3e): the compiler gives each logical tile its own physical tile for as
long as it lives, so the attention tutorial's ``qk[i_tile_q, i_tile_kv]`` (32 x 8 tiles of
one bank, each written by a matmul and read at once) needs a bank or two at a time, not
256. :func:`split` does the same before lifetimes are known: a PSUM tensor of several
blocks, automatically allocated, whose every use lies within one block, becomes one tensor
per block used, each placed and released on its own (nki/alloc.py). A tensor some use
spans several blocks of (``qk[i]`` of all its tiles, a whole-tensor memset) is placed whole,
as before; so is one the kernel allocated itself (nki/direct.py).
"""

from __future__ import annotations

from math import prod

from .record import Op
from .tensor import Tensor, View

__all__ = ["split"]


def _block(v: View, size: int) -> int | None:
    """The block ``v`` lies in (elements ``[b * size, (b + 1) * size)`` of each partition),
    or None when it reaches past it."""
    if type(v) is not View or v.outside is not None:
        return None
    lo = v.offset
    hi = lo + sum((a.num - 1) * a.stride for a in v.axes if not a.part and a.stride > 0)
    if any(a.stride < 0 for a in v.axes if not a.part):
        return None
    b = lo // size
    return b if hi < (b + 1) * size else None


def _candidates(tensors: list[Tensor]) -> dict[int, int]:
    """PSUM tensors of several blocks that the compiler places: id -> elements per block."""
    out: dict[int, int] = {}
    for t in tensors:
        if (t.buffer.name == "psum" and t.buffer.locate is None and t.pdim
                and prod(t.shape[:t.pdim]) > 1):
            out[t.id] = t.free_elems // prod(t.shape[:t.pdim])
    return out


def split(ops: list[Op], tensors: list[Tensor], outputs: list[Tensor]
          ) -> tuple[list[Op], list[Tensor]]:
    """``ops`` with each use of a splittable PSUM tensor moved to its block's own tensor,
    and the block tensors made (module docstring); ``ops`` unchanged when none is."""
    size = _candidates(tensors)
    for t in outputs:
        size.pop(t.id, None)
    if not size:
        return ops, []
    for op in ops:
        for v in op.views():
            n = size.get(v.tensor.id)
            if n is not None and _block(v, n) is None:
                del size[v.tensor.id]
        if not size:
            return ops, []
    made: dict[tuple[int, int], Tensor] = {}

    def moved(v: View) -> View:
        n = size.get(v.tensor.id)
        if n is None:
            return v
        b = v.offset // n
        sub = made.get((v.tensor.id, b))
        if sub is None:
            t = v.tensor
            sub = Tensor(t.shape[t.pdim:], t.dtype, t.buffer, t.where,  # type: ignore[misc]
                         f"{t.name or t.id}[{b}]")
            sub.loop = t.loop
            if t.p_base:
                sub.at_partition(t.p_base)
            made[(v.tensor.id, b)] = sub
        return View(sub, v.offset - b * n, v.p0, v.axes, v.dt)

    out = []
    for op in ops:
        if any(v.tensor.id in size for v in op.views()):
            op = Op(op.args, moved(op.dst), tuple(moved(s) for s in op.srcs), op.where,
                    tuple(moved(o) for o in op.outs))
        out.append(op)
    return out, list(made.values())
