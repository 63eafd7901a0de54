"""Tests for the bugs the rest of the suite missed (issue 13 section 4, bench/mutants.py).

Each test names the mutant(s) of ``bench/mutants.py`` it kills. References are independent
of the code under test: ml_dtypes casts, float64 or Python-integer arithmetic, closed forms.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from systolic import (
    AccessPattern,
    CalcFlags,
    FunctionalSimulator,
    LoadStationary,
    MatMul,
    PerfMode,
    Program,
    Space,
)
from systolic.geometry import Rect
from systolic.isa import DmaLoad, Fp32Pass, ReadOut, TileGroup, col_group, row_group

BF16 = ml_dtypes.bfloat16


# -- helpers: hand-built programs ------------------------------------------------------------
def sbuf(parts: int, off: int, n: int, dtype: str, part: int = 0) -> AccessPattern:
    return AccessPattern(Space.SBUF, part, parts, off, ((1, n),), dtype)


def psum(parts: int, off: int, n: int, dtype: str = "fp32") -> AccessPattern:
    return AccessPattern(Space.PSUM, 0, parts, off, ((1, n),), dtype)


def dram(parts: int, off: int, n: int, dtype: str, isz: int) -> AccessPattern:
    return AccessPattern(Space.DRAM, 0, parts, off, ((1, n),), dtype, partition_step=n * isz)


def load(src: AccessPattern, cols: int, split: Fp32Pass = Fp32Pass.FULL,
         mode: PerfMode = PerfMode.NONE) -> LoadStationary:
    return LoadStationary(src, 0, row_group(src.partition, src.partitions),
                          col_group(0, cols), mode, split)


def matmul(mv: AccessPattern, dst: AccessPattern, flags: CalcFlags, dtype: str, *,
           split: Fp32Pass = Fp32Pass.FULL, zp: tuple[int, int] = (0, 0),
           mode: PerfMode = PerfMode.NONE) -> MatMul:
    return MatMul(mv, dst, flags, dtype, mv.partition, row_group(mv.partition, mv.partitions),
                  col_group(0, dst.partitions), mode, zp[1], zp[0], split)


ONE = CalcFlags.START | CalcFlags.STOP


# -- START overwrites; a DmaLoad invalidates what was decoded --------------------------------
def test_products_that_reuse_a_psum_bank_are_exact() -> None:
    """start_adds: 300 rows are three M tiles, and the compiler reuses PSUM banks across
    START groups; an added (not overwritten) START shows as a wrong result. Small integers
    make every fp32 sum exact, so float64 is the exact reference."""
    import systolic

    rng = np.random.default_rng(1)
    a = rng.integers(-8, 9, (300, 64)).astype(np.float32)
    b = rng.integers(-8, 9, (64, 640)).astype(np.float32)
    res = systolic.matmul(a, b, dtype="bf16")
    np.testing.assert_array_equal(res.out, a.astype(np.float64) @ b.astype(np.float64))


def _dma_program(k: int, m: int, n: int, halves: bool) -> tuple[Program, int]:
    """w [K, M] and x1, x2 [K, N] (bf16) in DRAM. DMA w and x1 into SBUF, product, ReadOut;
    then DMA x2 over x1's SBUF bytes (``halves``: only its second half, at another start
    byte), product again from the same SBUF pattern, ReadOut. Returns the program and the
    DRAM offset of the two fp32 results (out1 then out2, each [M, N])."""
    w_off, x1_off, x2_off, out_off = 0, 0x1000, 0x3000, 0x6000
    x_sb = sbuf(k, 0x8000, n, "bf16")
    second = (sbuf(k, 0x8000 + n, n // 2, "bf16"),
              AccessPattern(Space.DRAM, 0, k, x2_off + n, ((1, n // 2),), "bf16",
                            partition_step=2 * n)) if halves else (
        x_sb, dram(k, x2_off, n, "bf16", 2))
    w_sb = sbuf(k, 0, m, "bf16")
    dst = psum(m, 0, n)
    prog = Program([
        DmaLoad(dram(k, w_off, m, "bf16", 2), w_sb),
        DmaLoad(dram(k, x1_off, n, "bf16", 2), x_sb),
        load(w_sb, m),
        matmul(x_sb, dst, ONE, "bf16"),
        ReadOut(dst, dram(m, out_off, n, "fp32", 4)),
        DmaLoad(second[1], second[0]),
        matmul(x_sb, dst, ONE, "bf16"),
        ReadOut(dst, dram(m, out_off + m * n * 4, n, "fp32", 4)),
    ])
    return prog, out_off


@pytest.mark.parametrize("halves", [False, True])
def test_a_dma_over_an_address_already_read_is_seen(halves: bool) -> None:
    """decode_cache_kept, decode_cache_partition_only: the second product reads the SBUF
    pattern the first one read, after a DmaLoad wrote over it (all of it, or its second
    half only)."""
    k, m, n = 32, 16, 64
    rng = np.random.default_rng(2)
    w = rng.integers(-8, 9, (k, m)).astype(np.float32)
    x1 = rng.integers(-8, 9, (k, n)).astype(np.float32)
    x2 = rng.integers(-8, 9, (k, n)).astype(np.float32)
    prog, out_off = _dma_program(k, m, n, halves)
    for order in ("fast", "systolic"):
        sim = FunctionalSimulator("trn2", order=order, dram_bytes=0x10000)  # type: ignore
        sim.write_dram(0, w, "bf16")
        sim.write_dram(0x1000, x1, "bf16")
        sim.write_dram(0x3000, x2, "bf16")
        sim.run(prog)
        out = sim.read_dram(out_off, (2, m, n), "fp32")
        x_new = np.concatenate([x1[:, :n // 2], x2[:, n // 2:]], axis=1) if halves else x2
        w64 = w.astype(np.float64)
        np.testing.assert_array_equal(out[0], w64.T @ x1.astype(np.float64))
        np.testing.assert_array_equal(out[1], w64.T @ x_new.astype(np.float64))


# -- the fp32 two-pass halves, exactly ---------------------------------------------------------
def test_fp32_two_pass_latches_exactly_bf16_of_w_and_of_the_remainder() -> None:
    """fp32_lo_unrounded, fp32_hi_fp16: hi = bf16(w), lo = bf16(w - hi), by ml_dtypes (w - hi
    is exact in float64 and in float32), compared bit for bit with the latched tiles."""
    k, m = 32, 24
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((k, m)) * 10.0 ** rng.integers(-3, 4, (k, m))).astype(np.float32)
    hi = w.astype(BF16).astype(np.float64)
    lo = (w.astype(np.float64) - hi).astype(np.float32).astype(BF16).astype(np.float32)
    src = sbuf(k, 0, m, "fp32")
    for split, want in ((Fp32Pass.HI, hi.astype(np.float32)), (Fp32Pass.LO, lo)):
        sim = FunctionalSimulator("trn2")
        sim.memory.write(src, w)
        sim.run(Program([load(src, m, split)]))
        got = sim.tiles[Rect(0, k, 0, m)]
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    assert np.any(lo != 0)  # the remainder is not trivially zero


# -- INT48: the functional simulator's integer PSUM wraps ----------------------------------
def test_integer_accumulation_past_2_to_the_47_wraps_as_twos_complement() -> None:
    """int48_wrap_removed: 300 int16 MatMuls of 128 products of (-32768 - 32767)^2 each sum
    to 1.65e14 > 2^47 (seed 004's INT48 accumulator); the closed form in Python integers."""
    k, steps, zp = 128, 300, 32767
    w_ap, x_ap = sbuf(k, 0, 1, "int16"), sbuf(k, 0x100, 1, "int16")
    dst = psum(1, 0, 1, "int48")
    instrs: list[object] = [load(w_ap, 1)]
    for i in range(steps):
        flags = CalcFlags.START if i == 0 else CalcFlags.ACCUMULATE
        if i == steps - 1:
            flags |= CalcFlags.STOP
        instrs.append(matmul(x_ap, dst, flags, "int16", zp=(zp, zp)))
    sim = FunctionalSimulator("trn2")
    sim.memory.write(w_ap, np.full((k, 1), -32768))
    sim.memory.write(x_ap, np.full((k, 1), -32768))
    sim.run(Program(instrs))  # type: ignore[arg-type]
    total = steps * k * (-32768 - zp) ** 2
    assert total > 2**47
    want = (total + 2**47) % 2**48 - 2**47
    assert int(sim.memory.view(dst).reshape(-1)[0]) == want


# -- MX: the executor's decoded operands are mx.dequantize's ------------------------------
@pytest.mark.parametrize("fmt", ["mxfp4", "mxfp8_e4m3"])
def test_the_mx_executor_decodes_each_operand_as_dequantize_does(fmt: str) -> None:
    """fp4_nibbles_swapped, mx_scale_bias: a product cannot see a nibble order swapped in
    both operands alike, so compare the latched stationary tile and the decoded moving tile
    with mx.dequantize of the quantized operands, element for element (k in order)."""
    from systolic import mx
    from systolic.api import quantize_operands, write_operands
    from systolic.arch import get_arch
    from systolic.compiler import MatmulSpec, lower
    from systolic.isa import LdWeightMx, MatmultMx
    from systolic.sim.functional_mx import read_operand

    arch = get_arch("trn3")
    rng = np.random.default_rng(5)
    m, k, n = 8, 64, 4
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    low = lower(MatmulSpec(m, k, n, fmt), arch)
    qa, qb = quantize_operands(a, b, fmt)
    sim = FunctionalSimulator(arch, dram_bytes=low.layout.dram_bytes)
    write_operands(sim.memory.dram, low.layout, qa, qb)
    sim.run(low.program)
    ld = next(i for i in low.program if isinstance(i, LdWeightMx))
    mm = next(i for i in low.program if isinstance(i, MatmultMx))
    key = Rect(ld.src.partition, ld.src.partitions, ld.column, ld.src.dims[-1][1])
    np.testing.assert_array_equal(sim.tiles[key], mx.dequantize(qa))
    got_b = read_operand(sim.memory, mm.moving, mm.scale, mm.fmt).dequantized()
    np.testing.assert_array_equal(got_b, mx.dequantize(qb))


# -- tiles on adjacent array rows stay latched ----------------------------------------------
def test_tiles_on_adjacent_array_rows_are_both_latched() -> None:
    """latch_evicts_neighbour: two 32-row tiles in row quadrants 0 and 1 share no PE, so
    loading the second keeps the first; both products are exact (small integers)."""
    k, m, n = 32, 16, 8
    rng = np.random.default_rng(6)
    ws = [rng.integers(-8, 9, (k, m)).astype(np.float32) for _ in range(2)]
    xs = [rng.integers(-8, 9, (k, n)).astype(np.float32) for _ in range(2)]
    instrs: list[object] = []
    sim = FunctionalSimulator("trn2")
    for q in range(2):
        w_ap = sbuf(k, 0, m, "bf16", part=32 * q)
        sim.memory.write(w_ap, ws[q])
        instrs.append(load(w_ap, m))
    for q in range(2):
        x_ap = sbuf(k, 0x1000, n, "bf16", part=32 * q)
        sim.memory.write(x_ap, xs[q])
        instrs.append(matmul(x_ap, psum(m, 2048 * q, n), ONE, "bf16"))
    sim.run(Program(instrs))  # type: ignore[arg-type]
    for q in range(2):
        got = sim.memory.read(psum(m, 2048 * q, n))
        np.testing.assert_array_equal(got, ws[q].astype(np.float64).T @ xs[q])


# -- formats: scale bytes and fp4's NaN ------------------------------------------------------
def test_e8m0_scale_bytes_are_ml_dtypes_powers_of_two() -> None:
    """e8m0_range: 2**e for e in -127..127 is ml_dtypes' E8M0 byte; 128 and -128 have none
    (NaN, 0xFF)."""
    from systolic.dtypes import e8m0_from_exponent

    e = np.arange(-127, 128)
    want = np.ldexp(np.float32(1.0), e).astype(np.float32).astype(ml_dtypes.float8_e8m0fnu)
    got = e8m0_from_exponent(e)
    np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    assert list(e8m0_from_exponent(np.array([128, 129, -128])).view(np.uint8)) == [255] * 3


def test_fp4_refuses_a_nan_among_numbers() -> None:
    """fp4_nan_accepted: ml_dtypes turns NaN into zero for e2m1; one NaN among numbers is
    refused as a NaN alone is."""
    from systolic.dtypes import encode
    from systolic.errors import FormatError

    with pytest.raises(FormatError, match="no NaN"):
        encode(np.array([1.0, np.nan, 2.0], np.float32), "fp4_e2m1")


# -- the verifier ------------------------------------------------------------------------------
def test_a_matmul_into_a_psum_format_it_cannot_accumulate_in_is_refused() -> None:
    """verify_acc_dtype: PSUM accumulates in fp32 (seed 000) or, for integer operands, in
    seed 004's INT48 as an explicit option; bf16 PSUM of an integer product or an INT48 float
    product is refused (bf16/fp16 PSUM is for float products from NeuronCore-v3)."""
    from systolic import verify
    from systolic.errors import VerifyError

    w_ap, x_ap = sbuf(32, 0, 16, "int8"), sbuf(32, 0x100, 8, "int8")
    for acc in ("fp32", "int48"):
        verify(Program([load(w_ap, 16), matmul(x_ap, psum(16, 0, 8, acc), ONE, "int8")]),
               "trn2")
    prog = Program([load(w_ap, 16), matmul(x_ap, psum(16, 0, 8, "bf16"), ONE, "int8")])
    with pytest.raises(VerifyError, match="fp32 or int48, not bf16"):
        verify(prog, "trn2")
    fw, fx = sbuf(32, 0, 16, "bf16"), sbuf(32, 0x100, 8, "bf16")
    prog = Program([load(fw, 16), matmul(fx, psum(16, 0, 8, "int48"), ONE, "bf16")])
    with pytest.raises(VerifyError, match="is fp32, not int48"):
        verify(prog, "trn1")
    # from NeuronCore-v3 a 16-bit float product may also land in bf16 / fp16 PSUM
    with pytest.raises(VerifyError, match="is fp32 or bf16 or fp16, not int48"):
        verify(prog, "trn2")


def test_a_moving_k_smaller_than_the_tile_is_refused() -> None:
    """verify_k_mismatch: 16 moving rows against a 32-row tile would leave PEs unfed."""
    from systolic import verify
    from systolic.errors import VerifyError

    w_ap = sbuf(32, 0, 16, "bf16")
    for parts in (16, 31):
        prog = Program([load(w_ap, 16), matmul(sbuf(parts, 0x100, 8, "bf16"),
                                                psum(16, 0, 8), ONE, "bf16")])
        with pytest.raises(VerifyError):
            verify(prog, "trn2")


# -- the weight-tile cache across perf modes ---------------------------------------------------
def test_the_weight_cache_does_not_hit_across_perf_modes() -> None:
    """cache_hit_any_perf: the same fp8 weights latched for DoubleRow are not warm for
    DoubleRowSwInterleave (seed 000: same weights AND same perf signature); the emitted
    Program must verify (its MatMul's perf mode matches the latched tile's)."""
    from systolic import verify
    from systolic.arch import get_arch
    from systolic.compiler import WeightTileState, calc_flags, emit_nc_matmul

    arch = get_arch("trn2")
    dims = ((16, 2), (1, 16))
    w = AccessPattern(Space.SBUF, 0, 32, 0, dims, "fp8_e4m3")
    x = AccessPattern(Space.SBUF, 0, 32, 0x1000, ((8, 2), (1, 8)), "fp8_e4m3")
    instrs: list[object] = []
    state = WeightTileState()
    for i, mode in enumerate((PerfMode.DOUBLE_ROW, PerfMode.DOUBLE_ROW_SW_INTERLEAVE)):
        out, state = emit_nc_matmul(state, arch, stationary=w, moving=x,
                                    dst=psum(16, 2048 * i, 8),
                                    flags=calc_flags(arch, True, True), perf_mode=mode)
        instrs += out
    assert sum(isinstance(i, LoadStationary) for i in instrs) == 2
    verify(Program(instrs), arch)  # type: ignore[arg-type]


# -- bundles: num_active_cols ------------------------------------------------------------------
def test_num_active_cols_is_halved_for_double_row_only() -> None:
    """bundle_active_cols_interleave: seed 000 (CoreV2 generateMatMul) divides the
    destination's elements per partition by 2 only for perf mode 1 ("cmp [rax+0x2D0], 1");
    DoubleRowSwInterleave (4) keeps the full count."""
    import struct

    from systolic.compiler.bundle import encode_program

    x = AccessPattern(Space.SBUF, 0, 32, 0x1000, ((100, 2), (1, 100)), "fp8_e4m3")
    w = AccessPattern(Space.SBUF, 0, 32, 0, ((16, 2), (1, 16)), "fp8_e4m3")
    for mode, want in ((PerfMode.DOUBLE_ROW, 50), (PerfMode.DOUBLE_ROW_SW_INTERLEAVE, 100),
                       (PerfMode.NONE, 100)):
        mv = x if mode.k_fold == 2 else sbuf(32, 0x1000, 100, "fp8_e4m3")
        ld = load(w if mode.k_fold == 2 else sbuf(32, 0, 16, "fp8_e4m3"), 16, mode=mode)
        mm = matmul(mv, psum(16, 0, 100), ONE, "fp8_e4m3", mode=mode)
        data = encode_program(Program([ld, mm]), 3)
        assert struct.unpack_from("<H", data, 64 + 0x27)[0] == want, mode


# -- the functional simulator against references rounded outside the package ------------------
def _tf32_reference(x: np.ndarray) -> np.ndarray:
    """x (float32, normal or zero) to 11 significant bits, ties to even: np.round in float64
    (numpy rounds halves to even) on the value scaled so the kept bits are the integer."""
    x64 = x.astype(np.float64)
    with np.errstate(divide="ignore"):
        e = np.floor(np.log2(np.abs(x64)))
    q = np.where(x64 == 0, 1.0, np.exp2(e - 10))
    return (np.round(x64 / q) * q).astype(np.float32)


_ML = {"bf16": BF16, "fp16": np.float16, "fp8_e4m3": ml_dtypes.float8_e4m3,
       "fp8_e5m2": ml_dtypes.float8_e5m2}


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "tf32", "fp32r"])
@pytest.mark.parametrize("numerics", ["fast", "systolic"])
def test_products_match_float64_of_operands_rounded_by_ml_dtypes(dtype: str,
                                                                  numerics: str) -> None:
    """bf16_encode_truncates and the rounding mutants: test_functional builds its references
    with the package's own round_to, so a rounding bug shows in both sides there; here the
    operands are rounded by ml_dtypes (tf32/fp32r: np.round in float64)."""
    from helpers import fp32_bound

    import systolic

    rng = np.random.default_rng(7)
    a = rng.standard_normal((40, 70)).astype(np.float32)
    b = rng.standard_normal((70, 30)).astype(np.float32)
    if dtype in _ML:
        ar, br = (v.astype(_ML[dtype]).astype(np.float32) for v in (a, b))
    else:
        ar, br = _tf32_reference(a), _tf32_reference(b)
    out = systolic.matmul(a, b, dtype=dtype, numerics=numerics).out
    ref = ar.astype(np.float64) @ br.astype(np.float64)
    assert np.all(np.abs(out - ref) <= fp32_bound(ar, br))


