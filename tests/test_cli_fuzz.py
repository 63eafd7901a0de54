"""A CLI fuzzer (issue 22): argument vectors for every command but sweep (fuzzed with the
sweep), run in-process through ``systolic.cli.main`` under a time bound per case.

Each case must end in exit 0, or in exit 2 with exactly one ``systolic: error:`` line on
stderr; never a traceback, never past the bound. A run that exits 0 must not lie either:
with ``--json`` its stdout is one JSON object (and for matmul, run and kernel it has the
``pe`` / ``core`` views of docs/json.md), and ``rtl sim`` never reports a mismatch (exit 1).

Outcomes: ``ok``, ``error`` (clean), ``crash`` (an exception, a bad exit code or a bad error
text), ``hang`` (past :data:`BOUND_S`), ``wrong`` (exit 0 with a malformed result). CI runs
the hypothesis profile's small count; ``python tests/test_cli_fuzz.py N`` runs N cases and
prints the counts (docs/TESTING.md).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import os
import signal
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from systolic.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "examples"
# Seconds one case may take. The slowest valid case the pools below allow (a 300 x 300 x 300
# step, --check of 512^3) takes a few seconds on a shared core; a hang is anything past this.
BOUND_S = 60
COMMANDS = ("matmul", "step", "run", "roofline", "kernel", "rtl")
JSON_VIEWS = {"matmul", "run", "kernel"}


class Hang(BaseException):
    """Raised by the alarm; a BaseException so that no ``except Exception`` swallows it."""


# Where the cases run: an output named "x" or "-" by the pools lands there, not in the tree.
WORKDIR: list[Path] = []


def _files(tmp: Path) -> dict[str, list[str]]:
    """Pools of paths: inputs good and bad, outputs of every kind a user might give (and
    every command's parser built, see :func:`command_parser`); cases run in ``tmp``."""
    WORKDIR[:] = [tmp]
    for cmd in COMMANDS:
        command_parser(cmd)
    fifo = tmp / "fifo"
    if not fifo.exists():
        os.mkfifo(fifo)
    bad = tmp / "bad.yaml"
    bad.write_text("ops: [ {name: a, m: 1\n")
    binary = tmp / "bin.yaml"
    binary.write_bytes(bytes(range(256)))
    link = tmp / "link.png"
    if not link.is_symlink():
        link.symlink_to(tmp / "target.png")
    kernels = [f"{EX / 'kernels' / k}.py:{k}" for k in ("tiled_matmul", "basic_matmul")]
    return {
        "workload": [str(EX / "swiglu_mlp.yaml"), str(EX / "shortfalls.yaml"), str(bad),
                     str(binary), str(fifo), "/dev/zero", "/dev/null", str(tmp),
                     str(tmp / "missing.yaml"), ""],
        "target": [*kernels, f"{EX / 'kernels' / 'tiled_matmul.py'}:nope",
                   f"{tmp / 'missing.py'}:f", f"{fifo}:f", "/dev/zero:f", "x", ":f",
                   f"{bad}:f", ""],
        "out": [str(tmp / n) for n in ("a.png", "a.svg", "a.json", "a.json.gz", "a.html",
                                       "a.txt", "a.v", "a.vcd", "a")]
               + [str(fifo), str(link), str(tmp), "/dev/full", str(tmp / "no" / "a.png"), ""],
    }


# 2**31 is left out: `matmul 3 3 2147483648` is under the MatMul limit, cannot be sliced
# (one M tile) and lowers 4 million MatMuls for minutes; test_known_slow_lowering keeps it.
INTS = ["0", "1", "2", "3", "7", "64", "128", "129", "300", "-1", str(2**40), str(10**20),
        "x", "1.5", "0x10", "", " 3", "1e3"]
SMALL = ["0", "1", "2", "3", "-1", str(10**6), str(10**20), "x", ""]
ARGS = ["lhsT=bf16[128,128]", "rhs=bf16[128,512]", "lhsT=bf16[256,128]", "rhs=bf16[256,512]",
        "lhsT=bf16[128]", "rhs=fp8[128,512]", "lhsT=bf16[0,128]", "rhs=bf16[a,b]",
        "x=bf16[1,1]", "lhsT=", "=bf16[1,1]", "lhsT=bf16[128,129]", "rhs=int8[128,512]",
        "rhs=float32[128,512]", "lhsT=bf16[128,128,2]", "lhsT"]
PARAMS = ["TILES_N=2", "TILES_M=1", "X=1", "lhsT=1", "=", "TILES_N=", "TILES_N=0",
          "TILES_N=abc", "TILES_N=1e400"]
JUNK = ["", "-", "--", "x", "TRN2", "BF16", "none", "nan", "-5", "\x00", "é", "--json"]


def _value(action: argparse.Action, opt: str, files: dict[str, list[str]]) -> st.SearchStrategy:
    """Values for one option: its choices (in any case) or a pool by what it names."""
    junk = st.sampled_from(JUNK)
    if action.choices:
        choices = [str(c) for c in action.choices]
        return st.one_of(st.sampled_from(choices), st.sampled_from([c.upper() for c in choices]),
                         junk)
    name = opt.lstrip("-")
    if name in ("trace", "timeline", "core-timeline", "loss-bar", "output", "o", "html",
                "vcd"):
        pool = files["out"]
    elif name == "workload":
        pool = files["workload"]
    elif name == "arg":
        pool = ARGS
    elif name == "param":
        pool = PARAMS
    elif name in ("rows", "cols", "cycles"):
        pool = SMALL
    else:
        pool = INTS
    return st.one_of(st.sampled_from(pool), junk)


def _options(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.Action]]:
    return [(a.option_strings[-1], a) for a in parser._actions
            if a.option_strings and a.dest not in ("help", "version")]


