"""``systolic rtl``: the integer PE cell and array as hardware (Verilog export, HDL-versus-model
simulation).

``add_rtl_parser(subparsers)`` adds ``rtl verilog --rows R --cols C [-o FILE]`` and
``rtl sim --rows R --cols C [--cycles N] [--seed S] [--vcd FILE]``; ``run_rtl(args)`` runs
the parsed command and returns the exit code: 0 success, 1 the HDL and the behavioural model
disagree, 2 a user error (its one-line message goes to stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import numpy as np

from ..artifacts import write_text
from ..errors import ShapeError, SystolicError
from ..rtl.array import ArrayStimulus, WeightStationaryArray
from ..rtl.cell import WEIGHT_BITS, int_range
from .common import output_path, positive_int, seed, wrote

# Amaranth's Python simulator steps about 40,000 PE-cycles a second here (a 32 x 32 array,
# 96 cycles: 3 s); past this many the run would take minutes.
SIM_PE_CYCLES = 1 << 22
# Each simulated clock also costs about 0.2 ms whatever the array's size (a 3 x 1 array runs
# 10,000 cycles in 2.3 s here), so a tiny array over 10^6 cycles ran for minutes under the
# PE-cycle bound (found by tests/test_cli_fuzz.py): at most this many cycles, about 10 s.
SIM_CYCLES = 50_000
# Verilog export of a 128 x 128 array (the modelled array) takes minutes (docs/rtl.md);
# four times that is refused rather than left to run for an hour.
VERILOG_PES = 4 * 128 * 128

RTL_DESCRIPTION = """\
The integer processing element of seed 004 (INT8/INT16 operands, INT48 accumulator, one
cycle of pipeline) and weight-stationary arrays of it, written in Amaranth HDL. `verilog`
writes synthesizable Verilog; `sim` runs Amaranth's simulator on random operands (with
overflow, clear, reset and weight loads) and checks every register on every cycle against
the behavioural model. The array loads its weights one row per cycle through w_in/w_shift.

examples:
  systolic rtl verilog --rows 4 --cols 4 -o pe_array.v
  systolic rtl sim --rows 3 --cols 3 --cycles 200 --vcd run.vcd
  systolic rtl sim --rows 2 --cols 2 --json
"""

VERILOG_DESCRIPTION = """\
Write synthesizable Verilog of a rows x cols weight-stationary array of seed 004's PE
(top module systolic_array_<rows>x<cols>, one submodule per PE). Ports: clk, rst_n, clear,
w_shift and w_in (cols x 16 bits: one row of weights per cycle, shifted down the columns),
act_in/act_out (rows x 16 bits), sum_in/sum_out (cols x 48 bits). Needs systolic[rtl]
(Amaranth and its Yosys). A 128 x 128 array takes minutes (docs/rtl.md).

examples:
  systolic rtl verilog --rows 4 --cols 4 -o pe_array.v
  systolic rtl verilog --rows 2 --cols 2 | head -40
  systolic rtl verilog --rows 16 --cols 16 -o a16.v --json
"""

SIM_DESCRIPTION = """\
Load random weights through the weight port (rows cycles), then run --cycles cycles of
random operands over the full 16- and 48-bit ranges (so sums wrap), with clear on about
10% of cycles, rst_n low on about 5% and weight shifts on about 5%, through Amaranth's
simulator and through the behavioural model, and compare every register of every PE on
every cycle. Exit 0 when they agree, 1 at the first mismatch, 2 on a user error.

examples:
  systolic rtl sim --rows 3 --cols 3 --cycles 200
  systolic rtl sim --rows 2 --cols 2 --cycles 16 --vcd run.vcd   # open in GTKWave or Surfer
  systolic rtl sim --rows 8 --cols 8 --seed 7 --json
"""


def add_rtl_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``rtl`` subcommand (with ``verilog`` and ``sim``) to an argparse CLI."""
    fmt = argparse.RawDescriptionHelpFormatter
    rtl = subparsers.add_parser(
        "rtl", help="the integer PE cell and array in Amaranth HDL: Verilog, simulation",
        description=RTL_DESCRIPTION, formatter_class=fmt,
    )
    sub = rtl.add_subparsers(dest="rtl_command", required=True)

    ver = sub.add_parser("verilog", help="write synthesizable Verilog of a rows x cols array",
                         description=VERILOG_DESCRIPTION, formatter_class=fmt)
    ver.add_argument("--rows", type=positive_int, required=True,
                     help="PE rows (contraction K)")
    ver.add_argument("--cols", type=positive_int, required=True,
                     help="PE columns (outputs M)")
    ver.add_argument("-o", "--output", type=output_path("Verilog"),
                     help="output file (default: stdout)")
    ver.add_argument("--json", action="store_true",
                     help="print one JSON object (the Verilog text under 'verilog' without -o)")

    sim = sub.add_parser(
        "sim", help="simulate the HDL array on random operands and compare it with the model",
        description=SIM_DESCRIPTION, formatter_class=fmt,
    )
    sim.add_argument("--rows", type=positive_int, required=True, help="PE rows")
    sim.add_argument("--cols", type=positive_int, required=True, help="PE columns")
    sim.add_argument("--cycles", type=positive_int, default=64,
                     help="clock cycles after the weight load (default 64)")
    sim.add_argument("--seed", type=seed, default=0, help="random seed (default 0)")
    sim.add_argument("--vcd", type=output_path("waveform"),
                     help="also write the waveform to this VCD file")
    sim.add_argument("--json", action="store_true", help="print one JSON object for scripts")
    return rtl


def _verilog(args: argparse.Namespace) -> int:
    from ..rtl.hdl import check_array_size, verilog_array

    check_array_size(args.rows, args.cols)
    if args.rows * args.cols > VERILOG_PES:
        raise ShapeError(f"a {args.rows} x {args.cols} array has {args.rows * args.cols:,} PEs; "
                         f"Verilog export is refused past {VERILOG_PES:,} (128 x 128 already "
                         f"takes minutes)")
    text = verilog_array(args.rows, args.cols)
    if args.output is not None:
        write_text(args.output, text, "Verilog")
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
        wrote(args.output, f"Verilog, {args.rows} x {args.cols} array, {len(text):,} bytes")
    return 0


def _sim(args: argparse.Namespace) -> int:
    from ..rtl.hdl import check_array_size, simulate_array

    check_array_size(args.rows, args.cols)
    if args.rows + args.cycles > SIM_CYCLES:
        raise ShapeError(f"{args.rows} load + {args.cycles} cycles is more than "
                         f"{SIM_CYCLES:,} clock cycles; the HDL simulator steps about 5,000 "
                         f"cycles a second whatever the array's size: use fewer --cycles")
    pe_cycles = args.rows * args.cols * (args.rows + args.cycles)
    if pe_cycles > SIM_PE_CYCLES:
        raise ShapeError(f"a {args.rows} x {args.cols} array for {args.rows} load + "
                         f"{args.cycles} cycles is {pe_cycles:,} PE-cycles; the HDL simulator "
                         f"runs about 40,000 a second, so runs past {SIM_PE_CYCLES:,} are "
                         f"refused: use a smaller array or fewer --cycles")
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
        wrote(args.vcd, "VCD waveform")
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
    except SystolicError as exc:  # the same one-line form as every other command
        print(f"systolic: error: {exc}", file=sys.stderr)
        return 2


def add_parser(sub: Any) -> None:
    add_rtl_parser(sub).set_defaults(run=run_rtl)
