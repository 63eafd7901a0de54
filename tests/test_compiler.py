"""The compiler: tiling, reuse order, accumulation groups, per-generation codegen."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import fp32_bound, ref64
from hypothesis import given
from hypothesis import strategies as st

from systolic import (
    ARCHS,
    ArchError,
    CalcFlags,
    FormatError,
    LoadStationary,
    MatMul,
    PerfMode,
    ShapeError,
    get_arch,
    matmul,
    round_to,
)
from systolic.compiler import MatmulSpec, lower

DENSE_FLOATS = ["bf16", "fp16", "fp32", "fp32r", "tf32", "fp8_e4m3", "fp8_e5m2", "fp8_e4m3fn"]


def _operands(m: int, k: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((m, k)).astype(np.float32),
            rng.standard_normal((k, n)).astype(np.float32))


@pytest.mark.parametrize("arch", list(ARCHS))
@pytest.mark.parametrize("dtype", DENSE_FLOATS)
@given(m=st.integers(1, 200), k=st.integers(1, 300), n=st.integers(1, 700),
       seed=st.integers(0, 1000), numerics=st.sampled_from(["fast", "systolic"]))
def test_matmul_matches_float64_of_rounded_operands(arch: str, dtype: str, m: int, k: int,
                                                    n: int, seed: int, numerics: str) -> None:
    if not get_arch(arch).supports_format(dtype):
        with pytest.raises(ArchError, match="not supported"):
            matmul(np.ones((2, 2)), np.ones((2, 2)), dtype=dtype, arch=arch)
        return
    a, b = _operands(m, k, n, seed)
    res = matmul(a, b, dtype=dtype, arch=arch, numerics=numerics)
    ar, br = round_to(a, dtype), round_to(b, dtype)
    extra = 2.0**-15 if dtype == "fp32" else 0.0  # the hi/lo two-pass split of the weights
    assert res.out.shape == (m, n) and res.out.dtype == np.float32
    assert np.all(np.abs(res.out - ref64(ar, br)) <= fp32_bound(ar, br, extra))


@given(m=st.integers(1, 150), k=st.integers(1, 600), n=st.integers(1, 300),
       seed=st.integers(0, 1000))
def test_double_row_matches_and_halves_the_matmuls(m: int, k: int, n: int, seed: int) -> None:
    a, b = _operands(m, k, n, seed)
    plain = matmul(a, b, dtype="fp8_e4m3", arch="trn2")
    dr = matmul(a, b, dtype="fp8_e4m3", arch="trn2", perf_mode="double_row")
    ar, br = round_to(a, "fp8_e4m3"), round_to(b, "fp8_e4m3")
    assert np.all(np.abs(dr.out - ref64(ar, br)) <= fp32_bound(ar, br))
    out_tiles = -(-m // 128) * -(-n // 512)
    assert plain.program.counts()["MatMul"] == out_tiles * -(-k // 128)
    if k % 2 == 0:  # an odd K leaves one contraction row that DoubleRow cannot pair
        assert dr.program.counts()["MatMul"] == out_tiles * -(-k // 256)


def test_double_row_halves_the_matmuls_of_a_big_product() -> None:
    base = lower(MatmulSpec(512, 1024, 1024, "fp8_e4m3"), get_arch("trn2")).program
    dr = lower(MatmulSpec(512, 1024, 1024, "fp8_e4m3", PerfMode.DOUBLE_ROW),
               get_arch("trn2")).program
    assert dr.counts()["MatMul"] * 2 == base.counts()["MatMul"]


def test_double_row_is_refused_on_gen2_and_for_non_fp8() -> None:
    a, b = _operands(4, 4, 4, 0)
    with pytest.raises(ArchError, match="double_row is not supported on trn1"):
        matmul(a, b, dtype="fp8_e4m3", arch="trn1", perf_mode="double_row")
    with pytest.raises(FormatError, match="bf16 is not fp8"):
        matmul(a, b, dtype="bf16", arch="trn2", perf_mode="double_row")
    with pytest.raises(ArchError, match="no encoding is known"):
        matmul(a, b, dtype="bf16", arch="trn2", perf_mode="double_column")


def test_2048_cubed_counts() -> None:
    # seed 000: one latched tile serves many moving tiles; 1024 MatMuls need <= 256 loads.
    counts = lower(MatmulSpec(2048, 2048, 2048, "bf16"), get_arch("trn2")).program.counts()
    assert counts["MatMul"] == 1024
    assert counts["LoadStationary"] <= 256


def test_weight_cache_hit_emits_the_matmul_alone() -> None:
    # K = 128 is one K tile: the 8 N tiles of M tile 0 span two bank chunks, and the second
    # chunk finds W(0, 0) still latched.
    counts = lower(MatmulSpec(128, 128, 4096, "bf16"), get_arch("trn2")).program.counts()
    assert counts == {"LoadStationary": 1, "MatMul": 8, "DmaLoad": 9, "ReadOut": 8}


def test_fp32_lowers_to_two_passes_and_never_caches() -> None:
    prog = lower(MatmulSpec(128, 256, 4096, "fp32"), get_arch("trn2")).program
    compute = [i for i in prog if isinstance(i, LoadStationary | MatMul)]
    assert len(compute) == 4 * 2 * 8  # (load, mm, load, mm) per (k, n) step
    for j in range(0, len(compute), 4):
        l1, m1, l2, m2 = compute[j:j + 4]
        assert isinstance(l1, LoadStationary) and l1.half == "hi"
        assert isinstance(l2, LoadStationary) and l2.half == "lo"
        assert isinstance(m1, MatMul) and m1.two_pass == 1
        assert isinstance(m2, MatMul) and m2.two_pass == 2
        assert CalcFlags.STOP not in m1.flags and CalcFlags.START not in m2.flags


@pytest.mark.parametrize(("arch", "interior", "last"), [
    ("trn1", CalcFlags.NONE, CalcFlags.STOP),
    ("trn2", CalcFlags.ACCUMULATE, CalcFlags.STOP | CalcFlags.ACCUMULATE),
    ("trn3", CalcFlags.ACCUMULATE, CalcFlags.STOP | CalcFlags.ACCUMULATE),
])
def test_calc_flags_per_generation(arch: str, interior: CalcFlags, last: CalcFlags) -> None:
    prog = lower(MatmulSpec(64, 384, 64, "bf16"), get_arch(arch)).program
    flags = [i.flags for i in prog if isinstance(i, MatMul)]
    assert flags == [CalcFlags.START, interior, last]


SMALL_PROGRAM = """\
DmaLoad src=DRAM[0:7:2]@0x0(7:5):bf16 dst=SBUF[0:7]@0x0(1:5):bf16
LoadStationary src=SBUF[0:7]@0x0(1:5):bf16 row_group=1 col_group=1
DmaLoad src=DRAM[0:7:6]@0x80(1:3):bf16 dst=SBUF[0:7]@0xe000(1:3):bf16
MatMul moving=SBUF[0:7]@0xe000(1:3):bf16 dst=PSUM[0:5]@0x0(1:3):fp32 flags=START|STOP \
stationary_dtype=bf16 row_group=1 col_group=1
ReadOut src=PSUM[0:5]@0x0(1:3):fp32 dst=DRAM[0:5:12]@0xc0(1:3):fp32
"""


def test_small_program_assembly() -> None:
    # a [5, 7] at 0 (row stride 7 elements), b [7, 3] at 0x80, out [5, 3] fp32 at 0xc0.
    prog = lower(MatmulSpec(5, 7, 3, "bf16"), get_arch("trn2")).program
    assert prog.text() == SMALL_PROGRAM.replace("\\\n", "")


def test_integer_matmul_is_exact_with_zero_points() -> None:
    rng = np.random.default_rng(3)
    a = rng.integers(-128, 128, (70, 300))
    b = rng.integers(-128, 128, (300, 90))
    res = matmul(a, b, dtype="int8", zero_points=(3, -5))
    np.testing.assert_array_equal(res.out, (a - 3) @ (b + 5))
    # int16 products reach 2^30: fp32 PSUM (seed 000) is exact only to fp32's bound
    res16 = matmul(a * 200, b * 100, dtype="int16", arch="trn1")
    a16, b16 = (a * 200).astype(np.float64), (b * 100).astype(np.float64)
    assert np.all(np.abs(res16.out - a16 @ b16) <= fp32_bound(a16, b16))


@pytest.mark.parametrize(("kwargs", "err", "match"), [
    ({"a": np.ones((2, 3)), "b": np.ones((4, 2))}, ShapeError, "a's columns must equal"),
    ({"a": np.ones(3), "b": np.ones((3, 2))}, ShapeError, "must be 2-D"),
    ({"a": np.ones((0, 3)), "b": np.ones((3, 2))}, ShapeError, "positive"),
    ({"dtype": "fp64"}, FormatError, "unknown format"),
    ({"arch": "trn9"}, ArchError, "unknown arch"),
    ({"dtype": "e8m0"}, FormatError, "not a matmul operand"),
    ({"dtype": "int8", "a": np.full((2, 2), 1.5)}, FormatError, "integer values"),
    ({"dtype": "bf16", "zero_points": (1, 0)}, FormatError, "zero points"),
    ({"a": np.array([["x"]]), "b": np.ones((1, 1))}, FormatError, "expected numbers"),
])
def test_bad_inputs_raise_one_clear_error(kwargs: dict, err: type, match: str) -> None:
    args = {"a": np.ones((2, 2)), "b": np.ones((2, 2)), **kwargs}
    a, b = args.pop("a"), args.pop("b")
    with pytest.raises(err, match=match):
        matmul(a, b, **args)
