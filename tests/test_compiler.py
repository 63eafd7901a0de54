"""The compiler: tiling, reuse order, accumulation groups, per-generation codegen.

References are the operands rounded by ml_dtypes (or numpy's float16, or a bit-level RNE for
the 10-bit-mantissa formats) directly, never by the package's own ``round_to``.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from helpers import fp32_bound, ref64
from hypothesis import given, settings
from hypothesis import strategies as st

from systolic import (
    ARCHS,
    AccessPattern,
    ArchError,
    CalcFlags,
    FormatError,
    LoadStationary,
    MatMul,
    PerfMode,
    ShapeError,
    Space,
    SystolicError,
    get_arch,
    matmul,
)
from systolic.compiler import MatmulSpec, lower
from systolic.isa import Fp32Pass

DENSE_FLOATS = ["bf16", "fp16", "fp32", "fp32r", "tf32", "fp8_e4m3", "fp8_e5m2", "fp8_e4m3fn"]

_STORAGE = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16, "fp8_e4m3": ml_dtypes.float8_e4m3,
            "fp8_e5m2": ml_dtypes.float8_e5m2, "fp8_e4m3fn": ml_dtypes.float8_e4m3fn}


def _rne_mantissa10(x: np.ndarray) -> np.ndarray:
    """float32 rounded to a 10-bit mantissa, ties to even, on the bits (finite inputs)."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    drop = 23 - 10
    half = (1 << (drop - 1)) - 1 + ((u >> drop) & 1)
    return ((u + half) >> drop << drop).astype(np.uint32).view(np.float32)


def rounded(x: np.ndarray, dtype: str) -> np.ndarray:
    """The operand as the engine holds it in ``dtype``, as float32 (independent reference)."""
    x = np.asarray(x, np.float32)
    if dtype == "fp32":
        return x
    if dtype in ("tf32", "fp32r"):  # dtypes.py: both round to tf32 precision, RNE
        return _rne_mantissa10(x)
    return x.astype(_STORAGE[dtype]).astype(np.float32)


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
    ar, br = rounded(a, dtype), rounded(b, dtype)
    extra = 2.0**-15 if dtype == "fp32" else 0.0  # the hi/lo two-pass split of the weights
    assert res.out.shape == (m, n) and res.out.dtype == np.float32
    assert np.all(np.abs(res.out - ref64(ar, br)) <= fp32_bound(ar, br, extra))


@given(m=st.integers(1, 150), k=st.integers(1, 600), n=st.integers(1, 300),
       seed=st.integers(0, 1000))
def test_double_row_matches_and_halves_the_matmuls(m: int, k: int, n: int, seed: int) -> None:
    a, b = _operands(m, k, n, seed)
    plain = matmul(a, b, dtype="fp8_e4m3", arch="trn2")
    dr = matmul(a, b, dtype="fp8_e4m3", arch="trn2", perf_mode="double_row")
    ar, br = rounded(a, "fp8_e4m3"), rounded(b, "fp8_e4m3")
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
        assert isinstance(l1, LoadStationary) and l1.fp32_pass is Fp32Pass.HI
        assert isinstance(l2, LoadStationary) and l2.fp32_pass is Fp32Pass.LO
        assert isinstance(m1, MatMul) and m1.fp32_pass is Fp32Pass.HI
        assert isinstance(m2, MatMul) and m2.fp32_pass is Fp32Pass.LO
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


