"""Three semantics the nki-samples flash attention kernels rely on (issue 19): an integer
index drops its dimension (NKI "Basic Tensor Indexing") and an on-chip [P] view still takes
a second index as the [P, 1] tile it is in memory; a 0-d tile broadcasts against a tile of
P partitions (numpy's rule, nki.language.add); an older-API matmul operand in PSUM is staged
into SBUF by a recorded, timed tensor_copy (the PE reads SBUF only). Values against float64
numpy written out here; shapes as the NKI docs give them."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from helpers import opcodes, record_source, write_kernel

import systolic.nki as snki
from systolic.errors import KernelError
from systolic.isa import DmaCopy, Space, TensorCopy
from systolic.nki.timing import time_recorded


@pytest.fixture(autouse=True)
def _hook() -> None:
    snki.install("trn2")


def _values(tmp_path: Path, body: str, args: list[np.ndarray]) -> np.ndarray:
    k = snki.load_kernel(str(write_kernel(tmp_path, body)), "k")
    return np.asarray(snki.values(k, args), np.float64)


# -- integer indices: the documented shapes, and a [P] view indexed as [P, 1] ---------------
SHAPES = '''
@nki.jit
def k(a):
    x = nl.ndarray((2, 128, 1024), dtype=nl.float32, buffer=nl.hbm)
    y = nl.ndarray((2, 2, 2), dtype=nl.float32, buffer=nl.hbm)
    t = nl.ndarray((nl.par_dim(128), 8), dtype=nl.float32, buffer=nl.sbuf)
    shapes = [x[1].shape, x[1, :, :].shape, x[1, :, 0:512].shape, x[:, 1, 0:2].shape,
              y[1].shape, t[:, 3].shape, t[:, 3][:, 0].shape, t[:, 3][:, :].shape,
              t[:, 3][:, 0:1].shape]
    assert [tuple(s) for s in shapes] == WANT, shapes
    out = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a))
    return out
'''


def test_integer_indices_drop_their_dimension_as_the_nki_docs_show(tmp_path: Path) -> None:
    """NKI "Tensor Indexing" (indexing-overview): x[1] of [2, 2, 2] is [2, 2];
    x[1, :, :] of [2, 128, 1024] is x[1], [128, 1024]; x[1, :, 0:512] is [128, 512];
    x[:, 1, 0:2] is [2, 2]. On chip the
    same rule gives t[:, 3] of [128, 8] as [128]; that view, indexed again, is [128, 1]
    in memory: [:, 0] is [128] and [:, :] / [:, 0:1] are [128, 1]."""
    want = [(128, 1024), (128, 1024), (128, 512), (2, 2), (2, 2), (128,), (128,), (128, 1),
            (128, 1)]
    record_source(tmp_path, SHAPES.replace("WANT", repr(want)), ["fp32[128,8]"])
    with pytest.raises(KernelError, match="assertion failed"):  # the assert does check
        record_source(tmp_path, SHAPES.replace("WANT", repr(want[::-1])), ["fp32[128,8]"])


COLUMN = '''
def helper(col, x):
    # flash attention's _flash_attention_core: reads and writes col[:, 0] of l_buffer[:, i]
    prev = nl.copy(col[:, 0])
    col[:, 0] = nl.add(prev, x)


@nki.jit
def k(a, b):
    out = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.shared_hbm)
    buf = nl.ndarray((nl.par_dim(128), 4), dtype=nl.float32, buffer=nl.sbuf)
    buf[...] = nl.load(a)
    x = nl.load(b)
    for i in nl.sequential_range(4):
        helper(buf[:, i], x[:, i])
        helper(buf[:, i], x[:, 3 - i])
    nl.store(out, buf)
    return out
'''


def test_a_column_view_read_and_written_through_a_second_index(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    a = rng.standard_normal((128, 4)).astype(np.float32)
    b = rng.standard_normal((128, 4)).astype(np.float32)
    got = _values(tmp_path, COLUMN, [a, b])
    want = np.empty((128, 4))
    for i in range(4):  # two fp32 adds per column, rounded to fp32 after each
        s = np.float32(a[:, i].astype(np.float64) + b[:, i])
        want[:, i] = np.float32(s.astype(np.float64) + b[:, 3 - i])
    assert np.array_equal(got, want)


@pytest.mark.parametrize("index, message", [
    ("t[:, 3][:, 1]", "index 1 is out of range for dimension 1 of size 1"),
    ("t[:, 3][:, 0, 0]", "3 indices for a tensor of 1 dimensions"),
    ("h[0][0, 0]", "2 indices for a tensor of 1 dimensions"),
])
def test_what_a_second_index_cannot_reach_is_refused(tmp_path: Path, index: str,
                                                      message: str) -> None:
    body = f'''
@nki.jit
def k(h):
    t = nl.ndarray((nl.par_dim(128), 8), dtype=nl.float32, buffer=nl.sbuf)
    t[...] = 0.0
    out = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.shared_hbm)
    v = {index}
    nl.store(out, t)
    return out
'''
    with pytest.raises(KernelError, match=message):
        record_source(tmp_path, body, ["fp32[4,8]"])


# -- a 0-d tile against a tile of P partitions ----------------------------------------------
SCALAR = '''
@nki.jit
def k(s, a):
    out = nl.ndarray((2, 128, 256), dtype=nl.float32, buffer=nl.shared_hbm)
    sig = nl.load(s[1, 2])
    col = nl.add(nl.zeros((nl.par_dim(128), 1), dtype=nl.float32), sig, dtype=nl.float32)
    wide = nl.multiply(nl.load(a), sig)
    nl.store(out[0], nl.add(nl.zeros((nl.par_dim(128), 256), dtype=nl.float32), col))
    nl.store(out[1], wide)
    return out
'''


def test_a_zero_d_tile_broadcasts_to_every_partition(tmp_path: Path) -> None:
    """flash attention backward: nl.add(nl.zeros((par_dim(q), 1)), nl.load(sinks[b, h]))."""
    rng = np.random.default_rng(5)
    s = rng.standard_normal((3, 4)).astype(np.float32)
    a = rng.standard_normal((128, 256)).astype(np.float32)
    got = _values(tmp_path, SCALAR, [s, a])
    assert np.array_equal(got[0], np.full((128, 256), np.float64(s[1, 2])))
    assert np.array_equal(got[1], np.float32(a.astype(np.float64) * np.float64(s[1, 2])))
    rec = record_source(tmp_path, SCALAR,
                        ["fp32[3,4]", "fp32[128,256]"])
    # the scalar's one element read on every partition (DMA, partition step 0), as a
    # [1, F] row is (nki/tensor.py broadcast_to); the [128, 256] product a tensor_scalar
    assert "TensorScalar" in opcodes(rec)
    spread = [i for i in rec.program if isinstance(i, DmaCopy) and i.src.space is Space.DRAM
              and i.src.partitions == 128 and i.src.partition_step == 0]
    assert spread and all(i.src.dims == ((1, 1),) for i in spread)  # one element, 128 times


# -- a PSUM operand of an older-API matmul -------------------------------------------------
STAGED = '''
@nki.jit
def k(a, b):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    y = nl.load(b)
    acc = nl.zeros((nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
    t = nisa.nc_transpose(x)
    acc[:, :] += nisa.nc_matmul(STAT, y)
    nl.store(out, nl.copy(acc))
    return out
'''


def test_a_psum_stationary_is_staged_into_sbuf_by_a_timed_copy(tmp_path: Path) -> None:
    """flash attention backward: nc_matmul(nc_transpose(dy), softmax_y) (the transpose lands
    in PSUM on the Tensor Engine; the PE reads SBUF): the same Program, values and latency
    as the kernel that copies the transpose to SBUF itself."""
    rng = np.random.default_rng(7)
    a = rng.integers(-3, 4, (128, 128)).astype(np.float32)
    b = rng.integers(-3, 4, (128, 512)).astype(np.float32)
    implicit, explicit = STAGED.replace("STAT", "t"), STAGED.replace("STAT", "nl.copy(t)")
    got = _values(tmp_path, implicit, [a, b])
    assert np.array_equal(got, a.astype(np.float64) @ b.astype(np.float64))  # small ints
    args = ["fp32[128,128]", "fp32[128,512]"]
    rec, ref = record_source(tmp_path, implicit, args), record_source(tmp_path, explicit, args)
    assert opcodes(rec) == opcodes(ref)
    copies = [i for i in rec.program if isinstance(i, TensorCopy)]
    assert (copies[0].src.space, copies[0].dst.space) == (Space.PSUM, Space.SBUF)
    ct, cr = time_recorded(rec), time_recorded(ref)
    assert ct.latency == cr.latency
    j = list(rec.program).index(copies[0])
    (op,) = np.flatnonzero(ct.op_instr == j)  # the copy's op (ops are not instructions)
    assert ct.ends[op] > ct.starts[op]  # the copy takes engine time


CHAIN = '''
@nki.jit
def k(a, b, c):
    out = nl.ndarray((64, 256), dtype=nl.float32, buffer=nl.shared_hbm)
    r = nl.matmul(nl.load(a), nl.load(b), transpose_x=True)
    nl.store(out, nl.copy(nl.matmul(r, nl.load(c), transpose_x=True)))
    return out
'''


def test_nl_matmul_of_an_earlier_matmul_result(tmp_path: Path) -> None:
    """(a.T @ b).T @ c, the first result (PSUM) staged into SBUF as the second's stationary."""
    rng = np.random.default_rng(9)
    a = rng.integers(-2, 3, (32, 128)).astype(np.float32)
    b = rng.integers(-2, 3, (32, 64)).astype(np.float32)
    c = rng.integers(-2, 3, (128, 256)).astype(np.float32)
    got = _values(tmp_path, CHAIN, [a, b, c])
    a64, b64, c64 = (x.astype(np.float64) for x in (a, b, c))
    assert np.array_equal(got, (a64.T @ b64).T @ c64)


