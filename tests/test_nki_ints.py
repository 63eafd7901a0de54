"""16- and 32-bit integer tiles (issue 19 item 2): the formats come from the one table
(systolic.dtypes, limits from numpy's iinfo), iota writes int32 by integer arithmetic, and
the Vector engine's arithmetic on integers is float32 math cast back (NKI docs,
nki.isa.tensor_tensor: "the engine automatically casts input data types to float32 and
performs the element-wise operation in float32 math"). Values against numpy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import write_kernel

import systolic.nki as snki
from systolic.dtypes import FORMATS, encode


@pytest.fixture(autouse=True)
def _hook() -> None:
    snki.install("trn2")


@pytest.mark.parametrize("name", ["uint16", "int32", "uint32"])
def test_the_integer_rows_take_their_limits_from_their_storage(name: str) -> None:
    f = FORMATS[name]
    info = np.iinfo(f.storage)
    assert f.max == info.max and f.container_bytes == info.bits // 8 and f.is_int
    assert encode(np.array([info.min, info.max]), f).tolist() == [info.min, info.max]


def test_an_engine_result_cast_to_int32_truncates_toward_zero_and_saturates() -> None:
    """Toward zero (58.53 -> 58, -2.7 -> -2), as numpy's astype: docs/NUMERICS.md."""
    got = encode(np.array([2.5, 3.5, 58.53, -2.7, 1e10, -1e10, np.nan], np.float32), "int32",
                 overflow="format")
    info = np.iinfo(np.int32)
    assert got.tolist() == [2, 3, 58, -2, info.max, info.min, 0]


IOTA = '''
@nki.jit
def k():
    out = nl.ndarray((128, 512), dtype=nl.int32, buffer=nl.shared_hbm)
    e = nisa.iota(nl.arange(128)[:, None] * 1000 + nl.arange(512)[None, :], dtype=nl.int32)
    nl.store(out, value=e)
    return out
'''


def test_iota_into_int32_is_integer_arithmetic(tmp_path: Path) -> None:
    k = snki.load_kernel(str(write_kernel(tmp_path, IOTA)), "k")
    got = np.asarray(snki.values(k, []))
    want = np.arange(128)[:, None] * 1000 + np.arange(512)[None, :]
    assert got.dtype == np.int32 and np.array_equal(got, want)


ADD = '''
@nki.jit
def k(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, value=nl.add(nl.load(a), nl.load(b)))
    return out
'''


def test_vector_arithmetic_on_int32_is_float32_math(tmp_path: Path) -> None:
    """Small sums are exact; 2^24 + 1 has no float32 value, so it arrives as 2^24 (the
    documented float32 path; numpy's float32 sum cast back is the reference)."""
    a = np.array([[1, -7, 2**24 + 1, 2**31 - 1000]] * 128, np.int32)
    b = np.array([[2, 3, 0, 0]] * 128, np.int32)
    k = snki.load_kernel(str(write_kernel(tmp_path, ADD)), "k")
    got = np.asarray(snki.values(k, [a, b]))
    f32 = a.astype(np.float32) + b.astype(np.float32)
    want = np.clip(np.rint(f32.astype(np.float64)), -2**31, 2**31 - 1).astype(np.int32)
    assert got.dtype == np.int32 and np.array_equal(got, want)
    assert got[0, 2] == 2**24 and got[0, 0] == 3
