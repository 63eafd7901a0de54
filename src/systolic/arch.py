"""Hardware descriptions: one frozen dataclass, four named presets.

Every number the simulators, the compiler or the timing model use lives here with a name
and a comment naming its source. Sources, abbreviated:

* seed 000 — ``shared/seeds/000_*.txt`` (PE engine: compiler + reference model).
* seed 003 — ``shared/seeds/003_*.txt`` (Tensor Engine cycle by cycle).
* FACTS — ``shared/FACTS.md`` (AWS Neuron architecture guides, NKI docs), each with its
  own upstream source.
* "unsure" marks a number no public source settles; it is a named field so that a user
  can change it with :func:`dataclasses.replace`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType

from .dtypes import get_format
from .errors import ArchError
from .isa.fields import PerfMode
from .isa.generation import rules

__all__ = ["ARCHS", "Arch", "get_arch"]

# Formats every generation's dense path takes (FACTS: nki.isa docs list fp8_e4m3, fp8_e5m2,
# bf16, fp16, tf32, fp32; fp32r is the reference model's rounded-fp32 operand, seed 000;
# the integer formats are the zero-point path of seed 000's matmult formula).
_DENSE_COMMON = (
    "bf16", "fp16", "fp32", "fp32r", "tf32", "fp8_e4m3", "fp8_e5m2", "int8", "uint8", "int16",
)


@dataclass(frozen=True, slots=True)
class Arch:
    """One NeuronCore's Tensor Engine and the memories around it.

    Units: cycles are TensorE clock cycles; bytes are per partition unless named otherwise.
    """

    name: str
    generation: int  # 2 = NeuronCore-v2 (trn1/inf2), 3 = v3 (trn2), 4 = v4 (trn3); seed 000
    # The module arch level that seed 000's gen3 accumulate-flag gate compares with 40
    # ("cmp [module+0xAC], 0x28; jg"). The value per preset is unsure: MX lives at exactly
    # level 40 (seed 000), so gen4 = 40; gen2/gen3 are given lower levels so that the gate
    # is off on the presets, and can be raised with dataclasses.replace to exercise it.
    arch_level: int

    # Geometry: 128x128 PEs in 32-lane quadrants, identical on every generation (seed 000,
    # "Partition Geometry"; seed 003 footnote 1).
    rows: int = 128
    cols: int = 128
    quadrant: int = 32

    # PSUM: 16 KiB per partition = 8 banks x 2 KiB = 512 fp32 per bank (FACTS, NKI guide).
    psum_banks: int = 8
    psum_bank_bytes: int = 2048
    # SBUF bytes per partition (FACTS: 192 KiB v2, 224 KiB v3, 256 KiB v4 derived).
    sbuf_bytes: int = 192 * 1024

    # TensorE clock in Hz (FACTS; seed 003: 2.8 GHz trn1/inf2, 2.4 GHz trn2).
    clock_hz: float = 2.8e9
    # Minimum interval between back-to-back MatMuls, cycles (seed 003 / FACTS: 64 on
    # NeuronCore-v2; unsure for v3/v4, kept at 64).
    mm_init_latency: int = 64
    # Fast LoadStationary is "up to 4x" quicker than a MatMul of the same free size:
    # 128 columns load in about 32 cycles (FACTS, NKI performance guide).
    ldweights_speedup: int = 4
    # fp32 costs about 4x bf16 (seed 003 footnote 11). The compiler lowers fp32 to two
    # passes (seed 000), so each pass streams at half rate: 2 x 2 = 4.
    fp32_pass_slowdown: int = 2
    # PSUM read-out: another engine copies a finished bank out before it can be reused.
    # Modelled as elements per partition per TensorE cycle. Unsure: taken as one fp32
    # element per partition per cycle of a ~1.4 GHz (v2) / ~0.96 GHz (v3/v4) engine,
    # i.e. 0.5 / 0.4 elements per TensorE cycle.
    readout_elems_per_cycle: float = 0.5
    # Fixed cost of one read-out instruction on that engine, cycles (unsure; instruction
    # dispatch overhead of the reading engine).
    readout_fixed_cycles: int = 64

    # Device-memory (HBM) bandwidth per NeuronCore, bytes/s, for the roofline's memory slope.
    # Unsure: the chip's published HBM bandwidth divided by its NeuronCores (trn1/inf2
    # 820 GB/s over 2 cores; trn2 2.9 TB/s over 8; trn3 4.9 TB/s over 8).
    hbm_bytes_per_s: float = 410e9

    formats: tuple[str, ...] = _DENSE_COMMON
    perf_modes: tuple[str, ...] = ("none",)
    # MACs per PE per cycle, relative to one bf16 MAC, by format and perf mode. fp32 is a
    # quarter of bf16 (seed 003, FACTS peaks 23 vs 92); fp8 DoubleRow twice bf16 (FACTS:
    # 158 vs 79 on trn2); MX four times bf16 (FACTS: 315 vs 79 on trn3).
    rate_fp32: float = 0.25
    rate_double_row: float = 2.0
    rate_mx: float = 4.0

    # -- the whole NeuronCore (timing/core.py; FACTS "The whole NeuronCore": the trn1/trn2/trn3
    # architecture guides' engine tables, the NKI DMA bandwidth guide, the nki.isa pages'
    # "estimated instruction cost" sections). Times are in ns, clocks in Hz (integers, so
    # that timing/core.py can count time in exact ticks of their least common multiple).
    # Engine clocks (arch guides, engine tables): v2 1.12 / 1.4 / 1.4 GHz.
    vector_hz: int = 1_120_000_000
    scalar_hz: int = 1_400_000_000
    gpsimd_hz: int = 1_400_000_000
    # Engine instruction costs are the "Estimated instruction cost" formulas of the nki.isa
    # pages (aws-neuron-sdk nki/api/nki/isa/__init__.py at 7c165a3e; timing/costs.py has one
    # row per instruction kind). MIN_II, the minimum initiation interval: "roughly 64
    # engine cycles".
    engine_min_ii: int = 64
    # "add a static instruction overhead of 100 engine cycles" when an instruction depends
    # on the output tile of the previous instruction (trainium_inferentia2_arch.rst, Vector
    # engine cost model): a read-after-write on the same engine waits this long.
    engine_dep_overhead: int = 100
    # "Initiating a tensor access request from an engine to its SBUF/PSUM read/write
    # interface incurs a static overhead approximately 60 cycles on NeuronCore-v2 ...
    # Compute engines can typically hide some of this latency through instruction level
    # parallelism" (trainium_inferentia2_arch.rst ~L773): modelled as latency before another
    # engine sees an engine instruction's output, never as occupancy (unsure on v3/v4).
    engine_access_overhead: int = 60
    # GpSimd instruction start-up, cycles ("GPSIMD_START ... roughly 150 engine cycles":
    # iota, affine_select).
    gpsimd_start: int = 150
    # Vector engine performance mode (trainium2_arch.rst "Vector Engine Performance Mode"):
    # the formats it applies to (v2 has none). tensor_copy / tensor_scalar 4x SBUF->SBUF
    # contiguous, 2x strided or with PSUM; tensor_tensor 2x with both inputs in SBUF.
    # trn3 (trainium3_arch.rst) keeps it and its engine table adds fp8 to the 512-wide
    # formats (unsure for fp8's mode).
    vector_perf_formats: tuple[str, ...] = ()
    # Scalar engine 2x performance mode for BF16/FP16 tensor_copy / tensor_scalar /
    # activation data (trainium3_arch.rst "Performance mode"; v2/v3 have none).
    scalar_perf_formats: tuple[str, ...] = ()
    # On NeuronCore-v2, Vector and GpSimd cannot access SBUF in parallel, and Vector and
    # Scalar cannot access PSUM in parallel; v3 lifts both except that Vector and Scalar
    # must not collide on the same PSUM bank (trainium2_arch.rst, memory hierarchy).
    shared_engine_ports: bool = True
    # Cross-engine semaphore wait: an instruction that waits for another engine's result
    # starts this long after that result (unsure: the docs name the semaphores but give no
    # latency; taken as 64 ns).
    sync_ns: float = 64.0
    # DMA (nki-dma-overview.rst): 16 DMA engines per NeuronCore, 16 queues per engine; a
    # transfer is submitted to one queue ID on the engines it uses, FIFO within a queue on
    # one engine, round-robin between queues (v2/v3; QoS classes on v4).
    dma_engines: int = 16
    dma_queues_per_engine: int = 16
    # Bandwidth per engine, bytes/ns: the overview's table (Trainium1 17, Trainium2 23,
    # Trainium3 33 B/ns). Its text says 27.2 GB/s per engine on v2/v3 and 38.4 on v4: a
    # conflict kept here (``dma_engine_bytes_per_ns_text``); the table is used, because its
    # v3 figure agrees with the overview's own measurement (32 KiB in 1,416 ns = 23.1 B/ns):
    # calibrated, a choice made on that published latency (docs/VALIDATION.md). Unsure.
    dma_engine_bytes_per_ns: float = 17.0
    dma_engine_bytes_per_ns_text: float = 27.2
    # "each DMA engine is typically responsible for moving data for eight SBUF partitions
    # (128 partitions / 16 DMA engines)" (overview): partitions p..p+7 go to one engine.
    dma_partitions_per_engine: int = 8
    # Throughput against bytes per descriptor (the contiguous bytes of one partition), as a
    # fraction of the plateau: the overview's figure nki-dma-intro-1.jpg for 128 partitions,
    # read at its points (FACTS "Compiler-side and cost facts"; the y-axis is unlabelled).
    # Interpolated linearly in log2(bytes); below the first point the time per descriptor is
    # constant (the figure's flat region: "a constant time per DMA").
    dma_curve: tuple[tuple[int, float], ...] = (
        (32, 0.014), (128, 0.05), (256, 0.10), (512, 0.21), (1024, 0.42), (2048, 0.81),
        (4096, 0.97), (32768, 1.0))
    # Fixed cost of one DMA: descriptor setup, synchronisation and semaphore-to-start, about
    # 1300 ns (nki-dma-bandwidth-guide.rst; FACTS). Latency from ready to first byte; the
    # engines keep moving other transfers meanwhile (else >= 4 KiB could not saturate).
    dma_fixed_ns: float = 1300.0
    # A transposing DMA runs at this fraction of copy throughput: HBM->SBUF "up to 90%",
    # SBUF->SBUF "up to 50%" (trainium2_arch.rst "DMA Transpose"; unsure on v2 and v4).
    dma_transpose_efficiency: float = 0.9
    dma_transpose_sbuf_efficiency: float = 0.5
    # Descriptor generation (nki-dge.rst): static patterns use descriptors pre-computed on
    # the host (dge none: "zero on-device overhead"); hardware DGE (v3+, two instances per
    # core) takes "approximately 600 ns" per DMA instruction; software DGE runs on GpSimd,
    # whose cost the docs do not give (unsure: taken as MIN_II_DYNAMIC, "roughly 600 engine
    # cycles", of the dynamic tensor_copy formulas).
    dge_hw_ns: float = 600.0
    dge_instances: int = 0
    dge_sw_cycles: int = 600
    # The engine that evacuates PSUM for a ReadOut before its DMA store (unsure: NKI kernels
    # use tensor_copy on Vector, the default engine of nisa.tensor_copy).
    readout_engine: str = "vector"

    psum_bytes: int = field(init=False)
    # the hash, computed once: a frozen dataclass's generated __hash__ runs in Python over
    # every field (~5 us for these 46) at every lookup keyed by an Arch, which the timing
    # and the compiler do per instruction (issue 20)
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "psum_bytes", self.psum_banks * self.psum_bank_bytes)
        self._rehash()

    def _rehash(self) -> None:
        """The hash the dataclass would generate, from the fields that compare, kept."""
        object.__setattr__(self, "_hash", hash(tuple(
            getattr(self, f.name) for f in fields(self) if f.compare)))

    def __hash__(self) -> int:
        return self._hash

    def __setstate__(self, state: list[object]) -> None:
        # what dataclass unpickles (its __getstate__ writes every field, the hash too), then
        # the hash made again: string hashes differ between processes (sweep workers and
        # Dask receive Archs by pickle)
        for f, value in zip(fields(self), state, strict=True):
            object.__setattr__(self, f.name, value)
        self._rehash()

    # -- derived -----------------------------------------------------------------------
    @property
    def pes(self) -> int:
        return self.rows * self.cols

    @property
    def tick_hz(self) -> int:
        """The whole-core timing's time unit: the least common multiple of the engine
        clocks, so every engine cycle is a whole number of ticks (timing/core.py)."""
        from math import lcm

        return lcm(int(self.clock_hz), self.vector_hz, self.scalar_hz, self.gpsimd_hz)

    @property
    def mx_formats(self) -> tuple[str, ...]:
        """The MX formats of this generation (the generation table; empty before gen4)."""
        return rules(self.generation).mx_formats

    @property
    def tile_sizes(self) -> tuple[int, ...]:
        """The row / column tile sizes of nc_matmul's tile_size (the generation table)."""
        return rules(self.generation).tile_sizes

    def supports_format(self, fmt: str) -> bool:
        return fmt in self.formats or fmt in self.mx_formats

    def supports_perf_mode(self, mode: str) -> bool:
        return mode in self.perf_modes

    def rate(self, fmt: str, perf_mode: str = "none") -> float:
        """MACs per PE per cycle relative to bf16, for a format and perf mode: the dtypes
        table says the format's family and whether it costs as fp32, the Arch the rates."""
        f = get_format(fmt)
        if f.family == "mx":
            return self.rate_mx
        if f.fp32_cost:
            return self.rate_fp32
        if PerfMode.parse(perf_mode).k_fold == 2 and f.family == "fp8":
            return self.rate_double_row
        return 1.0

    def peak_flops(self, fmt: str = "bf16", perf_mode: str = "none") -> float:
        """Peak FLOP/s: rows x cols x 2 FLOPs per MAC x clock x rate (seed 003)."""
        return self.rows * self.cols * 2 * self.clock_hz * self.rate(fmt, perf_mode)

    def describe(self) -> dict[str, object]:
        return {
            "name": self.name,
            "generation": self.generation,
            "rows": self.rows,
            "cols": self.cols,
            "clock_ghz": self.clock_hz / 1e9,
            "psum_banks": self.psum_banks,
            "psum_bank_bytes": self.psum_bank_bytes,
            "sbuf_bytes_per_partition": self.sbuf_bytes,
            "formats": list(self.formats) + list(self.mx_formats),
            "perf_modes": list(self.perf_modes),
        }


