"""The threaded runner's shortcuts of issue 20 give the reference loop's bits and state.

* a LoadStationary whose bytes a deferred DmaLoad brings decodes them from that load's
  source (one transposing read serves the SBUF copy and the latch);
* a MatMul product goes straight into a float32 PSUM region on START, and through the
  worker's own buffer then an in-place add otherwise;
* the workers are plain threads with queues: a failure on the calling thread stops them.

Each run is compared with ``workers=0`` (:func:`systolic.sim.functional.run_reference`, the
living definition), over all three memories and the latched tiles, and the values with an
independent reference (ml_dtypes rounding, float64 products).
"""

from __future__ import annotations

import threading

import ml_dtypes
import numpy as np
import pytest
from helpers import operands, run_lowered, same_state

from systolic import FunctionalSimulator, Program, SystolicError, get_arch
from systolic.compiler import MatmulSpec, lower
from systolic.isa import (
    AccessPattern,
    CalcFlags,
    DmaLoad,
    LoadStationary,
    MatMul,
    ReadOut,
    Space,
    col_group,
    row_group,
)

SS = CalcFlags.START | CalcFlags.STOP


@pytest.mark.parametrize("workers", [1, 3])
@pytest.mark.parametrize(("dtype", "zero_points"), [("bf16", (0, 0)), ("fp32", (0, 0)),
                                                    ("fp8_e4m3", (0, 0)), ("int8", (3, -2))])
def test_stationary_tiles_latched_from_their_loads_match_the_reference(
        dtype: str, zero_points: tuple[int, int], workers: int) -> None:
    # 300 x 200 x 700: ragged M, K and N tiles, several a.T tiles per product; fp32 latches
    # its two bf16 halves (fp32_pass hi and lo) from the same loaded bytes
    m, k, n = 300, 200, 700
    a, b = operands(m, k, n, dtype)
    spec = MatmulSpec(m, k, n, dtype, zp_a=zero_points[0], zp_b=zero_points[1])
    ref = run_lowered(spec, a, b, 0)
    got = run_lowered(spec, a, b, workers)
    same_state(got, ref)


@pytest.mark.parametrize("workers", [1, 3])
def test_without_sbuf_after_the_run_device_memory_and_psum_are_the_same(
        workers: int) -> None:
    # sbuf=False (systolic.matmul's run): the DMA copies into SBUF that no instruction
    # needed are dropped at the end; everything else ends as the reference leaves it
    m, k, n = 300, 200, 700
    a, b = operands(m, k, n, "bf16", seed=6)
    spec = MatmulSpec(m, k, n, "bf16")
    ref = run_lowered(spec, a, b, 0)
    low = lower(spec, get_arch("trn2"))
    sim = FunctionalSimulator("trn2", dram_bytes=low.layout.dram_bytes, workers=workers)
    sim.write_dram(low.layout.a_offset, a, "bf16")
    sim.write_dram(low.layout.b_offset, b, "bf16")
    sim.run(low.program, sbuf=False)
    for space in ("dram", "psum"):
        assert np.array_equal(getattr(sim.memory, space), getattr(ref.memory, space)), space
    assert not np.array_equal(sim.memory.sbuf, ref.memory.sbuf)  # the copies were dropped


def test_a_latched_tile_is_the_rounded_operand_transposed() -> None:
    # independent of the simulator: the one weight tile of a 100 x 60 x 8 bf16 product is
    # a.T rounded by ml_dtypes, [K, M]
    a, b = operands(100, 60, 8, "bf16")
    sim = run_lowered(MatmulSpec(100, 60, 8, "bf16"), a, b, 1)
    (values,) = sim.tiles.values()
    want = a.T.astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(values, want)


