"""Pass 1, tiling: cut a [M, K] x [K, N] product into array-sized tiles.

Stationary tiles come from a.T ([K, M] pieces: K <= rows x fold partitions, M <= cols
columns), moving tiles from b ([K, N] pieces, N <= one PSUM bank of the accumulator).
Ragged edges are smaller tiles; a ragged odd K tile under DoubleRow falls back to perf mode
none (DoubleRow needs pairs of contraction rows).

An MX product (gen4) pads K up to whole blocks of 32 with zeros (a zero element adds nothing
to a block's dot product and changes no other element's code, so the padded product is the
unpadded one) and cuts the padded K into tiles of every partition x 4 slots (512 logical
elements); N tiles hold one fp32 PSUM bank.

:func:`matmul_count` is the number of MatMuls in closed form, so a product too big to lower
is refused from arithmetic before a single tile is built (:func:`check_size`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from ..arch import Arch
from ..dtypes import accumulator_format, get_format
from ..errors import ShapeError
from ..isa import PerfMode

__all__ = ["MAX_MATMULS", "KTile", "MatmulSpec", "Span", "TilePlan", "check_size",
           "matmul_count", "padded_k", "spans", "tile"]

# Lowering runs at tens of thousands of instructions a second: past this many MatMuls a
# product would take tens of minutes and gigabytes of instruction objects.
MAX_MATMULS = 1 << 24


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

    def __post_init__(self) -> None:
        # issue 22: MatmulSpec(128, 256, 512, "fp8_e4m3", "double_row") kept the string, and
        # lower() failed deep in tiling on str.k_fold; a spelling or an int is parsed here
        # (an unknown one is a one-line ShapeError naming the modes)
        if not isinstance(self.perf_mode, PerfMode):
            try:
                mode = PerfMode.parse(self.perf_mode)
            except (ValueError, TypeError, AttributeError):  # 7, 1.5, (0, 0): not a mode
                names = ", ".join(m.spelling for m in PerfMode)
                raise ShapeError(f"unknown perf mode {self.perf_mode!r}; choose one of "
                                 f"{names}") from None
            object.__setattr__(self, "perf_mode", mode)


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

    @property
    def is_mx(self) -> bool:
        return is_mx(self.spec)


def is_mx(spec: MatmulSpec) -> bool:
    return get_format(spec.dtype).kind == "mx"


def padded_k(k: int) -> int:
    """K rounded up to whole MX blocks of 32."""
    # systolic.mx is imported by MX products only: a dense one (systolic matmul 2048 2048
    # 2048) does not load it (start-up, issue 20); so in _k_tile_count and _tile_mx
    from ..mx.quantize import BLOCK

    return -(-k // BLOCK) * BLOCK


def spans(total: int, size: int) -> tuple[Span, ...]:
    """[0, total) cut into spans of ``size``, the last one ragged."""
    return tuple(Span(i, s, min(size, total - s)) for i, s in enumerate(range(0, total, size)))


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _bank_elems(spec: MatmulSpec, arch: Arch) -> int:
    acc = "fp32" if is_mx(spec) else accumulator_format(spec.dtype)
    return arch.psum_bank_bytes // get_format(acc).container_bytes


def _k_tile_count(spec: MatmulSpec, arch: Arch) -> int:
    """K tiles :func:`tile` makes, from arithmetic (the same cases as its loop)."""
    if is_mx(spec):
        from ..mx.layout import tile_k

        return _ceil(padded_k(spec.k), tile_k(arch))
    fold = spec.perf_mode.k_fold
    full, rest = divmod(spec.k, arch.rows * fold)
    if rest == 0:
        return full
    return full + (1 if rest % fold == 0 or rest <= arch.rows else 2)


def matmul_count(spec: MatmulSpec, arch: Arch) -> int:
    """MatMuls (MatmultMx for MX) the lowering of ``spec`` emits: K x M x N tiles."""
    return (_k_tile_count(spec, arch) * _ceil(spec.m, arch.cols)
            * _ceil(spec.n, _bank_elems(spec, arch)))


def check_size(spec: MatmulSpec, arch: Arch) -> None:
    """Raise :class:`ShapeError` if ``spec`` lowers to more than :data:`MAX_MATMULS`."""
    count = matmul_count(spec, arch)
    if count > MAX_MATMULS:
        what = "MatmultMx" if is_mx(spec) else "MatMuls"
        raise ShapeError(
            f"{spec.m}x{spec.k}x{spec.n} lowers to {count:,} {what}; this Python model "
            f"lowers at most {MAX_MATMULS:,} (tens of minutes): model a slice of the product "
            f"(fewer M or N tiles) and scale its cycles")


@lru_cache(maxsize=64)
def tile(spec: MatmulSpec, arch: Arch) -> TilePlan:
    """Cut ``spec`` into K, M and N tiles for ``arch`` (MX formats: over the padded K).
    Kept for the last few specs (a TilePlan is immutable): timing a product asks for its
    plan two to four times (extrapolate.py's estimate, the compiler, the slices)."""
    if is_mx(spec):
        return _tile_mx(spec, arch)
    fold = spec.perf_mode.k_fold
    k_step = arch.rows * fold
    pieces: list[tuple[int, int, PerfMode]] = []
    for span in spans(spec.k, k_step):
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
        m_tiles=spans(spec.m, arch.cols),
        n_tiles=spans(spec.n, arch.psum_bank_bytes // acc_isz),
        itemsize=get_format(spec.dtype).container_bytes,
        acc_dtype=acc,
        acc_itemsize=acc_isz,
    )


def _tile_mx(spec: MatmulSpec, arch: Arch) -> TilePlan:
    """K tiles of up to :func:`~systolic.mx.layout.tile_k` logical elements over the padded K
    (KTile sizes are logical K; a tile spans size/4 partitions), M tiles of the array's
    columns, N tiles of one fp32 PSUM bank."""
    from ..mx.layout import tile_k

    k_tiles = tuple(KTile(s.index, s.start, s.size, PerfMode.NONE)
                    for s in spans(padded_k(spec.k), tile_k(arch)))
    return TilePlan(spec=spec, k_tiles=k_tiles, m_tiles=spans(spec.m, arch.cols),
                    n_tiles=spans(spec.n, _bank_elems(spec, arch)),
                    itemsize=get_format(spec.dtype).container_bytes, acc_dtype="fp32",
                    acc_itemsize=4)
