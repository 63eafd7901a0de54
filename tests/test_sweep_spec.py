"""Sweep files: what they expand to, and the one-line errors with the file and line."""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from systolic.arch import get_arch
from systolic.errors import SweepError
from systolic.sweep import load_sweep, parse_sweep
from systolic.sweep.overrides import apply_overrides, check_value, overridable_fields

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "sweeps"
SRC = Path(__file__).resolve().parents[1] / "src"


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


# -- sizes checked before anything is listed (issue 22 H2) --------------------------------------

def _parse_in_a_subprocess(text: str) -> list[Any]:
    """The sweep parsed and its points listed in a fresh process with a 60 s limit: a range
    listed whole (a billion values) runs out of time or memory there, not in this one."""
    code = ("import json, sys\nimport systolic.sweep as sw\n"
            "spec = sw.parse_sweep(sys.stdin.read(), 'big.yaml')\n"
            "print(json.dumps([spec.size, [p for _, p in spec.points()]]))\n")
    proc = subprocess.run([sys.executable, "-c", code], input=text, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(SRC)})
    assert proc.returncode == 0, proc.stderr
    return list(json.loads(proc.stdout))


def test_a_billion_value_range_is_sampled_without_being_listed() -> None:
    text = ("run: {matmul: {m: 128, k: 128}}\naxes:\n  n: {from: 1, to: 1000000000, step: 1}\n"
            "sample: {random: 3, seed: 5}\n")
    size, points = _parse_in_a_subprocess(text)
    # numpy's seeded choice of 3 distinct indices of 10^9, sorted: value = 1 + index
    want = sorted(np.random.default_rng(5).choice(10**9, 3, replace=False).tolist())
    assert size == 3 and [p["n"] for p in points] == [1 + i for i in want]


def test_a_geometric_range_of_a_ratio_near_one_is_sized_in_closed_form() -> None:
    text = ("run: {matmul: {m: 128, k: 128, n: 128}}\naxes:\n"
            "  clock_hz: {from: 1.0e+9, to: 2.0e+9, times: 1.0000001}\nsample: {random: 2}\n")
    spec = parse_sweep(text)
    [axis] = spec.axes
    # 1e9 * 1.0000001^i <= 2e9: i <= ln 2 / ln 1.0000001
    assert axis.size == math.floor(math.log(2) / math.log(1.0000001)) + 1
    values = [p["clock_hz"] for _, p in spec.points()]
    assert len(values) == 2 and all(1e9 <= v <= 2e9 for v in values)
    assert axis.values[axis.size - 1][0] <= 2e9 < 1e9 * 1.0000001 ** axis.size


def test_a_big_range_checks_its_values_as_points_draw_them() -> None:
    # 199,999 values: only both ends are checked when the file is read (multiples of 32);
    # an odd multiple of 16 is refused once a point draws it, with the file and line
    text = ("run: {matmul: {m: 1, k: 1, n: 1}}\naxes:\n  rows: {from: 32, to: 3200000, "
            "step: 16}\nsample: {random: 40, seed: 1}\n")
    spec = parse_sweep(text, "big.yaml")
    with pytest.raises(SweepError, match=r"^big\.yaml:3: rows = \d+ does not split"):
        list(spec.points())


BAD_RANGES = [
    ("{from: 1, to: 1000000000000000, step: 1}", "more than 1,000,000,000,000 values"),
    ("{from: 1.0e+20, to: 1.0e+21, step: 1.0}", "below the spacing of floats"),
    ("{from: 1.0, to: .inf, times: 2.0}", "must be a finite number"),
    ("{from: .nan, to: 3.0, step: 1.0}", "must be a finite number"),
    ("{from: 1.0, to: 3.0, times: 1.0000000000000002}", "too close to 1"),
    ("{from: 5, to: 1, step: 1}", "is empty"),
]


@pytest.mark.parametrize(("rng", "fragment"), BAD_RANGES)
def test_bad_ranges_are_refused_before_any_value_is_made(rng: str, fragment: str) -> None:
    with pytest.raises(SweepError, match=f"^bad.yaml:3: .*{re.escape(fragment)}"):
        parse_sweep(f"run: {{matmul: {{m: 1, k: 1, n: 1}}}}\naxes:\n  clock_hz: {rng}\n",
                    "bad.yaml")


