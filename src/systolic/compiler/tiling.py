"""Pass 1, tiling: cut a [M, K] x [K, N] product into array-sized tiles.

Stationary tiles come from a.T ([K, M] pieces: K <= rows x fold partitions, M <= cols
columns), moving tiles from b ([K, N] pieces, N <= one PSUM bank of the accumulator).
Ragged edges are smaller tiles; a ragged odd K tile under DoubleRow falls back to perf mode
none (DoubleRow needs pairs of contraction rows).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..arch import Arch
from ..dtypes import accumulator_format, get_format
from ..isa import PerfMode

__all__ = ["KTile", "MatmulSpec", "Span", "TilePlan", "tile"]


@dataclass(frozen=True, slots=True)
class MatmulSpec:
    """One logical product a[M, K] @ b[K, N] in one format."""

    m: int
    k: int
    n: int
    dtype: str = "bf16"
    perf_mode: PerfMode = PerfMode.NONE
    zp_a: int = 0
    zp_b: int = 0


@dataclass(frozen=True, slots=True)
class Span:
    index: int
    start: int
    size: int


@dataclass(frozen=True, slots=True)
class KTile:
    index: int
    start: int  # first contraction element
    size: int  # contraction elements
    perf_mode: PerfMode

    @property
    def fold(self) -> int:
        return self.perf_mode.k_fold

    @property
    def partitions(self) -> int:
        return self.size // self.fold


@dataclass(frozen=True, slots=True)
class TilePlan:
    spec: MatmulSpec
    k_tiles: tuple[KTile, ...]
    m_tiles: tuple[Span, ...]
    n_tiles: tuple[Span, ...]
    itemsize: int
    acc_dtype: str
    acc_itemsize: int


def _spans(total: int, size: int) -> tuple[Span, ...]:
    return tuple(Span(i, s, min(size, total - s)) for i, s in enumerate(range(0, total, size)))


def tile(spec: MatmulSpec, arch: Arch) -> TilePlan:
    fold = spec.perf_mode.k_fold
    k_step = arch.rows * fold
    pieces: list[tuple[int, int, PerfMode]] = []
    for span in _spans(spec.k, k_step):
        if span.size % fold == 0:
            pieces.append((span.start, span.size, spec.perf_mode))
        elif span.size <= arch.rows:  # odd ragged tile that fits unfolded
            pieces.append((span.start, span.size, PerfMode.NONE))
        else:  # odd and too tall to unfold: the even part folded, the last row alone
            pieces.append((span.start, span.size - 1, spec.perf_mode))
            pieces.append((span.start + span.size - 1, 1, PerfMode.NONE))
    k_tiles = [KTile(i, start, size, mode) for i, (start, size, mode) in enumerate(pieces)]
    acc = accumulator_format(spec.dtype)
    acc_isz = get_format(acc).container_bytes
    return TilePlan(
        spec=spec,
        k_tiles=tuple(k_tiles),
        m_tiles=_spans(spec.m, arch.cols),
        n_tiles=_spans(spec.n, arch.psum_bank_bytes // acc_isz),
        itemsize=get_format(spec.dtype).container_bytes,
        acc_dtype=acc,
        acc_itemsize=acc_isz,
    )
