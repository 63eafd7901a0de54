"""``systolic step``: its JSON against seed 003's closed forms, its text, its errors."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from systolic.cli import main


def arrivals(k: int, m: int, n: int, period: int = 1) -> list[int]:
    """Busy PEs per cycle from seed 003's rule: X[k, n] is at PE(k, m) at p*n + k + m."""
    kk, mm, nn = np.meshgrid(np.arange(k), np.arange(m), np.arange(n), indexing="ij")
    return np.bincount((period * nn + kk + mm).ravel()).tolist()


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert main(["step", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(("k", "m", "n", "rows", "cols", "dtype", "period"), [
    (3, 3, 3, 3, 3, "bf16", 1),
    (5, 2, 9, 8, 4, "bf16", 1),
    (4, 4, 6, 4, 4, "fp32", 4),  # seed 003: fp32 inputs cost roughly 4x
    (7, 3, 5, 7, 3, "int8", 1),
    (2, 6, 11, 2, 6, "fp8_e4m3", 1),
])
def test_json_matches_the_closed_forms(capsys: pytest.CaptureFixture[str], k: int, m: int,
                                       n: int, rows: int, cols: int, dtype: str,
                                       period: int) -> None:
    out = run_json(capsys, str(m), str(k), str(n), "--rows", str(rows), "--cols", str(cols),
                   "--dtype", dtype, "--seed", "5")
    cycles = period * (n - 1) + k + m - 1
    assert out["cycles"] == cycles
    assert out["macs"] == k * m * n
    assert out["utilization"] == pytest.approx(k * m * n / (rows * cols * cycles))
    assert out["busy_per_cycle"] == arrivals(k, m, n, period)


def test_seed_003_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "3", "3", "3")
    assert (out["cycles"], out["macs"], out["busy_per_cycle"]) == (7, 27, [1, 3, 6, 7, 6, 3, 1])
    assert round(100 * float(out["utilization"])) == 43  # type: ignore[arg-type]


def test_full_size_instruction_summary(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "128", "128", "512")
    assert out["cycles"] == 512 + 128 + 128 - 2
    assert out["busy_per_cycle"] == arrivals(128, 128, 512)
    assert main(["step", "128", "128", "64"]) == 0
    text = capsys.readouterr().out
    assert "cycle 0" not in text  # a summary only, above 16 x 16
    assert f"{64 + 128 + 128 - 2} cycles" in text


def test_text_shows_every_cycle(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["step", "3", "3", "3"]) == 0
    text = capsys.readouterr().out
    assert re.findall(r"cycle (\d+)  busy (\d+)/9", text) == [
        (str(t), str(b)) for t, b in enumerate([1, 3, 6, 7, 6, 3, 1])]
    assert "7 cycles" in text and "27 MACs" in text and "42.9%" in text
    # cycle 3: row k holds X[k, n] with n = 3 - k - m at column m (n + k + m = 3)
    block = text.split("cycle 3 ")[1].split("cycle 4 ")[0]
    rows = [line.split()[1:4] for line in block.splitlines() if re.match(r"\s+k\d ", line)]
    assert rows == [[".", "n2", "n1"], ["n2", "n1", "n0"], ["n1", "n0", "."]]


def test_html_page_is_self_contained(capsys: pytest.CaptureFixture[str],
                                     tmp_path: Path) -> None:
    page = tmp_path / "step.html"
    assert main(["step", "3", "4", "5", "--cols", "4", "--html", str(page), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    html = page.read_text()
    for ident in ("cycle", "busy", "total-cycles", "step", "back", "play", "reset"):
        assert f'id="{ident}"' in html
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=", html)  # nothing to fetch
    blob = html.split('id="data">')[1].split("</script>")[0]
    data = json.loads(blob)
    assert data["busy"] == out["busy_per_cycle"] == arrivals(4, 3, 5)
    assert len(data["frames"]) == out["cycles"] == 5 + 4 + 3 - 2
    assert [len(f) for f in data["frames"]] == data["busy"]
    assert not list(tmp_path.glob(".step-*"))  # the temporary file was renamed


@pytest.mark.parametrize(("argv", "message"), [
    (["0", "3", "3"], "must be at least 1"),
    (["3", "x", "3"], "not an integer"),
    (["3", "5", "3", "--rows", "4"], "array is 4 x 3"),
    (["3", "3", "3", "--seed", "-1"], "not a seed"),
    (["3", "3", "3", "--rows", "100000", "--cols", "100000"], "PE-cycles"),
    (["3", "3", "3", "--html", ""], "path is empty"),
    (["3", "3", "600"], "PSUM bank"),
    (["3", "3", "3", "--dtype", "fp64"], "invalid choice"),
    (["64", "64", "128", "--html", "never-written.html"], "busy PE-cycles"),
])
def test_bad_arguments_one_line_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str],
                                       message: str) -> None:
    with pytest.raises(SystemExit) as exc:
        code = main(["step", *argv])
        raise SystemExit(code)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err


def test_help_is_a_short_manual() -> None:
    proc = subprocess.run([sys.executable, "-m", "systolic", "step", "--help"],
                          capture_output=True, text=True, check=True)
    assert "examples:" in proc.stdout and "systolic step 3 3 3" in proc.stdout


def test_sizes_in_numpy_order(capsys: pytest.CaptureFixture[str]) -> None:
    """``step M K N`` as ``matmul M K N``: M PE columns, K PE rows, out[M, N]."""
    out = run_json(capsys, "2", "5", "7")
    assert (out["m"], out["k"], out["n"], out["rows"], out["cols"]) == (2, 5, 7, 5, 2)
    assert out["busy_per_cycle"] == arrivals(5, 2, 7)
    assert "M K N" in subprocess.run([sys.executable, "-m", "systolic", "step", "--help"],
                                     capture_output=True, text=True, check=True).stdout


@pytest.mark.parametrize(("dtype", "period"), [("bf16", 1), ("fp32", 4), ("FP32", 4)])
def test_cycle_line_agrees_with_itself(capsys: pytest.CaptureFixture[str], dtype: str,
                                       period: int) -> None:
    """The printed formula is the one that gives the printed count (fp32: 4 per column)."""
    assert main(["step", "3", "3", "3", "--dtype", dtype]) == 0
    text = capsys.readouterr().out
    line = next(ln for ln in text.splitlines() if " cycles (" in ln)
    total, shown = re.match(r"(\d+) cycles \(.*= (\d+)", line).groups()  # type: ignore
    assert int(total) == int(shown) == period * (3 - 1) + 3 + 3 - 1


def test_bigger_array_names_the_rtl_count(capsys: pytest.CaptureFixture[str]) -> None:
    """On a 5 x 5 array the step model counts 7 cycles, the RTL array 9 edges: both said,
    and the RTL figure is the behavioural RTL model's own latency."""
    from systolic.rtl.array import WeightStationaryArray

    assert main(["step", "3", "3", "3", "--rows", "5", "--cols", "5"]) == 0
    text = capsys.readouterr().out
    rtl = WeightStationaryArray(5, 5)
    rtl.matmul(np.ones((3, 3), np.int64), np.ones((3, 3), np.int64))
    assert rtl.cycles == 9
    assert "7 cycles (N + K + M - 2 = 7)" in text
    assert f"rows + M + N - 2 = {rtl.cycles} edges" in text
    out = run_json(capsys, "3", "3", "3", "--rows", "5", "--cols", "5")
    assert (out["cycles"], out["rtl_array_cycles"]) == (7, rtl.cycles)


def test_psum_caption_sits_over_the_psum_grid(tmp_path: Path) -> None:
    """The stage is a 3-column CSS grid: the PSUM caption must be in the PSUM grid's column
    (the third), directly above it, not under the moving-tile queue (issue 13, 3.10)."""
    from html.parser import HTMLParser

    page = tmp_path / "s.html"
    assert main(["step", "3", "3", "3", "--html", str(page)]) == 0

    class Stage(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.depth, self.inside, self.children = 0, -1, []

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            a = dict(attrs)
            if self.inside < 0 and a.get("class") == "stage":
                self.inside = self.depth
            elif self.inside >= 0 and self.depth == self.inside + 1:
                self.children.append(a.get("id") or a.get("class") or "")
            self.depth += 1

        def handle_endtag(self, tag: str) -> None:
            self.depth -= 1
            if self.depth == self.inside:
                self.inside = -2  # done

    st = Stage()
    st.feed(page.read_text())
    kids = st.children
    label, psum = kids.index("psum-label"), kids.index("psum")
    assert label % 3 == psum % 3 == 2  # both in the third column
    assert psum == label + 3  # the next grid row, right below the caption
    assert kids.index("array") % 3 == 2 and kids.index("queue") % 3 == 0