def test_stationary_loads_evicted_from_a_small_sbuf_match_the_reference() -> None:
    # 16 KiB per SBUF partition: weight tiles are evicted and reloaded into the same slots,
    # so a deferred load is replaced by the next one into its bytes before it lands
    import dataclasses

    arch = dataclasses.replace(get_arch("trn2"), sbuf_bytes=16 * 1024)
    spec = MatmulSpec(640, 1024, 2048, "bf16")
    a, b = operands(640, 1024, 2048, "bf16")
    sims = []
    for workers in (0, 3):
        low = lower(spec, arch)
        sim = FunctionalSimulator(arch, dram_bytes=low.layout.dram_bytes, workers=workers)
        sim.write_dram(low.layout.a_offset, a, "bf16")
        sim.write_dram(low.layout.b_offset, b, "bf16")
        sim.run(low.program)
        sims.append(sim)
    same_state(sims[1], sims[0])


def test_a_weight_tile_latched_again_sees_every_change_of_its_bytes() -> None:
    # the threaded path keeps latched tiles by their SBUF bytes: the same bytes latched
    # again reuse the tile, and any write over them (a whole DmaLoad, a DmaLoad of some
    # partitions, an engine copy) must make the next latch read the new bytes. Each latch is
    # followed by a product read out to its own device-memory block; the reference loop
    # (workers=0) and float64 of the rounded operands are the references.
    from systolic.isa import TensorCopy

    rng = np.random.default_rng(7)
    ws = [rng.standard_normal((128, 128)).astype(np.float32) for _ in range(3)]
    x = rng.standard_normal((128, 64)).astype(np.float32)
    rg, cg = row_group(0, 128), col_group(0, 128)
    w_dram = [AccessPattern(Space.DRAM, 0, 128, i * 0x8000, ((1, 128),), "bf16", 256)
              for i in range(3)]
    half = AccessPattern(Space.DRAM, 0, 64, 2 * 0x8000, ((1, 128),), "bf16", 256)
    x_dram = AccessPattern(Space.DRAM, 0, 128, 0x20000, ((1, 64),), "bf16", 128)
    sw = AccessPattern(Space.SBUF, 0, 128, 0, ((1, 128),), "bf16")
    sw_top = AccessPattern(Space.SBUF, 0, 64, 0, ((1, 128),), "bf16")
    other = AccessPattern(Space.SBUF, 0, 128, 0x2000, ((1, 128),), "bf16")
    sx = AccessPattern(Space.SBUF, 0, 128, 0x1000, ((1, 64),), "bf16")
    ps = AccessPattern(Space.PSUM, 0, 128, 0, ((1, 64),), "fp32")
    instrs: list = [DmaLoad(x_dram, sx), DmaLoad(w_dram[1], other)]
    outs = []

    def product() -> None:
        out = AccessPattern(Space.DRAM, 0, 128, 0x30000 + len(outs) * 0x8000, ((1, 64),),
                            "fp32", 256)
        outs.append(out)
        instrs.extend([LoadStationary(sw, 0, rg, cg), MatMul(sx, ps, SS, "bf16", 0, rg, cg),
                       ReadOut(ps, out)])

    instrs.append(DmaLoad(w_dram[0], sw))
    product()  # w0
    product()  # w0 again: the kept tile
    instrs.append(DmaLoad(w_dram[1], sw))
    product()  # w1: a whole load over the bytes
    instrs.append(DmaLoad(half, sw_top))
    product()  # w2's top half over w1
    instrs.append(TensorCopy(other, sw))
    product()  # an engine copy of w1 back
    prog = Program(instrs)
    arch = get_arch("trn2")
    bf = [w.astype(ml_dtypes.bfloat16).astype(np.float64) for w in ws]
    mixed = bf[1].copy()
    mixed[:64] = bf[2][:64]
    want = [bf[0], bf[0], bf[1], mixed, bf[1]]
    sims = []
    for workers in (0, 3):
        sim = FunctionalSimulator(arch, dram_bytes=0x60000, workers=workers)
        for i, w in enumerate(ws):
            sim.write_dram(w_dram[i].offset, w, "bf16")
        sim.write_dram(x_dram.offset, x, "bf16")
        sim.run(prog)
        sims.append(sim)
    same_state(sims[1], sims[0])
    xb = x.astype(ml_dtypes.bfloat16).astype(np.float64)
    for out, w in zip(outs, want, strict=True):
        got = sims[1].read_dram(out.offset, (128, 64), "fp32")
        np.testing.assert_allclose(got, w.T @ xb, rtol=1e-5, atol=1e-4)


