"""The compiler: lower a logical matmul to a Program, in four visible passes.

    plan  = tile(spec, arch)                 # 1. array-sized tiles, ragged edges
    steps = order_for_reuse(plan, arch)      # 2. one latched weight tile, many moving tiles
    steps = legalize_groups(steps, plan)     # 3. START ... STOP groups, one bank each
    insts = codegen_for(arch, plan).emit(steps)  # 4. per generation: cache, two-pass, DMA
    verify(Program(insts), arch)             # 5. every emitted Program is checked
"""

from __future__ import annotations

from dataclasses import dataclass

from ..arch import Arch
from ..errors import ShapeError
from ..isa import Program
from ..verify import verify
from .codegen import Layout, codegen_for
from .schedule import legalize_groups, order_for_reuse
from .tiling import MatmulSpec, TilePlan, tile

__all__ = ["MAX_MATMULS", "Lowered", "MatmulSpec", "lower"]

# Lowering runs at tens of thousands of instructions a second: past this many MatMuls a
# product would take tens of minutes and gigabytes of instruction objects.
MAX_MATMULS = 1 << 24


@dataclass(frozen=True, slots=True)
class Lowered:
    program: Program
    plan: TilePlan
    layout: Layout


def lower(spec: MatmulSpec, arch: Arch, *, check: bool = True) -> Lowered:
    """Lower ``spec`` for ``arch``; the Program is verified unless ``check`` is False."""
    if spec.dtype.startswith("mx"):
        from .mx_lower import lower_mx

        return lower_mx(spec, arch, check=check)
    plan = tile(spec, arch)
    count = len(plan.k_tiles) * len(plan.m_tiles) * len(plan.n_tiles)
    if count > MAX_MATMULS:
        raise ShapeError(
            f"{spec.m}x{spec.k}x{spec.n} lowers to {count:,} MatMuls; this Python model "
            f"lowers at most {MAX_MATMULS:,} (tens of minutes): model a slice of the product "
            f"(fewer M or N tiles) and scale its cycles")
    steps = order_for_reuse(plan, arch)
    steps = legalize_groups(steps, plan)
    gen = codegen_for(arch, plan)
    program = Program(gen.emit(steps))
    if check:
        verify(program, arch, gen.layout.dram_bytes)
    return Lowered(program, plan, gen.layout)
