"""The whole-core scheduler (timing/core.py) against the reference of tests/reference_core.py,
written from docs/timing.md's rules alone, on random programs: mixed dtypes, strided and
transposing patterns, regions drawn from a small pool so the same bytes come back under
another dtype or shape, same- and cross-engine dependencies, DMA transfers over uneven
partition splits.

Both sides are checked: every op starts no sooner than each dependency's end plus the
documented latency (the reference's byte sets, not the scheduler's regions), and no later
than the least start the rules allow (the reference's schedule, start for start); and
every op's duration is its cost computed alone, so a cost never depends on what ran
before it (issue 21 defect 1).
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st
from reference_core import Reference, dma_ref, engine_cost

from systolic.arch import get_arch
from systolic.isa import (
    AccessPattern,
    Activation,
    AluOp,
    CalcFlags,
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
from systolic.timing import costs
from systolic.timing.core import time_program
from systolic.timing.dma import dma_cost

# every test with the tracker's buckets and its flat scan (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("tracker_mode")

TRN2 = get_arch("trn2")
ISZ = {"fp32": 4, "bf16": 2, "fp8_e4m3": 1}
DTYPES = st.sampled_from(["bf16", "fp32", "fp8_e4m3"])
# (first partition, partitions): uneven splits over the DMA engines' bands of eight
PARTS = st.sampled_from([(0, 128), (0, 9), (0, 100), (3, 9), (5, 4), (60, 8), (8, 16),
                         (120, 8), (0, 1), (17, 33)])


@st.composite
def free_dims(draw, small: bool = False) -> tuple[tuple[int, int], ...]:
    n = draw(st.sampled_from([1, 3, 8, 16] if small else [1, 3, 8, 16, 32]))
    return draw(st.sampled_from([((1, n),), ((2, n),), ((8, n),), ((2 * n, 2), (1, n))]))


@st.composite
def sbuf(draw, p0: int | None = None, parts: int | None = None, dims=None, dtype=None):
    if p0 is None:
        p0, parts = draw(PARTS)
    return AccessPattern(Space.SBUF, p0, parts, draw(st.sampled_from([0, 64, 128, 256])),
                         dims or draw(free_dims()), dtype or draw(DTYPES))


@st.composite
def dram(draw, like: AccessPattern):
    """A device-memory pattern of ``like``'s shape: rows contiguous, padded or transposing."""
    isz = ISZ[like.dtype]
    span = like.free_bytes_span[1] - like.free_bytes_span[0]
    kind = draw(st.sampled_from(["rows", "padded", "transposed"]))
    if kind == "transposed":  # partition p of element i at p + i * partitions
        dims = tuple((s * like.partitions, n) for s, n in like.dims)
        step = isz
    else:
        dims, step = like.dims, span * (2 if kind == "padded" else 1)
    return AccessPattern(Space.DRAM, 0, like.partitions,
                         draw(st.sampled_from([0, 512, 4096, 1 << 16])), dims, like.dtype,
                         partition_step=step)


@st.composite
def psum(draw, parts: int | None = None, n: int | None = None):
    bank = draw(st.integers(0, 3))
    return AccessPattern(Space.PSUM, 0, parts or draw(st.sampled_from([8, 64, 128])),
                         bank * 2048 + draw(st.sampled_from([0, 512, 1024])),
                         ((1, n or draw(st.sampled_from([8, 64, 128]))),), "fp32")


