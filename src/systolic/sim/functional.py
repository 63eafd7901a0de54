"""The functional simulator: the living definition of the ISA.

Every other executor (the register-level simulator, the compiler's results) is tested
against this one, and this one against float64 numpy on rounded operands.

Semantics (seed 000 "The Two-Phase Protocol", "The Reference-Model Writeback"):

* ``LoadStationary`` latches the weight tile [K, M] (decoded, widened to float32) in the
  array; a later load over the same PEs replaces it.
* ``MatMul`` computes ``out[m, n] = sum_k (moving[k, n] - zp_moving) * (stationary[k, m] -
  zp_stationary)`` with operands widened to fp32 (integers: exact int64), into the fp32
  PSUM region ``dst``: START zeroes the region and writes, anything else adds (one fp32
  rounding per add); STOP closes the group.
* DoubleRow folds two contraction rows into one pass: a [P, 2, N] operand is K = 2P with
  k = 2p + j (seed 000: the reference model doubles the contraction extent).
* fp32 two-pass: the compiler latches ``half=hi`` = bf16(w) for pass 1 and ``half=lo`` =
  bf16(w - bf16(w)) for pass 2, each against the full fp32 moving tile, and the two passes
  add in PSUM. So ``fp32`` here is w ~ hi + lo to 16 significant bits, about 1e-5 relative
  error; ``fp32r`` is seed 000's reference model: operands rounded once (tf32 precision in
  this project), one fp32 pass.

Two accumulation orders, chosen by the caller:

* ``fast``: one fp32 product per instruction through BLAS (``stationary.T @ moving``), as
  the reference model's single Eigen product does; BLAS picks its own summation order.
* ``systolic``: the partial sum flows down the array rows: starting from 0, for k = 0, 1,
  ... add the fp32-rounded product w[k, m] * x[k, n] with one fp32 rounding per step, as
  the register-level simulator does; then the instruction's sum is added into PSUM.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Literal

import ml_dtypes
import numpy as np
from threadpoolctl import threadpool_limits

from ..arch import Arch, get_arch
from ..dtypes import get_format
from ..errors import SystolicError
from ..isa import (
    AccessPattern,
    CalcFlags,
    DmaCopy,
    DmaLoad,
    Group,
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
from .functional_engines import destination, execute_engine

__all__ = ["FunctionalSimulator", "Order", "systolic_sum", "wrap48"]

Order = Literal["fast", "systolic"]
_MASK48 = (1 << 48) - 1
_SIGN48 = 1 << 47


# At most this many MatMuls on one latched tile become one GEMM.
_BATCH = 8


def _tile_key(ins: MatMul) -> tuple[int, int, int, int]:
    """The latched tile a MatMul uses: (row, rows, column, columns)."""
    return (ins.moving.partition, ins.moving.partitions, ins.dst.partition, ins.dst.partitions)


def _gemm_side_by_side(wt: np.ndarray, *xs: np.ndarray) -> np.ndarray:
    """wt @ [x0 | x1 | ...]: one BLAS call whose column blocks are the per-tile products."""
    return np.matmul(wt, np.concatenate(xs, axis=1))


def wrap48(x: np.ndarray) -> np.ndarray:
    """Two's complement wrap of int64 values to 48 bits (seed 004's INT48 accumulator)."""
    x = np.asarray(x, dtype=np.int64)
    return ((x + _SIGN48) & _MASK48) - _SIGN48


def systolic_sum(w: np.ndarray, x: np.ndarray) -> np.ndarray:
    """w.T @ x with the array's order: partial sums added in k order, fp32 rounding each step.

    ``w`` [K, M] and ``x`` [K, N] float32; returns float32 [M, N]. The loop is over the K
    array rows (each step is vectorised over the M x N PEs' outputs).
    """
    m, n = w.shape[1], x.shape[1]
    acc = np.zeros((m, n), dtype=np.float32)
    # IEEE specials propagate as the hardware's fp32 would (inf * 0 = NaN): not a warning
    with np.errstate(invalid="ignore", over="ignore"):
        for k in range(w.shape[0]):
            acc += np.multiply.outer(w[k], x[k])
    return acc


def _latch_values(values: np.ndarray, half: str) -> np.ndarray:
    if half == "full":
        return values
    hi = values.astype(ml_dtypes.bfloat16).astype(np.float32)
    if half == "hi":
        return hi
    return (values - hi).astype(ml_dtypes.bfloat16).astype(np.float32)


class FunctionalSimulator:
    """Runs Programs on SBUF/PSUM/device-memory state.

    Lifecycle: build with an Arch (``order`` and the device memory size), place inputs with
    ``memory.write`` or :meth:`write_dram`, :meth:`run` a Program (verified first), read
    results from ``memory``. The simulator keeps its state across runs.
    """

    def __init__(self, arch: Arch | str = "trn2", *, order: Order = "fast",
                 dram_bytes: int = 0) -> None:
        if order not in ("fast", "systolic"):
            raise SystolicError(f"order must be 'fast' or 'systolic', not {order!r}")
        self.arch = get_arch(arch)
        self.order: Order = order
        self.memory = Memory(self.arch, dram_bytes)
        # latched weight tiles: (row, rows, col, cols) -> decoded values [K, M]; ``_wt`` keeps
        # each transposed and C-contiguous [M, K] so a MatMul is one BLAS call without a
        # strided operand (a transposed operand was ~10x slower here)
        self.tiles: dict[tuple[int, int, int, int], np.ndarray] = {}
        self._wt: dict[tuple[int, int, int, int], np.ndarray] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._pending: deque[tuple[Future[np.ndarray], AccessPattern, CalcFlags,
                                   slice | None]] = deque()
        # run()'s decode cache: pattern -> (values, first partition, end partition, lo, hi)
        self._decoded: dict[AccessPattern, tuple[np.ndarray, int, int, int, int]] | None = None

    # -- convenience for callers placing operands ---------------------------------------
    def write_dram(self, offset: int, values: np.ndarray, dtype: str) -> None:
        """Encode ``values`` to ``dtype`` and store them contiguously at byte ``offset``."""
        from ..dtypes import encode

        raw = np.ascontiguousarray(encode(values, dtype)).reshape(-1).view(np.uint8)
        if offset < 0 or offset + raw.size > self.memory.dram.size:
            raise SystolicError(f"{raw.size} bytes at {offset:#x} do not fit device memory "
                                f"of {self.memory.dram.size} bytes")
        self.memory.dram[offset:offset + raw.size] = raw

    def read_dram(self, offset: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
        f = get_format(dtype)
        count = int(np.prod(shape))
        raw = self.memory.dram[offset:offset + count * f.container_bytes]
        return raw.view(f.storage).reshape(shape)

    # -- execution ------------------------------------------------------------------------
    def run(self, program: Program, *, check: bool = True,
            progress: Callable[[int], None] | None = None) -> None:
        """Execute ``program``; ``check`` runs :func:`verify` first (leave it on unless the
        Program was just verified). ``progress(n)`` is called every 256 instructions."""
        if check:
            verify(program, self.arch, self.memory.dram.size)
        # Each MatMul is a small GEMM (at most 128 x 128 x 512): BLAS threads cost more to
        # wake than they save there, and thrash on a busy machine. Instead, one-thread GEMMs
        # of consecutive MatMuls run concurrently on a small pool, and their results are
        # added into PSUM strictly in program order (``_drain``).
        workers = min(2, os.cpu_count() or 1)
        instrs = program.instructions
        with threadpool_limits(limits=1, user_api="blas"), \
                ThreadPoolExecutor(max_workers=workers) as pool:
            self._pool, self._decoded = pool, {}
            try:
                i, done = 0, 0
                while i < len(instrs):
                    i += self._execute_at(instrs, i)
                    if progress is not None and i - done >= 256:
                        progress(i - done)
                        done = i
                self._drain(0)
            finally:
                self._pool, self._decoded = None, None
                self._pending.clear()
            if progress is not None:
                progress(len(instrs) - done)

    def _execute_at(self, instrs: tuple[Instruction, ...], i: int) -> int:
        """Execute instruction i, or a run of MatMuls from i on one latched tile as one GEMM
        (fast order: columns of one BLAS product are the per-instruction products); returns
        how many instructions were consumed."""
        ins = instrs[i]
        if type(ins) is MatMul and self.order == "fast" and not get_format(
                ins.moving.dtype).is_int:
            key = _tile_key(ins)
            j = i + 1
            while (j < len(instrs) and j - i < _BATCH and type(instrs[j]) is MatMul
                   and _tile_key(instrs[j]) == key  # type: ignore[arg-type]
                   and instrs[j].moving.dims[:-1] == ins.moving.dims[:-1]):  # type: ignore
                j += 1
            if j - i > 1:
                self._matmul_batch(instrs[i:j])  # type: ignore[arg-type]
                return j - i
        self.execute(ins)
        return 1


    def execute(self, ins: Instruction) -> None:
        """Execute one (already verified) instruction."""
        if isinstance(ins, MatMul):
            self._matmul(ins)
        elif isinstance(ins, LoadStationary):
            self._load(ins)
        elif isinstance(ins, DmaLoad):
            self.memory.copy(ins.src, ins.dst)
            self._forget(ins.dst)
        elif isinstance(ins, ReadOut):
            self._drain(0)
            self.memory.copy(ins.src, ins.dst)
        elif isinstance(ins, LdWeightMx):
            from .functional_mx import load_mx

            load_mx(self, ins)
        elif isinstance(ins, MatmultMx):
            from .functional_mx import matmul_mx

            matmul_mx(self, ins)
        elif isinstance(ins, (*Group.ELEMENTWISE, DmaCopy)):
            self._drain(0)  # engines read PSUM: pending MatMul results land first
            execute_engine(self.memory, ins)
            self._forget(destination(ins))
        else:  # pragma: no cover - verify rejects unknown instructions
            raise SystolicError(f"unknown instruction {type(ins).__name__}")

    def latch(self, row: int, rows: int, col: int, cols: int, values: np.ndarray) -> None:
        """Latch decoded weights [K, M] over array rows/cols, evicting overlapped tiles."""
        for key in [k for k in self.tiles if k[0] < row + rows and row < k[0] + k[1]
                    and k[2] < col + cols and col < k[2] + k[3]]:
            del self.tiles[key]
            del self._wt[key]
        self.tiles[(row, rows, col, cols)] = values
        self._wt[(row, rows, col, cols)] = np.ascontiguousarray(values.T)

    def _read(self, ap: AccessPattern) -> np.ndarray:
        """Decoded SBUF values; within run() decoded tiles are kept until a DmaLoad writes
        over them (a resident moving tile is read by every M tile of a product)."""
        if self._decoded is None:
            return self.memory.read(ap)
        hit = self._decoded.get(ap)
        if hit is None:
            lo, hi = ap.free_bytes_span
            hit = self._decoded[ap] = (self.memory.read(ap), ap.partition,
                                       ap.partition + ap.partitions, lo, hi)
        return hit[0]

    def _forget(self, dst: AccessPattern) -> None:
        if not self._decoded:
            return
        lo, hi = dst.free_bytes_span
        p0, p1 = dst.partition, dst.partition + dst.partitions
        for ap in [ap for ap, (_, q0, q1, a, b) in self._decoded.items()
                   if q0 < p1 and p0 < q1 and a < hi and lo < b]:
            del self._decoded[ap]

    def _load(self, ins: LoadStationary) -> None:
        src = ins.src
        values = self._read(src)
        k = src.partitions * int(np.prod([n for _, n in src.dims[:-1]]))
        values = values.reshape(k, src.dims[-1][1])
        self.latch(src.partition, src.partitions, ins.column, src.dims[-1][1],
                   _latch_values(values, ins.half))

    def _matmul(self, ins: MatMul) -> None:
        mv, dst = ins.moving, ins.dst
        wt = self._wt[_tile_key(ins)]
        x = self._read(mv).reshape(wt.shape[1], mv.dims[-1][1])
        if get_format(mv.dtype).is_int:
            xi = x - ins.zp_moving if ins.zp_moving else x
            wi = wt - ins.zp_stationary if ins.zp_stationary else wt
            self._defer(dst, ins.flags, np.matmul, wi, xi)
        elif self.order == "fast":
            self._defer(dst, ins.flags, np.matmul, wt, x)
        else:
            self._defer(dst, ins.flags, systolic_sum, wt.T, x)

    def _matmul_batch(self, batch: tuple[MatMul, ...]) -> None:
        """MatMuls on one latched tile: one GEMM over their moving tiles side by side."""
        wt = self._wt[_tile_key(batch[0])]
        xs = [self._read(b.moving).reshape(wt.shape[1], b.moving.dims[-1][1]) for b in batch]
        cols = np.cumsum([0] + [x.shape[1] for x in xs])
        fut = self._submit(_gemm_side_by_side, wt, *xs)  # the copy runs on the pool too
        for b, c0, c1 in zip(batch, cols[:-1], cols[1:], strict=True):
            self._pending.append((fut, b.dst, b.flags, slice(int(c0), int(c1))))
        self._drain(2 * _BATCH)

    def _submit(self, fn: Callable[..., np.ndarray], *args: np.ndarray) -> Future[np.ndarray]:
        fut: Future[np.ndarray]
        if self._pool is None:
            fut = Future()
            fut.set_result(fn(*args))
        else:
            fut = self._pool.submit(fn, *args)
        return fut

    def _defer(self, dst: AccessPattern, flags: CalcFlags, fn: Callable[..., np.ndarray],
               *args: np.ndarray) -> None:
        """Compute ``fn(*args)`` on the pool; its PSUM update waits its turn in ``_drain``."""
        if self._pool is None:
            self._apply(dst, flags, fn(*args))
            return
        self._pending.append((self._submit(fn, *args), dst, flags, None))
        self._drain(2 * _BATCH)

    def _drain(self, keep: int) -> None:
        """Apply pending PSUM updates in program order until at most ``keep`` remain."""
        while len(self._pending) > keep:
            fut, dst, flags, cols = self._pending.popleft()
            res = fut.result()
            self._apply(dst, flags, res if cols is None else res[:, cols])

    def accumulate(self, dst: AccessPattern, flags: CalcFlags, res: np.ndarray) -> None:
        """START writes ``res`` into the PSUM region; otherwise adds (fp32, or INT48 wrap).
        Pending MatMul results are applied first, so updates land in program order."""
        self._drain(0)
        self._apply(dst, flags, res)

    def _apply(self, dst: AccessPattern, flags: CalcFlags, res: np.ndarray) -> None:
        view = self.memory.view(dst)
        res = res.reshape(view.shape)
        if view.dtype == np.int64:
            view[...] = wrap48(res if CalcFlags.START in flags else view + res)
        elif CalcFlags.START in flags:
            view[...] = res
        else:
            view += res
