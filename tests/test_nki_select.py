"""Issue 19, second part: affine_select, range_select, select_reduce, tensor_copy_predicated,
nl.where and the comparisons / mod, tensor_partition_reduce, max8, nc_find_index8,
nc_match_replace8, nc_stream_shuffle, local_gather, sequence_bounds, nl.rand / dropout, and
SPMD launches on several NeuronCores. Values against float64 numpy (or an independent
loop) with the bound each test states; costs against the nki.isa "Estimated instruction
cost" formulas worked by hand; every new instruction through the text form."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import kernel_values, write_kernel
from helpers import opcodes as _opcodes
from helpers import record_source as _rec

import systolic.nki as snki
from systolic.arch import get_arch
from systolic.errors import KernelError, VerifyError
from systolic.isa import AccessPattern, AluOp, Program, Space
from systolic.isa import instructions as I
from systolic.isa.asm import format_program, parse_instructions
from systolic.isa.fields import ReduceCmd
from systolic.nki.spmd import core_of, nc, spmd_dim
from systolic.nki.timing import time_cores, time_recorded
from systolic.sim.functional import FunctionalSimulator
from systolic.timing.core import time_program
from systolic.timing.costs import engine_cycles
from systolic.verify import verify

TRN2 = get_arch("trn2")
FP32_MIN = float(np.finfo(np.float32).min)
U32 = 2.0 ** -24  # fp32 unit roundoff


@pytest.fixture(autouse=True)
def _hook():
    snki.install("trn2")


def _sb(p: int, f: int, dtype: str = "fp32", offset: int = 0, part: int = 0
        ) -> AccessPattern:
    return AccessPattern(Space.SBUF, part, p, offset, ((1, f),), dtype)


# -- affine_select -------------------------------------------------------------------------
AFFINE = '''
@nki.jit
def k(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ix, iy = nl.mgrid[0:128, 0:256]
    for t in nl.affine_range(2):
        x = nl.load(a[t * 128 + ix, iy])
        y = nisa.affine_select(pred=(t * 128 + ix >= iy), on_true_tile=x[ix, iy],
                               on_false_value=nl.fp32.min)
        nl.store(out[t * 128 + ix, iy], y)
    return out
'''


def test_affine_select_is_a_causal_mask(tmp_path) -> None:
    a = np.random.default_rng(1).normal(0, 1, (256, 256)).astype(np.float32)
    out = kernel_values(tmp_path, AFFINE, a)
    r, c = np.indices(a.shape)
    np.testing.assert_array_equal(out, np.where(r >= c, a, FP32_MIN))  # values are copied
    rec = _rec(tmp_path, AFFINE, ["fp32[256,256]"])
    sel = [i for i in rec.program if isinstance(i, I.AffineSelect)]
    assert [(i.base, i.partition_step, i.free_step, i.cmp) for i in sel] == [
        (0, 1, -1, AluOp.GREATER_EQUAL), (128, 1, -1, AluOp.GREATER_EQUAL)]
    # nki.isa.affine_select: GPSIMD_START (150) + N GpSimd cycles
    assert engine_cycles(sel[0], TRN2) == 150 + 256


def test_affine_select_reads_psum_through_sbuf_and_refuses_two_clauses(tmp_path) -> None:
    body = AFFINE.replace("x[ix, iy],", "xp,").replace(
        "x = nl.load(a[t * 128 + ix, iy])", (
            "x = nl.load(a[t * 128 + ix, iy])\n"
            "        xp = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.psum)\n"
            "        nisa.tensor_copy(dst=xp, src=x)"))
    a = np.random.default_rng(12).normal(0, 1, (256, 256)).astype(np.float32)
    r, c = np.indices(a.shape)
    np.testing.assert_array_equal(kernel_values(tmp_path, body, a), np.where(r >= c, a, FP32_MIN))
    ops = _opcodes(_rec(tmp_path, body, ["fp32[256,256]"]))
    # GpSimd cannot read PSUM: a Vector copy stages the tile in SBUF first
    assert ops[:5] == ["DmaCopy", "TensorCopy", "TensorCopy", "AffineSelect", "DmaCopy"]
    bad = AFFINE.replace("pred=(t * 128 + ix >= iy)", "pred=(ix >= iy) & (ix < 64)")
    with pytest.raises(KernelError, match="one comparison"):
        _rec(tmp_path, bad, ["fp32[256,256]"])


# -- range_select: the accumulation register across instructions --------------------------
RANGE = '''
@nki.jit
def k(x, b0, b1):
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    red = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    lo = nl.load(b0)
    hi = nl.load(b1)
    r = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    s = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    s[...] = nisa.range_select(on_true_tile=t, comp_op0=np.greater_equal, comp_op1=np.less,
                               bound0=lo, bound1=hi, reduce_cmd=nisa.reduce_cmd.reset_reduce,
                               reduce_op=np.max, range_start=10)
    t2 = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    t2[...] = nl.add(t, 1.0)
    s[...] = nisa.range_select(on_true_tile=t2, comp_op0=np.greater_equal, comp_op1=np.less,
                               bound0=lo, bound1=hi, reduce_cmd=nisa.reduce_cmd.reduce,
                               reduce_res=r, reduce_op=np.max, range_start=-40)
    nl.store(out, s)
    nl.store(red, r)
    return out, red
'''


def test_range_select_accumulates_across_instructions(tmp_path) -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(0, 1, (64, 96)).astype(np.float32)
    b0 = rng.integers(0, 40, (64, 1)).astype(np.float32)
    b1 = b0 + rng.integers(1, 40, (64, 1)).astype(np.float32)
    out, red = kernel_values(tmp_path, "import numpy as np\n" + RANGE, x, b0, b1)
    j = np.arange(96)[None, :]
    first = np.where((j + 10 >= b0) & (j + 10 < b1), x, FP32_MIN)
    x2 = (x.astype(np.float64) + 1).astype(np.float32)  # one fp32 add: correctly rounded
    second = np.where((j - 40 >= b0) & (j - 40 < b1), x2, FP32_MIN)
    np.testing.assert_array_equal(out, second)
    np.testing.assert_array_equal(red[:, 0], np.maximum(first.max(1), second.max(1)))
    rec = _rec(tmp_path, "import numpy as np\n" + RANGE, ["fp32[64,96]", "fp32[64,1]",
                                                          "fp32[64,1]"])
    rs = [i for i in rec.program if isinstance(i, I.RangeSelect)]
    assert [i.reduce_cmd for i in rs] == [ReduceCmd.RESET_REDUCE, ReduceCmd.REDUCE]
    assert engine_cycles(rs[0], TRN2) == 96  # max(MIN_II, N), N = 96
    with pytest.raises(KernelError, match="NeuronCore-v3"):
        _rec(tmp_path, "import numpy as np\n" + RANGE, ["fp32[64,96]", "fp32[64,1]",
                                                        "fp32[64,1]"], arch="trn1")


# -- select_reduce, nl.where, tensor_copy_predicated, comparisons ---------------------------
SELECT = '''
@nki.jit
def k(p, x, f):
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    red = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    w = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    pt = nl.load(p)
    xt = nl.load(x)
    ft = nl.load(f)
    d = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    r = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.select_reduce(dst=d, predicate=pt, on_true=xt, on_false=ft, reverse_pred=True,
                       reduce_cmd=nisa.reduce_cmd.reset_reduce, reduce_res=r, reduce_op=nl.max)
    nl.store(out, d)
    nl.store(red, r)
    g = nl.greater(xt, 0.5)
    nl.store(w, nl.where(g, xt, -2.0))
    return out, red, w
'''


def test_select_reduce_and_where(tmp_path) -> None:
    rng = np.random.default_rng(3)
    p = rng.integers(0, 2, (32, 40)).astype(np.uint8)
    x = rng.normal(0, 1, (32, 40)).astype(np.float32)
    f = rng.normal(0, 1, (32, 1)).astype(np.float32)
    out, red, w = kernel_values(tmp_path, SELECT, p, x, f)
    ref = np.where(p == 0, x, f)  # reverse_pred: on_true where the predicate is 0
    np.testing.assert_array_equal(out, ref)
    np.testing.assert_array_equal(red[:, 0], ref.max(1))
    np.testing.assert_array_equal(w, np.where(x > 0.5, x, -2.0).astype(np.float32))


def test_comparisons_and_mod_are_alu_ops(tmp_path) -> None:
    body = '''
@nki.jit
def k(a, b):
    e = nl.ndarray(a.shape, dtype=nl.uint8, buffer=nl.shared_hbm)
    m = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    y = nl.load(b)
    nl.store(e, nl.less_equal(x, y))
    nl.store(m, nl.mod(x, y))
    return e, m
'''
    rng = np.random.default_rng(4)
    a = rng.integers(-20, 20, (16, 24)).astype(np.float32)
    b = (rng.integers(1, 7, (16, 24)) * rng.choice([-1, 1], (16, 24))).astype(np.float32)
    e, m = kernel_values(tmp_path, body, a, b)
    np.testing.assert_array_equal(e, (a <= b).astype(np.uint8))
    np.testing.assert_array_equal(m, np.mod(a.astype(np.float64), b))  # Python's x % y


def test_tensor_copy_predicated_keeps_dst_elsewhere(tmp_path) -> None:
    body = '''
@nki.jit
def k(p, x, y):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    pt = nl.load(p)
    xt = nl.load(x)
    d = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    d[...] = nl.load(y)
    nisa.tensor_copy_predicated(src=xt, dst=d, predicate=pt)
    nl.store(out, d)
    return out
'''
    rng = np.random.default_rng(5)
    x, y = (rng.normal(0, 1, (128, 64)).astype(np.float32) for _ in range(2))
    p = x <= 0.2  # a bool array, as the vendor's test passes
    np.testing.assert_array_equal(kernel_values(tmp_path, body, p, x, y), np.where(p, x, y))
    rec = _rec(tmp_path, body, ["uint8[128,64]", "fp32[128,64]", "fp32[128,64]"])
    cp = next(i for i in rec.program if isinstance(i, I.CopyPredicated))
    assert engine_cycles(cp, TRN2) == 2 * 64  # both in SBUF: max(MIN_II, 2N)


# -- partition reduce, top-8, shuffle, sequence bounds -------------------------------------
def test_tensor_partition_reduce(tmp_path) -> None:
    body = '''
@nki.jit
def k(a):
    s = nl.ndarray((1, 32, 4), dtype=nl.float32, buffer=nl.shared_hbm)
    m = nl.ndarray((1, 32, 4), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(a)
    nl.store(s, nisa.tensor_partition_reduce(np.add, t))
    nl.store(m, nisa.tensor_partition_reduce(nl.max, t))
    return s, m
'''
    a = np.random.default_rng(6).normal(0, 10, (128, 32, 4)).astype(np.float32)
    s, m = kernel_values(tmp_path, "import numpy as np\n" + body, a)
    exact = a.astype(np.float64).sum(0, keepdims=True)
    # 127 fp32 additions in sequence: |err| <= 127 u sum |a| (Higham, recursive summation)
    assert np.all(np.abs(s - exact) <= 127 * U32 * np.abs(a).astype(np.float64).sum(0))
    np.testing.assert_array_equal(m, a.max(0, keepdims=True))


TOP8 = '''
@nki.jit
def k(a):
    top = nl.ndarray((a.shape[0], 8), dtype=nl.float32, buffer=nl.shared_hbm)
    rep = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    idx = nl.ndarray((a.shape[0], 8), dtype=nl.int16, buffer=nl.shared_hbm)
    fi = nl.ndarray((a.shape[0], 8), dtype=nl.int16, buffer=nl.shared_hbm)
    t = nl.load(a)
    m = nisa.max8(src=t)
    i = nl.ndarray((a.shape[0], 8), dtype=nl.int16, buffer=nl.sbuf)
    j = nl.ndarray((a.shape[0], 8), dtype=nl.int16, buffer=nl.sbuf)
    nisa.nc_find_index8(dst=j, data=t, vals=m)
    r = nisa.nc_match_replace8(data=t, vals=m, imm=-1.0, dst_idx=i)
    nl.store(top, m)
    nl.store(rep, r)
    nl.store(idx, i)
    nl.store(fi, j)
    return top, rep, idx, fi
'''


def test_max8_find_index8_match_replace8(tmp_path) -> None:
    a = np.random.default_rng(7).integers(0, 40, (16, 50)).astype(np.float32)  # with ties
    top, rep, idx, fi = kernel_values(tmp_path, TOP8, a)
    want = -np.sort(-a, axis=1)[:, :8]
    np.testing.assert_array_equal(top, want)
    # an independent loop: each value's first occurrence not taken yet
    ref_rep, ref_idx, ref_fi = a.copy(), np.zeros((16, 8), int), np.zeros((16, 8), int)
    for r in range(16):
        taken: set[int] = set()
        for k in range(8):
            ref_fi[r, k] = next(c for c in range(50) if a[r, c] == want[r, k])
            c = next(c for c in range(50) if a[r, c] == want[r, k] and c not in taken)
            taken.add(c)
            ref_idx[r, k], ref_rep[r, c] = c, -1.0
    np.testing.assert_array_equal(rep, ref_rep)
    np.testing.assert_array_equal(idx, ref_idx)
    np.testing.assert_array_equal(fi, ref_fi)
    rec = _rec(tmp_path, TOP8, ["fp32[16,50]"])
    m8 = next(i for i in rec.program if isinstance(i, I.Max8))
    assert engine_cycles(m8, TRN2) == 50  # "N engine cycles"


def test_find_index8_defaults_to_uint32(tmp_path) -> None:
    # the docs' default output dtype, now a row of the formats table (issue 19)
    body = TOP8.replace("nisa.nc_find_index8(dst=j, data=t, vals=m)",
                        "j = nisa.nc_find_index8(data=t, vals=m)").replace(
        "fi = nl.ndarray((a.shape[0], 8), dtype=nl.int16", "fi = nl.ndarray((a.shape[0], 8), "
        "dtype=nl.uint32")
    a = np.random.default_rng(8).integers(0, 40, (16, 50)).astype(np.float32)
    *_, fi = kernel_values(tmp_path, body, a)
    assert fi.dtype == np.uint32
    want = -np.sort(-a, axis=1)[:, :8]
    ref = [[next(c for c in range(50) if a[r, c] == want[r, k]) for k in range(8)]
           for r in range(16)]  # each value's first position, by an independent loop
    np.testing.assert_array_equal(fi, np.array(ref))


def test_stream_shuffle_moves_partitions_within_quadrants(tmp_path) -> None:
    body = '''
@nki.jit
def k(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    b = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    b[...] = nl.load(a)
    mask = [(3 * i + 1) % 32 for i in range(31)] + [255]
    nisa.nc_stream_shuffle(src=t, dst=b, shuffle_mask=mask)
    nl.store(out, b)
    return out
'''
    a = np.random.default_rng(8).normal(0, 1, (64, 20)).astype(np.float32)
    out = kernel_values(tmp_path, body, a)
    want = a.copy()
    for q in range(2):
        for i in range(31):
            want[32 * q + i] = a[32 * q + (3 * i + 1) % 32]
    np.testing.assert_array_equal(out, want)


def test_sequence_bounds_against_a_loop(tmp_path) -> None:
    body = '''
@nki.jit
def k(ids):
    out = nl.ndarray((1, 2, ids.shape[1]), dtype=ids.dtype, buffer=nl.shared_hbm)
    t = nl.load(ids)
    nl.store(out, nisa.sequence_bounds(segment_ids=t))
    return out
'''
    ids = np.array([[0, 1, 1, 2, 2, 2, 0, 3, 3, 5]], dtype=np.float32)
    out = kernel_values(tmp_path, body, ids)
    n = ids.shape[1]
    start, end = [], []
    for i, v in enumerate(ids[0]):
        if v == 0:
            start.append(n)
            end.append(-1)
            continue
        lo = i
        while lo > 0 and ids[0, lo - 1] == v:
            lo -= 1
        hi = i
        while hi + 1 < n and ids[0, hi + 1] == v:
            hi += 1
        start.append(lo)
        end.append(hi + 1)
    np.testing.assert_array_equal(out[0], np.array([start, end], dtype=np.float32))
    np.testing.assert_array_equal(out[0, :, :4], [[10, 1, 1, 3], [-1, 3, 3, 6]])  # the docs


# -- local_gather: the ISA level (uint16, its index format, has no format in the model) ----
def test_local_gather_values_and_cost() -> None:
    rng = np.random.default_rng(9)
    p, e, k, valid = 32, 64, 4, 20
    src = rng.normal(0, 1, (p, e)).astype(np.float32)
    index = rng.integers(0, e // k, (p, 2)).astype(np.int16) * k  # element offsets
    ins = I.LocalGather(_sb(p, e), _sb(p, 2, "int16", offset=e * 4),
                        _sb(p, valid * k, offset=e * 4 + 64), k, valid)
    sim = FunctionalSimulator(TRN2)
    sim.memory.write(ins.src, src)
    sim.memory.write(ins.index, index)
    sim.run(Program([ins]))
    got = sim.memory.read(ins.dst).reshape(p, valid, k)
    for c in range(p // 16):  # the docs' NumPy semantics, per GpSimd core of 16 partitions
        flat = index[16 * c:16 * c + 16].flatten(order="F")[:valid]
        for j, off in enumerate(flat):
            np.testing.assert_array_equal(got[16 * c:16 * c + 16, j], src[16 * c:16 * c + 16,
                                                                            off:off + k])
    # 150 + valid * k / C, C = ((28 + 4k) / 4k) / min(4 / 4, k) = 44 / 16
    assert engine_cycles(ins, TRN2) == 150 + int(np.ceil(valid * k / (44 / 16)))


def test_local_gather_refuses_indices_other_than_uint16(tmp_path) -> None:
    body = '''
@nki.jit
def k(a, i):
    out = nl.ndarray((32, 8, 16, 1), dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nisa.local_gather(nl.load(a), nl.load(i)))
    return out
'''
    with pytest.raises(KernelError, match="uint16"):
        _rec(tmp_path, body, ["fp32[32,64]", "int16[32,8]"])


# -- random numbers ------------------------------------------------------------------------
RAND = '''
@nki.jit
def k(a):
    r = nl.ndarray((64, 300), dtype=nl.float32, buffer=nl.shared_hbm)
    d = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.random_seed(SEED)
    nl.store(r, nl.rand((64, 300)))
    nl.store(d, nisa.dropout(nl.load(a), prob=0.25))
    return r, d
'''


def test_rand_and_dropout_are_seeded_and_uniform(tmp_path) -> None:
    a = np.random.default_rng(10).normal(0, 1, (128, 200)).astype(np.float32) + 10
    r1, d1 = kernel_values(tmp_path, RAND.replace("SEED", "7"), a)
    r2, d2 = kernel_values(tmp_path, RAND.replace("SEED", "7"), a)
    r3, _ = kernel_values(tmp_path, RAND.replace("SEED", "8"), a)
    np.testing.assert_array_equal(r1, r2)  # reproducible for a seed
    np.testing.assert_array_equal(d1, d2)
    assert not np.array_equal(r1, r3)
    assert r1.min() >= 0 and r1.max() < 1
    # uniform: the mean of 19,200 draws within 5 standard errors (1 / sqrt(12 n)) of 1/2
    assert abs(r1.mean() - 0.5) < 5 / np.sqrt(12 * r1.size)
    kept = d1 != 0
    np.testing.assert_array_equal(d1[kept], a[kept])  # kept values are not rescaled
    n = a.size  # dropped fraction within 5 binomial standard errors of 0.25
    assert abs((1 - kept.mean()) - 0.25) < 5 * np.sqrt(0.25 * 0.75 / n)


def test_a_numpy_number_is_a_number_not_a_tile(tmp_path) -> None:
    """``prob=np.float32(0.25)`` is the same number as ``prob=0.25`` (it was taken for a
    tile of probabilities and refused): the same seeded draws drop the same elements."""
    a = np.random.default_rng(11).normal(0, 1, (128, 200)).astype(np.float32) + 10
    _, plain = kernel_values(tmp_path, RAND.replace("SEED", "7"), a)
    _, numpy_prob = kernel_values(tmp_path, RAND.replace("SEED", "7").replace(
        "prob=0.25", "prob=np.float32(0.25)").replace("@nki.jit", "import numpy as np\n@nki.jit"),
        a)
    np.testing.assert_array_equal(numpy_prob, plain)
    assert 0 < np.count_nonzero(plain == 0) < plain.size


def test_random_seed_from_a_tile_is_refused(tmp_path) -> None:
    body = RAND.replace("nl.random_seed(SEED)", "nl.random_seed(nl.load(a))")
    with pytest.raises(KernelError, match="seed computed on chip"):
        _rec(tmp_path, body, ["fp32[128,200]"])


# -- SPMD on several NeuronCores -----------------------------------------------------------
SPMD = '''
@nki.jit
def add_tile(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    r = nl.program_id(0) * 128
    c = nl.program_id(1) * 512
    x = nl.load(a[r:r + 128, c:c + 512])
    y = nl.load(b[r:r + 128, c:c + 512])
    nl.store(out[r:r + 128, c:c + 512], value=x + y)
    return out


def k(a, b):
    return add_tile[GRID](a, b)
'''


def test_core_of_follows_the_docs_placement() -> None:
    # test_nki_spmd_grid.py: spmd_dim(nc(2), 2) puts kernel[0..1, :] on NC 0, [2..3, :] on
    # NC 1; spmd_dim(2, nc(2)) puts even rows on NC 0 and odd rows on NC 1
    outer = (spmd_dim(nc(2), 2).factors, ((2, False),))
    inner = (spmd_dim(2, nc(2)).factors, ((2, False),))
    assert [core_of(outer, (i, j)) for i in range(4) for j in range(2)] == [0, 0, 0, 0,
                                                                           1, 1, 1, 1]
    assert [core_of(inner, (i, j)) for i in range(4) for j in range(2)] == [0, 0, 1, 1,
                                                                           0, 0, 1, 1]
    assert (nc(2) * 2).factors == spmd_dim(nc(2), 2).factors
    assert (2 * nc(2)).factors == spmd_dim(2, nc(2)).factors


def test_spmd_on_two_cores_times_each_core_values_unchanged(tmp_path) -> None:
    rng = np.random.default_rng(11)
    a, b = (rng.normal(0, 1, (512, 1024)).astype(np.float32) for _ in range(2))
    body2 = SPMD.replace("GRID", "nl.spmd_dim(2, nl.nc(2)), 2")
    out = kernel_values(tmp_path, body2, a, b)
    np.testing.assert_array_equal(out, (a.astype(np.float64) + b).astype(np.float32))
    two = _rec(tmp_path, body2, ["fp32[512,1024]"] * 2)
    one = _rec(tmp_path, SPMD.replace("GRID", "4, 2"), ["fp32[512,1024]"] * 2)
    assert one.cores == () and len(two.cores) == 2
    assert [len(p) for p in two.cores] == [len(two.program) // 2] * 2
    assert _opcodes(two) == _opcodes(one)  # the same instructions for the values
    cores = time_cores(two)
    launch = time_recorded(two)
    assert launch.latency_us == max(c.latency_us for c in cores)
    # each core does half the work of the one-core launch: faster, but not below half
    single = time_recorded(one).latency_us
    assert single / 2 <= launch.latency_us < single


def test_kernel_command_reports_the_longest_core_of_a_launch(tmp_path, capsys) -> None:
    """`systolic kernel --json` of a two-core launch: one row per core, and the whole-core
    figures are those of the longest core (each core timed once)."""
    import json

    from systolic.cli import main

    path = write_kernel(tmp_path, SPMD.replace("GRID", "nl.spmd_dim(2, nl.nc(2)), 2"))
    assert main(["kernel", f"{path}:k", "--arg", "a=fp32[512,1024]", "--arg",
                 "b=fp32[512,1024]", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    cores = [c["latency_us"] for c in info["cores"]]
    two = _rec(tmp_path, SPMD.replace("GRID", "nl.spmd_dim(2, nl.nc(2)), 2"),
               ["fp32[512,1024]"] * 2)
    assert cores == [c.latency_us for c in time_cores(two)] and len(cores) == 2
    assert info["core"]["latency_us"] == max(cores)


def test_a_sweep_point_of_a_launch_reports_its_longest_core(tmp_path) -> None:
    """A kernel sweep's point of a two-core launch has the figures `systolic kernel` reports:
    its longest core's (the point timed rec.program, every core's instructions as one
    NeuronCore's, before)."""
    from systolic.sweep.evaluate import KernelTarget, evaluate_point

    body = SPMD.replace("GRID", "nl.spmd_dim(2, nl.nc(2)), 2")
    path = write_kernel(tmp_path, body)
    target = KernelTarget(str(path), "k", (("a", "fp32", (512, 1024)),
                                           ("b", "fp32", (512, 1024))), "test")
    got = evaluate_point(target, {"arch": "trn2"})
    two = _rec(tmp_path, body, ["fp32[512,1024]"] * 2)
    cores = time_cores(two)
    assert got["latency_us"] == max(c.latency_us for c in cores)
    whole = time_program(two.program, two.arch)  # every core's instructions on one core
    assert whole.latency_us > got["latency_us"]


