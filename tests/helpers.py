"""Independent references for the tests: float64 products and fp32 error bounds."""

from __future__ import annotations

import numpy as np

U32 = 2.0**-24  # unit roundoff of fp32


def ref64(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a.astype(np.float64) @ b.astype(np.float64)


def fp32_bound(a: np.ndarray, b: np.ndarray, extra_rel: float = 0.0) -> np.ndarray:
    """Elementwise bound on |fl32(a @ b) - a @ b| for any summation order: gamma_K times
    sum |a||b| (Higham, Accuracy and Stability, eq. 3.5), plus an optional relative term."""
    k = a.shape[1]
    gamma = 2 * k * U32 / (1 - 2 * k * U32)
    mag = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    return (gamma + extra_rel) * mag + 1e-30


def missing_extra(what: str) -> None:
    """A dependency of the [test] extra is missing: skip on a developer's machine, fail in CI.

    CI installs the extra from scratch (README Quickstart), so there a missing piece is a
    broken install step, and a green run must not hide it behind a skip.
    """
    import os

    import pytest

    reason = f"{what} is missing: pip install '.[test]' brings it"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI installs the test extra, so this is a broken install")
    pytest.skip(reason, allow_module_level=True)


def require_module(name: str, what: str) -> object:
    """Import ``name``, or :func:`missing_extra`."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError:
        missing_extra(what)
        raise AssertionError from None  # unreachable: missing_extra raises


def _normalise_text(text: str) -> list[str]:
    """Program text as comparable lines: backslash-newline continuations joined, runs of
    whitespace made one space, blank lines and ``#`` comments dropped."""
    import re

    lines = []
    for raw in text.replace("\\\n", " ").splitlines():
        line = re.sub(r"\s+", " ", raw).strip()
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def assert_program_text(got: object, expected: str) -> None:
    """Assert a Program (or its text) reads as the inline golden ``expected``, the way
    Amaranth's ``assertRepr`` compares IR: layout-insensitive (see :func:`_normalise_text`),
    and a mismatch fails with a unified diff of the two texts, line by line."""
    import difflib

    text = got if isinstance(got, str) else got.text()  # type: ignore[attr-defined]
    have, want = _normalise_text(text), _normalise_text(expected)
    if have != want:
        diff = "\n".join(difflib.unified_diff(want, have, "expected", "got", lineterm=""))
        raise AssertionError(f"program text differs from the golden text:\n{diff}")