def _tile_program(dst_dims: tuple[tuple[int, int], ...], n: int) -> tuple[Program, AccessPattern]:
    """One weight tile, two MatMuls into one PSUM region (START, then STOP + ACCUMULATE) and
    its ReadOut; the region's free dims are ``dst_dims`` (n fp32 values a partition)."""
    w = AccessPattern(Space.DRAM, 0, 128, 0, ((1, 128),), "bf16", 256)
    x = AccessPattern(Space.DRAM, 0, 128, 0x8000, ((1, n),), "bf16", 2 * n)
    sw = AccessPattern(Space.SBUF, 0, 128, 0, ((1, 128),), "bf16")
    sx = AccessPattern(Space.SBUF, 0, 128, 0x1000, ((1, n),), "bf16")
    ps = AccessPattern(Space.PSUM, 0, 128, 0, dst_dims, "fp32")
    out = AccessPattern(Space.DRAM, 0, 128, 0x40000, dst_dims, "fp32", 4 * n)
    rg, cg = row_group(0, 128), col_group(0, 128)
    return Program([
        DmaLoad(w, sw), LoadStationary(sw, 0, rg, cg), DmaLoad(x, sx),
        MatMul(sx, ps, CalcFlags.START, "bf16", 0, rg, cg),
        MatMul(sx, ps, CalcFlags.STOP | CalcFlags.ACCUMULATE, "bf16", 0, rg, cg),
        ReadOut(ps, out),
    ]), out


@pytest.mark.parametrize("dst_dims", [((1, 256),), ((128, 2), (1, 128))],
                         ids=["one-dim", "two-dim"])
