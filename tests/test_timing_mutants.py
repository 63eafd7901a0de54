"""Whole-core timing rules at the points the mutants of bench/mutants_timing.py found untested
(issue 21): boundaries (EXACT_ROWS, a PSUM bank's last byte, a 16-byte stride), rows stored
bottom-up, queue placement, the latency a DMA pays after an engine, memset's zero rule and
NeuronCore-v2's shared ports. Each expectation is hand-worked from docs/timing.md (trn2:
ticks of 4.8 GHz, Vector 5 ticks a cycle, GpSimd and Scalar 4; 1300 ns DMA fixed cost, 64 ns
sync, 60-cycle access latency; trn1: ticks of 5.6 GHz, Vector 5, Scalar and GpSimd 4) or
taken from the reference scheduler (tests/reference_core.py) or a byte-set brute force."""

from __future__ import annotations

from math import ceil

import pytest
from reference_core import Reference

from systolic.arch import get_arch
from systolic.isa import (
    AccessPattern,
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
)
from systolic.timing.core import time_program
from systolic.timing.costs import engine_cycles
from systolic.timing.deps import Tracker
from systolic.timing.regions import EXACT_ROWS, region, regions_overlap

# every test with the tracker's buckets and its flat scan (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("tracker_mode")

TRN2, TRN1 = get_arch("trn2"), get_arch("trn1")
FIXED = ceil(1300 * 4.8)  # 6240 ticks
ACCESS_V = 60 * 5  # 60 Vector cycles of 5 ticks


def sb(p0, parts, off, n, dtype="bf16", step=1):
    return AccessPattern(Space.SBUF, p0, parts, off, ((step, n),), dtype)


