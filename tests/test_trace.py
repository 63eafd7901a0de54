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
from systolic.timing.tensor_engine import schedule
from systolic.views.report import build_report
from systolic.views.trace import CORE_PID, write_trace


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


PROFILE_ROWS = ["Tensor (LDWEIGHTS)", "TensorMatrix (MATMUL)", "Vector", "Scalar", "GpSimd",
                *(f"DMA engine {q}" for q in range(TRN2.dma_engines))]


def row_names(doc, pid):
    return {e["tid"]: e["args"]["name"] for e in doc["traceEvents"]
            if e["ph"] == "M" and e.get("pid") == pid and e["name"] == "thread_name"}


def check_well_formed(doc):
    """Every event as the Chrome trace-event format wants it: complete events ("X") with a
    non-negative ts and dur in microseconds on a named process and thread, metadata ("M")
    naming them; nothing else; slices of one row never overlap."""
    ev = doc["traceEvents"]
    assert doc["otherData"]["time_unit"] == "us"
    procs = {e["pid"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]) for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    spans: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for e in ev:
        assert e["ph"] in ("X", "M")
        assert isinstance(e["name"], str) and e["name"]
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "process_sort_index", "thread_name",
                                 "thread_sort_index")
            assert isinstance(e["args"], dict)
            continue
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        assert (e["pid"], e["tid"]) in threads and e["pid"] in procs
        assert isinstance(e["ts"], float | int) and e["ts"] >= 0
        assert isinstance(e["dur"], float | int) and e["dur"] >= 0
        assert isinstance(e["cat"], str) and isinstance(e["args"], dict)
        spans.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for row in spans.values():
        row.sort()
        assert all(b[0] >= a[1] - 1e-9 for a, b in pairwise(row))


def test_whole_core_rows_one_per_engine_and_dma_queue(case, tmp_path):
    """The profile's rows, named as Neuron Explorer names them, every one present (idle
    ones too), in profile order; each instruction on the row of the engine that runs it."""
    prog, rep = case
    doc = load_trace(write_trace(rep, prog, tmp_path / "t.json"))
    check_well_formed(doc)
    names = row_names(doc, CORE_PID)
    assert [names[t] for t in sorted(names)] == PROFILE_ROWS
    ev = [e for e in doc["traceEvents"] if e.get("pid") == CORE_PID]
    rows = Counter(names[e["tid"]] for e in ev if e["ph"] == "X")
    counts = prog.counts()
    # every weight load on Tensor, every MatMul on TensorMatrix; every ReadOut's evacuation
    # on vector; each 128-partition DMA (and each ReadOut's store) on some DMA queues
    assert rows["Tensor (LDWEIGHTS)"] == counts["LoadStationary"]
    assert rows["TensorMatrix (MATMUL)"] == counts["MatMul"]
    assert rows["Vector"] == counts["ReadOut"]
    assert rows["Scalar"] == rows["GpSimd"] == 0
    dma = sum(v for k, v in rows.items() if k.startswith("DMA engine"))
    assert dma >= counts["DmaLoad"] + counts["ReadOut"]
    for e in ev:
        if e["ph"] == "X":
            ins = prog[e["args"]["index"]]
            assert e["name"] == f"{type(ins).__name__} #{e['args']['index']}"
            want = {"LDWEIGHTS": "LoadStationary", "MATMUL": "MatMul"}.get(e["cat"])
            assert want is None or type(ins).__name__ == want
    last = max(e["ts"] + e["dur"] for e in ev if e["ph"] == "X")
    assert last <= doc["otherData"]["latency_us"] * (1 + 1e-9)
    # the whole core is listed first, then the Tensor Engine alone
    sort = {e["pid"]: e["args"]["sort_index"] for e in doc["traceEvents"]
            if e["name"] == "process_sort_index"}
    assert sort[CORE_PID] < sort[1]