def test_tf32_rounding_is_nearest_even_by_a_closed_form() -> None:
    """tf32_truncates, tf32_ties_away: round_to against np.round in float64, on random values
    and on exact ties (1 + 2^-11: even is 1; 1 + 3 * 2^-11: even is 1 + 2^-9)."""
    from systolic import round_to

    rng = np.random.default_rng(8)
    x = (rng.standard_normal(4000) * 10.0 ** rng.integers(-20, 20, 4000)).astype(np.float32)
    ties = np.array([1 + 2.0**-11, 1 + 3 * 2.0**-11, -(1 + 2.0**-11), 3 * 2.0**-12],
                    np.float32)
    for name in ("tf32", "fp32r"):
        for v in (x, ties):
            np.testing.assert_array_equal(round_to(v, name), _tf32_reference(v))


# -- the generation table's gate, at its boundary --------------------------------------------
def test_gen3_writes_the_calc_byte_at_arch_level_40_and_not_above() -> None:
    """gen3_gate_inclusive: seed 000's generateMatMulAccumulateFlag opens with
    ``cmp [module+0xAC], 0x28; jg``: it returns early only ABOVE 40, so level 40 itself
    writes the byte with its ACCUMULATE bit; 41 does not."""
    import dataclasses

    from systolic.arch import get_arch
    from systolic.compiler import MatmulSpec, lower
    from systolic.compiler.bundle import encode_program
    from systolic.isa.generation import rules

    assert rules(3).writes_calc_byte(40) and not rules(3).writes_calc_byte(41)
    at40 = dataclasses.replace(get_arch("trn2"), arch_level=40)
    prog = lower(MatmulSpec(64, 384, 64, "bf16"), at40).program
    assert [i.flags for i in prog if isinstance(i, MatMul)] == [
        CalcFlags.START, CalcFlags.ACCUMULATE, CalcFlags.ACCUMULATE | CalcFlags.STOP]
    data = encode_program(prog, at40)
    mm = [j for j, i in enumerate(prog) if isinstance(i, MatMul)]
    assert [data[64 * j + 0x2B] for j in mm] == [1, 4, 6]


