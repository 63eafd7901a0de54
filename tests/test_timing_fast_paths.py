"""The scheduler's fast paths give the schedule of the plain ones, op for op (issue 20: speed
never moves a figure).

* The dependency tracker's flat mode (no buckets up to ``deps.FLAT_REGIONS`` regions, then
  the buckets filed once) against buckets from the first region and against flat mode
  throughout.
* The busy time of every queue from the merged intervals of each group of ops holding the
  same queues (timing/busy.py ``busy_grouped``, and its plain-Python twin ``busy_small`` for
  programs of up to ``BUSY_NUMPY`` ops) against one queue at a time (``busy_each``).
* The what-if latencies (longest-path arithmetic over the resource predecessors found once,
  ``whatif.LazyWhatIf``) against the plain re-run of each (``whatif.rerun``), for whole
  programs and prefixes, in both schedules.
* The tracker's answer to an op of the pipelined (Tensor) queue without that queue's
  writers (``Tracker.deps(..., pipelined=True)``) against the whole answer, whose Tensor-queue
  dependencies the scheduler then drops.
* Access patterns equal by value but distinct objects against shared ones (the region memo
  keyed by value).
* The bucket index, with its answers kept between ops, against a scan of every bucket.
* A timeline forgetting its oldest gaps ``KEEP`` at a time against one at a time (and its
  answer for a start at or past its end, given before any gap is searched, against the
  search).
* The tracker's hull of the device memory written so far (a read outside it is answered "no
  writer" without a lookup) against the lookup at every read.
* The records and plans the scheduler keeps as flat lists of ints against the NamedTuples
  that document their fields.
"""

from __future__ import annotations

import bisect
import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_reference_scheduler import programs

from systolic.api import make_spec
from systolic.arch import get_arch
from systolic.compiler import lower
from systolic.isa import (
    AccessPattern,
    CalcFlags,
    DmaCopy,
    LoadStationary,
    MatMul,
    Program,
    Space,
    TensorCopy,
)
from systolic.timing import core as tcore
from systolic.timing import deps, timeline, whatif
from systolic.timing.busy import busy_each, busy_grouped, busy_small
from systolic.timing.core import time_program
from systolic.timing.critical_path import RECORD, OpRecord
from systolic.timing.regions import region
from systolic.timing.result import WHAT_IF
from systolic.timing.whatif import Plan, rerun

TRN2 = get_arch("trn2")


