"""A sweep's matmul point (issue 20's fast path: the whole core timed without what-if plans,
busy times and the Tensor Engine's breakdown in plain Python, access patterns shared by the
compiler across products and their regions, rectangles and DMA plans kept across programs)
reports every figure the full path does: ``time_op``'s Report with its whole core timed on
first use (what-ifs on), busy times and breakdown by numpy, no pattern, region, rectangle,
DMA plan, tile plan or cost kept from an earlier program (memos by Arch object included)."""

from __future__ import annotations

from typing import Any

import pytest

from systolic.compiler import codegen, tiling
from systolic.sweep import evaluate
from systolic.timing import core as tcore
from systolic.timing import costs
from systolic.views import report as vreport
from systolic.workload import time_op

POINTS: list[dict[str, Any]] = [
    {"arch": "trn2", "m": m, "k": k, "n": n}
    for m, k, n in [(64, 64, 64), (128, 640, 576), (320, 320, 320), (640, 192, 640),
                    (576, 448, 64), (1, 1, 1), (257, 129, 1025)]
] + [
    {"arch": "trn2", "m": 300, "k": 500, "n": 700, "dtype": d, "perf_mode": pm}
    for d, pm in [("fp32", "none"), ("fp8_e4m3", "double_row"), ("int8", "none")]
] + [
    {"arch": "trn3", "m": 256, "k": 256, "n": 512, "dtype": "mxfp8_e4m3"},
    {"arch": "trn1", "m": 1000, "k": 1000, "n": 1000},
    {"arch": "trn2", "m": 2048, "k": 2048, "n": 2048},  # timed whole, over BUSY_NUMPY ops
    {"arch": "trn2", "m": 4096, "k": 512, "n": 4096},  # from a slice (extrapolate.py)
    {"arch": "trn2", "m": 384, "k": 512, "n": 512, "dma_engines": 3},
]


def _full(spec: Any, arch: Any) -> Any:
    return time_op(spec, arch)[0]


def _plain(monkeypatch: pytest.MonkeyPatch) -> None:
    """The full path: no shortcut of the sweep's, nothing kept from an earlier program."""
    monkeypatch.setattr(evaluate, "_timed", _full)
    monkeypatch.setattr(tcore, "BUSY_NUMPY", -1)
    monkeypatch.setattr(vreport, "BREAKDOWN_NUMPY", -1)
    for mod, name in [(tcore, "_REGIONS"), (tcore, "_DMA_OF"),
                      (tcore, "_DMA_COSTS"), (codegen, "_PATTERNS")]:
        monkeypatch.setattr(mod, name, {})
    for memo in (tcore._arch_tables, costs._cached, tiling.tile):  # by value: emptied
        memo.cache_clear()


@pytest.mark.parametrize("point", POINTS, ids=lambda p: "-".join(map(str, p.values())))
def test_sweep_point_equals_the_full_path(monkeypatch, point: dict[str, Any]) -> None:
    target = evaluate.matmul_target()
    evaluate._timed.cache_clear()
    got = evaluate.evaluate_point(target, point)
    _plain(monkeypatch)
    want = evaluate.evaluate_point(target, point)
    assert got == want


def test_a_run_of_points_sharing_patterns_equals_each_point_alone(monkeypatch) -> None:
    """Points one after another, as a sweep runs them (the compiler's patterns, their
    regions, rectangles and DMA plans found by earlier products), report what each reports
    on the full path with every memo empty; products of one tile plan and of neighbouring
    ones share most of their patterns."""
    target = evaluate.matmul_target()
    points = [{"arch": "trn2", "m": m, "k": k, "n": n}
              for m, k, n in [(320, 320, 320), (320, 320, 384), (320, 384, 320), (384, 320, 320),
                              (64, 640, 640), (640, 64, 64), (320, 320, 320), (128, 128, 128),
                              (130, 200, 700), (320, 320, 320)]]
    points += [{**p, "dtype": "fp32"} for p in points[:3]]
    points += [{"arch": "trn2", "m": 320, "k": 512, "n": 320, "dtype": "fp8_e4m3",
                "perf_mode": "double_row"}, {"arch": "trn2", "m": 320, "k": 320, "n": 320,
                                             "dma_engines": 5}]
    evaluate._timed.cache_clear()
    got = [evaluate.evaluate_point(target, p) for p in points]
    for p, g in zip(points, got, strict=True):
        with monkeypatch.context() as mp:
            _plain(mp)
            assert evaluate.evaluate_point(target, p) == g, p


