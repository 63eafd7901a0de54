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
SWEEP = str(Path(__file__).parent.parent / "examples" / "sweeps" / "fp8_double_row.yaml")


JSON_COMMANDS = [
    pytest.param(["matmul", "300", "200", "700"], id="matmul"),
    pytest.param(["matmul", "128", "128", "256", "--program"], id="matmul-program"),
    pytest.param(["matmul", "256", "256", "256", "--dtype", "fp8_e4m3", "--perf-mode",
                  "double_row", "--check"], id="matmul-check"),
    pytest.param(["step", "3", "3", "3"], id="step"),
    pytest.param(["run", EXAMPLE], id="run"),
    pytest.param(["roofline", "--arch", "trn3"], id="roofline"),
    pytest.param(["roofline", "--workload", EXAMPLE], id="roofline-workload"),
    pytest.param(["rtl", "verilog", "--rows", "2", "--cols", "2"], id="rtl-verilog"),
    pytest.param(["rtl", "sim", "--rows", "2", "--cols", "3", "--cycles", "12"], id="rtl-sim"),
    pytest.param(["sweep", SWEEP, "--out", "TMP/s.sqlite", "--workers", "1"], id="sweep"),
    pytest.param(["kernel", str(Path(__file__).parent.parent / "examples" / "kernels" /
                                "basic_matmul.py") + ":basic_matmul",
                  "--arg", "lhsT=bf16[128,128]", "--arg", "rhs=bf16[128,512]"], id="kernel"),
]


@pytest.mark.parametrize("argv", JSON_COMMANDS)
def test_json_is_one_object(capsys: pytest.CaptureFixture[str], argv: list[str],
                            tmp_path: Path) -> None:
    argv = [a.replace("TMP", str(tmp_path)) for a in argv]  # sweep: a store to write
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
    if argv and argv[0] in ("matmul", "step", "run", "roofline", "rtl"):
        cmd = " ".join(argv)
        assert "examples:" in text and f"systolic {cmd} " in text.split("examples:")[1]
    if argv in (["matmul"], ["step"]):  # one size order everywhere: numpy's
        assert "M K N" in " ".join(text.split())
        assert text.index(" m ") < text.index(" k ") < text.index(" n ")


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
    # --seed -1 used to be a ValueError traceback (issue 13, 3.4)
    ["matmul", "8", "8", "8", "--check", "--seed", "-1"],
    ["step", "3", "3", "3", "--seed", "-1"],
    ["rtl", "sim", "--rows", "2", "--cols", "2", "--seed", "-1"],
    ["rtl", "sim", "--rows", "0", "--cols", "2"],
    ["rtl", "sim", "--rows", "1000", "--cols", "1000"],
    ["rtl", "verilog", "--rows", "2", "--cols", "2", "-o", "/"],
    ["rtl", "verilog", "--rows", "1", "--cols", "5000"],
    ["step", "3", "3", "3", "--rows", "99999999", "--cols", "99999999"],
])
def test_errors_are_one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    if argv[0] == "rtl":
        require_module("amaranth", "amaranth (the rtl commands)")
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse usage errors exit 2 from inside parse_args
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("systolic: error: ")  # one prefix for every command