def _same(a: object, b: object) -> None:
    for name in ("op_instr", "op_queue", "op_queues", "starts", "ends", "op_cause"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    for name in ("latency", "bound_ticks", "busy_ticks", "instructions", "dma_bytes",
                 "hbm_bytes", "useful_macs"):
        assert getattr(a, name) == getattr(b, name), name
    assert dict(a.what_if) == dict(b.what_if)  # type: ignore[attr-defined]


def _products() -> list[Program]:
    out = []
    for m, k, n, dt, mode in [(384, 640, 448, "bf16", "none"), (1024, 384, 2048, "bf16", "none"),
                              (512, 512, 512, "fp32", "none"),
                              (768, 1024, 640, "fp8_e4m3", "double_row")]:
        out.append(lower(make_spec(m, k, n, dt, TRN2, mode), TRN2, check=False).program)
    return out


@pytest.mark.parametrize("limit", [0, 10**9])
def test_flat_tracker_gives_the_bucketed_schedule(monkeypatch, limit: int) -> None:
    progs = _products()
    want = [time_program(p, TRN2) for p in progs]
    monkeypatch.setattr(deps, "FLAT_REGIONS", limit)
    for p, w in zip(progs, want, strict=True):
        _same(time_program(p, TRN2), w)


@settings(max_examples=60, deadline=None)
@given(programs())
def test_flat_tracker_on_random_programs(prog: Program) -> None:
    want = time_program(prog, TRN2, schedule="program-order")
    old = deps.FLAT_REGIONS
    try:
        for limit in (0, 3):  # buckets throughout; flat for three regions, then buckets
            deps.FLAT_REGIONS = limit
            _same(time_program(prog, TRN2, schedule="program-order"), want)
    finally:
        deps.FLAT_REGIONS = old


@settings(max_examples=60, deadline=None)
@given(programs())
def test_busy_by_groups_equals_one_queue_at_a_time(prog: Program) -> None:
    _busy_both_ways(prog)


def _busy_both_ways(prog: Program) -> None:
    sch = tcore._Scheduler(TRN2, "list", False)
    sch.run(prog)
    _, starts, ends, queue, nqs, _ = sch._arrays()
    nq = len(tcore.queue_names(TRN2))
    n_dma = TRN2.dma_engines
    want = busy_each(starts, ends, queue, nqs, nq, n_dma)
    assert busy_grouped(starts, ends, queue, nqs, nq, n_dma) == want
    # the plain-Python path of small programs (BUSY_NUMPY), from the scheduler's own lists
    rec = sch.records
    assert busy_small(rec[2::RECORD], sch.ends, sch.queue, rec[1::RECORD], nq, n_dma) == want


def test_busy_by_groups_with_transfers_over_overlapping_engine_sets() -> None:
    """Transfers over engines 0-15, 0-1, 1-13 and (device memory to device memory) 0:
    several groups hold one engine, and their unions overlap."""
    def hbm(off: int, rows: int, pitch: int = 4096) -> AccessPattern:
        return AccessPattern(Space.DRAM, 0, rows, off, ((1, 512),), "bf16",
                             partition_step=pitch)

    def sb(p0: int, rows: int, off: int) -> AccessPattern:
        return AccessPattern(Space.SBUF, p0, rows, off, ((1, 512),), "bf16")

    ins = []
    for j in range(12):
        ins += [DmaCopy(hbm(j << 20, 128), sb(0, 128, 1024 * (j % 4)), queue=j % 3),
                DmaCopy(hbm((j << 20) + (1 << 30), 9), sb(0, 9, 8192), queue=1),
                DmaCopy(hbm((j << 20) + (2 << 30), 100), sb(8, 100, 16384), queue=2),
                DmaCopy(hbm((j << 20) + (3 << 30), 1, 0), hbm((j << 20) + (4 << 30), 1, 0))]
    prog = Program(ins)
    assert {tuple(tcore.dma_cost(i.src, i.dst, TRN2).engines) for i in ins} >= \
        {tuple(range(16)), (0, 1), tuple(range(1, 14))}
    _busy_both_ways(prog)


@pytest.mark.parametrize("prog", _products()[:2])
def test_busy_by_groups_on_products(prog: Program) -> None:
    _busy_both_ways(prog)


def test_busy_in_python_or_numpy_gives_the_same_timing(monkeypatch) -> None:
    """Whole timings with every program's busy times found by numpy (limit 0) against the
    same in Python (limit 10**9): the products here are at most BUSY_NUMPY ops, so the
    default limit already takes the Python path and cannot be the reference."""
    progs = _products()
    monkeypatch.setattr(tcore, "BUSY_NUMPY", 10**9)
    want = [time_program(p, TRN2) for p in progs]
    monkeypatch.setattr(tcore, "BUSY_NUMPY", 0)
    for p, w in zip(progs, want, strict=True):
        _same(time_program(p, TRN2), w)


def test_pe_cost_key_names_every_field_the_costs_read() -> None:
    """The compute costs are memoised on ``pe.cost_key`` (issue 20): instructions with one
    key have one entry of costs, over products of every dense format and MX, ragged tiles
    in each dimension and both fp32 passes."""
    from systolic.isa import MatmultMx
    from systolic.timing.pe import cost_key
    from systolic.timing.tensor_engine import _compute_entry

    trn3 = get_arch("trn3")
    cases = [(TRN2, m, k, n, dt, mode) for m, k, n in [(200, 300, 700), (128, 64, 512)]
             for dt, mode in [("bf16", "none"), ("fp32", "none"), ("fp8_e4m3", "double_row"),
                              ("fp8_e4m3", "none"), ("int8", "none")]]
    cases += [(trn3, 256, 300, 600, fmt, "none") for fmt in ("mxfp8_e4m3", "mxfp4")]
    seen: dict[tuple[object, ...], tuple[object, tuple[int, ...]]] = {}
    kinds = set()
    for arch, m, k, n, dt, mode in cases:
        prog = lower(make_spec(m, k, n, dt, arch, mode), arch, check=False).program
        for ins in prog:
            if isinstance(ins, MatMul | MatmultMx):
                kinds.add(type(ins))
                key = (arch.name, cost_key(ins))
                entry = _compute_entry(ins, arch)
                assert seen.setdefault(key, (ins, entry))[1] == entry, (ins, seen[key][0])
    assert kinds == {MatMul, MatmultMx} and len(seen) > 20


def test_lazy_what_if_equals_each_re_run() -> None:
    prog = _products()[1]
    sch = tcore._Scheduler(TRN2, "list", True)
    sch.run(prog)
    ct = sch.assemble(len(prog), "bf16", "none")
    assert list(ct.what_if) == list(WHAT_IF)
    starts = sch.records[2::RECORD]
    for k in WHAT_IF:
        assert ct.what_if[k] == rerun(sch.plans, starts, k, len(sch.queue), sch.fixed)
    assert min(ct.what_if.values()) > 0 and max(ct.what_if.values()) <= ct.latency
    with pytest.raises(KeyError):
        ct.what_if["nothing_free"]


def _what_ifs_equal_re_runs(prog: Program, schedule: str) -> None:
    sch = tcore._Scheduler(TRN2, schedule, True)
    sch.run(prog)
    starts = sch.records[2::RECORD]
    for cut in sorted({len(prog), len(prog) // 2, 1}):
        ct = sch.assemble(cut, "bf16", "none")
        n = len(ct.starts)
        for k in WHAT_IF:
            assert ct.what_if[k] == rerun(sch.plans, starts, k, n, sch.fixed), (k, cut)
            assert ct.what_if[k] <= ct.latency


@settings(max_examples=80, deadline=None)
@given(programs())
def test_what_if_arithmetic_equals_the_re_run_on_random_programs(prog: Program) -> None:
    for schedule in tcore.SCHEDULES:
        _what_ifs_equal_re_runs(prog, schedule)


@pytest.mark.parametrize("schedule", tcore.SCHEDULES)
def test_what_if_arithmetic_equals_the_re_run_on_products(schedule: str) -> None:
    for prog in _products():
        _what_ifs_equal_re_runs(prog, schedule)


def test_what_if_arithmetic_equals_the_re_run_on_an_nki_kernel() -> None:
    from pathlib import Path

    from systolic import nki

    root = Path(__file__).resolve().parents[1]
    for file, fn, args in [("tiled_matmul.py", "tiled_matmul", ["bf16[512,256]",
                                                                 "bf16[512,1024]"]),
                           ("layernorm.py", "layernorm", ["fp32[256,1024]", "fp32[1024]",
                                                          "fp32[1024]"])]:
        rec = nki.record_kernel(str(root / "examples" / "kernels" / file), fn, args, {},
                                arch="trn2")
        _what_ifs_equal_re_runs(rec.program, "list")


class _WholeAnswers(deps.Tracker):
    """The tracker as it answered before ``pipelined``: every writer, whatever the op."""

    def deps(self, reads: tuple[int, ...], writes: tuple[int, ...],
             pipelined: bool = False) -> tuple[set[int], set[int]]:
        return super().deps(reads, writes, False)


def _timed_with(prog: Program, tracker: type, schedule: str) -> object:
    sch = tcore._Scheduler(TRN2, schedule, True)
    sch.tracker = tracker(sch.queue, tcore._TENSOR)
    sch.run(prog)
    return sch.assemble(len(prog), "bf16", "none")


@settings(max_examples=60, deadline=None)
@given(programs())
def test_pipelined_answers_give_the_schedule_of_whole_answers(prog: Program) -> None:
    for schedule in tcore.SCHEDULES:
        _same(_timed_with(prog, deps.Tracker, schedule),
              _timed_with(prog, _WholeAnswers, schedule))


def test_pipelined_answers_on_products() -> None:
    for prog in _products():
        _same(_timed_with(prog, deps.Tracker, "list"), _timed_with(prog, _WholeAnswers, "list"))


def test_an_accumulation_group_answers_its_own_matmuls_without_their_writers() -> None:
    """K MatMuls into one PSUM region: each is answered without the group's earlier
    MatMuls (the PE orders them); a reader of the region still waits for all K."""
    sch = tcore._Scheduler(TRN2, "list", False)
    prog = lower(make_spec(128, 128 * 8, 512, "bf16", TRN2, "none"), TRN2, check=False).program
    seen: list[tuple[bool, set[int], set[int]]] = []
    real = sch.tracker.deps

    def spy(reads: tuple[int, ...], writes: tuple[int, ...], pipelined: bool = False
            ) -> tuple[set[int], set[int]]:
        raw, order = real(reads, writes, pipelined)
        seen.append((pipelined, set(raw), set(order)))
        return raw, order

    sch.tracker.deps = spy  # type: ignore[method-assign]
    sch.run(prog)
    tensor = {op for op, q in enumerate(sch.queue) if q == tcore._TENSOR}
    pe_answers = [r | o for p, r, o in seen if p]
    assert pe_answers and all(not (a & tensor) for a in pe_answers)
    matmuls = [op for op, i in enumerate(sch.records[::RECORD])
               if type(prog[i]).__name__ == "MatMul"]
    assert len(matmuls) == 8
    readers = [r for p, r, _ in seen if not p and set(matmuls) <= r]
    assert readers  # the read-out of the bank waits for every MatMul of the group


def test_records_and_plans_are_the_documented_fields() -> None:
    prog = _products()[0]
    sch = tcore._Scheduler(TRN2, "list", True)
    sch.run(prog)
    assert len(sch.records) == RECORD * len(sch.plans) == RECORD * len(sch.ends)
    kinds = {"MatMul": whatif.PE, "LoadStationary": whatif.LOAD, "DmaLoad": whatif.DMA}
    for op, end in enumerate(sch.ends):
        r = OpRecord(*sch.records[RECORD * op:RECORD * (op + 1)])
        p = sch.plans.plan(op)
        assert (isinstance(p, Plan) and p.dur == end - r.start) or p.kind == whatif.DMA
        assert r.start <= end and r.queues >= 1 and p.dur > 0
        name = type(prog[r.instr]).__name__
        if name in kinds:
            assert p.kind == kinds[name]
        if p.kind == whatif.DMA:
            assert p.resources and p.hbm > 0 and p.interval == 0
        if p.kind == whatif.PE:
            assert p.interval >= p.dur // 2 and p.hbm == 0
        assert all(0 <= d < op and lat >= 0 for d, lat in p.deps)


class _PlainTimeline:
    """timeline.Timeline as it forgot gaps before issue 20: the oldest gap deleted at each
    new gap past KEEP (the reference the amortised forgetting is held to)."""

    def __init__(self) -> None:
        self.end, self.last = 0, -1
        self.lo: list[int] = []
        self.hi: list[int] = []
        self.op: list[int] = []

    def fit(self, t: int, d: int) -> tuple[int, int]:
        if self.lo and d >= 0:
            i = bisect.bisect_right(self.hi, t)
            stop = min(len(self.hi), i + timeline.WINDOW)
            while i < stop:
                s = max(self.lo[i], t)
                if s + d <= self.hi[i]:
                    return s, (self.op[i] if s > t else -1)
                i += 1
        return (self.end, self.last) if self.end > t else (t, -1)

    def reserve(self, s: int, e: int, op: int) -> None:
        if s >= self.end:
            if s > self.end:
                self.lo.append(self.end)
                self.hi.append(s)
                self.op.append(self.last)
                if len(self.lo) > timeline.KEEP:
                    del self.lo[0], self.hi[0], self.op[0]
            if e >= self.end:
                self.end, self.last = e, op
            return
        i = bisect.bisect_right(self.hi, s)
        lo, hi, before = self.lo[i], self.hi[i], self.op[i]
        pieces = ([(lo, s, before)] if s > lo else []) + ([(e, hi, op)] if e < hi else [])
        self.lo[i:i + 1] = [p[0] for p in pieces]
        self.hi[i:i + 1] = [p[1] for p in pieces]
        self.op[i:i + 1] = [p[2] for p in pieces]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 400), st.integers(0, 30), st.booleans()),
                min_size=1, max_size=120), st.integers(1, 6))
