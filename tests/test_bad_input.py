"""Bad input is one line and exit 2, never a traceback or a lie (issue 22: the cases that
used to end in a Python traceback or in NaN with exit 0)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from systolic.arch import get_arch
from systolic.cli import main

EX = Path(__file__).resolve().parents[1] / "examples"
BASIC = f"{EX / 'kernels' / 'basic_matmul.py'}:basic_matmul"


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse's own errors exit through _Parser.error
        rc = int(exc.code or 0)
    cap = capsys.readouterr()
    assert rc == 2, cap
    assert cap.err.startswith("systolic: error:") and cap.err.count("\n") == 1, cap.err
    assert "Traceback" not in cap.err
    return cap.err


@pytest.mark.parametrize("argv", [
    ["matmul", "128", "128", "128", "--timeline", "t.png", "--width", "99999999"],
    ["matmul", "128", "128", "128", "--timeline", "t.png", "--height", "20000"],
    ["kernel", BASIC, "--arg", "lhsT=bf16[128,128]", "--arg", "rhs=bf16[128,512]",
     "--timeline", "t.png", "--width", "99999999"],
])
def test_a_plot_too_large_to_draw_is_refused(tmp_path, monkeypatch, capsys, argv) -> None:
    monkeypatch.chdir(tmp_path)
    assert "16,384" in one_line_error(capsys, argv)
    assert not (tmp_path / "t.png").exists()  # nothing written


@pytest.mark.parametrize(("args", "match"), [
    (["--arg", "lhsT=bf16[128,128]"], "basic_matmul needs --arg rhs="),
    (["--arg", "lhsT=bf16[128,128]", "--arg", "rhs=bf16[128,512]", "--arg", "z=bf16[1,1]"],
     "--arg z: basic_matmul has no parameter 'z' (it takes lhsT, rhs)"),
    (["--arg", "lhsT=bf16[128,128]", "--arg", "lhsT=bf16[128,128]"], "given twice"),
    (["--arg", "lhsT=bf16[128,128]", "--arg", "rhs=bf16[128,512]", "--param", "X=1"],
     "--param X: basic_matmul has no parameter 'X'"),
    (["--arg", "lhsT=bf16[128,128]", "--param", "rhs=1"],  # a number where a tensor goes
     "basic_matmul.py:12: the kernel raised AttributeError"),
])
def test_kernel_arguments_are_checked_against_the_signature(capsys, args, match) -> None:
    assert match in one_line_error(capsys, ["kernel", BASIC, *args])


def test_kernel_arguments_bind_by_name(capsys) -> None:
    base = ["kernel", BASIC, "--json"]
    assert main([*base, "--arg", "lhsT=bf16[128,128]", "--arg", "rhs=bf16[128,512]"]) == 0
    in_order = json.loads(capsys.readouterr().out)
    assert main([*base, "--arg", "rhs=bf16[128,512]", "--arg", "lhsT=bf16[128,128]"]) == 0
    swapped = json.loads(capsys.readouterr().out)
    assert swapped["latency_us"] == in_order["latency_us"]
    assert swapped["instructions"] == in_order["instructions"]


def test_a_kernel_that_leaves_its_output_unwritten_is_refused(capsys) -> None:
    # N = 500 is not a multiple of the kernel's 512-column tiles: its N loop runs zero times,
    # so it used to exit 0 with NaN values and a 0 us "bound by PE compute"
    err = one_line_error(capsys, [
        "kernel", f"{EX / 'kernels' / 'tiled_matmul.py'}:tiled_matmul", "--arg",
        "lhsT=bf16[128,128]", "--arg", "rhs=bf16[128,500]", "--values"])
    assert "writes only 0 of the 128,000 bytes of its output" in err
    assert "[128, 500] bfloat16" in err


def test_a_worker_count_past_any_machine_is_refused(tmp_path, capsys) -> None:
    err = one_line_error(capsys, ["sweep", str(EX / "sweeps" / "fp8_double_row.yaml"),
                                  "--out", str(tmp_path / "s.sqlite"), "--workers",
                                  "99999999999999999999"])
    assert "--workers" in err and "1,024" in err
    assert not (tmp_path / "s.sqlite").exists()


@pytest.mark.parametrize(("head", "match"), [
    ("import nki.collectives as cc\n", "imports nki.collectives, a part of the NKI API"),
    ("import no_such_module_here\n", "imports no_such_module_here, a module that is not"),
    ("raise ValueError('at import')\n", "loading the kernel file raised ValueError"),
])
def test_a_kernel_file_that_cannot_load_is_one_line(tmp_path, capsys, head, match) -> None:
    f = tmp_path / "k.py"
    f.write_text("import nki\nimport nki.language as nl\n" + head +
                 "\n@nki.jit\ndef k(x):\n    return x\n")
    err = one_line_error(capsys, ["kernel", f"{f}:k", "--arg", "x=bf16[128,128]"])
    assert match in err and f"{f}:3:" in err


def test_a_kernel_file_defining_a_dataclass_loads(tmp_path, capsys) -> None:
    # issue 19: the module is registered while it runs (dataclasses look it up)
    f = tmp_path / "k.py"
    f.write_text("import nki\nimport nki.language as nl\nfrom dataclasses import dataclass\n\n"
                 "@dataclass\nclass Cfg:\n    tile: int = 128\n\n@nki.jit\ndef k(x):\n"
                 "    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)\n"
                 "    nl.store(out, value=nl.load(x))\n    return out\n")
    assert main(["kernel", f"{f}:k", "--arg", "x=bf16[128,128]", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["instructions"] == 2


def test_a_spec_built_with_a_perf_mode_spelling_lowers() -> None:
    # issue 22: the string stayed a string and lower() failed on str.k_fold
    from systolic.compiler import MatmulSpec, lower
    from systolic.isa import MatMul, PerfMode

    spec = MatmulSpec(128, 256, 512, "fp8_e4m3", "double_row")
    assert spec.perf_mode is PerfMode.DOUBLE_ROW
    mms = [i for i in lower(spec, get_arch("trn2")).program if isinstance(i, MatMul)]
    # K = 256 fp8 folds two rows per PE row: one MatMul of 128 partitions (seed 000)
    assert len(mms) == 1 and mms[0].moving.partitions == 128


@pytest.mark.parametrize("mode", ["bogus", 7, (0, 0), 1.5])
def test_a_spec_with_no_perf_mode_is_one_line(mode: object) -> None:
    from systolic.compiler import MatmulSpec
    from systolic.errors import SystolicError

    with pytest.raises(SystolicError, match="unknown perf mode"):
        MatmulSpec(128, 128, 128, "bf16", mode)  # type: ignore[arg-type]


def _guarded(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """one_line_error with an alarm: a blocking open fails the test instead of hanging it."""
    import signal

    def boom(signum: int, frame: object) -> None:
        raise TimeoutError(f"{argv} blocked")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(20)
    try:
        return one_line_error(capsys, argv)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("argv", [["run", "{f}"], ["roofline", "--workload", "{f}"],
                                  ["sweep", "{f}", "--out", "{d}/r.db"]])
def test_a_workload_fifo_is_refused_without_blocking(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str],
                                                    argv: list[str]) -> None:
    import os

    fifo = tmp_path / "w.yaml"
    os.mkfifo(fifo)  # no writer: an open() for reading would block forever
    err = _guarded([a.replace("{f}", str(fifo)).replace("{d}", str(tmp_path)) for a in argv],
                   capsys)
    assert "is a FIFO" in err
    assert not (tmp_path / "r.db").exists()  # refused before the results store is made


@pytest.mark.parametrize(("path", "what"), [("/dev/zero", "a character device"),
                                            ("{dir}", "a directory")])
def test_a_workload_that_is_not_a_file_is_refused(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str],
                                                  path: str, what: str) -> None:
    err = _guarded(["run", path.replace("{dir}", str(tmp_path))], capsys)
    assert f"is {what}" in err
    # a sweep file is read by the same rule (systolic.yaml_source.read_text)
    err = _guarded(["sweep", path.replace("{dir}", str(tmp_path)), "--out",
                    str(tmp_path / "r.db")], capsys)
    assert f"is {what}; a sweep file is read only from a regular file" in err


def test_a_huge_workload_file_is_refused_by_its_size(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    from systolic.workload import MAX_FILE_BYTES

    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (MAX_FILE_BYTES + 1))  # a comment: valid YAML, just too long
    assert f"more than {MAX_FILE_BYTES:,} bytes" in _guarded(["run", str(big)], capsys)
    ok = tmp_path / "ok.yaml"
    ok.write_bytes(b"#" * (MAX_FILE_BYTES - 200) + b"\n- {name: a, m: 1, k: 1, n: 1}\n")
    assert main(["run", str(ok), "--json"]) == 0  # the limit itself is accepted
    err = _guarded(["sweep", str(big), "--out", str(tmp_path / "r.db")], capsys)
    assert f"more than {MAX_FILE_BYTES:,} bytes" in err


@pytest.mark.parametrize("argv", [["run", "a\x00.yaml"], ["roofline", "--workload", "\x00"]])
def test_a_workload_path_with_a_nul_byte_is_one_line(capsys: pytest.CaptureFixture[str],
                                                     argv: list[str]) -> None:
    # found by tests/test_cli_fuzz.py: os.open raised ValueError (embedded null byte)
    assert "holds a NUL byte" in one_line_error(capsys, argv)


# -- the recording budget on the command line (issue 22 H4) ---------------------------------

BUDGET_KERNEL = """\
import nki
import nki.language as nl


