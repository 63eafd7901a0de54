"""The fused PSUM add of issue 20 (:mod:`systolic.sim.blas`): an accumulating MatMul's
product and add as one sgemm with beta = 1.

* the fused call gives the bits of numpy's matmul then numpy's add (the ``fast`` order's
  definition) on random operands: K below 128, odd shapes, a PSUM bank's row stride,
  transposed operands, a C full of IEEE specials; shapes numpy does not hand to sgemm are
  never fused;
* the threaded runner fuses only products that are surely finite: where C and the product
  are both NaN, the kernel keeps the other payload than numpy's add (measured here), so a
  NaN, inf or overflowing operand keeps the two calls; accumulation groups with such
  operands, and without, end in the reference loop's memories;
* no symbol, a failed probe or ``SYSTOLIC_FUSED_SGEMM=0``: the two calls, the same bits.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import operands, run_lowered, same_state
from threadpoolctl import threadpool_limits

from systolic import get_arch
from systolic.compiler import MatmulSpec, lower
from systolic.sim import blas

PSUM_ROW = 4096  # floats in a trn2 PSUM partition (16 KiB): a bank's row stride


def _two_calls(view: np.ndarray, wt: np.ndarray, x: np.ndarray) -> None:
    """The definition (functional_threaded._task's unfused path)."""
    with np.errstate(all="ignore"):
        buf = np.matmul(wt, x)
        np.add(view, buf, out=view)


def _strided(rows: int, cols: int, ld: int, values: np.ndarray) -> np.ndarray:
    out = np.empty((rows, ld), np.float32)[:, :cols]
    out[...] = values
    return out


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint32)


