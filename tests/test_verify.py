"""Each check of verify fires on a program built to trip it, naming the instruction."""

from __future__ import annotations

import dataclasses

import pytest

from systolic import (
    AccessPattern,
    CalcFlags,
    LoadStationary,
    MatMul,
    PerfMode,
    Program,
    ReadOut,
    Space,
    VerifyError,
    get_arch,
    verify,
)
from systolic.isa import Fp32Pass, col_group, row_group

S, P, D = Space.SBUF, Space.PSUM, Space.DRAM


def sb(parts: int, n: int, dtype: str = "bf16", off: int = 0, lead: int = 0,
       first: int = 0) -> AccessPattern:
    dims = ((n, lead), (1, n)) if lead else ((1, n),)
    return AccessPattern(S, first, parts, off, dims, dtype)


def ps(parts: int, n: int, off: int = 0) -> AccessPattern:
    return AccessPattern(P, 0, parts, off, ((1, n),), "fp32")


def load(k: int, m: int, dtype: str = "bf16", mode: PerfMode = PerfMode.NONE) -> LoadStationary:
    lead = 2 if mode.k_fold == 2 else 0
    return LoadStationary(sb(k, m, dtype, lead=lead), 0, row_group(0, k), col_group(0, m), mode)


def mm(k: int, m: int, n: int, flags: CalcFlags, dtype: str = "bf16", off: int = 0,
       mode: PerfMode = PerfMode.NONE, sdtype: str | None = None) -> MatMul:
    lead = 2 if mode.k_fold == 2 else 0
    return MatMul(sb(k, n, dtype, off=0x8000, lead=lead), ps(m, n, off), flags,
                  sdtype or dtype, 0, row_group(0, k), col_group(0, m), mode)


SS = CalcFlags.START | CalcFlags.STOP


def fails(prog: list[object], arch: str, index: int, match: str) -> None:
    with pytest.raises(VerifyError, match=match) as info:
        verify(Program(prog), arch, dram_bytes=1 << 20)
    assert info.value.index == index


def test_a_valid_program_passes() -> None:
    verify(Program([load(128, 128), mm(128, 128, 512, SS)]), "trn2")
    verify(Program([load(64, 32, "fp8_e4m3", PerfMode.DOUBLE_ROW),
                    mm(64, 32, 100, SS, "fp8_e4m3", mode=PerfMode.DOUBLE_ROW)]), "trn2")


def test_matmul_without_stationary() -> None:
    fails([mm(128, 128, 512, SS)], "trn2", 0, "no stationary tile latched")


def test_shapes_past_the_limits() -> None:
    fails([load(128, 128), mm(128, 128, 513, SS)], "trn2", 1, "fit one PSUM bank")
    bad_m = LoadStationary(sb(128, 129), 0, 15, 15)
    fails([bad_m], "trn2", 0, "exceeds the 128 array columns")
    bad_k = LoadStationary(AccessPattern(S, 0, 129, 0, ((1, 8),), "bf16"), 0, 15, 1)
    fails([bad_k], "trn2", 0, "exceed the 128 partitions")
    # DoubleRow: at most 2 contraction elements per partition, so K <= 256
    three = LoadStationary(AccessPattern(S, 0, 128, 0, ((8, 3), (1, 8)), "fp8_e4m3"), 0, 15, 1,
                           PerfMode.DOUBLE_ROW)
    fails([three], "trn2", 0, "needs 2 contraction element")


def test_group_spanning_two_banks() -> None:
    fails([load(128, 128), mm(128, 128, 100, SS, off=2048 - 200)], "trn2", 1, "span banks")


def test_accumulate_or_stop_without_start() -> None:
    fails([load(128, 128), mm(128, 128, 64, CalcFlags.STOP)], "trn2", 1, "no START opened")
    fails([load(128, 128), mm(128, 128, 64, CalcFlags.ACCUMULATE)], "trn2", 1,
          "no START opened")


def test_group_never_stopped() -> None:
    fails([load(128, 128), mm(128, 128, 64, CalcFlags.START)], "trn2", 1, "never saw STOP")


