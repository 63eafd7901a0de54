"""A mutation fuzzer over the example kernels (issue 22: "never hangs, never crashes, never
lies"): each case changes one thing in one kernel of examples/kernels (drops a keyword,
gives a keyword another value, changes a slice, a dtype or an integer constant, or changes
the shapes and dtypes of the inputs) and runs it. Every case must end one of two ways:

* it runs, and then (a) its output does not depend on memory nothing wrote: it is run twice,
  unwritten bytes starting as 0xFF (NaN) and as 0x00, and the two outputs agree bit for bit;
  and (b) where the kernel's code is unchanged, the output equals a float64 reference of
  what the kernel computes (small integer inputs, so the fp32 sums are exact and the only
  rounding is to the output format, done here with ml_dtypes);
* or it is refused with one :class:`~systolic.errors.SystolicError` line that is not the
  model's own failure ("an NKI call failed inside the model").

Anything else is counted as ``crash`` (another exception, a multi-line or internal
message), ``hang`` (the case outran its time guard) or ``wrong`` (outputs differ with the
fill, or from the reference). In CI hypothesis draws a few cases per kernel; a longer run:

    PYTHONPATH=src python tests/test_nki_fuzz.py --cases 2000 --seed 1

prints the counts: tried / clean error / ok / crash / hang / wrong.
"""

from __future__ import annotations

import ast
import random
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import systolic.nki as snki
from systolic.errors import SystolicError
from systolic.nki.record import RecordingTimeout, time_guard
from systolic.nki.run import execute, record, unwritten

EX = Path(__file__).resolve().parents[1] / "examples" / "kernels"
BF16 = ml_dtypes.bfloat16
# the guards a fuzz case runs under: small, since the cases are small
MAX_OPS = 20_000
RECORD_S = 10.0
CASE_S = 60.0  # recording, building and both simulations; past it the case is a hang


