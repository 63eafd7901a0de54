"""``systolic run FILE.yaml``: cost a workload of named matmuls, op by op and in total."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.markup import escape

from ..errors import SystolicError
from ..timing.core import CAUSES as CORE_CAUSES
from ..views.report import CAUSES
from ..workload import evaluate, load_workload, time_op, workload_json
from .common import (
    PLOT_WIDTH,
    add_arch,
    add_json,
    add_plot_size,
    add_progress,
    check_plot_size,
    plot_path,
    print_rich,
    progress_bar,
    refuse_alone,
    stage,
    wrote,
)

HELP = "cost a YAML workload of named matmuls, per op and in total"
DESCRIPTION = """\
Read a YAML workload (a list of named matmuls a[m, k] @ b[k, n] with dtype, arch, perf_mode
and repeat), time each op and print one table, per op and in total (each op counting repeat
times). Two views side by side: the whole NeuronCore (time, TFLOP/s, hfu and what bounds
it: DMA, PE, PSUM evacuation ...) and the Tensor Engine alone (PE cycles, PE TFLOP/s,
utilization and its largest loss, seed 003). --json prints {"schema", "ops": [...],
"total": {...}}, each op and the total with the Tensor Engine's view under "pe" and the
whole core's under "core", as systolic matmul (docs/json.md); the flat keys beside them
(latency_us, tflops, hfu, bound ...; cycles, pe_us, pe_tflops, utilization, breakdown,
largest_loss) are schema 1's, kept for one release.

A file looks like this (examples/ has more):

  name: SwiGLU MLP
  defaults: {arch: trn2, dtype: bf16, repeat: 32}
  ops:
    - {name: gate, m: 2048, k: 4096, n: 14336}
    - {name: up,   m: 2048, k: 4096, n: 14336}
    - {name: down, m: 2048, k: 14336, n: 4096}

Op keys: name, m, k, n (required); dtype (bf16), arch (trn2), perf_mode (none), repeat (1).
A malformed file gets one line, FILE:LINE: what is wrong, and exit code 2.

--timeline draws one op's whole-core timeline (the first op, or --timeline-op): one row per
engine and DMA queue, as a Neuron Explorer profile names them (Tensor (LDWEIGHTS),
TensorMatrix (MATMUL), Vector, Scalar, GpSimd, the DMA queues), an overview and a zoom on
the first MatMuls. --loss-bar draws a stacked bar per op of where its Tensor Engine cycles
went. Both write .png or .svg.