def test_gen3_above_arch_level_40_writes_no_accumulate_bit() -> None:
    import dataclasses

    high = dataclasses.replace(get_arch("trn2"), arch_level=41)  # seed 000 QUIRK
    prog = lower(MatmulSpec(64, 384, 64, "bf16"), high).program
    assert [i.flags for i in prog if isinstance(i, MatMul)] == [
        CalcFlags.START, CalcFlags.NONE, CalcFlags.STOP]


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
    # issue 13 2.6 / 3.11: every bad argument is a SystolicError with one sentence
    ({"perf_mode": 7}, ArchError, "unknown perf mode 7"),
    ({"perf_mode": 1.5}, ArchError, "unknown perf mode"),
    ({"zero_points": (1,)}, FormatError, "zero_points must be two integers"),
    ({"zero_points": "ab"}, FormatError, "zero_points must be two integers"),
    ({"zero_points": None}, FormatError, "zero_points must be two integers"),
    ({"dtype": "int8", "zero_points": (1.5, 0)}, FormatError, "two integers"),
    ({"progress": 5}, SystolicError, "progress must be a callable"),
    ({"mx_rule": "q"}, FormatError, "unknown MX scale rule"),
    ({"a": np.ma.masked_array(np.ones((2, 2)), mask=[[1, 0], [0, 0]])}, FormatError,
     "a is a masked array"),
    ({"b": np.ma.masked_array(np.ones((2, 2)))}, FormatError, "b is a masked array"),
])
def test_bad_inputs_raise_one_clear_error(kwargs: dict, err: type, match: str) -> None:
    args = {"a": np.ones((2, 2)), "b": np.ones((2, 2)), **kwargs}
    a, b = args.pop("a"), args.pop("b")
    with pytest.raises(err, match=match) as info:
        matmul(a, b, **args)
    assert "\n" not in str(info.value)


# -- issue 13 2.3: fp32r forces the column group (seed 000 translateToColGroup force) ------


@pytest.mark.parametrize("arch", ["trn1", "trn2", "trn3"])
def test_fp32r_forces_the_column_group_to_15(arch: str) -> None:
    prog = lower(MatmulSpec(32, 64, 100, "fp32r"), get_arch(arch)).program
    compute = [i for i in prog if isinstance(i, LoadStationary | MatMul)]
    assert compute and all(i.col_group == 15 for i in compute)
    # a 32-column bf16 tile keeps the quadrant rule: one quadrant, group 1
    bf = lower(MatmulSpec(32, 64, 100, "bf16"), get_arch(arch)).program
    assert {i.col_group for i in bf if isinstance(i, LoadStationary | MatMul)} == {1}


def test_fp32r_with_a_forced_group_still_computes_the_product() -> None:
    a, b = _operands(40, 70, 30, 5)
    res = matmul(a, b, dtype="fp32r")
    ar, br = rounded(a, "fp32r"), rounded(b, "fp32r")
    assert np.all(np.abs(res.out - ref64(ar, br)) <= fp32_bound(ar, br))


# -- issue 13 3.2: a product too big to lower is refused from arithmetic -------------------


@pytest.mark.parametrize(("spec", "arch"), [
    (MatmulSpec(99999999999999999999, 128, 128), "trn2"),
    (MatmulSpec(10**9, 10**9, 10**9), "trn2"),
    (MatmulSpec(10**9, 10**9, 10**9, "fp8_e4m3", PerfMode.DOUBLE_ROW), "trn2"),
    (MatmulSpec(10**11, 1024, 10**5, "mxfp4"), "trn3"),
])
def test_huge_products_are_refused_before_any_tile_is_built(
        spec: MatmulSpec, arch: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import systolic.compiler as compiler
    import systolic.compiler.tiling as tiling

    def no_tiles(*_: object) -> None:
        raise AssertionError("tiles were built before the size check")

    monkeypatch.setattr(compiler, "tile", no_tiles)
    monkeypatch.setattr(tiling, "spans", no_tiles)
    with pytest.raises(ShapeError, match=r"lowers to .* at most 16,777,216") as info:
        lower(spec, get_arch(arch))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("arch", list(ARCHS))
@given(m=st.integers(1, 2000), k=st.integers(1, 3000), n=st.integers(1, 5000),
       dtype=st.sampled_from(["bf16", "fp32", "fp8_e4m3", "int8", "int16", "mxfp4",
                              "mxfp8_e4m3"]),
       double_row=st.booleans())
def test_the_closed_form_matmul_count_is_the_tile_count(arch: str, m: int, k: int, n: int,
                                                        dtype: str, double_row: bool) -> None:
    from systolic.compiler.tiling import matmul_count, tile

    a = get_arch(arch)
    mode = PerfMode.DOUBLE_ROW if double_row and dtype == "fp8_e4m3" else PerfMode.NONE
    spec = MatmulSpec(m, k, n, dtype, mode)
    plan = tile(spec, a)
    assert matmul_count(spec, a) == len(plan.k_tiles) * len(plan.m_tiles) * len(plan.n_tiles)


@given(m=st.integers(1, 300), k=st.integers(1, 700), n=st.integers(1, 1100),
       dtype=st.sampled_from(["bf16", "fp32", "fp8_e5m2", "mxfp4"]))
def test_the_closed_form_count_is_the_emitted_count(m: int, k: int, n: int, dtype: str) -> None:
    from systolic.compiler.tiling import matmul_count

    arch = get_arch("trn3")
    counts = lower(MatmulSpec(m, k, n, dtype), arch).program.counts()
    emitted = counts.get("MatmultMx", 0) + counts.get("MatMul", 0) // (2 if dtype == "fp32"
                                                                         else 1)
    assert emitted == matmul_count(MatmulSpec(m, k, n, dtype), arch)


