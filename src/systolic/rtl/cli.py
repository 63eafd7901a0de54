"""The ``systolic rtl`` subcommand: Verilog export and HDL-versus-model simulation.

``add_rtl_parser(subparsers)`` adds ``rtl verilog --rows R --cols C [-o FILE]`` and
``rtl sim --rows R --cols C [--cycles N] [--seed S] [--vcd FILE]``; ``run_rtl(args)`` runs
the parsed command and returns the exit code: 0 success, 1 the HDL and the behavioural model
disagree, 2 a user error (its one-line message goes to stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from systolic.errors import SystolicError
from systolic.rtl.array import ArrayStimulus, WeightStationaryArray
from systolic.rtl.cell import WEIGHT_BITS, int_range


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


RTL_DESCRIPTION = """\
The integer processing element of seed 004 (INT8/INT16 operands, INT48 accumulator, one
cycle of pipeline) and weight-stationary arrays of it, written in Amaranth HDL. `verilog`
writes synthesizable Verilog; `sim` runs Amaranth's simulator on random operands (with
overflow, clear and reset) and checks every register on every cycle against the
behavioural model.

examples:
  systolic rtl verilog --rows 4 --cols 4 -o pe_array.v
  systolic rtl sim --rows 3 --cols 3 --cycles 200 --vcd run.vcd
  systolic rtl sim --rows 2 --cols 2 --json
"""


def add_rtl_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``rtl`` subcommand (with ``verilog`` and ``sim``) to an argparse CLI."""
    rtl = subparsers.add_parser(
        "rtl", help="the integer PE cell and array in Amaranth HDL: Verilog, simulation",
        description=RTL_DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = rtl.add_subparsers(dest="rtl_command", required=True)

    ver = sub.add_parser("verilog", help="write synthesizable Verilog of a rows x cols array")
    ver.add_argument("--rows", type=_positive, required=True, help="PE rows (contraction K)")
    ver.add_argument("--cols", type=_positive, required=True, help="PE columns (outputs M)")
    ver.add_argument("-o", "--output", type=Path, help="output file (default: stdout)")
    ver.add_argument("--json", action="store_true",
                     help="print one JSON object (the Verilog text under 'verilog' without -o)")

    sim = sub.add_parser(
        "sim", help="simulate the HDL array on random operands and compare it with the model"
    )
    sim.add_argument("--rows", type=_positive, required=True, help="PE rows")
    sim.add_argument("--cols", type=_positive, required=True, help="PE columns")
    sim.add_argument("--cycles", type=_positive, default=64, help="clock cycles (default 64)")
    sim.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    sim.add_argument("--vcd", type=Path, help="also write the waveform to this VCD file")
    sim.add_argument("--json", action="store_true", help="print one JSON object for scripts")
    return rtl


def _verilog(args: argparse.Namespace) -> int:
    from systolic.rtl.hdl import verilog_array

    text = verilog_array(args.rows, args.cols)
    if args.output is not None:
        args.output.write_text(text)
    if args.json:
        out = {"rows": args.rows, "cols": args.cols, "bytes": len(text),
               "output": None if args.output is None else str(args.output)}
        if args.output is None:
            out["verilog"] = text
        print(json.dumps(out))
        return 0
    if args.output is None:
        sys.stdout.write(text)
    else:
        print(f"wrote {args.output} ({args.rows} x {args.cols} array, {len(text)} bytes)")
    return 0


def _sim(args: argparse.Namespace) -> int:
    from systolic.rtl.hdl import simulate_array

    rng = np.random.default_rng(args.seed)
    lo, hi = int_range(WEIGHT_BITS)
    weights = rng.integers(lo, hi, size=(args.rows, args.cols), endpoint=True)
    stimulus = ArrayStimulus.random(args.rows, args.cols, args.cycles, rng)
    hdl = simulate_array(weights, stimulus, vcd_path=args.vcd)
    model = WeightStationaryArray(args.rows, args.cols)
    model.load(weights)
    ref = model.run(stimulus)
    bad = (hdl.act_out != ref.act_out) | (hdl.sum_out != ref.sum_out)
    what = f"{args.rows} x {args.cols} array, {args.cycles} cycles, seed {args.seed}"
    if args.json:
        first = None
        if bad.any():
            t, k, m = (int(i) for i in np.argwhere(bad)[0])
            first = {"cycle": t, "k": k, "m": m,
                     "hdl": [int(hdl.act_out[t, k, m]), int(hdl.sum_out[t, k, m])],
                     "model": [int(ref.act_out[t, k, m]), int(ref.sum_out[t, k, m])]}
        print(json.dumps({
            "rows": args.rows, "cols": args.cols, "cycles": args.cycles, "seed": args.seed,
            "match": not bad.any(), "first_mismatch": first,
            "clear_cycles": int(stimulus.clear.sum()),
            "reset_cycles": int((~stimulus.rst_n).sum()),
            "vcd": None if args.vcd is None else str(args.vcd),
        }))
        return 1 if bad.any() else 0
    if bad.any():
        t, k, m = (int(i) for i in np.argwhere(bad)[0])
        print(
            f"MISMATCH in {what}: first at cycle {t}, PE({k}, {m}): HDL act_out/sum_out "
            f"{hdl.act_out[t, k, m]}/{hdl.sum_out[t, k, m]}, model "
            f"{ref.act_out[t, k, m]}/{ref.sum_out[t, k, m]}",
            file=sys.stderr,
        )
        return 1
    print(
        f"{what}: HDL equals the behavioural model in every register on every cycle "
        f"({int(stimulus.clear.sum())} clear cycles, {int((~stimulus.rst_n).sum())} reset cycles)"
    )
    if args.vcd is not None:
        print(f"wrote {args.vcd}")
    return 0


def run_rtl(args: argparse.Namespace) -> int:
    """Run a parsed ``rtl`` command; return the process exit code."""
    try:
        if args.rtl_command == "verilog":
            return _verilog(args)
        if args.rtl_command == "sim":
            return _sim(args)
        raise SystolicError(f"Unknown rtl command {args.rtl_command!r}: use verilog or sim.")
    except BrokenPipeError:
        return 0  # the reader stopped early (| head): not an error
    except (SystolicError, OSError) as exc:
        print(f"systolic rtl: error: {exc}", file=sys.stderr)
        return 2