def test_forgetting_gaps_in_batches_answers_as_one_at_a_time(
        steps: list[tuple[int, int, bool]], keep: int) -> None:
    old = timeline.KEEP
    timeline.KEEP = keep
    try:
        fast, plain = timeline.Timeline(), _PlainTimeline()
        copies: list[tuple[timeline.Timeline, _PlainTimeline]] = []
        for op, (t, d, split) in enumerate(steps):
            got = fast.fit(t, d)
            assert got == plain.fit(t, d)
            fast.reserve(got[0], got[0] + d, op)
            plain.reserve(got[0], got[0] + d, op)
            if split:  # a copy booked apart from now on (the DMA engines' split)
                twin = _PlainTimeline()
                twin.end, twin.last = plain.end, plain.last
                twin.lo, twin.hi, twin.op = plain.lo[:], plain.hi[:], plain.op[:]
                copies.append((fast.copy(), twin))
            for a, b in copies:
                assert a.fit(t, d + 1) == b.fit(t, d + 1)
        live = slice(fast.base, None)
        assert (fast.gap_lo[live], fast.gap_hi[live], fast.gap_op[live]) == \
            (plain.lo, plain.hi, plain.op)
    finally:
        timeline.KEEP = old


def _fresh_patterns(prog: Program) -> Program:
    """The same Program with every access pattern a new object of the same value."""
    out = []
    for ins in prog:
        changes = {f.name: dataclasses.replace(v) for f in dataclasses.fields(ins)
                   if isinstance(v := getattr(ins, f.name), AccessPattern)}
        out.append(dataclasses.replace(ins, **changes))
    return Program(out)


