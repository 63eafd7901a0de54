"""The step-through page: one self-contained HTML file that shows the array cycle by cycle.

``#cycle=T`` at the end of the page's address opens cycle T. Every number on the page comes
from the register-level simulator's recorded frames
(:class:`systolic.sim.pe_array.Frames`), embedded as JSON; the page's script only shows
frame t, it never re-derives the dataflow. Inline CSS and JS, no network access. Stable
element ids for tests: ``#cycle``, ``#busy``, ``#total-cycles``, ``#step``, ``#back``,
``#play``, ``#reset``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from ..artifacts import write_text
from ..errors import SystolicError
from ..sim.systolic import SystolicRun

__all__ = ["PAGE_LIMIT", "step_data", "step_page", "write_step_page"]

# Busy cells embedded, summed over cycles (about 40 bytes each in the page).
PAGE_LIMIT = 400_000


def _num(v: float) -> float | int:
    return int(v) if float(v).is_integer() and abs(v) < 2**53 else float(v)


def step_data(run: SystolicRun, stationary: np.ndarray, moving: np.ndarray,
              dtype: str = "bf16", title: str = "") -> dict[str, object]:
    """The page's data, from a recorded single-instruction run (:func:`step_matmul`)."""
    fr = run.frames
    if fr is None:
        raise SystolicError("the step-through page needs the simulator's frames; run it "
                            "with record=True")
    s, x = np.asarray(stationary, np.float64), np.asarray(moving, np.float64)
    k, m = s.shape
    n = x.shape[1]
    if int(fr.busy.sum()) > PAGE_LIMIT:
        raise SystolicError(f"the page would embed {int(fr.busy.sum())} busy PE-cycles, more "
                            f"than {PAGE_LIMIT}; use a smaller array or a shorter N")
    # when X[k, n] entered row k (column 0), and when out[m, n] drained into PSUM
    enter = np.full((k, n), -1, np.int64)
    ts, ks = np.nonzero(fr.moving_n[:, :k, 0] >= 0)
    enter[ks, fr.moving_n[ts, ks, 0]] = ts
    psum_at = np.full((m, n), -1, np.int64)
    out = np.zeros((m, n))
    ts, ms = np.nonzero(fr.out_n[:, :m] >= 0)
    psum_at[ms, fr.out_n[ts, ms]] = ts
    out[ms, fr.out_n[ts, ms]] = fr.out[ts, ms]
    frames = []
    for t in range(run.cycles):
        ks, ms = np.nonzero(fr.busy[t])
        frames.append([[int(a), int(b), int(fr.moving_n[t, a, b]), _num(fr.moving[t, a, b]),
                        _num(fr.psum[t, a, b])] for a, b in zip(ks, ms, strict=True)])
    return {
        "title": title or f"{k}x{m}x{n} {dtype} on a {run.rows}x{run.cols} array",
        "rows": run.rows, "cols": run.cols, "K": k, "M": m, "N": n, "dtype": dtype,
        "cycles": run.cycles, "macs": run.macs, "utilization": run.utilization,
        "busy": run.busy_per_cycle.tolist(),
        "macs_upto": (np.cumsum(run.busy_per_cycle) * (run.macs // max(1, int(
            run.busy_per_cycle.sum())))).tolist(),
        "S": [[_num(v) for v in row] for row in s],
        "X": [[_num(v) for v in row] for row in x],
        "enter": enter.tolist(), "psum_at": psum_at.tolist(),
        "out": [[_num(v) for v in row] for row in out],
        "frames": frames,
    }


def step_page(run: SystolicRun, stationary: np.ndarray, moving: np.ndarray,
              dtype: str = "bf16", title: str = "") -> str:
    """The page as a string (see the module doc)."""
    data = step_data(run, stationary, moving, dtype, title)
    blob = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    return _TEMPLATE.replace("__TITLE__", str(data["title"])).replace("__DATA__", blob)


def write_step_page(path: str | os.PathLike[str], run: SystolicRun, stationary: np.ndarray,
                    moving: np.ndarray, dtype: str = "bf16", title: str = "") -> Path:
    """Write the page to ``path`` (:mod:`systolic.artifacts`: atomically, only over a
    regular file or a new path; a symlink is written through)."""
    return write_text(path, step_page(run, stationary, moving, dtype, title), "step page")


_TEMPLATE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>systolic step: __TITLE__</title>
<style>
:root { --cell: 46px; --busy: #f59e0b; --busy-bg: #fff4dc; --ink: #1f2937; --dim: #9ca3af;
        --line: #d1d5db; --psum: #2563eb; --psum-bg: #e0ecff; --new: #16a34a; }
* { box-sizing: border-box; }
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--ink);
       margin: 18px 24px; background: #fafafa; }
