"""The timing report: cycles, time, TFLOP/s, utilization and the gap to peak, by cause.

``build_report(program, arch, spec)`` schedules the Program
(:mod:`systolic.timing.tensor_engine`) and attributes every cycle of the total to exactly one
cause. Definitions (docs/timing.md):

* ``cycles`` = end of the last MatMul (cost.py); ``seconds`` = cycles / arch.clock_hz.
* ``utilization = useful MACs / (cycles x R x C x P)``: R x C the array, P the contraction
  elements one PE takes per cycle in the program's best mode (the largest fold of its
  MatMuls: 2 for fp8 DoubleRow, 4 for MX, else 1). fp32 (one PE MAC per 4 cycles, seed 003)
  therefore peaks at 25%, and shows the rest as "fp32 extra passes".
* ``tflops = 2 x useful MACs / seconds``; ``peak_tflops = arch.peak_flops(format, mode)``.

The breakdown, per compute instruction i (program order; s = start, p = column period,
n = moving N, r = rows used, f = fold, c = columns used, q = 2 for an fp32 two-pass half
else 1, I = issue interval max(p*n, MM_INIT_LATENCY), D = duration):

* its issue slot is [s_i, s_{i+1}) for every compute but the last, [s_last, cycles) for the
  last; the lead-in [0, s_first) is charged to the first compute's start cause;
* stream S = p*n (last: min(p*n, D)); ideal E = n/q cycles of a bf16-rate pass;
* ``fp32_passes`` = S - E;  ``cols_idle`` = E * (C - c)/C;
  ``rows_idle`` = E * c/C * (R*P - r*f)/(R*P);  ``useful`` = E * c*r*f/(C*R*P)
  (= MACs / (R*C*P));
* ``short_moving`` = I - p*n (not the last);  the gap s_{i+1} - s_i - I goes to what bound
  s_{i+1}: ``weight_load``, ``readout`` or ``idle`` (an unexplained gap: none under the
  current cost.py rules, kept so that a new rule cannot make the sum fall short);
* ``fill_drain`` = cycles - s_last - S_last (the last MatMul's fill + drain, K + M - 2 when
  p = 1; back-to-back MatMuls hide theirs under the next issue slot, seed 003).

The parts are computed in exact integers (units of 1/(2*R*C*P) cycle), so they add up to
``cycles`` exactly; :meth:`Report.exact_breakdown` gives them as Fractions.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from ..arch import Arch, get_arch
from ..isa import MatMul, MatmultMx, Program
from ..timing.core import CAUSES as CORE_CAUSES
from ..timing.core import CoreTiming, time_program
from ..timing.tensor_engine import Cause, Schedule, schedule

if TYPE_CHECKING:
    from fractions import Fraction

    from ..compiler import MatmulSpec

__all__ = ["CAUSES", "FIELDS", "Report", "build_report", "report_fields"]

# Breakdown keys, in display order, with their labels.
CAUSES: dict[str, str] = {
    "useful": "useful",
    "rows_idle": "rows idle (K < rows)",
    "cols_idle": "columns idle (M < cols)",
    "short_moving": "short moving tiles (N < MM_INIT_LATENCY)",
    "fp32_passes": "fp32 extra passes",
    "weight_load": "weight-load stalls",
    "fill_drain": "fill and drain",
    "readout": "PSUM read-out stalls",
    "idle": "idle gaps",
}
# by the Cause's int value (numpy compares an array with an int at once; with an IntEnum it
# probes the enum for array attributes first)
_GAP_CAUSE = {int(Cause.NONE): "idle", int(Cause.INTERVAL): "idle",
              int(Cause.WEIGHT_LOAD): "weight_load", int(Cause.READOUT): "readout"}


# Up to this many compute instructions the breakdown is summed in plain Python
# (_breakdown_small), past it with numpy: the same integers either way
# (tests/test_sweep_fast_path.py); a sweep point's dozen MatMuls cost less in Python than
# numpy's fixed cost per call (~20 calls, issue 20)
BREAKDOWN_NUMPY = 256


def _breakdown_units(sch: Schedule, pack: int) -> dict[str, int]:
    """Each cause in units of 1/(2*R*C*P) cycle (exact integers); see the module docstring."""
    arch, cc = sch.arch, sch.compute
    rows, cols = arch.rows, arch.cols
    unit = 2 * rows * cols * pack  # units per cycle
    out = dict.fromkeys(CAUSES, 0)
    if len(cc.index) == 0:
        return out
    if len(cc.index) <= BREAKDOWN_NUMPY:
        return _breakdown_small(sch, pack, out)
    s = sch.starts[cc.index]
    stream = cc.period * cc.n
    stream[-1] = min(int(stream[-1]), int(cc.duration[-1]))
    ideal2 = 2 * cc.n // cc.passes  # 2E, an integer since q is 1 or 2
    lane = rows * pack
    out["useful"] = int((ideal2 * cc.cols * cc.rows * cc.fold).sum())
    out["cols_idle"] = int((ideal2 * (cols - cc.cols)).sum()) * lane
    out["rows_idle"] = int((ideal2 * cc.cols * (lane - cc.rows * cc.fold)).sum())
    out["fp32_passes"] = int((2 * stream - ideal2).sum()) * rows * cols * pack
    out["short_moving"] = int((cc.interval[:-1] - stream[:-1]).sum()) * unit
    out["fill_drain"] = (sch.cycles - int(s[-1]) - int(stream[-1])) * unit
    gaps = np.empty(len(s), dtype=np.int64)
    gaps[0] = s[0]
    gaps[1:] = s[1:] - s[:-1] - cc.interval[:-1]
    causes = sch.cause[cc.index]
    for c, key in _GAP_CAUSE.items():
        out[key] += int(gaps[causes == c].sum()) * unit
    return out


def _breakdown_small(sch: Schedule, pack: int, out: dict[str, int]) -> dict[str, int]:
    """:func:`_breakdown_units`' sums over Python ints, term for term (``out``: every cause
    at 0). Each product and sum is an integer, so the order of the additions cannot change
    it; numpy's int64 cannot overflow at this size either."""
    arch, cc = sch.arch, sch.compute
    rows, cols = arch.rows, arch.cols
    unit = 2 * rows * cols * pack
    index = cc.index.tolist()
    starts, all_causes = sch.starts.tolist(), sch.cause.tolist()
    s = [starts[i] for i in index]
    causes = [all_causes[i] for i in index]
    period, n, duration = cc.period.tolist(), cc.n.tolist(), cc.duration.tolist()
    passes, ccols, crows = cc.passes.tolist(), cc.cols.tolist(), cc.rows.tolist()
    fold, interval = cc.fold.tolist(), cc.interval.tolist()
    last = len(index) - 1
    lane = rows * pack
    useful = cols_idle = rows_idle = fp32 = short = 0
    gap_sum = dict.fromkeys(_GAP_CAUSE, 0)
    prev_s = prev_iv = 0
    for j in range(last + 1):
        stream = period[j] * n[j]
        if j == last:
            stream = min(stream, duration[j])
        else:
            short += interval[j] - stream
        ideal2 = 2 * n[j] // passes[j]
        useful += ideal2 * ccols[j] * crows[j] * fold[j]
        cols_idle += ideal2 * (cols - ccols[j])
        rows_idle += ideal2 * ccols[j] * (lane - crows[j] * fold[j])
        fp32 += 2 * stream - ideal2
        gap = s[j] if j == 0 else s[j] - prev_s - prev_iv
        c = causes[j]
        if c in gap_sum:
            gap_sum[c] += gap
        prev_s, prev_iv = s[j], interval[j]
    out["useful"] = useful
    out["cols_idle"] = cols_idle * lane
    out["rows_idle"] = rows_idle
    out["fp32_passes"] = fp32 * rows * cols * pack
    out["short_moving"] = short * unit
    out["fill_drain"] = (sch.cycles - s[last] - stream) * unit
    for c, key in _GAP_CAUSE.items():
        out[key] += gap_sum[c] * unit
    return out


