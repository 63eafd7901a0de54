"""Each DMA, dependency and engine-cost rule of docs/timing.md at hand-worked points (trn2:
16 DMA engines of 23 B/ns, 8 partitions each, the throughput figure, 1300 ns fixed cost,
362.5 GB/s of HBM, 64 ns sync, ticks of 4.8 GHz), plus the whole-core scheduler's handling
of patterns that once hung or crawled (issue 22 H5, H6)."""

from __future__ import annotations

from fractions import Fraction
from math import ceil

import pytest
from hypothesis import given
from hypothesis import strategies as st
from reference_core import Reference

from systolic.arch import get_arch
from systolic.isa import (
    AccessPattern,
    AluOp,
    CalcFlags,
    DmaCopy,
    Engine,
    LoadStationary,
    MatMul,
    Memset,
    Program,
    Space,
    TensorCopy,
    TensorTensor,
)
from systolic.timing.core import time_program
from systolic.timing.costs import engine_cycles
from systolic.timing.dma import dma_cost

# every test with the tracker's buckets and its flat scan (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("tracker_mode")

TRN2 = get_arch("trn2")
TICK = 4.8e9
FIXED = ceil(1300 * 4.8)  # 6240 ticks
SYNC = ceil(64 * 4.8)  # 308 ticks
RATE = 23.0  # B/ns per DMA engine, trn2 (DMA overview table)


def sb(p0, parts, off, n, dtype="bf16", step=1):
    return AccessPattern(Space.SBUF, p0, parts, off, ((step, n),), dtype)


def hbm(parts, off, n, dtype="bf16", pitch=None):
    isz = {"bf16": 2, "fp32": 4}[dtype]
    return AccessPattern(Space.DRAM, 0, parts, off, ((1, n),), dtype,
                         partition_step=pitch or n * isz)


def ticks(ns: float) -> int:
    return max(1, ceil(ns * TICK / 1e9))


# -- engines and uneven partition splits ------------------------------------------------
@pytest.mark.parametrize("p0, parts, engines, largest", [
    (0, 9, 2, 8),  # 8 on engine 0, 1 on engine 1: the transfer lasts 8 rows
    (0, 100, 13, 8),  # 12 full bands and 4 on engine 12
    (4, 100, 13, 8),  # 4 on engine 0, 12 full bands, none left over
    (3, 9, 2, 5),  # partitions 3..11: 5 on engine 0, 4 on engine 1
    (60, 8, 2, 4),  # 60..67 straddles engines 7 and 8, 4 each
    (0, 128, 16, 8),
])
def test_a_transfer_lasts_its_fullest_engine(p0, parts, engines, largest):
    # 4 KiB a partition: the figure's 97% (docs "DMA")
    c = dma_cost(hbm(parts, 0, 2048), sb(p0, parts, 0, 2048), TRN2)
    assert len(c.engines) == engines
    assert c.engine_ns == pytest.approx(largest * 4096 / (RATE * 0.97), rel=1e-12)
    # and in the schedule: the fixed cost, then the larger of its engine and HBM times
    ct = time_program(Program([DmaCopy(hbm(parts, 0, 2048), sb(p0, parts, 0, 2048))]), TRN2)
    hb = ceil(Fraction(parts * 4096) * 48 / 3625)  # bytes / (362.5e9 / 4.8e9) a tick
    assert ct.latency == FIXED + max(ticks(c.engine_ns), hb)