def test_a_grid_beyond_int64_is_refused() -> None:
    axis = "{from: 1, to: 100000000000, step: 1}"
    with pytest.raises(SweepError, match=r"^bad\.yaml:3: the axes make a grid of 1e\+22"):
        parse_sweep(f"run: {{matmul: {{n: 1}}}}\naxes:\n  m: {axis}\n  k: {axis}\n", "bad.yaml")


# -- a fuzzer: every bad sweep file is one SweepError line, never a crash or a hang -------------

_VALID = [
    "run: {matmul: {m: 128, k: 128, n: 128}}\naxes:\n  arch: [trn1, trn2]\n",
    "run: {matmul: {n: 256}}\naxes:\n  m: {from: 64, to: 512, step: 64}\n  k: {from: 32, "
    "to: 4096, times: 2}\nsample: {random: 5, seed: 3}\nobjective: {maximize: tflops}\n"
    "constraints: [\"utilization >= 0.5\", \"bound != pe\"]\n",
    "run: {kernel: 'k.py:f', args: {a: 'dtype[M, 128]'}}\nfixed: {dtype: bf16}\naxes:\n"
    "  dim.M: [64, 128]\n  param.T: [1, 2]\n  hbm_bytes_per_s: [1.0e+11, 2.0e+11]\n",
    "run: {matmul: null}\naxes:\n  m,k,n: [[128, 128, 128], [256, 64, 512]]\n"
    "  rows,cols: [[64, 64], [128, 128]]\n",
    "name: block\nrun:\n  matmul:\n    m: 128\n    k: 128\nfixed:\n  arch: trn2\n  dtype: bf16\n"
    "axes:\n  n:\n    from: 128\n    to: 1024\n    step: 128\n  clock_hz:\n    from: 1.0e+9\n"
    "    to: 4.0e+9\n    times: 2.0\nsample:\n  random: 4\n  seed: 0\n",
]
# pieces a user (or a typo) puts where a value goes
_ATOMS = ["0", "-1", "1", "3", "1.5", "1e400", "-.inf", ".nan", "1000000000000", "true",
          "null", "~", "''", "'x'", "[]", "{}", "[1, 1]", "{from: 1}", "{from: 1, to: 9, "
          "step: 0}", "{from: 1, to: 1.0e+30, step: 1.0e-30}", "{from: 1, to: 9, times: 1}",
          "2001-12-14", "!!binary aGVsbG8=", "&a [1]", "*a", "trn9", "fp8_e4m3", "grid",
          "{random: 0}", "{random: 99999999999999999999}", "\"m <= \"", "[\"x ~ 3\"]",
          "99999999999999999999", "{from: 99999999999999999999, to: 1, step: -1}"]


class Draw:
    """Where the fuzzer's choices come from: hypothesis (shrinks) or a seeded random.Random
    (long runs)."""

    def __init__(self, data: Any = None, rng: Any = None) -> None:
        self.data, self.rng = data, rng

    def int(self, lo: int, hi: int) -> int:
        if self.data is not None:
            from hypothesis import strategies as st

            return int(self.data.draw(st.integers(lo, hi)))
        return int(self.rng.randint(lo, hi))

    def pick(self, items: list[str]) -> str:
        return items[self.int(0, len(items) - 1)]


def _replace_value(line: str, which: int, atom: str) -> str:
    """``line`` with the value after its ``which``-th ``": "`` (up to the next ``,``, ``}``
    or ``]`` outside brackets, or the line's end) replaced by ``atom``."""
    start = -2
    for _ in range(which + 1):
        start = line.index(": ", start + 2)
    depth, end = 0, len(line)
    for j in range(start + 2, len(line)):
        c = line[j]
        if c in "[{":
            depth += 1
        elif c in "]}" and depth:
            depth -= 1
        elif c in ",]}" and not depth:
            end = j
            break
    return f"{line[:start + 2]}{atom}{line[end:]}"


