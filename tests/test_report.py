"""The report: utilization and the loss breakdown against closed forms (seed 003, FACTS).

Seed 003's ceilings: K = 64 or M = 64 uses half the array; N = 32 pays for 64 cycles
(50%); fp32 costs 4x; a 2048^3 bf16 product runs near peak. The breakdown must add up to
the total exactly, and achieved TFLOP/s never exceed the format's peak.
"""

from __future__ import annotations

import dataclasses
import json
import xml.etree.ElementTree as ET
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_timing import ACC, START, STOP, TRN2, Build, readout_bound_case

from systolic import matmul
from systolic.arch import get_arch
from systolic.compiler import MatmulSpec, lower
from systolic.geometry import interval_union as _merge
from systolic.isa import PerfMode, Program
from systolic.views.notebook import timeline_svg
from systolic.views.report import CAUSES, build_report, report_fields


def report_of(spec: MatmulSpec, arch=TRN2):
    return build_report(lower(spec, arch).program, arch, spec)


def test_seed_3x3x3_breakdown():
    arch = dataclasses.replace(TRN2, rows=3, cols=3)
    prog = Build(arch).load(3, 3).mm(3, 3, 3, START | STOP).read(3, 3).program()
    rep = build_report(prog, arch)
    ex = rep.exact_breakdown()
    # seed 003: 27 MACs; the instruction takes N + K + M - 2 = 7 cycles: 3 full-array
    # cycles of work, K + M - 2 = 4 of fill and drain; the 1-cycle weight load before it
    assert (ex["useful"], ex["fill_drain"], ex["weight_load"]) == (3, 4, 1)
    assert rep.cycles == 8 and rep.useful_macs == 27
    assert rep.utilization == pytest.approx(27 / (8 * 9))
    assert ex["useful"] / (ex["useful"] + ex["fill_drain"]) == Fraction(27, 63)  # 43%


def test_short_moving_tiles_reach_half_of_peak():
    t = 2000
    rep = build_report(Build().chain(t, 128, 128, 32).program(), TRN2)
    cycles = 32 + (t - 1) * 64 + (32 + 254)
    assert rep.cycles == cycles
    ex = rep.exact_breakdown()
    assert ex["useful"] == 32 * t and ex["short_moving"] == 32 * (t - 1)
    assert rep.utilization == pytest.approx(32 * t / cycles)
    assert 0.49 < rep.utilization < 0.5


@pytest.mark.parametrize("axis", ["k", "m"])
def test_half_the_rows_or_columns_give_half_of_peak(axis):
    m, k = (1024, 64) if axis == "k" else (64, 1024)
    # one K tile per output tile: at trn2's read-out rate the read-out engine, not the
    # array, would bound K = 64 (see docs/timing.md); a fast read-out isolates the array
    arch = dataclasses.replace(TRN2, readout_elems_per_cycle=4.0)
    rep = report_of(MatmulSpec(m, k, 2048, "bf16"), arch)
    ex = rep.exact_breakdown()
    idle = ex["rows_idle" if axis == "k" else "cols_idle"]
    assert idle == ex["useful"]  # exactly half of every issue slot
    assert 0.48 < rep.utilization < 0.5
    k, m = (64, 128) if axis == "k" else (128, 64)
    chain = build_report(Build().chain(100, k, m, 512).program(), TRN2)
    cycles = m // 4 + 99 * 512 + (511 + k + m - 1)  # load: ceil(M / 4) cycles
    assert chain.cycles == cycles and chain.utilization == pytest.approx(50 * 512 / cycles)


def test_fp32_extra_passes_are_three_quarters():
    rep = report_of(MatmulSpec(512, 512, 512, "fp32"))
    pct = rep.percent()
    assert rep.exact_breakdown()["fp32_passes"] == 3 * rep.exact_breakdown()["useful"]
    assert rep.utilization < 0.25 and pct["fp32_passes"] > 70
    assert rep.tflops <= rep.peak_tflops
    assert rep.peak_tflops == pytest.approx(TRN2.peak_flops("fp32") / 1e12)
    assert rep.peak_tflops == pytest.approx(19.66, abs=0.01)  # FACTS: 20 fp32 on trn2


