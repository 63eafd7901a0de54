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


def store_rows(path: object) -> list[tuple[object, ...]]:
    """A sweep store read with plain sqlite3, not the package's reader: every column but the
    wall-clock one, in run order; the file must pass SQLite's integrity check."""
    import sqlite3

    con = sqlite3.connect(str(path))
    cols = [r[1] for r in con.execute("PRAGMA table_info(points)") if r[1] != "elapsed_s"]
    rows = con.execute(f"SELECT {', '.join(f'[{c}]' for c in cols)} FROM points "
                       f"ORDER BY seq").fetchall()
    assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    con.close()
    return [tuple(zip(cols, r, strict=True)) for r in rows]


def write_kernel(tmp_path: object, body: str) -> object:
    """``body`` as the kernel file ``tmp_path/k.py``, after the three NKI imports."""
    from pathlib import Path

    p = Path(str(tmp_path)) / "k.py"
    p.write_text("import nki\nimport nki.isa as nisa\nimport nki.language as nl\n\n" + body)
    return p


def record_source(tmp_path: object, body: str, args: list[str], name: str = "k",
                  arch: str = "trn2") -> object:
    """The kernel ``name`` of ``body`` (see :func:`write_kernel`) recorded on ``args``."""
    import systolic.nki as snki

    return snki.record_kernel(str(write_kernel(tmp_path, body)), name, args, {}, arch=arch)


def opcodes(rec: object) -> list[str]:
    """The instruction class names of a recorded kernel's Program, in order."""
    return [type(i).__name__ for i in rec.program]  # type: ignore[attr-defined]


# An NKI kernel that quantizes x [P, F] (bf16) to MX on trn3 and returns the x4 data and
# the E8M0 scales (nisa.quantize_mx); used for its values and for its cost.
QUANTIZE_MX_KERNEL = '''
@nki.jit(platform_target="trn3")
def k(x):
    P, F = x.shape
    t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    q = nl.ndarray((P, F // 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.sbuf)
    s = nl.ndarray((P, F // 4), dtype=nl.uint8, buffer=nl.sbuf)
    nisa.memset(dst=s, value=0)
    nisa.quantize_mx(dst=q, src=t, dst_scale=s)
    q_out = nl.ndarray((P, F // 4), dtype=nl.float8_e4m3fn_x4, buffer=nl.shared_hbm)
    s_out = nl.ndarray((P, F // 4), dtype=nl.uint8, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=q_out, src=q)
    nisa.dma_copy(dst=s_out, src=s)
    return q_out, s_out
'''


def operands(m: int, k: int, n: int, dtype: str, seed: int = 0
             ) -> tuple[np.ndarray, np.ndarray]:
    """Random a [M, K] and b [K, N]: integers in [-100, 100) for the integer formats, else
    standard normal float32."""
    rng = np.random.default_rng(seed)
    if dtype.startswith("int"):
        return rng.integers(-100, 100, (m, k)), rng.integers(-100, 100, (k, n))
    return (rng.standard_normal((m, k)).astype(np.float32),
            rng.standard_normal((k, n)).astype(np.float32))


def run_lowered(spec: object, a: np.ndarray, b: np.ndarray, workers: int,
                arch_name: str = "trn2", patch: dict[tuple[int, int], int] | None = None
                ) -> object:
    """The product ``spec`` lowered and run on the functional simulator with ``workers``
    threads (0: the reference loop), a and b in device memory; ``patch`` sets raw 16-bit
    words of a, (row, column) -> bits (NaN payloads that encoding would not write)."""
    from systolic import FunctionalSimulator, get_arch
    from systolic.compiler import lower

    arch = get_arch(arch_name)
    low = lower(spec, arch)  # type: ignore[arg-type]
    sim = FunctionalSimulator(arch, dram_bytes=low.layout.dram_bytes, workers=workers)
    sim.write_dram(low.layout.a_offset, a, spec.dtype)  # type: ignore[attr-defined]
    sim.write_dram(low.layout.b_offset, b, spec.dtype)  # type: ignore[attr-defined]
    if patch:
        raw = sim.read_dram(low.layout.a_offset, a.shape,
                            spec.dtype).view(np.uint16)  # type: ignore[attr-defined]
        for (r, c), bits in patch.items():
            raw[r, c] = bits
    sim.run(low.program)
    return sim


def same_state(got: object, ref: object) -> None:
    """Two simulators ended alike: SBUF, PSUM and device memory byte for byte, and the same
    weight tiles latched, bit for bit."""
    for space in ("sbuf", "psum", "dram"):
        g, r = getattr(got.memory, space), getattr(ref.memory, space)  # type: ignore[attr-defined]
        assert np.array_equal(g, r), f"{space} differs from the reference loop's"
    assert got.tiles.keys() == ref.tiles.keys()  # type: ignore[attr-defined]
    for rect, values in ref.tiles.items():  # type: ignore[attr-defined]
        np.testing.assert_array_equal(
            np.ascontiguousarray(got.tiles[rect]).view(np.uint8),  # type: ignore[attr-defined]
            np.ascontiguousarray(values).view(np.uint8))


def first_op_spans(timing: object) -> dict[int, tuple[int, int]]:
    """Instruction index -> (start, end) of its first op in a whole-core timing (a ReadOut
    is two ops; the first is its PSUM evacuation)."""
    instr = np.asarray(timing.op_instr)  # type: ignore[attr-defined]
    idx, first = np.unique(instr, return_index=True)
    starts, ends = timing.starts[first], timing.ends[first]  # type: ignore[attr-defined]
    return {int(i): (int(s), int(e)) for i, s, e in zip(idx, starts, ends, strict=True)}


def kernel_values(tmp_path: object, body: str, *arrays: np.ndarray, name: str = "k",
                  **params: object) -> object:
    """The outputs of kernel ``name`` of the NKI source ``body`` (written under
    ``tmp_path``), run on the model with ``arrays`` (and ``params`` as its keywords)."""
    import systolic.nki as snki

    k = snki.load_kernel(str(write_kernel(tmp_path, body)), name)  # type: ignore[arg-type]
    return snki.values(k, list(arrays), params or None)


# The vendor's masking example (nki.api.shared.rst "NKI API Masking"), reworded: a square
# over the part of a [128, 512] tile that MASK selects, stored through an index past the
# [64, 256] output; the tests put in the mask (``SQUARE_MASKED.replace("MASK", ...)``)
SQUARE_MASKED = '''
@nki.jit
def k(x):
    out = nl.ndarray([64, 256], dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(512)[None, :]
    t = nl.load(x[i_p, i_f])
    sq = nl.square(t, mask=MASK)
    nl.store(out[i_p, i_f], sq[i_p, i_f], mask=MASK)
    return out
'''
