"""``systolic roofline``: peaks per format, the HBM slope, the ceilings of seed 003, and a
workload's ops placed by their modelled throughput.

:func:`roofline_data` computes the figure's numbers (the JSON ``--json`` prints):

* roofs: ``arch.peak_flops`` for each format family the arch runs (bf16 and the other
  1x formats, fp32, fp8 DoubleRow, MX), with the formula's factors;
* memory: ``arch.hbm_bytes_per_s`` (per NeuronCore); a roof meets it at the ridge
  intensity peak / bandwidth;
* ceilings: seed 003's reasons a kernel falls short, each measured by the timing model on
  a representative lowered program with only that limit (K = 64, M = 64, N = 32, fp32).
  Their PSUM read-outs are dropped so the ceiling is the array's own limit; the JSON also
  gives the same program's throughput with its read-outs (``tflops_with_readout``);
* points: each workload op at its measured intensity (FLOPs per HBM byte its DMAs moved)
  and its whole-core TFLOP/s (:func:`measured_point`), never above a roof;
  ``ideal_intensity`` is :func:`systolic.workload.intensity` (each operand moved once).

The JSON has the shared shape (docs/json.md, :mod:`systolic.schema`): a ``schema`` version,
and each point carries the Tensor Engine's view under ``pe`` and the whole core's under
``core`` (with ``bound.kind``), as ``systolic run --json`` gives each op; each ceiling its
array-only program's ``pe``. The flat point keys (``tflops``, ``pe_tflops``, ``latency_us``,
``bound`` ...) are schema 1's, kept for one release.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..api import make_spec
from ..arch import Arch, get_arch
from ..compiler import lower
from ..dtypes import get_format
from ..errors import SystolicError
from ..isa import Program, ReadOut
from ..schema import SCHEMA_VERSION, core_view, pe_view
from ..views.report import build_report
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
    wrote,
)

HELP = "peaks per format, the HBM slope, lower ceilings, a workload's ops as points"
DESCRIPTION = """\
Work out the roofline of one NeuronCore's Tensor Engine: the peak of each format
(rows x cols PEs x 2 FLOPs per MAC x clock x the format's rate), the HBM slope (per-core
bandwidth x arithmetic intensity), and the lower ceilings a kernel hits (K = 64, M = 64,
N = 32, fp32), each measured by the timing model on a representative program. With
--workload, each op of the file is a point at its whole-core TFLOP/s and its measured
intensity (2MKN / the HBM bytes its DMAs actually move); no point can lie above a roof.
-o writes the figure (.png or .svg). --json prints the same figures with a "schema"
version; each point has the Tensor Engine's view under "pe" and the whole core's under
"core", as systolic run (docs/json.md); its flat keys are schema 1's, kept for one release.

examples:
  systolic roofline --arch trn1 --json                  # the peak arithmetic
  systolic roofline --arch trn2 -o roofline.png
  systolic roofline --workload examples/shortfalls.yaml -o roofline.png --width 1000
