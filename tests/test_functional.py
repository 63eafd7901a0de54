"""The functional simulator against float64 numpy on the rounded operands."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from helpers import fp32_bound
from hypothesis import given
from hypothesis import strategies as st

from systolic import (
    AccessPattern,
    CalcFlags,
    DmaLoad,
    FormatError,
    FunctionalSimulator,
    LoadStationary,
    MatMul,
    PerfMode,
    Program,
    ReadOut,
    Space,
)
from systolic.isa import FULL_COL_GROUP_FORMATS, Fp32Pass, col_group, row_group

_ML = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16, "fp8_e4m3": ml_dtypes.float8_e4m3,
       "fp8_e5m2": ml_dtypes.float8_e5m2, "fp32": np.float32}


def round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """The test's own rounding, from ml_dtypes (not the package's): tf32/fp32r, which
    ml_dtypes lacks, round the float64 significand to 11 bits, half to even."""
    x = np.asarray(x, dtype=np.float32)
    if dtype in ("tf32", "fp32r"):
        m, e = np.frexp(x.astype(np.float64))
        return np.ldexp(np.round(m * 2.0**11) / 2.0**11, e).astype(np.float32)
    return x.astype(_ML[dtype]).astype(np.float32)


def build(k: int, m: int, n: int, steps: int, dtype: str, mode: PerfMode,
          rng: np.random.Generator, zp: tuple[int, int] = (0, 0)
          ) -> tuple[FunctionalSimulator, Program, list[tuple[np.ndarray, np.ndarray]], str]:
    """A group of ``steps`` MatMuls (each with its own weights) into one PSUM region."""
    sims = {}
    fold = mode.k_fold
    parts = k // fold
    pairs = []
    instrs: list[object] = []
    isint = dtype.startswith(("int", "uint"))
    for order in ("fast", "systolic"):
        sims[order] = FunctionalSimulator("trn2", order=order)
    for i in range(steps):
        if isint:
            w = rng.integers(-50, 50, (k, m))
            x = rng.integers(-50, 50, (k, n))
        else:
            w = rng.standard_normal((k, m)).astype(np.float32) * 4
            x = rng.standard_normal((k, n)).astype(np.float32) * 4
        lead = 2 if fold == 2 else 0
        w_off, x_off = i * 4096, 0x10000 + i * 4096
        w_dims = ((m, 2), (1, m)) if lead else ((1, m),)
        x_dims = ((n, 2), (1, n)) if lead else ((1, n),)
        w_ap = AccessPattern(Space.SBUF, 0, parts, w_off, w_dims, dtype)
        x_ap = AccessPattern(Space.SBUF, 0, parts, x_off, x_dims, dtype)
        for sim in sims.values():
            sim.memory.write(w_ap, w.reshape(w_ap.shape))
            sim.memory.write(x_ap, x.reshape(x_ap.shape))
        flags = CalcFlags.NONE
        if i == 0:
            flags |= CalcFlags.START
        else:
            flags |= CalcFlags.ACCUMULATE
        if i == steps - 1:
            flags |= CalcFlags.STOP
        acc = "int48" if isint else "fp32"
        dst = AccessPattern(Space.PSUM, 0, m, 2048 * 3, ((1, n),), acc)
        rg = row_group(0, parts)
        cg = col_group(0, m, force=dtype in FULL_COL_GROUP_FORMATS)  # fp32r: 15 (seed 000)
        instrs.append(LoadStationary(w_ap, 0, rg, cg, mode))
        instrs.append(MatMul(x_ap, dst, flags, dtype, 0, rg, cg, mode, zp[1], zp[0]))
        pairs.append((w, x))
    return sims, Program(instrs), pairs, dst  # type: ignore[return-value]


FLOAT_CASES = [("bf16", PerfMode.NONE), ("fp16", PerfMode.NONE), ("fp8_e4m3", PerfMode.NONE),
               ("fp8_e5m2", PerfMode.DOUBLE_ROW), ("tf32", PerfMode.NONE),
               ("fp32r", PerfMode.NONE), ("fp32", PerfMode.NONE)]


@pytest.mark.parametrize(("dtype", "mode"), FLOAT_CASES)
@given(k=st.integers(1, 64), m=st.integers(1, 128), n=st.integers(1, 512),
       steps=st.integers(1, 4), seed=st.integers(0, 2**32 - 1))
def test_accumulation_programs_match_float64(dtype: str, mode: PerfMode, k: int, m: int,
                                             n: int, steps: int, seed: int) -> None:
    k = k * mode.k_fold
    rng = np.random.default_rng(seed)
    sims, prog, pairs, dst = build(k, m, n, steps, dtype, mode, rng)
    wr = [round_to(w, dtype) for w, _ in pairs]
    xr = [round_to(x, dtype) for _, x in pairs]
    ref = sum(w.astype(np.float64).T @ x.astype(np.float64) for w, x in zip(wr, xr, strict=True))
    big_w = np.concatenate(wr).T
    big_x = np.concatenate(xr)
    bound = fp32_bound(big_w, big_x)
    for sim in sims.values():
        sim.run(prog)
        got = sim.memory.read(dst).astype(np.float64)
        assert np.all(np.abs(got - ref) <= bound)


def test_systolic_order_is_sequential_fp32() -> None:
    # With order=systolic the sum is ((0 + p0) + p1) + ... in fp32: 2^24 + 1 + 1 loses both
    # ones, while float64 keeps them. A single instruction of K = 3, M = N = 1.
    rng = np.random.default_rng(0)
    sims, prog, _, dst = build(3, 1, 1, 1, "fp32r", PerfMode.NONE, rng)
    w_ap = prog[0].src  # type: ignore[union-attr]
    x_ap = prog[1].moving  # type: ignore[union-attr]
    sim = sims["systolic"]
    sim.memory.write(w_ap, np.array([[2.0**24], [1.0], [1.0]], dtype=np.float32))
    sim.memory.write(x_ap, np.ones((3, 1), dtype=np.float32))
    sim.run(prog)
    assert sim.memory.read(dst)[0, 0] == np.float32(2.0**24)


@given(k=st.integers(1, 128), m=st.integers(1, 64), n=st.integers(1, 256),
       steps=st.integers(1, 3), zp_w=st.integers(-20, 20), zp_x=st.integers(-20, 20),
       seed=st.integers(0, 2**32 - 1))
def test_integer_path_is_exact(k: int, m: int, n: int, steps: int, zp_w: int, zp_x: int,
                               seed: int) -> None:
    rng = np.random.default_rng(seed)
    sims, prog, pairs, dst = build(k, m, n, steps, "int8", PerfMode.NONE, rng, (zp_w, zp_x))
    ref = sum((w - zp_w).T @ (x - zp_x) for w, x in pairs)
    for sim in sims.values():
        sim.run(prog)
        np.testing.assert_array_equal(sim.memory.read(dst), ref)


def test_fp32_two_pass_halves_add_up() -> None:
    # hi = bf16(w), lo = bf16(w - hi): the two passes carry w to about 16 significant bits.
    rng = np.random.default_rng(1)
    w = rng.standard_normal((64, 8)).astype(np.float32)
    x = rng.standard_normal((64, 16)).astype(np.float32)
    w_ap = AccessPattern(Space.SBUF, 0, 64, 0, ((1, 8),), "fp32")
    x_ap = AccessPattern(Space.SBUF, 0, 64, 4096, ((1, 16),), "fp32")
    dst = AccessPattern(Space.PSUM, 0, 8, 0, ((1, 16),), "fp32")
    rg, cg = row_group(0, 64), col_group(0, 8)
    prog = Program([
        LoadStationary(w_ap, 0, rg, cg, fp32_pass=Fp32Pass.HI),
        MatMul(x_ap, dst, CalcFlags.START, "fp32", 0, rg, cg, fp32_pass=Fp32Pass.HI),
        LoadStationary(w_ap, 0, rg, cg, fp32_pass=Fp32Pass.LO),
        MatMul(x_ap, dst, CalcFlags.STOP | CalcFlags.ACCUMULATE, "fp32", 0, rg, cg,
               fp32_pass=Fp32Pass.LO),
    ])
    sim = FunctionalSimulator("trn2")
    sim.memory.write(w_ap, w)
    sim.memory.write(x_ap, x)
    sim.run(prog)
    ref = w.astype(np.float64).T @ x.astype(np.float64)
    got = sim.memory.read(dst)
    mag = np.abs(w.astype(np.float64)).T @ np.abs(x.astype(np.float64))
    err = np.abs(got - ref)
    assert np.all(err <= 2.0**-15 * mag)  # two bf16 halves: ~2^-17 relative per weight
    one_pass = np.abs(round_to(w, "bf16").astype(np.float64).T @ x - ref)
    assert err.max() < one_pass.max() / 50  # far better than a single bf16 pass


# -- the fast path is exactly "one fp32 product per MatMul, then PSUM adds in order" --------
def _lowered_sim(m: int, k: int, n: int, dtype: str, seed: int = 0, order: str = "fast",
                 workers: int | None = None) -> tuple[FunctionalSimulator, object,
                                                      np.ndarray, np.ndarray]:
    from systolic import get_arch
    from systolic.compiler import MatmulSpec, lower

    rng = np.random.default_rng(seed)
    if dtype.startswith("int"):
        a, b = rng.integers(-100, 100, (m, k)), rng.integers(-100, 100, (k, n))
    else:
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
    low = lower(MatmulSpec(m, k, n, dtype), get_arch("trn2"))
    sim = FunctionalSimulator("trn2", order=order,  # type: ignore[arg-type]
                              dram_bytes=low.layout.dram_bytes, workers=workers)
    sim.write_dram(low.layout.a_offset, a, dtype)
    sim.write_dram(low.layout.b_offset, b, dtype)
    return sim, low, a, b


def _out(sim: FunctionalSimulator, low: object, m: int, n: int) -> np.ndarray:
    return sim.read_dram(low.layout.out_offset, (m, n), "fp32").copy()  # type: ignore


@pytest.mark.parametrize("order", ["fast", "systolic"])
@pytest.mark.parametrize("dtype", ["bf16", "fp32", "fp8_e4m3", "int8"])
def test_threaded_path_equals_the_reference_loop_bit_for_bit(dtype: str, order: str) -> None:
    # 3 M tiles, 2 K tiles, 2 N tiles: several START groups share PSUM banks
    m, k, n = 300, 200, 700
    outs = []
    for workers in (0, 1, 2, 3):
        sim, low, a, b = _lowered_sim(m, k, n, dtype, order=order, workers=workers)
        sim.run(low.program)  # type: ignore[attr-defined]
        outs.append(_out(sim, low, m, n))
    for got in outs[1:]:
        np.testing.assert_array_equal(got.view(np.uint32), outs[0].view(np.uint32))
    if not dtype.startswith("int"):
        ar, br = round_to(a, dtype).astype(np.float64), round_to(b, dtype).astype(np.float64)
        extra = 2.0**-8 if dtype == "fp32" else 0.0  # two bf16 halves, not fp32
        assert np.all(np.abs(outs[0] - ar @ br) <= fp32_bound(ar, br, extra))
    else:
        np.testing.assert_array_equal(outs[0], a @ b)


def _per_instruction_reference(ar: np.ndarray, br: np.ndarray) -> np.ndarray:
    """The fast order's definition written out for a 128-row, 512-column tiling: one fp32
    GEMM per (K tile, N tile) instruction, added into the output block in K order."""
    from threadpoolctl import threadpool_limits

    m, k = ar.shape
    n = br.shape[1]
    out = np.zeros((m, n), np.float32)
    with threadpool_limits(limits=1, user_api="blas"):
        for m0 in range(0, m, 128):
            for n0 in range(0, n, 512):
                for k0 in range(0, k, 128):
                    w = np.ascontiguousarray(ar[m0:m0 + 128, k0:k0 + 128])
                    x = np.ascontiguousarray(br[k0:k0 + 128, n0:n0 + 512])
                    if k0 == 0:
                        out[m0:m0 + 128, n0:n0 + 512] = w @ x
                    else:
                        out[m0:m0 + 128, n0:n0 + 512] += w @ x
    return out


def test_fast_bits_do_not_depend_on_neighbours() -> None:
    # 256 x 256 x 2048: the second M tile finds its moving tiles resident, so four MatMuls
    # on each latched tile run back to back. Interleaving a no-op DmaLoad (to an SBUF corner
    # nothing reads) after every instruction must not change a bit, and both equal the
    # per-instruction definition (merging the four into one 128x128x2048 GEMM, as the first
    # release did, changed 2% of this product's elements on OpenBLAS).
    from systolic import get_arch

    m, k, n = 256, 256, 2048
    sim, low, a, b = _lowered_sim(m, k, n, "bf16")
    prog = low.program  # type: ignore[attr-defined]
    sim.run(prog)
    plain = _out(sim, low, m, n)
    arch = get_arch("trn2")
    noop = DmaLoad(AccessPattern(Space.DRAM, 0, 1, 0, ((1, 32),), "bf16"),
                   AccessPattern(Space.SBUF, 127, 1, arch.sbuf_bytes - 64, ((1, 32),), "bf16"))
    spread = Program([x for ins in prog for x in (ins, noop)])
    sim2, low2, _, _ = _lowered_sim(m, k, n, "bf16")
    sim2.run(spread)
    np.testing.assert_array_equal(_out(sim2, low2, m, n), plain)
    np.testing.assert_array_equal(plain, _per_instruction_reference(round_to(a, "bf16"),
                                                                    round_to(b, "bf16")))


def test_fast_bits_do_not_depend_on_thread_counts() -> None:
    from threadpoolctl import threadpool_limits

    m, k, n = 256, 384, 1024
    outs = []
    for blas in (1, 2):
        for workers in (1, 2):
            with threadpool_limits(limits=blas, user_api="blas"):
                sim, low, _, _ = _lowered_sim(m, k, n, "bf16", seed=5, workers=workers)
                sim.run(low.program)  # type: ignore[attr-defined]
            outs.append(_out(sim, low, m, n))
    for got in outs[1:]:
        np.testing.assert_array_equal(got, outs[0])


# -- the decode cache ------------------------------------------------------------------------
@pytest.mark.parametrize("workers", [0, 2])
def test_a_dma_over_a_tile_already_read_is_seen(workers: int) -> None:
    # moving tile A is read by MatMul 1, then a DmaLoad rewrites its lower half (partitions
    # 32..63) from new data, and MatMul 2 must read the new values
    rng = np.random.default_rng(2)
    k, m, n = 64, 16, 32
    w = rng.standard_normal((k, m)).astype(np.float32)
    x = rng.standard_normal((k, n)).astype(np.float32)
    y = rng.standard_normal((k // 2, n)).astype(np.float32)
    sim = FunctionalSimulator("trn2", dram_bytes=1 << 16, workers=workers)
    sim.write_dram(0, y, "bf16")
    w_ap = AccessPattern(Space.SBUF, 0, k, 0, ((1, m),), "bf16")
    x_ap = AccessPattern(Space.SBUF, 0, k, 1024, ((1, n),), "bf16")
    sim.memory.write(w_ap, w)
    sim.memory.write(x_ap, x)
    half = AccessPattern(Space.SBUF, 32, 32, 1024, ((1, n),), "bf16")
    y_ap = AccessPattern(Space.DRAM, 0, 32, 0, ((1, n),), "bf16", partition_step=2 * n)
    d1 = AccessPattern(Space.PSUM, 0, m, 0, ((1, n),), "fp32")
    d2 = AccessPattern(Space.PSUM, 0, m, 2048, ((1, n),), "fp32")
    rg, cg = row_group(0, k), col_group(0, m)
    both = CalcFlags.START | CalcFlags.STOP
    sim.run(Program([LoadStationary(w_ap, 0, rg, cg), MatMul(x_ap, d1, both, "bf16", 0, rg, cg),
                     DmaLoad(y_ap, half), MatMul(x_ap, d2, both, "bf16", 0, rg, cg)]))
    wr, xr = round_to(w, "bf16").astype(np.float64), round_to(x, "bf16").astype(np.float64)
    xr2 = xr.copy()
    xr2[32:] = round_to(y, "bf16")
    for dst, xs in ((d1, xr), (d2, xr2)):
        got = sim.memory.read(dst)
        assert np.all(np.abs(got - wr.T @ xs) <= fp32_bound(wr.T, xs))


def test_an_eviction_sized_product_is_right() -> None:
    # bf16 128 x 2048 x 8192 cycles the moving tiles through SBUF slots: a decode cache that
    # kept a tile after a DmaLoad wrote over it errs by ~291 here
    from systolic import matmul

    rng = np.random.default_rng(4)
    a = rng.standard_normal((128, 2048)).astype(np.float32)
    b = rng.standard_normal((2048, 8192)).astype(np.float32)
    got = matmul(a, b, dtype="bf16").out
    ar, br = round_to(a, "bf16").astype(np.float64), round_to(b, "bf16").astype(np.float64)
    assert np.all(np.abs(got - ar @ br) <= fp32_bound(ar, br))


# -- fp32 two-pass, specials, warnings ---------------------------------------------------------
def _one_pass(w: np.ndarray, x: np.ndarray, half: str) -> np.ndarray:
    """One LoadStationary(half) + one MatMul of K = 1 (so the result is one fp32 product
    per element, free of summation order)."""
    m, n = w.shape[1], x.shape[1]
    w_ap = AccessPattern(Space.SBUF, 0, 1, 0, ((1, m),), "fp32")
    x_ap = AccessPattern(Space.SBUF, 0, 1, 4096, ((1, n),), "fp32")
    dst = AccessPattern(Space.PSUM, 0, m, 0, ((1, n),), "fp32")
    rg, cg = row_group(0, 1), col_group(0, m)
    sim = FunctionalSimulator("trn2")
    sim.memory.write(w_ap, w)
    sim.memory.write(x_ap, x)
    split = Fp32Pass.HI if half == "hi" else Fp32Pass.LO
    sim.run(Program([LoadStationary(w_ap, 0, rg, cg, fp32_pass=split),
                     MatMul(x_ap, dst, CalcFlags.START | CalcFlags.STOP, "fp32", 0, rg, cg,
                            fp32_pass=split)]))
    return sim.memory.read(dst)


def test_fp32_two_pass_halves_are_exact() -> None:
    rng = np.random.default_rng(6)
    w = (rng.standard_normal((1, 24)) * 10.0 ** rng.integers(-20, 20, (1, 24))).astype(
        np.float32)
    x = rng.standard_normal((1, 8)).astype(np.float32)
    hi = w.astype(ml_dtypes.bfloat16).astype(np.float32)
    lo = (w - hi).astype(ml_dtypes.bfloat16).astype(np.float32)
    np.testing.assert_array_equal(_one_pass(w, x, "hi"), hi.T * x)
    np.testing.assert_array_equal(_one_pass(w, x, "lo"), lo.T * x)


def test_fp32_two_pass_keeps_infinities_and_the_top_of_the_range() -> None:
    from systolic import matmul

    big = np.float32(3.4e38)  # finite, beyond bf16's largest finite value
    a = np.array([[np.inf], [-np.inf], [big], [-big], [np.nan]], np.float32)
    specials = a[[0, 1, 4]]
    for dtype in ("fp32", "bf16", "fp32r", "tf32"):
        out = matmul(specials, np.ones((1, 1), np.float32), dtype=dtype).out[:, 0]
        assert out[0] == np.inf and out[1] == -np.inf and np.isnan(out[2]), dtype
    out = matmul(a, np.ones((1, 1), np.float32), dtype="fp32").out[:, 0]
    np.testing.assert_allclose(out[2:4], [big, -big], rtol=2.0**-15)
    # bf16 cannot hold 3.4e38: the one overflow policy refuses it (docs/NUMERICS.md)
    with pytest.raises(FormatError, match="bf16 holds at most"):
        matmul(a, np.ones((1, 1), np.float32), dtype="bf16")
    hi = _one_pass(np.array([[big]], np.float32), np.ones((1, 1), np.float32), "hi")
    assert np.isfinite(hi).all()


@pytest.mark.parametrize("order", ["fast", "systolic"])
@pytest.mark.parametrize("dtype", ["bf16", "fp32", "fp8_e5m2"])
def test_specials_raise_no_numpy_warnings(dtype: str, order: str) -> None:
    import warnings

    from systolic import matmul

    a = np.array([[np.nan, 1.0, 3e4], [np.inf, -np.inf, 3e4], [0.0, np.inf, 1.0]], np.float32)
    b = np.array([[1.0, 0.0], [1.0, np.inf], [3e4, 3e4]], np.float32)
    if dtype == "fp8_e5m2":
        a, b = np.nan_to_num(a, nan=1.0, posinf=5e4, neginf=-5e4), np.minimum(b, 5e4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        matmul(a, b, dtype=dtype, numerics=order)


# -- INT48 (an explicit Program option) and the MX operand -----------------------------------
@pytest.mark.parametrize("order", ["fast", "systolic"])
def test_int48_accumulation_wraps_past_2_47(order: str) -> None:
    # int16 operands with zero points: (x - zp) reaches -65535, so one 128-row product is
    # 128 * 65535^2 ~ 2^39; 300 accumulating MatMuls pass 2^47 and wrap
    k, steps = 128, 300
    w_ap = AccessPattern(Space.SBUF, 0, k, 0, ((1, 1),), "int16")
    x_ap = AccessPattern(Space.SBUF, 0, k, 64, ((1, 1),), "int16")
    dst = AccessPattern(Space.PSUM, 0, 1, 0, ((1, 1),), "int48")
    rg, cg = row_group(0, k), col_group(0, 1)
    sim = FunctionalSimulator("trn2", order=order)  # type: ignore[arg-type]
    sim.memory.write(w_ap, np.full((k, 1), -32768))
    sim.memory.write(x_ap, np.full((k, 1), -32768))
    instrs: list[object] = [LoadStationary(w_ap, 0, rg, cg)]
    for i in range(steps):
        flags = (CalcFlags.START if i == 0 else CalcFlags.ACCUMULATE) | (
            CalcFlags.STOP if i == steps - 1 else CalcFlags.NONE)
        instrs.append(MatMul(x_ap, dst, flags, "int16", 0, rg, cg, zp_moving=32767,
                             zp_stationary=32767))
    sim.run(Program(instrs))  # type: ignore[arg-type]
    exact = steps * k * 65535 * 65535
    assert exact >= 2**47
    wrapped = ((exact + 2**47) % 2**48) - 2**47
    assert int(sim.memory.read(dst)[0, 0]) == wrapped


@pytest.mark.parametrize("fmt", ["mxfp4", "mxfp8_e4m3", "mxfp8_e5m2"])
def test_mx_decoded_operand_equals_dequantize(fmt: str) -> None:
    # distinct values in every slot, so a swapped nibble or byte order shows
    from systolic import mx
    from systolic.sim.functional_mx import read_operand

    rng = np.random.default_rng(8)
    a = (rng.standard_normal((64, 3)) * np.arange(1, 65)[:, None]).astype(np.float32)
    q = mx.quantize_hw(a, fmt)
    data, plane = mx.pack_tile(q)
    sim = FunctionalSimulator("trn3")
    word = "<u2" if fmt == "mxfp4" else "<u4"
    raw = data.astype(word).view(np.uint8).reshape(data.shape[0], -1)
    sim.memory.sbuf[:raw.shape[0], 0:raw.shape[1]] = raw
    sim.memory.sbuf[:, 256:256 + plane.shape[1]] = plane
    src = AccessPattern(Space.SBUF, 0, raw.shape[0], 0, ((1, 3),), fmt)
    scale = AccessPattern(Space.SBUF, 0, 2, 256, ((1, 3),), "e8m0")  # blocks at rows 0, 1
    op = read_operand(sim.memory, src, scale, fmt)
    np.testing.assert_array_equal(op.dequantized(), mx.dequantize(q))


def test_an_error_on_a_worker_thread_reaches_the_caller() -> None:
    # a MatMul whose product fails on a worker (here: a handler table entry replaced by one
    # that raises, for ReadOut, which runs on its bank's worker) must not be lost
    import threading

    from systolic import ReadOut, SystolicError
    from systolic.sim import functional

    sim, low, _, _ = _lowered_sim(256, 128, 1024, "bf16", workers=2)

    def broken(state: object, ins: object) -> None:
        if threading.current_thread() is not threading.main_thread():
            raise SystolicError("broken read-out")

    saved = functional.HANDLERS[ReadOut]
    functional.register(ReadOut, broken)
    try:
        with pytest.raises(SystolicError, match="broken read-out"):
            sim.run(low.program)  # type: ignore[attr-defined]
    finally:
        functional.register(ReadOut, saved)


@pytest.mark.parametrize("workers", [0, 2, 3])
def test_read_outs_of_two_banks_into_one_address_land_in_program_order(workers: int) -> None:
    # banks 1 and 0 read out, in that order, into the same device-memory bytes: the second
    # must win whichever threads own the banks
    k, m, n = 32, 8, 64
    rng = np.random.default_rng(9)
    w = rng.standard_normal((k, m)).astype(np.float32)
    x = rng.standard_normal((k, n)).astype(np.float32)
    sim = FunctionalSimulator("trn2", dram_bytes=1 << 16, workers=workers)
    w_ap = AccessPattern(Space.SBUF, 0, k, 0, ((1, m),), "bf16")
    x_ap = AccessPattern(Space.SBUF, 0, k, 1024, ((1, n),), "bf16")
    sim.memory.write(w_ap, w)
    sim.memory.write(x_ap, x)
    rg, cg = row_group(0, k), col_group(0, m)
    bank1 = AccessPattern(Space.PSUM, 0, m, 2048, ((1, n),), "fp32")
    out = AccessPattern(Space.DRAM, 0, m, 0, ((1, n),), "fp32", partition_step=4 * n)
    x_half = AccessPattern(Space.SBUF, 0, k, 1024, ((1, n // 2),), "bf16")
    bank0_half = AccessPattern(Space.PSUM, 0, m, 0, ((1, n // 2),), "fp32")
    out_half = AccessPattern(Space.DRAM, 0, m, 0, ((1, n // 2),), "fp32",
                             partition_step=4 * n)
    instrs = [LoadStationary(w_ap, 0, rg, cg)]
    # a long group on bank 1 keeps its worker busy while bank 0's ReadOut comes up
    instrs += [MatMul(x_ap, bank1, (CalcFlags.START if i == 0 else CalcFlags.ACCUMULATE)
                      | (CalcFlags.STOP if i == 19 else CalcFlags.NONE), "bf16", 0, rg, cg)
               for i in range(20)]
    instrs += [MatMul(x_half, bank0_half, CalcFlags.START | CalcFlags.STOP, "bf16", 0, rg, cg),
               ReadOut(bank1, out), ReadOut(bank0_half, out_half)]
    sim.run(Program(instrs))  # type: ignore[arg-type]
    got = sim.read_dram(0, (m, n), "fp32")
    # columns 0..n/2 from bank 0 (the later ReadOut), the rest from bank 1
    np.testing.assert_array_equal(got[:, : n // 2], sim.memory.read(bank0_half))
    np.testing.assert_array_equal(got[:, n // 2:], sim.memory.read(bank1)[:, n // 2:])


@pytest.mark.parametrize("workers", [0, 2, 3])
def test_a_load_of_bytes_a_pending_read_out_writes_sees_them(workers: int) -> None:
    # long groups on banks 2 and 3 keep the workers busy; then 70 ReadOuts of banks 0 and 1
    # into 70 column blocks of one row band (spans overlapping, bytes not: none waits for
    # another), then a reshaping DmaLoad (run at once, not deferred) of every block back
    # into SBUF: each must see its ReadOut's values, past the 64 pending ReadOuts after
    # which the finished ones are dropped from the list
    k, m, n, blocks = 128, 128, 16, 70
    rng = np.random.default_rng(11)
    w = rng.standard_normal((k, m)).astype(np.float32)
    sim = FunctionalSimulator("trn2", dram_bytes=1 << 20, workers=workers)
    w_ap = AccessPattern(Space.SBUF, 0, k, 0, ((1, m),), "bf16")
    sim.memory.write(w_ap, w)
    big = AccessPattern(Space.SBUF, 0, k, 512, ((1, 512),), "bf16")
    sim.memory.write(big, rng.standard_normal((k, 512)).astype(np.float32))
    rg, cg = row_group(0, k), col_group(0, m)
    instrs: list[object] = [LoadStationary(w_ap, 0, rg, cg)]
    for bank in (2, 3):
        ps = AccessPattern(Space.PSUM, 0, m, 2048 * bank, ((1, 512),), "fp32")
        instrs += [MatMul(big, ps, (CalcFlags.START if i == 0 else CalcFlags.ACCUMULATE)
                          | (CalcFlags.STOP if i == 39 else CalcFlags.NONE), "bf16", 0, rg, cg)
                   for i in range(40)]
    pitch = 4 * n * blocks
    outs = []
    for j in range(blocks):
        x_ap = AccessPattern(Space.SBUF, 0, k, 2048 + 32 * j, ((1, n),), "bf16")
        sim.memory.write(x_ap, rng.standard_normal((k, n)).astype(np.float32))
        bank = AccessPattern(Space.PSUM, 0, m, 2048 * (j % 2), ((1, n),), "fp32")
        out = AccessPattern(Space.DRAM, 0, m, 4 * n * j, ((1, n),), "fp32",
                            partition_step=pitch)
        instrs += [MatMul(x_ap, bank, CalcFlags.START | CalcFlags.STOP, "bf16", 0, rg, cg),
                   ReadOut(bank, out)]
        outs.append((x_ap, out))
    back = []
    for j, (_, out) in enumerate(outs):
        dst = AccessPattern(Space.SBUF, 0, m, 8192 + 64 * j, ((2, n // 2), (1, 2)), "fp32")
        instrs.append(DmaLoad(out, dst))
        back.append(dst)
    sim.run(Program(instrs))  # type: ignore[arg-type]
    wb = w.astype(ml_dtypes.bfloat16).astype(np.float64)
    for (x_ap, _), dst in zip(outs, back, strict=True):
        x = sim.memory.read(x_ap).astype(np.float64)
        np.testing.assert_allclose(sim.memory.read(dst).reshape(m, n), wb.T @ x, rtol=1e-5,
                                   atol=1e-5)