def test_readout_rules() -> None:
    early = ReadOut(ps(128, 64), AccessPattern(D, 0, 128, 0, ((1, 64),), "fp32", 256))
    fails([load(128, 128), mm(128, 128, 64, CalcFlags.START), early], "trn2", 2, "still open")
    # a finished result must be read out before a new START overwrites it
    fails([load(128, 128), mm(128, 128, 64, SS), mm(128, 128, 64, SS)], "trn2", 2,
          "never read out")
    ok = [load(128, 128), mm(128, 128, 64, SS), early, mm(128, 128, 64, SS)]
    verify(Program(ok), "trn2", dram_bytes=1 << 20)


def test_generation_gates() -> None:
    fails([load(128, 32, "fp8_e4m3", PerfMode.DOUBLE_ROW)], "trn1", 0,
          "double_row is not supported on trn1")
    fails([load(128, 32, "fp8_e4m3fn")], "trn2", 0, "fp8_e4m3fn is not supported on trn2")
    fails([load(128, 32, "bf16", PerfMode.DOUBLE_ROW)], "trn2", 0, "bf16 is not fp8")
    acc = [load(128, 128), mm(128, 128, 64, CalcFlags.START),
           mm(128, 128, 64, CalcFlags.ACCUMULATE | CalcFlags.STOP)]
    verify(Program(acc), "trn2")
    fails(acc, "trn1", 2, "gen2 bundles carry only START and STOP")
    high = dataclasses.replace(get_arch("trn2"), arch_level=41)
    with pytest.raises(VerifyError, match="arch level 41 > 40"):
        verify(Program(acc), high)


def test_fp32_mixed_with_other_formats() -> None:
    fails([load(128, 128, "fp32"), mm(128, 128, 64, SS, "bf16", sdtype="fp32")], "trn2", 1,
          "fp32-family operands pair only with fp32-family")


def test_stationary_mismatch() -> None:
    fails([load(128, 128), mm(128, 128, 64, SS, "fp16", sdtype="fp16")], "trn2", 1,
          "latched tile")
    fails([load(128, 128), mm(64, 128, 64, SS)], "trn2", 1, "no stationary tile latched")


def test_mx_formats_only_on_the_mx_pair() -> None:
    fails([load(128, 32, "mxfp8_e4m3")], "trn3", 0, "block-scaled")


def test_double_column_passes_the_validator() -> None:
    # seed 000: DoubleColumn/DoublePixel selectors are validated; only their encoding is unknown
    prog = [load(128, 32, "fp8_e4m3", PerfMode.DOUBLE_COLUMN),
            mm(128, 32, 64, SS, "fp8_e4m3", mode=PerfMode.DOUBLE_COLUMN)]
    verify(Program(prog), "trn2")
    fails(prog, "trn1", 0, "not supported on trn1")


def test_tile_start_must_be_a_multiple_of_its_size() -> None:
    # a 64-row tile at partition 32 would be tagged 3 (the LUT's idx = 1) while it occupies
    # quadrants 1 and 2: refused (NKI: tile_position a multiple of tile_size)
    off = AccessPattern(S, 32, 64, 0, ((1, 32),), "bf16")
    fails([LoadStationary(off, 0, row_group(32, 64), col_group(0, 32))], "trn2", 0,
          r"tile rows 32\.\.95: .*multiple of 64, not at 32")
    fails([LoadStationary(sb(32, 64), 32, row_group(0, 32), col_group(32, 64))], "trn2", 0,
          r"tile columns 32\.\.95: .*multiple of 64")
    fails([LoadStationary(AccessPattern(S, 16, 16, 0, ((1, 8),), "bf16"), 0,
                          row_group(16, 16), col_group(0, 8))], "trn2", 0, "multiple of 32")
    # the aligned tiles of each size pass, wherever they sit
    for row, rows in [(96, 32), (64, 64), (0, 128), (32, 20)]:
        ap = AccessPattern(S, row, rows, 0, ((1, 32),), "bf16")
        verify(Program([LoadStationary(ap, 0, row_group(row, rows), col_group(0, 32))]),
               "trn2")