def dram_rows(rows, off, width, pitch, dtype="bf16"):
    isz = {"bf16": 2, "fp32": 4}[dtype]
    return AccessPattern(Space.DRAM, 0, rows, off, ((1, width // isz),), dtype,
                         partition_step=pitch)


def row_bytes(ap: AccessPattern) -> set[int]:
    """Every byte of a row-contiguous device-memory pattern, row by row (brute force)."""
    lo, hi = ap.free_bytes_span
    return {p * ap.partition_step + b for p in range(ap.partitions) for b in range(lo, hi)}


# -- deps -----------------------------------------------------------------------------------
def test_regions_of_exactly_exact_rows_rows_are_compared_row_by_row():
    # 4096 rows of 64 B at pitch 256 from byte 0, and 4096 rows of 64 B at pitch 512 from
    # byte 128: their flat extents overlap, no byte is shared (row i of the first covers
    # 256 i .. 256 i + 63, row j of the second 512 j + 128 .. 512 j + 191). Up to EXACT_ROWS
    # rows the comparison is exact (deps.py), so there is no dependency
    assert EXACT_ROWS == 4096
    a = dram_rows(EXACT_ROWS, 0, 64, 256)
    b = dram_rows(EXACT_ROWS, 128, 64, 512)
    assert not row_bytes(a) & row_bytes(b)
    assert not regions_overlap(region(a), region(b))
    queues: list[int] = [4]
    tr = Tracker(queues)
    wa, rb = tr.intern(region(a)), tr.intern(region(b))
    tr.commit(0, (), (wa,))
    assert tr.deps((rb,), ()) == (set(), set())
    # and when they share a byte (the second one 64 B lower), the read waits
    c = dram_rows(EXACT_ROWS, 64 - 2, 64, 512)
    assert row_bytes(a) & row_bytes(c)
    assert regions_overlap(region(a), region(c))


def test_rows_stored_bottom_up_hold_their_first_row_and_nothing_below_the_last():
    # 4 rows of 256 B at pitch -256 from byte 1024: rows at 1024, 768, 512, 256. A read of
    # the first row (1024..1279) waits for the store; one of bytes 0..255 does not. The
    # store uses DMA engine 0 (partitions 0..3), the reads engine 1 (partitions 8..)
    store = DmaCopy(sb(0, 4, 0, 64, "fp32"),
                    AccessPattern(Space.DRAM, 0, 4, 1024, ((1, 64),), "fp32",
                                  partition_step=-256), queue=1)
    first = DmaCopy(dram_rows(1, 1024, 256, 256, "fp32"), sb(8, 1, 0, 64, "fp32"))
    middle = DmaCopy(dram_rows(1, 512, 256, 256, "fp32"), sb(10, 1, 0, 64, "fp32"), queue=3)
    below = DmaCopy(dram_rows(1, 0, 256, 256, "fp32"), sb(9, 1, 0, 64, "fp32"), queue=2)
    for load, waits in ((first, True), (middle, True), (below, False)):
        prog = Program([store, load])
        ct = time_program(prog, TRN2)
        assert ct.starts[1] == (ct.ends[0] + FIXED if waits else FIXED)
        assert ct.starts.tolist() == [o.start for o in Reference(prog, TRN2).ops]


@pytest.mark.parametrize("flat", [64, 0])  # deps.FLAT_REGIONS: the default; buckets at once
def test_a_narrow_region_in_a_cells_last_fine_bucket_is_found_from_that_cell(monkeypatch,
                                                                              flat):
    # SBUF bytes 2000..2003 of partition 0 sit in fine bucket 31 (64 B each) of coarse
    # bucket 0 (2 KiB); a read of bytes 0..2047 looks at coarse bucket 0's narrow regions
    # and must find the write (RAW), as a scan of every record does
    monkeypatch.setattr("systolic.timing.deps.FLAT_REGIONS", flat)
    queues: list[int] = [1]
    tr = Tracker(queues)
    w = tr.intern(region(sb(0, 1, 2000, 2)))
    r = tr.intern(region(sb(0, 128, 0, 1024)))
    tr.commit(0, (), (w,))
    assert tr.deps((r,), ()) == ({0}, set())


# -- the scheduler ----------------------------------------------------------------------------
def test_an_op_ending_on_a_bank_boundary_leaves_the_next_bank_free():
    # trn2: Vector and Scalar never use one PSUM bank (2 KiB a partition) at once. 512 fp32
    # from byte 0 end exactly at the end of bank 0, so a Scalar copy of bank 1 runs at once;
    # one from byte 1024 spans banks 0 and 1 and waits
    bank0 = AccessPattern(Space.PSUM, 0, 128, 0, ((1, 512),), "fp32")
    bank1 = AccessPattern(Space.PSUM, 0, 128, 2048, ((1, 512),), "fp32")
    both = AccessPattern(Space.PSUM, 0, 128, 1024, ((1, 512),), "fp32")
    v = TensorCopy(bank0, sb(0, 128, 0, 512, "fp32"))
    for other, start in ((bank1, 0), (both, None)):
        prog = Program([v, TensorCopy(other, sb(0, 128, 4096, 512, "fp32"), Engine.SCALAR)])
        ct = time_program(prog, TRN2)
        # the Vector copy: max(64, 512) cycles x 5 ticks (fp32 takes no perf mode)
        assert (ct.starts[0], ct.ends[0]) == (0, 512 * 5)
        assert ct.starts[1] == (start if start is not None else ct.ends[0])
        assert ct.starts.tolist() == [o.start for o in Reference(prog, TRN2).ops]


def test_a_dma_after_an_engine_pays_its_access_latency_and_the_fixed_cost_not_sync():
    # docs "Dependencies": a DMA consumer waits for the producer's SBUF write latency (60
    # Vector cycles), then its own 1300 ns fixed cost; the engines' 64 ns sync is not paid
    a, b = sb(0, 128, 0, 64), sb(0, 128, 4096, 64)
    prog = Program([TensorCopy(a, b), DmaCopy(b, dram_rows(128, 0, 128, 128), queue=1)])
    ct = time_program(prog, TRN2)
    assert ct.ends[0] == 64 * 5  # max(64, 64 / 4) Vector cycles
    assert ct.starts[1] == 64 * 5 + ACCESS_V + FIXED


def test_a_load_is_not_queued_behind_a_store():
    # docs "Queues": loads into SBUF on queue 0, stores out of SBUF (a ReadOut's) on queue 1,
    # so a DmaLoad issued after a ReadOut whose store waits for its evacuation starts after
    # its fixed cost, not behind the store (FIFO holds within one queue only)
    psum = AccessPattern(Space.PSUM, 0, 128, 0, ((1, 512),), "fp32")
    out = dram_rows(128, 1 << 20, 2048, 2048, "fp32")
    # the load: one partition of 2 KiB on engine 0, done before the store begins
    prog = Program([ReadOut(psum, out), DmaLoad(dram_rows(1, 0, 2048, 2048),
                                                sb(0, 1, 0, 1024))])
    ct = time_program(prog, TRN2)  # ops: evacuation, store, load
    assert ct.starts[1] == ct.ends[0] + ACCESS_V + FIXED
    assert ct.starts[2] == FIXED and ct.ends[2] < ct.starts[1]
    assert ct.starts.tolist() == [o.start for o in Reference(prog, TRN2).ops]


@pytest.mark.parametrize("first, second, waits", [
    (Engine.VECTOR, Engine.SCALAR, False),  # v2: Vector and Scalar share the PSUM port only
    (Engine.VECTOR, Engine.GPSIMD, True),  # ... Vector and GpSimd the SBUF one
    (Engine.GPSIMD, Engine.SCALAR, False),
])
def test_neuroncore_v2_shares_the_sbuf_port_between_vector_and_gpsimd(first, second, waits):
    # two SBUF-only copies with no dependency on trn1 (Arch.shared_engine_ports)
    prog = Program([TensorCopy(sb(0, 128, 0, 256), sb(0, 128, 4096, 256), first),
                    TensorCopy(sb(0, 128, 8192, 256), sb(0, 128, 12288, 256), second)])
    ct = time_program(prog, TRN1)
    per = {Engine.VECTOR: 5, Engine.SCALAR: 4, Engine.GPSIMD: 4}  # ticks of 5.6 GHz
    assert ct.ends[0] == 256 * per[first]  # trn1: no perf modes, N cycles
    assert ct.starts[1] == (ct.ends[0] if waits else 0)


# -- engine costs -----------------------------------------------------------------------------
def test_memset_is_half_speed_only_for_zero_in_a_16_bit_format():
    # nki.isa.memset: max(MIN_II, N/2) for a zero value in bf16/fp16, else max(MIN_II, N)
    for value, dtype, cycles in ((0.0, "bf16", 256), (1.0, "bf16", 512), (0.5, "bf16", 512),
                                 (0.0, "fp32", 512)):
        ins = Memset(sb(0, 128, 0, 512, dtype), value)
        assert engine_cycles(ins, TRN2) == cycles, (value, dtype)
        ct = time_program(Program([ins]), TRN2)
        assert ct.ends[0] - ct.starts[0] == cycles * 5


@pytest.mark.parametrize("dtype, step, cycles", [
    ("bf16", 8, 256),  # 16 bytes: still full bandwidth ("above 16 bytes" halves it)
    ("bf16", 9, 512),  # 18 bytes
    ("fp32", 4, 256),  # 16 bytes
    ("fp32", 5, 512),  # 20 bytes
])
def test_a_minor_stride_halves_bandwidth_only_above_16_bytes(dtype, step, cycles):
    # GpSimd (no perf mode): max(MIN_II, N) x 2 when the minor stride is above 16 bytes
    ins = TensorCopy(sb(0, 128, 0, 256, dtype, step), sb(0, 128, 16384, 256, dtype),
                     Engine.GPSIMD)
    assert engine_cycles(ins, TRN2) == cycles


def test_a_matmul_starting_a_bank_waits_for_the_vector_read_of_its_last_group():
    # write after read from the Tensor queue on a Vector reader (docs/timing.md: the
    # START-after-read-out rule is an ordinary WAR on the PSUM region): the second group's
    # START waits for the TensorCopy of the first group's result, + 64 ns sync (308 ticks)
    # + the Vector's 60-cycle access latency; the first MatMul's other readers (none) and
    # its own queue's writers (the PE orders them) add nothing
    ps = AccessPattern(Space.PSUM, 0, 128, 0, ((1, 512),), "fp32")
    w, mv = sb(0, 128, 0, 128), sb(0, 128, 4096, 512)
    prog = Program([LoadStationary(w), MatMul(mv, ps, CalcFlags.START | CalcFlags.STOP, "bf16"),
                    TensorCopy(ps, sb(0, 128, 8192, 512, "fp32")),
                    MatMul(mv, ps, CalcFlags.START | CalcFlags.STOP, "bf16")])
    ct = time_program(prog, TRN2)
    sync = ceil(64 * 4.8)
    copy = 2  # the op of the TensorCopy (the load is op 0, the first MatMul op 1)
    assert ct.starts[3] == ct.ends[copy] + sync + ACCESS_V
    assert ct.starts[3] > ct.ends[1]  # the PE alone would have started it at once
    assert ct.starts.tolist() == [o.start for o in Reference(prog, TRN2).ops]
