"""The MX path end to end: matmul against float64 of the dequantized operands, the order of
the additions, the LdWeightMx/MatmultMx programs, the verifier's refusals, timing.

References are independent of the code under test: operands are quantized with
``mx.quantize`` along K (the OCP blocks of 32, not the hardware path ``quantize_hw``),
dequantized, and multiplied in float64; the fp32 bound is Higham's gamma (tests/helpers.py).
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from helpers import fp32_bound
from hypothesis import given, settings
from hypothesis import strategies as st

import systolic
from systolic import mx
from systolic.arch import get_arch
from systolic.cli import main
from systolic.compiler import MatmulSpec, lower
from systolic.errors import ArchError, SystolicError, VerifyError
from systolic.isa import (
    AccessPattern,
    CalcFlags,
    DmaLoad,
    LdWeightMx,
    LoadStationary,
    MatmultMx,
    Program,
    ReadOut,
    Space,
)
from systolic.sim.systolic import SystolicSimulator
from systolic.verify import verify

MX = ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp4"]
RULES = ["ocp", "trainium"]
TRN3 = get_arch("trn3")


def dequantized(a: np.ndarray, b: np.ndarray, fmt: str, rule: str
                ) -> tuple[np.ndarray, np.ndarray, mx.MXTensor, mx.MXTensor]:
    """a [M, K], b [K, N] zero-padded to K = 32j and OCP-quantized along K; float64 values
    and the quantized tensors (a's blocks along axis 1, b's along axis 0)."""
    k = a.shape[1]
    kp = -(-k // 32) * 32
    ap = np.zeros((a.shape[0], kp), np.float32)
    ap[:, :k] = a
    bp = np.zeros((kp, b.shape[1]), np.float32)
    bp[:k] = b
    qa = mx.quantize(ap, fmt, rule=rule, axis=1)  # type: ignore[arg-type]
    qb = mx.quantize(bp, fmt, rule=rule, axis=0)  # type: ignore[arg-type]
    return (mx.dequantize(qa).astype(np.float64), mx.dequantize(qb).astype(np.float64),
            qa, qb)


def check_against_float64(a: np.ndarray, b: np.ndarray, fmt: str, rule: str,
                          numerics: str) -> None:
    res = systolic.matmul(a, b, dtype=fmt, arch="trn3", numerics=numerics, mx_rule=rule)
    da, db, _, _ = dequantized(a, b, fmt, rule)
    err = np.abs(res.out.astype(np.float64) - da @ db)
    assert res.out.dtype == np.float32 and res.out.shape == (a.shape[0], b.shape[1])
    assert np.all(err <= fp32_bound(da, db))


# -- numerics ------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", MX)
@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("numerics", ["fast", "systolic"])
def test_matmul_is_the_fp32_product_of_the_dequantized_operands(fmt: str, rule: str,
                                                                numerics: str) -> None:
    # ragged M and N, K = 600: one full tile of 512 and a ragged one of 88 -> 96 (padded)
    rng = np.random.default_rng(7)
    a = rng.standard_normal((130, 600)).astype(np.float32)
    # per-row magnitudes over 2**-40..2**40: the scales differ from block to block
    a *= np.exp2(rng.integers(-40, 40, (130, 1))).astype(np.float32)
    b = rng.standard_t(3, (600, 515)).astype(np.float32)
    check_against_float64(a, b, fmt, rule, numerics)


@settings(max_examples=12, deadline=None)
@given(m=st.integers(1, 140), k=st.integers(1, 1100), n=st.integers(1, 530),
       fmt=st.sampled_from(MX), rule=st.sampled_from(RULES), seed=st.integers(0, 2**16))
def test_random_shapes_including_k_not_a_multiple_of_32(m: int, k: int, n: int, fmt: str,
                                                       rule: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    check_against_float64(a, b, fmt, rule, "fast")


def reference_order(qa: mx.MXTensor, qb: mx.MXTensor, numerics: str) -> np.ndarray:
    """The documented order, written out for one K tile: per block the element products
    summed (systolic: in k order, fp32; MXFP4 fast: exactly, as any order gives), scaled by
    X_a X_b with one rounding, block results added in block order in fp32."""
    pa = mx.dequantize(dataclasses.replace(qa, scales=np.full_like(qa.scales, 127)))
    pb = mx.dequantize(dataclasses.replace(qb, scales=np.full_like(qb.scales, 127)))
    ea = qa.scales.astype(np.int64) - 127  # [M, G]
    eb = qb.scales.astype(np.int64) - 127  # [G, N]
    res = None
    for g in range(qb.scales.shape[0]):
        ks = slice(32 * g, 32 * g + 32)
        if numerics == "systolic":
            s = np.zeros((pa.shape[0], pb.shape[1]), np.float32)
            for k in range(ks.start, ks.stop):
                s += np.multiply.outer(pa[:, k], pb[k])
        else:
            s = pa[:, ks].astype(np.float64) @ pb[ks].astype(np.float64)
        r = (s.astype(np.float64) * np.exp2(ea[:, g][:, None] + eb[g][None, :])).astype(
            np.float32)
        res = r if res is None else res + r
    assert res is not None
    return res


@pytest.mark.parametrize(("fmt", "numerics"), [("mxfp4", "fast"), ("mxfp4", "systolic"),
                                               ("mxfp8_e4m3", "systolic"),
                                               ("mxfp8_e5m2", "systolic")])
def test_the_order_of_the_additions_is_the_documented_one(fmt: str, numerics: str) -> None:
    rng = np.random.default_rng(3)
    a = rng.standard_normal((40, 512)).astype(np.float32)
    b = (rng.standard_normal((512, 72)) * 1e3).astype(np.float32)
    _, _, qa, qb = dequantized(a, b, fmt, "ocp")
    got = systolic.matmul(a, b, dtype=fmt, arch="trn3", numerics=numerics, mx_rule="ocp").out
    np.testing.assert_array_equal(got, reference_order(qa, qb, numerics))


def test_scale_products_beyond_float32_are_applied_exactly() -> None:
    # e_a + e_b = 65 + 65 > 127, yet the block's value 2**56 * 2**56 = 2**112 is finite:
    # a float32 X_a * X_b = 2**130 would overflow to inf (functional_mx's float64 path).
    a = np.zeros((1, 32), np.float32)
    b = np.zeros((32, 1), np.float32)
    a[0, 0], a[0, 1] = 2.0**72, 2.0**56  # trainium rule: e = 72 - 7 = 65; 2**56 -> 2**-9
    b[1, 0], b[2, 0] = 2.0**56, 2.0**72
    out = systolic.matmul(a, b, dtype="mxfp8_e4m3", arch="trn3").out
    assert out[0, 0] == np.float32(2.0**112)


def test_a_nan_scale_poisons_only_its_blocks() -> None:
    a = np.ones((2, 64), np.float32)
    a[0, 40] = np.nan  # row 0, block 1: scale 0xFF
    out = systolic.matmul(a, np.ones((64, 3), np.float32), dtype="mxfp4", arch="trn3").out
    assert np.all(np.isnan(out[0])) and np.all(out[1] == 64.0)


def test_k_padding_adds_nothing() -> None:
    rng = np.random.default_rng(1)
    a = rng.standard_normal((9, 33)).astype(np.float32)
    b = rng.standard_normal((33, 10)).astype(np.float32)
    a64 = np.concatenate([a, np.zeros((9, 31), np.float32)], axis=1)
    b64 = np.concatenate([b, np.zeros((31, 10), np.float32)], axis=0)
    for fmt in MX:
        np.testing.assert_array_equal(
            systolic.matmul(a, b, dtype=fmt, arch="trn3").out,
            systolic.matmul(a64, b64, dtype=fmt, arch="trn3").out)


# -- programs ------------------------------------------------------------------------------
GOLDEN = """\
DmaLoad src=DRAM[0:16:2]@0x0(16:8):mxfp4 dst=SBUF[0:16]@0x0(1:8):mxfp4
DmaLoad src=DRAM[0:2:1]@0x100(2:8):e8m0 dst=SBUF[0:2]@0x100(1:8):e8m0
DmaLoad src=DRAM[0:16:32]@0x140(1:16):mxfp4 dst=SBUF[0:16]@0x10000(1:16):mxfp4
DmaLoad src=DRAM[0:2:16]@0x340(1:16):e8m0 dst=SBUF[0:2]@0x10040(1:16):e8m0
LdWeightMx src=SBUF[0:16]@0x0(1:8):mxfp4 scale=SBUF[0:2]@0x100(1:8):e8m0 row_group=1 \
fmt=mxfp4
MatmultMx moving=SBUF[0:16]@0x10000(1:16):mxfp4 scale=SBUF[0:2]@0x10040(1:16):e8m0 \
dst=PSUM[0:8]@0x0(1:16):fp32 flags=START|STOP fmt=mxfp4 stationary_fmt=mxfp4 row_group=1
ReadOut src=PSUM[0:8]@0x0(1:16):fp32 dst=DRAM[0:8:64]@0x380(1:16):fp32
"""


def test_small_program_text() -> None:
    # 8 x 40 x 16 mxfp4: K padded to 64 = 16 partitions, 2 blocks (scales at partitions 0, 1)
    program = lower(MatmulSpec(8, 40, 16, "mxfp4"), TRN3).program
    assert program.text() == GOLDEN
    assert Program.parse(GOLDEN) == program


@pytest.mark.parametrize(("m", "k", "n"), [(300, 1100, 700), (128, 512, 512), (1, 1, 1)])
@pytest.mark.parametrize("fmt", MX)
def test_programs_are_only_pairs_dma_and_readout(m: int, k: int, n: int, fmt: str) -> None:
    low = lower(MatmulSpec(m, k, n, fmt), TRN3)
    p = low.program
    assert set(p.counts()) == {"DmaLoad", "LdWeightMx", "MatmultMx", "ReadOut"}
    pairs = -(-k // 512) * -(-m // 128) * -(-n // 512)
    assert p.counts()["LdWeightMx"] == p.counts()["MatmultMx"] == pairs
    for i, ins in enumerate(p):  # always both, in order: no weight cache (seed 000)
        if isinstance(ins, MatmultMx):
            assert isinstance(p[i - 1], LdWeightMx)
            assert ins.col_group == 15 and int(ins.flags) in {1, 3, 4, 6}
    assert Program.parse(p.text()) == p


def test_accumulate_bytes_follow_start_accumulate_stop() -> None:
    p = lower(MatmulSpec(64, 2048, 64, "mxfp8_e5m2"), TRN3).program  # 4 K tiles, one group
    assert [int(ins.flags) for ins in p if isinstance(ins, MatmultMx)] == [1, 4, 4, 6]


# -- refusals ------------------------------------------------------------------------------
def mx_program(acc: int = 3) -> Program:
    p = lower(MatmulSpec(8, 64, 16, "mxfp8_e4m3"), TRN3).program
    return Program(dataclasses.replace(ins, flags=CalcFlags(acc))
                   if isinstance(ins, MatmultMx) else ins for ins in p)


@pytest.mark.parametrize("acc", [5, 7])
def test_accumulate_bytes_5_and_7_are_rejected(acc: int) -> None:
    with pytest.raises(VerifyError, match=f"accumulate byte {acc} is not one of"):
        verify(mx_program(acc), TRN3, 1 << 20)


def test_valid_accumulate_bytes_pass_the_byte_check() -> None:
    verify(mx_program(3), TRN3, 1 << 20)
    for acc in (0, 2, 4, 6):  # valid bytes; the group rules then want a START first
        with pytest.raises(VerifyError, match="no START opened"):
            verify(mx_program(acc), TRN3, 1 << 20)


@pytest.mark.parametrize("arch", ["trn1", "inf2", "trn2"])
def test_mx_before_gen4_is_refused(arch: str) -> None:
    x = np.ones((4, 4), np.float32)
    with pytest.raises(ArchError, match="needs the MX path of gen4"):
        systolic.matmul(x, x, dtype="mxfp8_e4m3", arch=arch)
    with pytest.raises(ArchError, match="gen4"):
        lower(MatmulSpec(4, 4, 4, "mxfp4"), get_arch(arch))
    with pytest.raises(VerifyError, match="needs gen4"):
        verify(mx_program(), arch, 1 << 20)


def test_perf_mode_with_mx_is_refused() -> None:
    x = np.ones((4, 4), np.float32)
    with pytest.raises(ArchError, match="no perf mode"):
        systolic.matmul(x, x, dtype="mxfp4", arch="trn3", perf_mode="double_row")


def test_matmult_mx_needs_a_tile_from_ld_weight_mx() -> None:
    p = mx_program()
    body = [ins for ins in p if not isinstance(ins, LdWeightMx)]
    with pytest.raises(VerifyError, match="emit an LdWeightMx"):
        verify(Program(body), TRN3, 1 << 20)
    # a dense LoadStationary over the same rows and columns does not serve
    ld = next(ins for ins in p if isinstance(ins, LdWeightMx))
    dense = LoadStationary(dataclasses.replace(ld.src, dtype="bf16"), 0, ld.row_group, 1)
    swapped = [dense if isinstance(ins, LdWeightMx) else ins for ins in p]
    with pytest.raises(VerifyError, match="latched by a LoadStationary"):
        verify(Program(swapped), TRN3, 1 << 20)


def test_descriptor_rules() -> None:
    p = mx_program()
    i = next(j for j, ins in enumerate(p) if isinstance(ins, LdWeightMx))
    ld = p[i]
    assert isinstance(ld, LdWeightMx)
    bad = {
        "starts at column 0": dataclasses.replace(ld, column=8),
        "must be e8m0 block scales": dataclasses.replace(
            ld, scale=dataclasses.replace(ld.scale, dtype="fp8_e4m3")),
        "partition [+] 0, 4, 8 or 12": dataclasses.replace(  # scale at partition 2
            ld, scale=dataclasses.replace(ld.scale, partition=2)),
        "whole scale blocks of 8": dataclasses.replace(
            ld, src=dataclasses.replace(ld.src, partitions=12)),
    }
    for why, ins in bad.items():
        body = [*p.instructions[:i], ins, *p.instructions[i + 1:]]
        with pytest.raises(VerifyError, match=why):
            verify(Program(body), TRN3, 1 << 20)


def test_scale_offset_4_is_read_from_its_rows() -> None:
    # one tile written by hand: data at partitions 0..7 (1 block), scale at offset 4
    sim = systolic.FunctionalSimulator("trn3", dram_bytes=0)
    fmt = "mxfp8_e4m3"
    a = np.arange(1, 33, dtype=np.float32)[:, None] * np.ones((1, 2), np.float32)  # [32, 2]
    q = mx.quantize_hw(a, fmt)
    data, plane = mx.pack_tile(q, scale_offset=4)
    sim.memory.sbuf[:8, 0:8] = data.astype("<u4").view(np.uint8).reshape(8, 8)
    sim.memory.sbuf[:, 64:66] = plane
    sim.memory.sbuf[:8, 128:136] = data.astype("<u4").view(np.uint8).reshape(8, 8)
    sim.memory.sbuf[:, 192:194] = plane
    src = AccessPattern(Space.SBUF, 0, 8, 0, ((1, 2),), fmt)
    dst = AccessPattern(Space.PSUM, 0, 2, 0, ((1, 2),), "fp32")
    prog = Program([
        LdWeightMx(src, AccessPattern(Space.SBUF, 4, 1, 64, ((1, 2),), "e8m0"), 0, 1, fmt),
        MatmultMx(dataclasses.replace(src, offset=128),
                  AccessPattern(Space.SBUF, 4, 1, 192, ((1, 2),), "e8m0"), dst,
                  CalcFlags.START | CalcFlags.STOP, fmt, fmt, 1),
    ])
    sim.run(prog)
    deq = mx.dequantize(q).astype(np.float64)
    np.testing.assert_allclose(sim.memory.read(dst), deq.T @ deq, rtol=1e-6)


# -- timing and the CLI ----------------------------------------------------------------------
def test_mx_peak_is_four_times_bf16_and_2048_cubed_runs_near_it() -> None:
    from systolic.views.report import build_report

    spec = MatmulSpec(2048, 2048, 2048, "mxfp8_e4m3")
    rep = build_report(lower(spec, TRN3).program, TRN3, spec)
    bf = build_report(lower(MatmulSpec(128, 128, 128), TRN3).program, TRN3)
    assert rep.peak_tflops == pytest.approx(4 * bf.peak_tflops)
    assert rep.peak_tflops == pytest.approx(315, abs=1)  # FACTS: 315 MXFP8 on trn3
    assert rep.utilization > 0.95


def test_cli_check_reports_error_against_float64(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["matmul", "64", "100", "48", "--dtype", "mxfp4", "--arch", "trn3",
                 "--check", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["instructions"] == {"LdWeightMx": 1, "MatmultMx": 1, "DmaLoad": 4,
                                   "ReadOut": 1}
    assert 1e-3 < out["max_rel_error"] < 0.5  # fp4 has one mantissa bit


def test_the_register_level_simulator_refuses_mx_programs() -> None:
    low = lower(MatmulSpec(200, 64, 600, "mxfp8_e4m3"), TRN3)
    p = low.program
    assert all(ins.dst.space is Space.DRAM for ins in p if isinstance(ins, ReadOut))
    assert all(ins.src.space is Space.DRAM for ins in p if isinstance(ins, DmaLoad))
    with pytest.raises(SystolicError, match="MX pair"):
        SystolicSimulator("trn3", dram_bytes=low.layout.dram_bytes).run(p)
