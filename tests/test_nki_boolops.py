"""Python's ``and`` / ``or`` / ``not`` in a kernel (nki/boolops.py): a mask joined with
``and`` is the two comparisons joined (NKI compiles the kernel from its source; the
vendor's test_nki_isa_nc_match_replace8.py writes ``mask=(ix < n // 2 and iy < m // 2)``),
and on plain Python values the three keep Python's meaning exactly; masks under the top-8
instructions and the selections apply (they were checked and dropped)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import SQUARE_MASKED, kernel_values, record_source

import systolic.nki as snki
from systolic.errors import KernelError
from systolic.isa import Activation
from systolic.nki.boolops import with_masks


@pytest.fixture(autouse=True)
def _hook() -> None:
    snki.install("trn2")


SQUARE = SQUARE_MASKED


@pytest.mark.parametrize("mask", ["(i_p < 64 and i_f < 256)",
                                  "(i_f < 256 and i_p < 64 and True)",
                                  "(True and i_p < 64 and i_f < 256)"])
def test_and_joins_two_comparisons_into_one_mask(tmp_path: Path, mask: str) -> None:
    x = (np.arange(128 * 512) % 17 - 8).astype(np.float32).reshape(128, 512)
    body = SQUARE.replace("MASK", mask)
    got = np.asarray(kernel_values(tmp_path, body, x), np.float64)
    assert np.array_equal(got, x[:64, :256].astype(np.float64) ** 2)
    act = [i for i in record_source(tmp_path, body, ["fp32[128,512]"]).program
           if isinstance(i, Activation)]
    assert len(act) == 1 and act[0].src.partitions == 64 and act[0].src.free_elems == 256


def test_a_mask_and_false_selects_nothing(tmp_path: Path) -> None:
    body = SQUARE.replace("sq = nl.square(t, mask=MASK)",
                          "sq = nl.square(t, mask=(i_p < 64 and i_f < 256))\n"
                          "    nl.square(t, mask=(i_p < 64 and 1 > 2))").replace(
        "MASK", "(i_p < 64 and i_f < 256)")
    act = [i for i in record_source(tmp_path, body, ["fp32[128,512]"]).program
           if isinstance(i, Activation)]
    assert len(act) == 1  # the second square selects nothing: no instruction


@pytest.mark.parametrize(("mask", "what"), [
    ("(i_p < 64 or i_f < 256)", "joined with `or`"),
    ("(not i_p < 64)", "`not` of a mask"),
    ("(i_p < 64 and 3)", "joined with `and` to a int"),
])
def test_or_and_not_of_a_mask_are_one_line_at_the_kernel_line(tmp_path: Path, mask: str,
                                                               what: str) -> None:
    with pytest.raises(KernelError, match=what) as exc:
        record_source(tmp_path, SQUARE.replace("MASK", mask), ["fp32[128,512]"])
    assert exc.value.line == 12 and exc.value.path.endswith("k.py")


def test_an_error_in_a_rewritten_kernel_names_its_own_line(tmp_path: Path) -> None:
    body = SQUARE.replace("MASK", "(i_p < 64 and i_f < 256)").replace(
        "    return out", "    assert x.shape[0] == 3, \"three rows\"\n    return out")
    with pytest.raises(KernelError, match="assertion failed: three rows") as exc:
        record_source(tmp_path, body, ["fp32[128,512]"])
    assert exc.value.line == 14


def _python(a: Any, b: Any, c: Any, log: list[str]) -> Any:
    def f(name: str, v: Any) -> Any:
        log.append(name)
        return v

    return (f("a", a) and f("b", b), f("a", a) or f("b", b) or f("c", c),
            not f("a", a), f("a", a) and f("b", b) and f("c", c),
            [v for v in (a, b, c) if v and not isinstance(v, str)], (f("b", b) and c) or a)


def test_plain_values_keep_pythons_meaning_exactly() -> None:
    """Every combination of operands: the same results (the operand objects themselves)
    and the same operands evaluated in the same order (short-circuit)."""
    rewritten = with_masks(_python)
    assert rewritten is not _python and rewritten._nki_masks_from is _python
    assert rewritten.__code__.co_firstlineno == _python.__code__.co_firstlineno
    values = [0, 1, 2, "", "x", None, [], [0], np.bool_(True), np.bool_(False), 0.0]
    for a, b, c in itertools.product(values, repeat=3):
        log1: list[str] = []
        log2: list[str] = []
        want, got = _python(a, b, c, log1), rewritten(a, b, c, log2)
        assert log1 == log2
        assert len(want) == len(got) and all(
            w is g or (isinstance(w, list) and w == g) for w, g in zip(want, got,
                                                                        strict=True))


def test_closure_cells_and_defaults_are_the_originals() -> None:
    n = 3

    def f(x: int, k: int = 10) -> Any:
        return (x > n and x < k, not x)

    g = with_masks(f)
    assert g is not f and g.__defaults__ == (10,) and g(5) == (True, False)
    n = 7  # the cell is shared, not copied
    assert g(5) == (False, False) and g(8, k=9) == (True, False)


def test_an_operand_with_a_walrus_is_left_as_python_has_it() -> None:
    def f(x: int) -> Any:
        ok = x > 0 and (y := x * 2) > 2
        return ok, y if ok else None

    assert with_masks(f)(2) == f(2) == (True, 4)
    assert with_masks(f)(-1) == f(-1) == (False, None)


def test_a_function_with_no_boolean_operator_is_kept() -> None:
    def f(x: int) -> int:
        return x + 1

    assert with_masks(f) is f


# the vendor's masked top-8 (test_nki_isa_nc_match_replace8.py), reworded: the mask
# applies to data, so the 8 largest are those of the masked part
TOP8 = '''
@nki.jit
def k(x):
    n, m = x.shape
    vals = nl.ndarray([n, 8], dtype=x.dtype, buffer=nl.shared_hbm)
    out = nl.ndarray([n, m], dtype=x.dtype, buffer=nl.shared_hbm)
    idx_out = nl.ndarray([n, 8], dtype=nl.int16, buffer=nl.shared_hbm)
    ix, iy = nl.mgrid[0:n, 0:m]
    t = nl.load(x)
    mx = nisa.max8(src=t[ix, iy], mask=(ix < n // 2 and iy < m // 2))
    idx = nisa.memset(shape=(n, 8), value=0, dtype=nl.int16)
    o = nisa.memset(shape=(n, m), value=7.0, dtype=x.dtype)
    o[ix, iy] = nisa.nc_match_replace8(dst_idx=idx[:, :], data=t[ix, iy], vals=mx, imm=-1.0,
                                       mask=(ix < n // 2 and iy < m // 2))
    m8 = nisa.memset(shape=(n, 8), value=5.0, dtype=x.dtype)
    m8[...] = mx
    nl.store(vals[0:n // 2, :], value=m8[0:n // 2, :])
    nl.store(out, value=o)
    nl.store(idx_out, value=idx)
    return vals, out, idx_out
'''


def test_a_mask_on_the_top8_instructions_applies_to_data(tmp_path: Path) -> None:
    x = np.random.default_rng(3).permutation(128 * 64).astype(np.float32).reshape(128, 64)
    vals, out, idx = (np.asarray(a) for a in kernel_values(tmp_path, TOP8, x))
    part = x[:64, :32]
    order = np.argsort(-part, axis=1)[:, :8]
    assert np.array_equal(vals[:64], np.take_along_axis(part, order, axis=1))
    assert np.array_equal(idx[:64], order) and not idx[64:].any()
    want = np.full_like(x, 7.0)  # outside the mask: what the memset left
    want[:64, :32] = part
    np.put_along_axis(want[:64, :32], order, -1.0, axis=1)
    assert np.array_equal(out, want)


SELECT = '''
@nki.jit
def k(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(64)[None, :]
    o = nl.add(t, 1.0)
    o[...] = nisa.affine_select(i_p >= i_f, t, -5.0, mask=MASK)
    nl.store(out, value=o)
    return out
'''


def test_a_false_mask_on_a_selection_makes_no_instruction(tmp_path: Path) -> None:
    x = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)
    got = np.asarray(kernel_values(tmp_path, SELECT.replace("MASK", "(1 > 2)"), x))
    assert np.array_equal(got, x + 1)  # skipped, as the docs' mask says; it ran before
    got = np.asarray(kernel_values(tmp_path, SELECT.replace("MASK", "(2 > 1)"), x))
    want = np.where(np.arange(128)[:, None] >= np.arange(64)[None, :], x, -5.0)
    assert np.array_equal(got, want)


def test_a_partial_mask_on_a_selection_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(KernelError, match="not modelled on affine_select") as exc:
        record_source(tmp_path, SELECT.replace("MASK", "(i_p < 64)"), ["fp32[128,64]"])
    assert exc.value.line == 13


def test_the_same_kernel_in_two_files_keeps_each_files_name(tmp_path: Path) -> None:
    """Code objects compare equal across files; each kernel's errors name its own file."""
    body = SQUARE.replace("MASK", "(i_p < 64 and i_f < 256)").replace(
        "    return out", "    assert x.shape[0] == 3, \"three rows\"\n    return out")
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir()
        with pytest.raises(KernelError, match="three rows") as exc:
            record_source(tmp_path / sub, body, ["fp32[128,512]"])
        assert exc.value.path == str(tmp_path / sub / "k.py")
