"""Passes 2 and 3: loop order for reuse, then the ends of each accumulation group.

Order: for each M tile, the N tiles are taken in chunks of half the PSUM banks (so one
chunk's read-out overlaps the next chunk's compute); within a chunk the K tiles are the
outer loop, so one latched weight tile W(k, m) serves every N tile of the chunk. A
2048^3 bf16 product is then 16 M tiles x 16 K tiles = 256 weight loads for 1024 MatMuls
(seed 000: a load before every MatMul is correct but about 2x slower).

Groups: the K tiles of one output tile (m, n) form one accumulation group in one PSUM bank,
START on the first, STOP on the last (seed 000 "The Accumulate Chain"); a group never spans
banks, and the groups of a chunk are open at once, one per bank.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..arch import Arch
from .tiling import KTile, Span, TilePlan

__all__ = ["ReadStep", "Step", "mark_group_ends", "order_for_reuse"]


@dataclass(frozen=True, slots=True)
class Step:
    """One MatMul of the product: K tile x M tile x N tile into a bank, with group flags."""

    k: KTile
    m: Span
    n: Span
    bank: int
    first: bool = False
    last: bool = False


@dataclass(frozen=True, slots=True)
class ReadStep:
    """Read the finished output tile (m, n) out of its bank."""

    m: Span
    n: Span
    bank: int


def order_for_reuse(plan: TilePlan, arch: Arch) -> list[Step | ReadStep]:
    per_chunk = max(1, arch.psum_banks // 2)
    steps: list[Step | ReadStep] = []
    chunk_no = 0
    for m in plan.m_tiles:
        for c0 in range(0, len(plan.n_tiles), per_chunk):
            chunk = plan.n_tiles[c0:c0 + per_chunk]
            base = (chunk_no % 2) * per_chunk if arch.psum_banks >= 2 else 0
            chunk_no += 1
            for k in plan.k_tiles:
                steps.extend(Step(k, m, n, base + j) for j, n in enumerate(chunk))
            steps.extend(ReadStep(m, n, base + j) for j, n in enumerate(chunk))
    return steps


def mark_group_ends(steps: list[Step | ReadStep], plan: TilePlan) -> list[Step | ReadStep]:
    """Mark each (m, n) group's first K step (START) and last K step (STOP); the groups
    themselves (one bank per open group) are :func:`order_for_reuse`'s."""
    first_k = plan.k_tiles[0].index
    last_k = plan.k_tiles[-1].index
    out: list[Step | ReadStep] = []
    for s in steps:
        if isinstance(s, Step):
            first, last = s.k.index == first_k, s.k.index == last_k
            if first is not s.first or last is not s.last:  # else the same Step, kept
                s = Step(s.k, s.m, s.n, s.bank, first=first, last=last)
        out.append(s)
    return out
