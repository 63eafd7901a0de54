"""The one adapter between the NKI front end and the compiler's codegen.

Every ``nisa.nc_matmul`` goes through the compiler's own one-matmul step,
:func:`systolic.compiler.codegen.emit_nc_matmul` (the dense codegen calls it for every step
of ``systolic.matmul`` too): the generation's calc-flag bits (:func:`calc_flags`, from the
generation table), the WeightTileState cache (a LoadStationary only when the tile group
does not already hold these weights, untouched since), fp32 as seed 000's two passes
(never cached), fp32r's forced column group, and the tile group from the tile's position.
``nc_matmul_mx`` is always the LdWeightMx + MatmultMx pair with the MX codegen's accumulate
byte (:func:`systolic.compiler.codegen_mx.acc_byte`). This module only keeps the state
between the calls of one kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from ..arch import Arch
from ..compiler.codegen import WeightTileState, calc_flags
from ..compiler.codegen import emit_nc_matmul as codegen_nc_matmul
from ..compiler.codegen_mx import acc_byte
from ..isa import (
    AccessPattern,
    Fp32Pass,
    Instruction,
    LdWeightMx,
    LoadStationary,
    MatMul,
    MatmultMx,
    PerfMode,
    row_group,
)
from ..isa.instructions import BnAggr, BnStats, Iota, Transpose

__all__ = ["LOWER", "MatmulState", "emit_nc_matmul", "emit_nc_matmul_mx", "new_state"]


@dataclass
class MatmulState:
    """What lowering one kernel carries between its matmuls: the arch, the instructions so
    far, the weight-tile cache (the compiler's immutable :class:`WeightTileState`) and the
    number of cache hits."""

    arch: Arch
    out: list[Instruction]
    cache: WeightTileState = field(default_factory=WeightTileState)
    hits: int = 0

    def invalidate(self, written: AccessPattern) -> None:
        """An SBUF write over latched weights' source is an intervening writer (seed 000)."""
        self.cache = self.cache.written(written)


def new_state(arch: Arch, out: list[Instruction]) -> MatmulState:
    return MatmulState(arch, out)


def emit_nc_matmul(st: MatmulState, stationary: AccessPattern, moving: AccessPattern,
                   dst: AccessPattern, *, first: bool, last: bool, perf: PerfMode,
                   column: int, transpose: bool = False) -> None:
    """Append the instructions of one nc_matmul: dst[M, N] (+)= stationary[K, M].T @
    moving[K, N], START on the group's first matmul and STOP on its last; the tile sits at
    array row ``stationary.partition`` and column ``column``.

    ``transpose`` (nc_matmul ``is_transpose``, nc_transpose on the Tensor Engine): from
    NeuronCore-v3 the PE's transpose mode passes the data through bit-accurately
    (trainium2_arch.rst "Built-in Transpose Support"), so an fp32 transpose is ONE pass of
    the fp32 values (LoadStationary + MatMul, fp32_pass full; x * 1 + 0 is exact in fp32),
    not the two bf16 passes of an fp32 matmul. 8- and 16-bit floats are exact through the
    ordinary matmul. NeuronCore-v2 has no transpose mode: the ordinary matmul."""
    m = stationary.dims[-1][1]
    flags = calc_flags(st.arch, first, last)
    insts, st.cache = codegen_nc_matmul(
        st.cache, st.arch, stationary=stationary, moving=moving, dst=dst,
        flags=flags, perf_mode=perf,
        tile_position=(stationary.partition, column), tile_size=(stationary.partitions, m))
    if transpose and stationary.dtype == "fp32" and st.arch.generation >= 3:
        # the first pass of codegen's fp32 pair, whole: the latch and the MatMul of fp32
        latch, mm = insts[0], insts[1]
        assert isinstance(latch, LoadStationary) and isinstance(mm, MatMul)
        insts = [replace(latch, fp32_pass=Fp32Pass.FULL),
                 replace(mm, flags=flags, fp32_pass=Fp32Pass.FULL)]
    if stationary.dtype != "fp32" and not any(isinstance(i, LoadStationary) for i in insts):
        st.hits += 1  # WeightTileState hit: the weights were warm, the MatMul went alone
    st.out.extend(insts)


def emit_nc_matmul_mx(st: MatmulState, stationary: AccessPattern, moving: AccessPattern,
                      stationary_scale: AccessPattern, moving_scale: AccessPattern,
                      dst: AccessPattern, *, first: bool, last: bool, bank: int) -> None:
    """One nc_matmul_mx: always the pair LdWeightMx + MatmultMx (seed 000: the MX path has
    no weight cache), with the compiler's MX accumulate byte (START first, ACCUMULATE after,
    STOP last)."""
    rg = row_group(stationary.partition, stationary.partitions)
    st.out.append(LdWeightMx(stationary, stationary_scale, 0, rg, stationary.dtype))
    st.out.append(MatmultMx(moving, moving_scale, dst, acc_byte(first, last),
                            moving.dtype, stationary.dtype, rg, bank))
    st.cache = WeightTileState()  # the MX load replaced whatever dense tile the PEs held


# -- recorded kinds that carry their own lowering (the NKI breadth of issue 19) --------------
# build.py's emission pass asks this table for every kind it does not lower itself: kind ->
# function of (the recorded Op, its placed dst pattern, its placed source patterns) giving
# the instructions, each naming its engine.
def _lower_vtranspose(op: Any, dst: AccessPattern, srcs: list[AccessPattern]
                      ) -> list[Instruction]:
    return [Transpose(srcs[0], dst, op.attrs["engine"])]


def _lower_bn_stats(op: Any, dst: AccessPattern, srcs: list[AccessPattern]
                    ) -> list[Instruction]:
    return [BnStats(srcs[0], dst)]


def _lower_bn_aggr(op: Any, dst: AccessPattern, srcs: list[AccessPattern]
                   ) -> list[Instruction]:
    return [BnAggr(srcs[0], dst)]


def _lower_iota(op: Any, dst: AccessPattern, srcs: list[AccessPattern]) -> list[Instruction]:
    a = op.attrs
    return [Iota(dst, a["base"], a["partition_step"], a["free_step"])]


LOWER: dict[str, Callable[[Any, AccessPattern, list[AccessPattern]], list[Instruction]]] = {
    "vtranspose": _lower_vtranspose,
    "bn_stats": _lower_bn_stats,
    "bn_aggr": _lower_bn_aggr,
    "iota": _lower_iota,
}