def test_the_current_api_nc_matmul_keeps_refusing_a_psum_operand(tmp_path: Path) -> None:
    body = '''
@nki.jit
def k(a, b):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.psum)
    y = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    d = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.dma_copy(dst=y, src=b)
    nisa.nc_matmul(d, x, y)
    return out
'''
    with pytest.raises(KernelError, match="nc_matmul stationary is in psum; it must be in SBUF"):
        record_source(tmp_path, body, ["fp32[128,128]", "fp32[128,512]"])


PLAIN = '''
@nki.jit
def k(x, y):
    out = nl.ndarray((x.shape[M], y.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(out, nl.copy(nl.matmul(nl.load(x), nl.load(y)TX)))
    return out
'''


@pytest.mark.parametrize(("m", "k", "n", "engine_op"), [
    (128, 128, 512, "MatMul"),  # 128 x 128: the Tensor Engine's transpose (a matmul)
    (64, 96, 200, "MatMul"),
    (32, 32, 64, "Transpose"),  # 32 x 32 or less: the Vector engine's (nki/transpose.py)
])
def test_nl_matmul_without_transpose_x_transposes_x_first(
        tmp_path: Path, m: int, k: int, n: int, engine_op: str) -> None:
    """nl.matmul(x, y) is x @ y: "matmul(x, y) lowers to nc_matmul(transpose(x), y)"
    (nki.language.matmul), one transpose more than nl.matmul(x.T, y, transpose_x=True)."""
    rng = np.random.default_rng(m + k + n)
    x = rng.integers(-3, 4, (m, k)).astype(np.float32)
    y = rng.integers(-3, 4, (k, n)).astype(np.float32)
    plain_src = PLAIN.replace("TX", "").replace("[M]", "[0]")
    given_src = PLAIN.replace("TX", ", transpose_x=True").replace("[M]", "[1]")
    got = _values(tmp_path, plain_src, [x, y])
    assert np.array_equal(got, x.astype(np.float64) @ y.astype(np.float64))
    plain = record_source(tmp_path, plain_src, [f"fp32[{m},{k}]", f"fp32[{k},{n}]"])
    given = record_source(tmp_path, given_src, [f"fp32[{k},{m}]", f"fp32[{k},{n}]"])
    more = Counter(opcodes(plain)) - Counter(opcodes(given))
    assert more[engine_op] >= 1  # (the PE's also makes its identity: Iota and friends)
