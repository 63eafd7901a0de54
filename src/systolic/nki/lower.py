"""The one adapter between the NKI front end and the compiler's codegen.

``emit_nc_matmul(state, ...)`` lowers ONE ``nisa.nc_matmul`` the way the compiler's codegen
lowers one step of a product: the generation's calc-flag bits (:meth:`Codegen.flags`: gen2
START/STOP only, gen3 ACCUMULATE unless the arch level is above 40, gen4's valid byte set),
the WeightTileState cache (a LoadStationary only when the (row group, column group) pair
does not already hold these weights, untouched since), and fp32 as seed 000's two passes
(LoadStationary hi, MatMul, LoadStationary lo, MatMul, then the cache forgotten). The
compiler is getting a public one-matmul step; when it lands, this module is the only place
that changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..arch import Arch
from ..compiler.codegen import Codegen, _rect_overlap, codegen_for
from ..compiler.mx_lower import MxCodegen
from ..compiler.tiling import MatmulSpec, tile
from ..isa import (
    AccessPattern,
    Instruction,
    LdWeightMx,
    LoadStationary,
    MatMul,
    MatmultMx,
    PerfMode,
    col_group,
    row_group,
)

__all__ = ["MatmulState", "emit_nc_matmul", "emit_nc_matmul_mx", "new_state"]


@dataclass
class MatmulState:
    """The codegen (flags per generation) plus the weight-tile cache of latched tiles:
    (row group, col group) -> (SBUF pattern, perf mode, rectangle on the array)."""

    gen: Codegen
    out: list[Instruction]
    cache: dict[tuple[int, int], tuple[AccessPattern, PerfMode, tuple[int, int, int, int]]] = (
        field(default_factory=dict))
    hits: int = 0

    def invalidate(self, written: AccessPattern) -> None:
        """An SBUF write over latched weights' source is an intervening writer (seed 000)."""
        if not self.cache:
            return
        lo, hi = written.free_bytes_span
        p0, p1 = written.partition, written.partition + written.partitions
        for key, (ap, _, _) in list(self.cache.items()):
            a, b = ap.free_bytes_span
            if ap.partition < p1 and p0 < ap.partition + ap.partitions and a < hi and lo < b:
                del self.cache[key]


def new_state(arch: Arch, out: list[Instruction]) -> MatmulState:
    # The codegen is built for a one-element product: only its per-generation flag rules
    # are used here (its slot caches belong to systolic.matmul's own operand layout).
    gen = codegen_for(arch, tile(MatmulSpec(1, 1, 1, "bf16"), arch))
    return MatmulState(gen, out)


def _load(st: MatmulState, sb: AccessPattern, col: int, m: int, perf: PerfMode,
          half: str) -> None:
    rg, cg = row_group(sb.partition, sb.partitions), col_group(col, m)
    rect = (sb.partition, sb.partitions, col, m)
    hit = st.cache.get((rg, cg))
    if half == "full" and hit is not None and hit == (sb, perf, rect):
        st.hits += 1
        return  # WeightTileState hit: the weights are warm, the MatMul goes alone
    st.out.append(LoadStationary(sb, col, rg, cg, perf, half))
    for key in [k for k, e in st.cache.items() if _rect_overlap(e[2], rect)]:
        del st.cache[key]
    if half == "full":
        st.cache[(rg, cg)] = (sb, perf, rect)


def emit_nc_matmul(st: MatmulState, stationary: AccessPattern, moving: AccessPattern,
                   dst: AccessPattern, *, first: bool, last: bool, perf: PerfMode,
                   column: int) -> None:
    """Append the instructions of one nc_matmul: dst[M, N] (+)= stationary[K, M].T @
    moving[K, N], START on the group's first matmul and STOP on its last."""
    m = stationary.dims[-1][1]
    row, rows = moving.partition, moving.partitions
    rg, cg = row_group(row, rows), col_group(column, m)
    sdt = stationary.dtype

    def matmul(flags_first: bool, flags_last: bool, two_pass: int) -> None:
        st.out.append(MatMul(moving, dst, st.gen.flags(flags_first, flags_last), sdt, row, rg,
                             cg, perf, two_pass=two_pass))

    if sdt == "fp32":
        _load(st, stationary, column, m, perf, "hi")
        matmul(first, False, 1)
        _load(st, stationary, column, m, perf, "lo")
        matmul(False, last, 2)
        st.cache.clear()
        return
    _load(st, stationary, column, m, perf, "full")
    matmul(first, last, 0)


def emit_nc_matmul_mx(st: MatmulState, stationary: AccessPattern, moving: AccessPattern,
                      stationary_scale: AccessPattern, moving_scale: AccessPattern,
                      dst: AccessPattern, *, first: bool, last: bool, bank: int) -> None:
    """One nc_matmul_mx: always the pair LdWeightMx + MatmultMx (seed 000: the MX path has
    no weight cache), with the compiler's MX accumulate byte (START first, ACCUMULATE after,
    STOP last)."""
    rg = row_group(stationary.partition, stationary.partitions)
    st.out.append(LdWeightMx(stationary, stationary_scale, 0, rg, stationary.dtype))
    st.out.append(MatmultMx(moving, moving_scale, dst, MxCodegen.acc_byte(first, last),
                            moving.dtype, stationary.dtype, rg, bank))
    st.cache.clear()  # the MX load replaced whatever dense tile the PEs held