@st.composite
def instruction(draw):
    kind = draw(st.sampled_from(["load", "store", "s2s", "dmaload", "copy", "tt", "memset",
                                 "act", "mm", "readout"]))
    eng = draw(st.sampled_from([Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD]))
    if kind in ("load", "store", "dmaload"):
        s = draw(sbuf())
        d = draw(dram(s))
        if kind == "store":
            return [DmaCopy(s, d, queue=draw(st.integers(0, 3)))]
        if kind == "dmaload":
            return [DmaLoad(d, s)]
        return [DmaCopy(d, s, queue=draw(st.integers(0, 3)))]
    if kind == "s2s":
        s = draw(sbuf())
        p0, parts = draw(PARTS.filter(lambda x: x[1] == s.partitions))
        return [DmaCopy(s, draw(sbuf(p0, parts, s.dims, s.dtype)),
                        queue=draw(st.integers(0, 3)))]
    if kind == "mm":
        k, m, n = (draw(st.sampled_from([1, 8, 64, 128])) for _ in range(3))
        dt = draw(st.sampled_from(["bf16", "fp32"]))
        w = draw(sbuf(0, k, ((1, m),), dt))
        mv = draw(sbuf(0, k, ((1, n),), dt))
        out = draw(psum(m, n))
        flags = draw(st.sampled_from([CalcFlags.START | CalcFlags.STOP, CalcFlags.START,
                                      CalcFlags.ACCUMULATE | CalcFlags.STOP]))
        return [LoadStationary(w), MatMul(mv, out, flags, dt)][draw(st.integers(0, 1)):]
    if kind == "readout":
        src = draw(psum())
        return [ReadOut(src, draw(dram(src)))]
    space = Space.SBUF if eng is Engine.GPSIMD else draw(st.sampled_from([Space.SBUF,
                                                                          Space.PSUM]))
    a = draw(psum()) if space is Space.PSUM else draw(sbuf())
    dst = draw(sbuf(a.partition, a.partitions, a.dims, draw(DTYPES)))
    if kind == "copy":
        return [TensorCopy(a, dst, eng)]
    if kind == "memset":
        return [Memset(dst, draw(st.sampled_from([0.0, 1.0])), eng)]
    if kind == "act":
        return [Activation(a, dst, engine=eng)]
    b = draw(sbuf(a.partition, a.partitions, a.dims))
    return [TensorTensor(a, b, dst, draw(st.sampled_from([AluOp.ADD, AluOp.MAXIMUM])), eng)]


@st.composite
def programs(draw):
    ins: list = []
    for _ in range(draw(st.integers(1, 14))):
        ins.extend(draw(instruction()))
    if draw(st.booleans()) and ins:  # the same instructions again: repeated regions
        ins.extend(draw(st.permutations(ins))[: draw(st.integers(1, 6))])
    return Program(ins)


def check_against_reference(prog: Program, arch=TRN2) -> None:
    ct = time_program(prog, arch, what_if=False)
    ref = Reference(prog, arch).ops
    assert len(ref) == len(ct.starts)
    assert [o.instr for o in ref] == ct.op_instr.tolist()
    ins = list(prog)
    for j, o in enumerate(ref):
        # nothing starts before its dependencies end plus the documented latency
        assert ct.starts[j] >= o.earliest, (j, o.queue, int(ct.starts[j]), o.earliest)
        # ... and nothing waits longer than the rules require
        assert (int(ct.starts[j]), int(ct.ends[j])) == (o.start, o.end), \
            (j, type(ins[o.instr]).__name__, o.queue, int(ct.starts[j]), int(ct.ends[j]),
             o.start, o.end)
        # each duration is the op's cost computed alone (no memo, no earlier op)
        i = ins[o.instr]
        if o.queue == "dma":
            src, dst = i.src, i.dst
            alone = dma_cost(src, dst, arch)
            assert alone.engine_ns == dma_ref(src, dst, arch).engine_ns or abs(
                alone.engine_ns / dma_ref(src, dst, arch).engine_ns - 1) < 1e-12
            assert ct.ends[j] - ct.starts[j] >= o.occupancy
        elif o.queue != "tensor":
            eng = Engine(o.queue)
            alone = costs._cached.__wrapped__(i, arch, eng)
            assert alone == engine_cost(i, arch, eng), type(i).__name__
            assert ct.ends[j] - ct.starts[j] == alone * (arch.tick_hz // {
                "vector": arch.vector_hz, "scalar": arch.scalar_hz,
                "gpsimd": arch.gpsimd_hz}[o.queue])
    assert ct.latency == max((o.end for o in ref), default=0)



@given(programs())
def test_the_scheduler_equals_the_reference(prog):
    check_against_reference(prog)



@given(programs(), st.integers(1, 6))
def test_a_cost_does_not_depend_on_what_ran_before(prog, k):
    """Each op timed after a shuffled prefix of other ops lasts what it lasts alone."""
    check_against_reference(Program([*list(prog)[-k:], *prog]))


# -- the cases the random search found or issue 21 names, kept as fixed examples ---------
def sb(p0, parts, off, n, dtype="bf16", step=1):
    return AccessPattern(Space.SBUF, p0, parts, off, ((step, n),), dtype)


