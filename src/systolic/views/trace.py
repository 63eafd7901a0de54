"""Profile trace export: Chrome trace-event JSON that Perfetto and chrome://tracing open.

``write_trace(timing, program, path)`` writes, for a Report or a kernel's CoreTiming, the
whole-core process first ("NeuronCore", pid 2): one row per engine and per DMA queue,
named as a Neuron Explorer profile names them (:mod:`systolic.views.profile_rows`: Tensor
(LDWEIGHTS), TensorMatrix (MATMUL), Vector, Scalar, GpSimd, DMA queue 0 ... 15; every row
is named, idle ones too). Each op is a slice from its start (a DMA's first byte) to its
end, clipped at the next op's start on the same row (the PE pipelines its MatMuls); a DMA
that gangs several queues has a slice on each. Its args carry the instruction's index,
queue, text form and true end.

For a Report (or a Schedule alone) a second process ("Tensor Engine alone", pid 1) keeps
seed 003's view of the array with its operands on chip (FACTS, Neuron Explorer: LDWEIGHTS
on the "TensorE" row, MATMUL on the "TensorMatrix" row), plus the PSUM read-out:

* LDWEIGHTS: each LoadStationary / LdWeightMx from its start to its end;
* MATMUL: each MatMul / MatmultMx while its moving tile streams in, [start, start +
  min(period*N, duration)) (seed 003: one column per cycle; the fill and drain overlap the
  next instruction, and trace viewers need the slices of one row not to overlap). The
  args keep the full ``end_cycle`` (last MAC + 1) and what bound the start (``stall``);
* PSUM read-out: each ReadOut from its start to its end.

Each event is named by its opcode and instruction index; the second process's carry the
instruction's flags, tile group, shape, format and perf mode too. Timestamps are
microseconds. The file is written by :mod:`systolic.artifacts` (atomically, only over
a regular file or a new path; a symlink is written through).
"""

from __future__ import annotations

import gzip
import io
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, cast

from ..errors import SystolicError
from ..isa import LdWeightMx, LoadStationary, MatMul, MatmultMx, Program, ReadOut
from ..isa.asm import format_instruction
from ..timing.tensor_engine import Cause, Kind, Schedule

if TYPE_CHECKING:
    from ..timing.core import CoreTiming
    from .report import Report

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
         "args": {"name": f"Tensor Engine alone ({sch.arch.name}, operands on chip)"}},
        {"ph": "M", "pid": _PID, "name": "process_sort_index", "args": {"sort_index": 1}},
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
    """The whole-core rows (:func:`systolic.views.profile_rows.profile_rows`: Tensor (LDWEIGHTS),
    TensorMatrix (MATMUL), Vector, Scalar, GpSimd, DMA queue 0 ...), metadata first. Every
    row is named, idle ones too."""
    from .profile_rows import profile_rows

    if len(core.op_instr) and int(core.op_instr.max()) >= len(program):
        raise SystolicError(f"the timing covers {int(core.op_instr.max()) + 1} instructions, "
                            f"the program {len(program)}: pass the program that was timed")
    rows = profile_rows(core)
    events: list[dict[str, Any]] = [
        {"ph": "M", "pid": CORE_PID, "name": "process_name",
         "args": {"name": f"NeuronCore ({core.arch.name}, whole-core timing)"}},
        {"ph": "M", "pid": CORE_PID, "name": "process_sort_index",
         "args": {"sort_index": 0}}]
    for r, row in enumerate(rows):
        tid = _CORE_TID0 + r
        events.append({"ph": "M", "pid": CORE_PID, "tid": tid, "name": "thread_name",
                       "args": {"name": row.label}})
        events.append({"ph": "M", "pid": CORE_PID, "tid": tid, "name": "thread_sort_index",
                       "args": {"sort_index": tid}})
    us = 1e6 / core.tick_hz
    texts: dict[int, str] = {}
    for r, row in enumerate(rows):
        cat = row.what or row.name
        for a, b, c, op in zip(row.starts.tolist(), row.shown.tolist(), row.ends.tolist(),
                               row.ops.tolist(), strict=True):
            i = int(core.op_instr[op])
            ins = program[i]
            text = texts.get(i)
            if text is None:
                text = texts[i] = format_instruction(ins)
            events.append({"ph": "X", "pid": CORE_PID, "tid": _CORE_TID0 + r, "ts": a * us,
                           "dur": (b - a) * us, "cat": cat,
                           "name": f"{type(ins).__name__} #{i}",
                           "args": {"index": i, "queue": row.queue, "text": text,
                                    "start_us": a * us, "end_us": c * us}})
    return events