# -- DoubleRow ragged K tiles ------------------------------------------------------------------
@pytest.mark.parametrize(("k", "want"), [
    (127, [(127, "none")]),                       # odd, fits the 128 rows unfolded
    (256 + 127, [(256, "double_row"), (127, "none")]),
    (128, [(128, "double_row")]),                 # even: folded into 64 partitions
    (129, [(128, "double_row"), (1, "none")]),    # odd and too tall: pairs, then one row
    (255, [(254, "double_row"), (1, "none")]),
    (257, [(256, "double_row"), (1, "none")]),
])
def test_double_row_ragged_k_tiles_by_hand(k: int, want: list[tuple[int, str]]) -> None:
    """ktile_odd_fits, ktile_count_odd: the K tiles of a DoubleRow product (256 contraction
    rows per full tile), worked out by hand; matmul_count and the lowering agree with them."""
    from systolic.arch import get_arch
    from systolic.compiler import MatmulSpec, lower
    from systolic.compiler.tiling import matmul_count, tile

    arch = get_arch("trn2")
    spec = MatmulSpec(8, k, 8, "fp8_e4m3", PerfMode.DOUBLE_ROW)
    plan = tile(spec, arch)
    assert [(t.size, t.perf_mode.spelling) for t in plan.k_tiles] == want
    assert matmul_count(spec, arch) == len(want)
    prog = lower(spec, arch).program
    assert sum(isinstance(i, MatMul) for i in prog) == len(want)


