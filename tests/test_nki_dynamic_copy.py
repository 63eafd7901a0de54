"""nisa.tensor_copy_dynamic_src and nl.gather_flattened (issue 19): offsets / indices read
from SBUF when the instruction executes (NKI docs, nki.isa.tensor_copy_dynamic_src,
nki.language.gather_flattened)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import first_op_spans

from systolic.arch import get_arch
from systolic.errors import SystolicError
from systolic.isa import AccessPattern, Space, TensorCopyDynamic
from systolic.nki import isa as nisa
from systolic.nki import language as nl
from systolic.nki import simulate_kernel
from systolic.timing.costs import engine_cycles


def _copy_2d_with(*extra):
    """Column offsets[0, i] of src into column i, ``tensor_copy_dynamic_src(src, *extra)``
    (the older API: the copy is returned)."""
    def kernel(src, offsets):
        out = nl.ndarray([128, offsets.shape[1]], dtype=src.dtype, buffer=nl.shared_hbm)
        s = nl.load(src)
        o = nl.load(offsets)
        t = nl.ndarray([128, offsets.shape[1]], dtype=src.dtype, buffer=nl.sbuf)
        ix, iy = nl.mgrid[0:128, 0:1]
        for i in nl.affine_range(offsets.shape[1]):
            t[ix, i] = nisa.tensor_copy_dynamic_src(s[ix, o[0, i] + iy], *extra)
        nl.store(out, value=t)
        return out
    return kernel


_copy_2d = _copy_2d_with()


def _copy_3d(src, offsets):
    n = offsets.shape[1]
    out = nl.ndarray([128, n, 4], dtype=src.dtype, buffer=nl.shared_hbm)
    s = nl.load(src)
    o = nl.load(offsets)
    t = nl.ndarray([128, n, 4], dtype=src.dtype, buffer=nl.sbuf)
    ix, _, iz = nl.mgrid[0:128, 0:1, 0:4]
    for i in nl.affine_range(n):
        t[ix, i, iz] = nisa.tensor_copy_dynamic_src(s[ix, o[0, i], iz])
    nl.store(out, value=t)
    return out


def test_values_2d_several_offsets() -> None:
    rng = np.random.default_rng(0)
    src = rng.random((128, 40), dtype=np.float32)
    offs = np.array([[7, 0, 39, 7, 12]], dtype=np.int32)
    got = simulate_kernel(_copy_2d, src, offs)
    want = np.stack([src[:, k] for k in offs[0]], axis=1)  # column k of each partition
    np.testing.assert_array_equal(got, want)


def test_values_3d() -> None:
    rng = np.random.default_rng(1)
    src = rng.random((128, 16, 4), dtype=np.float32)
    offs = np.array([[3, 15, 0]], dtype=np.int32)
    got = simulate_kernel(_copy_3d, src, offs)
    for j, k in enumerate(offs[0]):
        np.testing.assert_array_equal(got[:, j, :], src[:, k, :])


def test_out_of_range_offset_is_one_line_error() -> None:
    src = np.zeros((128, 40), np.float32)
    with pytest.raises(SystolicError) as e:
        simulate_kernel(_copy_2d, src, np.array([[1, 40]], dtype=np.int32))
    assert "offsets 0..39" in str(e.value) and "\n" not in str(e.value)


def test_cost_at_one_point() -> None:
    # max(MIN_II_DYNAMIC = 600, N): N = 4 elements per partition -> 600; N = 1000 -> 1000
    def ap(n: int, off: int = 0, dt: str = "fp32") -> AccessPattern:
        return AccessPattern(Space.SBUF, 0, 128, off, ((1, n),), dt)
    ins = TensorCopyDynamic(ap(4), AccessPattern(Space.SBUF, 0, 1, 0, ((1, 1),), "int32"),
                            ap(1000), ap(4, 8000), 4, 0, 996)
    assert engine_cycles(ins, get_arch("trn2")) == 600
    big = TensorCopyDynamic(ap(1000), ins.offset, ap(1000), ap(1000, 8000), 4, 0, 0)
    assert engine_cycles(big, get_arch("trn2")) == 1000


def test_verify_refuses_a_window_past_either_end_of_its_region() -> None:
    """The window at every offset lo..hi stays inside ``region`` (what the dependency
    tracker sees): 4 fp32 elements stepping 4 bytes fit a 1000-element region up to offset
    996. Before, only the low end was checked, so hi = 997 passed."""
    from systolic.errors import VerifyError
    from systolic.isa import Program
    from systolic.verify import verify

    def ap(n: int, off: int = 0) -> AccessPattern:
        return AccessPattern(Space.SBUF, 0, 128, off, ((1, n),), "fp32")
    offs = AccessPattern(Space.SBUF, 0, 1, 0, ((1, 1),), "int32")
    verify(Program([TensorCopyDynamic(ap(4), offs, ap(1000), ap(4, 8000), 4, 0, 996)]), "trn2")
    for lo, hi, src in ((0, 997, ap(4)), (-1, 0, ap(4)), (0, 0, ap(4, 3988))):
        with pytest.raises(VerifyError, match="leaves its region"):
            verify(Program([TensorCopyDynamic(src, offs, ap(1000), ap(4, 8000), 4, lo, hi)]),
                   "trn2")


def test_offset_tile_written_first_is_a_dependency() -> None:
    from systolic.isa import ACCESS
    assert ACCESS[TensorCopyDynamic] == (("region", "offset"), ("dst",))


def _gather(data, indices):
    out = nl.ndarray(indices.shape, dtype=data.dtype, buffer=nl.shared_hbm)
    r = nl.gather_flattened(data=nl.load(data), indices=nl.load(indices))
    nl.store(out, value=r)
    return out


def test_gather_flattened_values_and_range() -> None:
    rng = np.random.default_rng(2)
    data = rng.random((32, 64), dtype=np.float32)
    idx = rng.integers(0, 64, (32, 10)).astype(np.uint32)
    got = simulate_kernel(_gather, data, idx)
    want = np.array([[data[p, idx[p, j]] for j in range(10)] for p in range(32)])
    np.testing.assert_array_equal(got, want)
    idx[3, 4] = 64
    with pytest.raises(SystolicError, match="index 64 at partition 3"):
        simulate_kernel(_gather, data, idx)


def test_a_copy_waits_for_the_load_of_its_offsets() -> None:
    """The offset is a value in SBUF: every dynamic copy starts after the DMA that writes
    the offsets tile ends (ACCESS lists ``offset`` among its reads), and after the load of
    the tile it copies from; none starts before both."""
    import systolic.nki as snki
    from systolic.isa import DmaCopy
    from systolic.nki.timing import time_recorded

    snki.install("trn2")
    src = np.zeros((128, 40), np.float32)
    offs = np.zeros((1, 5), np.int32)
    rec = snki.record(_copy_2d, [src, offs])
    prog = list(rec.program)
    timing = time_recorded(rec)
    span = first_op_spans(timing)
    loads = [i for i, ins in enumerate(prog) if isinstance(ins, DmaCopy)
             and ins.dst.space is Space.SBUF]
    copies = [i for i, ins in enumerate(prog) if isinstance(ins, TensorCopyDynamic)]
    assert len(loads) == 2 and len(copies) == 5
    offset_load = next(i for i in loads if prog[i].dst.dtype == "int32")
    data_load = next(i for i in loads if i != offset_load)
    for c in copies:
        start = span[c][0]
        assert start >= span[offset_load][1]
        assert start >= span[data_load][1]


def _copy_on(engine):
    def kernel(src, offsets):
        out = nl.ndarray([128, 1], dtype=src.dtype, buffer=nl.shared_hbm)
        s = nl.load(src)
        o = nl.load(offsets)
        t = nl.ndarray([128, 1], dtype=src.dtype, buffer=nl.sbuf)
        ix, iy = nl.mgrid[0:128, 0:1]
        t[ix, 0] = nisa.tensor_copy_dynamic_src(s[ix, o[0, 0] + iy], engine=engine)
        nl.store(out, value=t)
        return out
    return kernel


def test_the_engine_asked_for_is_the_engine_used() -> None:
    """``engine=`` is an nisa.engine member, taken as it is (the Scalar engine's copy is
    recorded on Scalar); the Tensor Engine is refused in one line (it was silently taken
    for the Vector engine)."""
    import systolic.nki as snki
    from systolic.errors import KernelError
    from systolic.isa import Engine

    snki.install("trn2")
    src, offs = np.zeros((128, 8), np.float32), np.zeros((1, 1), np.int32)
    rec = snki.record(_copy_on(nisa.engine.scalar), [src, offs])
    (copy,) = [i for i in rec.program if isinstance(i, TensorCopyDynamic)]
    assert copy.engine is Engine.SCALAR
    with pytest.raises(KernelError, match="not the Tensor Engine") as exc:
        snki.record(_copy_on(nisa.engine.tensor), [src, offs])
    assert "\n" not in str(exc.value)


def test_the_older_call_takes_its_dtype_by_position() -> None:
    """``tensor_copy_dynamic_src(src, nl.float32)`` returns a tile (the older API); it was
    read as the current ``(dst, src)`` because it has two arguments."""
    src = np.arange(128 * 40, dtype=np.float32).reshape(128, 40)
    offs = np.array([[3, 17, 39]], dtype=np.int32)
    got = simulate_kernel(_copy_2d_with(nl.float32), src, offs)  # src is fp32 too
    np.testing.assert_array_equal(got, src[:, [3, 17, 39]])


def _gather_masked(data, indices):
    out = nl.ndarray(indices.shape, dtype=data.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(32)[:, None]
    r = nl.gather_flattened(data=nl.load(data), indices=nl.load(indices), mask=(i_p < 16))
    nl.store(out, value=r)
    return out


def test_a_partial_mask_on_a_gather_is_refused_not_ignored() -> None:
    """Before, the mask was checked and dropped: every partition was gathered."""
    data = np.zeros((32, 64), np.float32)
    idx = np.zeros((32, 10), np.uint32)
    with pytest.raises(SystolicError, match="a mask that leaves out part of the tile"):
        simulate_kernel(_gather_masked, data, idx)
