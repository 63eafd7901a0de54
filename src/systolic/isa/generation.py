"""What differs between the Tensor Engine generations, as one table (seed 000).

The compiler (which calc bits it sets), the verifier (which calc bytes a Program may hold)
and the bundle encoder (which bytes it writes, and whether it writes the calc byte at all)
all read :data:`GENERATIONS`; none of them states a per-generation rule of its own.

Sources, seed 000 "The Flag Byte" and "The MX Accumulate Byte":

* CoreV2 (gen2) ORs only START (1) and STOP (2) into byte +0x2B, always.
* CoreV3 (gen3) adds ACCUMULATE (4): the 3-bit field. Its generateMatMulAccumulateFlag
  opens with ``cmp [module+0xAC], 0x28; jg``: above arch level 40 it returns without
  touching +0x2B, and the accumulate window is managed by the explicit-memset path instead.
* CoreV4 (gen4) reuses gen3's dense path; its accumulate bytes must pass
  checkAccumulationFlag's {0, 1, 2, 3, 4, 6} (dense and MX alike: the MX byte is copied
  raw, with no arch gate, and validated by the same check).

And the perf modes (seed 000 GOTCHA, "The Perf Modes"): DoubleColumn and DoublePixel are
validated but no encoder was seen emitting their bundle bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ..errors import ArchError
from .fields import CalcFlags, PerfMode

__all__ = ["GENERATIONS", "UNENCODED_PERF_MODES", "GenerationRules", "rules"]

# Perf modes whose distinct bundle bytes no encoder was seen emitting (seed 000 GOTCHA).
UNENCODED_PERF_MODES = frozenset({PerfMode.DOUBLE_COLUMN, PerfMode.DOUBLE_PIXEL})


@dataclass(frozen=True, slots=True)
class GenerationRules:
    """One generation's rules for the calc byte and the MX path."""

    generation: int
    core: str  # the seed's name of the code generator
    # the calc bits the generator writes (getCalcStart / Stop / Accu)
    calc_bits: CalcFlags
    # the calc bytes a bundle may carry, and why the others are refused
    calc_bytes: frozenset[int]
    calc_why: str
    # the arch level above which the calc byte is not written at all (None: always written)
    calc_gate_level: int | None
    # the MX formats of the LdWeightMx / MatmultMx pair (empty: the pair does not exist)
    mx_formats: tuple[str, ...]
    # the row / column tile sizes nc_matmul's tile_size takes (FACTS: 2 x 64 rows on v2,
    # plus 4 x 32 on v3 and later; nki.isa.nc_matmul)
    tile_sizes: tuple[int, ...]

    @property
    def mx(self) -> bool:
        """The LdWeightMx / MatmultMx pair exists (seed 000: CoreV4 alone)."""
        return bool(self.mx_formats)

    def writes_calc_byte(self, arch_level: int) -> bool:
        """False where seed 000's gen3 gate returns without touching +0x2B."""
        return self.calc_gate_level is None or arch_level <= self.calc_gate_level

    def writes_accumulate(self, arch_level: int) -> bool:
        return CalcFlags.ACCUMULATE in self.calc_bits and self.writes_calc_byte(arch_level)

    def calc_flags(self, first: bool, last: bool, arch_level: int) -> CalcFlags:
        """The flags of one MatMul of an accumulation group: START on the first, STOP on the
        last, ACCUMULATE on every other one where the generation writes that bit."""
        f = CalcFlags.NONE
        if first:
            f |= CalcFlags.START
        if last:
            f |= CalcFlags.STOP
        if not first and self.writes_accumulate(arch_level):
            f |= CalcFlags.ACCUMULATE
        return f

    def calc_problem(self, flags: int, arch_level: int) -> str:
        """Why ``flags`` cannot be a calc byte on this generation at ``arch_level``, or ""."""
        value = int(flags)
        if value not in self.calc_bytes:
            if value & ~int(self.calc_bits):
                return f"the ACCUMULATE bit cannot be written: {self.calc_why}"
            return (f"accumulate byte {value} is not one of {sorted(self.calc_bytes)}: "
                    f"{self.calc_why}")
        if value & CalcFlags.ACCUMULATE and not self.writes_accumulate(arch_level):
            return (f"the ACCUMULATE bit cannot be written: gen{self.generation} at arch level "
                    f"{arch_level} > {self.calc_gate_level} omits the accumulate byte "
                    f"(seed 000)")
        return ""

    def calc_byte_problem(self, arch_level: int) -> str:
        """Why no calc byte can be encoded at ``arch_level``, or "" where it is written."""
        if self.writes_calc_byte(arch_level):
            return ""
        return (f"{self.core} at arch level {arch_level} > {self.calc_gate_level} does not "
                f"write the calc byte +0x2B (seed 000: generateMatMulAccumulateFlag returns "
                f"without touching it); the accumulate window is then managed by the "
                f"explicit-memset path, which this project does not lower. Encode for an arch "
                f"level of at most {self.calc_gate_level}")


_ALL_BITS = CalcFlags.START | CalcFlags.STOP | CalcFlags.ACCUMULATE

GENERATIONS: Mapping[int, GenerationRules] = MappingProxyType({
    2: GenerationRules(2, "CoreV2", CalcFlags.START | CalcFlags.STOP, frozenset(range(4)),
                       "gen2 bundles carry only START and STOP", None, mx_formats=(),
                       tile_sizes=(64, 128)),
    3: GenerationRules(3, "CoreV3", _ALL_BITS, frozenset(range(8)),
                       "the calc field is 3 bits (START 1, STOP 2, ACCUMULATE 4)", 40,
                       mx_formats=(), tile_sizes=(32, 64, 128)),
    # MX formats (FACTS "Hardware", trainium3 guide): MXFP8 (e4m3fn / e5m2 elements) and
    # MXFP4 (e2m1), the dtypes table's "mx" family
    4: GenerationRules(4, "CoreV4", _ALL_BITS, frozenset({0, 1, 2, 3, 4, 6}),
                       "gen4 accumulate bytes must be one of {0,1,2,3,4,6} (seed 000 "
                       "checkAccumulationFlag)", None,
                       mx_formats=("mxfp8_e4m3", "mxfp8_e5m2", "mxfp4"),
                       tile_sizes=(32, 64, 128)),
})


def rules(generation: int) -> GenerationRules:
    """The rules of ``generation`` (2, 3 or 4, as ``Arch.generation``)."""
    if isinstance(generation, bool) or generation not in GENERATIONS:
        raise ArchError(f"generation must be 2, 3 or 4 (arch.generation), not {generation!r}")
    return GENERATIONS[generation]
