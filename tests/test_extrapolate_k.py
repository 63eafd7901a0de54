"""The K loop extrapolated too (systolic.extrapolate._k_reduced): a product with many K
tiles is timed from stand-ins with a few of them, each from its own M slice. Every figure
must equal the full whole-core and Tensor Engine schedules, on products both can run, in
both cache regimes (moving tiles of an M tile resident or not)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import systolic.extrapolate as ex
from systolic.arch import get_arch
from systolic.compiler import MatmulSpec, lower
from systolic.compiler.codegen import DenseState
from systolic.compiler.tiling import tile
from systolic.isa import DmaLoad, LoadStationary, PerfMode, Space
from systolic.timing.core import time_prefixes
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

    def bent(s: MatmulSpec, arch, mt, label=None, stat_slots=None):
        got = real(s, arch, mt, label=label, stat_slots=stat_slots)
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


# -- stationary tiles that thrash their slots: K stand-ins compiled with fewer slots --------

_FAST_DMA = {"hbm_bytes_per_s": 10, "dma_engine_bytes_per_ns": 10}


def _fast_dma(name: str):
    # DMAs ten times faster and no fixed DMA latency: the product is PE-bound, so its DMAs
    # run ahead until a slot's previous tenant holds them
    a = get_arch(name)
    return dataclasses.replace(a, dma_fixed_ns=0.0,
                               **{f: getattr(a, f) * x for f, x in _FAST_DMA.items()})


@pytest.mark.parametrize("arch, spec, k_tiles", [
    # 231 K tiles (a ragged last one) > 224 stationary slots, 2 chunks of N tiles: the
    # stand-ins have 22-24 K tiles (the moving slots' regime: 168 // 8 + 1) and 21 slots
    ("trn2", MatmulSpec(768, 29500, 4096, "bf16"), 24),
    ("trn2", MatmulSpec(896, 28800, 2048, "bf16"), 45),  # 4 N tiles: 168 // 4 + 1 = 43
    ("trn1", MatmulSpec(768, 24960, 4096, "bf16"), 21),  # 195 K tiles > 192 slots
])
def test_stationary_thrash_from_fewer_slots_equals_the_full_schedule(monkeypatch, arch, spec,
                                                                     k_tiles):
    a = get_arch(arch)
    monkeypatch.setattr(ex, "FULL_LIMIT", 0)
    assert len(tile(spec, a).k_tiles) > ex._caps(a, tile(spec, a))[0]
    assert ex._k_start(spec, a) is None  # the product's own slots: no K stand-ins
    assert ex._k_fewer_slots(spec, a) == (k_tiles - 2, k_tiles - 3)
    rep, low = ex.matmul_report(spec, a)
    assert low is None and rep.slice_k_tiles == k_tiles  # the new path was taken
    full = build_report(lower(spec, a).program, a, spec)
    assert _figures(rep) == _figures(full)
    assert rep.to_dict()["tflops"] == pytest.approx(full.to_dict()["tflops"])


def _stationary_offsets_dropped(ins, window: int):
    """``ins`` with the offset of an SBUF pattern in the stationary window set to 0."""
    for f in ("src", "dst", "stationary"):
        ap = getattr(ins, f, None)
        if ap is not None and ap.space is Space.SBUF and ap.offset < window:
            ins = dataclasses.replace(ins, **{f: dataclasses.replace(ap, offset=0)})
    return ins


@pytest.mark.parametrize("fast", [False, True])
def test_fewer_slots_change_only_the_stationary_offsets_and_their_dependencies(fast):
    # the argument of the module docstring on a whole product: with 21 stationary slots
    # instead of 224 the instructions differ only in the stationary tiles' SBUF offsets;
    # where no stationary DMA is placed by its slot's previous tenant (time_prefixes'
    # dep_led) the two schedules agree op for op. With fast DMAs the slots hold them, and
    # the schedules differ: the check is what the equality rests on
    a = _fast_dma("trn2") if fast else get_arch("trn2")
    spec = MatmulSpec(768, 29500, 4096, "bf16")
    own, few = lower(spec, a), lower(spec, a, _stat_slots=21)
    window = DenseState.for_plan(a, own.plan).mov.base
    p1, p2 = own.program.instructions, few.program.instructions
    assert len(p1) == len(p2)
    moved = 0
    for x, y in zip(p1, p2, strict=True):
        if x != y:
            moved += 1
            assert type(x) in (DmaLoad, LoadStationary)
            assert _stationary_offsets_dropped(x, window) == \
                _stationary_offsets_dropped(y, window)
    assert moved > 0
    led: list[int] = []
    t2 = time_prefixes(few.program, a, (len(p2),), what_if=False, dep_led=led)[0]
    t1 = time_prefixes(own.program, a, (len(p1),), what_if=False)[0]
    bound = [i for i in led if type(p2[i]) is DmaLoad and p2[i].dst.offset < window]
    same = all(np.array_equal(getattr(t1, f), getattr(t2, f))
               for f in ("op_instr", "op_queue", "op_queues", "starts", "ends"))
    assert (not bound, same) == ((True, True) if not fast else (False, False))
    if not fast:
        assert t1.bound_ticks == t2.bound_ticks and t1.busy_ticks == t2.busy_ticks


def test_slot_check_refuses_and_falls_back(monkeypatch):
    # PE-bound (fast DMAs): a stand-in's stationary DMA waits for its slot's previous
    # tenant, so the stand-ins with fewer slots are refused and the product is timed as
    # before this path (232 K tiles < 2 x 225: its M slice, every K tile)
    a = _fast_dma("trn2")
    spec = MatmulSpec(768, 29500, 4096, "bf16")
    monkeypatch.setattr(ex, "FULL_LIMIT", 0)
    k0, slots = ex._k_fewer_slots(spec, a)
    with pytest.raises(ex._SlotBound):
        ex._k_stand_ins(spec, a, 6, None, k0, slots)
    rep, low = ex.matmul_report(spec, a)
    assert low is None and rep.slice_k_tiles == 0
    full = build_report(lower(spec, a).program, a, spec)
    assert _figures(rep) == _figures(full)


def test_a_large_thrashing_product_takes_the_fewer_slots_path(monkeypatch):
    # 16384 x 32768 x 16384 bf16: 256 K tiles > 224 slots; before, its M slices held every
    # K tile (256 < 2 x 225); now 8-10 K tiles on 7 slots. The same figures as the old path:
    # its reference here only because the full schedule at this size takes minutes (the
    # parametrised test above holds the new path to full schedules)
    a = get_arch("trn2")
    spec = MatmulSpec(16384, 32768, 16384, "bf16")
    rep, low = ex.matmul_report(spec, a)
    assert low is None and rep.slice_k_tiles == 10
    monkeypatch.setattr(ex, "_k_fewer_slots", lambda s, arch: None)
    old, _ = ex.matmul_report(spec, a)
    assert old.slice_k_tiles == 0
    assert _figures(rep) == _figures(old)