def test_a_bf16_read_waits_for_the_fp32_dma_writing_those_bytes():
    # the same partitions, offset and dims under two dtypes: the fp32 pattern covers
    # twice the bytes, so a bf16 read of its upper half depends on it (issue 21: the
    # region memo without dtype)
    f32 = sb(0, 128, 0, 64, "fp32")
    d = AccessPattern(Space.DRAM, 0, 128, 0, ((1, 64),), "fp32", partition_step=256)
    bf_hi = sb(0, 128, 128, 64, "bf16")
    # the bf16 pattern of the same partitions, offset and dims is seen first, so a memo
    # keyed without the dtype hands the fp32 write the bf16 pattern's half of the bytes
    prog = Program([TensorCopy(sb(0, 128, 0, 64, "bf16"), sb(0, 128, 12288, 64, "bf16")),
                    DmaCopy(d, f32), TensorCopy(sb(0, 128, 0, 64, "bf16"),
                                                sb(0, 128, 4096, 64, "bf16")),
                    TensorCopy(bf_hi, sb(0, 128, 8192, 64, "bf16"))])
    check_against_reference(prog)
    ct = time_program(prog, TRN2)
    assert ct.starts[3] >= ct.ends[1]


def test_a_second_reader_on_one_queue_still_orders_a_later_write():
    # two Vector reads of one tile, the second one longer; a GpSimd memset over the tile
    # must wait for both (issue 21: a region keeping only the first reader per queue)
    t = sb(0, 128, 0, 64)
    prog = Program([TensorCopy(t, sb(0, 128, 4096, 64)),
                    TensorTensor(t, sb(0, 128, 2048, 64, step=2), sb(0, 128, 8192, 64),
                                 AluOp.MAXIMUM),
                    Memset(t, 1.0, Engine.GPSIMD)])
    check_against_reference(prog)
    ct = time_program(prog, TRN2)
    assert ct.starts[2] >= ct.ends[1] > ct.ends[0]


def test_two_engines_never_share_one_psum_bank_at_once():
    # a Vector copy of PSUM bytes 0..512 and a Scalar copy of bytes 1024..1536: one bank
    # (2 KiB) on trn2, so they run one after the other (docs "Engine costs")
    a = AccessPattern(Space.PSUM, 0, 128, 0, ((1, 128),), "fp32")
    b = AccessPattern(Space.PSUM, 0, 128, 1024, ((1, 128),), "fp32")
    prog = Program([TensorCopy(a, sb(0, 128, 0, 128, "fp32")),
                    TensorCopy(b, sb(0, 128, 4096, 128, "fp32"), Engine.SCALAR)])
    check_against_reference(prog)
    ct = time_program(prog, TRN2)
    assert ct.starts[1] >= ct.ends[0]


def test_the_reference_itself_on_a_hand_worked_pair():
    # a DMA then a Vector copy of what it wrote: the copy starts at the DMA's end + sync
    # (64 ns at 4.8 GHz: 308 ticks); the DMA starts after its 1300 ns fixed cost (6240)
    d = AccessPattern(Space.DRAM, 0, 128, 0, ((1, 64),), "bf16", partition_step=128)
    t = sb(0, 128, 0, 64)
    ref = Reference(Program([DmaCopy(d, t), TensorCopy(t, sb(0, 128, 4096, 64))]),
                    TRN2).ops
    assert ref[0].start == 6240
    assert ref[1].start == ref[0].end + 308
    # 64 elements, SBUF to SBUF bf16 contiguous: max(64, 64 / 4) = 64 Vector cycles x 5
    assert ref[1].end - ref[1].start == 64 * 5


def test_the_reference_follows_the_documented_trn1_rate():
    # the reference is Arch-driven: the same pair on a trn2 with another DMA plateau
    arch = dataclasses.replace(TRN2, dma_engine_bytes_per_ns=17.0)
    d = AccessPattern(Space.DRAM, 0, 128, 0, ((1, 512),), "bf16", partition_step=1024)
    check_against_reference(Program([DmaCopy(d, sb(0, 128, 0, 512)),
                                     TensorCopy(sb(0, 128, 0, 512), sb(0, 128, 2048, 512))]),
                            arch)
