"""``nisa.tensor_scalar_reduce`` and ``nl.floor`` (issue 19: two operations the public
kernels use). Values against float64 numpy of the rounded inputs, written out here (not the
model's helpers); the cost against the nki.isa "Estimated instruction cost" formula
(``max(MIN_II, N) + MIN_II`` Vector cycles, MIN_II 64) worked by hand; the reduce result
through the verifier and the text form."""

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
from systolic.isa import AccessPattern, AluOp, Engine, Program, Space, TensorScalar
from systolic.isa.asm import format_program, parse_instructions
from systolic.timing.costs import engine_cycles
from systolic.verify import verify

TRN1, TRN2 = get_arch("trn1"), get_arch("trn2")
U32 = 2.0 ** -24  # fp32 unit roundoff


@pytest.fixture(autouse=True)
def _hook():
    snki.install("trn2")


def _sb(p: int, f: int, dtype: str = "fp32", offset: int = 0) -> AccessPattern:
    return AccessPattern(Space.SBUF, 0, p, offset, ((1, f),), dtype)


def _bf16(x: np.ndarray) -> np.ndarray:
    """float64 -> float32 -> bfloat16 (nearest even), back as float64."""
    return x.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)


# -- values ---------------------------------------------------------------------------------
OLDER = '''
@nki.jit
def k(x):
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    red = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    r = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    y = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    y[...] = nisa.tensor_scalar_reduce(data=t, op0=np.multiply, operand0=1.5,
                                       reduce_op=np.max, reduce_res=r)
    nl.store(out, y)
    nl.store(red, r)
    return out, red
'''


def test_older_api_constant_operand_and_max(tmp_path: Path) -> None:
    x = np.random.default_rng(1).normal(0, 3, (128, 200)).astype(np.float32)
    out, red = kernel_values(tmp_path, "import numpy as np\n" + OLDER, x)
    want = x.astype(np.float64) * 1.5  # one fp32 product: correctly rounded
    np.testing.assert_array_equal(out, want.astype(np.float32))
    np.testing.assert_array_equal(red[:, 0], want.astype(np.float32).max(axis=1))


CURRENT = '''
@nki.jit
def k(x, v):
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    red = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    c = nl.load(v)
    r = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    y = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_reduce(dst=y, data=t, op0=nl.subtract, operand0=c, REV
                              reduce_op=nl.add, reduce_res=r)
    nl.store(out, y)
    nl.store(red, r)
    return out, red
'''


@pytest.mark.parametrize("reverse", [False, True])
def test_current_api_tile_operand_reverse_and_add(tmp_path: Path, reverse: bool) -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(0, 1, (96, 300)).astype(np.float32)
    v = rng.normal(0, 1, (96, 1)).astype(np.float32)
    body = CURRENT.replace("REV", "reverse0=True," if reverse else "")
    out, red = kernel_values(tmp_path, body, x, v)
    xd, vd = x.astype(np.float64), v.astype(np.float64)
    exact = vd - xd if reverse else xd - vd
    y32 = exact.astype(np.float32)  # one fp32 subtraction: correctly rounded
    np.testing.assert_array_equal(out, y32)
    # the sum of 300 fp32 results in fp32, any order: within 299 u sum |y| of the exact sum
    # of those results (Higham 4.2)
    ref = y32.astype(np.float64).sum(axis=1)
    bound = 299 * U32 * np.abs(y32.astype(np.float64)).sum(axis=1)
    assert np.all(np.abs(red[:, 0] - ref) <= bound)


BF16 = '''
@nki.jit
def k(x):
    out = nl.ndarray(x.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    red = nl.ndarray((x.shape[0], 1), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    t = nl.load(x)
    r = nl.ndarray((x.shape[0], 1), dtype=nl.bfloat16, buffer=nl.sbuf)
    y = nisa.tensor_scalar_reduce(data=t, op0=nl.add, operand0=0.3, reduce_op=nl.max,
                                  reduce_res=r, dtype=nl.bfloat16)
    nl.store(out, y)
    nl.store(red, r)
    return out, red
'''


