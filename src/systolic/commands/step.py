"""``systolic step M K N``: one MatMul on the register-level simulator, cycle by cycle."""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np
from rich.markup import escape

from ..arch import get_arch
from ..errors import ShapeError, SystolicError
from ..geometry import wavefront_cycles
from ..sim.systolic import SystolicRun, step_matmul
from .common import add_arch, add_json, dtype_name, html_path, positive_int, seed, wrote

HELP = "step one matmul through the systolic array, cycle by cycle"
DESCRIPTION = """\
Run out[M, N] = stationary[K, M].T @ moving[K, N] (seeded random small integers) on a
rows x cols array, one clock at a time, with the weights already latched (seed 003's
picture). Sizes in numpy's order, M K N, as in every command (a[M, K] @ b[K, N] with
a = stationary.T): PE(k, m) holds S[k, m]; X[k, n] reaches it at cycle n + k + m; each PE
adds weight x input to the sum from the PE above; column m drains into PSUM partition m.
One instruction takes p(N - 1) + K + M - 1 cycles, p the cycles between moving columns:
N + K + M - 2 at one column per cycle, p = 4 for fp32 (seed 003: roughly 4x). The RTL
array of docs/rtl.md takes rows + M + N - 2 edges instead: its sums leave at the bottom
edge, through every row.

Prints every cycle (the n of the value each PE works on, the partial sums, the inputs
entering the rows, the sums reaching PSUM) for arrays up to 16 x 16, a summary for bigger
ones. --json prints cycles, macs, utilization and busy_per_cycle; --html writes a
self-contained step-through page (open it in any browser, no network needed).

examples:
  systolic step 3 3 3                      # seed 003: 27 MACs in 7 cycles, 43%
  systolic step 4 4 8 --rows 6 --cols 6 --seed 1
  systolic step 2 3 4 --dtype fp32         # M=2, K=3, N=4: 4 cycles per moving column
  systolic step 128 128 512 --json         # summary of a full-size instruction
  systolic step 4 4 6 --html step.html
"""
GRID_LIMIT = 16  # print the array cycle by cycle up to this many rows and columns
# The register-level model steps about 40 million PE-cycles a second (128 x 128 x 512:
# 12.5 million in 0.3 s); past this a run would take about a minute.
STEP_PE_CYCLES = 1 << 31