# -- issue 13 4.1: START overwrites a bank that an earlier group left full -----------------


@pytest.mark.parametrize("numerics", ["fast", "systolic"])
@pytest.mark.parametrize(("m", "k", "n", "dtype"), [
    (300, 64, 64, "bf16"), (300, 200, 70, "fp16"), (520, 300, 40, "fp8_e4m3"),
    (300, 64, 64, "fp32"),
])
def test_start_overwrites_a_reused_bank(m: int, k: int, n: int, dtype: str,
                                        numerics: str) -> None:
    res = matmul(*_operands(m, k, n, 11), dtype=dtype, numerics=numerics)
    # the precondition: at least three M tiles and two START groups in one PSUM bank
    starts: dict[int, int] = {}
    for ins in res.program:
        if isinstance(ins, MatMul) and CalcFlags.START in ins.flags:
            starts[ins.dst.offset] = starts.get(ins.dst.offset, 0) + 1
    assert -(-m // 128) >= 3 and max(starts.values()) >= 2
    a, b = _operands(m, k, n, 11)
    ar, br = rounded(a, dtype), rounded(b, dtype)
    extra = 2.0**-15 if dtype == "fp32" else 0.0
    assert np.all(np.abs(res.out - ref64(ar, br)) <= fp32_bound(ar, br, extra))


# -- a pure compiler ------------------------------------------------------------------------


def test_codegen_is_a_function_of_its_inputs() -> None:
    from systolic.compiler import codegen, codegen_mx
    from systolic.compiler.schedule import mark_group_ends, order_for_reuse
    from systolic.compiler.tiling import tile

    arch = get_arch("trn3")
    for step in (codegen.emit, codegen_mx.emit):
        dtype = "mxfp4" if step is codegen_mx.emit else "bf16"
        plans = [tile(MatmulSpec(m, k, n, dtype), arch) for m, k, n in
                 [(200, 700, 600), (64, 64, 64)]]
        runs = [step(arch, p, mark_group_ends(order_for_reuse(p, arch), p)) for p in plans]
        again = step(arch, plans[0], mark_group_ends(order_for_reuse(plans[0], arch), plans[0]))
        assert again[0] == runs[0][0] and again[0] is not runs[0][0]  # no output kept
        assert again[1] == runs[0][1]
    first = lower(MatmulSpec(300, 500, 700, "fp8_e4m3"), arch).program.text()
    lower(MatmulSpec(128, 128, 4096, "fp8_e4m3"), arch)  # another product in between
    assert lower(MatmulSpec(300, 500, 700, "fp8_e4m3"), arch).program.text() == first


def _sb(partition: int, partitions: int, offset: int, n: int, dtype: str = "bf16"
        ) -> AccessPattern:
    return AccessPattern(Space.SBUF, partition, partitions, offset, ((1, n),), dtype)


def test_emit_nc_matmul_caches_the_latched_tile_and_is_pure() -> None:
    from systolic.compiler.codegen import WeightTileState, calc_flags, emit_nc_matmul

    arch = get_arch("trn2")
    w = _sb(32, 32, 0, 32)  # a 32 x 32 tile at array rows 32.., columns 64..
    x = _sb(32, 32, 0x1000, 100)
    dst = AccessPattern(Space.PSUM, 64, 32, 0, ((1, 100),), "fp32")
    s0 = WeightTileState()
    kw = {"stationary": w, "moving": x, "dst": dst, "tile_position": (32, 64),
          "tile_size": (32, 32)}
    insts, s1 = emit_nc_matmul(s0, arch, flags=calc_flags(arch, True, False), **kw)
    assert s0 == WeightTileState() and s1 != s0  # the input state is not changed
    load, mm = insts
    assert isinstance(load, LoadStationary) and isinstance(mm, MatMul)
    assert (load.row_group, load.col_group, load.column) == (2, 4, 64)  # quadrant rule
    assert (mm.row_group, mm.col_group, mm.stationary_partition) == (2, 4, 32)
    hit, s2 = emit_nc_matmul(s1, arch, flags=calc_flags(arch, False, True), **kw)
    assert [type(i) for i in hit] == [MatMul] and s2 == s1  # warm: the MatMul alone
    assert hit[0].flags == CalcFlags.ACCUMULATE | CalcFlags.STOP
    # a write into the stationary's SBUF bytes is an intervening writer
    stale, _ = emit_nc_matmul(s1.written(_sb(40, 1, 8, 1)), arch, flags=CalcFlags.START, **kw)
    assert [type(i) for i in stale] == [LoadStationary, MatMul]
    # a write elsewhere (other partitions, or other bytes) keeps the tile warm
    assert s1.written(_sb(0, 32, 0, 32)) == s1 and s1.written(_sb(32, 32, 64, 32)) == s1
    # another tile on overlapping PEs replaces it
    other = {**kw, "stationary": _sb(32, 32, 0x2000, 32)}
    _, s3 = emit_nc_matmul(s1, arch, flags=CalcFlags.START, **other)
    again, _ = emit_nc_matmul(s3, arch, flags=CalcFlags.START, **kw)
    assert [type(i) for i in again] == [LoadStationary, MatMul]


@pytest.mark.parametrize(("arch", "second"), [
    ("trn1", CalcFlags.STOP), ("trn2", CalcFlags.STOP | CalcFlags.ACCUMULATE)])
def test_emit_nc_matmul_fp32_is_two_passes_and_never_cached(arch: str,
                                                           second: CalcFlags) -> None:
    from systolic.compiler.codegen import WeightTileState, emit_nc_matmul

    a = get_arch(arch)
    warm = emit_nc_matmul(WeightTileState(), a, stationary=_sb(0, 8, 0, 8), moving=_sb(0, 8,
                          0x1000, 8), dst=AccessPattern(Space.PSUM, 0, 8, 0, ((1, 8),),
                          "fp32"), flags=CalcFlags.START)[1]
    insts, state = emit_nc_matmul(
        warm, a, stationary=_sb(0, 16, 0x2000, 16, "fp32"),
        moving=_sb(0, 16, 0x3000, 8, "fp32"),
        dst=AccessPattern(Space.PSUM, 0, 16, 2048, ((1, 8),), "fp32"),
        flags=CalcFlags.START | CalcFlags.STOP)
    assert [type(i) for i in insts] == [LoadStationary, MatMul, LoadStationary, MatMul]
    assert [insts[0].fp32_pass, insts[2].fp32_pass] == [Fp32Pass.HI, Fp32Pass.LO]  # type: ignore[union-attr]
    assert [insts[1].flags, insts[3].flags] == [CalcFlags.START, second]  # type: ignore[union-attr]
    assert [insts[1].fp32_pass, insts[3].fp32_pass] == [Fp32Pass.HI, Fp32Pass.LO]  # type: ignore[union-attr]
    assert state == WeightTileState()  # seed 000: invalidateWeightTileCache after fp32


@pytest.mark.parametrize("dtype", ["bf16", "fp32", "fp32r", "fp8_e4m3"])
def test_emit_nc_matmul_programs_verify_and_compute(dtype: str) -> None:
    """A group of two matmuls on a tile at a non-zero array position, through the one step,
    checked by the verifier and run on the functional simulator against float64."""
    from systolic import FunctionalSimulator, Program
    from systolic.compiler.codegen import WeightTileState, calc_flags, emit_nc_matmul

    arch = get_arch("trn2")
    rng = np.random.default_rng(2)
    k, m, n = 32, 24, 40
    w_ap = _sb(64, k, 0, m, dtype)
    xs = [_sb(64, k, 0x1000 * (j + 1), n, dtype) for j in range(2)]
    dst = AccessPattern(Space.PSUM, 32, m, 2048, ((1, n),), "fp32")
    w = rng.standard_normal((k, m)).astype(np.float32)
    x = [rng.standard_normal((k, n)).astype(np.float32) for _ in xs]
    state, insts = WeightTileState(), []
    for j, mv in enumerate(xs):
        out, state = emit_nc_matmul(state, arch, stationary=w_ap, moving=mv, dst=dst,
                                    flags=calc_flags(arch, j == 0, j == 1),
                                    tile_position=(64, 32), tile_size=(k, m))
        insts += out
    loads = sum(isinstance(i, LoadStationary) for i in insts)
    assert loads == (4 if dtype == "fp32" else 1)
    sim = FunctionalSimulator(arch)
    sim.memory.write(w_ap, w)
    for ap, v in zip(xs, x, strict=True):
        sim.memory.write(ap, v)
    sim.run(Program(insts))  # verified first
    wr = rounded(w, dtype)
    xr = [rounded(v, dtype) for v in x]
    ref = sum(ref64(wr.T, v) for v in xr)
    extra = 2.0**-15 if dtype == "fp32" else 0.0
    bound = fp32_bound(np.concatenate([wr, wr]).T, np.concatenate(xr), extra)
    assert np.all(np.abs(sim.memory.read(dst) - ref) <= bound)


def _accepted_specs() -> st.SearchStrategy[tuple[str, MatmulSpec]]:
    """(arch, spec) pairs that systolic.api.make_spec accepts: every format of every preset,
    DoubleRow for fp8 on gen3+, zero points on the integer formats; shapes with ragged edges,
    several K tiles (accumulation groups), several PSUM banks and, up to 2,000 columns, an
    operand pair past one bank's worth of N tiles."""

    @st.composite
    def build(draw: st.DrawFn) -> tuple[str, MatmulSpec]:
        arch = draw(st.sampled_from(sorted(ARCHS)))
        a = get_arch(arch)
        dtype = draw(st.sampled_from(a.formats + a.mx_formats))
        mode = PerfMode.NONE
        if dtype.startswith("fp8") and a.supports_perf_mode("double_row"):
            mode = draw(st.sampled_from([PerfMode.NONE, PerfMode.DOUBLE_ROW]))
        zp = (0, 0)
        if dtype in ("int8", "uint8", "int16"):
            zp = (draw(st.integers(-3, 3)), draw(st.integers(-3, 3)))
            if dtype == "uint8":
                zp = (abs(zp[0]), abs(zp[1]))
        m, k, n = draw(st.integers(1, 400)), draw(st.integers(1, 600)), draw(
            st.integers(1, 2000))
        return arch, MatmulSpec(m, k, n, dtype, mode, *zp)

    return build()


@settings(max_examples=60, deadline=None)
@given(case=_accepted_specs())
def test_lower_output_verifies(case: tuple[str, MatmulSpec]) -> None:
    # systolic.matmul lowers with check=False (issue 20): the compiler's own output must pass
    # every rule of the verifier for every spec the API accepts, as lower(check=True) checks
    from systolic.verify import verify

    arch_name, spec = case
    arch = get_arch(arch_name)
    low = lower(spec, arch, check=False)
    verify(low.program, arch, low.layout.dram_bytes)  # raises VerifyError on any rule
    assert low.program.counts()["MatMul" if spec.dtype[:2] != "mx" else "MatmultMx"] >= 1


@pytest.mark.parametrize("dtype", ["bf16", "fp32", "fp8_e4m3", "int8"])
def test_lower_output_verifies_when_operands_do_not_fit_sbuf(dtype: str) -> None:
    # 16 KiB per SBUF partition (2 MiB in all): the 32 moving tiles (1 KiB a partition each
    # in bf16) do not fit beside the weights, so the codegen's cache-miss path reloads them;
    # still a valid Program
    import dataclasses

    from systolic.isa import DmaLoad
    from systolic.verify import verify

    arch = dataclasses.replace(get_arch("trn2"), sbuf_bytes=16 * 1024)
    low = lower(MatmulSpec(640, 1024, 2048, dtype), arch, check=False)
    verify(low.program, arch, low.layout.dram_bytes)
    loads = [ins.src for ins in low.program.instructions if isinstance(ins, DmaLoad)]
    assert len(loads) > len(set(loads))  # some device-memory tile is loaded twice