@pytest.mark.parametrize("rows, largest", [
    (130, 10),  # bands 0..16: engine 0 takes band 0 (8 rows) and band 16 (2), not 16
    (129, 9),  # band 16 holds one row
    (136, 16),  # 17 full bands: engine 0 takes two
    (256, 16),  # 32 bands, two on each engine
    (100, 8),
])
def test_an_hbm_to_hbm_transfer_past_128_rows_deals_its_bands_round_the_engines(rows, largest):
    # docs "DMA": an HBM-to-HBM transfer spreads its rows like SBUF partitions, from engine
    # 0, eight a band, wrapping past engine 15. 4 KiB rows at a pitch of 8 KiB: 4 KiB runs,
    # the figure's 97%
    src = AccessPattern(Space.DRAM, 0, rows, 0, ((1, 2048),), "bf16", partition_step=8192)
    dst = AccessPattern(Space.DRAM, 0, rows, 1 << 24, ((1, 2048),), "bf16",
                        partition_step=8192)
    c = dma_cost(src, dst, TRN2)
    assert c.engines == tuple(range(min(16, -(-rows // 8))))
    assert c.engine_ns == pytest.approx(largest * 4096 / (RATE * 0.97), rel=1e-12)
    ct = time_program(Program([DmaCopy(src, dst, queue=3)]), TRN2)
    hb = ceil(Fraction(rows * 4096) * 48 / 3625)
    assert ct.latency == FIXED + max(ticks(c.engine_ns), hb)


def test_sbuf_to_sbuf_copies_spread_over_the_destination_bands():
    # 16 copies of one source band (partitions 0..7) to the 16 destination bands: each
    # on its own engine (the written side's band), so all run at once after one fixed cost
    ins = [DmaCopy(sb(0, 8, 0, 2048), sb(8 * e, 8, 8192, 2048), queue=2) for e in range(16)]
    ct = time_program(Program(ins), TRN2)
    one = dma_cost(ins[0].src, ins[0].dst, TRN2)
    assert one.hbm_bytes == 0 and one.engines == (0,)
    assert {dma_cost(i.src, i.dst, TRN2).engines for i in ins} == {(e,) for e in range(16)}
    assert ct.latency == FIXED + ticks(8 * 4096 / (RATE * 0.97))


def test_a_transposing_store_costs_what_the_transposing_load_costs():
    # a.T tile: 128 partitions x 64 bf16, partition k contiguous in device memory
    # (partition_step 2 bytes): 128 B per SBUF partition is the run, at 5% x 90%
    t = AccessPattern(Space.DRAM, 0, 128, 0, ((128, 64),), "bf16", partition_step=2)
    s = sb(0, 128, 0, 64)
    load, store = dma_cost(t, s, TRN2), dma_cost(s, t, TRN2)
    assert load.transposed and store.transposed
    assert load.engine_ns == store.engine_ns == pytest.approx(8 * 128 / (RATE * 0.05 * 0.9))
    # the same bytes as rows, not transposed: 5% only
    assert dma_cost(s, hbm(128, 0, 64), TRN2).engine_ns == pytest.approx(
        8 * 128 / (RATE * 0.05))


def test_hbm_bytes_are_not_served_during_the_fixed_latency():
    # 128 x 32 KiB fp32: the engines need 8 x 32 KiB / 23 B/ns = 11.4 us, the HBM
    # 4 MiB / 362.5 GB/s = 11.6 us; the bytes move after the fixed cost, so the transfer
    # ends at fixed + HBM time, not at the larger of the two from 0
    ins = DmaCopy(hbm(128, 0, 8192, "fp32"), sb(0, 128, 0, 8192, "fp32"))
    hb = ceil(Fraction(128 * 32768) * 48 / 3625)
    assert hb > ticks(8 * 32768 / RATE)
    ct = time_program(Program([ins]), TRN2)
    assert (ct.starts[0], ct.latency) == (FIXED, FIXED + hb)
    # a second one on other queues waits for the HBM, not for the engines' queue
    two = time_program(Program([ins, DmaCopy(hbm(128, 1 << 24, 8192, "fp32"),
                                             sb(0, 128, 65536, 8192, "fp32"), queue=5)]),
                       TRN2)
    assert two.latency == FIXED + 2 * hb


# -- memo keys: a cost never depends on what ran before ---------------------------------
def test_a_store_costs_the_same_after_a_transposing_store_of_the_same_dims():
    s = sb(0, 128, 0, 64)
    tr = AccessPattern(Space.DRAM, 0, 128, 0, ((128, 64),), "bf16", partition_step=2)
    rows = AccessPattern(Space.DRAM, 0, 128, 1 << 20, ((128, 64),), "bf16",
                         partition_step=256)  # same dims and dtype, another pitch
    alone = time_program(Program([DmaCopy(s, rows, queue=1)]), TRN2)
    after = time_program(Program([DmaCopy(s, tr, queue=1), DmaCopy(s, rows, queue=3)]), TRN2)
    assert after.ends[1] - after.starts[1] == alone.ends[0] - alone.starts[0]
    assert alone.latency - FIXED == ticks(dma_cost(s, rows, TRN2).engine_ns)


def test_two_loads_differing_only_in_their_source_pitch_cost_apart():
    # issue 21: the DMA memo without the source partition_step
    s1, s2 = sb(0, 128, 0, 64), sb(0, 128, 4096, 64)
    tr = AccessPattern(Space.DRAM, 0, 128, 0, ((128, 64),), "bf16", partition_step=2)
    rows = AccessPattern(Space.DRAM, 0, 128, 1 << 20, ((128, 64),), "bf16",
                         partition_step=256)
    for a, b in ((tr, rows), (rows, tr)):
        ct = time_program(Program([DmaCopy(a, s1), DmaCopy(b, s2, queue=4)]), TRN2)
        for j, src in enumerate((a, b)):
            assert ct.ends[j] - ct.starts[j] == ticks(dma_cost(src, s1, TRN2).engine_ns)


def test_tensor_tensor_is_n_or_2n_by_its_inputs():
    n = 512
    a, b, d = sb(0, 128, 0, n), sb(0, 128, 2048, n), sb(0, 128, 4096, n)
    pa = AccessPattern(Space.PSUM, 0, 128, 0, ((1, n),), "fp32")
    cases = [  # nki.isa tensor_tensor: N on the fast path, else 2N (>= MIN_II 64)
        (TensorTensor(a, b, d), n),  # bf16, SBUF, contiguous, add
        (TensorTensor(a, b, d, AluOp.MAXIMUM), 2 * n),  # not add/multiply/subtract
        (TensorTensor(a, sb(0, 128, 2048, n, step=2), d), 2 * n),  # b strided
        (TensorTensor(pa, b, d), n),  # one input in PSUM
        (TensorTensor(a, b, d, engine=Engine.GPSIMD), 2 * n),
        (TensorTensor(sb(0, 128, 0, 16), sb(0, 128, 64, 16), d), 64),  # the floor
    ]
    for ins, cyc in cases:
        assert engine_cycles(ins, TRN2) == cyc
    # the operand b decides: the same pair in either order keeps each cost
    fast, slow = cases[0][0], cases[2][0]
    for prog in ([fast, slow], [slow, fast]):
        ct = time_program(Program(prog), TRN2)
        for j, ins in enumerate(prog):
            assert ct.ends[j] - ct.starts[j] == engine_cycles(ins, TRN2) * 5  # 0.96 GHz


# -- dependencies and their latencies ---------------------------------------------------
def test_a_pe_op_waiting_on_a_dma_pays_the_sync_latency():
    w, x = sb(0, 128, 0, 128), sb(0, 128, 8192, 512)
    psum = AccessPattern(Space.PSUM, 0, 128, 0, ((1, 512),), "fp32")
    prog = Program([DmaCopy(hbm(128, 0, 128), w), DmaCopy(hbm(128, 1 << 20, 512), x,
                                                          queue=4),
                    LoadStationary(w), MatMul(x, psum, CalcFlags.START | CalcFlags.STOP,
                                              "bf16")])
    ct = time_program(prog, TRN2)
    assert ct.starts[2] == ct.ends[0] + SYNC  # the DMA is no compute engine: no access
    assert ct.starts[3] == max(ct.ends[1] + SYNC, ct.ends[2])
    assert [o.start for o in Reference(prog, TRN2).ops] == ct.starts.tolist()


def test_the_dependency_overhead_is_only_for_a_same_engine_read_after_write():
    a, b, c = sb(0, 128, 0, 64), sb(0, 128, 4096, 64), sb(0, 128, 8192, 64)
    per_v, per_g = 5, 4  # ticks a Vector / GpSimd cycle
    raw_same = time_program(Program([TensorCopy(a, b), TensorCopy(b, c)]), TRN2)
    assert raw_same.starts[1] == raw_same.ends[0] + 100 * per_v
    raw_cross = time_program(Program([TensorCopy(a, b), TensorCopy(b, c, Engine.GPSIMD)]),
                             TRN2)
    assert raw_cross.starts[1] == raw_cross.ends[0] + SYNC + 60 * per_v
    war_same = time_program(Program([TensorCopy(a, b), Memset(a, 1.0)]), TRN2)
    assert war_same.starts[1] == war_same.ends[0]  # the order kept, nothing paid
    war_cross = time_program(Program([TensorCopy(a, b, Engine.GPSIMD), Memset(a, 1.0)]),
                             TRN2)
    assert war_cross.starts[1] == war_cross.ends[0] + SYNC + 60 * per_g


def test_the_wrapped_part_of_a_strided_row_is_one_row_further():
    # rows of 256 B at pitch 256 starting at byte 192: each row runs into the next pitch
    # row; the last one (row 3) ends at byte 1216, inside rows 4..5 read below
    store = DmaCopy(sb(0, 4, 0, 64, "fp32"),
                    AccessPattern(Space.DRAM, 0, 4, 192, ((1, 64),), "fp32",
                                  partition_step=256), queue=1)
    load = DmaCopy(AccessPattern(Space.DRAM, 0, 2, 1024, ((1, 16),), "fp32",
                                 partition_step=256), sb(8, 2, 4096, 16, "fp32"), queue=0)
    ct = time_program(Program([store, load]), TRN2)  # engines 0 and 1: no engine shared
    assert ct.starts[1] >= ct.ends[0]
    # rows 5..6 of the same pitch are clear of it: no wait beyond the fixed cost
    clear = DmaCopy(AccessPattern(Space.DRAM, 0, 2, 1280, ((1, 16),), "fp32",
                                  partition_step=256), sb(8, 2, 4096, 16, "fp32"), queue=0)
    ct = time_program(Program([store, clear]), TRN2)
    assert ct.starts[1] == FIXED


def test_rows_stored_bottom_up_are_all_in_the_region():
    # a negative pitch: row p at offset - 256 p; a read of row 3 waits for the store
    store = DmaCopy(sb(0, 4, 0, 64, "fp32"),
                    AccessPattern(Space.DRAM, 0, 4, 1024, ((1, 64),), "fp32",
                                  partition_step=-256), queue=1)
    load = DmaCopy(AccessPattern(Space.DRAM, 0, 1, 256, ((1, 64),), "fp32"),
                   sb(0, 1, 4096, 64, "fp32"), queue=0)
    ct = time_program(Program([store, load]), TRN2)
    assert ct.starts[1] >= ct.ends[0]


def test_regions_of_different_pitch_that_share_no_row_do_not_wait():
    # an [8, 8] fp32 store at pitch 32 (bytes 65536..65792, from partitions 120..127:
    # engine 15) and a [64, 128] one at pitch 1024 from byte 512 (engines 0..7): its row
    # 63 ends at byte 65536
    a = AccessPattern(Space.DRAM, 0, 8, 65536, ((1, 8),), "fp32", partition_step=32)
    first = DmaCopy(sb(120, 8, 0, 8, "fp32"), a, queue=1)
    b = AccessPattern(Space.DRAM, 0, 64, 512, ((1, 128),), "fp32", partition_step=1024)
    ct = time_program(Program([first, DmaCopy(sb(0, 64, 0, 128, "fp32"), b, queue=2)]), TRN2)
    assert ct.starts[1] == FIXED
    # four bytes further and its row 63 covers bytes 65536..65540: then it waits
    b2 = AccessPattern(Space.DRAM, 0, 64, 516, ((1, 128),), "fp32", partition_step=1024)
    ct = time_program(Program([first, DmaCopy(sb(0, 64, 0, 128, "fp32"), b2, queue=2)]),
                      TRN2)
    assert ct.starts[1] == ct.ends[0] + FIXED


# -- issue 22: no pattern hangs or crawls -------------------------------------------------
def test_a_step_of_ten_to_the_twenty_is_timed_at_once():
    # H5: a row stride of 2 * 10^20 bytes. The pattern's region goes on the wide list
    # (deps.py) and its run is one element: 128 x 128 descriptors of 2 bytes
    prog = Program.parse("DmaCopy src=DRAM[0:128:512]@0x10100(99999999999999999999:128):bf16"
                         " dst=SBUF[0:128]@0x400(1:128):bf16\n"
                         "TensorCopy src=SBUF[0:128]@0x400(1:128):bf16 "
                         "dst=SBUF[0:128]@0x4000(1:128):bf16")
    ct = time_program(prog, TRN2)
    ns = 8 * 256 / (RATE * 0.014 * 2 / 32)  # 2-byte runs: the figure's 32 B point x 2/32
    assert ct.starts[0] == FIXED and ct.ends[0] == FIXED + ticks(ns)
    assert ct.starts[1] == ct.ends[0] + SYNC


def test_many_narrow_column_copies_are_timed_as_the_reference_does():
    # H6: [128, 1] columns of a [128, 64] tensor, loaded and stored back one by one (the
    # bucketing by flat extent put every column in one bucket); the schedule is the
    # reference's, start for start
    ins = []
    for j in range(64):
        col = AccessPattern(Space.DRAM, 0, 128, 2 * j, ((1, 1),), "bf16", partition_step=128)
        out = AccessPattern(Space.DRAM, 0, 128, 1 << 20 | 2 * j, ((1, 1),), "bf16",
                            partition_step=128)
        t = sb(0, 128, 64 * (j % 2), 1)
        ins += [DmaCopy(col, t), DmaCopy(t, out, queue=1)]
    prog = Program(ins)
    ct = time_program(prog, TRN2, what_if=False)
    ref = Reference(prog, TRN2).ops
    assert ct.starts.tolist() == [o.start for o in ref]
    assert ct.ends.tolist() == [o.end for o in ref]


# -- the dependency index against a scan of every record (issue 22 H6) --------------------
@st.composite
def _pattern(draw):
    if draw(st.integers(0, 3)) == 0:
        p0 = draw(st.integers(0, 127))
        return AccessPattern(Space.SBUF, p0, draw(st.integers(1, 128 - p0)),
                             draw(st.integers(0, 4096)) * 2,
                             ((1, draw(st.sampled_from([1, 2, 40, 3000]))),), "bf16")
    rows = draw(st.sampled_from([1, 2, 128, 200, 5000]))
    n = draw(st.sampled_from([1, 2, 32, 2048, 40000]))
    pitch = draw(st.sampled_from([2, 64, 4096, 8192, 1 << 20, -4096, 10**20]))
    off = draw(st.integers(0, 64)) * draw(st.sampled_from([2, 62, 4096, 1 << 20]))
    if pitch < 0:
        off += rows * -pitch
    step = draw(st.sampled_from([1, 1, 3, 10**20]))
    return AccessPattern(Space.DRAM, 0, rows, off, ((step, n),), "bf16", partition_step=pitch)


@given(st.lists(st.tuples(st.lists(_pattern(), max_size=2), st.lists(_pattern(), max_size=2),
                          st.integers(0, 3)), min_size=1, max_size=40))
def test_the_dependency_index_finds_what_a_scan_of_every_record_finds(ops):
    from systolic.timing.deps import Tracker
    from systolic.timing.regions import region

    class Scan(Tracker):  # the slow path: every bucket of the index, every time
        def _keys(self, rid):
            return tuple(self.index)

    queues: list[int] = []
    fast, slow = Tracker(queues), Scan(queues)
    for op, (rd, wr, q) in enumerate(ops):
        got = []
        for tr in (fast, slow):
            r = tuple(tr.intern(region(ap)) for ap in rd)
            w = tuple(tr.intern(region(ap)) for ap in wr)
            got.append((tr.deps(r, w), r, w))
        assert got[0][0] == got[1][0], op
        queues.append(q)
        for tr, (_, r, w) in zip((fast, slow), got, strict=True):
            tr.commit(op, r, w)


def test_a_wide_region_looked_up_again_sees_a_bucket_filed_since():
    # the tracker keeps each region's bucket lookup with the versions of what it read
    # (issue 20); a wide region looked up before a narrow one inside it is filed must not
    # reuse that answer: its write after the narrow write depends on it (WAW)
    from systolic.timing.deps import Tracker
    from systolic.timing.regions import region

    class Scan(Tracker):  # the slow path: every bucket of the index, every time
        def _keys(self, rid):
            return tuple(self.index)

    wide, narrow, other = sb(0, 128, 0, 8192), sb(0, 128, 64, 8), sb(0, 128, 20480, 8)
    ops = [((wide,), (other,), 0),  # read the wide region: its lookup is kept
           ((other,), (narrow,), 1),  # write a narrow region inside it: a new fine bucket
           ((other,), (wide,), 2)]  # write the wide region: after both
    queues: list[int] = []
    fast, slow = Tracker(queues), Scan(queues)
    for op, (rd, wr, q) in enumerate(ops):
        got = []
        for tr in (fast, slow):
            r = tuple(tr.intern(region(ap)) for ap in rd)
            w = tuple(tr.intern(region(ap)) for ap in wr)
            got.append((tr.deps(r, w), r, w))
        assert got[0][0] == got[1][0], op
        queues.append(q)
        for tr, (_, r, w) in zip((fast, slow), got, strict=True):
            tr.commit(op, r, w)
    # by hand: it reads what op 0 wrote (RAW); it overwrites what op 1 wrote (WAW) and what
    # op 0 read (WAR)
    assert got[1][0] == ({0}, {0, 1})