@settings(max_examples=60, deadline=None)
@given(programs())
def test_patterns_equal_by_value_give_the_schedule_of_shared_ones(prog: Program) -> None:
    """The region memo keyed by value (a pattern made again) against each pattern's own
    region: sharing the pattern objects or not changes no figure."""
    fresh = _fresh_patterns(prog)
    pairs = [(getattr(x, f.name), getattr(y, f.name)) for x, y in zip(prog, fresh, strict=True)
             for f in dataclasses.fields(x)]
    aps = [(a, b) for a, b in pairs if isinstance(a, AccessPattern)]
    assert aps and all(a is not b and a == b for a, b in aps)
    for schedule in tcore.SCHEDULES:
        _same(time_program(fresh, TRN2, schedule=schedule),
              time_program(prog, TRN2, schedule=schedule))


@st.composite
def _pattern(draw: st.DrawFn) -> AccessPattern:
    """SBUF patterns narrow and wide (fine and coarse buckets, the wide list) and device
    memory patterns of a few pitches."""
    if draw(st.booleans()):
        p0 = draw(st.integers(0, 127))
        return AccessPattern(Space.SBUF, p0, draw(st.integers(1, 128 - p0)),
                             draw(st.integers(0, 300)) * 64 + draw(st.sampled_from([0, 60])),
                             ((1, draw(st.sampled_from([1, 2, 30, 1000, 70000]))),), "bf16")
    rows = draw(st.sampled_from([1, 2, 128, 300]))
    pitch = draw(st.sampled_from([64, 4096, -4096]))
    off = draw(st.integers(0, 40)) * draw(st.sampled_from([2, 2048, 1 << 20])) + \
        (rows * 4096 if pitch < 0 else 0)
    return AccessPattern(Space.DRAM, 0, rows, off, ((1, draw(st.sampled_from([1, 16, 2048]))),),
                         "bf16", partition_step=pitch)