def test_2048_cubed_bf16_on_trn2_is_near_peak_and_never_above():
    spec = MatmulSpec(2048, 2048, 2048, "bf16")
    rep = report_of(spec)
    assert rep.useful_macs == 2048**3
    assert 0.9 < rep.utilization <= 1.0
    assert rep.tflops <= rep.peak_tflops
    assert rep.peak_tflops == pytest.approx(78.64, abs=0.01)  # seed 003: 78.6 on trn2
    assert rep.tflops == pytest.approx(2 * 2048**3 / (rep.cycles / 2.4e9) / 1e12)


def test_double_row_peak_and_pack():
    spec = MatmulSpec(1024, 1024, 1024, "fp8_e4m3", PerfMode.DOUBLE_ROW)
    rep = report_of(spec)
    assert rep.pack == 2 and rep.perf_mode == "double_row"
    assert rep.peak_tflops == pytest.approx(157.29, abs=0.01)  # FACTS: 158 fp8 on trn2
    assert 0.9 < rep.utilization <= 1 and rep.tflops <= rep.peak_tflops
    assert rep.tflops / rep.peak_tflops == pytest.approx(rep.utilization)


def test_weight_load_stalls_appear_only_when_loads_cannot_hide():
    t = 30
    hidden = build_report(Build().chain(t, 128, 128, 32, new_weights=True).program(), TRN2)
    assert hidden.exact_breakdown()["weight_load"] == 32  # only the first, nothing to hide it
    arch = dataclasses.replace(TRN2, ldweights_speedup=1)
    slow = build_report(Build(arch).chain(t, 128, 128, 32, new_weights=True).program(), arch)
    # 128-cycle loads behind 64-cycle issue slots: 64 lost per MatMul after the first
    assert slow.exact_breakdown()["weight_load"] == 128 + 64 * (t - 1)


def test_readout_stalls_appear_when_banks_are_too_few():
    arch, prog, c, d = readout_bound_case(8)
    rep = build_report(prog, arch)
    ex = rep.exact_breakdown()
    # MatMul 2 waits for read-out 0 (ends at 32 + d + c), the later ones for the read-out
    # two before them, c after the previous one: stalls c - (1024 - d), then c - 512 each
    assert ex["readout"] == (c - (2 * 512 - d)) + (8 - 3) * (c - 512)
    assert ex["readout"] == rep.cycles - 512 * 8 - 32 - (d - 512)
    assert report_of(MatmulSpec(128, 128, 4096, "bf16")).exact_breakdown()["readout"] == 0


ARCHS = [("trn2", {}), ("trn1", {}), ("trn2", {"psum_banks": 2}),
         ("trn2", {"ldweights_speedup": 1, "readout_elems_per_cycle": 0.1})]


@given(m=st.integers(1, 400), k=st.integers(1, 400), n=st.integers(1, 1200),
       dtype=st.sampled_from(["bf16", "fp32", "fp8_e4m3/double_row", "int16"]),
       arch=st.sampled_from(ARCHS))
def test_breakdown_adds_up_exactly_and_never_exceeds_peak(m, k, n, dtype, arch):
    name, changes = arch
    a = dataclasses.replace(get_arch(name), **changes)
    fmt, _, mode = dtype.partition("/")
    if mode and a.generation < 3:
        mode = ""
    spec = MatmulSpec(m, k, n, fmt, PerfMode.parse(mode or None))
    rep = report_of(spec, a)
    ex = rep.exact_breakdown()
    assert sum(ex.values()) == rep.cycles
    assert all(v >= 0 for v in ex.values())
    assert ex["idle"] == 0  # every gap has a cause under cost.py's rules
    assert rep.useful_macs == m * k * n
    assert ex["useful"] == Fraction(m * k * n, a.rows * a.cols * rep.pack)
    assert 0 < rep.utilization <= 1
    assert rep.tflops <= rep.peak_tflops * (1 + 1e-12)
    assert sum(rep.percent().values()) == pytest.approx(100)