def add_parser(sub: Any) -> None:
    p = sub.add_parser("step", help=HELP, description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("m", type=positive_int, help="M, rows of the result: PE columns used")
    p.add_argument("k", type=positive_int, help="K, the contraction: PE rows used")
    p.add_argument("n", type=positive_int, help="N, columns of the result: moving columns")
    p.add_argument("--rows", type=positive_int, help="array rows (default K)")
    p.add_argument("--cols", type=positive_int, help="array columns (default M)")
    formats = [f for f in get_arch("trn2").formats if f not in ("fp32r", "tf32")]
    p.add_argument("--dtype", default="bf16", type=dtype_name, choices=formats, metavar="FMT",
                   help="operand format, any case (default bf16): " + ", ".join(formats))
    add_arch(p, "arch preset (default trn2)")
    p.add_argument("--seed", type=seed, default=0, help="random seed of the operands (0)")
    p.add_argument("--html", metavar="FILE.html", type=html_path,
                   help="write the step-through page")
    add_json(p)
    p.set_defaults(run=run)


def operands(k: int, m: int, n: int, dtype: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Small integers every format holds exactly: -3..3 (0..6 for unsigned formats)."""
    rng = np.random.default_rng(seed)
    lo = 0 if dtype.startswith("uint") else -3
    return rng.integers(lo, lo + 7, (k, m)), rng.integers(lo, lo + 7, (k, n))


def column_period(dtype: str, arch: str) -> int:
    """Cycles between moving columns for a plain (one-pass) MatMul of ``dtype``."""
    return round(1 / get_arch(arch).rate_fp32) if dtype == "fp32" else 1


def check_size(k: int, m: int, n: int, rows: int, cols: int, period: int) -> int:
    """The PE-cycles the run would step, refused from arithmetic before any array exists."""
    pe_cycles = rows * cols * wavefront_cycles(n, k, m, period)
    if pe_cycles > STEP_PE_CYCLES:
        raise ShapeError(f"a {rows} x {cols} array for {wavefront_cycles(n, k, m, period):,} "
                         f"cycles is {pe_cycles:,} PE-cycles, more than this teaching model "
                         f"steps ({STEP_PE_CYCLES:,}); use a smaller array or N (the timing "
                         f"of full-size products: systolic matmul)")
    return pe_cycles


def run(args: argparse.Namespace) -> int:
    rows, cols = args.rows or args.k, args.cols or args.m
    small = rows <= GRID_LIMIT and cols <= GRID_LIMIT
    period = column_period(args.dtype, args.arch)
    check_size(args.k, args.m, args.n, rows, cols, period)
    if args.html is not None:
        from ..views.web import PAGE_LIMIT

        if args.k * args.m * args.n > PAGE_LIMIT:  # every MAC is one busy cell on the page
            raise SystolicError(f"the page would show K x M x N = "
                                f"{args.k * args.m * args.n} busy PE-cycles, more than "
                                f"{PAGE_LIMIT}; use a smaller K, M or N with --html")
    s, x = operands(args.k, args.m, args.n, args.dtype, args.seed)
    result = step_matmul(s, x, rows, cols, dtype=args.dtype, arch=args.arch,
                         record=args.html is not None or (small and not args.json))
    if args.json:
        print(json.dumps({
            "m": args.m, "k": args.k, "n": args.n, "rows": rows, "cols": cols,
            "dtype": args.dtype, "arch": args.arch, "seed": args.seed,
            "cycles": result.cycles, "column_period": period,
            "rtl_array_cycles": rows + args.m + args.n - 2, "macs": result.macs,
            "utilization": result.utilization,
            "busy_per_cycle": result.busy_per_cycle.tolist(),
        }))
    else:
        _print(args, result, small, period)
    if args.html is not None:
        from ..views.web import write_step_page

        write_step_page(args.html, result, s, x, args.dtype)
        wrote(args.html, f"step page, {result.cycles} cycles", json_mode=args.json)
    return 0


def _fmt(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:.3g}"


def _print(args: argparse.Namespace, r: SystolicRun, small: bool, period: int) -> None:
    from rich.console import Console

    con = Console(highlight=False, soft_wrap=True)  # long lines are not cut or padded
    pes = r.rows * r.cols
    con.print(f"[bold]systolic step[/] M x K x N = {args.m}x{args.k}x{args.n} {args.dtype} on "
              f"a {r.rows}x{r.cols} array, seed {args.seed}")
    con.print(escape("X[k, n] reaches PE(k, m) at cycle n + k + m; column m drains into "
                     "PSUM[m]"))
    if small and r.frames is not None:
        for t in range(r.cycles):
            _cycle(con, r, t)
    k, m, n = args.k, args.m, args.n
    if period == 1:
        formula = f"N + K + M - 2 = {wavefront_cycles(n, k, m)}"
    else:
        formula = (f"{period}(N - 1) + K + M - 1 = {wavefront_cycles(n, k, m, period)}: "
                   f"{args.dtype} streams a moving column every {period} cycles")
    con.print(f"\n[bold]{r.cycles}[/] cycles ({formula}), [bold]{r.macs}[/] MACs on "
              f"{pes} PEs")
    if r.rows > k:
        con.print(f"the RTL array (docs/rtl.md) takes rows + M + N - 2 = "
                  f"{r.rows + m + n - 2} edges here: its sums leave at the bottom edge, "
                  f"through the {r.rows - k} idle row{'s' * (r.rows - k != 1)} below K; this "
                  f"model drains each sum to PSUM from row K - 1", soft_wrap=True)
    con.print(f"utilization [bold]{100 * r.utilization:.1f}%[/] = busy PE-cycles / "
              f"(PEs x cycles)")
    con.print("busy PEs per cycle: " + _spark(r.busy_per_cycle, pes))
    if small:
        con.print("  " + " ".join(str(b) for b in r.busy_per_cycle))


def _cycle(con: Any, r: SystolicRun, t: int) -> None:
    fr = r.frames
    assert fr is not None
    busy = fr.busy[t]
    done = int(r.busy_per_cycle[: t + 1].sum()) * (r.macs // max(1, int(r.busy_per_cycle.sum())))
    con.print(f"\n[bold]cycle {t}[/]  busy {int(busy.sum())}/{r.rows * r.cols}  "
              f"MACs so far {done}/{r.macs}")
    ns = [[f"n{fr.moving_n[t, k, m]}" if busy[k, m] else "." for m in range(r.cols)]
          for k in range(r.rows)]
    ps = [[_fmt(fr.psum[t, k, m]) if busy[k, m] else "." for m in range(r.cols)]
          for k in range(r.rows)]
    wn = max(3, *(len(c) for row in ns for c in row))
    wp = max(3, *(len(c) for row in ps for c in row))
    head_n = " ".join(f"m{m}".rjust(wn) for m in range(r.cols))
    head_p = " ".join(f"m{m}".rjust(wp) for m in range(r.cols))
    side = 6 + len(head_n) + 4 + len(head_p) <= con.width
    lines = [(escape("n of X[k, n] in flight"), "partial sum passed down", head_n, head_p)]
    for k in range(r.rows):
        cn = " ".join(_cell(c, wn) for c in ns[k])
        cp = " ".join(_cell(c, wp) for c in ps[k])
        lines.append((f"k{k}", "", cn, cp))
    if side:
        con.print(f"      {lines[0][0].ljust(len(head_n))}    {lines[0][1]}")
        con.print(f"      {head_n}    {head_p}", style="dim")
        for label, _, cn, cp in lines[1:]:
            con.print(f"  {label.rjust(3)} {cn}    {cp}")
    else:
        for col, head, title in ((2, head_n, lines[0][0]), (3, head_p, lines[0][1])):
            con.print(f"      {title}")
            con.print(f"      {head}", style="dim")
            for line in lines[1:]:
                con.print(f"  {line[0].rjust(3)} {line[col]}")
    enter = [escape(f"k{k} X[{k},{fr.moving_n[t, k, 0]}]={_fmt(fr.moving[t, k, 0])}")
             for k in range(r.rows) if busy[k, 0]]
    con.print("  enters: " + ("  ".join(enter) if enter else "-"), soft_wrap=True)
    out = [escape(f"out[{m},{fr.out_n[t, m]}]={_fmt(fr.out[t, m])}")
           for m in range(r.cols) if fr.out_n[t, m] >= 0]
    con.print("  PSUM:   " + ("  ".join(out) if out else "-"), soft_wrap=True)


def _cell(text: str, width: int) -> str:
    pad = text.rjust(width)
    return f"[dim]{pad}[/]" if text == "." else f"[bold yellow]{pad}[/]"


def _spark(busy: np.ndarray, pes: int, width: int = 64) -> str:
    """Busy PEs per cycle as block characters (the mean of each bucket when downsampled)."""
    if busy.size == 0:
        return "(no cycles)"
    chunks = np.array_split(busy.astype(float), min(width, busy.size))
    blocks = " ▁▂▃▄▅▆▇█"
    # a bucket with any work gets at least the lowest block, so a busy tail stays visible
    # (and a piped line ends in no blank)
    return "".join(blocks[max(round(8 * c.mean() / pes), int(c.max() > 0))] for c in chunks)