h1 { font-size: 18px; margin: 0 0 2px; }
.sub { color: #4b5563; margin: 0 0 12px; }
.bar { display: flex; align-items: center; gap: 8px; margin-bottom: 14px; flex-wrap: wrap; }
button { font: inherit; padding: 4px 12px; border: 1px solid #9ca3af; border-radius: 5px;
         background: #fff; cursor: pointer; min-width: 64px; }
button:hover { background: #f3f4f6; }
.stat { margin-left: 14px; }
.stat b { font-variant-numeric: tabular-nums; font-size: 16px; }
.stage { display: grid; grid-template-columns: auto 30px auto; gap: 4px 4px;
         align-items: start; }
.stage > .label:first-child { text-align: right; }
.stage > .label:nth-child(3) { text-align: left; }
.heads .head { height: 16px; text-align: center; color: #6b7280; font-size: 11px; }
.side { width: 26px; height: var(--cell); display: flex; align-items: center;
        justify-content: flex-end; color: #6b7280; font-size: 11px; padding-right: 2px; }
#nhead .side { height: calc(var(--cell) * 0.55); }
.psumlabel { text-align: left; padding-top: 6px; }  /* above the PSUM grid, its column */
.grid { display: grid; gap: 2px; }
.cell { width: var(--cell); height: var(--cell); border: 1px solid var(--line);
        border-radius: 4px; background: #fff; position: relative; font-size: 11px;
        display: flex; flex-direction: column; align-items: center; justify-content: center;
        font-variant-numeric: tabular-nums; }
.cell .w { position: absolute; top: 1px; left: 3px; font-size: 9px; color: var(--dim); }
.cell .x { font-weight: 600; font-size: 13px; }
.cell .ps { color: var(--psum); font-size: 10px; }
.cell .n { position: absolute; bottom: 1px; right: 3px; font-size: 9px; color: #b45309; }
.cell.busy { background: var(--busy-bg); border-color: var(--busy); }
.queue .cell { border-style: dashed; background: transparent; }
.queue .cell.val { border-color: #fbbf24; background: #fffaf0; }
.queue .cell.empty { border: none; }
.label { color: #6b7280; font-size: 11px; text-align: center; }
.psum .cell { height: calc(var(--cell) * 0.55); background: #fff; }
.psum .cell.done { background: var(--psum-bg); border-color: #93c5fd; color: var(--psum); }
.psum .cell.new { background: #dcfce7; border-color: var(--new); color: var(--new);
                  font-weight: 700; }
.chartlabel { color: #6b7280; font-size: 11px; margin-top: 16px; }
.chart { display: flex; align-items: flex-end; gap: 1px; height: 70px; margin-top: 2px;
         border-bottom: 1px solid var(--line); max-width: 900px; }
.chart div { flex: 1; background: #fcd9a0; min-width: 2px; }
.chart div.now { background: var(--busy); }
.legend { color: #4b5563; font-size: 12px; margin-top: 10px; max-width: 900px; }
</style></head>
<body>
<h1>Weight-stationary systolic array, cycle by cycle</h1>
<p class="sub" id="title"></p>
<div class="bar">
  <button id="reset" title="cycle 0 (Home)">reset</button>
  <button id="back" title="one cycle back (Left)">&#9664; back</button>
  <button id="step" title="one cycle forward (Right)">step &#9654;</button>
  <button id="play" title="play / pause (Space)">play</button>
  <span class="stat">cycle <b id="cycle">0</b> of 0..<b id="last"></b>
    (<b id="total-cycles"></b> cycles)</span>
  <span class="stat">busy PEs <b id="busy">0</b> / <b id="pes"></b></span>
  <span class="stat">MACs so far <b id="macs">0</b></span>
</div>
<div class="stage">
  <div class="label">moving tile X: X[k, n] enters row k at cycle n + k</div><div></div>
  <div class="label">PE(k, m) holds S[k, m]; X[k, n] reaches it at cycle n + k + m</div>
  <div></div><div></div><div class="grid heads" id="mhead"></div>
  <div class="grid queue" id="queue"></div><div class="grid" id="khead"></div>
  <div class="grid" id="array"></div>
  <div></div><div></div>
  <div class="label psumlabel" id="psum-label">PSUM bank below the array: column m drains
    into partition m, row n</div>
  <div></div><div class="grid" id="nhead"></div><div class="grid psum" id="psum"></div>
</div>
<div class="chartlabel">busy PEs per cycle (click a bar to jump there)</div>
<div class="chart" id="chart"></div>
<p class="legend">Each PE adds weight &times; input to the partial sum from the PE above and
passes it down (blue &Sigma;); column m drains out[m, n] into PSUM partition m (green: this
cycle). Amber cells are busy this cycle; the small number is n. Every value on this page was
recorded by the register-level simulator (<code>systolic.sim.systolic</code>).</p>
<script type="application/json" id="data">__DATA__</script>
<script>
(function () {
  "use strict";
  const D = JSON.parse(document.getElementById("data").textContent);
  const $ = (id) => document.getElementById(id);
  const R = D.rows, C = D.cols, K = D.K, M = D.M, N = D.N, T = D.cycles;
  const Q = Math.min(Math.max(1, ...D.enter.flat().map((e) => e + 1)), 12);
  const fmt = (v) => (Number.isInteger(v) ? String(v) : Number(v).toPrecision(3));
  const size = R <= 6 && C <= 6 ? 52 : R <= 10 && C <= 10 ? 44 : 34;
  document.documentElement.style.setProperty("--cell", size + "px");
  $("title").textContent = D.title + ": " + D.macs + " MACs in " + T + " cycles, " +
    (100 * D.utilization).toFixed(1) + "% of the PE-cycles busy.";
  $("total-cycles").textContent = T;
  $("last").textContent = T - 1;
  $("pes").textContent = R * C;
  function grid(el, rows, cols, cls) {
    el.style.gridTemplateColumns = "repeat(" + cols + ", var(--cell))";
    const cells = [];
    for (let i = 0; i < rows * cols; i++) {
      const c = document.createElement("div");
      c.className = "cell " + (cls || "");
      el.appendChild(c);
      cells.push(c);
    }
    return cells;
  }
  function labels(el, prefix, count, cls) {
    for (let i = 0; i < count; i++) {
      const d = document.createElement("div");
      d.className = cls;
      d.textContent = prefix + i;
      el.appendChild(d);
    }
  }
  $("mhead").style.gridTemplateColumns = "repeat(" + C + ", var(--cell))";
  labels($("mhead"), "m", C, "head");
  labels($("khead"), "k", R, "side");
  labels($("nhead"), "n", N, "side");
  const pe = grid($("array"), R, C);
  const queue = grid($("queue"), R, Q);
  const psum = grid($("psum"), N, C);
  const bars = [];
  const top = Math.max(1, ...D.busy);
  for (let t = 0; t < T; t++) {
    const b = document.createElement("div");
    b.style.height = (100 * D.busy[t] / top) + "%";
    b.title = "cycle " + t + ": " + D.busy[t] + " busy";
    b.addEventListener("click", () => show(t));
    $("chart").appendChild(b);
    bars.push(b);
  }
  let t = 0, timer = null;
  function show(c) {
    t = Math.max(0, Math.min(T - 1, c));
    $("cycle").textContent = t;
    $("busy").textContent = D.busy[t];
    $("macs").textContent = D.macs_upto[t];
    for (let k = 0; k < R; k++) {
      for (let m = 0; m < C; m++) {
        const w = k < K && m < M ? '<span class="w">w ' + fmt(D.S[k][m]) + "</span>" : "";
        pe[k * C + m].className = "cell";
        pe[k * C + m].innerHTML = w;
      }
    }
    for (const [k, m, n, x, ps] of D.frames[t]) {
      const c = pe[k * C + m];
      c.className = "cell busy";
      c.innerHTML += '<span class="x">' + fmt(x) + '</span><span class="ps">&Sigma; ' +
        fmt(ps) + '</span><span class="n">n' + n + "</span>";
    }
    for (let k = 0; k < R; k++) {  // slot j (from the array's edge) enters at t + j + 1
      for (let j = 0; j < Q; j++) {
        const c = queue[k * Q + (Q - 1 - j)];
        let n = -1;
        if (k < K) n = D.enter[k].findIndex((e) => e === t + j + 1);
        c.className = "cell " + (n >= 0 ? "val" : "empty");
        c.innerHTML = n >= 0 ? '<span class="x">' + fmt(D.X[k][n]) +
          '</span><span class="n">n' + n + "</span>" : "";
      }
    }
    for (let n = 0; n < N; n++) {
      for (let m = 0; m < C; m++) {
        const c = psum[n * C + m];
        const at = m < M ? D.psum_at[m][n] : -1;
        c.className = "cell" + (at >= 0 && at < t ? " done" : at === t ? " new" : "");
        c.textContent = at >= 0 && at <= t ? fmt(D.out[m][n]) : "";
      }
    }
    bars.forEach((b, i) => (b.className = i === t ? "now" : ""));
  }
  function play() {
    if (timer) { clearInterval(timer); timer = null; $("play").textContent = "play"; return; }
    if (t >= T - 1) show(0);
    $("play").textContent = "pause";
    timer = setInterval(() => { if (t >= T - 1) play(); else show(t + 1); }, 450);
  }
  $("step").addEventListener("click", () => show(t + 1));
  $("back").addEventListener("click", () => show(t - 1));
  $("reset").addEventListener("click", () => { if (timer) play(); show(0); });
  $("play").addEventListener("click", play);
  document.addEventListener("keydown", (e) => {
    if (e.key === "ArrowRight") show(t + 1);
    else if (e.key === "ArrowLeft") show(t - 1);
    else if (e.key === "Home") show(0);
    else if (e.key === " ") { e.preventDefault(); play(); }
  });
  // "#cycle=5" in the address opens that cycle (screenshots, links to a moment)
  const at = /cycle=(\d+)/.exec(location.hash);
  show(at ? parseInt(at[1], 10) : 0);
})();
</script>
</body></html>
"""
