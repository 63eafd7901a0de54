"""NKI breadth, issue 19 (the next items): every recorded kind is lowered, nc_matmul
transpose mode, the vendor test-suite features, partial masks, direct allocation, the one
bound-kind rule. Each test compares with float64 numpy or a rule stated in the test."""

from __future__ import annotations

import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from helpers import kernel_values
from helpers import opcodes as _opcodes
from helpers import record_source as _rec

import systolic.nki as snki
import systolic.nki.timing as ntiming
from systolic.errors import KernelError

SRC = Path(__file__).resolve().parent.parent / "src" / "systolic" / "nki"


@pytest.fixture(autouse=True)
def _hook():
    snki.install("trn2")




# -- 1. every recorded kind is lowered; an unknown one is an internal error ----------------
def test_every_kind_has_one_record_type_and_one_lowering_rule() -> None:
    """The recorded kinds are an enum; each has exactly one frozen record type naming it and
    one rule in the one lowering table, and the lazy results one rule each too."""
    import dataclasses
    import typing

    from systolic.nki import opkind
    from systolic.nki.lazy import LazyKind
    from systolic.nki.lower import LOWER
    from systolic.nki.results import LAZY

    records = typing.get_args(opkind.OpArgs)
    assert sorted(r.KIND.name for r in records) == sorted(k.name for k in opkind.OpKind)
    for r in records:
        assert dataclasses.is_dataclass(r) and r.__dataclass_params__.frozen, r  # type: ignore
    assert set(LOWER) == set(opkind.OpKind)
    assert set(LAZY) == set(LazyKind)
    made: set[str] = set()
    for f in SRC.glob("*.py"):  # every place an op is recorded names its record type
        made |= set(re.findall(r"\b(\w+Args)\(", f.read_text()))
    assert made <= {r.__name__ for r in records}, made


ADD = '''
@nki.jit
def k(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    y = nl.load(b)
    nl.store(out, x + y)
    return out
'''


# -- 2. nc_matmul(is_transpose=True): the PE transpose, timed as the matmul it is ----------
TRANSPOSE_MODE = '''
@nki.jit
def k(a, eye):
    P, F = a.shape
    out = nl.ndarray((F, P), dtype=DST, buffer=nl.shared_hbm)
    t = nl.ndarray((P, F), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=a)
    i = nl.ndarray((P, P), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=i, src=eye)
    tp = nl.ndarray((F, P), dtype=DST, buffer=nl.psum)
    nisa.nc_matmul(dst=tp, stationary=t, moving=i, is_transpose=True)
    ts = nl.ndarray((F, P), dtype=DST, buffer=nl.sbuf)
    nisa.tensor_copy(dst=ts, src=tp)
    nisa.dma_copy(dst=out, src=ts)
    return out
'''
LEGACY_TRANSPOSE = '''
@nki.jit
def k(a, eye):
    P, F = a.shape
    out = nl.ndarray((F, P), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a)
    i = nl.load(eye)
    tp = nl.ndarray((F, P), dtype=nl.float32, buffer=nl.psum)
    tp[...] = nisa.nc_matmul(t, i, is_transpose=True)
    nl.store(out, tp)
    return out
'''


def _bits(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x).view(np.uint8)


@pytest.mark.parametrize("shape", [(128, 128), (128, 40), (64, 128)])
def test_transpose_mode_passes_fp32_through_bit_exactly(tmp_path, shape) -> None:
    rng = np.random.default_rng(5)
    a = (rng.normal(0, 1, shape) * np.exp2(rng.integers(-60, 60, shape))).astype(np.float32)
    eye = np.eye(shape[0], dtype=np.float32)
    out = kernel_values(tmp_path, TRANSPOSE_MODE.replace("DST", "nl.float32"), a, eye)
    # trn2 is NeuronCore-v3: transpose mode is bit-accurate (trainium2_arch.rst); every
    # one of the 24 significant bits survives, where the fp32 matmul keeps 16
    assert np.array_equal(_bits(out), _bits(np.ascontiguousarray(a.T)))


def test_transpose_mode_fp32_is_one_full_pass_and_timed_as_the_matmul(tmp_path) -> None:
    from systolic.isa import Fp32Pass, MatMul

    rec = _rec(tmp_path, TRANSPOSE_MODE.replace("DST", "nl.float32"),
               ["fp32[128,96]", "fp32[128,128]"])
    mms = [i for i in rec.program if isinstance(i, MatMul)]
    ops = _opcodes(rec)
    assert ops.count("LoadStationary") == 1 and len(mms) == 1
    assert mms[0].fp32_pass is Fp32Pass.FULL and mms[0].moving.free_elems == 128
    # the PE rules time it as the matmul it is: N_moving = 128 columns of fp32, one pass at
    # 4 cycles a column (seed 003: fp32 "roughly 4x"), over MM_INIT_LATENCY = 64
    from systolic.timing.pe import matmul_interval

    assert matmul_interval(mms[0], rec.arch) == 4 * 128
    assert ntiming.time_recorded(rec).busy_ticks["tensor"] > 0


