"""The NKI breadth of issue 19: transposes (Tensor Engine and Vector), bn_stats / bn_aggr, iota,
nl.ds, SPMD launches, the example kernels layernorm / attention / transpose / spmd_add, and
the pytest plugin. Values against float64 numpy with the bound each test states; costs
against the nki.isa "Estimated instruction cost" formulas worked by hand."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from helpers import kernel_values, write_kernel
from helpers import opcodes as _opcodes
from helpers import record_source as _rec

import systolic.nki as snki
from systolic.arch import get_arch
from systolic.errors import KernelError, VerifyError
from systolic.isa import AccessPattern, Engine, Program, Space
from systolic.isa.asm import format_program, parse_instructions
from systolic.isa.instructions import BnAggr, BnStats, Iota, Transpose
from systolic.timing.core import time_program
from systolic.timing.costs import engine_cycles
from systolic.verify import verify

EX = Path(__file__).resolve().parent.parent / "examples" / "kernels"
TRN2 = get_arch("trn2")
U32 = 2.0 ** -24  # fp32 unit roundoff


@pytest.fixture(autouse=True)
def _hook():
    snki.install("trn2")




# -- transposes ---------------------------------------------------------------------------
PE_TRANSPOSE = '''
@nki.jit
def k(a):
    P, F = a.shape
    out = nl.ndarray((F, P), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    tp = nl.ndarray((F, P), dtype=a.dtype, buffer=nl.psum)
    nisa.nc_transpose(dst=tp, data=t, engine=nisa.engine.tensor)
    ts = nl.ndarray((F, P), dtype=a.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=ts, src=tp)
    nisa.dma_copy(dst=out, src=ts)
    return out
'''


@pytest.mark.parametrize("shape", [(128, 64), (64, 128), (128, 128), (32, 96)])
@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16, ml_dtypes.float8_e4m3])
def test_pe_transpose_is_exact_for_16_and_8_bit_floats(tmp_path, shape, dtype) -> None:
    a = np.random.default_rng(1).normal(0, 3, shape).astype(dtype)
    out = kernel_values(tmp_path, PE_TRANSPOSE, a)
    # x * 1 and + 0 are exact in the fp32 accumulator, and the result fits the dtype again
    assert np.array_equal(out.astype(np.float64), a.T.astype(np.float64))


def test_pe_transpose_of_fp32_is_the_two_pass_matmul_on_gen2(tmp_path) -> None:
    a = np.random.default_rng(2).normal(0, 3, (128, 96)).astype(np.float32)
    kern = snki.load_kernel(str(write_kernel(tmp_path, PE_TRANSPOSE)), "k")
    out = snki.values(kern, [a], arch="trn1")
    err = np.abs(out.astype(np.float64) - a.T.astype(np.float64))
    # NeuronCore-v2 has no transpose mode: hi = bf16(w), lo = bf16(w - hi): 16 significant
    # bits, |w - hi - lo| <= 2^-17 |w|
    assert np.all(err <= 2.0 ** -17 * np.abs(a.T)) and np.any(err > 0)


def test_pe_transpose_of_fp32_is_bit_exact_from_gen3(tmp_path) -> None:
    a = np.random.default_rng(2).normal(0, 3, (128, 96)).astype(np.float32)
    out = kernel_values(tmp_path, PE_TRANSPOSE, a)
    # trn2 (NeuronCore-v3): the transpose mode passes the fp32 bits through
    assert np.array_equal(out.view(np.uint32), np.ascontiguousarray(a.T).view(np.uint32))


def test_pe_transpose_is_one_matmul_against_one_identity(tmp_path) -> None:
    body = PE_TRANSPOSE.replace("    ts = nl.ndarray", "    tq = nl.ndarray((F, P), dtype=a.dtype, "
                                "buffer=nl.psum)\n    nisa.nc_transpose(dst=tq, data=t)\n"
                                "    ts = nl.ndarray")
    body = body.replace("nisa.tensor_copy(dst=ts, src=tp)",
                        "nisa.tensor_tensor(dst=ts, data1=tp, data2=tq, op=nl.add)")
    rec = _rec(tmp_path, body, ["bf16[128,64]"])
    ops = _opcodes(rec)
    # the identity is made once (iota, square, max(1 - x, 0)); each transpose is one matmul
    assert ops.count("Iota") == 1 and ops.count("MatMul") == 2
    assert ops.count("Activation") == 1 and ops.count("TensorScalar") == 1
    mms = [i for i in rec.program if type(i).__name__ == "MatMul"]
    loads = [i for i in rec.program if type(i).__name__ == "LoadStationary"]
    for mm in mms:  # moving = the identity [P, P]: N_moving = 128 columns
        assert mm.moving.partitions == 128 and mm.moving.free_elems == 128
        assert mm.dst.partitions == 64 and mm.dst.free_elems == 128
    assert loads[0].src.partitions == 128 and loads[0].src.dims[-1][1] == 64
    a = np.random.default_rng(3).normal(0, 1, (128, 64)).astype(ml_dtypes.bfloat16)
    out = kernel_values(tmp_path, body, a)
    np.testing.assert_array_equal(out.astype(np.float64), 2 * a.T.astype(np.float64))


def test_pe_transpose_of_a_tile_at_a_partition_offset(tmp_path) -> None:
    body = '''
@nki.jit
def k(a):
    out = nl.ndarray((32, 32), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 32), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    tp = nl.ndarray((32, 32), dtype=a.dtype, buffer=nl.psum)
    nisa.nc_transpose(dst=tp, data=t[64:96, :], engine=nisa.tensor_engine)
    ts = nl.ndarray((32, 32), dtype=a.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=ts, src=tp)
    nisa.dma_copy(dst=out, src=ts)
    return out
'''
    a = np.random.default_rng(4).normal(0, 1, (128, 32)).astype(ml_dtypes.bfloat16)
    out = kernel_values(tmp_path, body, a)
    np.testing.assert_array_equal(out.astype(np.float64), a[64:96].T.astype(np.float64))


VECTOR_TRANSPOSE = '''
@nki.jit
def k(a):
    P, F = a.shape
    out = nl.ndarray((F, P), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    tt = nl.ndarray((F, P), dtype=a.dtype, buffer=nl.sbuf)
    nisa.nc_transpose(dst=tt, data=t, engine=nisa.vector_engine)
    nisa.dma_copy(dst=out, src=tt)
    return out
'''


# the three ways to ask for a transpose: into dst, and the two that return the tile
_TRANSPOSE_CALLS = {
    "nc_transpose(dst=)": "nisa.nc_transpose(dst=tt, data=t, engine=nisa.vector_engine, "
                          "mask=MASK)",
    "older nc_transpose": "tt[...] = nisa.nc_transpose(t, engine=nisa.vector_engine, "
                          "mask=MASK)",
    "nl.transpose": "tt[...] = nl.transpose(t, mask=MASK)",
}


@pytest.mark.parametrize("call", sorted(_TRANSPOSE_CALLS))
@pytest.mark.parametrize(("mask", "made"), [("False", False), ("True", True)])
def test_a_transpose_under_a_mask_of_nothing_is_not_made(tmp_path, mask, made, call) -> None:
    # mask=False selects nothing: no instruction (as every masked call; it was ignored),
    # whether the transpose writes a given tile or returns one that is then assigned
    body = VECTOR_TRANSPOSE.replace(
        "    tt = nl.ndarray((F, P), dtype=a.dtype, buffer=nl.sbuf)\n",
        "    tt = nl.zeros((F, P), dtype=a.dtype, buffer=nl.sbuf)\n").replace(
        "nisa.nc_transpose(dst=tt, data=t, engine=nisa.vector_engine)",
        _TRANSPOSE_CALLS[call].replace("MASK", mask))
    a = np.arange(1, 65, dtype=np.float32).reshape(8, 8)
    out = kernel_values(tmp_path, body, a)
    np.testing.assert_array_equal(out, a.T if made else np.zeros_like(a))
    rec = _rec(tmp_path, body, ["fp32[8,8]"])
    assert any(isinstance(i, Transpose) for i in rec.program) == made


@pytest.mark.parametrize("shape", [(32, 2), (32, 32), (5, 17)])
def test_vector_transpose_moves_bits_and_costs_max_min_ii_n(tmp_path, shape) -> None:
    a = np.random.default_rng(5).normal(0, 1, shape).astype(np.float32)
    a[0, 0] = np.nan  # a transpose moves bytes: NaN survives (the PE's may not on gen2)
    out = kernel_values(tmp_path, VECTOR_TRANSPOSE, a)
    np.testing.assert_array_equal(out, a.T)
    rec = _rec(tmp_path, VECTOR_TRANSPOSE, [f"fp32[{shape[0]},{shape[1]}]"])
    (tr,) = [i for i in rec.program if isinstance(i, Transpose)]
    # nki.isa.nc_transpose on Vector: max(MIN_II, N), N = F elements per partition, MIN_II 64
    assert engine_cycles(tr, TRN2) == max(64, shape[1])
    ct = time_program(rec.program, TRN2)
    i = list(rec.program).index(tr)
    per = TRN2.tick_hz // TRN2.vector_hz
    assert ct.ends[i] - ct.starts[i] == max(64, shape[1]) * per


def test_default_engine_is_vector_up_to_32x32_else_tensor(tmp_path) -> None:
    body = VECTOR_TRANSPOSE.replace(", engine=nisa.vector_engine", "").replace(
        "buffer=nl.sbuf)\n    nisa.nc_transpose", "buffer=nl.psum)\n    nisa.nc_transpose").replace(
        "nisa.dma_copy(dst=out, src=tt)", "nl.store(out, tt)")
    assert "Transpose" in _opcodes(_rec(tmp_path, body, ["fp32[32,32]"]))
    ops = _opcodes(_rec(tmp_path, body, ["fp32[64,32]"]))
    assert "Transpose" not in ops and "MatMul" in ops


@pytest.mark.parametrize("body, args, match", [
    (VECTOR_TRANSPOSE, ["fp32[64,32]"], "Vector engine takes at most 32 x 32"),
    (PE_TRANSPOSE.replace("dtype=a.dtype, buffer=nl.psum", "dtype=nl.float32, buffer=nl.psum"),
     ["bf16[128,64]"], "keeps the dtype"),
    (PE_TRANSPOSE, ["int8[128,64]"], "nc_transpose of nl.int8 on the Tensor Engine"),
    (PE_TRANSPOSE.replace("buffer=nl.psum)\n    nisa.nc_transpose", "buffer=nl.sbuf)\n"
                          "    nisa.nc_transpose"), ["bf16[128,64]"], "PSUM"),
])
def test_transpose_refusals_are_one_line(tmp_path, body, args, match) -> None:
    with pytest.raises(KernelError, match=match) as e:
        _rec(tmp_path, body, args)
    assert "\n" not in str(e.value) and ":" in str(e.value)


LEGACY_TRANSPOSE = '''
@nki.jit
def k(a):
    out = nl.ndarray((a.shape[1], a.shape[0]), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    nl.store(out, value=nl.transpose(t))
    return out
'''


@pytest.mark.parametrize("shape", [(128, 48), (16, 8)])
def test_nl_transpose_and_store_from_psum(tmp_path, shape) -> None:
    a = np.random.default_rng(6).normal(0, 1, shape).astype(ml_dtypes.bfloat16)
    out = kernel_values(tmp_path, LEGACY_TRANSPOSE, a)
    np.testing.assert_array_equal(out.astype(np.float64), a.T.astype(np.float64))
    # the older nisa.nc_transpose(data) returns a PSUM tile; nl.store copies it to SBUF first
    body = LEGACY_TRANSPOSE.replace("nl.transpose(t)", "nisa.nc_transpose(t)")
    out = kernel_values(tmp_path, body, a)
    np.testing.assert_array_equal(out.astype(np.float64), a.T.astype(np.float64))


# -- bn_stats / bn_aggr ----------------------------------------------------------------------
BN = '''
@nki.jit
def k(x):
    P, F = x.shape
    n = F // nl.tile_size.bn_stats_fmax if F > 512 else 1
    w = F // n
    stats_out = nl.ndarray((P, 6 * n), dtype=nl.float32, buffer=nl.shared_hbm)
    mv_out = nl.ndarray((P, 2), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    stats = nl.ndarray((P, 6 * n), dtype=nl.float32, buffer=nl.sbuf)
    for j in nl.affine_range(n):
        stats[:, j * 6:(j + 1) * 6] = nisa.bn_stats(t[:, j * w:(j + 1) * w], dtype=nl.float32)
    mv = nisa.bn_aggr(stats)
    nl.store(stats_out, stats)
    nl.store(mv_out, mv)
    return stats_out, mv_out
'''


def _halves(x: np.ndarray) -> np.ndarray:
    cols = []
    for h in (x[:, 0::2], x[:, 1::2]):
        m = h.mean(1)
        cols += [np.full(len(x), h.shape[1]), m, ((h - m[:, None]) ** 2).sum(1)]
    return np.stack(cols, 1)


@pytest.mark.parametrize("shape", [(128, 128), (128, 1024), (64, 7)])
def test_bn_stats_and_bn_aggr_match_float64(tmp_path, shape) -> None:
    x = np.random.default_rng(7).normal(0.5, 2, shape).astype(np.float32)
    stats, mv = kernel_values(tmp_path, BN, x)
    x64 = x.astype(np.float64)
    n = max(1, shape[1] // 512)
    ref = np.concatenate([_halves(s) for s in np.split(x64, n, axis=1)], axis=1)
    # each statistic is exact, rounded once to fp32: half an ulp, 2^-24 relative
    np.testing.assert_allclose(stats, ref, rtol=U32, atol=0)
    # the aggregate of fp32-rounded statistics: each input off by 2^-24 relative, combined
    # by a weighted mean (mean) and a sum of non-negative terms plus a square of differences
    # of means (variance): a few ulps of the result's scale
    np.testing.assert_allclose(mv[:, 0], x64.mean(1), rtol=0, atol=4 * U32 * np.abs(x64).max())
    np.testing.assert_allclose(mv[:, 1], x64.var(1), rtol=8 * U32, atol=0)


def test_bn_costs_follow_the_documented_formulas(tmp_path) -> None:
    rec = _rec(tmp_path, BN, ["fp32[128,1024]"])
    (agg,) = [i for i in rec.program if isinstance(i, BnAggr)]
    stats = [i for i in rec.program if isinstance(i, BnStats)]
    # bn_stats: max(MIN_II, N) = 512; bn_aggr over N = 12: max(MIN_II, 13 * 12 / 3 = 52) = 64
    assert [engine_cycles(s, TRN2) for s in stats] == [512, 512]
    assert engine_cycles(agg, TRN2) == 64
    big = BnAggr(AccessPattern(Space.SBUF, 0, 128, 0, ((1, 60),), "fp32"),
                 AccessPattern(Space.SBUF, 0, 128, 512, ((1, 2),), "fp32"))
    assert engine_cycles(big, TRN2) == 13 * 20  # 13 * (60 / 3)


@pytest.mark.parametrize("old, new, match", [
    ("n = F // nl.tile_size.bn_stats_fmax if F > 512 else 1", "n = 1", "at most 512"),
    ("mv = nisa.bn_aggr(stats)", "mv = nisa.bn_aggr(stats[:, 0:4])", "multiple of 3"),
])
def test_bn_refusals(tmp_path, old, new, match) -> None:
    with pytest.raises(KernelError, match=match):
        _rec(tmp_path, BN.replace(old, new), ["fp32[128,1024]"])


def test_nl_tile_size_bn_stats_fmax() -> None:
    import nki.language as nl

    assert nl.tile_size.bn_stats_fmax == 512 and nl.tile_size.pmax == 128


# -- iota, nl.ds -------------------------------------------------------------------------------
IOTA = '''
@nki.jit
def k():
    a_out = nl.ndarray((1, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    d_out = nl.ndarray((128, 1), dtype=nl.int16, buffer=nl.shared_hbm)
    a = nisa.iota(nl.arange(512)[None, :] * -3 + 7, dtype=nl.float32)
    d = nisa.iota(5 + nl.arange(128)[:, None] * 2, dtype=nl.int16)
    nl.store(a_out, a)
    nl.store(d_out, d)
    return a_out, d_out
'''


def test_iota_values_and_cost(tmp_path) -> None:
    a, d = kernel_values(tmp_path, IOTA)
    np.testing.assert_array_equal(a, (7 - 3 * np.arange(512))[None, :])
    np.testing.assert_array_equal(d, (5 + 2 * np.arange(128))[:, None])
    rec = _rec(tmp_path, IOTA, [])
    cycles = sorted(engine_cycles(i, TRN2) for i in rec.program if isinstance(i, Iota))
    assert cycles == [150 + 1, 150 + 512]  # nki.isa.iota: 150 + N GpSimd cycles


def test_nl_ds_is_a_slice(tmp_path) -> None:
    body = '''
@nki.jit
def k(a):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a[0:128, nl.ds(64, 64)])
    nl.store(out, t)
    return out
'''
    a = np.arange(128 * 256, dtype=np.float32).reshape(128, 256)
    np.testing.assert_array_equal(kernel_values(tmp_path, body, a), a[:, 64:128])


def test_numpy_ufuncs_are_operators(tmp_path) -> None:
    body = '''
import numpy as np

@nki.jit
def k(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    y = nisa.tensor_scalar(data=t, op0=np.subtract, operand0=1.0, op1=np.multiply,
                           operand1=3.0)
    nl.store(out, y)
    return out
'''
    a = np.random.default_rng(8).normal(0, 1, (128, 16)).astype(np.float32)
    ref = (a.astype(np.float64) - 1) * 3
    np.testing.assert_allclose(kernel_values(tmp_path, body, a), ref, rtol=2 * U32)


# -- SPMD --------------------------------------------------------------------------------------
IDS = '''
@nki.jit
def ids(a):
    out = nl.ndarray((4, 3, 128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    v = (nl.program_id(0) * 10 + nl.program_id(1) + 100 * nl.program_ndim()
         + 1000 * nl.num_programs(1) + 10000 * nl.num_programs())
    nisa.memset(dst=t, value=float(v))
    nisa.dma_copy(dst=out[nl.program_id(0), nl.program_id(1)], src=t)
    return out


def k(a):
    return ids[4, 3](a)
'''


def test_spmd_instances_see_their_program_ids(tmp_path) -> None:
    out = kernel_values(tmp_path, IDS, np.zeros((1, 1), np.float32))
    i, j = np.meshgrid(np.arange(4), np.arange(3), indexing="ij")
    ref = 10 * i + j + 200 + 3000 + 120000
    np.testing.assert_array_equal(out[..., 0, 0], ref)
    assert np.all(out == out[..., :1, :])


def test_spmd_add_example_matches_numpy_and_runs_instances_in_sequence() -> None:
    a = np.random.default_rng(9).normal(0, 1, (256, 1024)).astype(np.float32)
    b = np.random.default_rng(10).normal(0, 1, (256, 1024)).astype(np.float32)
    out = snki.values(snki.load_kernel(str(EX / "spmd_add.py"), "add"), [a, b])
    # one fp32 addition per element: the correctly rounded sum
    np.testing.assert_array_equal(out, (a.astype(np.float64) + b).astype(np.float32))
    rec = snki.record_kernel(str(EX / "spmd_add.py"), "add", ["fp32[256,1024]"] * 2, {})
    one = snki.record_kernel(str(EX / "spmd_add.py"), "add", ["fp32[128,512]"] * 2, {})
    # 2 x 2 instances, each 2 loads, 1 add, 1 store, into one shared output
    assert rec.counts() == {k: 4 * v for k, v in one.counts().items()}
    assert len(rec.outputs) == 1


def test_spmd_refusals(tmp_path) -> None:
    # (nl.nc launches are modelled since: tests/test_nki_select.py)
    with pytest.raises(KernelError, match="positive integers"):
        _rec(tmp_path, IDS.replace("ids[4, 3]", "ids[4, 0]"), ["fp32[1,1]"])
    with pytest.raises(KernelError, match=r"program_id\(2\) of a 2-dimensional"):
        _rec(tmp_path, IDS.replace("nl.program_id(1) +", "nl.program_id(2) +"), ["fp32[1,1]"])


def test_program_id_outside_a_launch_is_zero(tmp_path) -> None:
    body = IDS.replace("return ids[4, 3](a)", "return ids(a)").replace(
        "out[nl.program_id(0), nl.program_id(1)]", "out[0, 0]")
    out = kernel_values(tmp_path, body, np.zeros((1, 1), np.float32))
    assert out[0, 0, 0, 0] == 1000 + 10000  # ids 0, ndim 0, one program along every axis


# -- the instructions: text form, verifier --------------------------------------------------
def _sb(p: int, off: int, n: int, dtype: str = "fp32") -> AccessPattern:
    return AccessPattern(Space.SBUF, 0, p, off, ((1, n),), dtype)


def test_new_instructions_round_trip_through_text() -> None:
    prog = [Transpose(_sb(32, 0, 8), _sb(8, 64, 32)), BnStats(_sb(128, 0, 512), _sb(128, 4096, 6)),
            BnAggr(_sb(128, 4096, 6), _sb(128, 8192, 2)),
            Iota(_sb(128, 0, 16, "int16"), base=-5, partition_step=3, free_step=-2)]
    text = format_program(prog)
    assert "Iota dst=" in text and "base=-5 partition_step=3 free_step=-2" in text
    assert list(parse_instructions(text)) == prog


@pytest.mark.parametrize("ins, match", [
    (Transpose(_sb(64, 0, 8), _sb(8, 1024, 64)), "at most 32 x 32"),
    (Transpose(_sb(32, 0, 8), _sb(32, 1024, 8)), "writes \\[8, 32\\]"),
    (Transpose(_sb(32, 0, 8), _sb(8, 1024, 32, "bf16")), "keeps the dtype"),
    (BnStats(_sb(128, 0, 1024), _sb(128, 8192, 6)), "at most 512"),
    (BnStats(_sb(128, 0, 512), _sb(128, 8192, 2)), "writes \\[128, 6\\]"),
    (BnAggr(_sb(128, 0, 8), _sb(128, 8192, 2)), "multiple of 3"),
    (Iota(AccessPattern(Space.PSUM, 0, 128, 0, ((1, 8),), "fp32")), "Iota dst must be in SBUF"),
    (BnStats(_sb(128, 0, 512), _sb(128, 8192, 6), Engine.GPSIMD), "runs on the vector"),
])
def test_verifier_checks_the_new_instructions(ins, match) -> None:
    with pytest.raises(VerifyError, match=match):
        verify(Program([ins]), "trn2")


# -- the example kernels -------------------------------------------------------------------
def test_layernorm_example_matches_float64() -> None:
    rng = np.random.default_rng(11)
    x = rng.normal(0, 2, (256, 1024)).astype(np.float32)
    g = rng.normal(1, 0.5, 1024).astype(np.float32)
    b = rng.normal(0, 1, 1024).astype(np.float32)
    out = snki.values(snki.load_kernel(str(EX / "layernorm.py"), "layernorm"), [x, g, b])
    x64 = x.astype(np.float64)
    z = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5)
    ref = z * g + b
    # fp32 throughout: mean and variance to a few ulps, rsqrt, (x - m) * r, * g, + b each
    # one fp32 rounding: about 8 ulps of |z g| + |b|
    bound = 8 * U32 * (np.abs(z * g) + np.abs(b)) + 8 * U32 * np.abs(z * g).max() * 1e-3
    assert np.all(np.abs(out - ref) <= bound + 1e-12)


def test_attention_example_matches_float64() -> None:
    rng = np.random.default_rng(12)
    q, k, v = (rng.normal(0, 1, (128, 128)).astype(ml_dtypes.bfloat16) for _ in range(3))
    out = snki.values(snki.load_kernel(str(EX / "attention.py"), "attention"), [q, k, v])
    q6, k6, v6 = (t.astype(np.float64) for t in (q, k, v))
    s = q6 @ k6.T / np.sqrt(128)
    p = np.exp(s - s.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    # the probabilities go into the second matmul as bf16 (2^-9 relative each); the fp32
    # scores and sums add far less: bound 2^-8 of sum_k p |v|
    assert np.all(np.abs(out - p @ v6) <= 2.0 ** -8 * (p @ np.abs(v6)))


def test_transpose_example_is_exact_in_bf16() -> None:
    a = np.random.default_rng(13).normal(0, 1, (256, 384)).astype(ml_dtypes.bfloat16)
    out = snki.values(snki.load_kernel(str(EX / "transpose.py"), "transpose"), [a])
    np.testing.assert_array_equal(out.astype(np.float64), a.T.astype(np.float64))


@pytest.mark.parametrize("name, args", [
    ("layernorm", ["fp32[256,1024]", "fp32[1024]", "fp32[1024]"]),
    ("attention", ["bf16[128,128]"] * 3),
    ("transpose", ["bf16[256,384]"]),
    ("spmd_add", ["fp32[256,1024]"] * 2),
])
def test_example_kernels_are_timed(name: str, args: list[str]) -> None:
    fn = "add" if name == "spmd_add" else name
    rec = snki.record_kernel(str(EX / f"{name}.py"), fn, args, {}, arch="trn2")
    ct = time_program(rec.program, "trn2")
    assert ct.latency > 0 and sum(ct.bound_ticks.values()) == ct.latency


# -- the pytest plugin ------------------------------------------------------------------------
def test_pytest_plugin_runs_an_nki_test_file_unchanged(tmp_path) -> None:
    (tmp_path / "test_user.py").write_text('''
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit(mode="simulation")
def k(a):
    out = nl.ndarray((a.shape[1], a.shape[0]), dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nisa.nc_transpose(nl.load(a)))
    return out


def test_transpose():
    a = np.arange(128 * 64, dtype=np.float32).reshape(128, 64) / 7
    assert np.allclose(k(a), a.T)
''')
    res = _pytest_with_plugin(tmp_path, "test_user.py")
    assert "1 passed" in res.stdout, res.stdout + res.stderr


def _pytest_with_plugin(tmp_path: Path, name: str) -> subprocess.CompletedProcess[str]:
    """A user's test file ``tmp_path / name`` run by pytest under systolic's NKI plugin, in
    a fresh process that sees only this tree (the vendor's own ``pytest -p`` line)."""
    src = str(Path(snki.__file__).resolve().parent.parent.parent)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "systolic.nki.pytest_plugin", str(tmp_path / name)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"})


def test_pytest_plugin_lets_the_test_judge_a_partly_written_store(tmp_path) -> None:
    """Under the plugin a kernel storing a partly written tile runs, as on hardware (the
    rest is garbage there, NaN here) with a warning naming its line; the test checks the
    written part and passes (aws-neuron-sdk's masked nc_match_replace8 test does this)."""
    (tmp_path / "test_half.py").write_text('''
import numpy as np
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit(mode="simulation")
def k(a):
    out = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), dtype=a.dtype, buffer=nl.sbuf)
    ip, jf = nl.mgrid[0:128, 0:64]
    t[ip, jf] = nl.load(a[ip, jf], mask=(ip < 64))
    nl.store(out, t)
    return out


def test_half():
    a = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)
    b = k(a)
    assert np.array_equal(b[:64], a[:64]) and np.isnan(b[64:]).all()
''')
    res = _pytest_with_plugin(tmp_path, "test_half.py")
    assert "1 passed" in res.stdout, res.stdout + res.stderr
    assert "UnwrittenWarning" in res.stdout and "test_half.py:13" in res.stdout