# -- addresses and the wavefront -------------------------------------------------------------
def test_start_addresses_fold_the_partition_in_as_seed_000_gives() -> None:
    """sbuf_partition_shift: seed 000 "Partition Geometry": SBUF part << 18 | offset, PSUM
    part << 15 | offset, DRAM the byte offset; and the bundle's ADDR4 word (bits 0..27)
    holds the same address."""
    import struct

    from systolic.compiler.bundle import encode_program

    mv = sbuf(32, 0x1240, 16, "bf16", part=32)
    dst = AccessPattern(Space.PSUM, 64, 16, 0x800, ((1, 16),), "fp32")
    assert mv.start_address() == (32 << 18) | 0x1240
    assert dst.start_address() == (64 << 15) | 0x800
    assert dram(4, 0x300, 8, "bf16", 2).start_address() == 0x300
    ld = LoadStationary(sbuf(32, 0, 16, "bf16", part=32), 64, TileGroup.Q1, TileGroup.Q2)
    mm = MatMul(mv, dst, ONE, "bf16", 32, TileGroup.Q1, TileGroup.Q2)
    data = encode_program(Program([ld, mm]), 3)
    assert struct.unpack_from("<I", data, 64 + 0x04)[0] & 0x0FFFFFFF == mv.start_address()
    assert struct.unpack_from("<I", data, 64 + 0x30)[0] & 0x0FFFFFFF == dst.start_address()