_GEN3_PERF = ("none", "double_row", "double_column", "double_pixel", "double_row_sw_interleave")

_PRESETS: dict[str, Arch] = {
    # Trainium1: NeuronCore-v2, 2.8 GHz, 192 KiB SBUF per partition, no perf modes
    # (FACTS; nki.isa.nc_matmul: "On NeuronCore-v2, performance mode is not supported").
    "trn1": Arch(name="trn1", generation=2, arch_level=20, sbuf_bytes=192 * 1024,
                 clock_hz=2.8e9),
    # Inferentia2: the same NeuronCore-v2 as trn1 (FACTS).
    "inf2": Arch(name="inf2", generation=2, arch_level=20, sbuf_bytes=192 * 1024,
                 clock_hz=2.8e9),
    # Trainium2: NeuronCore-v3, 2.4 GHz, 224 KiB SBUF per partition, fp8 DoubleRow (FACTS).
    "trn2": Arch(name="trn2", generation=3, arch_level=30, sbuf_bytes=224 * 1024,
                 clock_hz=2.4e9, perf_modes=_GEN3_PERF, readout_elems_per_cycle=0.4,
                 hbm_bytes_per_s=2.9e12 / 8,
                 # trn2 engine table: 0.96 / 1.2 / 1.2 GHz; Vector 512 bf16/fp16 (4 per
                 # partition), 256 other; Scalar 128; GpSimd not given (unsure: 128). DMA
                 # 23 B/ns per queue (FACTS).
                 vector_hz=960_000_000, scalar_hz=1_200_000_000, gpsimd_hz=1_200_000_000,
                 vector_perf_formats=("bf16", "fp16"), shared_engine_ports=False,
                 dma_engine_bytes_per_ns=23.0, dge_instances=2),
    # Trainium3: NeuronCore-v4, 2.4 GHz, 256 KiB SBUF per partition, adds fp8_e4m3fn and
    # the MX path (FACTS; seed 000 "MX ... gen4 only").
    "trn3": Arch(name="trn3", generation=4, arch_level=40, sbuf_bytes=256 * 1024,
                 clock_hz=2.4e9, perf_modes=_GEN3_PERF, readout_elems_per_cycle=0.4,
                 hbm_bytes_per_s=4.9e12 / 8, formats=(*_DENSE_COMMON, "fp8_e4m3fn"),
                 # trn3 engine table: 1.2 / 1.2 / 1.2 GHz; Vector 512 bf16/fp16/fp8, 256
                 # other; Scalar 256 / 128; GpSimd 128. DMA 33 B/ns per queue (FACTS).
                 vector_hz=1_200_000_000, scalar_hz=1_200_000_000, gpsimd_hz=1_200_000_000,
                 vector_perf_formats=("bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "fp8_e4m3fn"),
                 scalar_perf_formats=("bf16", "fp16"), shared_engine_ports=False,
                 dma_engine_bytes_per_ns=33.0, dma_engine_bytes_per_ns_text=38.4,
                 dge_instances=2),
}

ARCHS: Mapping[str, Arch] = MappingProxyType(_PRESETS)


def get_arch(arch: str | Arch) -> Arch:
    """Return a preset by name (``trn1``, ``inf2``, ``trn2``, ``trn3``), or ``arch`` itself."""
    if isinstance(arch, Arch):
        return arch
    try:
        return _PRESETS[arch]
    except KeyError:
        raise ArchError(
            f"unknown arch {arch!r}; choose one of {', '.join(_PRESETS)}"
        ) from None