def _mutate(base: str, draw: Draw) -> str:
    """1 to 3 edits of a valid file: a value replaced by an atom, a key renamed, a line
    dropped, doubled, cut short or re-indented."""
    lines = base.splitlines()
    for _ in range(draw.int(1, 3)):
        i = draw.int(0, len(lines) - 1)
        line = lines[i]
        how = draw.pick(["value", "key", "drop", "dup", "cut", "indent"])
        if how == "value" and ": " in line:
            lines[i] = _replace_value(line, draw.int(0, line.count(": ") - 1), draw.pick(_ATOMS))
        elif how == "key" and ":" in line:
            lines[i] = draw.pick(["  speed", "  dim.", "  key", "  m,m", "  param.", "sample",
                                  "  rows,cols,x", "  sbuf_bytes", "  dtype"]) + \
                ":" + line.split(":", 1)[1]
        elif how == "drop":
            del lines[i]
            lines = lines or [""]
        elif how == "dup":
            lines.insert(i, line)
        elif how == "cut":
            lines[i] = line[:draw.int(0, len(line))]
        else:
            lines[i] = " " * draw.int(0, 4) + line.lstrip()
    return "\n".join(lines) + "\n"


def _run_case(text: str) -> str:
    """:func:`fuzz_case` with a 10 s limit (SIGALRM): ``hang`` past it."""
    import signal

    class Hang(BaseException):  # not an Exception: fuzz_case cannot take it for a crash
        pass

    def alarm(signum: int, frame: Any) -> None:
        raise Hang

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(10)
    try:
        return fuzz_case(text)
    except Hang:
        return "hang"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def fuzz_case(text: str) -> str:
    """One sweep file through the parser and the first points: ``ok`` (it parsed and its
    first points are dicts of the inputs it names), ``error`` (one SweepError line naming
    the file), else ``crash:...`` or ``wrong:...``. A hang is caught by the caller."""
    from systolic.sweep.runner import sweep_id
    from systolic.sweep.store import point_key

    try:
        spec = parse_sweep(text, "fuzz.yaml")
        names = set(spec.input_names)
        sweep_id(spec)  # what the store keys on must hash too
        for _, p in itertools.islice(spec.points(), 50):
            if set(p) != names:
                return f"wrong: a point has {sorted(p)}, the sweep names {sorted(names)}"
            point_key("0", spec.target.fingerprint(), p)
        if spec.size < 1:
            return f"wrong: size {spec.size}"
        return "ok"
    except SweepError as exc:
        msg = str(exc)
        if not msg.startswith("fuzz.yaml:") or "\n" in msg:
            return f"wrong: error not one FILE:LINE line: {msg!r}"
        return "error"
    except Exception as exc:
        return f"crash: {type(exc).__name__}: {exc}"


def test_fuzzed_sweep_files_give_one_line_errors_never_a_crash_or_a_hang() -> None:
    from hypothesis import given
    from hypothesis import strategies as st

    @given(st.sampled_from(_VALID), st.data())
    def case(base: str, data: Any) -> None:
        text = _mutate(base, Draw(data=data))
        got = _run_case(text)
        assert got in ("ok", "error"), (text, got)

    case()


def fuzz_counts(n: int, seed: int = 0) -> dict[str, int]:
    """A longer run than CI's, for docs/TESTING.md (``python tests/test_sweep_spec.py N``):
    tried / clean error / ok / crash / hang / silently wrong over ``n`` mutated files."""
    import random

    rng = random.Random(seed)
    counts = {"tried": 0, "clean error": 0, "ok": 0, "crash": 0, "hang": 0, "wrong": 0}
    for _ in range(n):
        text = _mutate(rng.choice(_VALID), Draw(rng=rng))
        got = _run_case(text)
        key = {"ok": "ok", "error": "clean error", "hang": "hang"}.get(got, got.split(":")[0])
        counts["tried"] += 1
        counts[key] += 1
        if key in ("crash", "wrong", "hang"):
            print(key, repr(text), got)
    return counts


if __name__ == "__main__":
    print(fuzz_counts(int(sys.argv[1]) if len(sys.argv) > 1 else 2000))