@dataclass(frozen=True, eq=False)
class Report:
    """The timing model's verdict on one Program (see the module docstring)."""

    arch: Arch
    fmt: str
    perf_mode: str
    pack: int
    cycles: int
    useful_macs: int
    readout_tail: int
    counts: dict[str, int]
    units: dict[str, int] = field(repr=False)
    schedule: Schedule = field(repr=False)
    program: Program | None = field(default=None, repr=False)
    core_timing: CoreTiming | None = field(default=None, repr=False)
    # 0: timed from the whole Program; J: extrapolated from a slice of J M tiles
    # (systolic.extrapolate), whose schedule is ``schedule``.
    slice_tiles: int = 0
    # 0, or K tiles of the slices' stand-in products when the K loop was extrapolated too
    # (systolic.extrapolate._k_reduced)
    slice_k_tiles: int = 0

    @cached_property
    def core(self) -> CoreTiming:
        """The whole-NeuronCore timing (:func:`systolic.timing.core.time_program`): DMA, PSUM
        evacuation, dependencies; computed on first use."""
        if self.core_timing is not None:
            return self.core_timing
        if self.program is None:
            raise ValueError("this Report was built without its Program")
        return time_program(self.program, self.arch, fmt=self.fmt, perf_mode=self.perf_mode)

    @property
    def intensity(self) -> float:
        """Measured arithmetic intensity: useful FLOPs per HBM byte the DMAs moved."""
        hbm = self.core.hbm_bytes
        return 2 * self.useful_macs / hbm if hbm else float("inf")

    @property
    def seconds(self) -> float:
        return self.cycles / self.arch.clock_hz

    @property
    def tflops(self) -> float:
        return 2 * self.useful_macs / self.seconds / 1e12 if self.cycles else 0.0

    @property
    def peak_tflops(self) -> float:
        return self.arch.peak_flops(self.fmt, self.perf_mode) / 1e12

    @property
    def utilization(self) -> float:
        """Useful MACs / (cycles x rows x cols x pack), in [0, 1]."""
        cap = self.cycles * self.arch.rows * self.arch.cols * self.pack
        return self.useful_macs / cap if cap else 0.0

    def exact_breakdown(self) -> dict[str, Fraction]:
        """Cycles per cause as exact fractions; they sum to :attr:`cycles`."""
        # fractions (and the decimal it loads) and html are imported where used, as rich in
        # to_text: the matmul command's report uses none of them (start-up, issue 20)
        from fractions import Fraction

        unit = 2 * self.arch.rows * self.arch.cols * self.pack
        return {k: Fraction(v, unit) for k, v in self.units.items()}

    @property
    def breakdown(self) -> dict[str, float]:
        """Cycles per cause (floats; :meth:`exact_breakdown` for exact values): each the
        float nearest its exact value, as ``float(Fraction)`` gives it (Python's int / int
        rounds correctly; no Fraction is built, issue 20)."""
        unit = 2 * self.arch.rows * self.arch.cols * self.pack
        return {k: v / unit for k, v in self.units.items()}

    def percent(self) -> dict[str, float]:
        total = sum(self.units.values())
        return {k: 100.0 * v / total if total else 0.0 for k, v in self.units.items()}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary. The Tensor Engine's own view (seed 003): cycles, seconds,
        pe_tflops, utilization, breakdown. The whole core beside it: latency_us, tflops
        (achieved: useful FLOPs over the whole-core latency), peak_tflops, hfu, engines, dma,
        bound, intensity."""
        pct = self.percent()
        core = self.core.to_dict()
        return {
            "arch": self.arch.name, "format": self.fmt, "perf_mode": self.perf_mode,
            "instructions": dict(self.counts),
            "cycles": self.cycles, "seconds": self.seconds,
            "pe_tflops": self.tflops, "peak_tflops": self.peak_tflops,
            "utilization": self.utilization, "useful_macs": self.useful_macs,
            "readout_tail_cycles": self.readout_tail,
            "breakdown": {k: {"cycles": c, "percent": pct[k]}
                          for k, c in self.breakdown.items()},
            **core, "intensity": self.intensity,
        }

    def __repr__(self) -> str:
        pct = self.percent()
        losses = sorted(((v, k) for k, v in pct.items() if k != "useful" and v > 0),
                        reverse=True)[:3]
        lost = ", ".join(f"{k} {v:.2f}%" for v, k in losses) or "none"
        return (f"<Report {self.arch.name} {self.fmt}"
                f"{'' if self.perf_mode == 'none' else ' ' + self.perf_mode}: "
                f"{self.cycles:,} cycles ({_duration(self.seconds)}), "
                f"{self.tflops:.2f} of {self.peak_tflops:.2f} TFLOP/s, utilization "
                f"{100 * self.utilization:.2f}%; top losses: {lost}>")

    def _summary_rows(self) -> list[tuple[str, str]]:
        counts = ", ".join(f"{v:,} {k}" for k, v in self.counts.items())
        mode = "" if self.perf_mode == "none" else f" {self.perf_mode}"
        return [
            ("program", counts),
            ("format", f"{self.fmt}{mode} on {self.arch.name} (pack {self.pack})"),
            ("cycles", f"{self.cycles:,} ({_duration(self.seconds)} at "
                       f"{self.arch.clock_hz / 1e9:g} GHz)"),
            ("achieved", f"{self.tflops:.2f} TFLOP/s of {self.peak_tflops:.2f} peak"),
            ("utilization", f"{100 * self.utilization:.2f} %"),
            ("read-out tail", f"{self.readout_tail:,} cycles after the last MatMul"),
        ]

    def __rich__(self) -> Any:
        from rich import box
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        head = Table.grid(padding=(0, 2))
        for k, v in self._summary_rows():
            head.add_row(k, v)
        table = Table(box=box.SIMPLE_HEAD, title="where the cycles go", title_justify="left")
        table.add_column("cause")
        table.add_column("cycles", justify="right")
        table.add_column("%", justify="right")
        pct = self.percent()
        for k, c in self.breakdown.items():
            table.add_row(CAUSES[k], f"{c:,.1f}", f"{pct[k]:.2f}")
        table.add_section()
        table.add_row("total", f"{self.cycles:,}", "100.00")
        core = self.core
        # the headline is its own two lines: a table title would wrap at the table's width
        headline = Text(f"whole NeuronCore: {core.latency_us:,.2f} us, "
                        f"{core.tflops:.2f} TFLOP/s (hfu {100 * core.hfu:.2f} %), "
                        f"\nbound by {CORE_CAUSES[core.bound]}")
        whole = Table(box=box.SIMPLE_HEAD)
        whole.add_column("critical path")
        whole.add_column("us", justify="right")
        whole.add_column("%", justify="right")
        lat = core.latency or 1
        for cause, ticks in core.bound_ticks.items():
            whole.add_row(CORE_CAUSES[cause], f"{ticks * 1e6 / core.tick_hz:,.3f}",
                          f"{100 * ticks / lat:.2f}")
        busy = ", ".join(f"{k} {100 * b:.0f}%" for k, b in core.busy().items()
                         if not k.startswith("dma"))
        dma_busy = max((b for k, b in core.busy().items() if k.startswith("dma")),
                       default=0.0)
        gbps = core.hbm_bytes / core.seconds / 1e9 if core.latency else 0.0
        tail = Table.grid(padding=(0, 2))
        tail.add_row("engines busy", f"{busy}, busiest DMA queue {100 * dma_busy:.0f}%")
        tail.add_row("HBM", f"{core.hbm_bytes:,} bytes at {gbps:,.1f} GB/s of "
                            f"{self.arch.hbm_bytes_per_s / 1e9:,.1f}")
        return Group(head, table, headline, whole, tail)

    def to_text(self, width: int = 80) -> str:
        """The report as a plain text table (rich, without colour)."""
        from rich.console import Console

        buf = io.StringIO()
        Console(file=buf, width=width, color_system=None, force_terminal=False,
                legacy_windows=False).print(self)
        return "\n".join(line.rstrip() for line in buf.getvalue().splitlines()).rstrip()

    def to_html(self) -> str:
        import html  # see exact_breakdown (issue 20)

        pct = self.percent()
        rows = "".join(f"<tr><th style='text-align:left'>{html.escape(k)}</th>"
                       f"<td colspan=2>{html.escape(v)}</td></tr>"
                       for k, v in self._summary_rows())
        core = self.core
        rows += (f"<tr><th style='text-align:left'>whole NeuronCore</th><td colspan=2>"
                 f"{core.latency_us:,.2f} us, {core.tflops:.2f} TFLOP/s (hfu "
                 f"{100 * core.hfu:.2f} %), bound by {html.escape(CORE_CAUSES[core.bound])}"
                 f"</td></tr>")
        rows += "<tr><th style='text-align:left'>cause</th><th>cycles</th><th>%</th></tr>"
        rows += "".join(f"<tr><td>{html.escape(CAUSES[k])}</td><td style='text-align:right'>"
                        f"{c:,.1f}</td><td style='text-align:right'>{pct[k]:.2f}</td></tr>"
                        for k, c in self.breakdown.items())
        return f"<table>{rows}</table>"


def _duration(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:,.2f} {unit}"
    return f"{seconds * 1e9:,.2f} ns"


def _program_format(program: Program, pack: int) -> tuple[str, str]:
    for ins in program:
        if isinstance(ins, MatmultMx):
            return ins.fmt, "none"
        if isinstance(ins, MatMul):
            return ins.moving.dtype, "double_row" if pack == 2 else "none"
    return "bf16", "none"


def build_report(program: Program, arch: Arch | str,
                 spec: MatmulSpec | None = None) -> Report:
    """Schedule ``program`` on ``arch`` and explain its cycles. ``spec``, if given, names the
    format and perf mode for the peak (otherwise they are read from the Program)."""
    arch = get_arch(arch)
    sch = schedule(program, arch)
    cc = sch.compute
    pack = int(cc.fold.max()) if len(cc.index) else 1
    if spec is not None:
        fmt, mode = spec.dtype, spec.perf_mode.spelling
    else:
        fmt, mode = _program_format(program, pack)
    units = _breakdown_units(sch, pack)
    useful2 = units["useful"]  # sum(2E x c x r x f): 2 x the useful MACs
    return Report(arch=arch, fmt=fmt, perf_mode=mode, pack=pack, cycles=sch.cycles,
                  useful_macs=useful2 // 2, readout_tail=sch.readout_tail,
                  counts=program.counts(), units=units, schedule=sch, program=program)


# The keys ``systolic matmul --json`` merges: the Tensor Engine's view (seed 003), then the
# whole core's (timing/core.py).
FIELDS = ("cycles", "seconds", "pe_tflops", "utilization", "breakdown", "latency_us", "tflops",
          "peak_tflops", "hfu", "engines", "dma", "bound", "intensity")


def report_fields(report: Report) -> dict[str, Any]:
    """The keys ``systolic matmul --json`` merges (:data:`FIELDS`)."""
    d = report.to_dict()
    return {k: d[k] for k in FIELDS}