def write_trace(timing: Schedule | Report | CoreTiming, program: Program,
                path: str | os.PathLike[str], *, metadata: Mapping[str, Any] | None = None,
                lines: Sequence[tuple[str, int]] | None = None) -> Path:
    """Write the Chrome trace-event JSON of ``program``'s timing to ``path`` atomically,
    gzip-compressed when the name ends ``.gz`` (Perfetto opens both); returns the path
    written.

    ``timing`` is a :class:`~systolic.views.report.Report` (both processes: the whole core first,
    then the Tensor Engine alone), a :class:`~systolic.timing.core.CoreTiming` (a kernel's:
    the whole core only) or a :class:`~systolic.timing.tensor_engine.Schedule` (the Tensor Engine
    alone). ``otherData`` holds :mod:`systolic.schema`'s ``schema`` / ``pe`` / ``core``
    (docs/json.md), then ``metadata``; ``lines`` (a kernel's source line per instruction)
    adds a ``line`` arg to each whole-core slice."""
    from ..schema import views
    from ..timing.core import CoreTiming

    events: list[dict[str, Any]] = []
    other: dict[str, Any] = {}
    core = timing if isinstance(timing, CoreTiming) else \
        None if isinstance(timing, Schedule) else timing.core
    sch = timing if isinstance(timing, Schedule) else \
        None if isinstance(timing, CoreTiming) else timing.schedule
    if core is not None:
        events += core_events(core, program)
        other.update({"arch": core.arch.name, "tick_hz": core.tick_hz,
                      "latency_us": core.latency_us, "bound": core.bound})
    if sch is not None:
        events += trace_events(sch, program)
        other.update({"arch": sch.arch.name, "clock_hz": sch.arch.clock_hz,
                      "cycles": sch.cycles, "readout_tail_cycles": sch.readout_tail})
    if lines:
        for e in events:
            if e.get("ph") == "X" and e["pid"] == CORE_PID:
                file, line = lines[e["args"]["index"]]
                e["args"]["line"] = f"{os.path.basename(file)}:{line}"
    report = timing if not isinstance(timing, Schedule | CoreTiming) else None
    other.update(views(report, core) if core is not None else {})
    other.update(metadata or {})
    doc = {"traceEvents": events, "displayTimeUnit": "ns",
           "otherData": {**other, "time_unit": "us"}}
    from ..artifacts import open_artifact  # one policy for every output file

    with open_artifact(path, "trace", binary=True) as raw:
        # streamed, not built as one string: a trace of an 8192^3 product is ~400 MB; no
        # name and mtime 0 in a gzip header, so the same trace gives the same bytes
        gz = (gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0, compresslevel=6)
              if os.fspath(path).endswith(".gz") else None)
        text = io.TextIOWrapper(cast(IO[bytes], gz) if gz is not None else raw,
                                encoding="utf-8")
        json.dump(doc, text, separators=(",", ":"))
        text.flush()
        text.detach()  # leave closing ``raw`` to open_artifact (it syncs and renames)
        if gz is not None:
            gz.close()  # the gzip trailer, before raw is synced; raw itself stays open
    return Path(path)