@functools.cache
def command_parser(cmd: str) -> argparse.ArgumentParser:
    """The subcommand's parser, built once (and before hypothesis draws: importing a command
    touches the random module, which hypothesis warns about inside a strategy)."""
    return _subparser(build_parser(only=cmd), cmd)


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]  # type: ignore[no-any-return]


@st.composite
def argvs(draw: st.DrawFn, files: dict[str, list[str]]) -> list[str]:
    """One argument vector: a command, its positionals (mostly well-formed), then a few of
    its own options with values from the pools."""
    cmd = draw(st.sampled_from(COMMANDS))
    parser = command_parser(cmd)
    argv = [cmd]
    if cmd == "rtl":
        which = draw(st.sampled_from(["verilog", "sim", "bogus"]))
        argv.append(which)
        if which == "bogus":
            return argv
        parser = _subparser(parser, which)
        argv += ["--rows", draw(st.sampled_from(SMALL)), "--cols", draw(st.sampled_from(SMALL))]
    elif cmd in ("matmul", "step"):
        argv += [draw(st.sampled_from(INTS)) for _ in range(draw(st.sampled_from([3, 3, 3, 2,
                                                                                  4])))]
    elif cmd == "run":
        argv.append(draw(st.sampled_from(files["workload"])))
    elif cmd == "kernel":
        argv.append(draw(st.sampled_from(files["target"])))
        argv += [x for a in draw(st.lists(st.sampled_from(ARGS[:4]), max_size=3))
                 for x in ("--arg", a)]
    for opt, action in draw(st.lists(st.sampled_from(_options(parser)), max_size=5)):
        if opt in ("--rows", "--cols") and cmd == "rtl":
            continue
        argv.append(opt)
        if action.nargs != 0:
            argv.append(draw(_value(action, opt, files)))
    return argv


