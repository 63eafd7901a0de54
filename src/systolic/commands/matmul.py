"""``systolic matmul M K N``: lower a product, count its instructions and cycles, check it."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import numpy as np

from ..api import make_spec
from ..arch import get_arch
from ..compiler import lower
from ..dtypes import FORMATS, get_format
from ..errors import SystolicError
from ..isa import PerfMode
from ..isa.generation import UNENCODED_PERF_MODES
from ..schema import views
from .common import (
    PLOT_WIDTH,
    add_arch,
    add_json,
    add_output_args,
    add_progress,
    check_plot_size,
    dtype_name,
    file_size,
    plot_path,
    positive_int,
    progress_bar,
    refuse_alone,
    seed,
    stage,
    wrote,
)

# --check keeps a, b, the result, their float64 reference and the simulator's device memory.
_CHECK_LIMIT = 1 << 27

# The perf modes the compiler emits (seed 000: {None, DoubleRow, DoubleRowSwInterleave});
# DoubleColumn and DoublePixel validate but have no known encoding.
PERF_MODES = [m.spelling for m in PerfMode if m not in UNENCODED_PERF_MODES]

# --check's MX scale rule when --mx-rule is not given: systolic.matmul's default (the option
# itself defaults to None, so that it is refused without an MX format and --check).
MX_RULE = "trainium"

HELP = "lower one matmul and report its program, cycles, whole-core time and accuracy"
DESCRIPTION = """\
Lower a[M, K] @ b[K, N] onto the array (sizes in numpy's order, M K N, as in every
command) and print two views of its time: the Tensor Engine alone (instruction counts,
cycles, utilization and where the cycles went, seed 003) and the whole NeuronCore (latency,
TFLOP/s, hfu, what bounds it and its critical path by cause, engine busy shares, HBM
traffic). --check also runs the product on seeded random data through the functional
simulator and reports the error against float64.

--trace writes a Perfetto profile and --timeline a PNG/SVG of the same rows: one per engine
and DMA queue, as a Neuron Explorer profile names them (Tensor (LDWEIGHTS), TensorMatrix
(MATMUL), Vector, Scalar, GpSimd, DMA queue 0..15), the timeline with an overview and a
zoom on the first MatMuls once there are more than 16 (--core-timeline is an older name
of --timeline). Each file written is reported as "wrote FILE (what)" (on stderr with
--json).
--program prints the program text (under "program" with --json). A trace named .gz is
written gzip-compressed (Perfetto opens it as it is); the "wrote" line gives each file's
size. --json prints the Tensor Engine's view under "pe" and the whole core's under "core"
(docs/json.md); the flat keys beside them are schema 1's, kept for one release.