def test_oversized_requests_are_refused_in_one_line(capsys) -> None:  # type: ignore[no-untyped-def]
    from systolic.cli import main

    assert main(["matmul", "100000", "100000", "100000"]) == 2
    assert "lowers at most" in capsys.readouterr().err
    assert main(["matmul", "20000", "20000", "20000", "--check"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--check would hold" in err
    with pytest.raises(SystemExit) as exc:  # refused before the work
        main(["matmul", "8", "8", "8", "--trace", "/nonexistent/dir/t.json"])
    assert exc.value.code == 2
    assert "cannot write the trace" in capsys.readouterr().err


def test_json_program_is_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["matmul", "128", "128", "256", "--program", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert main(["matmul", "128", "128", "256", "--program"]) == 0
    assert data["program"] == capsys.readouterr().out  # the same text, in a field
    assert data["instructions"]["MatMul"] == data["program"].count("MatMul")


def test_kernel_json_program_is_one_json_object(capsys: pytest.CaptureFixture[str]) -> None:
    """Found by the CLI fuzzer: `kernel --json --program` printed the text, then JSON."""
    argv = ["kernel", "examples/kernels/tiled_matmul.py:tiled_matmul",
            "--arg", "lhsT=bf16[256,128]", "--arg", "rhs=bf16[256,512]"]
    assert main([*argv, "--program"]) == 0
    text = capsys.readouterr().out
    assert main([*argv, "--program", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["program"] + "\n" == text  # the same text, in a field
    assert data["program"].count("\nMatMul") + data["program"].startswith("MatMul") == (
        data["opcodes"]["MatMul"])


def test_format_names_any_case(capsys: pytest.CaptureFixture[str]) -> None:
    """One rule for the CLI and the YAML: format names are case-insensitive."""
    assert main(["matmul", "128", "128", "128", "--dtype", "BF16", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["dtype"] == "bf16"
    assert main(["step", "3", "3", "3", "--dtype", "FP32", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["dtype"] == "fp32"


@pytest.mark.parametrize("json_mode", [False, True])
def test_every_written_file_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                        json_mode: bool) -> None:
    """matmul --trace/--timeline say "wrote X" like the other commands: on stdout with the
    table, on stderr under --json (stdout stays one JSON object)."""
    require_module("matplotlib", "matplotlib (the plots)")
    trace, line = tmp_path / "t.json", tmp_path / "t.png"
    argv = ["matmul", "256", "256", "256", "--trace", str(trace), "--timeline", str(line)]
    assert main(argv + ["--json"] * json_mode) == 0
    out = capsys.readouterr()
    said = out.err if json_mode else out.out
    assert f"wrote {trace}" in said and f"wrote {line}" in said
    if json_mode:
        json.loads(out.out)
    assert trace.stat().st_size > 0 and line.stat().st_size > 0


def test_plot_size_flags_on_every_plot_command() -> None:
    from systolic.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices  # type: ignore
    for name in ("matmul", "run", "roofline"):
        flags = {o for a in sub[name]._actions for o in a.option_strings}
        assert {"--width", "--height"} <= flags, name


def test_mx_rule_default_is_the_documented_one() -> None:
    import inspect

    from systolic import api
    from systolic.cli import build_parser
    from systolic.commands.matmul import MX_RULE

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices  # type: ignore
    # unset on the parser (so it can be refused alone), the API's default when used
    assert sub["matmul"].get_default("mx_rule") is None
    default = MX_RULE
    assert default == inspect.signature(api.matmul).parameters["mx_rule"].default
    doc = (Path(__file__).parent.parent / "docs" / "mx_layout.md").read_text()
    assert f"`systolic matmul --mx-rule` default to `{default}`" in doc


@pytest.mark.parametrize("argv", [
    ["matmul", "2048", "2048", "2048"],
    ["step", "3", "3", "3", "--rows", "5", "--cols", "5"],
    ["run", str(Path(__file__).parent.parent / "examples" / "swiglu_mlp.yaml")],
    ["roofline", "--workload", EXAMPLE],
], ids=lambda a: a[0])
def test_piped_output_at_80_columns_is_whole_and_unpadded(argv: list[str]) -> None:
    """COLUMNS=80 and a pipe, as in a narrow terminal piped to a file: no cell cut to
    '524…', no line ending in spaces (issue 13, 3.9)."""
    import os
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "systolic", *argv], capture_output=True,
                          text=True, check=True, env={**os.environ, "COLUMNS": "80"})
    lines = proc.stdout.splitlines()
    assert lines and "…" not in proc.stdout
    assert [ln for ln in lines if ln != ln.rstrip()] == []


# -- issue 22: flags alike on every command, one "wrote" wording, progress on stderr ---------

_ROOT = Path(__file__).parent.parent
_TILED = f"{_ROOT / 'examples' / 'kernels' / 'tiled_matmul.py'}:tiled_matmul"
_KARGS = ["--arg", "lhsT=bf16[128,128]", "--arg", "rhs=bf16[128,512]"]
_SHORT = str(_ROOT / "examples" / "shortfalls.yaml")


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    try:
        rc = main(argv)
    except SystemExit as exc:
        rc = int(exc.code or 0)
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("systolic: error:") and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("argv", [
    ["matmul", "128", "128", "128", "--arch", "TRN1"],
    ["step", "3", "3", "3", "--arch", "Trn1"],
    ["run", EXAMPLE, "--arch", "TRN1"],
    ["roofline", "--arch", "TRN1"],
    ["kernel", _TILED, *_KARGS, "--arch", "TRN1"],
])
def test_arch_takes_any_case_like_dtype(capsys: pytest.CaptureFixture[str],
                                        argv: list[str]) -> None:
    assert main([*argv, "--json"]) == 0
    assert '"trn1"' in capsys.readouterr().out


@pytest.mark.parametrize("argv", [
    ["matmul", "128", "128", "128"], ["step", "3", "3", "3"], ["roofline"],
    ["run", EXAMPLE], ["kernel", _TILED, *_KARGS]])
def test_a_bad_arch_is_refused_alike_everywhere(capsys: pytest.CaptureFixture[str],
                                                argv: list[str]) -> None:
    err = _refused(capsys, [*argv, "--arch", "trn9"])
    assert "argument --arch: invalid choice: 'trn9'" in err
    assert "trn1" in err and "trn3" in err


def test_perf_mode_lists_the_modes_it_takes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["matmul", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "none, double_row, double_row_sw_interleave" in help_text
    assert "timed and computed as double_row" in help_text
    for mode in ("double_column", "double_pixel"):  # no known encoding (seed 000)
        err = _refused(capsys, ["matmul", "128", "128", "128", "--perf-mode", mode])
        assert "choose from 'none', 'double_row', 'double_row_sw_interleave'" in err


def test_sw_interleave_says_it_is_timed_as_double_row(capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    argv = ["matmul", "256", "256", "256", "--dtype", "fp8_e4m3", "--perf-mode"]
    assert main([*argv, "double_row_sw_interleave"]) == 0
    assert "timed and computed as double_row" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "needs"), [
    (["matmul", "128", "128", "128", "--width", "800"], "--timeline"),
    (["matmul", "128", "128", "128", "--height", "800"], "--timeline"),
    (["run", EXAMPLE, "--width", "800"], "--timeline or --loss-bar"),
    (["run", EXAMPLE, "--timeline-op", "x"], "--timeline"),
    (["roofline", "--width", "800"], "-o/--output"),
    (["kernel", _TILED, *_KARGS, "--width", "800"], "--timeline"),
    (["matmul", "128", "128", "128", "--mx-rule", "ocp", "--check"], "an MX --dtype"),
    (["matmul", "128", "128", "128", "--dtype", "mxfp8_e4m3", "--arch", "trn3",
      "--mx-rule", "ocp"], "--check"),
])
def test_an_option_that_does_nothing_alone_is_refused(
        capsys: pytest.CaptureFixture[str], argv: list[str], needs: str) -> None:
    err = _refused(capsys, argv)
    assert f"does nothing without {needs}" in err


def test_step_html_refuses_an_image_suffix(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "x.png"
    err = _refused(capsys, ["step", "3", "3", "3", "--html", str(page)])
    assert "name the file .html" in err and not page.exists()


def _writers(tmp: Path) -> list[tuple[list[str], str, str]]:
    """(argv, the file, what the wrote line says) of every command that writes a file."""
    t = str(tmp)
    return [
        (["matmul", "128", "128", "128", "--trace", f"{t}/a.json"], f"{t}/a.json",
         "Perfetto trace, "),
        (["matmul", "128", "128", "128", "--timeline", f"{t}/a.png"], f"{t}/a.png",
         "whole-core timeline"),
        (["run", _SHORT, "--loss-bar", f"{t}/b.png"], f"{t}/b.png", "loss bar per op"),
        (["run", _SHORT, "--timeline", f"{t}/c.svg"], f"{t}/c.svg", "whole-core timeline of"),
        (["roofline", "-o", f"{t}/d.png"], f"{t}/d.png", "roofline"),
        (["kernel", _TILED, *_KARGS, "--trace", f"{t}/e.json.gz"], f"{t}/e.json.gz",
         "Perfetto trace, gzip, "),
        (["kernel", _TILED, *_KARGS, "--timeline", f"{t}/f.png"], f"{t}/f.png",
         "whole-core timeline"),
        (["step", "3", "3", "3", "--html", f"{t}/g.html"], f"{t}/g.html",
         "step page, 7 cycles"),
    ]


def test_every_writer_says_wrote_file_and_what(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    import re

    for argv, path, what in _writers(tmp_path):
        assert main(argv) == 0, argv
        lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("wrote ")]
        assert len(lines) == 1, (argv, lines)
        assert re.fullmatch(rf"wrote {re.escape(path)} \({re.escape(what)}.*\)", lines[0]), \
            lines[0]
        assert Path(path).stat().st_size > 0


def test_sweep_show_and_bundle_doc_say_wrote_file_and_what(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The last writers with their own wording (issue 22): ``sweep show``'s exports said
    ``wrote F`` (and nothing under --json), ``bundle_doc --write`` the same."""
    import re

    from systolic.compiler import bundle_doc

    store = tmp_path / "s.sqlite"
    assert main(["sweep", SWEEP, "--out", str(store), "--workers", "1", "--no-progress"]) == 0
    shown = json.loads(_show_json(capsys, store))
    rows, figure = shown["points"], shown["objective"]["figure"]
    csv, png = tmp_path / "r.csv", tmp_path / "r.png"
    for json_flag in ([], ["--json"]):
        assert main(["sweep", "show", str(store), "--csv", str(csv), "--plot", str(png),
                     *json_flag]) == 0
        said = capsys.readouterr()
        # under --json the lines go to stderr: stdout stays one JSON object
        lines = [ln for ln in (said.err if json_flag else said.out).splitlines()
                 if ln.startswith("wrote ")]
        assert lines == [f"wrote {csv} (CSV, {rows:,} rows)",
                         f"wrote {png} (plot of {figure})"], lines
        if json_flag:
            json.loads(said.out)
    assert len(csv.read_text().splitlines()) == rows + 1
    doc = tmp_path / "bundles.md"
    doc.write_text(f"intro\n{bundle_doc.BEGIN}\nold\n{bundle_doc.END}\nend\n")
    assert bundle_doc.main(["--write", str(doc)]) == 0
    out = capsys.readouterr().out
    assert re.fullmatch(rf"wrote {re.escape(str(doc))} \([a-z ]+\)\n", out), out
    assert bundle_doc.layout_tables() in doc.read_text()


def _show_json(capsys: pytest.CaptureFixture[str], store: Path) -> str:
    capsys.readouterr()
    assert main(["sweep", "show", str(store), "--json"]) == 0
    return capsys.readouterr().out


def test_rtl_writers_use_the_same_wording(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    require_module("amaranth", "amaranth (the rtl commands)")
    v, w = tmp_path / "a.v", tmp_path / "a.vcd"
    assert main(["rtl", "verilog", "--rows", "2", "--cols", "2", "-o", str(v)]) == 0
    assert main(["rtl", "sim", "--rows", "2", "--cols", "2", "--cycles", "4",
                 "--vcd", str(w)]) == 0
    out = capsys.readouterr().out
    assert f"wrote {v} (Verilog, 2 x 2 array, {v.stat().st_size:,} bytes)" in out
    assert f"wrote {w} (VCD waveform)" in out


def test_rtl_doc_names_the_scopes_the_vcd_has(tmp_path: Path) -> None:
    require_module("amaranth", "amaranth (the rtl commands)")
    import re

    vcd = tmp_path / "a.vcd"
    assert main(["rtl", "sim", "--rows", "2", "--cols", "2", "--cycles", "2",
                 "--vcd", str(vcd)]) == 0
    stack: list[str] = []
    scopes = set()
    for line in vcd.read_text().splitlines():  # $scope module NAME $end / $upscope $end
        if m := re.match(r"\$scope \w+ (\S+) \$end", line):
            stack.append(m.group(1))
            scopes.add(".".join(stack))
        elif line.startswith("$upscope"):
            stack.pop()
    doc = (_ROOT / "docs" / "rtl.md").read_text()
    named = set(re.findall(r"`(bench\.[\w.<>]+)`", doc))
    assert named, "docs/rtl.md names no VCD scope"
    for scope in named:
        assert scope.replace("<k>", "1").replace("<m>", "0") in scopes, (scope, scopes)


def test_progress_goes_to_stderr_and_json_stays_clean(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "k.json"
    assert main(["kernel", _TILED, *_KARGS, "--trace", str(trace), "--json",
                 "--progress"]) == 0
    cap = capsys.readouterr()
    json.loads(cap.out)  # stdout is the JSON and nothing else
    for stage in ("recording tiled_matmul", "timing ", "writing the trace"):
        assert f"systolic: {stage}" in cap.err, cap.err
    assert main(["matmul", "1024", "1024", "1024", "--trace", str(trace), "--progress"]) == 0
    err = capsys.readouterr().err
    assert "systolic: lowering every instruction of 1024x1024x1024 bf16" in err
    assert "systolic: writing the trace of" in err
    # without --progress and off a terminal: nothing on stderr
    assert main(["matmul", "256", "256", "256", "--json"]) == 0
    assert capsys.readouterr().err == ""
