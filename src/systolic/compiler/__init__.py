"""The compiler: lower a logical matmul to a Program, in visible passes.

    check_size(spec, arch)                      # 0. refuse from arithmetic, build nothing
    plan  = tile(spec, arch)                    # 1. array-sized tiles, ragged edges (MX: K padded)
    steps = order_for_reuse(plan, arch)         # 2. one latched weight tile, many moving tiles
    steps = mark_group_ends(steps, plan)        # 3. START ... STOP of each group, one bank each
    insts, layout = CODEGEN[mx](arch, plan, steps)  # 4. by format: dense (cache, two-pass) or MX
    verify(Program(insts), arch)                # 5. every emitted Program is checked

Every pass is a function of its inputs: nothing that changes an output is kept between
calls (codegen shares equal access patterns, frozen objects, across calls). ``check=False``
skips step 5 where the caller knows the output verifies: the compiler's own output does for
every spec the API accepts (tests/test_compiler.py::test_lower_output_verifies), so
``systolic.matmul`` skips it (15% of a 2048^3 bf16 call, issue 20).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..arch import Arch
from ..errors import ArchError
from ..isa import Instruction, PerfMode, Program
from . import codegen
from .codegen import Layout, WeightTileState, calc_flags, emit_nc_matmul
from .schedule import ReadStep, Step, mark_group_ends, order_for_reuse
from .tiling import MAX_MATMULS, MatmulSpec, TilePlan, check_size, is_mx, tile

__all__ = ["CODEGEN", "MAX_MATMULS", "Lowered", "MatmulSpec", "WeightTileState", "calc_flags",
           "emit_nc_matmul", "lower"]

Codegen = Callable[[Arch, TilePlan, list[Step | ReadStep]], tuple[list[Instruction], Layout]]


def _emit_mx(arch: Arch, plan: TilePlan, steps: list[Step | ReadStep]
             ) -> tuple[list[Instruction], Layout]:
    """Pass 4 for the MX formats: :func:`systolic.compiler.codegen_mx.emit`."""
    # imported on the first MX product: a dense one (systolic matmul 2048 2048 2048) then
    # loads neither codegen_mx nor systolic.mx (start-up, issue 20)
    from . import codegen_mx

    return codegen_mx.emit(arch, plan, steps)


# Pass 4 by format: is the spec an MX format?
CODEGEN: dict[bool, Codegen] = {False: codegen.emit, True: _emit_mx}


@dataclass(frozen=True, slots=True)
class Lowered:
    program: Program
    plan: TilePlan
    layout: Layout


def _check_mx(spec: MatmulSpec, arch: Arch) -> None:
    if spec.dtype not in arch.mx_formats:
        raise ArchError(f"{spec.dtype} needs the MX path of gen4 (trn3); {arch.name} is "
                        f"gen{arch.generation}")
    if spec.perf_mode is not PerfMode.NONE:
        raise ArchError("the MX path has no perf mode (seed 000); use perf_mode none")


def lower(spec: MatmulSpec, arch: Arch, *, check: bool = True,
          _stat_slots: int | None = None) -> Lowered:
    """Lower ``spec`` for ``arch``; the Program is verified unless ``check`` is False.

    ``_stat_slots`` (private, dense formats only) gives the dense codegen that many SBUF
    slots for stationary tiles instead of a quarter of SBUF's worth
    (:meth:`~systolic.compiler.codegen.DenseState.for_plan`): systolic.extrapolate times
    the K stand-ins of a product whose stationary tiles thrash that cache from a compile
    whose stand-ins thrash it too (its module docstring says when that is exact).

    Raises :class:`~systolic.errors.ShapeError` for a product past :data:`MAX_MATMULS`
    (before any tile is built) and :class:`~systolic.errors.ArchError` for an MX format on an
    arch without the MX path or with a perf mode."""
    mx = is_mx(spec)
    if mx:
        _check_mx(spec, arch)
        if _stat_slots is not None:
            raise ValueError("_stat_slots applies to the dense codegen only")
    check_size(spec, arch)
    plan = tile(spec, arch)
    steps = order_for_reuse(plan, arch)
    steps = mark_group_ends(steps, plan)
    if _stat_slots is None:
        insts, layout = CODEGEN[mx](arch, plan, steps)
    else:
        insts, layout = codegen.emit(arch, plan, steps, stat_slots=_stat_slots)
    program = Program(insts)
    if check:
        # imported here: a caller that passes check=False (systolic.matmul, the matmul
        # command's timing) never loads the verifier (start-up, issue 20)
        from ..verify import verify

        verify(program, arch, layout.dram_bytes)
    return Lowered(program, plan, layout)