def test_products_written_straight_into_psum_keep_specials_and_match(
        dst_dims: tuple[tuple[int, int], ...]) -> None:
    # inf * 0 = NaN, overflow to inf in the product and in the PSUM add, signed zeros: the
    # direct START write and the buffered add give the reference's bits, in a region BLAS
    # writes (one free dim) and in one it does not (two free dims: the general path)
    prog, out = _tile_program(dst_dims, 256)
    rng = np.random.default_rng(3)
    w = rng.standard_normal((128, 128)).astype(np.float32)
    x = rng.standard_normal((128, 256)).astype(np.float32)
    w[0, 0], x[0, 1] = np.inf, 0.0          # out[0, 1]: inf * 0 = NaN, out[0, 3..] +-inf
    w[:, 1], x[:, 3] = 3e38, 1.0            # out[1, 3]: 128 x 3e38 overflows to +inf
    x[:, 2] = -0.0                          # column 2: sums of signed zeros
    wb, xb = w.astype(ml_dtypes.bfloat16), x.astype(ml_dtypes.bfloat16)
    got = []
    for workers in (0, 1, 2):
        sim = FunctionalSimulator("trn2", dram_bytes=0x80000, workers=workers)
        sim.memory.dram[0:0x8000] = wb.view(np.uint8).reshape(-1)
        sim.memory.dram[0x8000:0x8000 + 128 * 512] = xb.view(np.uint8).reshape(-1)
        sim.run(prog)
        got.append(sim.memory.view(out).copy().reshape(128, 256))
    for g in got[1:]:
        np.testing.assert_array_equal(g.view(np.uint32), got[0].view(np.uint32))
    # independent, where the order of the sum cannot matter: each MatMul is one fp32
    # product w.T @ x, and the second adds it once more
    g = got[0]
    assert np.isnan(g[0, 1]) and np.isnan(g[0, 2]) and g[1, 3] == np.inf  # inf * (+-0)
    row0 = np.arange(3, 256)
    np.testing.assert_array_equal(g[0, row0], np.copysign(np.inf, xb[0, row0].astype(
        np.float32)))
    assert np.all(g[1:, 2] == 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        want = 2 * (wb.astype(np.float64).T @ xb.astype(np.float64))
    rest = np.ones(g.shape, bool)
    rest[:2] = False  # rows 0 and 1 hold the specials
    rest[:, 2] = False
    np.testing.assert_allclose(g[rest], want[rest], rtol=1e-5, atol=1e-4)


def test_a_failure_on_the_calling_thread_stops_the_workers() -> None:
    # MatMuls are queued on the workers, then one on the calling thread fails (no weight
    # tile is latched at its columns): the error reaches the caller, no worker thread is
    # left running, and the simulator runs the next Program as the reference does
    prog, out = _tile_program(((1, 256),), 256)
    ins = list(prog.instructions)
    mm = ins[3]
    assert isinstance(mm, MatMul)
    bad = MatMul(mm.moving, AccessPattern(Space.PSUM, 64, 64, 2048, ((1, 256),), "fp32"),
                 SS, "bf16", 0, row_group(0, 128), col_group(64, 64))
    failing = Program([*ins[:3], *[ins[3]] * 40, bad, *ins[3:]])
    before = threading.active_count()
    sim = FunctionalSimulator("trn2", dram_bytes=0x80000, workers=3)
    rng = np.random.default_rng(1)
    sim.memory.dram[:0x20000] = rng.integers(0, 60, 0x20000, dtype=np.uint8)  # small bf16s
    with pytest.raises(SystolicError, match="no weight tile is latched"):
        sim.run(failing, check=False)
    assert threading.active_count() == before
    sim.run(prog)
    ref = FunctionalSimulator("trn2", dram_bytes=0x80000, workers=0)
    ref.memory.dram[:0x20000] = sim.memory.dram[:0x20000]
    ref.run(prog)
    np.testing.assert_array_equal(sim.memory.view(out), ref.memory.view(out))


def test_a_repeated_product_reuses_its_lowering_with_new_values(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # systolic.matmul keeps the lowered Program of a product for the next call of the same
    # spec on the same Arch; the values come from the new operands (float64 reference), and
    # a different Arch or a product past the instruction budget lowers afresh
    import dataclasses

    from helpers import fp32_bound

    import systolic.api as api
    from systolic import matmul

    monkeypatch.setattr(api, "_lowered", type(api._lowered)())
    a1, b1 = operands(200, 300, 600, "bf16", seed=1)
    a2, b2 = operands(200, 300, 600, "bf16", seed=2)
    r1 = matmul(a1, b1)
    out1 = r1.out.copy()
    r2 = matmul(a2, b2)
    assert r2.program is r1.program
    np.testing.assert_array_equal(r1.out, out1)
    ar = a2.astype(ml_dtypes.bfloat16).astype(np.float64)
    br = b2.astype(ml_dtypes.bfloat16).astype(np.float64)
    assert np.all(np.abs(r2.out - ar @ br) <= fp32_bound(ar, br))
    small = dataclasses.replace(get_arch("trn2"), sbuf_bytes=16 * 1024)
    assert matmul(a2, b2, arch=small).program is not r1.program
    # the budget: a product of more instructions than it is lowered at every call, and
    # what is kept never exceeds it
    monkeypatch.setattr(api, "LOWERED_CACHE_INSTRUCTIONS", len(r1.program) + 5)
    big_a, big_b = operands(300, 300, 1200, "bf16")
    assert matmul(big_a, big_b).program is not matmul(big_a, big_b).program
    matmul(a1[:100], b1)
    assert sum(len(v.program) for v in api._lowered.values()) <= len(r1.program) + 5


def test_a_kept_simulator_starts_the_next_call_as_a_fresh_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # systolic.matmul keeps its simulator for the next call of the same size, zeroed: the
    # next product's values are its own (float64 reference), the kept one holds no byte and
    # no tile of the last call, a run that fails is not kept, and the byte budget holds
    import systolic.api as api
    from systolic import matmul

    monkeypatch.setattr(api, "_sims", {})
    a1, b1 = operands(300, 200, 700, "bf16", seed=4)
    a2, b2 = operands(300, 200, 700, "bf16", seed=5)
    monkeypatch.setattr(api, "_zeroing", {})
    matmul(a1, b1)
    (kept,) = api._sims.values()
    (zeroing,) = api._zeroing.values()  # zeroing its memories after the call returned
    zeroing.join()
    m = kept.memory
    assert not m.sbuf.any() and not m.psum.any() and not m.dram.any() and not kept.tiles
    r2 = matmul(a2, b2)
    assert list(api._sims.values()) == [kept]  # the same simulator ran the second call
    ar = a2.astype(ml_dtypes.bfloat16).astype(np.float64)
    br = b2.astype(ml_dtypes.bfloat16).astype(np.float64)
    from helpers import fp32_bound

    assert np.all(np.abs(r2.out - ar @ br) <= fp32_bound(ar, br))
    np.testing.assert_array_equal(r2.out, matmul(a2, b2, arch=get_arch("trn2")).out)

    def stop(done: int) -> None:
        raise SystolicError("stopped by the caller")

    with pytest.raises(SystolicError, match="stopped by the caller"):
        matmul(a1, b1, progress=stop)
    assert api._sims == {}  # taken by the failed call, not given back
    monkeypatch.setattr(api, "SIMULATOR_CACHE_BYTES", 1 << 20)  # smaller than one SBUF
    matmul(a1, b1)
    assert api._sims == {}


def test_the_next_call_waits_for_the_kept_simulators_zeroing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the kept simulator's memories are zeroed on a thread after the call returns: a call
    # made at once takes the simulator only when that is done (else the memset lands on
    # its operands)
    import systolic.api as api
    from systolic import matmul

    monkeypatch.setattr(api, "_sims", {})
    monkeypatch.setattr(api, "_zeroing", {})
    a1, b1 = operands(512, 512, 1024, "bf16", seed=7)
    a2, b2 = operands(512, 512, 1024, "bf16", seed=8)
    ar = a2.astype(ml_dtypes.bfloat16).astype(np.float64)
    br = b2.astype(ml_dtypes.bfloat16).astype(np.float64)
    from helpers import fp32_bound

    for _ in range(3):
        matmul(a1, b1)
        r2 = matmul(a2, b2)  # at once: the first call's zeroing may still be running
        assert np.all(np.abs(r2.out - ar @ br) <= fp32_bound(ar, br))


def _bytes_touched(ap: AccessPattern) -> set[int]:
    """Every device-memory byte ``ap`` touches, element by element (the slow reference)."""
    isz = ap.itemsize
    idx = np.zeros(1, np.int64)
    for step, num in ap.dims:
        idx = (idx[:, None] + step * np.arange(num)[None, :]).ravel()
    out: set[int] = set()
    for p in range(ap.partitions):
        base = ap.offset + p * ap.partition_step + idx * isz
        out.update((base[:, None] + np.arange(isz)[None, :]).ravel().tolist())
    return out


def _dram(draw, dtype: str) -> AccessPattern:
    from hypothesis import strategies as st

    parts = draw(st.integers(1, 6))
    dims = tuple((draw(st.integers(-3, 4)), draw(st.integers(1, 4)))
                 for _ in range(draw(st.integers(1, 2))))
    lo = sum(min(0, s * (n - 1)) for s, n in dims)
    step = draw(st.integers(-40, 40))
    off = draw(st.integers(0, 64)) - lo * 4 + max(0, -step * (parts - 1))
    return AccessPattern(Space.DRAM, 0, parts, off, dims, dtype, step)


def test_device_memory_rows_overlap_whenever_a_byte_is_shared() -> None:
    # issue 20: ReadOuts of the tiles of one row band of C waited for each other because
    # their spans overlap; the row check must still see every shared byte (brute force)
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from systolic.sim._base import dram_rows_overlap

    @settings(max_examples=300, deadline=None)
    @given(st.data())
    def check(data) -> None:
        a = _dram(data.draw, data.draw(st.sampled_from(["bf16", "fp32"])))
        b = _dram(data.draw, data.draw(st.sampled_from(["bf16", "fp32", "fp8_e4m3"])))
        shared = bool(_bytes_touched(a) & _bytes_touched(b))
        assert dram_rows_overlap(a, b) or not shared
        if all(len(x.dims) == 1 and x.dims[0][0] == 1 for x in (a, b)):  # solid rows
            assert dram_rows_overlap(a, b) == shared

    check()


def test_rows_of_the_same_stride_overlap_exactly_when_a_byte_is_shared() -> None:
    # the closed form for patterns of one row stride (the tiles of one matrix) against
    # brute force: solid rows share a byte exactly when the check says so, any stride sign
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from systolic.sim._base import dram_rows_overlap

    @settings(max_examples=400, deadline=None)
    @given(st.data())
    def check(data) -> None:
        step = data.draw(st.integers(-40, 40))

        def solid() -> AccessPattern:
            parts = data.draw(st.integers(1, 6))
            n = data.draw(st.integers(1, 12))
            off = data.draw(st.integers(0, 64)) + max(0, -step * (parts - 1))
            return AccessPattern(Space.DRAM, 0, parts, off, ((1, n),), "bf16", step)

        a, b = solid(), solid()
        assert dram_rows_overlap(a, b) == bool(_bytes_touched(a) & _bytes_touched(b))

    check()


def test_tiles_of_one_row_band_do_not_overlap_but_their_spans_do() -> None:
    from systolic.sim._base import dram_rows_overlap, dram_span

    left = AccessPattern(Space.DRAM, 0, 128, 0, ((1, 512),), "fp32", 4 * 2048)
    right = AccessPattern(Space.DRAM, 0, 128, 4 * 512, ((1, 512),), "fp32", 4 * 2048)
    (a0, a1), (b0, b1) = dram_span(left), dram_span(right)
    assert a0 < b1 and b0 < a1
    assert not dram_rows_overlap(left, right)
    assert dram_rows_overlap(left, AccessPattern(Space.DRAM, 0, 1, 4 * 2048 * 127 + 4 * 511,
                                                 ((1, 1),), "fp32", 0))


def test_runs_on_two_threads_at_once_keep_blas_on_one_thread() -> None:
    # BLAS's thread count is one setting for the process, and a product's bits depend on
    # it: a run that ends must not give BLAS its threads back while another still runs
    # (the second's later GEMMs would take the library's other kernel). A long product on
    # one thread, short ones ending again and again on another; each result is compared
    # with the same product run alone. BLAS gets two threads of its own between runs
    # whatever this machine's core count, so that a run given them back would take them.
    from threadpoolctl import threadpool_limits

    from systolic import matmul

    long_ab = operands(512, 2048, 1024, "bf16", seed=9)
    short_ab = operands(128, 256, 512, "bf16", seed=10)
    alone_long = matmul(*long_ab).out
    alone_short = matmul(*short_ab).out
    got: list[np.ndarray] = []
    stop = threading.Event()

    def shorts() -> None:
        while not stop.is_set():
            got.append(matmul(*short_ab).out)

    with threadpool_limits(limits=2, user_api="blas"):
        other = threading.Thread(target=shorts)
        other.start()
        try:
            longs = [matmul(*long_ab).out for _ in range(3)]
        finally:
            stop.set()
            other.join()
    assert got  # the short products ran while the long ones did
    for out in longs:
        assert np.array_equal(out.view(np.uint32), alone_long.view(np.uint32))
    for out in got:
        assert np.array_equal(out.view(np.uint32), alone_short.view(np.uint32))


def test_blas_gets_its_thread_count_back_after_the_runs(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    # numpy's BLAS is held to one thread only while runs last; where numpy's BLAS is not
    # its wheels' OpenBLAS, threadpoolctl per run does it, with the same bits one at a time
    from threadpoolctl import threadpool_info, threadpool_limits

    from systolic import matmul
    from systolic.sim import blas

    def counts() -> list[int]:
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    a, b = operands(256, 512, 1024, "bf16", seed=11)
    with threadpool_limits(limits=2, user_api="blas"):
        before = counts()
        want = matmul(a, b).out
        assert counts() == before
        monkeypatch.setattr(blas, "_lib", [None])  # as with another numpy build
        got = matmul(a, b).out
        assert counts() == before
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
