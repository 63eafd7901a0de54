"""Start-up stays light (issue 20): what `import systolic` and `systolic --help` import, and
that the lazy names and subcommand summaries are the real ones. No wall-clock assertions: the
figures are in bench/bench_startup.py and docs/PERFORMANCE.md."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

import systolic
from systolic import cli


def _modules_after(code: str) -> set[str]:
    """The systolic modules a fresh interpreter has loaded after running ``code``."""
    probe = code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True,
                         text=True).stdout.splitlines()[-1]
    return {m for m in json.loads(out) if m == "systolic" or m.startswith("systolic.")}


def test_import_systolic_loads_no_numpy_and_no_submodule_but_errors() -> None:
    loaded = _modules_after("import systolic")
    assert loaded == {"systolic", "systolic.errors", "systolic.version"}, loaded


def test_help_imports_no_subcommand() -> None:
    loaded = _modules_after(
        "import contextlib, io\nfrom systolic import cli\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n        cli.main(['--help'])\n    except SystemExit:\n        pass")
    assert not any(m.startswith("systolic.commands.") for m in loaded), loaded
    assert "numpy" not in loaded


def test_a_command_imports_only_its_own_module() -> None:
    loaded = _modules_after(
        "import contextlib, io\nfrom systolic import cli\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n        cli.main(['rtl', '--help'])\n    except SystemExit:\n        pass")
    commands = {m for m in loaded if m.startswith("systolic.commands.")
                and m != "systolic.commands.common"}  # the helpers every command shares
    assert commands == {"systolic.commands.rtl"}, commands


def test_matmul_json_loads_no_module_only_rare_paths_use() -> None:
    # The timing command of a dense product (issue 20's `systolic matmul 2048 2048 2048
    # --json`): no verifier (the compiler's output is not re-checked there), no MX code, no
    # text form, no artifact rules (no file is written), no html or fractions (the notebook
    # view and Report.exact_breakdown).
    code = ("import contextlib, io, sys\nfrom systolic import cli\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    cli.main(['matmul', '256', '256', '256', '--json'])\n"
            "import json\nprint(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True).stdout.splitlines()[-1]
    loaded = set(json.loads(out))
    assert "systolic.timing.core" in loaded  # the probe did time the product
    rare = {"systolic.verify", "systolic.mx", "systolic.compiler.codegen_mx",
            "systolic.isa.asm", "systolic.artifacts", "systolic.memory", "html", "fractions"}
    assert not loaded & rare, loaded & rare


def _help_lines(parser: argparse.ArgumentParser) -> dict[str, str]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {a.dest: a.help for a in sub._choices_actions}  # type: ignore[misc]


def test_summaries_are_each_modules_own_help_line() -> None:
    # build_parser() imports every module, each adding its parser with its own help=...
    assert _help_lines(cli.build_parser()) == cli.SUMMARIES
    assert _help_lines(cli.build_parser(only="")) == cli.SUMMARIES


@pytest.mark.parametrize("argv,word", [
    (["matmul", "8", "8", "8"], "matmul"), (["--version"], ""), (["bogus", "x"], ""),
    (["-h", "sweep", "show"], "sweep"), ([], ""),
])
def test_the_command_word(argv: list[str], word: str) -> None:
    assert cli._command(argv) == word


def test_unknown_command_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["bogus"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("systolic: error: ") and "bogus" in err[0]


def test_every_lazy_name_resolves_to_its_modules_object() -> None:
    import importlib

    for name, where in systolic._LAZY.items():
        assert getattr(systolic, name) is getattr(importlib.import_module(where, "systolic"),
                                                  name), name
    assert set(systolic._LAZY) <= set(systolic.__all__)
    with pytest.raises(AttributeError):
        systolic.no_such_name  # noqa: B018


def test_verify_is_the_function_whichever_import_comes_first() -> None:
    # The subpackage first (as the compiler imports it), then the package attribute.
    code = ("import systolic.compiler, systolic\nfrom systolic import verify\n"
            "print(type(systolic.verify).__name__, type(verify).__name__)")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True).stdout.split()
    assert out == ["function", "function"]