def _specials(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    bits = rng.standard_normal(shape).astype(np.float32).view(np.uint32)
    pick = rng.integers(0, 6, shape)
    sign = rng.integers(0, 2, shape, dtype=np.uint32) << 31
    nan = np.uint32(0x7FC00000) | rng.integers(1, 1 << 22, shape, dtype=np.uint32)
    bits = np.where(pick == 0, nan | sign, bits)
    bits = np.where(pick == 1, np.uint32(0x7F800000) | sign, bits)  # +-inf
    bits = np.where(pick == 2, sign, bits)  # +-0
    bits = np.where(pick == 3, np.uint32(0x5) | sign, bits)  # subnormal
    return bits.view(np.float32)


SHAPES = [(128, 128, 512), (128, 100, 512), (128, 64, 512), (128, 2, 512), (128, 127, 511),
          (7, 9, 13), (64, 100, 96), (130, 128, 700), (128, 1, 512), (1, 128, 512),
          (128, 128, 1)]


@pytest.mark.parametrize(("m", "k", "n"), SHAPES)
@pytest.mark.parametrize("layout", ["psum", "contiguous", "transposed"])
@pytest.mark.parametrize("c_kind", ["finite", "specials"])
def test_the_fused_add_gives_matmul_then_add_bits(m: int, k: int, n: int, layout: str,
                                                  c_kind: str) -> None:
    rng = np.random.default_rng([m, k, n, len(layout), len(c_kind)])
    wt = rng.standard_normal((m, k)).astype(np.float32)
    x = rng.standard_normal((k, n)).astype(np.float32)
    wt[: m // 3, : k // 2] = -0.0  # rows of signed zeros: sums of -0 products
    if layout == "transposed":  # the latched tile's other layout: F-contiguous
        wt = np.asfortranarray(wt)
    c = 4 * rng.standard_normal((m, n)).astype(np.float32) if c_kind == "finite" \
        else _specials(rng, (m, n))
    ld = PSUM_ROW if layout == "psum" and n <= PSUM_ROW else n
    want, got = _strided(m, n, ld, c), _strided(m, n, ld, c)
    with threadpool_limits(limits=1, user_api="blas"):
        _two_calls(want, wt, x)
        fused = blas.accumulate(got, wt, x)
        if not fused:
            _two_calls(got, wt, x)
    assert np.array_equal(_bits(want), _bits(got))
    if 1 in (m, k, n):  # numpy's gemv / dot cases: never handed to the fused call
        assert not fused
    elif blas.available() and k > 2:
        # every other shape is proven and fused where the symbol exists: a probe that
        # wrongly refused would leave this test comparing the two calls with themselves.
        # K = 2 is refused by the probes here (OpenBLAS 0.3.31 sums so short a K another
        # way), and so keeps the two calls, which the bit check above still holds
        assert fused


def test_the_two_calls_keep_cs_nan_and_the_runner_never_fuses_a_nan_product() -> None:
    """The measurement behind the finiteness gate: with C and the product both NaN in a PSUM
    bank's layout, the definition (numpy's matmul, then numpy's add) keeps C's payload, while
    the OpenBLAS kernel measured here (0.3.31) keeps the product's; so the runner fuses only
    products that are surely finite, whatever a given OpenBLAS does with two NaNs."""
    rng = np.random.default_rng(3)
    m, k, n = 128, 128, 512
    wt = rng.standard_normal((m, k)).astype(np.float32)
    wt[:, 0] = np.uint32(0x7FC12345).view(np.float32)
    x = rng.standard_normal((k, n)).astype(np.float32)
    c = np.full((m, n), np.uint32(0x7FC0ABCD).view(np.float32))
    want, got = _strided(m, n, PSUM_ROW, c), _strided(m, n, PSUM_ROW, c)
    with threadpool_limits(limits=1, user_api="blas"):
        _two_calls(want, wt, x)
        fused = blas.accumulate(got, wt, x)
    assert (_bits(want) == 0x7FC0ABCD).all()  # the definition keeps C's NaN, on any build
    assert blas.max_abs(wt) != blas.max_abs(wt)  # NaN: the runner's gate refuses it
    if blas.available():  # numpy's OpenBLAS: a layout proven on finite products ...
        assert fused
        assert np.isnan(got).all()  # ... gives a NaN, whichever payload its kernel keeps
    else:  # another BLAS, or SYSTOLIC_FUSED_SGEMM=0: no fused call, C untouched
        assert not fused and (_bits(got) == 0x7FC0ABCD).all()


def test_max_abs_sees_nan_and_infinity() -> None:
    v = np.array([1.0, -3.0, 2.0], np.float32)
    assert blas.max_abs(v) == 3.0
    v[2] = np.nan
    assert np.isnan(blas.max_abs(v))
    v[1:] = [-np.inf, 1.0]
    assert blas.max_abs(v) == np.inf
    assert blas.max_abs(np.zeros(0, np.float32)) == 0.0
    assert blas.max_abs(np.arange(3)) == np.inf  # not float32: never fused


def _bf16_nan(payload: int) -> np.uint16:
    return np.uint16(0x7F80 | payload)


@pytest.fixture
def count_fused(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many accumulating products took the fused call in this test."""
    counts = [0]
    inner = blas.accumulate

    def counted(view: np.ndarray, wt: np.ndarray, x: np.ndarray) -> bool:
        done = inner(view, wt, x)
        counts[0] += done
        return done

    monkeypatch.setattr(blas, "accumulate", counted)
    return counts


@pytest.mark.parametrize(("dtype", "zero_points"), [("bf16", (0, 0)), ("fp32", (0, 0)),
                                                    ("int8", (3, -2))])
def test_accumulation_groups_with_ragged_k_end_as_the_reference_loop(
        dtype: str, zero_points: tuple[int, int], count_fused: list[int]) -> None:
    # K = 300: groups of three MatMuls (K tiles 128, 128, 44); M 130 and N 700 ragged; fp32
    # adds its two bf16 passes in PSUM; int8 with zero points (exact in fp32)
    m, k, n = 130, 300, 700
    a, b = operands(m, k, n, dtype, seed=3)
    spec = MatmulSpec(m, k, n, dtype, zp_a=zero_points[0], zp_b=zero_points[1])
    ref = run_lowered(spec, a, b, 0)
    got = run_lowered(spec, a, b, 3)
    same_state(got, ref)
    if blas.available() and dtype != "int8":  # integers widen to int64: numpy's own matmul
        assert count_fused[0] > 0  # the fused path ran


def test_nan_payloads_and_overflow_in_groups_end_as_the_reference_loop(
        count_fused: list[int]) -> None:
    # K = 512, four K tiles per group: tile 0 puts NaNs with payloads in PSUM (its START
    # products); tile 1 is finite and adds into them fused; tile 2 overflows (3e38 * 3e38:
    # +-inf) and tile 3 holds other payloads (NaN products): the two calls for both
    m, k, n = 128, 512, 512
    rng = np.random.default_rng(11)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    a[60:64, 300] = 3e38
    b[300, :] = np.where(np.arange(n) % 2, 3e38, -3e38)
    patch = {(r, 5): int(_bf16_nan(0x41 + r % 60)) for r in range(0, m, 3)}
    patch.update({(r, 400): int(_bf16_nan(0x05 + r % 50)) | 0x8000 for r in range(0, m, 2)})
    spec = MatmulSpec(m, k, n, "bf16")
    ref = run_lowered(spec, a, b, 0, patch=patch)
    got = run_lowered(spec, a, b, 3, patch=patch)
    same_state(got, ref)
    out = ref.read_dram(lower(spec, get_arch("trn2")).layout.out_offset, (m, n), "fp32")
    assert np.isnan(out[0]).all() and np.isinf(out[61]).all()
    if blas.available():
        assert count_fused[0] > 0  # tile 1 was fused into NaN-holding PSUM


def test_without_the_symbol_or_after_a_failed_probe_the_two_calls_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    m, k, n = 128, 256, 512
    rng = np.random.default_rng(5)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    spec = MatmulSpec(m, k, n, "bf16")
    ref = run_lowered(spec, a, b, 0)
    for sgemm, probe in (([None], True), (None, False)):
        monkeypatch.setattr(blas, "_proven", {})
        if sgemm is not None:
            monkeypatch.setattr(blas, "_sgemm", sgemm)  # another numpy build: no symbol
        monkeypatch.setattr(blas, "_probe", lambda key, ok=probe: ok)
        got = run_lowered(spec, a, b, 3)
        same_state(got, ref)
        assert blas._proven and not any(blas._proven.values())
    monkeypatch.setenv("SYSTOLIC_FUSED_SGEMM", "0")
    assert blas._load() is None