@nki.jit
def stores(a, n=10):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    for _ in nl.affine_range(n):
        nl.store(out, t)
    return out


@nki.jit
def forever(a):
    k = 0
    while True:
        k += 1
"""


def test_kernel_max_ops_bounds_the_recording_at_the_line_reached(tmp_path: Path,
                                                                 capsys) -> None:
    k = tmp_path / "budget.py"
    k.write_text(BUDGET_KERNEL)
    base = ["kernel", f"{k}:stores", "--arg", "a=bf16[128,128]"]
    # the kernel records 1 load + n stores: 1 + 40 operations fit 41 and not 40
    assert main([*base, "--param", "n=40", "--max-ops", "41", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["nki_ops"] == 41
    err = one_line_error(capsys, [*base, "--param", "n=40", "--max-ops", "40"])
    assert err.startswith(f"systolic: error: {k}:10: the kernel made more than 40 NKI "
                          f"operations, the recording budget (--max-ops)"), err
    said = err.removeprefix(f"systolic: error: {k}:10: ")  # the path may hold any word
    assert "raise --max-ops" in said and "max_ops" not in said.replace("--max-ops", "")
    assert "must be at least 1" in one_line_error(capsys, [*base, "--max-ops", "0"])


def test_kernel_time_limit_stops_a_loop_that_never_ends(tmp_path: Path, capsys) -> None:
    k = tmp_path / "budget.py"
    k.write_text(BUDGET_KERNEL)
    base = ["kernel", f"{k}:forever", "--arg", "a=bf16[128,128]"]
    err = one_line_error(capsys, [*base, "--time-limit", "0.5"])
    # stopped between two bytecodes of the loop: on its `while` line or in its body
    assert any(err.startswith(f"systolic: error: {k}:{line}: the kernel's Python ran past "
                              f"its time limit of 0.5 s while it was recorded (--time-limit)")
               for line in (17, 18)), err
    for bad in ("0", "-1", "nan", "inf", "soon"):
        assert "--time-limit" in one_line_error(capsys, [*base, "--time-limit", bad])


def test_kernel_budget_defaults_are_the_front_ends(capsys) -> None:
    """The options' defaults are the Python API's (nki/record.py), and --help says them."""
    from systolic.nki.record import DEFAULT_MAX_OPS, DEFAULT_TIME_LIMIT_S

    with pytest.raises(SystemExit):
        main(["kernel", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"({DEFAULT_MAX_OPS:,}: the largest public kernels" in text
    assert f"recorded ({DEFAULT_TIME_LIMIT_S:g})" in text


def test_kernel_seed_is_checked_as_the_other_commands_check_it(capsys) -> None:
    # issue 22 audit: --seed -1 with --values was numpy's ValueError as a traceback
    base = ["kernel", BASIC, "--arg", "lhsT=bf16[128,128]", "--arg", "rhs=bf16[128,512]",
            "--values"]
    for bad in ("-1", str(2**128), "x"):
        err = one_line_error(capsys, [*base, "--seed", bad])
        assert "--seed" in err, err


def test_kernel_arg_dtypes_take_any_case_as_dtype_and_arch_do(capsys) -> None:
    # issue 22 audit: --arg lhsT=BF16[...] was "unknown dtype 'BF16'" where --dtype BF16
    # and --arch TRN2 are accepted
    outs = []
    for lhs, rhs in (("bf16", "bf16"), ("BF16", "Bf16")):
        assert main(["kernel", BASIC, "--arg", f"lhsT={lhs}[128,128]", "--arg",
                     f"rhs={rhs}[128,512]", "--json"]) == 0
        outs.append(json.loads(capsys.readouterr().out))
    assert outs[0]["core"] == outs[1]["core"]
    # bf16: 2 bytes an element, each operand and the result moved once (closed form)
    assert outs[1]["core"]["dma"]["hbm_bytes"] == 2 * (128 * 128 + 128 * 512 + 128 * 512)


def test_kernel_values_that_depend_on_unwritten_memory_are_refused(tmp_path: Path,
                                                                     capsys) -> None:
    # issue 22, found by tests/test_nki_fuzz.py (seed 5): fp8_double_row with its slot loop
    # cut to one slot multiplies DoubleRow tiles whose second slot nothing loaded; --values
    # exited 0 with numbers made of what SBUF held
    src = (EX / "kernels" / "fp8_double_row.py").read_text()
    assert src.count("nl.static_range(2)") == 1
    half = tmp_path / "half.py"
    half.write_text(src.replace("nl.static_range(2)", "nl.static_range(1)"))
    args = ["--arg", "lhsT=fp8_e4m3[256,128]", "--arg", "rhs=fp8_e4m3[256,512]", "--values"]
    err = one_line_error(capsys, ["kernel", f"{half}:fp8_double_row", *args])
    # refused when it is built (issue 19 item 6, nki/valid.py), naming the tile and the
    # matmul that read its unloaded slot, before the two-fill check of --values runs
    assert "half.py:35: dma_copy writes device memory with values computed from" in err
    assert "made at line 24 that nothing wrote, read at line 31" in err
    # the kernel as written loads both slots: its values stand, and equal float64's product
    # of the same seeded inputs (fp8 products of small values are exact in fp32 here)
    assert main(["kernel", f"{EX / 'kernels' / 'fp8_double_row.py'}:fp8_double_row", *args,
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)["outputs"][0]
    from systolic.commands.kernel import random_inputs
    from systolic.nki.run import parse_arg

    lhs, rhs = random_inputs([parse_arg("fp8_e4m3[256,128]"), parse_arg("fp8_e4m3[256,512]")],
                             0)
    want = lhs.astype(np.float64).T @ rhs.astype(np.float64)
    assert out["sum"] == pytest.approx(float(want.sum()), rel=1e-5)
    assert out["max_abs"] == pytest.approx(float(np.abs(want).max()), rel=1e-5)


def test_an_rtl_simulation_of_too_many_cycles_is_refused_at_once(capsys) -> None:
    # found by tests/test_cli_fuzz.py: a 3 x 1 array for 10^6 cycles passed the PE-cycle
    # bound (3 x 10^6) and ran for minutes, each simulated clock costing ~0.2 ms
    err = one_line_error(capsys, ["rtl", "sim", "--rows", "3", "--cols", "1", "--cycles",
                                  "1000000"])
    assert "more than 50,000 clock cycles" in err and "--cycles" in err