def test_transpose_mode_on_gen2_is_the_ordinary_matmul(tmp_path) -> None:
    rec = _rec(tmp_path, TRANSPOSE_MODE.replace("DST", "nl.float32"),
               ["fp32[128,96]", "fp32[128,128]"], arch="trn1")
    # NeuronCore-v2 has no transpose mode (nki.isa nc_matmul): the two bf16 passes of fp32
    assert _opcodes(rec).count("MatMul") == 2


@pytest.mark.parametrize("dtype, dst", [(ml_dtypes.bfloat16, "nl.bfloat16"),
                                        (np.float16, "nl.float16"),
                                        (ml_dtypes.bfloat16, "nl.float32"),
                                        (ml_dtypes.float8_e4m3, "nl.float32")])
def test_transpose_mode_of_8_and_16_bit_floats_is_exact(tmp_path, dtype, dst) -> None:
    a = np.random.default_rng(6).normal(0, 4, (128, 72)).astype(dtype)
    eye = np.eye(128).astype(dtype)
    out = kernel_values(tmp_path, TRANSPOSE_MODE.replace("DST", dst), a, eye)
    assert out.dtype == (np.float32 if dst == "nl.float32" else dtype)
    np.testing.assert_array_equal(out.astype(np.float64), a.T.astype(np.float64))


def test_transpose_mode_in_the_older_api(tmp_path) -> None:
    a = np.random.default_rng(7).normal(0, 1, (128, 128)).astype(np.float32)
    out = kernel_values(tmp_path, LEGACY_TRANSPOSE, a, np.eye(128, dtype=np.float32))
    assert np.array_equal(_bits(out), _bits(np.ascontiguousarray(a.T)))


@pytest.mark.parametrize("old, new, match", [
    ("is_transpose=True)", "is_transpose=1.5)", "is_transpose is True or False"),
    ("dtype=DST, buffer=nl.psum", "dtype=nl.float16, buffer=nl.psum",
     "writes fp32, or the data's own bf16/fp16"),
])
def test_transpose_mode_refusals_are_one_line(tmp_path, old, new, match) -> None:
    body = TRANSPOSE_MODE.replace(old, new).replace("DST", "nl.bfloat16")
    with pytest.raises(KernelError, match=match) as exc:
        _rec(tmp_path, body, ["bf16[128,64]", "bf16[128,128]"])
    assert "\n" not in str(exc.value)


# -- 3. the vendor test-suite features ------------------------------------------------------
DMA_T = '''
@nki.jit
def k(a):
    P, F = a.shape
    out = nl.ndarray((F, P), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray((F, P), dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=t, src=a)
    nisa.dma_copy(dst=out, src=t)
    return out
'''
DMA_T_LEGACY = '''
@nki.jit
def k(a):
    P, F = a.shape
    out = nl.ndarray((F, P), dtype=a.dtype, buffer=nl.shared_hbm)
    b = nisa.dma_transpose(a)
    nl.store(out, b)
    return out
'''


@pytest.mark.parametrize("body", [DMA_T, DMA_T_LEGACY])
@pytest.mark.parametrize("shape", [(16, 128), (256, 64), (3, 5)])
@pytest.mark.parametrize("dtype, name", [(ml_dtypes.bfloat16, "bf16"), (np.float32, "fp32")])
def test_dma_transpose_moves_bits(tmp_path, body, shape, dtype, name) -> None:
    """Any dtype: nki.isa.dma_transpose at aws-neuron-sdk 7c165a3e names no dtype limit."""
    a = np.random.default_rng(8).normal(0, 1, shape).astype(dtype)
    out = kernel_values(tmp_path, body, a)
    assert np.array_equal(_bits(out), _bits(np.ascontiguousarray(a.T)))
    rec = _rec(tmp_path, body, [f"{name}[{shape[0]},{shape[1]}]"])
    assert _opcodes(rec).count("DmaCopy") == 2  # one DMA in, one out: no engine touches it


@pytest.mark.parametrize("arg, match", [
    ("bf16[16,256]", "at most 128"),
])
def test_dma_transpose_refusals(tmp_path, arg, match) -> None:
    with pytest.raises(KernelError, match=match):
        _rec(tmp_path, DMA_T_LEGACY, [arg])


def test_dma_transpose_from_sbuf_is_refused_in_one_line(tmp_path) -> None:
    body = DMA_T_LEGACY.replace("b = nisa.dma_transpose(a)",
                                "s = nl.load(a)\n    b = nisa.dma_transpose(s)")
    with pytest.raises(KernelError, match="dma_transpose from sbuf is not modelled"):
        _rec(tmp_path, body, ["bf16[16,64]"])