def test_bf16_output_is_the_fp32_result_rounded_once(tmp_path: Path) -> None:
    x = np.random.default_rng(3).normal(0, 4, (64, 128)).astype(np.float32)
    out, red = kernel_values(tmp_path, BF16, x)
    # fp32 add of x and the fp32 constant 0.3, rounded once to bf16
    y32 = (x.astype(np.float64) + np.float64(np.float32(0.3))).astype(np.float32)
    want = _bf16(y32.astype(np.float64))
    np.testing.assert_array_equal(np.asarray(out, np.float64), want)
    # the maximum of the fp32 results rounded to bf16 (rounding is monotone: the same as
    # the maximum of the rounded results)
    np.testing.assert_array_equal(np.asarray(red[:, 0], np.float64),
                                  _bf16(y32.astype(np.float64).max(axis=1)))


MASKED = '''
@nki.jit
def k(x):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    red = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    ip, jf = nl.mgrid[0:128, 0:64]
    iq, jq = nl.mgrid[0:128, 0:1]
    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    r = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    y = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=t, value=0.0)
    nisa.memset(dst=r, value=-1.0)
    nisa.memset(dst=y, value=7.0)
    t[ip, jf] = nl.load(x[ip, jf], mask=(ip < 100))
    y[ip, jf] = nisa.tensor_scalar_reduce(data=t[ip, jf], op0=nl.multiply, operand0=-2.0,
                                          reduce_op=nl.min, reduce_res=r[iq, jq],
                                          mask=(ip < 100))
    nl.store(out, y)
    nl.store(red, r)
    return out, red
'''


def test_a_row_mask_leaves_the_other_partitions_alone(tmp_path: Path) -> None:
    x = np.random.default_rng(4).normal(0, 1, (128, 64)).astype(np.float32)
    out, red = kernel_values(tmp_path, MASKED, x)
    want = (x[:100].astype(np.float64) * -2.0).astype(np.float32)  # exact: times a power of 2
    np.testing.assert_array_equal(out[:100], want)
    np.testing.assert_array_equal(red[:100, 0], want.min(axis=1))
    np.testing.assert_array_equal(out[100:], np.full((28, 64), 7.0, np.float32))
    np.testing.assert_array_equal(red[100:, 0], np.full(28, -1.0, np.float32))
    rec = _rec(tmp_path, MASKED, ["fp32[128,64]"])
    ts = [i for i in rec.program if isinstance(i, TensorScalar) and i.acc is not None]
    assert len(ts) == 1 and ts[0].src.partitions == ts[0].acc.partitions == 100


# -- the instruction: cost, verify, text form -----------------------------------------------
def _recorded_reduce(tmp_path: Path) -> TensorScalar:
    rec = _rec(tmp_path, "import numpy as np\n" + OLDER, ["fp32[128,200]"])
    ts = [i for i in rec.program if isinstance(i, TensorScalar)]
    assert len(ts) == 1 and ts[0].acc is not None and ts[0].acc_op is AluOp.MAXIMUM
    assert ts[0].engine is Engine.VECTOR and ts[0].op1 is None
    return ts[0]


def test_one_vector_instruction_at_the_documented_cost(tmp_path: Path) -> None:
    ins = _recorded_reduce(tmp_path)
    # nki.isa.tensor_scalar_reduce: max(MIN_II, N) + MIN_II Vector cycles; N = 200, MIN_II 64
    assert engine_cycles(ins, TRN2) == 200 + 64
    # a small tile: max(64, 10) + 64
    small = TensorScalar(_sb(128, 10), _sb(128, 10, offset=4096), AluOp.ADD, 1.0,
                         acc=_sb(128, 1, offset=8192), acc_op=AluOp.ADD)
    assert engine_cycles(small, TRN1) == 64 + 64
    # bf16 in SBUF: tensor_scalar's trn2 perf mode (4x) would give 256; the reduce's formula
    # names none
    bf = TensorScalar(_sb(128, 1024, "bf16"), _sb(128, 1024, "bf16", 4096), AluOp.ADD, 1.0,
                      acc=_sb(128, 1, offset=8192), acc_op=AluOp.MAXIMUM)
    assert engine_cycles(bf, TRN2) == 1024 + 64
    text = format_program([bf])
    assert "acc=" in text and "acc_op=maximum" in text
    assert parse_instructions(text) == (bf,)


