"""The ``systolic`` command as a whole: --json on every subcommand, --help, --version, and
one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import require_module

from systolic import __version__
from systolic.cli import COMMANDS, main

EXAMPLE = str(Path(__file__).parent.parent / "examples" / "seed003_2048.yaml")


JSON_COMMANDS = [
    pytest.param(["matmul", "300", "200", "700"], id="matmul"),
    pytest.param(["matmul", "256", "256", "256", "--dtype", "fp8_e4m3", "--perf-mode",
                  "double_row", "--check"], id="matmul-check"),
    pytest.param(["step", "3", "3", "3"], id="step"),
    pytest.param(["run", EXAMPLE], id="run"),
    pytest.param(["roofline", "--arch", "trn3"], id="roofline"),
    pytest.param(["roofline", "--workload", EXAMPLE], id="roofline-workload"),
    pytest.param(["rtl", "verilog", "--rows", "2", "--cols", "2"], id="rtl-verilog"),
    pytest.param(["rtl", "sim", "--rows", "2", "--cols", "3", "--cycles", "12"], id="rtl-sim"),
    pytest.param(["kernel", str(Path(__file__).parent.parent / "examples" / "kernels" /
                                "basic_matmul.py") + ":basic_matmul",
                  "--arg", "lhsT=bf16[128,128]", "--arg", "rhs=bf16[128,512]"], id="kernel"),
]


@pytest.mark.parametrize("argv", JSON_COMMANDS)
def test_json_is_one_object(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    if argv[0] == "rtl":
        require_module("amaranth", "amaranth (the rtl commands)")
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)  # the whole of stdout is one JSON value
    assert isinstance(data, dict) and data


def test_every_subcommand_has_json(capsys: pytest.CaptureFixture[str]) -> None:
    covered = {p.values[0][0] for p in JSON_COMMANDS}
    assert covered == set(COMMANDS)


def test_json_facts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["step", "3", "3", "3", "--json"]) == 0
    step = json.loads(capsys.readouterr().out)
    assert (step["cycles"], step["macs"]) == (7, 27)  # seed 003: 27 MACs in 7 cycles
    assert main(["matmul", "128", "128", "512", "--arch", "trn1", "--json"]) == 0
    mm = json.loads(capsys.readouterr().out)
    # one 32-cycle weight load, then one MatMul of N + K + M - 2 cycles (seed 003)
    assert mm["cycles"] == 32 + 512 + 128 + 128 - 2


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"systolic {__version__}"


HELPS = [[], *([c] for c in COMMANDS), ["rtl", "verilog"], ["rtl", "sim"]]


@pytest.mark.parametrize("argv", HELPS, ids=lambda a: " ".join(a) or "systolic")
def test_help_exits_zero(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert "usage: systolic" in text
    if argv and argv[0] in ("matmul", "step", "run", "roofline"):
        assert "examples:" in text and f"systolic {argv[0]} " in text.split("examples:")[1]


def test_top_level_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    for name in COMMANDS:
        assert name in text


@pytest.mark.parametrize("argv", [
    ["matmul", "0", "1", "1"],
    ["matmul", "64", "64", "64", "--dtype", "fp8_e4m3", "--perf-mode", "double_row",
     "--arch", "trn1"],
    ["step", "3", "3"],
    ["run"],
    ["run", "/nonexistent/w.yaml"],
    ["roofline", "--arch", "trn9"],
    ["roofline", "--workload", "/nonexistent/w.yaml"],
    ["nosuchcommand"],
])
def test_errors_are_one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse usage errors exit 2 from inside parse_args
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "error" in err and "Traceback" not in err


def test_oversized_requests_are_refused_in_one_line(capsys) -> None:  # type: ignore[no-untyped-def]
    from systolic.cli import main

    assert main(["matmul", "100000", "100000", "100000"]) == 2
    assert "lowers at most" in capsys.readouterr().err
    assert main(["matmul", "20000", "20000", "20000", "--check"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--check would hold" in err
    assert main(["matmul", "8", "8", "8", "--trace", "/nonexistent/dir/t.json"]) == 2
    assert "cannot write the trace" in capsys.readouterr().err
