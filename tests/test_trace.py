"""Trace export: valid Chrome trace-event JSON with the profile's rows, written atomically."""

from __future__ import annotations

import json
import os
from collections import Counter
from itertools import pairwise

import pytest
from test_timing import START, STOP, TRN2, Build

from systolic.compiler import MatmulSpec, lower
from systolic.errors import SystolicError
from systolic.isa import Program
from systolic.report import build_report
from systolic.sim.core import queue_names
from systolic.sim.timing import schedule
from systolic.trace import CORE_PID, write_trace


@pytest.fixture(scope="module")
def case():
    low = lower(MatmulSpec(300, 600, 1100, "bf16"), TRN2)
    return low.program, build_report(low.program, TRN2)


def load_trace(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def test_trace_has_the_profile_rows_and_one_event_per_instruction(case, tmp_path):
    prog, rep = case
    doc = load_trace(write_trace(rep, prog, tmp_path / "t.json"))
    ev = doc["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in ev
             if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"LDWEIGHTS", "MATMUL", "PSUM read-out"} <= set(names.values())
    rows = Counter(names[e["tid"]] for e in ev if e["ph"] == "X" and e["pid"] == 1)
    counts = prog.counts()
    assert rows == {"LDWEIGHTS": counts["LoadStationary"], "MATMUL": counts["MatMul"],
                    "PSUM read-out": counts["ReadOut"]}
    assert doc["otherData"]["cycles"] == rep.cycles


def test_events_carry_the_instruction_and_microseconds(case, tmp_path):
    prog, rep = case
    doc = load_trace(write_trace(rep.schedule, prog, tmp_path / "t.json"))
    us_per_cycle = 1e6 / TRN2.clock_hz
    for e in (e for e in doc["traceEvents"] if e["ph"] == "X" and e["pid"] == 1):
        i = e["args"]["index"]
        ins = prog[i]
        assert e["name"] == f"{type(ins).__name__} #{i}"
        assert e["ts"] == pytest.approx(rep.schedule.starts[i] * us_per_cycle, abs=1e-9)
        assert e["dur"] > 0
        if e["cat"] == "MATMUL":
            assert {"flags", "row_group", "col_group", "shape", "format"} <= set(e["args"])
            n = ins.moving.dims[-1][1]
            assert e["dur"] == pytest.approx(n * us_per_cycle)  # the streaming columns
            assert e["args"]["shape"] == (f"K={ins.moving.partitions} "
                                          f"M={ins.dst.partitions} N={n}")
            assert e["args"]["format"] == "bf16"


def test_whole_core_rows_one_per_engine_and_dma_queue(case, tmp_path):
    prog, rep = case
    doc = load_trace(write_trace(rep, prog, tmp_path / "t.json"))
    ev = [e for e in doc["traceEvents"] if e.get("pid") == CORE_PID]
    names = {e["tid"]: e["args"]["name"] for e in ev if e["name"] == "thread_name"}
    assert set(names.values()) == set(queue_names(TRN2))
    rows = Counter(names[e["tid"]] for e in ev if e["ph"] == "X")
    counts = prog.counts()
    # every PE instruction on the tensor row; every ReadOut's evacuation on vector; each
    # 128-partition DMA (and each ReadOut's store) on all 16 queues
    assert rows["tensor"] == counts["LoadStationary"] + counts["MatMul"]
    assert rows["vector"] == counts["ReadOut"]
    dma = sum(v for k, v in rows.items() if k.startswith("dma"))
    assert dma >= counts["DmaLoad"] + counts["ReadOut"]
    last = max(e["ts"] + e["dur"] for e in ev if e["ph"] == "X")
    assert last <= doc["otherData"]["latency_us"] * (1 + 1e-9)


def test_slices_of_one_row_never_overlap(case, tmp_path):
    prog, rep = case
    doc = load_trace(write_trace(rep, prog, tmp_path / "t.json"))
    by_row: dict[int, list[tuple[float, float]]] = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "X":
            by_row.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_row.values():
        spans.sort()
        assert all(b[0] >= a[1] - 1e-9 for a, b in pairwise(spans))


def test_flags_of_a_hand_built_program(tmp_path):
    prog = Build().load(128, 128).mm(128, 128, 64, START | STOP).read(128, 64).program()
    doc = load_trace(write_trace(schedule(prog, TRN2), prog, tmp_path / "t.json"))
    mm = next(e for e in doc["traceEvents"] if e.get("cat") == "MATMUL")
    assert mm["args"]["flags"] == "START|STOP"
    assert mm["args"]["stall"] == "weight_load"
    assert mm["args"]["start_cycle"] == 32 and mm["args"]["end_cycle"] == 32 + 64 + 254


def test_a_crash_leaves_no_half_file(case, tmp_path, monkeypatch):
    prog, rep = case
    target = tmp_path / "t.json"
    target.write_text("old")

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(json, "dump", boom)
    with pytest.raises(OSError, match="disk full"):
        write_trace(rep, prog, target)
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["t.json"]


def test_a_program_that_does_not_match_is_refused(case, tmp_path):
    prog, rep = case
    with pytest.raises(SystolicError, match="pass the program"):
        write_trace(rep, Program(prog.instructions[:3]), tmp_path / "t.json")
    assert not (tmp_path / "t.json").exists()