def test_verify_checks_the_reduce_result() -> None:
    wide = TensorScalar(_sb(128, 64), _sb(128, 64, offset=4096), AluOp.ADD, 1.0,
                        acc=_sb(128, 2, offset=8192))
    with pytest.raises(VerifyError, match="acc must be one element"):
        verify(Program([wide]), "trn2")
    scalar = TensorScalar(_sb(128, 64), _sb(128, 64, offset=4096), AluOp.ADD, 1.0,
                          engine=Engine.SCALAR, acc=_sb(128, 1, offset=8192))
    with pytest.raises(VerifyError, match="runs on the Vector engine"):
        verify(Program([scalar]), "trn2")


@pytest.mark.parametrize(("call", "match"), [
    ("nisa.tensor_scalar_reduce(data=t, op0=nl.add, operand0=1.0, reduce_res=r)",
     "missing argument"),
    ("nisa.tensor_scalar_reduce(data=t, op0=nl.add, operand0=1.0, reduce_op=nl.add, "
     "reduce_res=t)", r"reduce_res must be one element"),
    ("nisa.tensor_scalar_reduce(data=t, op0=nl.add, operand0=1.0, reduce_op=nl.divide, "
     "reduce_res=r)", "not one of nl.add"),
    ("nisa.tensor_scalar_reduce(dst=t, data=t, op0=nl.add, operand0=1.0, reduce_op=nl.add, "
     "reduce_res=r, reduce_cmd=nisa.reduce_cmd.reduce)", "accumulating across"),
])
def test_bad_calls_are_one_line(tmp_path: Path, call: str, match: str) -> None:
    body = f'''
@nki.jit
def k(x):
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    r = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    y = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    y[...] = {call}
    nl.store(out, y)
    return out
'''
    with pytest.raises(KernelError, match=match):
        _rec(tmp_path, body, ["fp32[128,64]"])


# -- nl.floor ---------------------------------------------------------------------------------
FLOOR = '''
@nki.jit
def k(x):
    f = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    i = nl.ndarray(x.shape, dtype=nl.int32, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(f, nl.floor(t))
    nl.store(i, nl.floor(nl.multiply(t, 3.0), dtype=nl.int32))
    return f, i
'''


def test_floor_of_negative_positive_and_fractional_values(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    x = rng.uniform(-50, 50, (32, 64)).astype(np.float32)
    x[0, :12] = [-3.2, -3.0, -0.5, -1e-8, -0.0, 0.0, 1e-8, 0.5, 2.9999998, 3.0, 3.7,
                 -2.5e7]
    x[1, :4] = [8388607.5, -8388607.5, 1e30, -1e30]
    f, i = kernel_values(tmp_path, FLOOR, x)
    # the largest integer <= x, exactly (every fp32 integer is an fp32 value)
    want = np.floor(x.astype(np.float64))
    np.testing.assert_array_equal(np.asarray(f, np.float64), want)
    assert np.signbit(f[0, 4]) and not np.signbit(f[0, 5])  # floor(-0.0) is -0.0
    # x * 3 rounded to fp32 once, then its floor, as an int32 (the values fit)
    x3 = (x.astype(np.float64) * 3.0).astype(np.float32).astype(np.float64)
    keep = np.abs(x3) < 2.0 ** 31
    assert i.dtype == np.int32
    np.testing.assert_array_equal(i[keep], np.floor(x3[keep]).astype(np.int32))


def test_floor_is_two_vector_operators(tmp_path: Path) -> None:
    body = '''
@nki.jit
def k(x):
    f = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(f, nl.floor(nl.load(x)))
    return f
'''
    rec = _rec(tmp_path, body, ["fp32[16,32]"])
    assert _opcodes(rec) == ["DmaCopy", "TensorScalar", "TensorTensor", "DmaCopy"]
    ts = rec.program[1]
    assert (ts.op0, ts.operand0, ts.engine) == (AluOp.MOD, 1.0, Engine.VECTOR)
    assert (rec.program[2].op, rec.program[2].engine) == (AluOp.SUBTRACT, Engine.VECTOR)
    with pytest.raises(KernelError, match=r"nl\.floor: argument"):
        _rec(tmp_path, body.replace("nl.floor(nl.load(x))", "nl.floor(nl.load(x), axis=1)"),
             ["fp32[16,32]"])