# -- the ISA level: text form, checks ------------------------------------------------------
def _all_new() -> list[object]:
    col = _sb(8, 1, offset=4096)
    return [
        I.AffineSelect(_sb(8, 16), _sb(8, 16, offset=64), -1.5, AluOp.LESS, 3, 1, -2),
        I.RangeSelect(_sb(8, 16), _sb(8, 16, offset=64), col, col, AluOp.GREATER_EQUAL,
                      AluOp.LESS, 5, FP32_MIN, _sb(8, 1, offset=8192), ReduceCmd.REDUCE),
        I.Select(_sb(8, 16, "uint8"), _sb(8, 16), _sb(8, 16, offset=64), 2.0, col, True,
                 None, ReduceCmd.RESET_REDUCE),
        I.CopyPredicated(_sb(8, 16, "uint8"), _sb(8, 16), _sb(8, 16, offset=64), 0.0, True),
        I.PartitionReduce(_sb(8, 16), _sb(1, 16, offset=64), AluOp.MAXIMUM),
        I.Max8(_sb(8, 16), _sb(8, 8, offset=64)),
        I.FindIndex8(_sb(8, 16), _sb(8, 8, offset=64), _sb(8, 8, "int16", offset=128)),
        I.MatchReplace8(_sb(8, 16), _sb(8, 8, offset=64), _sb(8, 16, offset=128), -3.0,
                        _sb(8, 8, "int16", offset=256)),
        I.StreamShuffle(_sb(32, 16), _sb(32, 16, offset=64), (*range(31), 255)),
        I.LocalGather(_sb(16, 16), _sb(16, 1, "int16", offset=64), _sb(16, 32, offset=128),
                      2, 16),
        I.SequenceBounds(_sb(1, 16), _sb(1, 32, offset=64)),
        I.Rand(_sb(8, 16), 2 ** 40 + 3),
        I.Dropout(_sb(8, 16), _sb(8, 16, offset=64), 0.0, col, 9),
    ]