def run_case(argv: list[str], bound_s: int = BOUND_S) -> tuple[str, str]:
    """(outcome, detail) of one argument vector, run in-process under the alarm."""
    out, err = io.StringIO(), io.StringIO()

    def alarm(signum: int, frame: Any) -> None:
        raise Hang

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(bound_s)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                contextlib.chdir(WORKDIR[0] if WORKDIR else Path.cwd()):
            try:
                rc = main(argv)
            except SystemExit as exc:
                rc = exc.code if isinstance(exc.code, int) else 2 if exc.code else 0
    except Hang:
        return "hang", f"past {bound_s} s"
    except BaseException as exc:  # anything that escapes main is a crash
        return "crash", f"{type(exc).__name__}: {exc}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    text, stdout = err.getvalue(), out.getvalue()
    if "Traceback" in text or "Traceback" in stdout:
        return "crash", text[-500:]
    if rc == 2:
        lines = text.splitlines()
        if "--progress" in argv:  # asked for: stage lines on stderr before the error
            lines = [ln for ln in lines if not ln.startswith("systolic: ")
                     or ln.startswith("systolic: error: ")]
        if len(lines) == 1 and lines[0].startswith("systolic: error: "):
            return "error", lines[0]
        return "crash", f"exit 2 with {len(lines)} stderr lines: {text[-300:]!r}"
    if rc != 0:
        return ("wrong" if rc == 1 else "crash"), f"exit {rc}: {text[-300:]!r}"
    if "--json" in argv:
        try:
            doc = json.loads(stdout)
        except ValueError:
            return "wrong", f"--json printed no single JSON object: {stdout[:200]!r}"
        if argv[0] in JSON_VIEWS and "--program" not in argv and not (
                "core" in doc or ("ops" in doc and all("core" in o for o in doc["ops"]))):
            return "wrong", "--json without the core view"
    return "ok", ""


COUNTS: Counter[str] = Counter()


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    return _files(tmp_path_factory.mktemp("fuzz"))


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_every_command_exits_cleanly(files: dict[str, list[str]], data: st.DataObject
                                     ) -> None:
    argv = data.draw(argvs(files))
    outcome, detail = run_case(argv)
    COUNTS[outcome] += 1
    assert outcome in ("ok", "error"), f"{outcome}: {argv!r}: {detail}"


@pytest.mark.parametrize("argv", [
    ["run", "{fifo}"], ["roofline", "--workload", "{fifo}"], ["run", "/dev/zero"],
    ["matmul", str(10**20), "128", "128"], ["kernel", "{fifo}:f"],
    ["matmul", "128", "128", "128", "--trace", "{fifo}"],
])
def test_known_hangs_and_crashes_are_clean_errors(files: dict[str, list[str]],
                                                  argv: list[str]) -> None:
    fifo = next(f for f in files["workload"] if f.endswith("fifo"))
    outcome, detail = run_case([a.replace("{fifo}", fifo) for a in argv])
    assert outcome == "error", detail


def test_a_product_too_big_to_time_whole_is_refused_at_once() -> None:
    # issue 22: one M tile and a huge N cannot be sliced, and lowering its 4 M MatMuls took
    # minutes; now refused by arithmetic (extrapolate.WHOLE_LIMIT) before any tile is built
    outcome, detail = run_case(["matmul", "3", "3", str(2**31), "--json"], bound_s=10)
    assert outcome == "error" and "timed whole" in detail, detail


def _main(n: int) -> int:
    """Run ``n`` cases and print the counts per outcome, then each bad case."""
    import tempfile

    from hypothesis import Phase, Verbosity

    tmp = Path(tempfile.mkdtemp(prefix="cli_fuzz_"))
    files = _files(tmp)
    bad: list[tuple[str, list[str], str]] = []
    counts: Counter[str] = Counter()

    @settings(max_examples=n, deadline=None, database=None, verbosity=Verbosity.quiet,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(argvs(files))
    def one(argv: list[str]) -> None:
        outcome, detail = run_case(argv)
        counts[outcome] += 1
        if outcome not in ("ok", "error"):
            bad.append((outcome, argv, detail))

    one()
    tried = sum(counts.values())
    print(f"tried {tried}: ok {counts['ok']}, clean error {counts['error']}, crash "
          f"{counts['crash']}, hang {counts['hang']}, silently wrong {counts['wrong']}")
    for outcome, argv, detail in bad:
        print(f"  {outcome}: {argv!r}: {detail}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(_main(int(sys.argv[1]) if len(sys.argv) > 1 else 200))