def test_nl_dtypes_are_numpy_dtypes() -> None:
    import systolic.nki.language as nl

    x = np.array([1.0, 0.3, 1000.0, -3.0])
    # numpy takes the NKI dtype itself; the values are ml_dtypes' own rounding
    for d, ref in ((nl.float8_e4m3, ml_dtypes.float8_e4m3), (nl.float8_e5m2,
                   ml_dtypes.float8_e5m2), (nl.bfloat16, ml_dtypes.bfloat16)):
        got = x.astype(d)
        assert got.dtype == np.dtype(ref)
        assert np.array_equal(got.astype(np.float64), x.astype(ref).astype(np.float64),
                              equal_nan=True)
    assert np.ones((2, 3), dtype=nl.float16).dtype == np.float16
    with pytest.raises((TypeError, ValueError)):
        np.dtype(nl.tfloat32)  # numpy has no tf32: numpy refuses it, as it should


BOOL_COPY = '''
@nki.jit
def k(pred, a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    p = nl.load(pred)
    x = nl.load(a)
    nl.store(out, nl.multiply(x, p, dtype=a.dtype))
    return out
'''


def test_bool_arrays_are_bytes_of_0_and_1(tmp_path) -> None:
    rng = np.random.default_rng(9)
    pred = rng.integers(0, 2, (128, 64)).astype(np.bool_)
    a = rng.normal(0, 1, (128, 64)).astype(np.float32)
    out = kernel_values(tmp_path, BOOL_COPY, pred, a)
    np.testing.assert_array_equal(out, np.where(pred, a, np.float32(0) * a))


def test_int32_and_uint32_tiles_move_exactly(tmp_path) -> None:
    """32-bit integer tiles (issue 19 item 2): loaded, copied on chip and stored, bit for
    bit, the whole range included (2^31 - 1 has no fp32 value)."""
    body = ADD.replace("x + y", "x")
    for dt in (np.int32, np.uint32):
        info = np.iinfo(dt)
        x = np.array([info.min, info.max, 0, 1, info.max - 1, 12345] * (128 * 64 // 6 + 1),
                     dtype=dt)[:128 * 64].reshape(128, 64)
        out = kernel_values(tmp_path, body, x, x)
        assert out.dtype == dt and np.array_equal(out, x)


def test_view_reinterprets_same_size_and_refuses_other_sizes(tmp_path) -> None:
    body = '''
@nki.jit
def k(a):
    out = nl.ndarray(a.shape, dtype=nl.int8, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a.view(nl.int8)))
    return out
'''
    a = np.array([[1.0, -2.0, 0.5, 448.0]], dtype=ml_dtypes.float8_e4m3fn)
    a = np.repeat(a.astype(ml_dtypes.float8_e4m3), 4, axis=0)
    out = kernel_values(tmp_path, body, a)
    assert np.array_equal(out, a.view(np.int8))  # the same bytes, read as int8
    with pytest.raises(KernelError, match="same size"):
        _rec(tmp_path, body.replace("nl.int8)", "nl.float32)"), ["fp8_e4m3[4,4]"])


def test_nki_trace_is_a_kernel_decorator(tmp_path) -> None:
    body = ADD.replace("@nki.jit", "@nki.trace")
    a, b = (np.random.default_rng(i).normal(0, 1, (128, 32)).astype(np.float32)
            for i in (1, 2))
    np.testing.assert_array_equal(kernel_values(tmp_path, body, a, b), a + b)


def test_nl_broadcast_to_reads_one_row_on_every_partition(tmp_path) -> None:
    body = '''
@nki.jit
def k(a):
    out = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    nl.store(out, nl.broadcast_to(t, shape=(128, a.shape[1])))
    return out
'''
    a = np.random.default_rng(3).normal(0, 1, (1, 64)).astype(np.float32)
    np.testing.assert_array_equal(kernel_values(tmp_path, body, a), np.repeat(a, 128, axis=0))


def test_a_jitted_kernel_named_test_is_not_collected_by_pytest() -> None:
    import inspect

    from systolic.nki.spmd import jit

    def test_kernel(a):  # the vendor's test_nki_nl_broadcast.py names its kernel so
        return a

    k = jit(test_kernel)
    # pytest collects a callable only if it is, or unwraps to, a function
    assert not inspect.isfunction(inspect.unwrap(k))


# -- 6. one bound-kind rule: systolic.schema's -----------------------------------------------
def test_bound_kind_is_the_schema_rule() -> None:
    from types import SimpleNamespace

    from systolic import schema

    assert ntiming.BOUND_KINDS is schema.BOUND_KINDS  # one table, not a copy
    zero = SimpleNamespace(bound_ticks={c: 0 for cs in schema.BOUND_KINDS.values() for c in cs})
    # nothing on the critical path: "sync" (schema.bound_kind's documented rule)
    assert ntiming.bound_kind(zero) == "sync"
    ticks = dict(zero.bound_ticks, vector=3, scalar=2, pe=4)  # engines 5 > pe 4
    assert ntiming.bound_kind(SimpleNamespace(bound_ticks=ticks)) == "engines"