class _Scan(deps.Tracker):
    """The bucket index's reference: every bucket of the index looked at, every time."""

    def _keys(self, rid: int) -> tuple[deps.Key, ...]:
        return tuple(self.index)


def _trackers_agree(slow_cls: type[deps.Tracker], flat: int,
                    ops: list[tuple[list[AccessPattern], list[AccessPattern], int]]) -> None:
    """The tracker and ``slow_cls`` (a reference with a shortcut taken out), both with
    ``FLAT_REGIONS`` = ``flat``, given the same ops (reads, writes, queue 0 pipelined): the
    same dependencies of each op."""
    old = deps.FLAT_REGIONS
    deps.FLAT_REGIONS = flat
    try:
        queues: list[int] = []
        fast, slow = deps.Tracker(queues), slow_cls(queues)
        for op, (rd, wr, q) in enumerate(ops):
            got = []
            for tr in (fast, slow):
                r = tuple(tr.intern(region(ap)) for ap in rd)
                w = tuple(tr.intern(region(ap)) for ap in wr)
                got.append((tr.deps(r, w, q == 0), r, w))
            assert got[0][0] == got[1][0], op
            queues.append(q)
            for tr, (_, r, w) in zip((fast, slow), got, strict=True):
                tr.commit(op, r, w)
    finally:
        deps.FLAT_REGIONS = old


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.lists(_pattern(), max_size=2), st.lists(_pattern(), max_size=2),
                          st.integers(0, 3)), min_size=1, max_size=60))