@pytest.mark.parametrize(("n", "k", "m", "period"), [(1, 1, 1, 1), (3, 3, 3, 1), (5, 7, 2, 1),
                                                      (4, 6, 3, 2), (10, 1, 9, 4)])
def test_wavefront_cycles_by_brute_force(n: int, k: int, m: int, period: int) -> None:
    """wavefront_off_by_one: X[k, n] reaches PE(k, m) at cycle period*n + k + m (seed 003),
    so the instruction spans the last arrival + 1 cycles; enumerated over every MAC, and the
    timing model's duration of the same MatMul agrees for period 1."""
    from systolic.arch import get_arch
    from systolic.geometry import wavefront_cycles
    from systolic.timing.pe import matmul_duration

    nn, kk, mm = np.meshgrid(np.arange(n), np.arange(k), np.arange(m), indexing="ij")
    assert wavefront_cycles(n, k, m, period) == int((period * nn + kk + mm).max()) + 1
    if period == 1:
        ins = matmul(sbuf(k, 0, n, "bf16"), psum(m, 0, n), ONE, "bf16")
        assert matmul_duration(ins, get_arch("trn2")) == wavefront_cycles(n, k, m)


# -- bounds, argument checks, the SBUF slot policy ---------------------------------------------
def test_a_pattern_running_off_the_end_of_a_partition_is_refused() -> None:
    """bytes_start_only: the pattern starts inside SBUF but its last byte lies past the
    partition's end (sbuf_bytes), so the whole extent must be checked, not its start."""
    from systolic import verify
    from systolic.arch import get_arch
    from systolic.errors import VerifyError

    arch = get_arch("trn2")
    inside = sbuf(8, arch.sbuf_bytes - 128, 64, "bf16")  # exactly the last 128 bytes
    past = sbuf(8, arch.sbuf_bytes - 64, 64, "bf16")  # 64 bytes past the end
    src = dram(8, 0, 64, "bf16", 2)
    verify(Program([DmaLoad(src, inside)]), arch, 4096)
    with pytest.raises(VerifyError, match="outside"):
        verify(Program([DmaLoad(src, past)]), arch, 4096)


