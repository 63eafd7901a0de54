"""``nisa.scalar_tensor_tensor`` (issue 19: flash attention backward's softmax gradient).

(data op0 operand0) op1 operand1 on the Vector engine, operand0 a number or a [P, 1] tile,
operand1 a tile of data's shape (NKI docs, nki.isa.scalar_tensor_tensor). Values against
float64 numpy of the inputs, written out here (not the model's helpers): each operator's
result rounded to fp32 (one IEEE operation of fp32 values computed in float64 and rounded
to fp32 is the correctly rounded fp32 result: 53 >= 2 * 24 + 2), then once to dst's
format. The cost against the 7c165a3e "Estimated instruction cost" worked by hand: N
Vector cycles when data and operand1 are bf16, op0 subtract, op1 multiply and N even, else
2N."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from helpers import kernel_values
from helpers import opcodes as _opcodes
from helpers import record_source as _rec

import systolic.nki as snki
from systolic.arch import get_arch
from systolic.errors import KernelError, VerifyError
from systolic.isa import AccessPattern, AluOp, Engine, Program, Space, TensorCopy
from systolic.isa.asm import format_program, parse_instructions
from systolic.isa.instructions import ScalarTensorTensor, reads, writes
from systolic.timing.core import time_program
from systolic.timing.costs import engine_cycles
from systolic.verify import verify

TRN1, TRN2 = get_arch("trn1"), get_arch("trn2")
F32 = np.float32


@pytest.fixture(autouse=True)
def _hook():
    snki.install("trn2")


def _ap(space: Space, p: int, f: int, dtype: str = "fp32", offset: int = 0) -> AccessPattern:
    return AccessPattern(space, 0, p, offset, ((1, f),), dtype)


def _sb(p: int, f: int, dtype: str = "fp32", offset: int = 0) -> AccessPattern:
    return _ap(Space.SBUF, p, f, dtype, offset)


def _f32(x: np.ndarray) -> np.ndarray:
    """float64 -> the nearest fp32, back as float64 (one fp32 operation's result)."""
    return x.astype(F32).astype(np.float64)


def _bf16(x: np.ndarray) -> np.ndarray:
    """float64 -> float32 -> bfloat16 (nearest even), back as float64."""
    return x.astype(F32).astype(ml_dtypes.bfloat16).astype(np.float64)


# the operators by their numpy meaning, in float64 (inputs are fp32 values)
_OPS = {"subtract": np.subtract, "multiply": np.multiply, "add": np.add,
        "maximum": np.maximum, "divide": np.divide, "minimum": np.minimum}


def _want(x: np.ndarray, c: np.ndarray | float, t: np.ndarray, op0: str, op1: str,
          rev0: bool = False, rev1: bool = False) -> np.ndarray:
    """(x op0 c) op1 t, each operator's result rounded to fp32."""
    a, b = (c, x) if rev0 else (x, c)
    y = _f32(_OPS[op0](a, b))
    a, b = (t, y) if rev1 else (y, t)
    return _f32(_OPS[op1](a, b))


# -- values ---------------------------------------------------------------------------------
OLDER = '''
@nki.jit
def k(x, v, w):
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    c = nl.load(v)
    u = nl.load(w)
    y = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    y[...] = nisa.scalar_tensor_tensor(data=t, op0=np.subtract, operand0=c, op1=np.multiply,
                                       operand1=u)
    nl.store(out, y)
    return out
'''


def test_older_api_tile_operand0_subtract_then_multiply(tmp_path: Path) -> None:
    # the softmax gradient of flash attention backward: (dy - rowsum) * y
    rng = np.random.default_rng(1)
    x = rng.normal(0, 3, (128, 200)).astype(F32)
    v = rng.normal(0, 1, (128, 1)).astype(F32)
    w = rng.normal(0, 1, (128, 200)).astype(F32)
    out = kernel_values(tmp_path, "import numpy as np\n" + OLDER, x, v, w)
    xd, vd, wd = (a.astype(np.float64) for a in (x, v, w))
    np.testing.assert_array_equal(np.asarray(out, np.float64), _f32(_f32(xd - vd) * wd))


CURRENT = '''
@nki.jit
def k(x, w):
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    u = nl.load(w)
    y = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.scalar_tensor_tensor(y, t, nl.OP0, 0.75, nl.OP1, u, REV0, REV1)
    nl.store(out, y)
    return out
'''


@pytest.mark.parametrize(("op0", "op1"), [("subtract", "multiply"), ("add", "maximum"),
                                          ("multiply", "subtract"), ("divide", "add"),
                                          ("subtract", "minimum")])
@pytest.mark.parametrize(("rev0", "rev1"), [(False, False), (True, False), (False, True),
                                            (True, True)])
def test_current_api_constant_operand0_and_the_reverse_flags(tmp_path: Path, op0: str,
                                                             op1: str, rev0: bool,
                                                             rev1: bool) -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(0, 2, (64, 96)).astype(F32)
    w = rng.normal(0, 2, (64, 96)).astype(F32)
    body = (CURRENT.replace("OP0", op0).replace("OP1", op1)
            .replace("REV0", str(rev0)).replace("REV1", str(rev1)))
    out = kernel_values(tmp_path, body, x, w)
    want = _want(x.astype(np.float64), 0.75, w.astype(np.float64), op0, op1, rev0, rev1)
    np.testing.assert_array_equal(np.asarray(out, np.float64), want)


BF16 = '''
@nki.jit
def k(x, v, w):
    out = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    t = nl.load(x)
    c = nl.load(v)
    u = nl.load(w)
    y = nisa.scalar_tensor_tensor(data=t, op0=nl.subtract, operand0=c, op1=nl.multiply,
                                  operand1=u, reverse1=True)
    nl.store(out, y)
    return out
'''


def test_bf16_inputs_give_a_bf16_tile_rounded_once(tmp_path: Path) -> None:
    # the older API's result takes data's dtype (bf16); the fp32 result is rounded once
    rng = np.random.default_rng(3)
    x = rng.normal(0, 4, (128, 64)).astype(ml_dtypes.bfloat16)
    v = rng.normal(0, 1, (128, 1)).astype(F32)
    w = rng.normal(0, 1, (128, 64)).astype(ml_dtypes.bfloat16)
    out = kernel_values(tmp_path, BF16, x, v, w)
    assert np.asarray(out).dtype == ml_dtypes.bfloat16
    xd, vd, wd = (np.asarray(a, np.float64) for a in (x, v, w))
    want = _bf16(_f32(wd * _f32(xd - vd)))
    np.testing.assert_array_equal(np.asarray(out, np.float64), want)


DTYPE = '''
@nki.jit
def k(x, w):
    out = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    t = nl.load(x)
    u = nl.load(w)
    y = nisa.scalar_tensor_tensor(data=t, op0=nl.multiply, operand0=np.float32(1.5),
                                  op1=nl.add, operand1=u, dtype=nl.bfloat16)
    nl.store(out, y)
    return out
'''


def test_fp32_inputs_into_a_bf16_output(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    x = rng.normal(0, 1, (32, 128)).astype(F32)
    w = rng.normal(0, 1, (32, 128)).astype(F32)
    out = kernel_values(tmp_path, "import numpy as np\n" + DTYPE, x, w)
    xd, wd = x.astype(np.float64), w.astype(np.float64)
    np.testing.assert_array_equal(np.asarray(out, np.float64),
                                  _bf16(_f32(_f32(xd * 1.5) + wd)))


MASKED = '''
@nki.jit
def k(x, w):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:128, 0:64]
    t = nl.load(x)
    u = nl.load(w)
    y = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=y, value=7.0)
    y[ip, jf] = nisa.scalar_tensor_tensor(data=t[ip, jf], op0=nl.add, operand0=1.0,
                                          op1=nl.multiply, operand1=u[ip, jf],
                                          mask=(ip < 100) & (jf < 48))
    nl.store(out, y)
    return out
'''


def test_a_partial_mask_computes_only_its_rectangle(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    x = rng.normal(0, 1, (128, 64)).astype(F32)
    w = rng.normal(0, 1, (128, 64)).astype(F32)
    out = kernel_values(tmp_path, MASKED, x, w)
    xd, wd = x.astype(np.float64), w.astype(np.float64)
    want = np.full((128, 64), 7.0)
    want[:100, :48] = _f32(_f32(xd[:100, :48] + 1.0) * wd[:100, :48])
    np.testing.assert_array_equal(np.asarray(out, np.float64), want)
    rec = _rec(tmp_path, MASKED, ["fp32[128,64]", "fp32[128,64]"])
    stt = [i for i in rec.program if isinstance(i, ScalarTensorTensor)]
    assert len(stt) == 1
    assert all((ap.partitions, ap.free_elems) == (100, 48)
               for ap in (stt[0].data, stt[0].operand1, stt[0].dst))


# -- the instruction: one Vector instruction, its cost, its accesses, verify, text ------------
def test_one_vector_instruction_reading_all_three_operands(tmp_path: Path) -> None:
    rec = _rec(tmp_path, "import numpy as np\n" + OLDER,
               ["fp32[128,200]", "fp32[128,1]", "fp32[128,200]"])
    assert _opcodes(rec) == ["DmaCopy"] * 3 + ["ScalarTensorTensor", "DmaCopy"]
    ins = rec.program[3]
    assert (ins.op0, ins.op1, ins.engine) == (AluOp.SUBTRACT, AluOp.MULTIPLY, Engine.VECTOR)
    assert ins.operand0_ap is not None and ins.operand0_ap.free_elems == 1
    # the dependency tracker and the whole-core timing read ACCESS: operand1 is a read
    assert set(reads(ins)) == {ins.data, ins.operand0_ap, ins.operand1}
    assert writes(ins) == (ins.dst,)
    # fp32: 2N Vector cycles, N = 200
    assert engine_cycles(ins, TRN2) == 400


def _stt(n: int, dtype: str = "bf16", op0: AluOp = AluOp.SUBTRACT,
         op1: AluOp = AluOp.MULTIPLY, t_dtype: str | None = None) -> ScalarTensorTensor:
    return ScalarTensorTensor(_sb(128, n, dtype), _sb(128, n, t_dtype or dtype, 8192),
                              _sb(128, n, dtype, 16384), op0, 0.5, None, op1)


@pytest.mark.parametrize(("ins", "cycles"), [
    (_stt(512), 512),  # bf16, subtract then multiply, N even: N
    (_stt(2), 2),  # no MIN_II floor: the formula prints none
    (_stt(511), 1022),  # N odd: 2N
    (_stt(512, "fp32"), 1024),  # fp32: 2N
    (_stt(512, t_dtype="fp32"), 1024),  # operand1 not bf16: 2N
    (_stt(512, op0=AluOp.ADD), 1024),  # op0 not subtract: 2N
    (_stt(512, op1=AluOp.ADD), 1024),  # op1 not multiply: 2N
    (_stt(512, op0=AluOp.MULTIPLY, op1=AluOp.SUBTRACT), 1024),  # the pair swapped: 2N
])
def test_cost_is_the_documented_formula(ins: ScalarTensorTensor, cycles: int) -> None:
    # nki.isa.scalar_tensor_tensor (aws-neuron-sdk 7c165a3e): N "data and operand1 are both
    # bfloat16, op0=nl.subtract and op1=nl.multiply, and N is even", 2*N otherwise
    assert engine_cycles(ins, TRN2) == cycles
    assert engine_cycles(ins, TRN1) == cycles  # no generation's perf mode enters


def test_whole_core_timing_waits_for_the_operand1_write() -> None:
    a, b, c, d = (_sb(128, 256, offset=o) for o in (0, 4096, 8192, 12288))
    # a Scalar-engine copy writes b; the instruction reads b as operand1
    made = Program([TensorCopy(a, b, Engine.SCALAR),
                    ScalarTensorTensor(a, b, d, AluOp.SUBTRACT, 1.0, None, AluOp.MULTIPLY)])
    ct = time_program(made, TRN2)
    assert ct.starts[1] >= ct.ends[0]
    # the same with an operand1 nothing before it writes: no wait
    free = Program([TensorCopy(a, b, Engine.SCALAR),
                    ScalarTensorTensor(a, c, d, AluOp.SUBTRACT, 1.0, None, AluOp.MULTIPLY)])
    assert time_program(free, TRN2).starts[1] < ct.ends[0]


def test_verify_and_the_text_form() -> None:
    psum = _ap(Space.PSUM, 128, 64)
    good = ScalarTensorTensor(_sb(128, 64), _sb(128, 64, offset=4096),
                              _sb(128, 64, offset=8192), AluOp.DIVIDE, 0.0,
                              _sb(128, 1, offset=12288), AluOp.ADD, True, True)
    verify(Program([good]), "trn2")
    text = format_program([good])
    assert text.startswith("ScalarTensorTensor data=") and "operand0_ap=" in text
    assert parse_instructions(text) == (good,)
    both = ScalarTensorTensor(psum, _ap(Space.PSUM, 128, 64, offset=4096), _sb(128, 64),
                              AluOp.SUBTRACT, 1.0)
    with pytest.raises(VerifyError, match="cannot both be in PSUM"):
        verify(Program([both]), "trn2")
    wide = ScalarTensorTensor(_sb(128, 64), _sb(128, 64, offset=4096),
                              _sb(128, 64, offset=8192), AluOp.SUBTRACT, 0.0,
                              _sb(128, 2, offset=12288))
    with pytest.raises(VerifyError, match=r"operand0 must be \[128, 1\]"):
        verify(Program([wide]), "trn2")
    short = ScalarTensorTensor(_sb(128, 64), _sb(128, 32, offset=4096),
                               _sb(128, 64, offset=8192))
    with pytest.raises(VerifyError, match="moves 4096 elements into 8192"):
        verify(Program([short]), "trn2")
    scalar = ScalarTensorTensor(_sb(128, 64), _sb(128, 64, offset=4096),
                                _sb(128, 64, offset=8192), engine=Engine.SCALAR)
    with pytest.raises(VerifyError, match="runs on the vector engine"):
        verify(Program([scalar]), "trn2")


# -- refusals, one line each ------------------------------------------------------------------
@pytest.mark.parametrize(("call", "match"), [
    ("nisa.scalar_tensor_tensor(data=t, op0=nl.subtract, operand0=1.0, op1=nl.multiply)",
     r"scalar_tensor_tensor: missing argument\(s\) operand1"),
    ("nisa.scalar_tensor_tensor(data=p, op0=nl.subtract, operand0=1.0, op1=nl.multiply, "
     "operand1=q)", "data and operand1 cannot both be in PSUM"),
    ("nisa.scalar_tensor_tensor(data=t, op0=nl.subtract, operand0=1.0, op1=nl.multiply, "
     "operand1=2.0)", "operand1 must be a tile of data's shape"),
    ("nisa.scalar_tensor_tensor(data=t, op0=nl.subtract, operand0=t, op1=nl.multiply, "
     "operand1=t)", r"operand0 must be one element on each of the 128 partitions"),
    ("nisa.scalar_tensor_tensor(data=t, op0=nl.subtract, operand0=1.0, op1=nl.multiply, "
     "operand1=t[:, 0:32])", "do not match"),
    ("nisa.scalar_tensor_tensor(data=t, op0=nl.subtract, operand0=1.0, op1=nl.multiply, "
     "operand1=t, engine=nisa.engine.gpsimd)", "runs on the Vector engine"),
    ("nisa.scalar_tensor_tensor(data=t, op0=nl.subtract, operand0=1.0, op1=nl.multiply, "
     "operand1=t, reduce_op=nl.add, reduce_res=r)", "reduce_res not modelled"),
])
def test_bad_calls_are_one_line(tmp_path: Path, call: str, match: str) -> None:
    body = f'''
@nki.jit
def k(x):
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    p = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.psum)
    q = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.psum)
    nisa.memset(dst=p, value=0.0)
    nisa.memset(dst=q, value=0.0)
    r = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    y = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    y[...] = {call}
    nl.store(out, y)
    return out
'''
    with pytest.raises(KernelError, match=match) as info:
        _rec(tmp_path, body, ["fp32[128,64]"])
    assert "\n" not in str(info.value)


# -- nl.loop_reduce: the next call flash attention backward makes ----------------------------
LOOP = '''
@nki.jit
def k(x):
    out = nl.ndarray((x.shape[1], x.shape[2]), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.zeros((x.shape[1], x.shape[2]), dtype=nl.float32, buffer=nl.sbuf)
    for i in nl.affine_range(x.shape[0]):
        t = nl.load(x[i])
        acc[:, :] = nl.loop_reduce(t, op=np.OP, loop_indices=(i,), dtype=nl.float32)
    nl.store(out, acc)
    return out
'''


@pytest.mark.parametrize("op", ["add", "maximum"])
def test_loop_reduce_is_a_tensor_tensor_into_its_destination(tmp_path: Path, op: str) -> None:
    # nki.language.loop_reduce: b = loop_reduce(a, op) "is the same as" b = tensor_tensor(b,
    # a, op), b the destination (here zeros)
    x = np.random.default_rng(6).normal(0, 1, (3, 64, 32)).astype(np.float32).astype(
        ml_dtypes.bfloat16)
    body = "import numpy as np\n" + LOOP.replace("OP", op)
    out = kernel_values(tmp_path, body, x)
    xd = np.asarray(x, np.float64)
    want = np.zeros((64, 32))
    for i in range(3):  # one fp32 operation per step
        want = _f32(_OPS[op](want, xd[i]))
    np.testing.assert_array_equal(np.asarray(out, np.float64), want)
    rec = _rec(tmp_path, body, ["bf16[3,64,32]"])
    tts = [i for i in rec.program if type(i).__name__ == "TensorTensor"]
    assert len(tts) == 3 and all(t.a == t.dst and t.op is AluOp(op) for t in tts)


@pytest.mark.parametrize(("line", "match"), [
    ("acc[:, :] = nl.loop_reduce(t, op=np.subtract, loop_indices=(i,))",
     "this model reduces with np.add"),
    ("b = nl.loop_reduce(t, op=np.add, loop_indices=(i,))\n        acc[:, :] = b + 1.0",
     "reduces into the tile its result is assigned to"),
])
def test_loop_reduce_refusals_are_one_line(tmp_path: Path, line: str, match: str) -> None:
    body = "import numpy as np\n" + LOOP.replace(
        "acc[:, :] = nl.loop_reduce(t, op=np.OP, loop_indices=(i,), dtype=nl.float32)", line)
    with pytest.raises(KernelError, match=match) as info:
        _rec(tmp_path, body, ["fp32[2,64,32]"])
    assert "\n" not in str(info.value)


# -- tensor_reduce over axis 1 of an on-chip [P] tile: the sink gradient's row sum ------------
COLUMN = '''
@nki.jit
def k(x):
    out = nl.ndarray((x.shape[0],), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    row = nisa.tensor_reduce(np.max, t, axis=(1,))
    col = nl.multiply(row, -2.0)
    nl.store(out, nisa.tensor_reduce(np.max, data=col, axis=(1,), dtype=nl.float32))
    return out
'''


def test_a_p_tile_reduces_its_one_free_axis_as_the_p_by_1_tile_it_is(tmp_path: Path) -> None:
    # an on-chip [P] tile lies in memory as [P, 1] (nki/tensor.py): axis 1 is its one free
    # element, so the reduction is that element (flash attention backward, with sinks)
    x = np.random.default_rng(7).normal(0, 1, (128, 40)).astype(np.float32)
    out = kernel_values(tmp_path, "import numpy as np\n" + COLUMN, x)
    np.testing.assert_array_equal(out, x.max(axis=1) * np.float32(-2.0))
    with pytest.raises(KernelError, match=r"over axis \(2,\): a 2-d tile"):
        _rec(tmp_path, "import numpy as np\n" + COLUMN.replace("data=col, axis=(1,)",
                                                               "data=col, axis=(2,)"),
             ["fp32[128,40]"])
