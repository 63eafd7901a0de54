"""Activation functions, tensor_scalar and tensor_reduce (issue 19, first slice): their
values against float64 numpy of the rounded inputs, their costs against the nki.isa
"Estimated instruction cost" formulas, their verify rules, and the softmax and rmsnorm
example kernels against float64 references."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from helpers import write_kernel

import systolic.nki as snki
from systolic.arch import get_arch
from systolic.errors import KernelError, VerifyError
from systolic.isa import (
    AccessPattern,
    Activation,
    ActivationFunc,
    AluOp,
    DmaCopy,
    Engine,
    Program,
    Space,
    TensorReduce,
    TensorScalar,
)
from systolic.sim.functional import FunctionalSimulator
from systolic.timing.core import time_program
from systolic.timing.costs import engine_cycles
from systolic.verify import verify

EX = Path(__file__).resolve().parents[1] / "examples" / "kernels"
TRN1, TRN2 = get_arch("trn1"), get_arch("trn2")
DRAM = 1 << 22


@pytest.fixture(autouse=True)
def _hook():
    snki.install("trn2")


def sb(off: int, n: int, dtype: str = "fp32", p: int = 128) -> AccessPattern:
    return AccessPattern(Space.SBUF, 0, p, off, ((1, n),), dtype)


def dram(off: int, n: int, dtype: str = "fp32", p: int = 128) -> AccessPattern:
    isz = {"fp32": 4, "bf16": 2}[dtype]
    return AccessPattern(Space.DRAM, 0, p, off, ((1, n),), dtype, partition_step=n * isz)


def run(ins: list, inputs: dict[int, np.ndarray], out: tuple[int, tuple[int, ...], str]
        ) -> np.ndarray:
    """Load each input (fp32 [128, n] at a DRAM offset), run the program, read ``out``."""
    sim = FunctionalSimulator("trn2", dram_bytes=DRAM)
    for off, arr in inputs.items():
        sim.write_dram(off, arr, "fp32")
    sim.run(Program(ins))
    return sim.read_dram(*out)


REF = {
    ActivationFunc.EXP: np.exp, ActivationFunc.LOG: np.log, ActivationFunc.SQRT: np.sqrt,
    ActivationFunc.RSQRT: lambda x: 1 / np.sqrt(x), ActivationFunc.SQUARE: np.square,
    ActivationFunc.ABS: np.abs, ActivationFunc.RELU: lambda x: np.maximum(x, 0),
    ActivationFunc.SIGMOID: lambda x: 1 / (1 + np.exp(-x)), ActivationFunc.TANH: np.tanh,
    ActivationFunc.SILU: lambda x: x / (1 + np.exp(-x)),
    ActivationFunc.GELU_APPRX_TANH: lambda x: 0.5 * x * (1 + np.tanh(
        np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))),
    ActivationFunc.RECIPROCAL: lambda x: 1 / x, ActivationFunc.NEGATIVE: np.negative,
    ActivationFunc.COPY: lambda x: x, ActivationFunc.IDENTITY: lambda x: x,
}
POSITIVE = {ActivationFunc.LOG, ActivationFunc.SQRT, ActivationFunc.RSQRT}


def test_every_function_has_a_reference() -> None:
    assert set(REF) == set(ActivationFunc)


@pytest.mark.parametrize("func", list(ActivationFunc), ids=lambda f: f.value)
@pytest.mark.parametrize("out_dtype", ["fp32", "bf16"])
def test_activation_is_f_of_x_times_scale_plus_bias(func: ActivationFunc,
                                                    out_dtype: str) -> None:
    rng = np.random.default_rng(1)
    x = rng.uniform(0.1, 3.0, (128, 64)) if func in POSITIVE else rng.normal(0, 1.5, (128, 64))
    x = x.astype(np.float32)
    bias = rng.uniform(0.0, 0.5, (128, 1)).astype(np.float32)
    scale = np.float32(0.75)
    ins = [DmaCopy(dram(0, 64), sb(0, 64)), DmaCopy(dram(1 << 16, 1), sb(4096, 1)),
           Activation(sb(0, 64), sb(8192, 64, out_dtype), func, float(scale),
                      bias=sb(4096, 1)),
           DmaCopy(sb(8192, 64, out_dtype), dram(1 << 20, 64, out_dtype))]
    got = run(ins, {0: x, 1 << 16: bias}, (1 << 20, (128, 64), out_dtype))
    # reference: fp32 multiply-add as the engine does, then f in float64
    arg = (x * scale + bias).astype(np.float64)
    want = REF[func](arg)
    if out_dtype == "bf16":
        want = want.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-7 if out_dtype == "fp32"
                               else 0, atol=1e-30)


def test_activation_scale_tile_and_reduce_result() -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(0, 1, (128, 100)).astype(np.float32)
    s = rng.uniform(0.5, 2, (128, 1)).astype(np.float32)
    ins = [DmaCopy(dram(0, 100), sb(0, 100)), DmaCopy(dram(1 << 16, 1), sb(4096, 1)),
           Activation(sb(0, 100), sb(8192, 100), ActivationFunc.SQUARE, scales=sb(4096, 1),
                      acc=sb(12288, 1), acc_op=AluOp.ADD),
           Activation(sb(0, 100), sb(16384, 100), ActivationFunc.COPY, acc=sb(12352, 1),
                      acc_op=AluOp.MAXIMUM),
           DmaCopy(sb(12288, 1), dram(1 << 20, 1)), DmaCopy(sb(12352, 1), dram(1 << 21, 1))]
    sim = FunctionalSimulator("trn2", dram_bytes=DRAM)
    sim.write_dram(0, x, "fp32")
    sim.write_dram(1 << 16, s, "fp32")
    sim.run(Program(ins))
    sums = sim.read_dram(1 << 20, (128, 1), "fp32").astype(np.float64)
    maxes = sim.read_dram(1 << 21, (128, 1), "fp32")
    y = (x * s).astype(np.float64) ** 2
    ref = y.sum(axis=1, keepdims=True)
    # fp32 accumulation of 100 terms of one sign: within 100 ulps of fp32, relative
    assert np.all(np.abs(sums - ref) <= ref * 100 * 2.0 ** -24)
    np.testing.assert_array_equal(maxes, x.max(axis=1, keepdims=True))


@pytest.mark.parametrize(("op0", "c0", "rev0", "op1", "c1", "rev1", "ref"), [
    (AluOp.MULTIPLY, 2.5, False, None, 0.0, False, lambda x, v: x * 2.5),
    (AluOp.SUBTRACT, 1.0, True, None, 0.0, False, lambda x, v: 1.0 - x),
    (AluOp.SUBTRACT, "v", False, AluOp.MULTIPLY, 3.0, False, lambda x, v: (x - v) * 3.0),
    (AluOp.ADD, 0.5, False, AluOp.DIVIDE, "v", True, lambda x, v: v / (x + 0.5)),
    (AluOp.MAXIMUM, 0.0, False, AluOp.MINIMUM, 1.0, False, lambda x, v: np.clip(x, 0, 1)),
])
def test_tensor_scalar_applies_two_operators_in_order(op0, c0, rev0, op1, c1, rev1,
                                                      ref) -> None:
    rng = np.random.default_rng(3)
    x = rng.normal(0, 2, (128, 32)).astype(np.float32)
    v = rng.uniform(1, 2, (128, 1)).astype(np.float32)
    kw: dict = {"reverse0": rev0, "op1": op1, "reverse1": rev1}
    if c0 == "v":
        kw["operand0_ap"] = sb(4096, 1)
    if c1 == "v":
        kw["operand1_ap"] = sb(4096, 1)
    ins = [DmaCopy(dram(0, 32), sb(0, 32)), DmaCopy(dram(1 << 16, 1), sb(4096, 1)),
           TensorScalar(sb(0, 32), sb(8192, 32), op0, c0 if c0 != "v" else 1.0,
                        operand1=c1 if c1 != "v" else 0.0, **kw),
           DmaCopy(sb(8192, 32), dram(1 << 20, 32))]
    got = run(ins, {0: x, 1 << 16: v}, (1 << 20, (128, 32), "fp32"))
    np.testing.assert_allclose(got, ref(x, v).astype(np.float32), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize(("op", "negate", "ref"), [
    (AluOp.ADD, False, lambda x: x.sum(1, keepdims=True)),
    (AluOp.MAXIMUM, True, lambda x: -x.max(1, keepdims=True)),
    (AluOp.MINIMUM, False, lambda x: x.min(1, keepdims=True)),
])
def test_tensor_reduce_along_the_free_axis(op, negate, ref) -> None:
    rng = np.random.default_rng(4)
    x = rng.normal(0, 1, (128, 300)).astype(np.float32)
    ins = [DmaCopy(dram(0, 300), sb(0, 300)),
           TensorReduce(sb(0, 300), sb(4096, 1), op, negate=negate),
           DmaCopy(sb(4096, 1), dram(1 << 20, 1))]
    got = run(ins, {0: x}, (1 << 20, (128, 1), "fp32")).astype(np.float64)
    want = ref(x.astype(np.float64))
    tol = 300 * 2.0 ** -24 * np.abs(x).sum(1, keepdims=True) if op is AluOp.ADD else 0
    assert np.all(np.abs(got - want) <= tol)


# -- costs: the nki.isa formulas at their own numbers -------------------------------------
@pytest.mark.parametrize(("ins", "arch", "cycles"), [
    (TensorReduce(sb(0, 1024, "bf16"), sb(8192, 1, "bf16"), AluOp.ADD), TRN1, 512),
    (TensorReduce(sb(0, 1024, "bf16"), sb(8192, 1, "bf16"), AluOp.MAXIMUM), TRN1, 512),
    (TensorReduce(sb(0, 1024, "bf16"), sb(8192, 1, "fp32"), AluOp.ADD), TRN1, 1024),
    (TensorReduce(sb(0, 1024, "bf16"), sb(8192, 1, "bf16"), AluOp.MINIMUM), TRN1, 1024),
    (TensorReduce(sb(0, 100, "bf16"), sb(8192, 1, "bf16"), AluOp.ADD), TRN1, 64),
    (TensorScalar(sb(0, 1024), sb(8192, 1024), AluOp.MULTIPLY, 2.0), TRN1, 1024),
    (TensorScalar(sb(0, 1024, "bf16"), sb(8192, 1024, "bf16"), AluOp.MULTIPLY, 2.0), TRN2,
     256),  # trn2 Vector perf mode, as tensor_copy
    (Activation(sb(0, 1024), sb(8192, 1024), ActivationFunc.EXP), TRN2, 1024),
    (Activation(sb(0, 1024), sb(8192, 1024), ActivationFunc.EXP, acc=sb(16384, 1)), TRN2,
     1024 + 64),  # activation_reduce: max(MIN_II, N) + MIN_II
    (Activation(sb(0, 10), sb(8192, 10), ActivationFunc.EXP, acc=sb(16384, 1)), TRN2,
     64 + 64),
])
def test_costs_follow_the_documented_formulas(ins, arch, cycles) -> None:
    assert engine_cycles(ins, arch, ins.engine) == cycles


# -- verify -------------------------------------------------------------------------------
@pytest.mark.parametrize(("ins", "match"), [
    (Activation(sb(0, 64), sb(4096, 64), ActivationFunc.EXP, bias=sb(8192, 2)),
     r"bias must be one element on each of the 128 partitions"),
    (TensorScalar(sb(0, 64), sb(4096, 64), operand0_ap=sb(8192, 1, p=64)),
     r"operand0 must be one element"),
    (TensorReduce(sb(0, 64), sb(4096, 3)), r"divide its 64 elements"),
    (TensorReduce(sb(0, 64), sb(4096, 1), engine=Engine.SCALAR),
     r"TensorReduce runs on the Vector or GpSimd engine"),
])
def test_per_partition_operands_are_checked(ins, match) -> None:
    with pytest.raises(VerifyError, match=match):
        verify(Program([ins]), "trn2", dram_bytes=DRAM)


def test_timing_reads_the_optional_operands_as_dependencies() -> None:
    # the bias is written by a Vector op; the activation must wait for it (RAW on the bias)
    make_bias = TensorReduce(sb(0, 2048), sb(16384, 1), AluOp.MAXIMUM)
    act = Activation(sb(0, 64), sb(4096, 64), ActivationFunc.EXP, bias=sb(16384, 1))
    ct = time_program(Program([make_bias, act]), TRN2)
    assert ct.starts[1] >= ct.ends[0]
    alone = time_program(Program([act]), TRN2)
    assert alone.starts[0] == 0


# -- the NKI surface ----------------------------------------------------------------------
def _bf16(a: np.ndarray) -> np.ndarray:
    return a.astype(ml_dtypes.bfloat16).astype(np.float64)


def test_softmax_example_matches_float64() -> None:
    rng = np.random.default_rng(5)
    x = rng.normal(0, 2, (256, 512)).astype(np.float32)
    out = snki.values(snki.load_kernel(str(EX / "softmax.py"), "softmax"), [x])
    x64 = x.astype(np.float64)
    ref = np.exp(x64 - x64.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    # fp32 throughout: exp rounded to fp32, a 512-term fp32 sum, one fp32 reciprocal
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-9)


def test_rmsnorm_example_matches_float64_in_bf16() -> None:
    rng = np.random.default_rng(6)
    x = rng.normal(0, 1, (128, 1024)).astype(np.float32).astype(ml_dtypes.bfloat16)
    out = snki.values(snki.load_kernel(str(EX / "rmsnorm.py"), "rmsnorm"), [x])
    x64 = x.astype(np.float64)
    ref = x64 / np.sqrt((x64 ** 2).mean(1, keepdims=True) + 1e-6)
    # bf16 output: half an ulp (2^-8 relative) on top of the fp32 arithmetic
    err = np.abs(out.astype(np.float64) - ref)
    assert np.all(err <= np.abs(ref) * (2.0 ** -8 + 1e-5) + 1e-12)


@pytest.mark.parametrize("name", ["softmax", "rmsnorm"])
def test_example_kernels_are_timed_from_the_cost_table(name: str) -> None:
    rec = snki.record_kernel(str(EX / f"{name}.py"), name, ["bf16[512,2048]"], {},
                             arch="trn2")
    ct = time_program(rec.program, "trn2")
    ins = rec.program.instructions
    per = {Engine.VECTOR: TRN2.tick_hz // TRN2.vector_hz,
           Engine.SCALAR: TRN2.tick_hz // TRN2.scalar_hz}
    engine_ops = [(i, x) for i, x in enumerate(ins) if x.engine in per]
    assert engine_ops
    for i, x in engine_ops:  # one op per instruction here (no ReadOut)
        assert ct.ends[i] - ct.starts[i] == engine_cycles(x, TRN2, x.engine) * per[x.engine]
    assert sum(ct.bound_ticks.values()) == ct.latency


FUNCS = '''
@nki.jit
def k(x):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    m = nl.max(t, axis=[1], keepdims=True)
    s = nl.sum(nl.exp(t), axis=1, keepdims=True)
    mu = nl.mean(t, axis=1, keepdims=True)
    y = nl.multiply(nl.add(nl.sigmoid(t), 1.0), 2.0)
    r = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=r, data=y, op0=nl.subtract, operand0=m, op1=nl.add, operand1=s)
    r2 = nisa.tensor_scalar(r, nl.subtract, mu)
    nl.store(out, value=r2)
    return out
'''


def test_nl_functions_and_reductions_compose(tmp_path: Path) -> None:
    p = write_kernel(tmp_path, FUNCS)
    rng = np.random.default_rng(7)
    x = rng.normal(0, 1, (128, 64)).astype(np.float32)
    out = snki.values(snki.load_kernel(str(p), "k"), [x])
    x64 = x.astype(np.float64)
    y = (1 / (1 + np.exp(-x64)) + 1) * 2
    ref = y - x64.max(1, keepdims=True) + np.exp(x64).sum(1, keepdims=True) \
        - x64.mean(1, keepdims=True)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("body", "match"), [
    ("nisa.activation(dst=t, op=nl.add, data=t)", "activation nl.add is not modelled"),
    ("nisa.activation(dst=t, op=nl.exp, data=t, reduce_res=s, "
     "reduce_cmd=nisa.reduce_cmd.reduce)", "accumulating across instructions"),
    ("nisa.tensor_scalar(dst=t, data=t, op0=nl.add)", "missing argument"),
    ("nisa.tensor_reduce(dst=s, op=nl.add, data=t, axis=0)", "axis 0 is the partition axis"),
    ("nisa.activation(dst=t, op=nl.exp, data=t, bias=t)", r"bias must be one element"),
    ("nisa.activation_reduce(op=nl.exp, data=t, reduce_op=nl.add)", "needs reduce_res"),
])
def test_unsupported_uses_are_one_line_errors(tmp_path: Path, body: str, match: str) -> None:
    src = f'''
@nki.jit
def k(x):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    s = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    {body}
    nisa.dma_copy(dst=out, src=t)
    return out
'''
    p = write_kernel(tmp_path, src)
    with pytest.raises(KernelError, match=match) as exc:
        snki.record_kernel(str(p), "k", ["fp32[128,64]"], {}, arch="trn2")
    assert "\n" not in str(exc.value) and ":" in str(exc.value)


def test_a_lazy_result_is_recorded_after_the_load_it_reads(tmp_path: Path) -> None:
    # m = nl.max(t) made while t = nl.load(x) is still lazy: t's load must come first
    body = '''
@nki.jit
def k(x):
    out = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    m = nl.max(t, axis=[1], keepdims=True)
    neg = nl.multiply(m, -1.0)
    nl.store(out, value=neg)
    return out
'''
    p = write_kernel(tmp_path, body)
    rec = snki.record_kernel(str(p), "k", ["fp32[128,64]"], {}, arch="trn2")
    kinds = [type(i).__name__ for i in rec.program.instructions]
    assert kinds == ["DmaCopy", "TensorReduce", "TensorScalar", "DmaCopy"]
    x = np.random.default_rng(8).normal(0, 1, (128, 64)).astype(np.float32)
    out = snki.values(snki.load_kernel(str(p), "k"), [x])
    np.testing.assert_array_equal(out, -x.max(1, keepdims=True))


OPERATORS = '''
@nki.jit
def k(x, y):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.load(x)
    b = nl.load(y)
    s = nl.sum(a * a, axis=[1], keepdims=True) / 64
    r = nl.rsqrt(s)
    z = (a * r - b) / 2.0 + 1.0
    w = 3.0 - (-z)
    nl.store(out, value=nl.multiply(w, r))
    return out
'''


def test_python_operators_and_column_broadcasting(tmp_path: Path) -> None:
    # a * b (tensor_tensor), t / 64 and 3.0 - t (tensor_scalar, reversed), a * r with r a
    # [P, 1] column (tensor_scalar with a tile operand), -t (activation negative)
    p = write_kernel(tmp_path, OPERATORS)
    rng = np.random.default_rng(9)
    x, y = (rng.normal(0, 1, (128, 64)).astype(np.float32) for _ in range(2))
    out = snki.values(snki.load_kernel(str(p), "k"), [x, y])
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    r = 1 / np.sqrt((x64 * x64).sum(1, keepdims=True) / 64)
    ref = (3 + ((x64 * r - y64) / 2 + 1)) * r
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
    rec = snki.record_kernel(str(p), "k", ["fp32[128,64]", "fp32[128,64]"], {}, arch="trn2")
    kinds = {type(i).__name__ for i in rec.program.instructions}
    assert {"TensorTensor", "TensorScalar", "TensorReduce", "Activation"} <= kinds
    assert any(isinstance(i, TensorScalar) and i.reverse0 for i in rec.program.instructions)
    assert any(isinstance(i, TensorScalar) and i.operand0_ap is not None
               for i in rec.program.instructions)


NORM = '''
@nki.jit
def k(x, g):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ip = nl.arange(128)[:, None]
    i1 = nl.arange(1)[:, None]
    jf = nl.arange(x.shape[1])[None, :]
    g_tile = nl.load(g.reshape((1, g.shape[0]))[i1, jf])
    g_all = g_tile.broadcast_to((128, g.shape[0]))
    for i in nl.affine_range(x.shape[0] // 128):
        t = nl.load(x[i * 128 + ip, jf], mask=(i * 128 + ip < x.shape[0]))
        mean = nl.mean(t, axis=1)
        y = (t - mean) * g_all
        y[...] = nl.multiply(y, 2.0, mask=(i * 128 + ip < x.shape[0]))
        nl.store(out[i * 128 + ip, jf], value=y, mask=(i * 128 + ip < x.shape[0]))
    return out
'''


def test_all_true_masks_and_a_partition_broadcast_of_a_loaded_row(tmp_path: Path) -> None:
    p = write_kernel(tmp_path, NORM)
    rng = np.random.default_rng(10)
    x = rng.normal(0, 1, (256, 96)).astype(np.float32)
    g = rng.normal(0, 1, (96,)).astype(np.float32)
    out = snki.values(snki.load_kernel(str(p), "k"), [x, g])
    x64 = x.astype(np.float64)
    ref = (x64 - x64.mean(1, keepdims=True)) * g * 2
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
    rec = snki.record_kernel(str(p), "k", ["fp32[256,96]", "fp32[96]"], {}, arch="trn2")
    # the broadcast is one DMA whose 128 partitions read the same device-memory row
    bcast = [i for i in rec.program.instructions if isinstance(i, DmaCopy)
             and i.src.space is Space.DRAM and i.dst.partitions == 128
             and i.src.partition_step == 0]
    assert len(bcast) == 1


@pytest.mark.parametrize(("line", "match"), [
    # a masked load stored whole: rows 100.. were never written (tests/test_nki_mask.py)
    ("t = nl.load(x[ip, jf], mask=(ip < 100))", "that nothing wrote"),
    ("t = nl.load(x[ip, jf], mask=1.5)", "mask= must be a comparison"),
    ("t = nl.exp(nl.load(x[ip, jf])).broadcast_to((128, 64))",
     "broadcasts a one-partition tile"),
    ("t = nl.exp(nl.load(x[i1, jf])).broadcast_to((128, 64))",
     "broadcast_to of a tile computed on chip"),
])
def test_masks_and_broadcasts_the_model_cannot_run_are_refused(tmp_path: Path, line: str,
                                                               match: str) -> None:
    src = f'''
@nki.jit
def k(x):
    out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
    ip = nl.arange(128)[:, None]
    i1 = nl.arange(1)[:, None]
    jf = nl.arange(64)[None, :]
    {line}
    nl.store(out, value=t)
    return out
'''
    p = write_kernel(tmp_path, src)
    with pytest.raises(KernelError, match=match):
        snki.record_kernel(str(p), "k", ["fp32[128,64]"], {}, arch="trn2")
