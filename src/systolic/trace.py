"""Profile trace export: Chrome trace-event JSON that Perfetto and chrome://tracing open.

``write_trace(schedule_or_report, program, path)`` writes the rows a hardware profile
shows for the Tensor Engine (FACTS, Neuron Explorer: LDWEIGHTS on the "TensorE" row,
MATMUL on the "TensorMatrix" row), plus one row for the PSUM read-out engine:

* LDWEIGHTS: each LoadStationary / LdWeightMx from its start to its end;
* MATMUL: each MatMul / MatmultMx while its moving tile streams in, [start, start +
  min(period*N, duration)) (seed 003: one column per cycle; the fill and drain overlap the
  next instruction, and trace viewers need the slices of one row not to overlap). The
  args keep the full ``end_cycle`` (last MAC + 1) and what bound the start (``stall``);
* PSUM read-out: each ReadOut from its start to its end.

Beside them (process 2, "NeuronCore"), the whole-core timing (:mod:`systolic.sim.core`)
has one row per engine and per DMA queue, like a Neuron Explorer profile: Tensor, Vector,
Scalar, GpSimd, dma0 ... dma15. Each op is a slice from its start (a DMA's first byte) to
its end, clipped at the next op's start on the same row (the PE pipelines its MatMuls); a
DMA that spans several queues has a slice on each.

Each event is named by its opcode and instruction index and carries the instruction's text
form, flags, tile group, shape, format and perf mode as args. Timestamps are microseconds
at the Arch clock. The file is written by :mod:`systolic.artifacts` (atomically, only over
a regular file or a new path; a symlink is written through).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .asm import format_instruction
from .errors import SystolicError
from .isa import LdWeightMx, LoadStationary, MatMul, MatmultMx, Program, ReadOut
from .sim.timing import Cause, Kind, Schedule

if TYPE_CHECKING:
    from .report import Report
    from .sim.core import CoreTiming

__all__ = ["CORE_PID", "ROWS", "core_events", "trace_events", "write_trace"]

# (thread id, row name) per instruction kind, in the order the viewer lists them.
ROWS: dict[Kind, tuple[int, str]] = {
    Kind.LOAD: (1, "LDWEIGHTS"),
    Kind.COMPUTE: (2, "MATMUL"),
    Kind.READOUT: (3, "PSUM read-out"),
}
_PID = 1
CORE_PID = 2
_CORE_TID0 = 100  # whole-core rows: tid 100 + queue id


def _args(ins: object) -> dict[str, Any]:
    """Flags, tile group, shape and format of one instruction, for the event's args."""
    if isinstance(ins, MatMul):
        k = ins.moving.partitions
        return {"flags": ins.flags.name or "NONE", "row_group": ins.row_group,
                "col_group": ins.col_group, "shape": f"K={k} M={ins.dst.partitions} "
                f"N={ins.moving.dims[-1][1]}", "format": ins.moving.dtype,
                "stationary_format": ins.stationary_dtype,
                "perf_mode": ins.perf_mode.spelling, "two_pass": int(ins.fp32_pass)}
    if isinstance(ins, MatmultMx):
        return {"flags": ins.flags.name or "NONE", "acc": int(ins.flags),
                "row_group": ins.row_group,
                "col_group": 15, "shape": f"K={4 * ins.moving.partitions} "
                f"M={ins.dst.partitions} N={ins.moving.dims[-1][1]}", "format": ins.fmt,
                "stationary_format": ins.stationary_fmt, "perf_mode": "none"}
    if isinstance(ins, LoadStationary):
        return {"row_group": ins.row_group, "col_group": ins.col_group,
                "shape": f"K={ins.src.partitions} M={ins.src.dims[-1][1]}",
                "format": ins.src.dtype, "perf_mode": ins.perf_mode.spelling,
                "half": ins.fp32_pass.spelling, "column": ins.column}
    if isinstance(ins, LdWeightMx):
        return {"row_group": ins.row_group, "col_group": 15,
                "shape": f"K={4 * ins.src.partitions} M={ins.src.dims[-1][1]}",
                "format": ins.fmt, "perf_mode": "none", "column": ins.column}
    if isinstance(ins, ReadOut):
        return {"shape": f"M={ins.src.partitions} N={ins.src.free_elems}",
                "format": ins.src.dtype, "psum_offset": ins.src.offset}
    return {}