def test_empty_program():
    rep = build_report(Program([]), TRN2)
    assert (rep.cycles, rep.utilization, rep.tflops) == (0, 0.0, 0.0)
    assert sum(rep.exact_breakdown().values()) == 0
    assert "0 cycles" in repr(rep)


def test_dict_json_text_and_repr():
    rep = report_of(MatmulSpec(256, 256, 1024, "bf16"))
    d = json.loads(json.dumps(rep.to_dict()))
    fields = report_fields(rep)
    assert set(fields) == {"cycles", "seconds", "pe_tflops", "peak_tflops", "utilization",
                           "breakdown", "latency_us", "tflops", "hfu", "engines", "dma",
                           "bound", "intensity"}
    # the whole core is never faster than the Tensor Engine alone
    assert fields["tflops"] <= fields["pe_tflops"] * (1 + 1e-12)
    assert fields["latency_us"] * 1e-6 >= rep.seconds * (1 - 1e-12)
    assert fields["cycles"] == d["cycles"] == rep.cycles
    assert set(d["breakdown"]) == set(CAUSES)
    assert sum(v["cycles"] for v in d["breakdown"].values()) == pytest.approx(rep.cycles)
    assert d["breakdown"]["useful"]["percent"] == pytest.approx(100 * d["utilization"])
    assert d["seconds"] == pytest.approx(rep.cycles / 2.4e9)
    text = rep.to_text()
    for label in CAUSES.values():
        assert label in text
    assert f"{rep.cycles:,}" in text and "utilization" in text
    assert f"{rep.cycles:,} cycles" in repr(rep) and "trn2 bf16" in repr(rep)


def test_notebook_html_has_table_and_timeline():
    rng = np.random.default_rng(0)
    res = matmul(rng.standard_normal((200, 300), dtype=np.float32),
                 rng.standard_normal((300, 600), dtype=np.float32), arch="trn2")
    page = res._repr_html_()
    assert "<table>" in page and "fill and drain" in page
    assert f"{res.report.core.latency_us:,.2f} us" in page and "bound by" in page
    svg = page[page.index("<svg"):page.index("</svg>") + 6]
    root = ET.fromstring(svg)  # well-formed XML
    labels = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
    assert "Tensor (LDWEIGHTS)" in labels and "TensorMatrix (MATMUL)" in labels


def test_big_timelines_are_binned():
    rep = report_of(MatmulSpec(2048, 2048, 2048, "bf16"))
    svg = timeline_svg(rep.core, bins=100)
    root = ET.fromstring(svg)
    rows = len(list(root.iter("{http://www.w3.org/2000/svg}text"))) - 2
    assert len(list(root.iter("{http://www.w3.org/2000/svg}rect"))) <= rows * 100


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 20)), min_size=1, max_size=30))
def test_interval_union_matches_brute_force(pairs):
    s = np.array([a for a, _ in pairs])
    e = s + np.array([b for _, b in pairs])
    lo, hi = _merge(s, e)
    covered = np.zeros(80, bool)
    for a, b in zip(s, e, strict=True):
        covered[a:b] = True
    mine = np.zeros(80, bool)
    for a, b in zip(lo, hi, strict=True):
        mine[a:b] = True
    assert np.array_equal(covered, mine)
    assert np.all(lo[1:] > hi[:-1])  # disjoint, sorted, not touching


def test_accumulate_chain_counts_each_product_once():
    b = Build().load(128, 128)
    b.mm(128, 128, 512, START).mm(128, 128, 512, ACC).mm(128, 128, 512, ACC | STOP)
    rep = build_report(b.read(128, 512).program(), TRN2)
    assert rep.useful_macs == 3 * 128 * 128 * 512