def _ints(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """Small integers: exact in every float format here, their products and fp32 sums too."""
    return rng.integers(-3, 4, shape).astype(dtype)


def _mm_ref(k_unit: int, out_dtype: Any = None) -> Callable[..., np.ndarray]:
    """lhsT.T @ rhs over the rows the kernel's K loop covers (K // k_unit tiles of k_unit),
    rounded once to the output's format (lhsT's, unless ``out_dtype``)."""

    def ref(args: list[np.ndarray], params: dict[str, Any]) -> np.ndarray:
        a, b = args
        unit = k_unit * params.get("TILES_K", 1)
        k = a.shape[0] // unit * unit
        exact = a[:k].astype(np.float64).T @ b[:k].astype(np.float64)
        return exact.astype(out_dtype or a.dtype)

    return ref


def _softmax_ref(args: list[np.ndarray], params: dict[str, Any]) -> np.ndarray | None:
    return None  # exp is not exact: the elementwise tests check it (test_nki_elementwise)


@dataclass(frozen=True)
class Example:
    """An example kernel: its function, arch, argument shapes (list of (shape, dtype)),
    parameters and float64 reference (None: only the fill check)."""

    file: str
    function: str
    arch: str
    args: tuple[tuple[tuple[int, ...], Any], ...]
    params: tuple[tuple[str, int], ...] = ()
    ref: Callable[..., np.ndarray | None] | None = None


_MM2 = (((256, 128), BF16), ((256, 1024), BF16))
EXAMPLES: dict[str, Example] = {e.function: e for e in (
    Example("basic_matmul.py", "basic_matmul", "trn2", (((128, 64), BF16), ((128, 512), BF16)),
            ref=_mm_ref(128)),
    Example("tiled_matmul.py", "tiled_matmul", "trn2", _MM2, ref=_mm_ref(128)),
    Example("tiled_matmul_legacy.py", "tiled_matmul_legacy", "trn2", _MM2, ref=_mm_ref(128)),
    Example("blocked_matmul.py", "blocked_matmul", "trn2", _MM2, (("TILES_N", 2),),
            ref=_mm_ref(128)),
    Example("hoisted_matmul.py", "hoisted_matmul", "trn2", _MM2, ref=_mm_ref(128)),
    Example("block_free_matmul.py", "block_free_matmul", "trn2",
            (((256, 256), BF16), ((256, 1024), BF16)), (("TILES_M", 2), ("TILES_N", 2)),
            ref=_mm_ref(128)),
    Example("block_all_matmul.py", "block_all_matmul", "trn2",
            (((256, 256), BF16), ((256, 1024), BF16)),
            (("TILES_M", 2), ("TILES_N", 2), ("TILES_K", 2)), ref=_mm_ref(128)),
    Example("fp8_double_row.py", "fp8_double_row", "trn2",
            (((256, 128), ml_dtypes.float8_e4m3), ((256, 512), ml_dtypes.float8_e4m3)),
            ref=_mm_ref(256, np.float32)),
    Example("softmax.py", "softmax", "trn2", (((128, 64), np.float32),), ref=_softmax_ref),
    Example("rmsnorm.py", "rmsnorm", "trn2", (((128, 64), np.float32),), ref=None),
)}

# -- mutations ------------------------------------------------------------------------------
VALUES = ("None", "0", "-1", "1", "128", "(0, 0)", "True", "'bogus'", "1e39", "2.5",
          "nl.float8_e4m3", "nl.int8", "nl.psum", "nl.sbuf", "nl.add", "nl.exp", "(128, 64)",
          "[[1, 2]]")
DTYPES = ("bfloat16", "float32", "float16", "float8_e4m3", "float8_e5m2", "int8", "uint8",
          "tfloat32")
INTS = (0, 1, 2, 64, 100, 129, 256, 513, -1, 10**6)
SHAPES = (1, 64, 100, 128, 200, 256, 384, 512, 600, 1024)
ARG_DTYPES = (BF16, np.float32, np.float16, ml_dtypes.float8_e4m3, ml_dtypes.float8_e5m2,
              np.int8)


def _sites(tree: ast.AST) -> list[tuple[str, ast.AST]]:
    """Every place a mutation may change, in source order."""
    out: list[tuple[str, ast.AST]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.keywords:
            out.append(("drop", node))
            out.append(("value", node))
        elif isinstance(node, ast.Slice):
            out.append(("slice", node))
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.value.id == "nl" and node.attr in DTYPES):
            out.append(("dtype", node))
        elif (isinstance(node, ast.Constant) and type(node.value) is int
              and not isinstance(node.value, bool)):
            out.append(("int", node))
    return out


def mutate(source: str, site: int, choice: int) -> tuple[str, str]:
    """The source with one change (site and choice taken modulo what exists), and what it
    was, for the report."""
    tree = ast.parse(source)
    sites = _sites(tree)
    kind, node = sites[site % len(sites)]
    line = getattr(node, "lineno", 0)
    if kind == "drop":
        assert isinstance(node, ast.Call)
        kw = node.keywords.pop(choice % len(node.keywords))
        what = f"line {line}: dropped {kw.arg}="
    elif kind == "value":
        assert isinstance(node, ast.Call)
        kw = node.keywords[choice % len(node.keywords)]
        new = VALUES[(choice // len(node.keywords)) % len(VALUES)]
        kw.value = ast.parse(new, mode="eval").body
        what = f"line {line}: {kw.arg}={new}"
    elif kind == "slice":
        assert isinstance(node, ast.Slice)
        how = choice % 6
        if how == 0:
            node.step = ast.Constant(0)
        elif how == 1:
            node.step = ast.Constant(2)
        elif how == 2:
            node.upper = None
        elif how == 3 and node.upper is not None:
            node.upper = ast.BinOp(node.upper, ast.Add(), ast.Constant(1))
        elif how == 4:
            node.lower = node.upper
        else:
            node.step = ast.UnaryOp(ast.USub(), ast.Constant(1))
        what = f"line {line}: slice change {how}"
    elif kind == "dtype":
        assert isinstance(node, ast.Attribute)
        node.attr = DTYPES[choice % len(DTYPES)]
        what = f"line {line}: dtype nl.{node.attr}"
    else:
        assert isinstance(node, ast.Constant)
        node.value = INTS[choice % len(INTS)]
        what = f"line {line}: int {node.value}"
    return ast.unparse(ast.fix_missing_locations(tree)), what


def mutate_args(ex: Example, choice: int) -> tuple[tuple[tuple[int, ...], Any], ...]:
    """The example's arguments with one dimension or one dtype changed."""
    args = [list(a) for a in ex.args]
    i = choice % len(args)
    shape = args[i][0]
    if (choice // len(args)) % 3 == 0:
        args[i][1] = ARG_DTYPES[(choice // 7) % len(ARG_DTYPES)]
    else:
        d = (choice // 3) % len(shape)
        shape = list(shape)
        shape[d] = SHAPES[(choice // 11) % len(SHAPES)]
        args[i][0] = tuple(shape)
    return tuple((tuple(s), d) for s, d in args)


# -- running a case -------------------------------------------------------------------------
@dataclass
class Outcome:
    kind: str  # ok, clean, crash, hang, wrong
    detail: str


def _same(x: np.ndarray, y: np.ndarray) -> bool:
    return x.shape == y.shape and x.tobytes() == y.tobytes()


def run_case(ex: Example, source: str, args: tuple[tuple[tuple[int, ...], Any], ...],
             code_changed: bool, folder: Path, seed: int = 0) -> Outcome:
    path = folder / ex.file
    path.write_text(source)
    rng = np.random.default_rng(seed)
    arrays = [_ints(rng, s, d) for s, d in args]
    params = dict(ex.params)
    try:
        with time_guard(CASE_S):
            fn = snki.load_kernel(str(path), ex.function)
            rec = record(fn, arrays, params, arch=ex.arch, max_ops=MAX_OPS,
                         time_limit_s=RECORD_S)
            short = unwritten(rec)
            if short is not None:  # systolic kernel and the sweep refuse it, one line
                return Outcome("clean", short)
            outs = [execute(rec, arrays, fill=f) for f in (0xFF, 0x00)]
    except RecordingTimeout:
        return Outcome("hang", f"past {CASE_S:g} s")
    except SystolicError as exc:
        text = str(exc)
        if "\n" in text or "inside the model" in text or "please report" in text:
            return Outcome("crash", text)
        return Outcome("clean", text)
    except Exception as exc:  # the model's own failure
        return Outcome("crash", f"{type(exc).__name__}: {exc}")
    a, b = (o if isinstance(o, tuple | list) else (o,) for o in outs)
    if len(a) != len(b) or not all(_same(np.asarray(x), np.asarray(y)) for x, y in
                                   zip(a, b, strict=True)):
        return Outcome("wrong", "the output depends on memory nothing wrote")
    if not code_changed and ex.ref is not None:
        want = ex.ref(arrays, params)
        got = np.asarray(a[0])
        if want is not None and not (got.shape == want.shape and np.array_equal(
                got.astype(np.float64), want.astype(np.float64))):
            return Outcome("wrong", f"differs from the float64 reference ({got.shape})")
    return Outcome("ok", "")


def case(name: str, site: int, choice: int, folder: Path) -> tuple[Outcome, str]:
    """One fuzz case: ``site`` < 0 mutates the inputs, else the code."""
    ex = EXAMPLES[name]
    source = (EX / ex.file).read_text()
    if site < 0:
        args, what = mutate_args(ex, choice), "inputs"
        out = run_case(ex, source, args, False, folder)
        return out, f"{name} {what} {[(s, np.dtype(d).name) for s, d in args]}"
    new, what = mutate(source, site, choice)
    return run_case(ex, new, ex.args, True, folder), f"{name} {what}"


@pytest.fixture(autouse=True)
def _hook() -> None:
    snki.install("trn2")


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_each_example_unchanged_matches_its_reference(name: str, tmp_path: Path) -> None:
    """The baseline: every example runs clean, its output independent of the fill and equal
    to the float64 reference."""
    ex = EXAMPLES[name]
    out = run_case(ex, (EX / ex.file).read_text(), ex.args, False, tmp_path)
    assert out.kind == "ok", out.detail


def test_a_read_of_unwritten_memory_is_refused_before_it_runs(tmp_path: Path) -> None:
    """What the fill oracle would catch is refused when the kernel is built (issue 19 item
    6), in one line naming the tile: a matmul by a tile loaded only half, the fuzzer's
    DoubleRow kernel with one of its two row loads (``static_range(1)``), and a kernel that
    never loads the tile at all."""
    ex = EXAMPLES["basic_matmul"]
    text = (EX / ex.file).read_text()
    half = text.replace("nisa.dma_copy(dst=b, src=rhs)",
                        "nisa.dma_copy(dst=b[:, 0:256], src=rhs[:, 0:256])")
    out = run_case(ex, half, ex.args, True, tmp_path)
    assert half != text and out.kind == "clean" and "nothing wrote" in out.detail
    none = text.replace("    nisa.dma_copy(dst=b, src=rhs)\n", "")
    out = run_case(ex, none, ex.args, True, tmp_path)
    assert out.kind == "clean" and "nothing was written" in out.detail
    dr = EXAMPLES["fp8_double_row"]
    text = (EX / dr.file).read_text()
    one = text.replace("nl.static_range(2)", "nl.static_range(1)")
    out = run_case(dr, one, dr.args, True, tmp_path)
    assert one != text and out.kind == "clean", out.detail
    assert "made at line 24" in out.detail and "\n" not in out.detail
    # the Python API refuses it too, not only the fuzzer's two-fill run
    path = tmp_path / dr.file
    rng = np.random.default_rng(0)
    arrays = [_ints(rng, s, d) for s, d in dr.args]
    with pytest.raises(SystolicError, match="nothing wrote"):
        snki.values(snki.load_kernel(str(path), dr.function), arrays)


def test_execute_fills_unwritten_memory_with_the_byte_asked(tmp_path: Path) -> None:
    """The oracle's second fill reaches device memory: the elements of an output that the
    kernel never writes (allowed from Python; the CLI refuses them) hold the fill byte, so
    two fills tell them apart (a fill ignored would leave the oracle blind)."""
    path = tmp_path / "half.py"
    path.write_text(
        "import neuronxcc.nki as nki\n"
        "import neuronxcc.nki.isa as nisa\n"
        "import neuronxcc.nki.language as nl\n\n\n"
        "@nki.jit\n"
        "def half(x):\n"
        "    out = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)\n"
        "    t = nl.ndarray((64, 8), dtype=nl.float32, buffer=nl.sbuf)\n"
        "    nisa.dma_copy(dst=t, src=x[0:64, :])\n"
        "    nisa.dma_copy(dst=out[0:64, :], src=t)\n"
        "    return out\n")
    x = np.arange(128 * 8, dtype=np.float32).reshape(128, 8)
    rec = snki.record(snki.load_kernel(str(path), "half"), [x])
    for fill in (0xFF, 0x00, 0x3F):
        out = np.asarray(execute(rec, [x], fill=fill))
        assert np.array_equal(out[:64], x[:64])
        want = np.frombuffer(bytes([fill]) * 4, dtype=np.float32)[0]
        assert np.array_equal(out[64:].view(np.uint32),
                              np.full((64, 8), want, np.float32).view(np.uint32))


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(sorted(EXAMPLES)), site=st.integers(-3, 400),
       choice=st.integers(0, 10_000))
def test_a_mutated_example_runs_right_or_is_refused_in_one_line(
        name: str, site: int, choice: int, tmp_path: Path) -> None:
    with tempfile.TemporaryDirectory() as d:
        out, what = case(name, site, choice, Path(d))
    assert out.kind in ("ok", "clean"), f"{what}: {out.kind}: {out.detail}"


def main(argv: list[str]) -> int:
    import argparse

    p = argparse.ArgumentParser(description="the NKI mutation fuzzer, a longer run")
    p.add_argument("--cases", type=int, default=500)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--show", type=int, default=20, help="failures to print")
    opts = p.parse_args(argv)
    snki.install("trn2")
    rnd = random.Random(opts.seed)
    counts = {k: 0 for k in ("clean", "ok", "crash", "hang", "wrong")}
    shown = 0
    with tempfile.TemporaryDirectory() as d:
        for _ in range(opts.cases):
            name = rnd.choice(sorted(EXAMPLES))
            site = rnd.randint(-3, 400)
            out, what = case(name, site, rnd.randint(0, 10_000), Path(d))
            counts[out.kind] += 1
            if out.kind not in ("ok", "clean") and shown < opts.show:
                shown += 1
                print(f"{out.kind}: {what}: {out.detail[:300]}", flush=True)
    print(f"tried {opts.cases}: clean error {counts['clean']}, ran ok {counts['ok']}, "
          f"crash {counts['crash']}, hang {counts['hang']}, silently wrong {counts['wrong']}")
    return 0 if counts["crash"] + counts["hang"] + counts["wrong"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
