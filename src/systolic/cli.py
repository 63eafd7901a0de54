"""The ``systolic`` command: a short manual per subcommand, tables by default, ``--json``
for scripts, one-line errors with a non-zero exit code."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

from .errors import SystolicError
from .version import __version__

# Subcommand modules, in the order --help lists them, each with the one line --help shows.
# The lines are here, not read from the modules, so that `systolic --help` and `systolic
# CMD ...` import no subcommand but CMD (issue 20: importing all seven cost ~0.1 s and pulled
# in the whole package); tests/test_startup.py checks they match each module's own.
SUMMARIES = {
    "matmul": "lower one matmul and report its program, cycles, whole-core time and accuracy",
    "step": "step one matmul through the systolic array, cycle by cycle",
    "run": "cost a YAML workload of named matmuls, per op and in total",
    "roofline": "peaks per format, the HBM slope, lower ceilings, a workload's ops as points",
    "kernel": "run an NKI kernel file: its Program, counts, whole-core time, values",
    "sweep": "run a sweep of many timing runs into a results store, or show one",
    "rtl": "the integer PE cell and array in Amaranth HDL: Verilog, simulation",
}
COMMANDS = tuple(SUMMARIES)

DESCRIPTION = """\
Model a weight-stationary systolic matmul engine (Trainium PE / Tensor Engine class):
lower a matmul to LoadStationary/MatMul instructions, run it bit-accurately, count its
cycles and explain the gap to peak, time it on the whole NeuronCore (engines, DMA queues,
HBM), run NKI kernel files unmodified, and sweep params, shapes and Arch fields.

examples:
  systolic matmul 2048 2048 2048 --dtype bf16 --arch trn2 --check
  systolic matmul 256 512 1024 --dtype fp8_e4m3 --perf-mode double_row --trace mm.json
  systolic step 3 3 3                       # seed 003's 3x3x3 toy, one clock at a time
  systolic step 4 4 6 --html step.html      # the same as a page to click through
  systolic run examples/swiglu_mlp.yaml --loss-bar loss.png
  systolic roofline --arch trn2 --workload examples/seed003_2048.yaml -o roofline.png
  systolic kernel examples/kernels/tiled_matmul.py:tiled_matmul --arg lhsT=bf16[512,256] \\
      --arg rhs=bf16[512,1024]
  systolic sweep examples/sweeps/fp8_double_row.yaml --out mm.sqlite
  systolic rtl verilog --rows 4 --cols 4 -o pe_array.v

Sizes are numpy's M K N in every command (a[M, K] @ b[K, N]). Every command takes --json
for scripts; each file written is reported as "wrote FILE (what)" (on stderr under --json);
errors are one line starting "systolic: error:", with exit code 2.
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit code 2, no usage dump
        # One prefix for every error of every command; the subcommand follows it.
        sub = self.prog.removeprefix("systolic").strip()
        where = f"{sub}: " if sub else ""
        sys.stderr.write(f"systolic: error: {where}{message}\n")
        raise SystemExit(2)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; with ``only``, just that subcommand's module is imported and the
    others are listed by their summary line (enough for --help and "invalid choice")."""
    parser = _Parser(prog="systolic", description=DESCRIPTION,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"systolic {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        if only is None or name == only:
            importlib.import_module(f".commands.{name}", __package__).add_parser(sub)
        else:
            sub.add_parser(name, help=SUMMARIES[name])
    return parser


def _command(argv: Sequence[str]) -> str:
    """The subcommand ``argv`` names ("" if none): the first word not an option, as the
    top-level parser has no option that takes a value."""
    for word in argv:
        if not word.startswith("-"):
            return word if word in SUMMARIES else ""
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(only=_command(words) or "")
    args = parser.parse_args(words)
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    try:
        return int(args.run(args) or 0)
    except SystolicError as exc:
        sys.stderr.write(f"systolic: error: {exc}\n")
        return 2
    except BrokenPipeError:
        return 0
    except OSError as exc:  # a file that cannot be read or written: one line, no traceback
        where = f"{exc.filename}: " if exc.filename else ""
        sys.stderr.write(f"systolic: error: {where}{exc.strerror or exc}\n")
        return 2
    except MemoryError:
        sys.stderr.write("systolic: error: out of memory; try a smaller shape\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("systolic: interrupted\n")
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
