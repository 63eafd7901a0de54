"""The scheduler's fast paths give the schedule of the plain ones, op for op (issue 20: speed
never moves a figure).

* The dependency tracker's flat mode (no buckets up to ``deps.FLAT_REGIONS`` regions, then
  the buckets filed once) against buckets from the first region and against flat mode
  throughout.
* The busy time of every queue in one shifted pass (``_Scheduler._busy``) against one queue
  at a time (``_busy_each``).
* The what-if latencies computed when first read against a re-run of each.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from test_reference_scheduler import programs

from systolic.api import make_spec
from systolic.arch import get_arch
from systolic.compiler import lower
from systolic.isa import Program
from systolic.timing import core as tcore
from systolic.timing import deps
from systolic.timing.core import time_program
from systolic.timing.result import WHAT_IF
from systolic.timing.whatif import rerun

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
def test_busy_in_one_pass_equals_one_queue_at_a_time(prog: Program) -> None:
    sch = tcore._Scheduler(TRN2, "list", False)
    sch.run(prog)
    _, starts, ends, queue, nqs, _ = sch._arrays()
    nq = len(tcore.queue_names(TRN2))
    latency = int(ends.max()) if len(ends) else 0
    assert sch._busy(starts, ends, queue, nqs, latency, nq) == \
        sch._busy_each(starts, ends, queue, nqs, nq)


def test_lazy_what_if_equals_each_re_run() -> None:
    prog = _products()[1]
    sch = tcore._Scheduler(TRN2, "list", True)
    sch.run(prog)
    ct = sch.assemble(len(prog), "bf16", "none")
    assert list(ct.what_if) == list(WHAT_IF)
    for k in WHAT_IF:
        assert ct.what_if[k] == rerun(sch.plans, sch.records, k, len(sch.records), sch.fixed)
    assert min(ct.what_if.values()) > 0 and max(ct.what_if.values()) <= ct.latency
    with pytest.raises(KeyError):
        ct.what_if["nothing_free"]