--perf-mode takes the modes the compiler emits (seed 000's live set): none, double_row and
double_row_sw_interleave. The last is DoubleRow with its access pattern swapped (the gen3
encoding): the same two contraction rows per PE pass, so it is timed and computed as
double_row and differs only in its bundle bytes (docs/bundles.md). double_column and
double_pixel have no known encoding.

examples:
  systolic matmul 2048 2048 2048
  systolic matmul 2048 2048 2048 --arch inf2 --timeline timeline.png
  systolic matmul 1024 384 2048 --trace core.json   # open in ui.perfetto.dev
  systolic matmul 1024 64 2048 --arch trn1       # K = 64: half the PE rows idle
  systolic matmul 128 4096 512 --dtype fp8_e4m3 --perf-mode double_row --arch trn2 --check
  systolic matmul 512 512 512 --dtype fp32 --json
  systolic matmul 256 256 256 --program | head
  systolic matmul 256 256 256 --program --json   # {"program": "...", ...}
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("matmul", help=HELP, description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("m", type=positive_int, help="rows of a and of the result")
    p.add_argument("k", type=positive_int, help="contraction: columns of a, rows of b")
    p.add_argument("n", type=positive_int, help="columns of b and of the result")
    p.add_argument("--dtype", default="bf16", type=dtype_name, choices=[f for f in FORMATS
                   if f not in ("e8m0", "int48", "fp4_e2m1")], metavar="FMT",
                   help="operand format, any case (default bf16): " + ", ".join(
                       f for f in FORMATS if f not in ("e8m0", "int48", "fp4_e2m1")))
    add_arch(p, "arch preset (default trn2)")
    p.add_argument("--perf-mode", default="none", choices=PERF_MODES, type=str.lower,
                   metavar="MODE", help=f"{', '.join(PERF_MODES)} (default none; the "
                                        f"double_row modes: fp8 on trn2/trn3)")
    p.add_argument("--numerics", default="fast", choices=["fast", "systolic"],
                   help="accumulation order of --check (default fast)")
    p.add_argument("--mx-rule", choices=["ocp", "trainium"],
                   help="MX scale rule for --check with an mx format (default trainium, as "
                        "systolic.matmul; docs/mx_layout.md)")
    p.add_argument("--check", action="store_true",
                   help="run on seeded random data and report max_rel_error vs float64")
    p.add_argument("--seed", type=seed, default=0, help="random seed for --check (0)")
    p.add_argument("--program", action="store_true", help="print the program text")
    add_output_args(p)
    p.add_argument("--core-timeline", metavar="FILE.png", dest="timeline", type=plot_path,
                   help="the same as --timeline (its older name)")
    add_progress(p)
    add_json(p)
    p.set_defaults(run=run)


def _check(args: argparse.Namespace) -> dict[str, float]:
    from ..api import matmul

    elems = args.m * args.k + args.k * args.n + args.m * args.n
    if elems > _CHECK_LIMIT:
        raise SystolicError(f"--check would hold {elems:,} values of data (limit "
                            f"{_CHECK_LIMIT:,}, about 2 GiB with the simulator's copies); "
                            f"check a smaller shape, the numerics do not depend on size much")
    rng = np.random.default_rng(args.seed)
    if args.dtype in ("int8", "int16", "uint8"):
        lo, hi = (0, 256) if args.dtype == "uint8" else (-100, 100)
        a = rng.integers(lo, hi, (args.m, args.k))
        b = rng.integers(lo, hi, (args.k, args.n))
    else:
        a = rng.standard_normal((args.m, args.k)).astype(np.float32)
        b = rng.standard_normal((args.k, args.n)).astype(np.float32)
    with progress_bar("simulating", enabled=not args.json, forced=args.progress) as tick:
        res = matmul(a, b, dtype=args.dtype, arch=args.arch, perf_mode=args.perf_mode,
                     numerics=args.numerics, mx_rule=args.mx_rule or MX_RULE,
                     progress=tick)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    err = np.abs(res.out.astype(np.float64) - ref)
    scale = float(np.abs(ref).max()) or 1.0
    return {"max_abs_error": float(err.max()), "max_rel_error": float(err.max()) / scale}


def _check_options(args: argparse.Namespace) -> None:
    """Options that do nothing without another are refused (issue 22)."""
    check_plot_size(args, "--timeline", args.timeline is not None)
    mx = get_format(args.dtype).kind == "mx"
    refuse_alone(args.mx_rule is not None, "--mx-rule", "an MX --dtype (mxfp8_e4m3 ...)", mx)
    refuse_alone(args.mx_rule is not None, "--mx-rule", "--check", args.check)


def run(args: argparse.Namespace) -> int:
    _check_options(args)
    arch = get_arch(args.arch)
    spec = make_spec(args.m, args.k, args.n, args.dtype, arch, args.perf_mode)
    if args.program:
        program = lower(spec, arch).program
        text = program.text()
        if args.json:
            print(json.dumps({"arch": arch.name, "dtype": spec.dtype, "m": spec.m, "k": spec.k,
                              "n": spec.n, "instructions": program.counts(),
                              "program": text}, indent=2))
        else:
            sys.stdout.write(text)
        return 0
    from ..extrapolate import matmul_report
    from ..views.report import report_fields

    checked = _check(args) if args.check else {}
    # a large regular product is timed from a slice of its M tiles (systolic.extrapolate);
    # the trace and timeline need every instruction, so they lower it whole
    full = bool(args.trace or args.timeline)
    what = "lowering every instruction" if full else "lowering and timing"
    with stage(f"{what} of {spec.m}x{spec.k}x{spec.n} {spec.dtype}", args):
        report, lowered = matmul_report(spec, arch, full=full)
    out: dict[str, Any] = {
        "arch": arch.name, "dtype": spec.dtype, "perf_mode": spec.perf_mode.spelling,
        "m": spec.m, "k": spec.k, "n": spec.n, "instructions": dict(report.counts),
    }
    out.update(report_fields(report))  # schema 1's flat keys, kept for one release
    out.update(views(report, report.core))
    out.update(checked)
    if args.trace is not None and lowered is not None:
        from ..views.trace import write_trace

        with stage(f"writing the trace of {len(lowered.program):,} instructions", args):
            write_trace(report, lowered.program, args.trace)
    if args.timeline is not None and lowered is not None:
        from ..views.plots import timeline_plot

        mode = "" if spec.perf_mode.spelling == "none" else f" {spec.perf_mode.spelling}"
        with stage(f"drawing the timeline of {len(lowered.program):,} instructions", args):
            timeline_plot(report, lowered.program, args.timeline,
                          width=args.width or PLOT_WIDTH, height=args.height or 520,
                          title=f"matmul {spec.m}x{spec.k}x{spec.n} {spec.dtype}{mode} on "
                                f"{arch.name}")
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        _print_human(out, report)
    if args.trace is not None:
        gz = ", gzip" if args.trace.endswith(".gz") else ""
        wrote(args.trace, f"Perfetto trace{gz}, {file_size(args.trace)}", json_mode=args.json)
    if args.timeline is not None:
        wrote(args.timeline, "whole-core timeline", json_mode=args.json)
    return 0


def _print_human(out: dict[str, Any], report: Any) -> None:
    mode = "" if out["perf_mode"] == "none" else f" {out['perf_mode']}"
    # the instruction counts are the report's "program" row, right below
    print(f"{out['m']}x{out['k']}x{out['n']} {out['dtype']}{mode} on {out['arch']}")
    print(report.to_text())
    if out["perf_mode"] == "double_row_sw_interleave":
        print("double_row_sw_interleave is timed and computed as double_row: the same two "
              "contraction rows per PE pass, only its bundle bytes differ (seed 000)")
    if "max_rel_error" in out:
        print(f"check: max_rel_error {out['max_rel_error']:.3e} against float64 "
              f"(max_abs_error {out['max_abs_error']:.3e})")
