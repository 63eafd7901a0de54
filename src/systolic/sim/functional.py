"""The functional simulator: the living definition of the ISA.

Every other executor (the register-level simulator, the compiler's results) is tested
against this one, and this one against float64 numpy on rounded operands. The definition is
:func:`run_reference`: one instruction at a time, each through its handler in
:data:`HANDLERS` (type -> function of (state, instruction)). The threaded fast path
(:mod:`systolic.sim.functional_threaded`) computes the same per-instruction products with
the same functions and is tested against it bit for bit.

Semantics (seed 000 "The Two-Phase Protocol", "The Reference-Model Writeback"):

* ``LoadStationary`` latches the weight tile [K, M] (decoded, widened to float32) in the
  array; a later load over the same PEs replaces it.
* ``MatMul`` computes ``out[m, n] = sum_k (moving[k, n] - zp_moving) * (stationary[k, m] -
  zp_stationary)`` with operands widened to fp32, into the PSUM region ``dst``: START zeroes
  the region and writes, anything else adds (one fp32 rounding per add); STOP closes the
  group. Integer operands (zero points subtracted exactly) are exact in fp32 (|v| < 2^24)
  and their products and sums too while every partial sum stays below 2^24 in magnitude
  (seed 000: the PE array accumulates in fp32 PSUM whatever the input). Into an ``int48``
  region (seed 004's cell, an explicit option) the product is exact int64 and the region
  wraps at 48 bits.
* DoubleRow folds two contraction rows into one pass: a [P, 2, N] operand is K = 2P with
  k = 2p + j (seed 000: the reference model doubles the contraction extent).
* fp32 two-pass: the compiler latches ``fp32_pass=hi`` = bf16(w) for pass 1 and ``lo`` =
  bf16(w - bf16(w)) for pass 2, each against the full fp32 moving tile, and the two passes
  add in PSUM (:func:`split_fp32`). So ``fp32`` here is w ~ hi + lo to 16 significant bits,
  about 1e-5 relative error; ``fp32r`` is seed 000's reference model: operands rounded once
  (tf32 precision in this project), one fp32 pass.

Two accumulation orders, chosen by the caller:

* ``fast``: exactly one fp32 product per MatMul instruction, ``wt @ x`` (wt = the latched
  tile transposed, C-contiguous), computed by BLAS on ONE thread, then the fp32 PSUM adds in
  program order. The bits depend only on the instruction's own operands: never on its
  neighbours (MatMuls are not merged into bigger GEMMs: on OpenBLAS a wider GEMM's column
  blocks differ from the per-instruction products) nor on the BLAS thread count (one thread
  always; a 2-thread 128x128x512 sgemm differs from the 1-thread one in ~15% of elements).
* ``systolic``: the partial sum flows down the array rows: starting from 0, for k = 0, 1,
  ... add the fp32-rounded product w[k, m] * x[k, n] with one fp32 rounding per step, as
  the register-level simulator does; then the instruction's sum is added into PSUM.

IEEE specials propagate as fp32 hardware's would (inf * 0 = NaN, overflow to inf): numpy's
RuntimeWarnings for them are not the user's concern and are silenced where they arise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..arch import Arch, get_arch
from ..dtypes import decode
from ..errors import ShapeError, SystolicError
from ..geometry import Rect
from ..isa import (
    AccessPattern,
    DmaLoad,
    Fp32Pass,
    Instruction,
    LdWeightMx,
    LoadStationary,
    MatMul,
    MatmultMx,
    Program,
    ReadOut,
)
from ..memory import Memory
from ..verify import verify
from . import blas
from ._base import Executor, MachineState, Order, Run, read_dram, wrap48, write_dram
from .functional_engines import HANDLERS as ENGINE_HANDLERS
from .functional_mx import load_mx, matmul_mx
from .functional_threaded import default_workers, run_threaded
from .products import (
    moving_values,
    product,
    split_fp32,
    stationary_operand,
    systolic_sum,
    tile_rect,
)

__all__ = [
    "HANDLERS",
    "FunctionalSimulator",
    "Handler",
    "Order",
    "execute",
    "matmul_product",
    "register",
    "run_reference",
    "split_fp32",
    "systolic_sum",
    "tile_rect",
    "wrap48",
]

Handler = Callable[[MachineState, Any], None]


def matmul_product(state: MachineState, ins: MatMul) -> np.ndarray:
    """The product [M, N] of one MatMul on ``state``, before PSUM."""
    tile = state.tile(tile_rect(ins))
    x = moving_values(decode(state.view(ins.moving), ins.moving.dtype), ins)
    exact = state.view(ins.dst).dtype == np.int64
    return product(stationary_operand(tile.wt, ins), x, state.order, exact)


# -- the handlers: one per instruction type -------------------------------------------------
def copy(state: MachineState, src: AccessPattern, dst: AccessPattern) -> None:
    """Element-for-element copy; formats must match (a DMA converts nothing). As
    :meth:`Memory.copy`, through the state's kept views."""
    if src.dtype != dst.dtype:
        raise ShapeError(f"a copy keeps its format: {src.dtype} -> {dst.dtype}")
    s, d = state.view(src), state.view(dst)
    if s.size != d.size:
        raise ShapeError(f"copy of {s.size} elements into {d.size}")
    s = s.reshape(d.shape)
    if s.ndim > 1 and abs(s.strides[0]) < abs(s.strides[-1]):
        # a transposing read (a.T tiles: the partitions are the source's contiguous axis)
        d[...] = transposed_source(s).T
    else:
        d[...] = s


