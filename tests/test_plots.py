"""Plots: files of the asked pixel size, lazy matplotlib, and the roofline's numbers against
seed 003's closed forms."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import require_module

from systolic.cli import main

require_module("matplotlib", "matplotlib (the plots)")

EXAMPLES = Path(__file__).parent.parent / "examples"


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the PNG header: the 8-byte signature, then the IHDR chunk."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


def test_roofline_png_size(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "roof.png"
    assert main(["roofline", "--arch", "trn2", "--workload", str(EXAMPLES / "shortfalls.yaml"),
                 "-o", str(out), "--width", "640", "--height", "480"]) == 0
    assert out.stat().st_size > 0 and png_size(out) == (640, 480)
    assert str(out) in capsys.readouterr().out


def test_loss_bar_and_timeline_png_sizes(tmp_path: Path) -> None:
    bar, line = tmp_path / "loss.png", tmp_path / "tl.png"
    assert main(["run", str(EXAMPLES / "shortfalls.yaml"), "--loss-bar", str(bar),
                 "--width", "801", "--height", "333", "--json"]) == 0
    assert png_size(bar) == (801, 333)
    assert main(["run", str(EXAMPLES / "shortfalls.yaml"), "--timeline", str(line),
                 "--timeline-op", "n32", "--width", "1000", "--height", "450"]) == 0
    assert png_size(line) == (1000, 450)


def test_matmul_timeline_default_size(tmp_path: Path) -> None:
    line = tmp_path / "tl.png"
    assert main(["matmul", "256", "256", "1024", "--timeline", str(line), "--json"]) == 0
    assert line.stat().st_size > 0 and png_size(line) == (1200, 520)  # documented default


def test_svg_by_suffix(tmp_path: Path) -> None:
    out = tmp_path / "roof.svg"
    assert main(["roofline", "--arch", "trn1", "-o", str(out), "--json"]) == 0
    assert "<svg" in out.read_text()[:2000]


@pytest.mark.parametrize("argv", [
    ["roofline", "-o", "{d}/r.jpg"],
    ["run", str(EXAMPLES / "seed003_2048.yaml"), "--loss-bar", "{d}/l.pdf"],
    ["run", str(EXAMPLES / "seed003_2048.yaml"), "--timeline", "{d}/t"],
    ["roofline", "-o", "{d}/no/such/dir/r.png"],
    ["roofline", "-o", "{d}/r.png", "--width", "20"],
])
def test_bad_plot_paths_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                 argv: list[str]) -> None:
    try:
        code = main([a.format(d=tmp_path) for a in argv])
    except SystemExit as exc:  # a bad path is refused while the arguments are read
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("systolic: error: ")


def test_matplotlib_only_imported_for_plots(tmp_path: Path) -> None:
    code = ("import sys\nfrom systolic.cli import main\n"
            f"main(['run', {str(EXAMPLES / 'seed003_2048.yaml')!r}, '--json'])\n"
            "main(['roofline', '--json'])\n"
            "assert 'matplotlib' not in sys.modules, 'imported'\n"
            f"main(['roofline', '-o', {str(tmp_path / 'r.png')!r}])\n"
            "assert 'matplotlib' in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def roofline_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["roofline", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(("arch", "clock", "bw"), [("trn1", 2.8e9, 820e9 / 2),
                                                   ("trn2", 2.4e9, 2.9e12 / 8)])
def test_roofs_are_seed_003_peaks(capsys: pytest.CaptureFixture[str], arch: str,
                                  clock: float, bw: float) -> None:
    data = roofline_json(capsys, "--arch", arch)
    roofs = {r["name"]: r for r in data["roofs"]}
    bf16 = 128 * 128 * 2 * clock / 1e12  # seed 003: 91.75 (trn1), 78.6 (trn2)
    assert roofs["bf16"]["peak_tflops"] == pytest.approx(bf16)
    assert round(roofs["bf16"]["peak_tflops"], 1) == {"trn1": 91.8, "trn2": 78.6}[arch]
    assert roofs["fp32"]["peak_tflops"] == pytest.approx(bf16 / 4)  # "roughly 4x"
    assert ("fp8 DoubleRow" in roofs) == (arch == "trn2")  # no perf modes on NeuronCore-v2
    if arch == "trn2":
        assert roofs["fp8 DoubleRow"]["peak_tflops"] == pytest.approx(2 * bf16)  # 158 vs 79
    assert roofs["bf16"]["ridge_intensity"] == pytest.approx(bf16 * 1e12 / bw)


def test_ceilings_follow_seed_003(capsys: pytest.CaptureFixture[str]) -> None:
    ceilings = {c["name"]: c for c in roofline_json(capsys, "--arch", "trn1")["ceilings"]}
    # K = 64 half the rows, M = 64 half the columns, N = 32 pays 64: each about 50% of P,
    # a little under it (fill, drain, the first weight load); fp32 about 25%
    for name in ("K = 64", "M = 64", "N = 32"):
        assert 0.45 < ceilings[name]["fraction_of_bf16_peak"] <= 0.5
    assert 0.24 < ceilings["fp32"]["fraction_of_bf16_peak"] <= 0.25
    assert ceilings["K = 64"]["largest_loss"] == "rows_idle"
    assert ceilings["M = 64"]["largest_loss"] == "cols_idle"
    assert ceilings["N = 32"]["largest_loss"] == "short_moving"


def test_points_from_a_workload(capsys: pytest.CaptureFixture[str]) -> None:
    data = roofline_json(capsys, "--workload", str(EXAMPLES / "shortfalls.yaml"))
    assert data["arch"] == "trn1"  # the workload's own arch
    pts = {p["name"]: p for p in data["points"]}
    n32 = pts["n32"]  # 2MKN / (2(MK + KN) + 4MN), M = K = 2048, N = 32
    m, k, n = 2048, 2048, 32
    assert n32["intensity"] == pytest.approx(2 * m * k * n / (2 * (m * k + k * n) + 4 * m * n))
    assert n32["hbm_bound_tflops"] == pytest.approx(n32["intensity"] * 410e9 / 1e12)
    for p in pts.values():
        assert 0 < p["tflops"] <= p["peak_tflops"] * (1 + 1e-9)


def test_mixed_arch_workload_needs_arch(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "mix.yaml"
    f.write_text("- {name: a, m: 8, k: 8, n: 8, arch: trn1}\n"
                 "- {name: b, m: 8, k: 8, n: 8, arch: trn2}\n")
    assert main(["roofline", "--workload", str(f)]) == 2
    assert "--arch" in capsys.readouterr().err
    assert roofline_json(capsys, "--workload", str(f), "--arch", "trn2")["arch"] == "trn2"


def test_merge_and_busy_bins_against_a_cycle_mask() -> None:
    from systolic.geometry import interval_union as _merge
    from systolic.views.plot_base import busy_per_bin as _busy_per_bin

    rng = np.random.default_rng(3)
    lo = rng.integers(0, 1000, 200)
    hi = lo + rng.integers(1, 30, 200)
    mask = np.zeros(1100, dtype=bool)  # cycle t busy if any [lo, hi) holds it
    for a, b in zip(lo, hi, strict=True):
        mask[a:b] = True
    s, e = _merge(lo, hi)
    assert np.all(s[1:] > e[:-1])  # disjoint, sorted, not touching
    merged = np.zeros(1100, dtype=bool)
    for a, b in zip(s, e, strict=True):
        merged[a:b] = True
    assert np.array_equal(merged, mask)
    edges = np.arange(0, 1101, 50)
    want = mask.reshape(-1, 50).mean(axis=1)
    assert np.allclose(_busy_per_bin(s, e, edges.astype(float)), want)


def test_dense_small_events_are_not_drawn_as_a_solid_band(tmp_path: Path) -> None:
    """2048^3 bf16: 256 weight loads of 32 cycles each, about 1% of the whole-core run. At
    300 pixels the overview must tint the LDWEIGHTS row faintly (about its true share), not
    paint it solid; the caption says how small events are drawn (issue 13, 3.10)."""
    from systolic.arch import get_arch
    from systolic.compiler import MatmulSpec, lower
    from systolic.views.core_plot import plot_rows
    from systolic.views.plot_base import MIN_TINT, OVERVIEW_NOTE, row_ink
    from systolic.views.report import build_report

    arch = get_arch("trn2")
    spec = MatmulSpec(2048, 2048, 2048, "bf16")
    program = lower(spec, arch).program
    core = build_report(program, arch, spec).core
    ld, mm = plot_rows(core)[:2]
    assert ld.label == "Tensor (LDWEIGHTS)" and len(ld.lo) == 256
    end = core.latency
    mask = np.zeros(end, bool)  # an independent tick mask of the loads
    for a, b in zip(ld.lo.tolist(), ld.hi.tolist(), strict=True):
        mask[a:b] = True
    share = mask.mean()
    assert 0.003 < share < 0.03 and share == pytest.approx(ld.busy)
    how, _, strength = row_ink(ld.lo, ld.hi, (0, end), 300)
    assert how == "tint"
    assert strength.mean() < MIN_TINT + 2 * share  # faint, not solid (solid would be 1.0)
    assert strength.mean() > 0
    mmask = np.zeros(end, bool)
    for a, b in zip(mm.lo.tolist(), mm.hi.tolist(), strict=True):
        mmask[a:b] = True
    how, blo, bhi = row_ink(mm.lo, mm.hi, (0, end), 300)
    if how == "bars":  # every busy tick is inked; widening adds at most a pixel per bar
        inked = np.zeros(end, bool)
        for a, b in zip(blo.tolist(), bhi.tolist(), strict=True):
            inked[int(a):int(np.ceil(b))] = True
        assert not np.any(mmask & ~inked)
        assert inked.sum() <= mmask.sum() + len(blo) * (end / 300 + 1)
    else:  # each pixel's tint is its true busy share (from the tick mask), floored
        cum = np.concatenate([[0], np.cumsum(mmask)])
        e = np.floor(blo).astype(int)
        busy = np.diff(cum[e]) / np.diff(e)
        want = np.where(busy > 0, MIN_TINT + (1 - MIN_TINT) * busy, 0)
        assert np.abs(bhi - want).max() < 0.02
    assert "1 pixel" in OVERVIEW_NOTE
    out = tmp_path / "t.png"
    assert main(["matmul", "2048", "2048", "2048", "--timeline", str(out), "--width", "300",
                 "--height", "400"]) == 0
    assert png_size(out) == (300, 400)


def test_missing_matplotlib_is_one_line_naming_the_extra(tmp_path: Path) -> None:
    """matplotlib is a regular dependency now; if it is still missing or broken, a plot
    command says so in one line that names the extra (issue 13, 3.7)."""
    code = ("import sys\nsys.modules['matplotlib'] = None  # import fails as if absent\n"
            "from systolic.cli import main\n"
            f"raise SystemExit(main(['roofline', '-o', {str(tmp_path / 'r.png')!r}]))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "systolic[plots]" in proc.stderr
    assert proc.stderr.startswith("systolic: error: ")
    assert not (tmp_path / "r.png").exists()


def test_matplotlib_is_a_regular_dependency() -> None:
    import tomllib

    meta = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())
    assert any(d.startswith("matplotlib") for d in meta["project"]["dependencies"])


def test_one_timeline_for_every_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                        ) -> None:
    """matmul --timeline, its older name --core-timeline and run --timeline all draw the
    whole-core timeline (core_plot.core_timeline_plot), sized as asked."""
    import systolic.views.core_plot as core_plot
    from systolic.timing.core import CoreTiming

    calls: list[object] = []
    real = core_plot.core_timeline_plot

    def spy(core: CoreTiming, path: Path, **kw: Any) -> Path:
        calls.append(core)
        return real(core, path, **kw)

    monkeypatch.setattr(core_plot, "core_timeline_plot", spy)
    a, b, c = tmp_path / "a.png", tmp_path / "b.png", tmp_path / "c.svg"
    assert main(["matmul", "256", "384", "1024", "--timeline", str(a), "--json"]) == 0
    assert main(["matmul", "256", "384", "1024", "--core-timeline", str(b), "--json"]) == 0
    assert main(["run", str(EXAMPLES / "shortfalls.yaml"), "--timeline", str(c),
                 "--timeline-op", "n32", "--json"]) == 0
    assert len(calls) == 3 and all(isinstance(x, CoreTiming) for x in calls)
    assert png_size(a) == png_size(b) == (1200, 520)
    assert "<svg" in c.read_text()[:2000]


def test_the_timeline_draws_the_trace_rows(tmp_path: Path) -> None:
    """The plot's rows are the trace's: the same engine rows, and DMA rows that merge only
    queues whose trace slices are identical, covering every queue once."""
    from systolic.arch import get_arch
    from systolic.compiler import MatmulSpec, lower
    from systolic.views.core_plot import plot_rows
    from systolic.views.report import build_report
    from systolic.views.trace import CORE_PID, write_trace

    arch = get_arch("trn2")
    program = lower(MatmulSpec(300, 600, 1100, "bf16"), arch).program
    rep = build_report(program, arch)
    doc = json.loads(write_trace(rep, program, tmp_path / "t.json").read_text())
    ev = [e for e in doc["traceEvents"] if e.get("pid") == CORE_PID]
    names = {e["tid"]: e["args"]["name"] for e in ev if e["name"] == "thread_name"}
    slices: dict[str, list[float]] = {n: [] for n in names.values()}
    for e in ev:
        if e["ph"] == "X":
            slices[names[e["tid"]]].append(round(e["ts"], 9))
    rows = plot_rows(rep.core)
    us = 1e6 / rep.core.tick_hz
    covered = []
    for r in rows:
        members = ([r.label] if not r.label.startswith("DMA engines") else
                   [f"DMA engine {q}" for q in range(int(r.label.split()[-1].split("-")[0]),
                                                    int(r.label.split("-")[-1]) + 1)])
        covered += members
        for name in members:
            assert slices[name] == [round(t * us, 9) for t in r.lo.tolist()]
    assert sorted(covered) == sorted(names.values())


# -- issue 22: the clipping warning at its cause; the committed pictures are current -------

def test_busy_share_per_bin_is_a_fraction() -> None:
    # float running sums stray ~1e-14 past [0, 1] (seed 0's first case does), which made
    # matplotlib warn "Clipping input data" on every tinted row of a dense timeline
    from systolic.geometry import interval_union
    from systolic.views.plot_base import busy_per_bin

    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(2, 50))
        lo = np.sort(rng.random(n) * 1e6)
        lo, hi = interval_union(lo, lo + rng.random(n) * 1e5)
        edges = np.linspace(lo[0], hi[-1], int(rng.integers(5, 300)))
        busy = busy_per_bin(lo, hi, edges)
        assert busy.min() >= 0.0 and busy.max() <= 1.0
        # and still the share: total busy time recovered from the bins (float64 sum)
        assert float(np.sum(busy * np.diff(edges))) == pytest.approx(
            float(np.sum(hi - lo)), rel=1e-9)


IMG = Path(__file__).resolve().parents[1] / "docs" / "img"
_K4096 = ["--arch", "trn2", "--arg", "lhsT=bf16[4096,4096]", "--arg", "rhs=bf16[4096,4096]"]
# Each picture under docs/img that a documented command draws (docs/tutorial.md
# "Regenerating the images", docs/timing.md), with that command; {out} is the file.
# step.png is a browser screenshot, rtl_wave.png and the sweep pictures come from other
# tools (docs/step.md, docs/rtl.md, docs/sweep.md).
PICTURES = {
    "timeline.png": ["run", str(EXAMPLES / "seed003_2048.yaml"), "--timeline", "{out}"],
    "loss_bar.png": ["run", str(EXAMPLES / "shortfalls.yaml"), "--loss-bar", "{out}"],
    "roofline.png": ["roofline", "--workload", str(EXAMPLES / "shortfalls.yaml"), "-o",
                     "{out}"],
    "core_timeline_1024x384x2048.png": ["matmul", "1024", "384", "2048", "--timeline",
                                        "{out}"],
    **{f"kernel_{k}.png": ["kernel", f"{EXAMPLES / 'kernels' / k}.py:{k}", *_K4096,
                           "--timeline", "{out}"]
       for k in ("tiled_matmul", "hoisted_matmul", "block_free_matmul", "block_all_matmul")},
}


def _grey(path: Path) -> np.ndarray:
    import matplotlib.image as mpimg

    return np.asarray(mpimg.imread(path), dtype=np.float64)[..., :3].mean(axis=2)


@pytest.mark.parametrize("name", sorted(PICTURES))
def test_a_committed_picture_is_what_its_command_draws(tmp_path: Path, name: str) -> None:
    """Re-draw at test time and compare size and pixel statistics (not bytes: fonts and
    matplotlib versions move single pixels). A stale picture of the same layout, such as
    the old block_all timeline, differs by 0.016 in mean 8 x 8 block brightness; re-drawn
    ones by 0."""
    import warnings

    out = tmp_path / name
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no matplotlib warning while drawing (clipping ...)
        assert main([str(out) if a == "{out}" else a for a in PICTURES[name]]) == 0
    assert png_size(out) == png_size(IMG / name)
    new, old = _grey(out), _grey(IMG / name)
    b = 8
    h, w = (s // b * b for s in new.shape)

    def blocks(g: np.ndarray) -> np.ndarray:
        return g[:h, :w].reshape(h // b, b, w // b, b).mean(axis=(1, 3))

    assert float(np.abs(blocks(new) - blocks(old)).mean()) < 0.005, \
        f"docs/img/{name} is stale: re-draw it with the command in PICTURES"
    assert abs(float((new < 0.99).mean()) - float((old < 0.99).mean())) < 0.005  # ink


def test_point_labels_do_not_overlap_each_other_or_the_texts() -> None:
    # the roofline's k64 and m64 labels were drawn over each other and the full_2048 label
    # over the ceiling text; labels now take the first free place around their point
    from systolic.views.plot_base import figure
    from systolic.views.plots import place_labels

    fig = figure(600, 400)
    ax = fig.subplots()
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 10)
    note = ax.text(5.2, 5.4, "a ceiling's note in the way", fontsize=8)
    pts = [(5.0, 5.0, "first (dma-bound)"), (5.3, 5.1, "second (dma-bound)"),
           (5.1, 4.8, "third (pe-bound)")]
    place_labels(fig, ax, pts, [note])
    renderer = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(renderer) for t in ax.texts if t is not note]
    assert len(boxes) == 3
    for i, a in enumerate(boxes):
        assert not a.overlaps(note.get_window_extent(renderer))
        for b in boxes[i + 1:]:
            assert not a.overlaps(b)