def trace_events(sch: Schedule, program: Program) -> list[dict[str, Any]]:
    """The trace events of a schedule, metadata first."""
    if len(program) != len(sch):
        raise SystolicError(f"the schedule has {len(sch)} instructions, the program "
                         f"{len(program)}: pass the program that was scheduled")
    us = 1e6 / sch.arch.clock_hz
    events: list[dict[str, Any]] = [
        {"ph": "M", "pid": _PID, "name": "process_name",
         "args": {"name": f"Tensor Engine ({sch.arch.name})"}},
    ]
    for tid, name in ROWS.values():
        events.append({"ph": "M", "pid": _PID, "tid": tid, "name": "thread_name",
                       "args": {"name": name}})
        events.append({"ph": "M", "pid": _PID, "tid": tid, "name": "thread_sort_index",
                       "args": {"sort_index": tid}})
    cc = sch.compute
    stream = {int(i): min(int(p * n), int(d))
              for i, p, n, d in zip(cc.index, cc.period, cc.n, cc.duration, strict=True)}
    kinds, starts, ends, cause = (a.tolist() for a in (sch.kinds, sch.starts, sch.ends,
                                                       sch.cause))
    for i, ins in enumerate(program):
        kind = Kind(kinds[i])
        if kind is Kind.DMA:
            continue
        tid, _ = ROWS[kind]
        s, e = starts[i], ends[i]
        shown = s + stream[i] if kind is Kind.COMPUTE else e
        args = {"index": i, "text": format_instruction(ins), "start_cycle": s,
                "end_cycle": e, **_args(ins)}
        if kind is Kind.COMPUTE:
            args["stall"] = Cause(cause[i]).name.lower()
        events.append({"ph": "X", "pid": _PID, "tid": tid, "ts": s * us,
                       "dur": (shown - s) * us, "name": f"{type(ins).__name__} #{i}",
                       "cat": ROWS[kind][1], "args": args})
    return events


def core_events(core: CoreTiming, program: Program) -> list[dict[str, Any]]:
    """The whole-core rows: one per engine and DMA queue (module docstring)."""
    import numpy as np

    from .sim.core import queue_names

    names = queue_names(core.arch)
    events: list[dict[str, Any]] = [
        {"ph": "M", "pid": CORE_PID, "name": "process_name",
         "args": {"name": f"NeuronCore ({core.arch.name}, whole-core timing)"}}]
    for q, name in enumerate(names):
        tid = _CORE_TID0 + q
        events.append({"ph": "M", "pid": CORE_PID, "tid": tid, "name": "thread_name",
                       "args": {"name": name}})
        events.append({"ph": "M", "pid": CORE_PID, "tid": tid, "name": "thread_sort_index",
                       "args": {"sort_index": tid}})
    us = 1e6 / core.tick_hz
    nq, ndma = len(names), core.arch.dma_queues
    rows: list[list[int]] = [[] for _ in range(nq)]
    first_dma = len(names) - ndma
    for op, (q, k) in enumerate(zip(core.op_queue.tolist(), core.op_queues.tolist(),
                                    strict=True)):
        if q < first_dma:
            rows[q].append(op)
        else:
            for j in range(k):
                rows[first_dma + (q - first_dma + j) % ndma].append(op)
    starts, ends, instr = core.starts, core.ends, core.op_instr
    for q, ops in enumerate(rows):
        if not ops:
            continue
        idx = np.array(ops)
        s, e = starts[idx], ends[idx]
        shown = np.minimum(e, np.append(s[1:], np.iinfo(np.int64).max))
        for op, a, b, c in zip(ops, s.tolist(), shown.tolist(), e.tolist(), strict=True):
            i = int(instr[op])
            events.append({"ph": "X", "pid": CORE_PID, "tid": _CORE_TID0 + q, "ts": a * us,
                           "dur": max(b - a, 0) * us, "cat": names[q],
                           "name": f"{type(program[i]).__name__} #{i}",
                           "args": {"index": i, "start_us": a * us, "end_us": c * us}})
    return events


def write_trace(schedule_or_report: Schedule | Report, program: Program,
                path: str | os.PathLike[str]) -> Path:
    """Write the Chrome trace-event JSON of ``program``'s schedule to ``path`` atomically.

    Accepts a :class:`~systolic.sim.timing.Schedule` or a :class:`~systolic.report.Report`
    (its schedule). Returns the path written."""
    sch = schedule_or_report if isinstance(schedule_or_report, Schedule) \
        else schedule_or_report.schedule
    events = trace_events(sch, program)
    extra: dict[str, Any] = {}
    if not isinstance(schedule_or_report, Schedule) and len(program) == len(sch):
        core = schedule_or_report.core
        events += core_events(core, program)
        extra = {"latency_us": core.latency_us, "bound": core.bound}
    doc = {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {"arch": sch.arch.name, "clock_hz": sch.arch.clock_hz,
                      "cycles": sch.cycles, "readout_tail_cycles": sch.readout_tail,
                      "time_unit": "us", **extra},
    }
    from .artifacts import open_artifact  # one policy for every output file

    with open_artifact(path, "trace") as f:
        json.dump(doc, f, separators=(",", ":"))
    return Path(path)