def transposed_source(s: np.ndarray) -> np.ndarray:
    """``s.T`` C-contiguous: the source of a transposing copy read in its memory order (its
    rows are contiguous), so that the copy's transpose then reads from cache and writes
    whole partition rows. A 128x128 bf16 a.T tile lands in 26 us this way, against 66 us
    walking the source in memory order straight into SBUF (every element a different SBUF
    row, 224 KiB apart) and 110 us striding across the source's rows (bench: the
    transposing loads of a 2048^3 product)."""
    return np.ascontiguousarray(s.T)


def dma_load(state: MachineState, ins: DmaLoad) -> None:
    copy(state, ins.src, ins.dst)


def read_out(state: MachineState, ins: ReadOut) -> None:
    copy(state, ins.src, ins.dst)


def load_stationary(state: MachineState, ins: LoadStationary) -> None:
    src = ins.src
    values = decode(state.view(src), src.dtype)
    values = values.reshape(src.partitions * int(np.prod([n for _, n in src.dims[:-1]])),
                            src.dims[-1][1])
    if ins.fp32_pass is not Fp32Pass.FULL:
        hi, lo = split_fp32(values)
        values = hi if ins.fp32_pass is Fp32Pass.HI else lo
    state.latch(Rect(src.partition, src.partitions, ins.column, src.dims[-1][1]), values)


def matmul(state: MachineState, ins: MatMul) -> None:
    state.accumulate(ins.dst, ins.flags, matmul_product(state, ins))


HANDLERS: dict[type, Handler] = {
    DmaLoad: dma_load,
    LoadStationary: load_stationary,
    MatMul: matmul,
    ReadOut: read_out,
    LdWeightMx: load_mx,
    MatmultMx: matmul_mx,
}
HANDLERS.update(ENGINE_HANDLERS)  # DmaCopy, TensorCopy, TensorTensor, Memset, Activation, ...


def register(kind: type, handler: Handler) -> None:
    """Give instruction type ``kind`` its handler, a function of (MachineState, instruction)
    that reads and writes ``state.memory`` / ``state.tiles`` (it replaces any earlier one).

    Both runners call it for every instruction but MatMul, which the threaded path computes
    itself from the same functions (:mod:`systolic.sim.products`) to run it on a worker."""
    HANDLERS[kind] = handler


def execute(state: MachineState, ins: Instruction) -> None:
    """Execute one (already verified) instruction through :data:`HANDLERS`."""
    handler = HANDLERS.get(type(ins))
    if handler is None:
        raise SystolicError(f"the functional simulator has no handler for "
                            f"{type(ins).__name__}; register one with "
                            f"systolic.sim.functional.register")
    handler(state, ins)