def test_the_bucket_index_with_kept_answers_finds_what_a_scan_finds(
        ops: list[tuple[list[AccessPattern], list[AccessPattern], int]]) -> None:
    """Buckets from the first region (FLAT_REGIONS 0), answers kept between ops (the
    tracker's ``answers``), against every bucket scanned at every lookup, op for op."""
    _trackers_agree(_Scan, 0, ops)


def test_what_if_loads_wait_for_the_previous_matmul_start() -> None:
    """Four weight loads between two MatMuls, the first MatMul late (it waits for a Vector
    copy): the loads' shadow latches free only when it starts, so with DMA free too the
    second MatMul starts 4 loads (4 x 32 cycles) after the first, not one issue interval."""
    def sbp(off: int, n: int, dtype: str = "bf16") -> AccessPattern:
        return AccessPattern(Space.SBUF, 0, 128, off, ((1, n),), dtype)

    ps = AccessPattern(Space.PSUM, 0, 128, 0, ((1, 64),), "fp32")
    one = CalcFlags.START | CalcFlags.STOP
    prog = Program([TensorCopy(sbp(0, 8192), sbp(20000, 8192)), LoadStationary(sbp(40000, 128)),
                    MatMul(sbp(20000, 64), ps, one, "bf16"),
                    *(LoadStationary(sbp(40000 + 256 * k, 128)) for k in range(1, 5)),
                    MatMul(sbp(60000, 64), ps, one, "bf16")])
    _what_ifs_equal_re_runs(prog, "list")
    ct = time_program(prog, TRN2)
    r = TRN2.tick_hz // int(TRN2.clock_hz)
    mm0, mm1 = 2, 7
    assert ct.starts[mm1] - ct.starts[mm0] == 4 * 32 * r  # the real schedule
    assert ct.what_if["dma_free"] == ct.latency  # nothing here is a DMA


class _NoHull(deps.Tracker):
    """The tracker with its written hull covering every address: each read of device memory
    is looked up (the reference of the hull's shortcut)."""

    def __init__(self, queue: list[int]) -> None:
        super().__init__(queue)
        self.written_lo, self.written_hi = -(1 << 62), 1 << 62


@pytest.mark.parametrize("flat", [0, deps.FLAT_REGIONS])
@settings(max_examples=150, deadline=None)
@given(ops=st.lists(st.tuples(st.lists(_pattern(), max_size=2),
                              st.lists(_pattern(), max_size=2), st.integers(0, 3)),
                    min_size=1, max_size=60))
def test_the_written_hull_answers_as_a_lookup_at_every_read(
        flat: int, ops: list[tuple[list[AccessPattern], list[AccessPattern], int]]) -> None:
    """Device-memory reads outside the hull of what was written answered without a lookup,
    against a lookup at every read, op for op (buckets from the first region, and flat)."""
    _trackers_agree(_NoHull, flat, ops)


def test_a_read_past_the_written_hull_finds_no_writer_and_one_inside_finds_it(
        tracker_mode: str) -> None:
    """Two device-memory tensors: a store into the second, then reads of each. The read of
    the first (outside the hull) has no dependency and is answered without a scan of the
    records; a read of the store's last byte (inside it, a pattern of another pitch) is
    scanned and waits for the store. Flat and with buckets (conftest's tracker_mode)."""
    def dram(off: int, rows: int, cols: int, pitch: int, dtype: str = "bf16") -> AccessPattern:
        return AccessPattern(Space.DRAM, 0, rows, off, ((1, cols),), dtype,
                             partition_step=pitch)

    c = 1 << 20
    tr = deps.Tracker([1, 0, 0, 0])
    store = tr.intern(region(dram(c, 128, 512, 4096)))
    tr.deps((), (store,))
    tr.commit(0, (), (store,))
    a = tr.intern(region(dram(0, 128, 512, 4096)))
    # the store's very last byte (an 8-bit element)
    tail = tr.intern(region(dram(c + 127 * 4096 + 1023, 1, 1, 0, "fp8_e4m3")))
    scanned: list[int] = []
    scan = tr._scan

    def spy(rid: int, written: bool = False) -> list:
        scanned.append(rid)
        return scan(rid, written)

    tr._scan = spy  # type: ignore[method-assign]
    assert tr.deps((a,), ()) == (set(), set())
    assert a not in scanned  # the hull answered: no lookup of the records
    assert tr.deps((tail,), ()) == ({0}, set())
    assert tail in scanned
