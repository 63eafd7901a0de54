"""Workload files: the examples run and add up; malformed files get one line FILE:LINE."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from systolic.api import make_spec
from systolic.arch import get_arch
from systolic.cli import main
from systolic.compiler import lower
from systolic.errors import WorkloadError
from systolic.timing.core import time_program
from systolic.views.report import build_report
from systolic.workload import parse_workload

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.yaml"))
CLOCK = {"trn1": 2.8e9, "inf2": 2.8e9, "trn2": 2.4e9, "trn3": 2.4e9}  # seed 003 / FACTS


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["run", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def expected_ops(path: Path) -> list[dict]:
    """The ops as plain PyYAML reads the file (independent of systolic's own parser)."""
    doc = yaml.safe_load(path.read_text())
    ops = doc if isinstance(doc, list) else doc["ops"]
    defaults = {"dtype": "bf16", "arch": "trn2", "perf_mode": "none", "repeat": 1}
    if isinstance(doc, dict):
        defaults.update(doc.get("defaults", {}))
    return [{**defaults, **op} for op in ops]


def test_the_examples_exist() -> None:
    names = {p.name for p in EXAMPLES}
    assert {"seed003_2048.yaml", "swiglu_mlp.yaml", "attention_proj.yaml"} <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs_and_its_total_adds_up(capsys: pytest.CaptureFixture[str],
                                           path: Path) -> None:
    data = run_json(capsys, str(path))
    want = expected_ops(path)
    ops = data["ops"]
    assert [o["name"] for o in ops] == [w["name"] for w in want]
    for o, w in zip(ops, want, strict=True):
        assert (o["m"], o["k"], o["n"], o["dtype"], o["arch"], o["repeat"]) == (
            w["m"], w["k"], w["n"], w["dtype"], w["arch"], w["repeat"])
        flops = 2 * w["m"] * w["k"] * w["n"]
        assert o["flops"] == flops
        # the whole core: TFLOP/s is the FLOPs over the whole-core latency
        assert o["tflops"] == pytest.approx(flops / (o["latency_us"] * 1e-6) / 1e12)
        assert 0 < o["tflops"] <= o["peak_tflops"] * (1 + 1e-9)
        assert o["hfu"] == pytest.approx(o["tflops"] / o["peak_tflops"])
        # the Tensor Engine's view, beside it: its own cycles at its own clock
        assert o["pe_us"] == pytest.approx(o["cycles"] / CLOCK[w["arch"]] * 1e6)
        assert o["pe_tflops"] == pytest.approx(flops / (o["pe_us"] * 1e-6) / 1e12)
        # no schedule beats every PE busy every cycle: cycles >= MACs / (128 x 128 x rate)
        rate = 0.25 if w["dtype"] == "fp32" else 1.0
        assert o["cycles"] >= w["m"] * w["k"] * w["n"] / (128 * 128 * rate)
        # the core also waits for the data the PE view takes as there
        assert o["latency_us"] >= o["pe_us"] * (1 - 1e-12)
        assert sum(c["percent"] for c in o["bound"]["causes"].values()) == pytest.approx(100)
    total = data["total"]
    r = [o["repeat"] for o in ops]
    assert total["latency_us"] == pytest.approx(sum(o["latency_us"] * n
                                                    for o, n in zip(ops, r, strict=True)))
    assert total["pe_us"] == pytest.approx(sum(o["pe_us"] * n for o, n in zip(ops, r, strict=True)))
    assert total["cycles"] == sum(o["cycles"] * n for o, n in zip(ops, r, strict=True))
    assert total["flops"] == sum(2 * w["m"] * w["k"] * w["n"] * w["repeat"] for w in want)
    # TFLOP/s and hfu of the total are the whole core's, the PE's beside them
    assert total["tflops"] == pytest.approx(total["flops"] / (total["latency_us"] * 1e-6) / 1e12)
    assert total["pe_tflops"] == pytest.approx(total["flops"] / (total["pe_us"] * 1e-6) / 1e12)
    at_peak = sum(o["flops"] / (o["peak_tflops"] * 1e12) * n
                  for o, n in zip(ops, r, strict=True))
    assert total["hfu"] == pytest.approx(at_peak / (total["latency_us"] * 1e-6))
    causes = total["bound"]["causes"]
    assert sum(c["percent"] for c in causes.values()) == pytest.approx(100)
    assert total["bound"]["by"] == max(causes, key=lambda c: causes[c]["us"])
    for cause, part in causes.items():
        assert part["us"] == pytest.approx(sum(
            o["bound"]["causes"][cause]["us"] * n for o, n in zip(ops, r, strict=True)))
    assert total["calls"] == sum(w["repeat"] for w in want)


def test_each_op_is_the_whole_core_timing_of_its_whole_program(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Against the scheduler run on every instruction (not the sliced fast path)."""
    f = tmp_path / "w.yaml"
    f.write_text("- {name: a, m: 1024, k: 64, n: 1024, repeat: 3}\n"
                 "- {name: b, m: 256, k: 512, n: 768, dtype: fp8_e4m3}\n")
    data = run_json(capsys, str(f))
    want_us = []
    for o in data["ops"]:
        arch = get_arch(o["arch"])
        spec = make_spec(o["m"], o["k"], o["n"], o["dtype"], arch)
        program = lower(spec, arch).program
        core = time_program(program, arch)
        assert o["latency_us"] == pytest.approx(core.latency_us, rel=1e-12)
        assert o["bound"]["by"] == core.bound and o["dma"]["hbm_bytes"] == core.hbm_bytes
        assert o["cycles"] == build_report(program, arch, spec).cycles
        want_us.append(core.latency_us * o["repeat"])
    assert data["total"]["latency_us"] == pytest.approx(sum(want_us), rel=1e-12)
    # the short-K op is memory-bound: its whole-core time is far above the PE's own
    a = data["ops"][0]
    assert a["bound"]["by"] == "dma" and a["latency_us"] > 2 * a["pe_us"]


def test_seed_003_example_is_2048_cubed_bf16_on_inf2(capsys: pytest.CaptureFixture[str]
                                                     ) -> None:
    (op,) = run_json(capsys, str(EXAMPLES[0].parent / "seed003_2048.yaml"))["ops"]
    assert (op["m"], op["k"], op["n"], op["dtype"], op["arch"]) == (2048, 2048, 2048,
                                                                     "bf16", "inf2")
    # seed 003: 16,384 PEs x 2 FLOPs x 2.8 GHz = 91.75 TFLOP/s
    assert op["peak_tflops"] == pytest.approx(16384 * 2 * 2.8e9 / 1e12)
    # 2MKN / (2 bytes x (MK + KN) + 4 bytes x MN) = 2 x 2048 / 8
    assert op["ideal_intensity"] == pytest.approx(512.0)
    # measured: FLOPs per HBM byte the DMAs moved, never above the ideal reuse
    assert op["intensity"] == pytest.approx(op["flops"] / op["dma"]["hbm_bytes"])
    assert op["intensity"] <= op["ideal_intensity"] * (1 + 1e-12)


def test_arch_override_and_repeat_total(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                        ) -> None:
    f = tmp_path / "w.yaml"
    f.write_text("- {name: a, m: 256, k: 256, n: 512, repeat: 3}\n"
                 "- {name: b, m: 128, k: 128, n: 128, arch: trn2}\n")
    data = run_json(capsys, str(f), "--arch", "trn1")
    assert {o["arch"] for o in data["ops"]} == {"trn1"}
    a, b = data["ops"]
    assert data["total"]["cycles"] == 3 * a["cycles"] + b["cycles"]
    # one 128x128x128 MatMul alone: N + K + M - 2 cycles (seed 003) after its 32-cycle load
    assert b["cycles"] == 32 + 128 + 128 + 128 - 2


def test_parse_defaults_and_case(tmp_path: Path) -> None:
    w = parse_workload("name: t\ndefaults: {dtype: FP8_E4M3, arch: trn2, repeat: 4}\n"
                       "ops:\n  - {name: x, m: 8, k: 8, n: 8, perf_mode: double_row}\n"
                       "  - {name: y, m: 8, k: 8, n: 8, repeat: 1}\n", "t.yaml")
    x, y = w.ops
    assert (w.name, x.spec.dtype, x.spec.perf_mode.spelling, x.repeat) == (
        "t", "fp8_e4m3", "double_row", 4)
    assert (y.repeat, y.line, x.line) == (1, 5, 4)
    assert x.flops == 2 * 8 * 8 * 8


OP = "  - name: a\n    m: 2\n    k: 3\n    n: 4\n"  # lines 2-5 under "ops:"

MALFORMED = [
    # (file text, line, words the message has)
    ("ops:\n" + OP + "    mm: 3\n", 6, "unknown key 'mm'"),
    ("ops:\n  - name: a\n    m: 2\n    n: 4\n", 2, "missing k"),
    ("ops:\n  - {name: a, k: 1}\n", 2, "missing m, n"),
    ("ops:\n  - name: a\n    m: 0\n    k: 3\n    n: 4\n", 3, "m must be a positive integer"),
    ("ops:\n  - name: a\n    m: 2\n    k: -3\n    n: 4\n", 4, "k must be a positive integer"),
    ("ops:\n  - name: a\n    m: 2\n    k: 3\n    n: big\n", 5, "n must be a positive integer"),
    ("ops:\n  - name: a\n    m: 2.5\n    k: 3\n    n: 4\n", 3, "m must be a positive integer"),
    ("ops:\n" + OP + "    dtype: bf17\n", 6, "unknown dtype 'bf17'"),
    ("ops:\n" + OP + "    arch: trn9\n", 6, "unknown arch 'trn9'"),
    ("ops:\n" + OP + "    perf_mode: quad_row\n", 6, "unknown perf_mode 'quad_row'"),
    ("ops:\n" + OP + "    perf_mode: double_row\n", 6, "not fp8"),
    ("ops:\n" + OP + "    arch: trn1\n    dtype: fp8_e4m3\n    perf_mode: double_row\n", 8,
     "not supported on trn1"),
    ("ops:\n" + OP + "    dtype: mxfp8_e4m3\n", 6, "gen4"),
    ("ops:\n" + OP + "    repeat: 0\n", 6, "repeat must be a positive integer"),
    ("ops:\n" + OP + "    repeat: 1.5\n", 6, "repeat must be a positive integer"),
    ("ops:\n" + OP + "    repeat: two\n", 6, "repeat must be a positive integer"),
    ("ops:\n" + OP + "    repeat: yes\n", 6, "repeat must be a positive integer"),
    ("ops:\n  - name: a\n    m: 2\n   k: 3\n", 4, "YAML syntax error"),
    ("ops:\n  - {name: a, m: 2, k: 3, n: 4\n  - {name: b}\n", 3, "YAML syntax error"),
    ("ops:\n\t- name: a\n", 2, "YAML syntax error"),
    ("ops:\n" + OP + OP, 6, "used twice"),
    ("ops:\n  - name: a\n    m: 2\n    m: 3\n", 4, "appears twice"),
    ("opz:\n" + OP, 1, "unknown key 'opz'"),
    ("name: x\n", 1, "no 'ops:' list"),
    ("ops: 3\n", 1, "must be a list"),
    ("ops: []\n", 1, "empty"),
    ("", 1, "empty"),
    ("ops:\n  - 3\n", 2, "must be a mapping"),
    ("ops:\n  - {m: 2, k: 3, n: 4}\n", 2, "no name"),
    ("defaults: {colour: red}\nops:\n" + OP, 1, "unknown key 'colour' in defaults"),
    ("defaults: {repeat: 0}\nops:\n" + OP, 1, "repeat must be a positive integer"),
    ("ops:\n  - name: a\n    m: [2]\n    k: 3\n    n: 4\n", 3, "expected a single value"),
    # fuzzing finds (issue 13, 3.5 and 3.11): each one line, naming the line
    ("ops: " + "[" * 20000 + "]" * 20000 + "\n", 1, "nested 20,000 deep"),
    ("ops:\n  - {name: a\x00, m: 1, k: 1, n: 1}\n", 2, "character #x0000 is not allowed"),
    ("ops:\n  - {name: a, m: !!foo 1, k: 1, n: 1}\n", 2, "no YAML tags"),
    ("name: !!python/object:os.system x\nops:\n" + OP, 1, "no YAML tags"),
    ("name:\nops:\n" + OP, 1, "name is empty"),
    ("name: ''\nops:\n" + OP, 1, "name is empty"),
    ("ops:\n" + OP + "    repeat: " + "1" + "0" * 30 + "\n", 6, "more than this model takes"),
    ("ops:\n" + OP + "    repeat: 1.0e+30\n", 6, "repeat must be a positive integer"),
    # huge sizes: refused from arithmetic, at once (lowering would build every tile first)
    ("ops:\n  - {name: a, m: 99999999999999999999, k: 128, n: 128}\n", 2, "more than"),
    ("ops:\n  - {name: a, m: 1000000000, k: 1000000000, n: 1000000000}\n", 2,
     "at least"),
]


@pytest.mark.parametrize(("text", "line", "words"), MALFORMED,
                         ids=[f"{m[1]}-{m[2]}" for m in MALFORMED])
def test_malformed_file_one_line_naming_file_and_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, line: int,
        words: str) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    assert main(["run", str(f)]) == 2
    cap = capsys.readouterr()
    assert cap.out == ""
    lines = cap.err.splitlines()
    assert len(lines) == 1, cap.err
    assert lines[0].startswith(f"systolic: error: {f}:{line}: "), lines[0]
    assert words in lines[0]


def test_missing_file_and_bad_timeline_op(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.yaml"
    assert main(["run", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(missing) in err
    f = tmp_path / "w.yaml"
    f.write_text("- {name: a, m: 2, k: 3, n: 4}\n")
    assert main(["run", str(f), "--timeline", str(tmp_path / "t.png"),
                 "--timeline-op", "zz"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'zz'" in err
    assert not (tmp_path / "t.png").exists()


def test_parse_error_is_a_workload_error() -> None:
    with pytest.raises(WorkloadError, match=r"^w\.yaml:2: "):
        parse_workload("ops:\n  - {name: a, m: 0, k: 1, n: 1}\n", "w.yaml")


def test_human_table(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(EXAMPLES[0].parent / "shortfalls.yaml")
    data = run_json(capsys, path)
    assert main(["run", path]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    # seed 003: each shortfall's own cause is the largest loss of its op
    assert "short N" in rows["n32"]
    assert "cols idle" in rows["m64"]
    assert "fp32 passes" in rows["fp32"]
    # the columns are the JSON's: time, TFLOP/s, hfu of the whole core, then the PE's own
    header = next(line for line in out.splitlines() if "M x K x N" in line)
    assert header.index("TFLOP/s") < header.index("PE cycles") < header.index("PE TFLOP/s")
    for d in [*data["ops"], data["total"]]:
        cells = rows[d.get("name", "total")].split()
        i = cells.index(f"{d['tflops']:.2f}")  # whole-core TFLOP/s, after the time
        scale = {"us": 1.0, "ms": 1e3}[cells[i - 1]]  # two decimals in the unit shown
        assert float(cells[i - 2].replace(",", "")) * scale == pytest.approx(
            d["latency_us"], abs=0.006 * scale)
        assert cells[i + 1] == f"{100 * d['hfu']:.1f}%"
        assert f"{d['cycles']:,}" in cells and f"{d['pe_tflops']:.2f}" in cells


def test_table_is_whole_in_80_columns_and_has_no_trailing_spaces(tmp_path: Path) -> None:
    """An 80-column terminal (COLUMNS=80) and a pipe: no cell cut to '524…', no trailing
    spaces; every number of the JSON appears in full."""
    import json
    import os
    import subprocess
    import sys

    f = tmp_path / "w.yaml"
    f.write_text("name: wide\nops:\n  - {name: a_rather_long_op_name, m: 524288, k: 4096, "
                 "n: 512, repeat: 1000000}\n")
    env = {**os.environ, "COLUMNS": "80"}
    run = subprocess.run([sys.executable, "-m", "systolic", "run", str(f)], env=env,
                         capture_output=True, text=True, check=True)
    assert "…" not in run.stdout
    assert all(line == line.rstrip() for line in run.stdout.splitlines())
    data = json.loads(subprocess.run([sys.executable, "-m", "systolic", "run", str(f),
                                      "--json"], env=env, capture_output=True, text=True,
                                     check=True).stdout)
    op = data["ops"][0]
    for text in ("524288x4096x512", f"{op['cycles']:,}", f"{data['total']['cycles']:,}",
                 "a_rather_long_op_name x1000000"):
        assert text in run.stdout


def test_timeline_of_an_op_timed_from_a_slice_lowers_it_whole(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from systolic import extrapolate

    monkeypatch.setattr(extrapolate, "FULL_LIMIT", 0)  # time even a small product by slice
    f = tmp_path / "w.yaml"
    # a shape whose list schedule repeats block for block (at k=256 it settles into a longer
    # period, and the slice path rightly gives up and lowers whole)
    f.write_text("- {name: a, m: 2048, k: 512, n: 512}\n")
    from systolic.workload import evaluate, load_workload

    [res] = evaluate(load_workload(f))
    assert res.program is None  # the slice path: no whole Program kept
    png = tmp_path / "t.png"
    assert main(["run", str(f), "--timeline", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # and the sliced timing is the whole Program's
    arch = get_arch("trn2")
    whole = time_program(lower(make_spec(2048, 512, 512, "bf16", arch), arch).program, arch)
    assert res.report.core.latency_us == pytest.approx(whole.latency_us, rel=1e-12)
