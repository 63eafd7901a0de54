"""The K loop extrapolated too (systolic.extrapolate._k_reduced): a product with many K
tiles is timed from stand-ins with a few of them, each from its own M slice. Every figure
must equal the full whole-core and Tensor Engine schedules, on products both can run, in
both cache regimes (moving tiles of an M tile resident or not)."""

from __future__ import annotations

import pytest

import systolic.extrapolate as ex
from systolic.arch import get_arch
from systolic.compiler import MatmulSpec, lower
from systolic.compiler.codegen import DenseState
from systolic.compiler.tiling import tile
from systolic.isa import PerfMode
from systolic.views.report import Report, build_report


def _figures(rep: Report) -> tuple:
    c = rep.core
    return (rep.cycles, rep.readout_tail, rep.useful_macs, rep.units, rep.counts, c.latency,
            c.bound_ticks, c.busy_ticks, c.instructions, c.dma_bytes, c.hbm_bytes,
            c.useful_macs)


@pytest.mark.parametrize("arch, spec, k_tiles", [
    ("trn2", MatmulSpec(1280, 2048, 1024, "bf16"), 10),
    ("trn2", MatmulSpec(768, 4096, 512, "bf16"), 10),
    ("trn1", MatmulSpec(1280, 2100, 2048, "bf16"), 10),  # a ragged last K tile
    ("trn3", MatmulSpec(1280, 4096, 1536, "fp8_e4m3"), 10),
    ("trn2", MatmulSpec(1280, 4096, 1024, "fp8_e4m3", PerfMode.DOUBLE_ROW), 10),
    ("trn2", MatmulSpec(1000, 2048, 700, "bf16"), 10),  # ragged M and N tiles
    ("trn1", MatmulSpec(896, 3000, 300, "bf16"), 10),
    # 64 K x 8 N moving tiles do not fit the moving window (168 slots): the stand-ins must
    # not fit either, so they have 22, 23 and 24 K tiles (168 // 8 + 1 = 22), not 8 to 10
    ("trn2", MatmulSpec(1280, 8192, 4096, "bf16"), 24),
])
def test_k_extrapolated_report_equals_the_full_schedule(monkeypatch, arch, spec, k_tiles):
    # k_tiles: the K tiles of the largest stand-in
    a = get_arch(arch)
    monkeypatch.setattr(ex, "FULL_LIMIT", 0)
    rep, low = ex.matmul_report(spec, a)
    assert low is None and rep.slice_k_tiles == k_tiles
    full = build_report(lower(spec, a).program, a, spec)
    assert _figures(rep) == _figures(full)
    assert rep.to_dict()["tflops"] == pytest.approx(full.to_dict()["tflops"])


def test_the_regime_bound_comes_from_the_compilers_slots():
    # the 168 of the case above is the compiler's own moving-window slot count: 3/4 of a
    # trn2 partition's SBUF over one 1 KiB bf16 tile row, not a number of this module's
    a = get_arch("trn2")
    st = DenseState.for_plan(a, tile(MatmulSpec(1280, 8192, 4096, "bf16"), a))
    assert len(st.mov.free) == (a.sbuf_bytes - a.sbuf_bytes // 4) // (512 * 2)


@pytest.mark.parametrize("spec", [
    MatmulSpec(1280, 2048, 8192, "bf16"),  # 16 K tiles, but the regime needs 11: too few
    MatmulSpec(1280, 1024, 1024, "bf16"),  # 8 K tiles
])
def test_too_few_k_tiles_keep_the_m_slice(monkeypatch, spec):
    a = get_arch("trn2")
    monkeypatch.setattr(ex, "FULL_LIMIT", 0)
    assert ex._k_reduced(spec, a, len(tile(spec, a).m_tiles)) is None
    rep, _ = ex.matmul_report(spec, a)
    assert rep.slice_k_tiles == 0


def test_stand_ins_whose_increments_differ_are_not_extrapolated(monkeypatch):
    # the K-linearity guard: real steady stand-ins grow by the same increment per K tile
    # (a grid of 144 products found none that did not), so the guard is made to fire by
    # bending the third stand-in's figures; the K level must then give up (None: the
    # caller times the M slice or the whole product) rather than extrapolate a curve
    a = get_arch("trn2")
    spec = MatmulSpec(1280, 2048, 1024, "bf16")
    real = ex._m_slices
    calls: list[int] = []

    def bent(s: MatmulSpec, arch, mt, label=None):
        got = real(s, arch, mt, label=label)
        calls.append(s.k)
        if got is not None and len(calls) == 3:
            key = next(iter(got.q))
            got = ex.dataclasses.replace(got, q={**got.q, key: got.q[key] + 1})
        return got

    assert ex._k_reduced(spec, a, 10) is not None  # 10 M tiles; straight: extrapolated
    calls.clear()
    monkeypatch.setattr(ex, "_m_slices", bent)
    assert ex._k_reduced(spec, a, 10) is None
    assert len(calls) == 3 and calls[0] < calls[1] < calls[2] < spec.k