@pytest.mark.parametrize("m,k,n,dtype,mode,arch", [
    (320, 192, 576, "bf16", "none", "trn2"), (300, 500, 700, "fp32", "none", "trn2"),
    (256, 512, 512, "fp8_e4m3", "double_row", "trn2"), (200, 300, 100, "int8", "none", "trn2"),
    (256, 256, 512, "mxfp8_e4m3", "none", "trn3"), (1, 1, 1, "bf16", "none", "trn1"),
    (1000, 1000, 1000, "bf16", "none", "trn1")])
def test_breakdown_in_python_equals_numpy(monkeypatch, m: int, k: int, n: int, dtype: str,
                                          mode: str, arch: str) -> None:
    """``_breakdown_small`` (up to BREAKDOWN_NUMPY MatMuls) and the numpy sums give the same
    integers, on products of every kind of MatMul (fp32 halves, DoubleRow, MX, ragged), and
    those integers account for every cycle."""
    from systolic.api import make_spec
    from systolic.arch import get_arch
    from systolic.compiler import lower
    from systolic.timing.tensor_engine import schedule

    a = get_arch(arch)
    sch = schedule(lower(make_spec(m, k, n, dtype, a, mode), a).program, a)
    for pack in (1, 2, 4):
        small = vreport._breakdown_units(sch, pack)
        # independent of either way of summing: the causes share out every cycle of the
        # schedule, each cycle worth 2 * rows * cols * pack units (the module docstring)
        assert sum(small.values()) == sch.cycles * 2 * a.rows * a.cols * pack
        with monkeypatch.context() as mp:  # the numpy path, then the module's own limit
            mp.setattr(vreport, "BREAKDOWN_NUMPY", -1)
            assert vreport._breakdown_units(sch, pack) == small


def test_breakdown_floats_are_the_nearest_to_the_exact_fractions() -> None:
    """``Report.breakdown`` divides integers (issue 20) where it converted Fractions: the
    same floats, for real reports and for units up to 2**80."""
    import dataclasses
    import random

    from systolic.api import make_spec
    from systolic.arch import get_arch

    arch = get_arch("trn2")
    rng = random.Random(20)
    for m, k, n, dt, mode in [(320, 192, 576, "bf16", "none"), (300, 500, 700, "fp32", "none"),
                              (256, 512, 512, "fp8_e4m3", "double_row")]:
        rep = time_op(make_spec(m, k, n, dt, arch, mode), arch)[0]
        wild = dataclasses.replace(rep, units={c: rng.randrange(1 << rng.randrange(1, 80))
                                               for c in rep.units})
        for r in (rep, wild):
            assert r.breakdown == {c: float(f) for c, f in r.exact_breakdown().items()}


@pytest.mark.parametrize("m,k,arch", [(384, 1024, "trn1"), (1920, 512, "trn2"),
                                      (384, 512, "trn2"), (1536, 1408, "trn2")])
def test_a_sweep_point_reports_the_one_product_commands_latency(
        m: int, k: int, arch: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Bit for bit: ``systolic matmul M K 512 --json``'s latency_us and the sweep's, for
    products where ``latency * 1e6 / tick_hz`` and the sweep's seconds * 1e6 differed in
    the last bit (test_sweep_signals compared three arbitrary points and failed 2 runs in 7)."""
    import json

    from systolic.cli import main

    got = evaluate.evaluate_point(evaluate.matmul_target(), {"m": m, "k": k, "n": 512,
                                                             "arch": arch})
    assert main(["matmul", str(m), str(k), "512", "--arch", arch, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["core"]["latency_us"] == got["latency_us"]