def test_new_instructions_round_trip_the_text_form_and_verify() -> None:
    insts = _all_new()
    assert len({type(i) for i in insts}) == 13
    assert list(parse_instructions(format_program(insts))) == insts
    for ins in insts:
        verify(Program([ins]), TRN2)
        assert engine_cycles(ins, TRN2) > 0


@pytest.mark.parametrize("ins, why", [
    (I.AffineSelect(AccessPattern(Space.PSUM, 0, 8, 0, ((1, 16),), "fp32"),
                    _sb(8, 16), 0.0, AluOp.LESS), "must be in SBUF"),
    (I.AffineSelect(_sb(8, 16), _sb(8, 16, offset=64), 0.0, AluOp.ADD), "comparison"),
    (I.StreamShuffle(_sb(32, 16), _sb(32, 16, offset=64), (40,) * 32), "0..31 or 255"),
    (I.StreamShuffle(_sb(32, 16, part=16), _sb(32, 16, offset=64), (0,) * 32),
     "starts at partition 16"),
    (I.Max8(_sb(8, 4), _sb(8, 8, offset=64)), "8 to 16,384"),
    (I.FindIndex8(_sb(8, 16), _sb(8, 8, offset=64), _sb(8, 8, offset=128)), "integer"),
    (I.LocalGather(_sb(16, 16), _sb(16, 1, "int16", offset=64), _sb(16, 24, offset=128),
                   3, 8), "num_elem_per_idx"),
    (I.PartitionReduce(_sb(8, 16), _sb(8, 16, offset=64)), "one partition"),
])
def test_new_instructions_refuse_what_the_docs_forbid(ins: object, why: str) -> None:
    with pytest.raises(VerifyError, match=why):
        verify(Program([ins]), TRN2)


def test_range_select_needs_gen3_in_the_verifier() -> None:
    ins = _all_new()[1]
    with pytest.raises(VerifyError, match="NeuronCore-v3"):
        verify(Program([ins]), get_arch("trn1"))
