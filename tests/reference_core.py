"""A reference whole-core scheduler for tests, written from the rules of docs/timing.md
("The whole NeuronCore": The machine, DMA, Dependencies, Scheduling, Engine costs) and
seed 003 / FACTS for the PE, not from timing/core.py. Slow and obvious on purpose:

* dependencies from the sets of bytes each op reads and writes, every earlier op against
  every later one (no regions, buckets or memo);
* DMA costs from the bytes themselves: which partition goes to which DMA engine, the
  contiguous blocks of the byte addresses each side touches, the throughput figure;
* every start is the least tick at which every rule holds, found by trying every tick at
  which something ends (an earliest start is either the ready time or such an end).

Covered: DmaCopy, DmaLoad, ReadOut (evacuation on Vector, then a DMA store), TensorCopy,
TensorTensor, Memset, Activation (no reduce), LoadStationary and single-free-dim MatMul
(bf16/fp8/fp16 at one column a cycle, a single fp32 pass at four), on an Arch without shared
engine ports (NeuronCore-v3+: Vector and Scalar never use one PSUM bank at once), list
schedule. ``RefOp`` holds what the tests compare.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from fractions import Fraction
from math import ceil, log2

from systolic.arch import Arch
from systolic.isa import (
    AccessPattern,
    Activation,
    AluOp,
    DmaCopy,
    DmaLoad,
    Engine,
    LoadStationary,
    MatMul,
    Memset,
    Program,
    ReadOut,
    Space,
    TensorCopy,
    TensorTensor,
)

TENSOR, VECTOR, SCALAR, GPSIMD = "tensor", "vector", "scalar", "gpsimd"
_ENGINE = {Engine.VECTOR: VECTOR, Engine.SCALAR: SCALAR, Engine.GPSIMD: GPSIMD}
_ITEM = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1}


# -- bytes ------------------------------------------------------------------------------
def elements(ap: AccessPattern) -> list[tuple[int, int]]:
    """(partition, byte address of the element's first byte) of every element, in order
    (AccessPattern's docstring: partition outermost, then dims outermost first). DRAM
    elements report partition -1: device memory is one flat space."""
    isz = _ITEM[ap.dtype]
    idx = [0]
    for step, num in ap.dims:
        idx = [i + j * step for i in idx for j in range(num)]
    out = []
    for p in range(ap.partitions):
        for i in idx:
            if ap.space is Space.DRAM:
                out.append((-1, ap.offset + p * ap.partition_step + i * isz))
            else:
                out.append((ap.partition + p, ap.offset + i * isz))
    return out


def byte_set(ap: AccessPattern | None) -> frozenset[tuple[str, int, int]]:
    """The bytes of the pattern's region (docs "Dependencies": a rectangle, partitions x
    bytes, in SBUF/PSUM; rows of the pitch in HBM): each partition's (each device-memory
    row's) bytes from its lowest to its highest, gaps of a strided pattern included."""
    if ap is None:
        return frozenset()
    isz = _ITEM[ap.dtype]
    rows: dict[int, list[int]] = {}
    for k, (p, a) in enumerate(elements(ap)):
        row = p if p >= 0 else k // ap.free_elems  # device memory: the pattern's row
        rows.setdefault(row, []).append(a)
    sp = ap.space.value
    return frozenset((sp, p if sp != "DRAM" else -1, b) for p, addrs in rows.items()
                     for b in range(min(addrs), max(addrs) + isz))

def min_block(ap: AccessPattern) -> int:
    """The smallest maximal block of consecutive bytes the pattern touches (docs "DMA":
    the contiguous run, never across SBUF partitions, which are separate memories)."""
    rows: dict[int, set[int]] = {}
    for p, a in elements(ap):
        rows.setdefault(p, set()).update(range(a, a + _ITEM[ap.dtype]))
    best = None
    for addrs in rows.values():
        srt = sorted(addrs)
        start = srt[0]
        for x, y in zip(srt, [*srt[1:], None], strict=True):
            if y != x + 1:
                n = x - start + 1
                best = n if best is None else min(best, n)
                if y is not None:
                    start = y
    assert best is not None
    return best


def transposing(ap: AccessPattern) -> bool:
    """Device memory contiguous along the partitions: element (p + 1, i) right after
    element (p, i)."""
    return (ap.space is Space.DRAM and ap.partitions > 1
            and ap.partition_step == _ITEM[ap.dtype])


# -- costs ------------------------------------------------------------------------------
def curve(arch: Arch, run: int) -> float:
    """docs "DMA": the figure's points, linear in log2(bytes) between them, the plateau
    above the last, a constant time per descriptor below the first."""
    pts = arch.dma_curve
    if run <= pts[0][0]:
        return pts[0][1] * run / pts[0][0]
    for (b0, f0), (b1, f1) in itertools.pairwise(pts):
        if run == b1:
            return f1
        if b0 < run < b1:
            return f0 + (f1 - f0) * (log2(run) - log2(b0)) / (log2(b1) - log2(b0))
    return pts[-1][1]


@dataclass
class DmaRef:
    engines: tuple[int, ...]
    bytes_per_engine: dict[int, int]
    run: int
    transposed: bool
    engine_ns: float
    hbm_bytes: int


def dma_ref(src: AccessPattern, dst: AccessPattern, arch: Arch) -> DmaRef:
    """A transfer by docs "DMA": partitions 8e..8e+7 of the SBUF side (the destination's
    for SBUF to SBUF; an HBM-to-HBM transfer's rows from engine 0) go to engine e, and
    the transfer holds its engines for its largest piece."""
    side = dst if dst.space is not Space.DRAM else src
    p0 = side.partition if side.space is not Space.DRAM else 0
    per_row = side.free_elems * _ITEM[side.dtype]
    load: dict[int, int] = {}
    for p in range(p0, p0 + side.partitions):
        e = (p // arch.dma_partitions_per_engine) % arch.dma_engines
        load[e] = load.get(e, 0) + per_row
    total = src.partitions * src.free_elems * _ITEM[src.dtype]
    run = max(1, min(min_block(src), min_block(dst), total))
    tr = transposing(src) or transposing(dst)
    eff = curve(arch, run) * (arch.dma_transpose_efficiency if tr else 1.0)
    ns = max(load.values()) / (arch.dma_engine_bytes_per_ns * eff)
    hbm = total if Space.DRAM in (src.space, dst.space) else 0
    return DmaRef(tuple(sorted(load)), load, run, tr, ns, hbm)


def _contiguous(ap: AccessPattern) -> bool:
    step, num = ap.dims[-1]
    return num == 1 or step == 1


def _slow(*aps: AccessPattern) -> int:
    """docs "Engine costs": a minor free stride above 16 bytes doubles the time."""
    return 2 if any(ap.dims[-1][1] > 1 and abs(ap.dims[-1][0]) * _ITEM[ap.dtype] > 16
                    for ap in aps) else 1


def engine_cost(ins: object, arch: Arch, engine: Engine) -> int:
    """Engine cycles by the docs' table (docs/timing.md "Engine costs")."""
    lo = arch.engine_min_ii
    perf = arch.vector_perf_formats

    def floor(c: Fraction | int) -> int:
        return max(lo, ceil(c))

    if isinstance(ins, ReadOut):
        return floor(ins.src.free_elems * _slow(ins.src))
    if isinstance(ins, Memset):
        n = ins.dst.free_elems
        return floor(Fraction(n, 2) if ins.value == 0 and ins.dst.dtype in ("bf16", "fp16")
                     else n)
    if isinstance(ins, TensorTensor):
        a, b, d = ins.a, ins.b, ins.dst
        n = a.free_elems
        if engine is not Engine.VECTOR:
            return floor(2 * n)
        one_psum = (a.space is Space.PSUM) != (b.space is Space.PSUM)
        fast = (a.space is b.space is Space.SBUF
                and all(x.dtype in ("bf16", *perf) for x in (a, b, d))
                and ins.op in (AluOp.ADD, AluOp.MULTIPLY, AluOp.SUBTRACT)
                and _contiguous(a) and _contiguous(b))
        return floor(n if one_psum or fast else 2 * n)
    assert isinstance(ins, TensorCopy | Activation)
    src, dst = ins.src, ins.dst
    n = src.free_elems * _slow(src, dst)
    sp = 1
    if engine is Engine.VECTOR and isinstance(ins, TensorCopy) \
            and src.dtype in perf and dst.dtype in perf:
        # trn2 Vector perf mode: 4x bf16/fp16 SBUF->SBUF contiguous, 2x with PSUM or strided
        sbuf = src.space is dst.space is Space.SBUF
        contig = _contiguous(src) and _contiguous(dst)
        sp = 4 if sbuf and contig else 2 if sbuf or contig else 1
    if engine is Engine.SCALAR and src.dtype in arch.scalar_perf_formats \
            and dst.dtype in arch.scalar_perf_formats:
        sp = 2
    return floor(Fraction(n, sp))


# -- the schedule -----------------------------------------------------------------------
@dataclass
class RefOp:
    instr: int
    queue: str  # tensor / vector / scalar / gpsimd / dma
    start: int
    end: int
    reads: frozenset = field(repr=False)
    writes: frozenset = field(repr=False)
    engines: tuple[int, ...] = ()
    dma_queue: int = -1
    occupancy: int = 0  # DMA: ticks on its engines alone; engines: its cost in ticks
    hbm: tuple[int, int] = (0, 0)  # DMA: its HBM slot
    earliest: int = 0  # the least start its dependencies allow
    resources: tuple[object, ...] = ()


def _free(busy: list[tuple[int, int]], lo: int, hi: int) -> bool:
    return all(e <= lo or hi <= s for s, e in busy) if hi > lo else True


class Reference:
    """The reference schedule of a Program (module docstring); ``ops`` in the order
    time_program makes them (a ReadOut: evacuation, then store)."""

    def __init__(self, program: Program, arch: Arch) -> None:
        assert not arch.shared_engine_ports
        self.arch = arch
        self.tick = arch.tick_hz
        self.hz = {TENSOR: int(arch.clock_hz), VECTOR: arch.vector_hz,
                   SCALAR: arch.scalar_hz, GPSIMD: arch.gpsimd_hz}
        self.sync = ceil(Fraction(str(arch.sync_ns)) * self.tick / 10**9)
        self.fixed = ceil(Fraction(str(arch.dma_fixed_ns)) * self.tick / 10**9)
        self.ops: list[RefOp] = []
        self.busy: dict[object, list[tuple[int, int]]] = {}
        # the PE (seed 003 / FACTS, docs "Tensor"): previous MatMul start and interval,
        # the load since it, the load queue
        self.mm_start, self.mm_next, self.load_end, self.load_free = -1, 0, -1, 0
        for i, ins in enumerate(program):
            self._instruction(i, ins)

    def per(self, q: str) -> int:
        return self.tick // self.hz[q]

    # docs "Dependencies"
    def latency(self, d: RefOp, q: str, raw: bool) -> int:
        access = (self.arch.engine_access_overhead * self.per(d.queue)
                  if d.queue in (VECTOR, SCALAR, GPSIMD) else 0)
        if q == "dma":
            return access  # the fixed cost follows
        if d.queue == q:
            return self.arch.engine_dep_overhead * self.per(q) if raw else 0
        return self.sync + access

    def ready(self, q: str, rd: frozenset, wr: frozenset, extra: RefOp | None = None) -> int:
        t = -1
        for d in self.ops:
            if q == TENSOR and d.queue == TENSOR:
                continue  # the PE's own issue rules order its ops
            raw = bool(d.writes & rd) or d is extra
            if raw or d.writes & wr or d.reads & wr:
                t = max(t, d.end + self.latency(d, q, raw))
        return t

    def _fits(self, keys: tuple[object, ...], lo: int, hi: int) -> bool:
        return all(_free(self.busy.get(k, []), lo, hi) for k in keys)

    def _candidates(self, t0: int, keys: tuple[object, ...]) -> list[int]:
        ends = {e for k in keys for _, e in self.busy.get(k, []) if e > t0}
        return [t0, *sorted(ends)]

    def _book(self, keys: tuple[object, ...], lo: int, hi: int) -> None:
        for k in keys:
            self.busy.setdefault(k, []).append((lo, hi))

    def _engine(self, i: int, ins: object, engine: Engine, rd: frozenset, wr: frozenset,
                aps: tuple[AccessPattern, ...]) -> RefOp:
        q = _ENGINE[engine]
        dur = engine_cost(ins, self.arch, engine) * self.per(q)
        t0 = max(self.ready(q, rd, wr), 0)
        keys: tuple[object, ...] = (q,)
        if engine in (Engine.VECTOR, Engine.SCALAR):  # one PSUM bank, one engine at once
            bank = self.arch.psum_bank_bytes
            keys += tuple(("bank", b) for ap in aps if ap.space is Space.PSUM
                          for b in {a // bank for _, a in elements(ap)}
                          | {(a + _ITEM[ap.dtype] - 1) // bank for _, a in elements(ap)})
        t = next(s for s in self._candidates(t0, keys) if self._fits(keys, s, s + dur))
        self._book(keys, t, t + dur)
        op = RefOp(i, q, t, t + dur, rd, wr, occupancy=dur, earliest=t0, resources=keys)
        self.ops.append(op)
        return op

    def _dma(self, i: int, src: AccessPattern, dst: AccessPattern, qid: int, rd: frozenset,
             wr: frozenset, extra: RefOp | None = None) -> RefOp:
        c = dma_ref(src, dst, self.arch)
        occ = max(1, ceil(c.engine_ns * self.tick / 1e9))
        hb = max(1, ceil(Fraction(c.hbm_bytes) * self.tick
                         / Fraction(str(self.arch.hbm_bytes_per_s)))) if c.hbm_bytes else 0
        dep = self.ready("dma", rd, wr, extra)
        t0 = max(dep, 0) + self.fixed  # the fixed cost, then the first byte
        for d in self.ops:  # FIFO on each of its engines' queue
            if d.dma_queue == qid and set(d.engines) & set(c.engines):
                t0 = max(t0, d.end)
        keys = tuple(("dma", e) for e in c.engines)
        hbm = self.busy.get("hbm", [])
        tries = sorted({t0, *(e for k in (*keys, "hbm") for _, e in self.busy.get(k, [])
                              if e > t0)})
        for t in tries:
            sh = t
            if hb:  # its HBM bytes: the earliest free slot at or after t
                sh = next(s for s in [t, *sorted(e for _, e in hbm if e > t)]
                          if _free(hbm, s, s + hb))
            end = max(t + occ, sh + hb)
            if self._fits(keys, t, end):
                break
        self._book(keys, t, end)
        if hb:
            self._book(("hbm",), sh, sh + hb)
        op = RefOp(i, "dma", t, end, rd, wr, c.engines, qid, occ, (sh, sh + hb),
                   max(dep, 0) + self.fixed, keys)
        self.ops.append(op)
        return op

    def _pe(self, i: int, ins: LoadStationary | MatMul, rd: frozenset, wr: frozenset) -> None:
        r = self.per(TENSOR)
        ready = max(self.ready(TENSOR, rd, wr), 0)
        if isinstance(ins, LoadStationary):
            # FACTS: a fast load is ~4x a MatMul of the same free size; it starts when the
            # previous load ended and the previous MatMul started (its shadow latches)
            dur = ceil(ins.src.dims[-1][1] / self.arch.ldweights_speedup) * r
            t = max(self.load_free, self.mm_start, ready)
            self.load_end = self.load_free = t + dur
        else:
            assert len(ins.moving.dims) == 1
            n, k, m = ins.moving.dims[-1][1], ins.moving.partitions, ins.dst.partitions
            period = 4 if ins.moving.dtype == "fp32" else 1  # seed 003 "roughly 4x"
            dur = (period * (n - 1) + k + m - 1) * r  # N + K + M - 2 at one column a cycle
            t = max(self.mm_next, self.load_end, ready)
            self.mm_start = t
            self.mm_next = t + max(period * n, self.arch.mm_init_latency) * r
            self.load_end = -1
        self.ops.append(RefOp(i, TENSOR, t, t + dur, rd, wr, occupancy=dur, earliest=ready))

    def _instruction(self, i: int, ins: object) -> None:
        if isinstance(ins, LoadStationary):
            self._pe(i, ins, byte_set(ins.src), frozenset())
        elif isinstance(ins, MatMul):
            self._pe(i, ins, byte_set(ins.moving), byte_set(ins.dst))
        elif isinstance(ins, DmaCopy | DmaLoad):
            s, d = ins.src.space is Space.DRAM, ins.dst.space is Space.DRAM
            # docs "Queues": loads 0, stores 1, SBUF to SBUF 2, HBM to HBM 3
            q = ins.queue if isinstance(ins, DmaCopy) else (0 if s and not d else 1 if d and
                                                           not s else 2 if not s else 3)
            self._dma(i, ins.src, ins.dst, q, byte_set(ins.src), byte_set(ins.dst))
        elif isinstance(ins, ReadOut):
            ev = self._engine(i, ins, Engine.VECTOR, byte_set(ins.src), frozenset(),
                              (ins.src,))
            self._dma(i, ins.src, ins.dst, 1, frozenset(), byte_set(ins.dst), extra=ev)
        elif isinstance(ins, TensorTensor):
            self._engine(i, ins, ins.engine, byte_set(ins.a) | byte_set(ins.b),
                         byte_set(ins.dst), (ins.a, ins.b, ins.dst))
        elif isinstance(ins, Memset):
            self._engine(i, ins, ins.engine, frozenset(), byte_set(ins.dst), (ins.dst,))
        elif isinstance(ins, TensorCopy | Activation):
            assert not isinstance(ins, Activation) or ins.acc is None
            self._engine(i, ins, ins.engine, byte_set(ins.src), byte_set(ins.dst),
                         (ins.src, ins.dst))
        else:
            raise NotImplementedError(type(ins).__name__)
