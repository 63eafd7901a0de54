"""The sweep pictures under docs/img are what their documented commands draw (issue 22:
"every committed picture is what its documented command draws"; tests/test_plots.py checks
the others). docs/sweep.md runs each example sweep, then ``systolic sweep show ... --plot``;
here the same sweeps run into a temporary store and the same show command draws, compared
with the committed picture as tests/test_plots.py compares (size, 8 x 8 block brightness,
ink), so a timing change that moves the figures makes the stale picture fail here."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from helpers import require_module
from test_plots import _grey, png_size

from systolic.cli import main

ROOT = Path(__file__).resolve().parents[1]
IMG = ROOT / "docs" / "img"
SWEEPS = ROOT / "examples" / "sweeps"
# picture -> (sweep file, the show options of docs/sweep.md after the store)
PICTURES = {
    "sweep_tune.png": ("blocked_matmul_tune.yaml",
                       ["--top", "5", "--best-per", "dim.M,dim.K,dim.N,arch,dtype", "--plot",
                        "{out}", "--x", "param.TILES_N", "--y", "dim.K"]),
    "sweep_swiglu.png": ("swiglu_array_hbm.yaml",
                         ["--top", "5", "--pareto", "latency_us,rows", "--plot", "{out}"]),
}


def test_the_show_commands_are_the_documented_ones() -> None:
    doc = (ROOT / "docs" / "sweep.md").read_text()
    for name, (sweep, show) in PICTURES.items():
        store = {"sweep_tune.png": "tune.sqlite", "sweep_swiglu.png": "swiglu.sqlite"}[name]
        assert f"$ systolic sweep examples/sweeps/{sweep} --out {store}" in doc
        line = " ".join(["$ systolic sweep show", store, *show]).replace(
            "{out}", f"docs/img/{name}")
        assert line in doc, line


@pytest.mark.parametrize("name", sorted(PICTURES))
def test_a_committed_sweep_picture_is_what_its_command_draws(tmp_path: Path, name: str,
                                                             capsys: pytest.CaptureFixture[str]
                                                             ) -> None:
    require_module("matplotlib", "matplotlib (the plots)")
    sweep, show = PICTURES[name]
    store, out = tmp_path / "r.sqlite", tmp_path / name
    assert main(["sweep", str(SWEEPS / sweep), "--out", str(store), "--workers", "2",
                 "--no-progress"]) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no matplotlib warning while drawing
        assert main(["sweep", "show", str(store),
                     *[str(out) if a == "{out}" else a for a in show]]) == 0
    capsys.readouterr()
    assert png_size(out) == png_size(IMG / name)
    new, old = _grey(out), _grey(IMG / name)
    b = 8
    h, w = (s // b * b for s in new.shape)

    def blocks(g: np.ndarray) -> np.ndarray:
        return g[:h, :w].reshape(h // b, b, w // b, b).mean(axis=(1, 3))

    assert float(np.abs(blocks(new) - blocks(old)).mean()) < 0.005, \
        f"docs/img/{name} is stale: re-draw it with the commands of docs/sweep.md"
    assert abs(float((new < 0.99).mean()) - float((old < 0.99).mean())) < 0.005  # ink