def test_gen4_dense_calc_bytes_5_and_7_are_refused() -> None:
    # one rule with the encoder (generation table): {0,1,2,3,4,6} on gen4, dense as MX
    for flags in (CalcFlags.START | CalcFlags.ACCUMULATE, CalcFlags(7)):
        fails([load(128, 128), mm(128, 128, 64, flags)], "trn3", 1,
              f"accumulate byte {int(flags)} is not one of")
    verify(Program([load(128, 128), mm(128, 128, 64, CalcFlags(3))]), "trn3")


def test_perf_mode_must_match_the_latched_tile() -> None:
    fails([load(64, 32, "fp8_e4m3", PerfMode.DOUBLE_ROW),
           mm(64, 32, 100, SS, "fp8_e4m3", mode=PerfMode.DOUBLE_ROW_SW_INTERLEAVE)], "trn2", 1,
          "perf mode double_row_sw_interleave differs from the latched tile's double_row")


def test_fp8_e4m3fn_does_not_mix_with_the_legacy_e4m3() -> None:
    fails([load(128, 32, "fp8_e4m3fn"), mm(128, 32, 64, SS, "fp8_e4m3", sdtype="fp8_e4m3fn")],
          "trn3", 1, "fp8_e4m3fn does not mix with the legacy fp8_e4m3")


def test_zero_points_belong_to_integers() -> None:
    fails([load(128, 128), dataclasses.replace(mm(128, 128, 64, SS), zp_moving=3)], "trn2", 1,
          "zero points belong to the integer path")
    fails([load(128, 128), dataclasses.replace(mm(128, 128, 64, SS), zp_stationary=-1)],
          "trn2", 1, "zero points belong to the integer path")
    ints = [load(128, 128, "int8"), dataclasses.replace(
        mm(128, 128, 64, SS, "int8"), zp_moving=3, zp_stationary=-1,
        dst=AccessPattern(P, 0, 128, 0, ((1, 64),), "int48"))]
    verify(Program(ints), "trn2")


def test_fp32_pass_range_and_format() -> None:
    fails([load(128, 128), dataclasses.replace(mm(128, 128, 64, SS), fp32_pass=3)], "trn2", 1,
          "fp32_pass must be an Fp32Pass")
    fails([dataclasses.replace(load(128, 128), fp32_pass="hi")], "trn2", 0,
          "fp32_pass must be an Fp32Pass")
    fails([dataclasses.replace(load(128, 128), fp32_pass=Fp32Pass.HI)], "trn2", 0,
          "the hi/lo split is the fp32 two-pass lowering")
    verify(Program([dataclasses.replace(load(128, 128, "fp32"), fp32_pass=Fp32Pass.LO)]),
           "trn2")


def test_flags_must_be_calc_flags() -> None:
    fails([load(128, 128), dataclasses.replace(mm(128, 128, 64, SS), flags=3)], "trn2", 1,
          "flags must be CalcFlags")


def test_a_16_bit_psum_destination_needs_neuroncore_v3_and_a_16_or_8_bit_float() -> None:
    def half(dtype: str) -> list[object]:
        dst = AccessPattern(P, 0, 128, 0, ((1, 64),), dtype)
        return [load(128, 128), dataclasses.replace(mm(128, 128, 64, SS), dst=dst)]

    # trainium2_arch.rst: FP16/BF16 PSUM output (transpose mode, v3); v4: FP32 or BF16
    for dtype in ("bf16", "fp16"):
        verify(Program(half(dtype)), "trn2")
        fails(half(dtype), "trn1", 1, f"PSUM destination of a bf16 MatMul is fp32, not {dtype}")
    wide = [load(128, 128, "fp32"), dataclasses.replace(
        mm(128, 128, 64, SS, "fp32"), dst=AccessPattern(P, 0, 128, 0, ((1, 64),), "bf16"))]
    fails(wide, "trn3", 1, "PSUM destination of a fp32 MatMul is fp32, not bf16")