@pytest.mark.parametrize("zp", [(True, 0), (0, False), (1.0, 0)])
def test_zero_points_must_be_true_integers(zp: tuple[object, object]) -> None:
    """zero_points_bool: a bool is not a zero point (True would silently mean 1)."""
    import systolic
    from systolic.errors import SystolicError

    a = np.ones((2, 3), np.int8)
    with pytest.raises(SystolicError, match="zero_points must be two integers"):
        systolic.matmul(a, a.T, dtype="int8", zero_points=zp)  # type: ignore[arg-type]


def test_sbuf_slots_evict_the_least_recently_used_tile() -> None:
    """slots_fifo_not_lru: with two slots, touching ``a`` again makes ``b`` the one to go."""
    from systolic.compiler.codegen import SlotCache

    cache = SlotCache(0x100, 64, 2)
    off_a, hit_a = cache.get("a")
    off_b, hit_b = cache.get("b")
    assert not hit_a and not hit_b and {off_a, off_b} == {0x100, 0x140}
    assert cache.get("a") == (off_a, True)  # a is now the most recent
    assert cache.get("c") == (off_b, False)  # so c takes b's slot
    assert cache.get("a") == (off_a, True)
    assert cache.get("b")[1] is False  # b was evicted


def test_a_reshaping_dma_over_an_address_already_read_is_seen() -> None:
    """decode_cache_kept_sbuf_dma: a DmaLoad whose source is shaped [K, 2, N/2] and its SBUF
    destination [K, N] is copied in place (not deferred); the second product reads the SBUF
    pattern the first one read, after that DmaLoad wrote over it. Small integers make every
    fp32 sum exact, so float64 is the exact reference."""
    k, m, n = 32, 16, 64
    rng = np.random.default_rng(3)
    w = rng.integers(-8, 9, (k, m)).astype(np.float32)
    x1 = rng.integers(-8, 9, (k, n)).astype(np.float32)
    x2 = rng.integers(-8, 9, (k, n)).astype(np.float32)
    w_off, x1_off, x2_off, out_off = 0, 0x1000, 0x3000, 0x6000
    x_sb, w_sb, dst = sbuf(k, 0x8000, n, "bf16"), sbuf(k, 0, m, "bf16"), psum(m, 0, n)
    x2_src = AccessPattern(Space.DRAM, 0, k, x2_off, ((n // 2, 2), (1, n // 2)), "bf16",
                           partition_step=n * 2)
    prog = Program([
        DmaLoad(dram(k, w_off, m, "bf16", 2), w_sb),
        DmaLoad(dram(k, x1_off, n, "bf16", 2), x_sb),
        load(w_sb, m),
        matmul(x_sb, dst, ONE, "bf16"),
        ReadOut(dst, dram(m, out_off, n, "fp32", 4)),
        DmaLoad(x2_src, x_sb),
        matmul(x_sb, dst, ONE, "bf16"),
        ReadOut(dst, dram(m, out_off + m * n * 4, n, "fp32", 4)),
    ])
    for workers in (0, 1, 3):
        sim = FunctionalSimulator("trn2", dram_bytes=0x10000, workers=workers)
        sim.write_dram(w_off, w, "bf16")
        sim.write_dram(x1_off, x1, "bf16")
        sim.write_dram(x2_off, x2, "bf16")
        sim.run(prog)
        out = sim.read_dram(out_off, (2, m, n), "fp32")
        w64 = w.astype(np.float64)
        np.testing.assert_array_equal(out[0], w64.T @ x1.astype(np.float64))
        np.testing.assert_array_equal(out[1], w64.T @ x2.astype(np.float64))
