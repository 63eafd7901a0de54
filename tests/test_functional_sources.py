"""The threaded runner decodes a DMA'd moving tile from its device-memory source: the bits
equal the reference loop's when the source's bytes change after the load (a ReadOut over
them) and when the same bytes are loaded again."""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest

from systolic import FunctionalSimulator, Program, get_arch
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
X = 0x10000  # device-memory offset of the moving operand, rows 256 bytes apart


def _program() -> Program:
    def sb(off: int, n: int) -> AccessPattern:
        return AccessPattern(Space.SBUF, 0, 128, off, ((1, n),), "bf16")

    def ps(bank: int) -> AccessPattern:
        return AccessPattern(Space.PSUM, 0, 128, bank * 2048, ((1, 64),), "fp32")

    def mm(bank: int) -> MatMul:
        return MatMul(sb(0x8000, 64), ps(bank), SS, "bf16", 0, row_group(0, 128),
                      col_group(0, 128))

    w = AccessPattern(Space.DRAM, 0, 128, 0, ((1, 128),), "bf16", 256)
    x = AccessPattern(Space.DRAM, 0, 128, X, ((1, 64),), "bf16", 256)

    def out(off: int) -> AccessPattern:
        return AccessPattern(Space.DRAM, 0, 128, off, ((1, 64),), "fp32", 256)

    return Program([
        DmaLoad(w, sb(0, 128)),
        LoadStationary(sb(0, 128), 0, row_group(0, 128), col_group(0, 128)),
        DmaLoad(x, sb(0x8000, 64)),
        mm(0),
        ReadOut(ps(0), out(X)),        # overwrites the bytes the SBUF copy came from
        mm(1),                         # still the SBUF copy's (old) bytes
        ReadOut(ps(1), out(0x20000)),
        DmaLoad(x, sb(0x8000, 64)),    # the same pattern again: the new bytes
        mm(2),
        ReadOut(ps(2), out(0x30000)),
        DmaLoad(x, sb(0x8000, 64)),    # and once more, unchanged since: same values
        mm(3),
        ReadOut(ps(3), out(0x40000)),
    ])


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_reloaded_and_overwritten_sources_match_the_reference(workers: int) -> None:
    rng = np.random.default_rng(7)
    dram = np.zeros(0x50000, np.uint8)
    # weights [128, 128] and moving rows of 128 bf16 (64 used), 256 bytes apart
    dram[:0x8000] = rng.standard_normal(0x4000).astype(ml_dtypes.bfloat16).view(np.uint8)
    dram[X:X + 0x8000] = rng.standard_normal(0x4000).astype(ml_dtypes.bfloat16).view(np.uint8)
    runs = []
    for w in (0, workers):
        sim = FunctionalSimulator("trn2", dram_bytes=dram.size, workers=w)
        sim.memory.dram[:] = dram
        sim.run(_program())
        runs.append((sim.memory.dram.copy(), sim.memory.sbuf.copy(), sim.memory.psum.copy()))
    (ref, ref_sbuf, ref_psum), (got, got_sbuf, got_psum) = runs
    assert np.array_equal(ref, got)
    # the loads whose copies the threaded runner defers have all landed by the end
    assert np.array_equal(ref_sbuf, got_sbuf) and np.array_equal(ref_psum, got_psum)
    # the run did what the comments say: the third product differs from the first two,
    # the fourth equals the third
    res = [ref[o:o + 128 * 256].view(np.float32) for o in (X, 0x20000, 0x30000, 0x40000)]
    assert np.array_equal(res[0], res[1])
    first = ref[0x20000:0x20000 + 128 * 256]  # mm(1) read the old bytes: as mm(0) did
    assert np.isfinite(first.view(np.float32)).all()
    assert not np.array_equal(res[2], res[1], equal_nan=True)
    assert np.array_equal(res[3], res[2], equal_nan=True)


@pytest.mark.parametrize("workers", [1, 3])
def test_a_product_that_reloads_its_moving_tiles_matches_the_reference(workers: int) -> None:
    # an SBUF of 8 KiB per partition holds 6 of the 8 moving tiles: every M tile reloads
    arch = dataclasses.replace(get_arch("trn2"), sbuf_bytes=8192)
    m, k, n = 384, 256, 2048
    lowered = lower(MatmulSpec(m, k, n, "bf16"), arch)
    loads = sum(isinstance(i, DmaLoad) for i in lowered.program)
    assert loads > (m // 128) * (k // 128) + (k // 128) * (n // 512)  # reloads happen
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    lay = lowered.layout
    runs = []
    for w in (0, workers):
        sim = FunctionalSimulator(arch, dram_bytes=lay.dram_bytes, workers=w)
        sim.write_dram(lay.a_offset, a, "bf16")
        sim.write_dram(lay.b_offset, b, "bf16")
        sim.run(lowered.program)
        runs.append([sim.memory.dram.copy(), sim.memory.sbuf.copy(), sim.memory.psum.copy()])
    for ref, got in zip(*runs, strict=True):
        assert np.array_equal(ref, got)
    out = runs[0][0][lay.out_offset:lay.out_offset + m * n * 4].view(np.float32)
    a16 = a.astype(ml_dtypes.bfloat16).astype(np.float64)
    b16 = b.astype(ml_dtypes.bfloat16).astype(np.float64)
    assert np.allclose(out.reshape(m, n), a16 @ b16, rtol=1e-5, atol=1e-4)


def test_a_dma_handler_of_its_own_is_run_in_place() -> None:
    # a registered DmaLoad handler that is not the plain copy: the threaded runner must not
    # decode the tile from its source nor defer the handler
    from systolic.sim import functional as fsim

    def halving(state: object, ins: DmaLoad) -> None:
        fsim.dma_load(state, ins)  # type: ignore[arg-type]
        v = state.view(ins.dst)  # type: ignore[attr-defined]
        with np.errstate(invalid="ignore"):  # the reloaded bytes hold fp32 bit patterns
            v[...] = (v.astype(np.float32) * 0.5).astype(v.dtype)

    saved = fsim.HANDLERS[DmaLoad]
    fsim.register(DmaLoad, halving)
    try:
        test_reloaded_and_overwritten_sources_match_the_reference(3)
    finally:
        fsim.register(DmaLoad, saved)


def test_the_decoded_source_cache_counts_only_what_it_holds(monkeypatch) -> None:
    """The device-memory patterns a run keeps decoded are counted in ``dram_bytes`` while
    held and not after: a source forgotten because its bytes were written left its bytes in
    the count, so the cache evicted early and ever earlier."""
    from systolic.sim import threaded_caches as ft

    seen: list[tuple[int, int]] = []
    real = ft.DecodeCache.dram_written

    def checked(self: ft.DecodeCache, lo: int, hi: int) -> None:
        real(self, lo, hi)
        seen.append((self.dram_bytes, sum(v.nbytes for v in self.dram.values())))

    monkeypatch.setattr(ft.DecodeCache, "dram_written", checked)
    rng = np.random.default_rng(7)
    dram = np.zeros(0x50000, np.uint8)
    dram[:0x8000] = rng.standard_normal(0x4000).astype(ml_dtypes.bfloat16).view(np.uint8)
    dram[X:X + 0x8000] = rng.standard_normal(0x4000).astype(ml_dtypes.bfloat16).view(np.uint8)
    sim = FunctionalSimulator("trn2", dram_bytes=dram.size, workers=2)
    sim.memory.dram[:] = dram
    sim.run(_program())
    assert seen and all(count == held for count, held in seen)
