"""Tests that kill the mutants of bench/mutants.py (issue 13 section 4)."""

from __future__ import annotations

import systolic


def test_import() -> None:
    assert systolic.__file__