def run_reference(state: MachineState, program: Program,
                  progress: Callable[[int], None] | None = None) -> None:
    """The living definition: every instruction in program order through its handler.

    BLAS runs on one thread: its result bits depend on the thread count."""
    with blas.one_thread():
        for i, ins in enumerate(program.instructions):
            execute(state, ins)
            if progress is not None and (i + 1) % 256 == 0:
                progress(256)
    if progress is not None and len(program) % 256:
        progress(len(program) % 256)


# -- the executor ---------------------------------------------------------------------------
class FunctionalSimulator(Executor):
    """Runs Programs on SBUF/PSUM/device-memory state.

    Lifecycle: build with an Arch (``order``, the device memory size, ``workers``), place
    inputs with ``memory.write`` or :meth:`write_dram`, :meth:`run` a Program (verified
    first), read results from ``memory``. The simulator keeps its state across runs.

    ``workers``: threads running the Program, the calling thread included: it dispatches
    and the others compute MatMul products by PSUM bank; ``1`` is the calling thread alone
    (default
    :func:`~systolic.sim.functional_threaded.default_workers`: 3 on 2 cores); ``0`` runs
    :func:`run_reference` (one instruction at a time). Every choice gives the same bits.
    """

    name = "functional"

    def __init__(self, arch: Arch | str = "trn2", *, order: Order = "fast",
                 dram_bytes: int = 0, workers: int | None = None) -> None:
        if order not in ("fast", "systolic"):
            raise SystolicError(f"order must be 'fast' or 'systolic', not {order!r}")
        if workers is not None and (not isinstance(workers, int) or workers < 0):
            raise SystolicError(f"workers must be a whole number >= 0, not {workers!r}")
        self.arch = get_arch(arch)
        self.order: Order = order
        self.memory = Memory(self.arch, dram_bytes)
        self.state = MachineState(self.arch, self.memory, order)
        self.workers = default_workers() if workers is None else workers

    @property
    def tiles(self) -> dict[Rect, np.ndarray]:
        """The latched weight tiles: PEs -> decoded values [K, M] (a read-only summary)."""
        return {r: t.values for r, t in self.state.tiles.items()}

    # -- convenience for callers placing operands ---------------------------------------
    def write_dram(self, offset: int, values: np.ndarray, dtype: str) -> None:
        """Encode ``values`` to ``dtype`` and store them contiguously at byte ``offset``."""
        write_dram(self.memory, offset, values, dtype)

    def read_dram(self, offset: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        return read_dram(self.memory, offset, shape, dtype)

    # -- execution ------------------------------------------------------------------------
    def run(self, program: Program, *, check: bool = True,
            progress: Callable[[int], None] | None = None, sbuf: bool = True) -> Run:
        """Execute ``program``; ``check`` runs :func:`verify` first (leave it on unless the
        Program was just verified). ``progress(n)`` is called every 256 instructions.
        ``sbuf=False`` says nothing will read SBUF after the run: the threaded path may
        then leave it without the DMA copies no instruction needed (device memory and PSUM
        are the same either way)."""
        if check:
            verify(program, self.arch, self.memory.dram.size)
        if self.workers == 0:
            run_reference(self.state, program, progress)
        else:
            run_threaded(self.state, program, self.workers, execute, progress,
                         plain_dma=HANDLERS.get(DmaLoad) is dma_load,
                         plain_stationary=HANDLERS.get(LoadStationary) is load_stationary,
                         sbuf=sbuf)
        return Run(executor=self.name, instructions=len(program), memory=self.memory)

    def execute(self, ins: Instruction) -> None:
        """Execute one (already verified) instruction."""
        execute(self.state, ins)

    def latch(self, row: int, rows: int, col: int, cols: int, values: np.ndarray) -> None:
        """Latch decoded weights [K, M] over array rows/cols, evicting overlapped tiles."""
        self.state.latch(Rect(row, rows, col, cols), values)

    def accumulate(self, dst: AccessPattern, flags: Any, res: np.ndarray) -> None:
        """START writes ``res`` into the PSUM region; otherwise adds (fp32, or INT48 wrap)."""
        self.state.accumulate(dst, flags, res)
