"""The N loop extrapolated too (systolic.extrapolate._n_reduced, issue 20): a product with
many chunks of N tiles is timed from stand-ins with a few chunks, each timed from its K
stand-ins or its M slice. Every figure must equal the full whole-core and Tensor Engine
schedules on products both can run: ragged M, K and N tiles, fp32 (two passes), fp8
DoubleRow, trn1, with the K level inside, and products whose stand-ins are unsteady, where
the N level must decline rather than be wrong."""

from __future__ import annotations

import pytest

import systolic.extrapolate as ex
from systolic.arch import get_arch
from systolic.compiler import MatmulSpec, lower
from systolic.compiler.tiling import tile
from systolic.isa import PerfMode
from systolic.views.report import Report, build_report


def _figures(rep: Report) -> tuple:
    c = rep.core
    return (rep.cycles, rep.readout_tail, rep.useful_macs, rep.units, rep.counts, c.latency,
            c.bound_ticks, c.busy_ticks, c.instructions, c.dma_bytes, c.hbm_bytes,
            c.useful_macs)


def _run(monkeypatch, arch: str, spec: MatmulSpec) -> tuple[Report, Report, list[bool]]:
    """(the extrapolated report, the full schedule's, whether the N level answered)."""
    a = get_arch(arch)
    monkeypatch.setattr(ex, "FULL_LIMIT", 0)
    used: list[bool] = []
    real = ex._n_reduced

    def spy(*args):  # type: ignore[no-untyped-def]
        got = real(*args)
        used.append(got is not None)
        return got

    monkeypatch.setattr(ex, "_n_reduced", spy)
    rep, low = ex.matmul_report(spec, a)
    assert (low is None) == (rep.slice_tiles > 0)
    return rep, build_report(lower(spec, a).program, a, spec), used


@pytest.mark.parametrize("arch, spec, n0, k_tiles", [
    # 16 K x 40 N moving tiles per M tile thrash the 168 moving slots: so must every
    # stand-in's, hence 3 chunks (16 x 12 > 168), not N_SLICE = 2 (16 x 8 = 128 fit)
    ("trn2", MatmulSpec(1280, 2048, 20480, "bf16"), 3, 0),
    ("trn2", MatmulSpec(1280, 2048, 20000, "bf16"), 3, 0),  # a ragged last N tile
    ("trn2", MatmulSpec(1200, 2048, 20480, "bf16"), 3, 0),  # a ragged last M tile
    ("trn2", MatmulSpec(1280, 2100, 20480, "bf16"), 3, 0),  # a ragged last K tile
    ("trn2", MatmulSpec(1280, 2048, 20480, "fp32"), 2, 10),  # K stand-ins inside
    ("trn1", MatmulSpec(1280, 2048, 20480, "bf16"), 3, 10),
    ("trn2", MatmulSpec(1280, 4096, 20480, "fp8_e4m3", PerfMode.DOUBLE_ROW), 3, 0),
    ("trn1", MatmulSpec(1280, 3072, 22000, "bf16"), 2, 12),
])
def test_n_extrapolated_report_equals_the_full_schedule(monkeypatch, arch, spec, n0, k_tiles):
    assert ex._n_start(spec, get_arch(arch)) == n0
    rep, full, used = _run(monkeypatch, arch, spec)
    assert used == [True] and rep.slice_k_tiles == k_tiles
    assert _figures(rep) == _figures(full)
    assert rep.to_dict()["tflops"] == pytest.approx(full.to_dict()["tflops"])


def test_unsteady_stand_ins_decline(monkeypatch):
    # 2 K x 48 N tiles: the N level is cheaper on paper, but the stand-ins' M slices never
    # settle (the moving tiles all fit, so the first M tile differs from the rest for
    # longer than MAX_SLICE tiles): the N level declines and the product is timed whole
    spec = MatmulSpec(1280, 256, 24576, "bf16")
    assert ex._n_start(spec, get_arch("trn2")) == ex.N_SLICE
    rep, full, used = _run(monkeypatch, "trn2", spec)
    assert used == [False] and rep.slice_tiles == 0
    assert _figures(rep) == _figures(full)


def test_stand_ins_outside_the_regime_are_never_used(monkeypatch):
    # with the regime ignored (2, 3 and 4 chunks), the 2-chunk stand-in's moving tiles fit
    # (16 x 8 <= 168) and the others' do not: the stand-ins disagree or do not settle, and
    # the product is timed another way, to the same figures as the full schedule
    spec = MatmulSpec(1280, 2048, 20480, "bf16")
    a = get_arch("trn2")
    monkeypatch.setattr(ex, "_n_start", lambda s, arch: ex.N_SLICE)
    rep, full, used = _run(monkeypatch, "trn2", spec)
    assert used == [False]
    assert _figures(rep) == _figures(full)
    mt = len(tile(spec, a).m_tiles)
    qs = [ex._m_slices(ex._n_spec(spec, a, c), a, mt, label=spec) for c in (2, 3, 4)]
    assert None in qs or ex._linear([q.q for q in qs], 6) is None  # type: ignore[union-attr]


@pytest.mark.parametrize("spec", [
    MatmulSpec(16384, 16384, 16384, "bf16"),  # 8 chunks: the K stand-ins cost less
    MatmulSpec(1280, 2048, 8192, "bf16"),  # 4 chunks: too few
    MatmulSpec(1280, 1024, 32768, "bf16"),  # its M slice costs less than the stand-ins
])
def test_n_level_not_taken_where_it_costs_more(spec):
    assert ex._n_start(spec, get_arch("trn2")) is None


def test_wide_products_cost_about_the_same():
    # flat in N: a 4x wider product is timed from stand-ins of the same sizes
    a = get_arch("trn2")
    one, four = (MatmulSpec(16384, 16384, n, "bf16") for n in (32768, 131072))
    sizes = [[ex._n_spec(s, a, c).n for c in (2, 3, 4)] for s in (one, four)]
    assert ex._n_start(one, a) == ex._n_start(four, a) == 2
    assert sizes[0] == sizes[1] == [4096, 6144, 8192]
