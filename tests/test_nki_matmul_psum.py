"""nc_matmul's PSUM output dtype and its operand hints: a bf16/fp16 PSUM destination (the
NeuronCore-v3 transpose mode, NeuronCore-v4's bf16 output, rounded as the PE's fp32 sum lands,
accumulation groups adding onto the stored bf16), the older API's ``psum += nc_matmul(...)``
onto a PSUM tile nothing wrote, and ``is_stationary_onezero`` / ``is_moving_onezero``. Values
against float64 numpy on the rounded operands."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from helpers import opcodes as _opcodes
from helpers import record_source as _rec
from helpers import write_kernel

import systolic.nki as snki
from systolic.errors import KernelError

BF16 = ml_dtypes.bfloat16


@pytest.fixture(autouse=True)
def _hook():
    snki.install("trn2")


def _run(tmp_path: Path, body: str, *arrays: np.ndarray, arch: str = "trn2") -> np.ndarray:
    kern = snki.load_kernel(str(write_kernel(tmp_path, body)), "k")
    return np.asarray(snki.values(kern, list(arrays), arch=arch))


# -- the transpose mode's bf16/fp16 PSUM output (NeuronCore-v3) -------------------------------
# the older API, as nki-samples' allocated_fused_rms_norm_qkv writes it: a transpose-mode
# matmul against a loaded identity assigned into a PSUM tile of the data's dtype
OLD_TRANSPOSE = '''
@nki.jit
def k(a, eye):
    out = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    e = nl.load(eye)
    tp = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.psum)
    tp[...] = nisa.nc_matmul(t, e, is_transpose=True)
    nl.store(out, value=nl.copy(tp, dtype=a.dtype))
    return out
'''

NEW_TRANSPOSE = '''
@nki.jit
def k(a, eye):
    out = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    e = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=e, src=eye)
    tp = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.psum)
    nisa.nc_matmul(dst=tp, stationary=t, moving=e, is_transpose=True)
    ts = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=ts, src=tp)
    nisa.dma_copy(dst=out, src=ts)
    return out
'''


@pytest.mark.parametrize("dtype", [BF16, np.float16])
def test_older_api_transpose_into_a_16_bit_psum_tile_is_exact(tmp_path, dtype) -> None:
    a = np.random.default_rng(1).normal(0, 3, (128, 128)).astype(dtype)
    out = _run(tmp_path, OLD_TRANSPOSE, a, np.eye(128, dtype=dtype))
    # trainium2_arch.rst: FP16/BF16 PSUM output for an FP16/BF16 transpose; x * 1 + 0 exact
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out.astype(np.float64), a.T.astype(np.float64))


def test_the_transpose_mode_writes_the_16_bit_tile_itself(tmp_path) -> None:
    rec = _rec(tmp_path, NEW_TRANSPOSE, ["bf16[128,128]", "bf16[128,128]"])
    mms = [i for i in rec.program if type(i).__name__ == "MatMul"]
    # one MatMul straight into the bf16 tile: no fp32 staging bank, no copy out of it (the
    # only TensorCopy is the kernel's own)
    assert len(mms) == 1 and mms[0].dst.dtype == "bf16"
    assert _opcodes(rec).count("TensorCopy") == 1
    a = np.random.default_rng(2).normal(0, 3, (128, 128)).astype(BF16)
    out = _run(tmp_path, NEW_TRANSPOSE, a, np.eye(128, dtype=BF16))
    np.testing.assert_array_equal(out.astype(np.float64), a.T.astype(np.float64))


@pytest.mark.parametrize(("body", "arch", "args", "words"), [
    # NeuronCore-v2 has no transpose mode: its PE writes fp32 only
    (OLD_TRANSPOSE, "trn1", ["bf16[128,128]", "bf16[128,128]"], "NeuronCore-v3"),
    # the transpose mode writes the data's own dtype
    (NEW_TRANSPOSE.replace("dtype=a.dtype, buffer=nl.psum", "dtype=nl.float16, "
                           "buffer=nl.psum"), "trn2", ["bf16[128,128]", "bf16[128,128]"],
     "the data's own"),
    # an ordinary matmul writes fp32 on NeuronCore-v3
    (NEW_TRANSPOSE.replace(", is_transpose=True", ""), "trn2",
     ["bf16[128,128]", "bf16[128,128]"], "bf16 only on NeuronCore-v4"),
    # a transpose accumulating into bf16: the docs name none
    (NEW_TRANSPOSE.replace("is_transpose=True", "is_transpose=True, accumulate=True"),
     "trn2", ["bf16[128,128]", "bf16[128,128]"], "accumulating"),
], ids=["v2-transpose", "other-dtype", "v3-plain-matmul", "transpose-accumulate"])
def test_16_bit_psum_outputs_the_docs_do_not_name_are_refused(tmp_path, body, arch, args,
                                                               words) -> None:
    with pytest.raises(KernelError, match=words):
        _rec(tmp_path, body, args, arch=arch)


# -- NeuronCore-v4: bf16 PSUM output of any matmul, accumulated near memory ------------------
V4_ACCUMULATE = '''
@nki.jit(platform_target="trn3")
def k(a, b):
    K, M = a.shape
    N = b.shape[1]
    out = nl.ndarray((M, N), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    acc = nl.ndarray((M, N), dtype=nl.bfloat16, buffer=nl.psum)
    for i in nl.sequential_range(K // 128):
        s = nl.ndarray((128, M), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=s, src=a[i * 128:(i + 1) * 128, :])
        m = nl.ndarray((128, N), dtype=b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=m, src=b[i * 128:(i + 1) * 128, :])
        nisa.nc_matmul(dst=acc, stationary=s, moving=m)
    r = nl.ndarray((M, N), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.tensor_copy(dst=r, src=acc)
    nisa.dma_copy(dst=out, src=r)
    return out
'''


def _bf16(x: np.ndarray) -> np.ndarray:
    return x.astype(BF16).astype(np.float64)  # RNE, ml_dtypes


def test_v4_bf16_psum_rounds_each_matmul_as_it_lands(tmp_path) -> None:
    rng = np.random.default_rng(3)
    # small integers: every product and fp32 partial sum is exact (|sum| <= 128 * 49 <
    # 2^24), so the only roundings are the bf16 ones of the PSUM writes
    a = rng.integers(-7, 8, (384, 64)).astype(BF16)
    b = rng.integers(-7, 8, (384, 256)).astype(BF16)
    out = _run(tmp_path, V4_ACCUMULATE, a, b, arch="trn3").astype(np.float64)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    parts = [a64[i:i + 128].T @ b64[i:i + 128] for i in range(0, 384, 128)]
    ref = _bf16(parts[0])  # the group's first matmul writes its rounded sum
    for p in parts[1:]:  # each later one adds its fp32 sum to the stored bf16 and rounds
        ref = _bf16(ref + p)
    np.testing.assert_array_equal(out, ref)
    # rounding once at the end would differ: the test tells the two apart
    assert np.any(_bf16(sum(parts)) != ref)


def test_v4_bf16_psum_refuses_two_pass_fp32_operands(tmp_path) -> None:
    with pytest.raises(KernelError, match="fp32 / tfloat32"):
        _rec(tmp_path, V4_ACCUMULATE, ["fp32[256,64]", "fp32[256,128]"], arch="trn3")


# -- the older API's += onto a PSUM tile nothing wrote --------------------------------------
OLD_ACCUMULATE = '''
@nki.jit
def k(a, b):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    for i in nl.affine_range(2):
        s = nl.load(a[i * 128:(i + 1) * 128, :])
        m = nl.load(b[i * 128:(i + 1) * 128, :])
        acc += nisa.nc_matmul(s, m)
    nl.store(out, value=nl.copy(acc, dtype=nl.float32))
    return out
'''


def test_older_api_accumulation_group_onto_an_unwritten_tile_starts_by_writing(
        tmp_path) -> None:
    rng = np.random.default_rng(4)
    a = rng.integers(-4, 5, (256, 128)).astype(BF16)
    b = rng.integers(-4, 5, (256, 512)).astype(BF16)
    out = _run(tmp_path, OLD_ACCUMULATE, a, b)
    # the compiler's accumulation group: the first matmul writes, the second adds (exact:
    # integer sums far below 2^24)
    np.testing.assert_array_equal(out.astype(np.float64),
                                  a.astype(np.float64).T @ b.astype(np.float64))


def test_current_api_accumulate_true_onto_an_unwritten_tile_stays_refused(tmp_path) -> None:
    body = V4_ACCUMULATE.replace('(platform_target="trn3")', "").replace(
        "nl.bfloat16", "nl.float32").replace("moving=m)", "moving=m, accumulate=True)")
    with pytest.raises(KernelError, match="nothing wrote"):
        _rec(tmp_path, body, ["bf16[256,64]", "bf16[256,128]"])


# -- is_stationary_onezero / is_moving_onezero ---------------------------------------------
ONEZERO = '''
@nki.jit
def k(a, b):
    K, M = a.shape
    N = b.shape[1]
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    s = nl.ndarray((K, M), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=s, src=a)
    m = nl.ndarray((K, N), dtype=b.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=m, src=b)
    p = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=p, stationary=s, moving=m FLAGS)
    r = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=r, src=p)
    nisa.dma_copy(dst=out, src=r)
    return out
'''
FLAGS = ", is_stationary_onezero=True, is_moving_onezero=True"


@pytest.mark.parametrize("dtype", [np.float32, BF16])
def test_onezero_hints_leave_the_matmul_as_it_is(tmp_path, dtype) -> None:
    rng = np.random.default_rng(5)
    a = rng.integers(0, 2, (128, 96)).astype(dtype)  # zeros and ones, as the hint says
    b = rng.integers(0, 2, (128, 200)).astype(dtype)
    hinted = ONEZERO.replace(" FLAGS", FLAGS)
    out = _run(tmp_path, hinted, a, b)
    np.testing.assert_array_equal(out.astype(np.float64),
                                  a.astype(np.float64).T @ b.astype(np.float64))
    # a hint with no modelled timing effect: the same instructions as without it
    args = [f"{'fp32' if dtype is np.float32 else 'bf16'}[{x.shape[0]},{x.shape[1]}]"
            for x in (a, b)]
    plain = _rec(tmp_path, ONEZERO.replace(" FLAGS", ""), args)
    with_hint = _rec(tmp_path, hinted, args)
    assert list(with_hint.program) == list(plain.program)


def test_onezero_hint_on_other_values_computes_the_ordinary_matmul(tmp_path) -> None:
    rng = np.random.default_rng(6)
    a = rng.normal(0, 1, (128, 64)).astype(BF16)  # not zeros and ones: the hint is wrong
    b = rng.normal(0, 1, (128, 128)).astype(BF16)
    out = _run(tmp_path, ONEZERO.replace(" FLAGS", FLAGS), a, b).astype(np.float64)
    ref = a.astype(np.float64).T @ b.astype(np.float64)
    # fp32 accumulation of 128 exact bf16 x bf16 products: |err| <= 128 u32 sum |a||b|
    bound = 128 * 2.0 ** -24 * (np.abs(a.astype(np.float64)).T @ np.abs(b.astype(np.float64)))
    assert np.all(np.abs(out - ref) <= bound)


def test_onezero_hint_takes_a_bool(tmp_path) -> None:
    with pytest.raises(KernelError, match="is_moving_onezero is True or False"):
        _rec(tmp_path, ONEZERO.replace(" FLAGS", ", is_moving_onezero=2"),
             ["bf16[128,64]", "bf16[128,128]"])