"""

# (label, dtype, perf mode) of each roof, drawn when the arch supports it.
ROOFS = (("bf16", "bf16", "none"), ("fp32", "fp32", "none"),
         ("fp8 DoubleRow", "fp8_e4m3", "double_row"), ("MX", "mxfp8_e4m3", "none"))
# Seed 003's shortfalls: (name, what goes dark, M, K, N, dtype). Large in every other
# dimension, so the named limit is the only one.
CEILINGS = (
    ("K = 64", "half the PE rows idle", 1024, 64, 2048, "bf16"),
    ("M = 64", "half the PE columns idle", 64, 2048, 2048, "bf16"),
    ("N = 32", "each MatMul still takes 64 cycles", 2048, 2048, 32, "bf16"),
    ("fp32", "4x the cost of bf16", 1024, 1024, 1024, "fp32"),
)


def add_parser(sub: Any) -> None:
    p = sub.add_parser("roofline", help=HELP, description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arch(p, "arch preset (default: the workload's, else trn2; with --workload, every "
                "op runs on it)", default=None)
    p.add_argument("--workload", metavar="FILE.yaml", help="place this workload's ops")
    p.add_argument("-o", "--output", metavar="FILE.png", type=plot_path,
                   help="write the plot (.png or .svg)")
    add_plot_size(p, "800")
    add_progress(p)
    add_json(p)
    p.set_defaults(run=run)


def _roofs(arch: Arch) -> list[dict[str, Any]]:
    out = []
    for label, dtype, mode in ROOFS:
        if not arch.supports_format(dtype) or not arch.supports_perf_mode(mode):
            continue
        rate = arch.rate(dtype, mode)
        same = [f for f in (*arch.formats, *arch.mx_formats)
                if arch.rate(f, mode) == rate
                and (mode == "none" or get_format(f).family == "fp8")]
        peak = arch.peak_flops(dtype, mode)
        out.append({
            "name": label, "dtype": dtype, "perf_mode": mode, "formats": same, "rate": rate,
            "peak_tflops": peak / 1e12, "ridge_intensity": peak / arch.hbm_bytes_per_s,
            "formula": f"{arch.rows} x {arch.cols} PEs x 2 FLOP x {arch.clock_hz / 1e9:g} GHz"
                       f" x {rate:g}",
        })
    return out


def _ceiling(arch: Arch, name: str, what: str, m: int, k: int, n: int, dtype: str
             ) -> dict[str, Any]:
    spec = make_spec(m, k, n, dtype, arch)
    program = lower(spec, arch).program
    array_only = Program(i for i in program if not isinstance(i, ReadOut))
    rep = build_report(array_only, arch, spec)
    full = build_report(program, arch, spec)
    losses = {c: v for c, v in rep.percent().items() if c != "useful"}
    return {
        "name": name, "what": what, "m": m, "k": k, "n": n, "dtype": dtype,
        "tflops": rep.tflops, "fraction_of_bf16_peak": rep.tflops / arch.peak_flops() * 1e12,
        "largest_loss": max(losses, key=lambda c: losses[c]),
        "tflops_with_readout": full.tflops, "pe": pe_view(rep),
    }


def measured_point(result: Any, arch: Arch) -> dict[str, Any]:
    """Where one op sits, measured on the whole-core timing: ``intensity`` = the product's
    FLOPs (2MKN: padding the compiler adds, such as an MX K rounded up to 32, is not
    useful work) per HBM byte its DMAs actually moved, ``tflops`` = those FLOPs over the
    whole-core latency, and the two roofs over it (``hbm_bound_tflops`` = intensity x HBM
    bandwidth, ``peak_tflops`` of its format). The point is never above either: the HBM
    server never beats its rate (the latency is at least bytes / bandwidth) and the PE
    never its peak. ``pe_tflops`` is the Tensor Engine's own rate (operands on chip)."""
    core = result.report.core
    flops = result.op.flops
    x = flops / core.hbm_bytes if core.hbm_bytes else float("inf")
    return {"intensity": x, "tflops": flops / core.seconds / 1e12 if core.latency else 0.0,
            "pe_tflops": result.report.tflops, "peak_tflops": result.report.peak_tflops,
            "hbm_bound_tflops": x * arch.hbm_bytes_per_s / 1e12,
            "hbm_bytes": core.hbm_bytes, "latency_us": core.latency_us,
            "bound": core.bound}


def roofline_data(arch: Arch | str, results: list[Any] | None = None) -> dict[str, Any]:
    """Roofs, memory slope, ceilings and (from :func:`systolic.workload.evaluate` results)
    points, JSON-ready; see the module docstring."""
    from ..workload import intensity

    arch = get_arch(arch)
    points = []
    for r in results or []:
        s = r.op.spec
        x = intensity(s)
        points.append({
            "name": r.op.name, "m": s.m, "k": s.k, "n": s.n, "dtype": s.dtype,
            "perf_mode": s.perf_mode.spelling, "ideal_intensity": x,
            "utilization": r.report.utilization, **measured_point(r, arch),
            "pe": pe_view(r.report), "core": core_view(r.report.core),
        })
    return {
        "schema": SCHEMA_VERSION, "arch": arch.name, "rows": arch.rows, "cols": arch.cols,
        "clock_hz": arch.clock_hz, "hbm_bytes_per_s": arch.hbm_bytes_per_s, "roofs": _roofs(arch),
        "ceilings": [_ceiling(arch, *c) for c in CEILINGS], "points": points,
    }


