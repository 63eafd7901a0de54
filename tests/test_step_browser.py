"""The step-through page in a real headless browser: click through every cycle and read the
shown cycle and busy counts against seed 003's rule and the simulator.

Needs Playwright's python package and a chromium binary (Debian: ``apt-get install -y
chromium``); Playwright's own browser download is not used.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import require_module

from systolic.sim.systolic import step_matmul
from systolic.views.web import write_step_page

pytestmark = pytest.mark.browser

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]


def _chromium() -> str | None:
    for path in (os.environ.get("CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium"),
                 shutil.which("chromium-browser")):
        if path and Path(path).exists():
            return path
    return None


@pytest.fixture(scope="module")
def browser():  # type: ignore[no-untyped-def]
    sync_api: Any = require_module("playwright.sync_api", "playwright (drives the browser)")
    path = _chromium()
    if path is None:
        pytest.skip("no chromium binary found (apt-get install -y chromium, or set CHROMIUM)")
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=path, args=ARGS)
        yield b
        b.close()


def arrivals(k: int, m: int, n: int) -> list[int]:
    kk, mm, nn = np.meshgrid(np.arange(k), np.arange(m), np.arange(n), indexing="ij")
    return np.bincount((nn + kk + mm).ravel()).tolist()


@pytest.mark.parametrize(("k", "m", "n", "rows", "cols"), [(3, 3, 3, 3, 3), (4, 3, 6, 5, 4)])
def test_stepping_shows_every_cycle(browser, tmp_path: Path, k: int, m: int, n: int,  # type: ignore[no-untyped-def]
                                    rows: int, cols: int) -> None:
    rng = np.random.default_rng(0)
    s, x = rng.integers(-3, 4, (k, m)), rng.integers(-3, 4, (k, n))
    run = step_matmul(s, x, rows, cols)
    page_path = write_step_page(tmp_path / "step.html", run, s, x)
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(page_path.resolve().as_uri())
    expected = arrivals(k, m, n)
    assert int(page.inner_text("#total-cycles")) == run.cycles == len(expected)
    shown = []
    for t in range(run.cycles):
        assert int(page.inner_text("#cycle")) == t
        shown.append(int(page.inner_text("#busy")))
        page.click("#step")
    assert shown == expected == run.busy_per_cycle.tolist()
    assert int(page.inner_text("#cycle")) == run.cycles - 1  # stepping stops at the end
    assert page.locator("#array .cell.busy").count() == expected[-1]
    page.click("#back")
    assert int(page.inner_text("#cycle")) == run.cycles - 2
    page.click("#reset")
    assert int(page.inner_text("#cycle")) == 0
    page.click("#play")
    page.wait_for_function("document.getElementById('cycle').textContent === '2'",
                           timeout=10_000)
    page.click("#play")  # pause
    assert not errors
    page.close()


def test_psum_caption_is_over_the_psum_grid(browser, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Laid out by the browser: the PSUM caption sits right above the PSUM grid and over it,
    not under the moving-tile queue; "#cycle=5" opens cycle 5."""
    rng = np.random.default_rng(0)
    s, x = rng.integers(-3, 4, (4, 4)), rng.integers(-3, 4, (4, 6))
    run = step_matmul(s, x)
    page_path = write_step_page(tmp_path / "step.html", run, s, x)
    page = browser.new_page(viewport={"width": 1000, "height": 800})
    page.goto(page_path.resolve().as_uri() + "#cycle=5")
    assert int(page.inner_text("#cycle")) == 5
    label = page.locator("#psum-label").bounding_box()
    psum = page.locator("#psum").bounding_box()
    queue = page.locator("#queue").bounding_box()
    assert label and psum and queue
    assert label["y"] + label["height"] <= psum["y"] + 1  # above the grid
    assert psum["y"] - (label["y"] + label["height"]) < 20  # and right above it
    assert label["x"] >= psum["x"] - 1  # in the grid's column
    assert label["x"] > queue["x"] + queue["width"]  # not under the queue
    page.close()