examples:
  systolic run examples/swiglu_mlp.yaml
  systolic run examples/shortfalls.yaml --loss-bar loss.png
  systolic run examples/seed003_2048.yaml --timeline timeline.png
  systolic run examples/attention_proj.yaml --arch trn1 --json
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("run", help=HELP, description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", metavar="FILE.yaml", help="the workload file")
    add_arch(p, "run every op on this arch instead", default=None)
    p.add_argument("--timeline", metavar="FILE.png", type=plot_path,
                   help="plot one op's whole-core timeline (PNG/SVG)")
    p.add_argument("--timeline-op", metavar="NAME", help="the op --timeline shows (first)")
    p.add_argument("--loss-bar", metavar="FILE.png", type=plot_path,
                   help="plot a stacked bar per op of where its Tensor Engine cycles "
                        "went (PNG/SVG)")
    add_plot_size(p, "timeline 520; loss bar 90 + 42 per bar")
    add_progress(p)
    add_json(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    check_plot_size(args, "--timeline or --loss-bar",
                    args.timeline is not None or args.loss_bar is not None)
    refuse_alone(args.timeline_op is not None, "--timeline-op", "--timeline",
                 args.timeline is not None)
    workload = load_workload(args.file, arch=args.arch)
    if args.timeline_op and args.timeline_op not in {op.name for op in workload.ops}:
        raise SystolicError(f"--timeline-op {args.timeline_op!r} names no op of {args.file}; "
                            f"ops: {', '.join(op.name for op in workload.ops)}")
    with progress_bar("timing ops", total=len(workload.ops), enabled=not args.json,
                      forced=args.progress) as tick:
        results = evaluate(workload, tick)
    data = workload_json(workload, results)
    if args.timeline is not None:
        from ..views.plots import timeline_plot

        res = next(r for r in results if r.op.name == (args.timeline_op or r.op.name))
        s = res.op.spec
        with stage(f"lowering every instruction of {res.op.name}", args):
            report, program = ((res.report, res.program) if res.program is not None
                               else time_op(s, res.op.arch, full=True))
        assert program is not None
        with stage(f"drawing the timeline of {len(program):,} instructions", args):
            timeline_plot(report, program, args.timeline, width=args.width or PLOT_WIDTH,
                          height=args.height or 520,
                          title=f"{res.op.name}: {s.m}x{s.k}x{s.n} {s.dtype} on "
                                f"{res.op.arch.name}")
    if args.loss_bar is not None:
        from ..views.plots import loss_bar_plot

        loss_bar_plot(data, args.loss_bar, width=args.width or PLOT_WIDTH, height=args.height)
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        _print_table(data)
    if args.timeline is not None:
        op = args.timeline_op or workload.ops[0].name
        wrote(args.timeline, f"whole-core timeline of {op}", json_mode=args.json)
    if args.loss_bar is not None:
        wrote(args.loss_bar, "loss bar per op", json_mode=args.json)
    return 0


# Short names of the loss causes for the table's narrow column (CAUSES has the long ones).
SHORT = {"rows_idle": "rows idle", "cols_idle": "cols idle", "short_moving": "short N",
         "fp32_passes": "fp32 passes", "weight_load": "weight load",
         "fill_drain": "fill/drain", "readout": "PSUM read-out", "idle": "idle"}


def _short(cause: str) -> str:
    return SHORT.get(cause, CAUSES.get(cause, cause))


def _time(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:,.2f} {unit}"
    return f"{seconds * 1e9:,.1f} ns"


def _loss(d: dict[str, Any]) -> str:
    loss = d["largest_loss"]
    return "none" if loss["cause"] == "none" else f"{_short(loss['cause'])} {loss['percent']:.2f}%"


# Short names of the whole core's critical-path causes (timing/core.py CAUSES has the long ones).
CORE_SHORT = {"pe": "PE", "weight_load": "weight load", "dma": "DMA", "dma_latency": "DMA fixed",
              "psum_evacuation": "PSUM evac", "vector": "Vector", "scalar": "Scalar",
              "gpsimd": "GpSimd", "sync": "sync", "idle": "idle"}


def _bound(d: dict[str, Any]) -> str:
    by = d["bound"]["by"]
    pct = d["bound"]["causes"][by]["percent"]
    return f"{CORE_SHORT.get(by, CORE_CAUSES.get(by, by))} {pct:.0f}%"


def _print_table(data: dict[str, Any]) -> None:
    from rich import box
    from rich.table import Table

    archs = sorted({op["arch"] for op in data["ops"]})
    table = Table(box=box.SIMPLE_HEAD, title=f"{data['name']} ({', '.join(archs)})",
                  title_justify="left")
    cols = (("op", "left"), ("M x K x N", "left"), ("format", "left"), ("time", "right"),
            ("TFLOP/s", "right"), ("hfu", "right"), ("bound by", "left"),
            ("PE cycles", "right"), ("PE TFLOP/s", "right"), ("PE util", "right"),
            ("PE largest loss", "left"))
    for name, just in cols:
        table.add_column(name, justify=just, no_wrap=True)  # type: ignore[arg-type]

    def figures(d: dict[str, Any]) -> list[str]:
        return [_time(d["latency_us"] * 1e-6), f"{d['tflops']:.2f}", f"{100 * d['hfu']:.1f}%",
                _bound(d), f"{d['cycles']:,}", f"{d['pe_tflops']:.2f}",
                f"{100 * d['utilization']:.2f}%", _loss(d)]

    for op in data["ops"]:
        mode = "" if op["perf_mode"] == "none" else f" {op['perf_mode']}"
        fmt = op["dtype"] + mode + ("" if len(archs) == 1 else f" {op['arch']}")
        name = op["name"] + (f" x{op['repeat']}" if op["repeat"] > 1 else "")
        table.add_row(name, f"{op['m']}x{op['k']}x{op['n']}", fmt, *figures(op))
    t = data["total"]
    table.add_section()
    table.add_row("total", "", "", *figures(t))
    n_ops, calls = len(data["ops"]), t["calls"]
    note = "; an op's figures are per call, 'NAME xR' runs R times" if calls > n_ops else ""
    print_rich(table, escape(f"total: {n_ops} op{'s' * (n_ops != 1)}, {calls:,} "
                             f"call{'s' * (calls != 1)}{note}. time, TFLOP/s, hfu, bound: the "
                             f"whole NeuronCore; PE: the Tensor Engine alone"))
