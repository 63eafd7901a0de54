"""The regular-run path (systolic.extrapolate) against the full whole-core and Tensor
Engine schedules, on products both can run: every figure must agree exactly."""

from __future__ import annotations

import pytest

import systolic.extrapolate as ex
from systolic.arch import get_arch
from systolic.compiler import MatmulSpec, lower
from systolic.isa import PerfMode
from systolic.views.report import build_report


@pytest.mark.parametrize("arch, spec", [
    ("trn2", MatmulSpec(1024, 512, 1024, "bf16")),
    ("trn2", MatmulSpec(1000, 300, 2100, "bf16")),
    ("trn1", MatmulSpec(1280, 256, 4096, "bf16")),
    ("trn2", MatmulSpec(896, 128, 2048, "bf16")),
    ("trn3", MatmulSpec(1152, 384, 1536, "fp8_e4m3")),
    ("trn2", MatmulSpec(1280, 256, 1024, "fp32")),
    ("trn2", MatmulSpec(1408, 512, 1024, "fp8_e4m3", PerfMode.DOUBLE_ROW)),
    # chosen to be unsteady (issue 21): a ragged last M tile, few M tiles, N under one
    # bank; their slices do not repeat block for block, so they must come out timed whole
    # or (trn1, trn2 1100) from a longer slice, never extrapolated from a short one
    ("trn2", MatmulSpec(1000, 384, 512, "bf16")),
    ("trn3", MatmulSpec(700, 384, 300, "bf16")),
    ("trn2", MatmulSpec(640, 128, 128, "bf16")),
    ("trn1", MatmulSpec(1000, 384, 512, "bf16")),
    ("trn2", MatmulSpec(1100, 2048, 200, "bf16")),
])
def test_extrapolated_report_equals_the_full_schedule(monkeypatch, arch, spec):
    a = get_arch(arch)
    monkeypatch.setattr(ex, "FULL_LIMIT", 0)
    rep, low = ex.matmul_report(spec, a)
    full = build_report(lower(spec, a).program, a, spec)
    # either extrapolated from a steady slice, or (no steady state) timed whole
    assert (rep.slice_tiles > 0) == (low is None)
    assert (rep.cycles, rep.readout_tail, rep.useful_macs) == \
        (full.cycles, full.readout_tail, full.useful_macs)
    assert rep.units == full.units and rep.counts == full.counts
    # in the same order too: the text report's program row and the JSON list them so
    assert list(rep.counts) == list(full.counts)
    c, f = rep.core, full.core
    assert c.latency == f.latency
    assert c.bound_ticks == f.bound_ticks
    assert c.busy_ticks == f.busy_ticks
    assert c.instructions == f.instructions
    assert (c.dma_bytes, c.hbm_bytes, c.useful_macs) == (f.dma_bytes, f.hbm_bytes,
                                                         f.useful_macs)
    assert rep.to_dict()["tflops"] == pytest.approx(full.to_dict()["tflops"])


def test_regular_products_do_extrapolate(monkeypatch):
    monkeypatch.setattr(ex, "FULL_LIMIT", 0)
    rep, low = ex.matmul_report(MatmulSpec(2048, 512, 1024, "bf16"), get_arch("trn2"))
    assert low is None and rep.slice_tiles in (3, 5)


@pytest.mark.parametrize("arch, spec", [
    ("trn2", MatmulSpec(1000, 300, 2100, "bf16")),
    ("trn1", MatmulSpec(1000, 384, 512, "bf16")),
])
def test_a_ragged_product_with_a_steady_slice_extrapolates(monkeypatch, arch, spec):
    # a ragged last M tile is the slice's own last block, left out of the increments
    # (module docstring); these two settle within MAX_SLICE tiles, so they are timed from
    # their slice, to the full schedule's latency and Tensor Engine cycles
    a = get_arch(arch)
    monkeypatch.setattr(ex, "FULL_LIMIT", 0)
    rep, low = ex.matmul_report(spec, a)
    assert low is None and 4 <= rep.slice_tiles <= ex.MAX_SLICE
    full = build_report(lower(spec, a).program, a, spec)
    assert (rep.core.latency, rep.cycles) == (full.core.latency, full.cycles)


@pytest.mark.parametrize("dims", [("99999999999999999999", "128", "128"),
                                  ("128", "128", "99999999999999999999")])
def test_a_huge_product_is_refused_before_any_tile_is_built(dims, capsys) -> None:
    # issue 22 H1: matmul_report used to build the tile lists (a 10^20-element range of M
    # tiles) before the size check, and ran for minutes past 4 GB
    from systolic.cli import main

    assert main(["matmul", *dims, "--json"]) == 2
    err = capsys.readouterr().err
    assert "lowers to" in err and "at most 16,777,216" in err and err.count("\n") == 1