def test_matmul_command_trace_is_well_formed(tmp_path, capsys):
    from systolic.cli import main

    out = tmp_path / "m.json"
    assert main(["matmul", "1024", "384", "2048", "--trace", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    doc = load_trace(out)
    check_well_formed(doc)
    names = row_names(doc, CORE_PID)
    assert [names[t] for t in sorted(names)] == PROFILE_ROWS
    assert set(row_names(doc, 1).values()) == {"LDWEIGHTS", "MATMUL", "PSUM read-out"}


def test_a_kernels_trace_has_every_row(tmp_path):
    """A recorded NKI kernel, timed on the whole core, written from its CoreTiming alone."""
    from pathlib import Path

    import ml_dtypes
    import numpy as np

    import systolic.nki as snki
    from systolic.timing.core import time_program

    ex = Path(__file__).resolve().parents[1] / "examples" / "kernels" / "tiled_matmul.py"
    a = np.zeros((512, 256), ml_dtypes.bfloat16)
    b = np.zeros((512, 1024), ml_dtypes.bfloat16)
    rec = snki.record(snki.load_kernel(str(ex), "tiled_matmul"), [a, b])
    core = time_program(rec.program, TRN2)
    doc = load_trace(write_trace(core, rec.program, tmp_path / "k.json"))
    check_well_formed(doc)
    names = row_names(doc, CORE_PID)
    assert [names[t] for t in sorted(names)] == PROFILE_ROWS
    assert not row_names(doc, 1)  # no Tensor-Engine-alone process without a Report
    rows = Counter(names[e["tid"]] for e in doc["traceEvents"] if e["ph"] == "X")
    counts = rec.program.counts()
    assert rows["TensorMatrix (MATMUL)"] == counts["MatMul"] > 0
    assert rows["Tensor (LDWEIGHTS)"] == counts["LoadStationary"] > 0
    for engine in ("vector", "scalar", "gpsimd"):  # one slice per op of each engine queue
        assert rows[engine.title().replace("Gpsimd", "GpSimd")] == core.instructions[engine]
    for q in range(TRN2.dma_engines):
        assert rows[f"DMA engine {q}"] == core.instructions[f"dma{q}"]
    assert doc["otherData"]["latency_us"] == pytest.approx(core.latency_us)


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


def test_a_timing_without_op_causes_keeps_one_tensor_row(case, tmp_path):
    """A CoreTiming built without per-op causes (older callers) cannot split the PE queue:
    its ops all go on one Tensor row, nothing is lost."""
    import dataclasses

    prog, rep = case
    core = dataclasses.replace(rep.core, op_cause=None)
    doc = load_trace(write_trace(core, prog, tmp_path / "t.json"))
    check_well_formed(doc)
    names = row_names(doc, CORE_PID)
    assert [names[t] for t in sorted(names)][:4] == ["Tensor", "Vector", "Scalar", "GpSimd"]
    rows = Counter(names[e["tid"]] for e in doc["traceEvents"] if e["ph"] == "X")
    counts = prog.counts()
    assert rows["Tensor"] == counts["LoadStationary"] + counts["MatMul"]


def test_a_gz_trace_is_gzip_of_the_plain_one_and_deterministic(tmp_path) -> None:
    import gzip

    spec = MatmulSpec(256, 256, 1024)
    prog = lower(spec, TRN2).program
    rep = build_report(prog, TRN2, spec)
    plain = write_trace(rep, prog, tmp_path / "t.json").read_bytes()
    first = write_trace(rep, prog, tmp_path / "t.json.gz").read_bytes()
    assert first[:2] == b"\x1f\x8b"  # the gzip magic (RFC 1952)
    assert first[3] & 0x08 == 0 and first[4:8] == b"\0\0\0\0"  # no FNAME, MTIME 0
    assert gzip.decompress(first) == plain
    assert write_trace(rep, prog, tmp_path / "u.json.gz").read_bytes() == first  # no mtime


def test_trace_metadata_has_the_schema_views(tmp_path) -> None:
    spec = MatmulSpec(128, 256, 512)
    prog = lower(spec, TRN2).program
    rep = build_report(prog, TRN2, spec)
    other = load_trace(write_trace(rep, prog, tmp_path / "t.json",
                                   metadata={"note": "x"}))["otherData"]
    assert other["schema"] == 2 and other["note"] == "x"
    assert other["pe"]["cycles"] == other["cycles"] == rep.cycles
    assert other["pe"]["useful_macs"] == 128 * 256 * 512
    assert other["core"]["latency_us"] == other["latency_us"]
    assert other["core"]["bound"]["by"] == other["bound"]
    # a bare Schedule has no whole-core view, so no schema keys either
    bare = load_trace(write_trace(rep.schedule, prog, tmp_path / "s.json"))["otherData"]
    assert "core" not in bare and "schema" not in bare
