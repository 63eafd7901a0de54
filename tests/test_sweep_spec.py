"""Sweep files: what they expand to, and the one-line errors with the file and line."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import pytest

from systolic.arch import get_arch
from systolic.errors import SweepError
from systolic.sweep import load_sweep, parse_sweep
from systolic.sweep.overrides import apply_overrides, check_value, overridable_fields

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "sweeps"


def test_grid_expands_to_the_cartesian_product_last_axis_fastest() -> None:
    spec = parse_sweep("run: {matmul: {m: 256}}\naxes:\n  k: [128, 256, 384]\n"
                       "  n: {from: 64, to: 256, times: 2}\n  arch: [trn1, trn2]\n")
    points = [p for _, p in spec.points()]
    expected = [{"m": 256, "k": k, "n": n, "arch": a}
                for k, n, a in itertools.product([128, 256, 384], [64, 128, 256],
                                                 ["trn1", "trn2"])]
    assert points == expected
    assert spec.grid_size == spec.size == 18
    assert [s for s, _ in spec.points()] == list(range(18))


def test_zipped_axis_and_arithmetic_range() -> None:
    spec = parse_sweep("run: {matmul: null}\naxes:\n  m,k,n: [[128, 256, 512], [64, 64, 64]]\n"
                       "  clock_hz: {from: 1.0e+9, to: 2.0e+9, step: 5.0e+8}\n")
    points = [p for _, p in spec.points()]
    assert [(p["m"], p["k"], p["n"]) for p in points] == [(128, 256, 512)] * 3 + [(64,) * 3] * 3
    assert [p["clock_hz"] for p in points[:3]] == [1e9, 1.5e9, 2e9]


def test_random_sample_is_seeded_distinct_and_inside_the_grid() -> None:
    text = ("run: {matmul: {m: 128}}\naxes:\n  k: {from: 32, to: 4096, step: 32}\n"
            "  n: {from: 32, to: 4096, step: 32}\nsample: {random: 50, seed: 7}\n")
    a = [p for _, p in parse_sweep(text).points()]
    b = [p for _, p in parse_sweep(text).points()]
    c = [p for _, p in parse_sweep(text.replace("seed: 7", "seed: 8")).points()]
    assert a == b and a != c
    assert len(a) == 50 and len({(p["k"], p["n"]) for p in a}) == 50
    assert all(p["k"] % 32 == 0 and 32 <= p["n"] <= 4096 for p in a)


def test_yaml_floats_without_a_dot_are_accepted_for_float_fields() -> None:
    spec = parse_sweep("run: {matmul: {m: 1, k: 1, n: 1}}\naxes:\n  clock_hz: [2.4e9, 1e9]\n")
    assert [p["clock_hz"] for _, p in spec.points()] == [2.4e9, 1e9]


def test_every_arch_field_of_a_number_type_is_an_axis() -> None:
    fields = overridable_fields()
    for name in ("rows", "cols", "clock_hz", "sbuf_bytes", "psum_banks", "psum_bank_bytes",
                 "hbm_bytes_per_s", "mm_init_latency"):
        assert name in fields
    for name in ("name", "formats", "psum_bytes", "generation"):
        assert name not in fields
    arch = apply_overrides(get_arch("trn2"), {"rows": 64, "psum_banks": 4})
    assert (arch.rows, arch.psum_banks, arch.psum_bytes) == (64, 4, 4 * 2048)
    assert check_value("readout_fixed_cycles", 0) == 0  # an overhead may be absent


BAD = [
    ("run: {matmul: {m: 1, k: 1, n: 1}}\naxes:\n  rows: [128, 0]\n", 3,
     "rows = 0 makes no physical sense"),
    ("run: {matmul: {m: 1, k: 1, n: 1}}\naxes:\n  clock_hz: [2.4e9,\n    -1.0e+9]\n", 4,
     "clock_hz = -1000000000.0 makes no physical sense"),
    ("run: {matmul: {m: 1, k: 1, n: 1}}\nfixed:\n  warp_drive: 3\n", 3,
     "unknown input 'warp_drive'"),
    ("run: {matmul: {m: 1, k: 1, n: 1}}\naxes:\n  rows: [96, 100]\n", 3,
     "rows = 100 does not split into 32-lane quadrants"),
    ("run: {matmul: {m: 1, k: 1, n: 1}}\naxes:\n  cols: [64, 64]\n", 3, "lists 64 twice"),
    ("run: {matmul: {m: 1, k: 1, n: 1}}\naxes:\n  rows: [yes]\n", 3, "must be a number"),
    ("run: {matmul: {m: 1, k: 1}}\n", 1, "missing n"),
    ("run: {matmul: {m: 1, k: 1, n: 1}}\nobjective: speed\n", 2, "unknown objective 'speed'"),
    ("run: {matmul: {m: 1, k: 1, n: 1}}\nconstraints: [\"sbuf <= 3\"]\n", 2,
     "constraint on 'sbuf'"),
    ("run: {matmul: {m: 1, k: 1, n: 1}}\naxes: {rows: [64, 128]}\nsample: {random: 3}\n", 3,
     "the grid has only 2"),
    ("run: {matmul: {m: 1, k: 1, n: 1}}\naxes:\n  arch: [trn9]\n", 3, "unknown arch 'trn9'"),
    ("run: {matmul: {m: 1, k: 1, n: 1}}\naxes:\n  dim.M: [1]\n", 3, "input of a kernel sweep"),
    ("run: {workload: nowhere.yaml}\n", 1, "the workload does not load"),
    ("run: {kernel: k.py}\n", 1, "must be FILE.py:FUNCTION"),
    ("run: {kernel: 'k.py:f', args: {a: 'bf16[M, K]'}}\naxes: {dim.M: [128]}\n", 1,
     "use dim.K"),
    ("run: {matmul: {m: 1, k: 1, n: 1}}\nfixed: {key: 3}\n", 2, "column of the results store"),
    ("run: {matmul: {m: 1, k: 1, n: 1}}\nspeed: 3\n", 2, "unknown key 'speed'"),
    # each target's own figures: the SBUF high-water is a kernel's, the PE view a matmul's
    ("run: {matmul: {m: 1, k: 1, n: 1}}\nconstraints: [\"sbuf_bytes <= 3\"]\n", 2,
     "constraint on 'sbuf_bytes'"),
    ("run: {kernel: 'k.py:f', args: {a: 'bf16[4]'}}\nobjective: pe_us\n", 2,
     "unknown objective 'pe_us'"),
    ("run: {matmul: {m: 1, k: 1, n: 1}\naxes: [\n", 2, "YAML syntax error"),
]


@pytest.mark.parametrize(("text", "line", "fragment"), BAD)
def test_bad_sweep_files_name_the_file_and_line(text: str, line: int, fragment: str) -> None:
    with pytest.raises(SweepError) as err:
        parse_sweep(text, "bad.yaml")
    msg = str(err.value)
    assert msg.startswith(f"bad.yaml:{line}: "), msg
    assert fragment in msg, msg
    assert "\n" not in msg


def test_cli_prints_the_error_on_one_line_and_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("run: {matmul: {m: 1, k: 1, n: 1}}\naxes:\n  rows: [0]\n")
    proc = subprocess.run([sys.executable, "-m", "systolic", "sweep", str(bad), "--out",
                           str(tmp_path / "r.sqlite")], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"systolic: error: {bad}:3: rows = 0 makes no physical sense: it must be above 0"]
    assert not (tmp_path / "r.sqlite").exists()


def test_examples_parse_and_the_first_is_the_kernel_sweep_of_at_least_200_points() -> None:
    first = sorted(EXAMPLES.glob("*.yaml"))[0]
    assert first.name == "blocked_matmul_tune.yaml"  # tests kill and resume the first one
    tune = load_sweep(first)
    assert tune.target.kind == "kernel" and tune.size >= 200
    assert {p["arch"] for _, p in tune.points()} == {"trn1", "trn2"}
    assert len({(p["dim.M"], p["dim.K"], p["dim.N"]) for _, p in tune.points()}) == 3
    arch = load_sweep(EXAMPLES / "swiglu_array_hbm.yaml")
    assert arch.target.kind == "workload"
    assert {n for a in arch.axes for n in a.names} == {"rows", "cols", "hbm_bytes_per_s"}


def test_each_target_takes_its_own_figures_as_objective_and_constraints() -> None:
    kernel = parse_sweep("run: {kernel: 'k.py:f', args: {a: 'bf16[4]'}}\nobjective: hfu\n"
                         "constraints: [\"sbuf_bytes <= 131072\", \"bound == pe\"]\n")
    assert (kernel.objective.figure, kernel.objective.maximize) == ("hfu", True)
    assert [c.field for c in kernel.constraints] == ["sbuf_bytes", "bound"]
    mm = parse_sweep("run: {matmul: {m: 1, k: 1, n: 1}}\nobjective: pe_tflops\n"
                     "constraints: [\"pct_dma <= 50\", \"utilization >= 0.5\"]\n")
    assert (mm.objective.figure, mm.objective.maximize) == ("pe_tflops", True)
