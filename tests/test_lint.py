"""The house rule "ruff clean" as a test, so CI fails on a lint error."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from helpers import missing_extra

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_is_clean() -> None:
    if shutil.which("ruff") is None and subprocess.run(
            [sys.executable, "-m", "ruff", "--version"], capture_output=True).returncode != 0:
        missing_extra("ruff")
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "src", "tests", "bench"],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_is_clean() -> None:
    if subprocess.run([sys.executable, "-m", "mypy", "--version"],
                      capture_output=True).returncode != 0:
        missing_extra("mypy")
    done = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout + done.stderr
