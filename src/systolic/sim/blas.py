"""An accumulating MatMul's PSUM update as one BLAS call, where it gives the same bits.

The ``fast`` order defines an accumulating MatMul as ``partial = wt @ x`` (numpy's matmul:
one single-thread sgemm of numpy's own OpenBLAS) and then ``psum += partial`` (numpy's fp32
add). That sgemm also takes ``beta = 1``: ``C = wt @ x + C``. For a product whose K fits one
of OpenBLAS's K blocks (GEMM_Q, 320-768 floats on x86-64; a MatMul's K is at most 128
partitions) its kernel sums the K products in registers exactly as the ``beta = 0`` call
does and then adds the sum into C once: the same fl(C + fl(sum)), without writing the
partial to a buffer and reading it back for the add, the memory pass that cost ~15 us of a
~160 us 128x128x512 instruction into a PSUM bank (docs/PERFORMANCE.md).

Two limits, both found by measuring (tests/test_functional_fused.py holds them):

* **NaN against NaN.** When C and the partial are both NaN, numpy's add into a PSUM bank
  keeps C's payload and the kernel's add keeps the partial's. So the caller fuses only a
  product that cannot be NaN or infinite: finite operands with ``K * max|wt| * max|x|`` at
  most :data:`FINITE_BOUND` (every partial sum is below fp32's largest value, so no
  overflow, no inf - inf). The add then has at most one special operand (C's NaN, inf,
  signed zero or subnormal), and both ways return the same bits.
* **Which kernel.** "Exactly" above is a claim about a library's internals, so it is not
  taken on trust: the first time a process meets an operand layout (shapes, transposes,
  leading dimensions) the two ways are computed side by side on probes and compared bit
  for bit, and only a layout whose every bit agrees takes the fused call. The probes hold
  random finite operands (a different kernel, K blocking or thread split shows in most
  elements), finite operands against a C full of specials (NaNs with payloads of both
  signs, signalling ones, infinities, signed zeros, subnormals), and rows and columns of
  signed zeros. Shapes numpy itself does not hand to sgemm (a dimension of 1: gemv or dot;
  ``x @ x.T`` of one buffer: syrk; a layout BLAS cannot read) are never fused.

Fallback (the old two-call path, so the bits are the same either way): the symbol
``scipy_cblas_sgemm64_`` (numpy's wheels: scipy-openblas, 64-bit integers) is not in a
loaded OpenBLAS (another numpy build: MKL, a system OpenBLAS, Accelerate), the environment
variable ``SYSTOLIC_FUSED_SGEMM`` is ``0``, or a probe differs. The BLAS thread count is the
caller's: :func:`one_thread` around the run sets the library's global count, so this call
runs on one thread too, as numpy's do.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["FINITE_BOUND", "accumulate", "available", "max_abs", "one_thread"]

# K * max|wt| * max|x| at most this (2^127, half of fp32's largest value ~3.4e38): every
# partial sum of the K products is at most that in magnitude, times (1 + 2^-24)^(K + 1) < 2
# for its roundings, so none overflows and the product holds no inf or NaN
FINITE_BOUND = 2.0 ** 127

_SYMBOL = "scipy_cblas_sgemm64_"  # numpy's wheels' OpenBLAS (scipy-openblas, ILP64)
_GET_THREADS = "scipy_openblas_get_num_threads64_"
_SET_THREADS = "scipy_openblas_set_num_threads64_"
_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112  # cblas.h's enum values
_SgemmFn = Callable[..., None]
_lock = threading.Lock()
_sgemm: list[_SgemmFn | None] = []  # [] before the lookup, then [the function or None]
_lib: list[Any] = []  # [] before the lookup, then [numpy's OpenBLAS or None]
_lib_lock = threading.Lock()
# [the runs holding BLAS to one thread, the count the first of them found]
_held = [0, 0]
_held_lock = threading.Lock()
# operand layout -> whether the fused call gave every probe's bits (one probe set per layout)
_proven: dict[tuple[int, ...], bool] = {}


def _numpy_openblas() -> Any | None:
    """numpy's own OpenBLAS (its wheels': scipy-openblas, ILP64) as a ``ctypes.CDLL``, or
    None: another numpy build (MKL, a system OpenBLAS, Accelerate). Looked up once."""
    if not _lib:
        with _lib_lock:
            if not _lib:
                _lib.append(_find_openblas())
    return _lib[0]


def _find_openblas() -> Any | None:
    import ctypes  # here: 1.4 ms of import for a process that never runs a product

    from threadpoolctl import threadpool_info

    numpy_dir = Path(np.__file__).resolve().parent.parent
    libs = [info["filepath"] for info in threadpool_info()
            if info.get("internal_api") == "openblas"]
    # numpy's own first (its wheels keep it in site-packages/numpy.libs): another package's
    # OpenBLAS may be loaded too, and its kernels need not be numpy's
    libs.sort(key=lambda p: not Path(p).resolve().is_relative_to(numpy_dir / "numpy.libs"))
    for path in libs:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        if all(hasattr(lib, name) for name in (_SYMBOL, _GET_THREADS, _SET_THREADS)):
            getattr(lib, _GET_THREADS).restype = ctypes.c_int
            getattr(lib, _SET_THREADS).argtypes = [ctypes.c_int]  # an int in ILP64 too
            getattr(lib, _SET_THREADS).restype = None
            return lib
    return None


def _load() -> _SgemmFn | None:
    """``scipy_cblas_sgemm64_`` from the OpenBLAS numpy loaded, or None."""
    if os.environ.get("SYSTOLIC_FUSED_SGEMM", "1") == "0":
        return None
    lib = _numpy_openblas()
    if lib is None:
        return None
    import ctypes

    fn = getattr(lib, _SYMBOL)
    i64, ci = ctypes.c_int64, ctypes.c_int
    fn.argtypes = [ci, ci, ci, i64, i64, i64, ctypes.c_float, ctypes.c_void_p, i64,
                   ctypes.c_void_p, i64, ctypes.c_float, ctypes.c_void_p, i64]
    fn.restype = None
    return fn  # type: ignore[no-any-return]


@contextmanager
def one_thread() -> Iterator[None]:
    """numpy's BLAS held to one thread while the context lasts: a product's bits depend on
    the thread count (numpy's OpenBLAS takes another kernel on two threads: every element
    of a 128 x 128 x 512 product can differ). The count is one setting for the whole
    process, so the runs that hold it share one hold, counted under a lock: the first in
    sets one thread, the last out gives the library back the count it found. This calls
    OpenBLAS's own ``openblas_set_num_threads``: threadpoolctl lets only one Python thread
    at a time change OpenBLAS's count ("Other threads silently do nothing", its
    OpenBLASController), so with ``threadpool_limits`` per run a run on a second thread
    could not set one thread, and ran with the library's count as soon as the first run
    ended (tests/test_functional_fast.py). It is also cheaper: threadpool_limits looked
    the libraries up at every run (0.26 ms). Where numpy's BLAS is not its wheels'
    OpenBLAS, ``threadpool_limits`` per run as before (two runs at once on two threads
    may then differ from the reference)."""
    lib = _numpy_openblas()
    if lib is None:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=1, user_api="blas"):
            yield
        return
    with _held_lock:
        if not _held[0]:
            _held[1] = getattr(lib, _GET_THREADS)()
            getattr(lib, _SET_THREADS)(1)
        _held[0] += 1
    try:
        yield
    finally:
        with _held_lock:
            _held[0] -= 1
            if not _held[0]:  # the last run out: the count the first found
                getattr(lib, _SET_THREADS)(_held[1])


def available() -> bool:
    """Whether the fused call can be tried at all (the symbol was found)."""
    if not _sgemm:
        with _lock:
            if not _sgemm:
                _sgemm.append(_load())
    return _sgemm[0] is not None


def _layout(arr: np.ndarray) -> tuple[int, int] | None:
    """(transpose flag, leading dimension) as numpy's matmul passes ``arr`` to cblas_sgemm
    (numpy/_core/src/umath/matmul.c.src, ``is_blasable2d``): row-major if its rows are
    contiguous, else transposed if its columns are, else None (numpy copies it first)."""
    s0, s1 = arr.strides
    rows, cols = arr.shape
    if s1 == 4 and s0 % 4 == 0 and s0 // 4 >= cols:
        return _NO_TRANS, s0 // 4
    if s0 == 4 and s1 % 4 == 0 and s1 // 4 >= rows:
        return _TRANS, s1 // 4
    return None


def max_abs(values: np.ndarray) -> float:
    """The largest magnitude in float ``values`` (NaN if any is NaN), without a temporary;
    inf for other dtypes (the fused call takes float32 only)."""
    if values.dtype.kind != "f":
        return math.inf
    if not values.size:
        return 0.0
    return float(np.maximum(values.max(), -values.min()))  # np.maximum keeps a NaN


def accumulate(view: np.ndarray, wt: np.ndarray, x: np.ndarray) -> bool:
    """``view += wt @ x`` with the bits of ``np.add(view, np.matmul(wt, x), out=view)``, in
    one sgemm (beta = 1), when this operand layout has been proven to give them; False,
    having done nothing, otherwise. The caller has checked that the product is finite
    (``K * max|wt| * max|x| <= FINITE_BOUND``, see the module docstring). ``view`` is a
    float32 [M, N] region with contiguous rows (``functional_threaded._blasable``), ``wt``
    [M, K] and ``x`` [K, N] float32; the caller holds BLAS to one thread."""
    m, k = wt.shape
    n = x.shape[1]
    if m < 2 or k < 2 or n < 2:  # numpy's own special cases: gemv, dot, no BLAS
        return False
    la, lb = _layout(wt), _layout(x)
    if la is None or lb is None:
        return False
    pa, pb = wt.ctypes.data, x.ctypes.data
    if pa == pb:  # numpy's syrk case (a matrix times its own transpose) and its kin
        return False
    key = (m, k, n, *la, *lb, view.strides[0] // 4)
    ok = _proven.get(key)
    if ok is None:
        ok = _proven[key] = available() and _probe(key)
    if not ok:
        return False
    fn = _sgemm[0]
    assert fn is not None
    fn(_ROW_MAJOR, la[0], lb[0], m, n, k, 1.0, pa, la[1], pb, lb[1], 1.0, view.ctypes.data,
       key[-1])
    return True


def _operand(rows: int, cols: int, trans: int, ld: int, values: np.ndarray) -> np.ndarray:
    """A [rows, cols] float32 array laid out as (trans, ld) says, holding ``values``."""
    if trans == _NO_TRANS:
        out = np.empty((rows, ld), np.float32)[:, :cols]
    else:
        out = np.empty((cols, ld), np.float32)[:, :rows].T
    out[...] = values
    return out


def _specials(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """Half IEEE specials (quiet and signalling NaNs with random payloads of both signs,
    infinities, signed zeros, subnormals), half normal values."""
    size = shape[0] * shape[1]
    bits = rng.standard_normal(size).astype(np.float32).view(np.uint32)
    sign = rng.integers(0, 2, size, dtype=np.uint32) << 31
    payload = rng.integers(1, 1 << 22, size, dtype=np.uint32)
    quiet = np.where(rng.random(size) < 0.8, 0x400000, 0).astype(np.uint32)
    kind = rng.integers(0, 8, size)
    edge = np.array([0x7F800000, 0x00000000, 0x00000123, 0x007FFFFF], np.uint32)[kind % 4]
    bits = np.where(kind < 2, sign | np.uint32(0x7F800000) | payload | quiet, bits)  # NaN
    bits = np.where((kind >= 2) & (kind < 4), edge | sign, bits)  # +-inf, +-0, subnormals
    return bits.view(np.float32).reshape(shape)


def _finite(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """Normal values, a fifth of them signed zeros and a twentieth subnormal."""
    v = rng.standard_normal(shape).astype(np.float32)
    u = rng.random(shape)
    v[u < 0.2] = np.where(u[u < 0.2] < 0.1, np.float32(0.0), np.float32(-0.0))
    v[(u >= 0.2) & (u < 0.25)] *= np.float32(1e-39)
    return v


def _probe(key: tuple[int, ...]) -> bool:
    """Whether the fused call gives the two-call bits on probes of this layout."""
    m, k, n, ta, lda, tb, ldb, ldc = key
    fn = _sgemm[0]
    assert fn is not None
    rng = np.random.default_rng(list(key))
    zeros_w = _finite(rng, (m, k))
    zeros_w[: m // 2] = np.where(rng.random((m // 2, k)) < 0.5, np.float32(-0.0), 0.0)
    zeros_x = _finite(rng, (k, n))
    zeros_x[:, : n // 2] = -0.0
    signed_zeros = np.where(rng.random((m, n)) < 0.5, np.float32(-0.0), 0.0)
    cases = [  # (wt, x, psum)
        (rng.standard_normal((m, k)), rng.standard_normal((k, n)),
         4 * rng.standard_normal((m, n))),
        (_finite(rng, (m, k)), _finite(rng, (k, n)), _specials(rng, (m, n))),
        (zeros_w, zeros_x, signed_zeros),
    ]
    buf = np.empty((m, n), np.float32)
    for wt_v, x_v, c_v in cases:
        wt = _operand(m, k, ta, lda, wt_v)
        x = _operand(k, n, tb, ldb, x_v)
        want = np.empty((m, ldc), np.float32)[:, :n]
        want[...] = c_v
        got = np.empty((m, ldc), np.float32)[:, :n]
        got[...] = want
        with np.errstate(all="ignore"):  # the two calls of functional_threaded._task
            np.matmul(wt, x, out=buf)
            np.add(want, buf, out=want)
        fn(_ROW_MAJOR, ta, tb, m, n, k, 1.0, wt.ctypes.data, lda, x.ctypes.data, ldb, 1.0,
           got.ctypes.data, ldc)
        if not np.array_equal(want.view(np.uint32), got.view(np.uint32)):
            return False
    return True