def run(args: argparse.Namespace) -> int:
    check_plot_size(args, "-o/--output", args.output is not None)
    results = None
    arch_name = args.arch or "trn2"
    if args.workload:
        from ..workload import evaluate, load_workload

        workload = load_workload(args.workload, arch=args.arch)
        archs = sorted({op.arch.name for op in workload.ops})
        if len(archs) > 1:
            raise SystolicError(f"{args.workload} mixes arches ({', '.join(archs)}); pass "
                                f"--arch to put every op on one roofline")
        arch_name = archs[0]
        with progress_bar("lowering ops", total=len(workload.ops), enabled=not args.json,
                          forced=args.progress) as tick:
            results = evaluate(workload, tick)
    data = roofline_data(arch_name, results)
    if args.output is not None:
        from ..views.plots import roofline_plot

        roofline_plot(data, args.output, width=args.width or PLOT_WIDTH,
                      height=args.height or 800)
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        _print(data)
    if args.output is not None:
        wrote(args.output, "roofline", json_mode=args.json)
    return 0


def _print(data: dict[str, Any]) -> None:
    from rich import box
    from rich.table import Table

    bw = data["hbm_bytes_per_s"]
    head = (f"[bold]{data['arch']}[/]: one NeuronCore Tensor Engine, {data['rows']} x "
            f"{data['cols']} PEs at {data['clock_hz'] / 1e9:g} GHz, HBM {bw / 1e9:,.1f} GB/s "
            f"per core")
    parts: list[Any] = [head]
    roofs = Table(box=box.SIMPLE_HEAD, title="roofs", title_justify="left")
    for col in ("format", "peak TFLOP/s", "= formula", "ridge FLOP/B"):
        roofs.add_column(col, justify="left" if col in ("format", "= formula") else "right")
    for r in data["roofs"]:
        roofs.add_row(r["name"], f"{r['peak_tflops']:.2f}", r["formula"],
                      f"{r['ridge_intensity']:.0f}")
    parts.append(roofs)
    ceil = Table(box=box.SIMPLE_HEAD, title="ceilings (timing model, PSUM read-out aside)",
                 title_justify="left")
    for col in ("limit", "M x K x N", "TFLOP/s", "of bf16 peak", "with read-out", "why"):
        ceil.add_column(col, justify="right" if col in ("TFLOP/s", "of bf16 peak",
                                                        "with read-out") else "left")
    for c in data["ceilings"]:
        ceil.add_row(c["name"], f"{c['m']}x{c['k']}x{c['n']} {c['dtype']}",
                     f"{c['tflops']:.2f}", f"{100 * c['fraction_of_bf16_peak']:.1f}%",
                     f"{c['tflops_with_readout']:.2f}", c["what"])
    parts.append(ceil)
    if data["points"]:
        pts = Table(box=box.SIMPLE_HEAD, title="workload ops (whole core; FLOP/B: per HBM "
                    "byte moved)", title_justify="left")
        for col in ("op", "M x K x N", "FLOP/B", "TFLOP/s", "of peak", "HBM bound",
                    "bound by"):
            pts.add_column(col, justify="left" if col in ("op", "M x K x N", "bound by")
                           else "right")
        for p in data["points"]:
            pts.add_row(p["name"], f"{p['m']}x{p['k']}x{p['n']} {p['dtype']}",
                        f"{p['intensity']:.1f}", f"{p['tflops']:.2f}",
                        f"{100 * p['tflops'] / p['peak_tflops']:.1f}%",
                        f"{p['hbm_bound_tflops']:.2f}", p["bound"])
        parts.append(pts)
    print_rich(*parts)
