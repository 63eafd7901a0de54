"""NKI surface of the public kernels (issue 19): tensor_tensor_scan, reciprocal, numpy-style
broadcasting of Python operators, index expressions over two iteration axes, a tile indexed
by an ``nl.mgrid``, nki.baremetal, and the one line for a name the model lacks. Every value
is compared with float64 numpy under a stated bound."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import kernel_values, opcodes, record_source, write_kernel

import systolic.nki as snki
from systolic.arch import get_arch
from systolic.errors import KernelError
from systolic.isa.instructions import Reciprocal, TensorTensorScan
from systolic.timing.costs import engine_cycles

TRN2 = get_arch("trn2")
F32_EPS = 2.0 ** -24  # fp32 unit roundoff


@pytest.fixture(autouse=True)
def _hook():
    snki.install("trn2")


SCAN = '''
import numpy as np
@nki.jit
def k(a, b, init):
    out = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    y = nl.load(b)
    i0 = nl.load(init)
    c = nl.ndarray(a.shape, dtype=nl.float32)
    c[:, 0:256] = nisa.tensor_tensor_scan(x[:, 0:256], y[:, 0:256], initial=i0,
                                          op0=np.multiply, op1=np.add)
    c[:, 256:512] = nisa.tensor_tensor_scan(x[:, 256:512], y[:, 256:512],
                                            initial=c[:, 255], op0=np.multiply, op1=np.add)
    nl.store(out, c)
    return out
'''


def test_tensor_tensor_scan_is_the_fp32_recurrence(tmp_path) -> None:
    """y[j] = a[j] * y[j-1] + b[j] (mamba's scan), y[-1] = init. Reference: the recurrence
    in float64. Each fp32 step adds at most 2 roundings (multiply, add); with |a| <= 1 an
    error stays bounded by 2 u sum |terms| per step (Higham 3.1): |err| <= 2 u * n *
    max running |y| + |b| sums, here bounded as 4 u n max(|y|+|b|)."""
    rng = np.random.default_rng(3)
    a = rng.uniform(0.5, 1.0, (128, 512)).astype(np.float32)
    b = rng.normal(0, 1, (128, 512)).astype(np.float32)
    init = rng.normal(0, 1, (128, 1)).astype(np.float32)
    got = np.asarray(kernel_values(tmp_path, SCAN, a, b, init), dtype=np.float64)
    y = init[:, 0].astype(np.float64)
    want = np.empty((128, 512))
    for j in range(512):  # the float64 reference recurrence, one column at a time
        y = a[:, j] * y + b[:, j]
        want[:, j] = y
    scale = np.abs(want).max() + np.abs(b).max()
    assert np.abs(got - want).max() <= 4 * F32_EPS * 512 * scale


def test_scan_and_reciprocal_cost_their_documented_cycles(tmp_path) -> None:
    """nki.isa (aws-neuron-sdk 7c165a3e): tensor_tensor_scan max(MIN_II, 2N), reciprocal
    max(MIN_II, 8N) Vector cycles, N elements per partition."""
    rec = record_source(tmp_path, SCAN, ["fp32[128,512]", "fp32[128,512]", "fp32[128,1]"])
    scans = [i for i in rec.program if isinstance(i, TensorTensorScan)]
    assert len(scans) == 2 and [engine_cycles(s, TRN2) for s in scans] == [512, 512]
    body = '''
@nki.jit
def k(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nisa.reciprocal(nl.load(a)))
    return out
'''
    rec = record_source(tmp_path, body, ["fp32[128,100]"])
    (r,) = [i for i in rec.program if isinstance(i, Reciprocal)]
    assert engine_cycles(r, TRN2) == 800


def test_reciprocal_of_an_mgrid_indexed_tile(tmp_path) -> None:
    """nisa.reciprocal in fp32 is correctly rounded: within 1/2 ulp of float64 1/x."""
    body = '''
@nki.jit
def k(a):
    out = nl.ndarray([128, 512], dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a[nl.mgrid[0:128, 0:512]])
    nl.store(out[nl.mgrid[0:128, 0:512]], value=nisa.reciprocal(x))
    return out
'''
    x = (np.random.default_rng(0).random((128, 512)) * 100 + 0.01).astype(np.float32)
    got = np.asarray(kernel_values(tmp_path, body, x), dtype=np.float64)
    want = 1.0 / x.astype(np.float64)
    assert np.all(np.abs(got - want) <= F32_EPS * np.abs(want))


@pytest.mark.parametrize("bshape", [(128, 1), (1, 512), (1, 1)])
def test_operators_broadcast_as_numpy(tmp_path, bshape) -> None:
    """a + b with b [128, 1], [1, 512] or [1, 1] is numpy's broadcast: one fp32 add,
    correctly rounded (within 1/2 ulp of the float64 sum)."""
    body = f'''
@nki.jit
def k(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    y = nl.load(b[0:{bshape[0]}, 0:{bshape[1]}])
    nl.store(out, nl.add(x, y))
    return out
'''
    rng = np.random.default_rng(5)
    a = rng.normal(0, 10, (128, 512)).astype(np.float32)
    b = rng.normal(0, 10, bshape).astype(np.float32)
    got = np.asarray(kernel_values(tmp_path, body, a, b), dtype=np.float64)
    want = a.astype(np.float64) + b
    assert np.all(np.abs(got - want) <= F32_EPS * np.abs(want))


def test_broadcast_both_ways(tmp_path) -> None:
    """[128, 1] + [1, 512] -> [128, 512]: the outer sum (numpy), within 1/2 ulp."""
    body = '''
@nki.jit
def k(a, b):
    out = nl.ndarray([128, 512], dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a) + nl.load(b))
    return out
'''
    rng = np.random.default_rng(6)
    a = rng.normal(0, 1, (128, 1)).astype(np.float32)
    b = rng.normal(0, 1, (1, 512)).astype(np.float32)
    got = np.asarray(kernel_values(tmp_path, body, a, b), dtype=np.float64)
    want = a.astype(np.float64) + b
    assert np.all(np.abs(got - want) <= F32_EPS * np.abs(want))


def test_a_broadcast_of_a_tile_computed_on_chip_is_one_line(tmp_path) -> None:
    body = '''
@nki.jit
def k(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    y = nl.exp(nl.load(b))
    nl.store(out, nl.load(a) + y)
    return out
'''
    with pytest.raises(KernelError, match=r"k\.py:\d+: broadcast_to of a tile computed on "
                                          r"chip is not modelled") as e:
        record_source(tmp_path, body, ["fp32[128,64]", "fp32[1,64]"])
    assert "\n" not in str(e.value)


def test_two_iteration_axes_in_one_index_transpose_the_free_axes(tmp_path) -> None:
    """out[p, f2 * F1 + f1] = in[p, f1 * F2 + f2] (the transpose2d tutorial): exact."""
    body = '''
@nki.jit
def k(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    i_p = nl.arange(a.shape[0])[:, None, None]
    i_1 = nl.arange(3)[None, :, None]
    i_2 = nl.arange(4)[None, None, :]
    o = nl.ndarray(shape=(a.shape[0], 12), dtype=a.dtype)
    o[i_p, i_2 * 3 + i_1] = nl.copy(t[i_p, i_1 * 4 + i_2])
    nl.store(out, value=o)
    return out
'''
    a = np.arange(5 * 12, dtype=np.float32).reshape(5, 12)
    got = np.asarray(kernel_values(tmp_path, body, a))
    assert np.array_equal(got, a.reshape(5, 3, 4).transpose(0, 2, 1).reshape(5, 12))


def test_iota_of_a_partition_plus_free_expression(tmp_path) -> None:
    """iota(expr_a + expr_b): e[p, j] = p + j (exact in fp32)."""
    body = '''
@nki.jit
def k():
    out = nl.ndarray([128, 64], dtype=nl.float32, buffer=nl.shared_hbm)
    e = nisa.iota(nl.arange(0, 64)[None, :] + nl.arange(0, 128)[:, None] * 2 + 7,
                  dtype=nl.float32)
    nl.store(out, e)
    return out
'''
    got = np.asarray(kernel_values(tmp_path, body))
    assert np.array_equal(got, 7 + 2 * np.arange(128)[:, None] + np.arange(64)[None, :])


def test_a_name_the_model_lacks_is_one_line_naming_it(tmp_path) -> None:
    body = '''
@nki.jit
def k(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nisa.frobnicate(a)
    return out
'''
    with pytest.raises(KernelError, match=r"k\.py:\d+: nisa\.frobnicate is not modelled") as e:
        record_source(tmp_path, body, ["fp32[128,64]"])
    assert "\n" not in str(e.value)
    import nki.language as nl

    assert not hasattr(nl, "frobnicate")  # still an AttributeError for hasattr


def test_baremetal_runs_the_kernel(tmp_path) -> None:
    import nki

    kern = snki.load_kernel(str(write_kernel(tmp_path, _DOUBLE)), "k")
    a = np.random.default_rng(0).normal(0, 1, (128, 32)).astype(np.float32)
    assert np.array_equal(nki.baremetal(kern)(a), a * 2)  # x2 is exact
    assert "TensorTensorScan" not in opcodes(snki.record(kern, [a]))


_DOUBLE = '''
@nki.jit
def k(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.load(a) * 2.0)
    return out
'''


def test_profile_writes_each_profiled_executions_files(tmp_path) -> None:
    """nki.profile (nki-samples' test_neuron_profile: 20 runs, every 10th profiled): the
    Program's text at save_neff_name, a trace for executions 10 and 20, a JSON summary of
    each in json_reports/; returns None. Without overwrite=True a second profile into the
    same directory is refused in one line and changes nothing; with it, it writes again."""
    import json

    import nki

    from systolic.artifacts import ArtifactError

    kern = snki.load_kernel(str(write_kernel(tmp_path, _DOUBLE)), "k")
    a = np.ones((128, 32), np.float32)
    wd = tmp_path / "profiles"
    prof = nki.profile(working_directory=str(wd), save_neff_name="cus.neff",
                       save_trace_name="profile-custom.ntff", num_execs=20,
                       profile_nth=10)(kern)
    assert prof(a) is None
    traces = ["profile-custom_exec_10.ntff", "profile-custom_exec_20.ntff"]
    assert sorted(p.name for p in wd.iterdir()) == sorted(["cus.neff", "json_reports",
                                                           *traces])
    reports = sorted((wd / "json_reports").iterdir())
    assert [r.name for r in reports] == [t.replace(".ntff", ".json") for t in traces]
    latency = json.loads(reports[0].read_text())["latency_us"]
    assert latency == snki.time_recorded(snki.record(kern, [a])).latency_us > 0
    assert json.loads((wd / traces[1]).read_text())["otherData"]["latency_us"] == latency
    before = {p: p.stat().st_mtime_ns for p in wd.rglob("*")}
    with pytest.raises(ArtifactError, match=r"already there.*overwrite=True") as e:
        prof(a)
    assert "\n" not in str(e.value)
    assert {p: p.stat().st_mtime_ns for p in wd.rglob("*")} == before
    for p in [wd / "cus.neff", *(wd / t for t in traces), *reports]:
        p.write_text("stale")
    nki.profile(working_directory=str(wd), save_neff_name="cus.neff",
                save_trace_name="profile-custom.ntff", num_execs=20, profile_nth=10,
                overwrite=True)(kern)(a)
    assert json.loads(reports[1].read_text())["latency_us"] == latency  # written again
    assert json.loads((wd / traces[0]).read_text())["otherData"]["latency_us"] == latency
    assert "stale" not in (wd / "cus.neff").read_text()
    # the first execution's trace keeps the plain name (profile_nth=1, the default)
    nki.profile(working_directory=str(tmp_path / "one"))(kern)(a)
    assert (tmp_path / "one" / "profile.ntff").is_file()


@pytest.mark.parametrize("options, match", [
    ({}, r"working_directory=, an absolute path"),
    ({"working_directory": "rel/dir"}, r"working_directory=, an absolute path"),
    ({"working_directory": "/tmp", "profile_nth": 0}, r"profile_nth= is a whole number"),
    ({"working_directory": "/tmp", "save_trace_name": "a/b.ntff"},
     r"save_trace_name= is a file name"),
    ({"working_directory": "/tmp", "overwrite": "yes"}, r"overwrite= is True or False"),
    ({"working_directory": "/tmp", "frobnicate": 1}, r"no option 'frobnicate'"),
])
def test_profile_options_are_checked_when_the_decorator_is_made(options, match) -> None:
    import nki

    from systolic.errors import SystolicError

    with pytest.raises(SystolicError, match=match) as e:
        nki.profile(**options)
    assert "\n" not in str(e.value)


def test_lazy_results_read_what_is_being_written_after_it(tmp_path) -> None:
    """The SD-attention tutorial's order: a bias (lazy) materialised while the activation
    that uses it is being written, and a later lazy reduction of that activation: the
    reduction is recorded after the activation. Softmax against float64 within fp32
    rounding of a few operations (8 u relative)."""
    body = '''
import numpy as np
@nki.jit
def k(a):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    m = nisa.tensor_reduce(np.max, data=x, axis=(1,), negate=True)
    e = nisa.activation(np.exp, data=x, bias=m, scale=1.0)
    s = nisa.tensor_reduce(np.add, data=e, axis=(1,))
    o = nl.ndarray((128, 64), dtype=nl.float32)
    o[...] = nl.copy(e, dtype=nl.float32)
    r = (1.0 / s).broadcast_to((128, 64))
    nl.store(out, o * r)
    return out
'''
    a = np.random.default_rng(2).normal(0, 2, (128, 64)).astype(np.float32)
    got = np.asarray(kernel_values(tmp_path, body, a), dtype=np.float64)
    w = np.exp(a.astype(np.float64) - a.max(axis=1, keepdims=True))
    want = w / w.sum(axis=1, keepdims=True)
    assert np.all(np.abs(got - want) <= 8 * F32_EPS * np.abs(want) + 64 * F32_EPS * want.max())


def test_zeros_like_empty_like_dge_mode_device_print(tmp_path) -> None:
    """zeros_like is a memset of zeros (exact); empty_like a tensor of the same shape and
    dtype; dge_mode changes nothing; device_print records nothing."""
    body = '''
@nki.jit
def k(a):
    out = nl.empty_like(a, buffer=nl.shared_hbm)
    t = nl.load(a)
    nl.device_print("t", t)
    z = nl.zeros_like(t, buffer=nl.sbuf)
    nisa.dma_copy(dst=z, src=t, dge_mode=nisa.dge_mode.hwdge)
    nl.store(out, z + 1.0)
    return out
'''
    a = np.random.default_rng(4).normal(0, 1, (128, 32)).astype(np.float32)
    got = np.asarray(kernel_values(tmp_path, body, a), dtype=np.float64)
    assert np.all(np.abs(got - (a.astype(np.float64) + 1)) <= F32_EPS * np.abs(a + 1.0))


def test_indexing_with_a_tile_is_one_line_without_a_repr(tmp_path) -> None:
    body = '''
@nki.jit
def k(a, idx):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.load(idx)
    nl.store(out, nl.load(a[i, 0:32]))
    return out
'''
    # an indirect DMA runs since issue 19g (tests/test_nki_indirect.py); float indices do not
    with pytest.raises(KernelError, match=r"k\.py:\d+: the indices of an indirect DMA are "
                                          r"int32 or uint32") as e:
        record_source(tmp_path, body, ["fp32[128,32]", "fp32[128,1]"])
    assert " at 0x" not in str(e.value) and "\n" not in str(e.value)


def test_static_cast_rounds_host_arrays_and_benchmark_takes_a_grid(tmp_path) -> None:
    """nl.static_cast(array, nl.bfloat16) is ml_dtypes' round-to-nearest-even from fp32;
    benchmark(kernel)[grid] times the SPMD launch (its latency is positive)."""
    import ml_dtypes
    import nki
    import nki.language as nl

    x = np.random.default_rng(9).normal(0, 1, (4, 8))
    got = nl.static_cast(x, nl.bfloat16)
    assert got.dtype == ml_dtypes.bfloat16
    assert np.array_equal(got.astype(np.float32),
                          x.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float32))
    body = '''
@nki.jit
def k(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    nl.store(out[i * 128:(i + 1) * 128, :], nl.load(a[i * 128:(i + 1) * 128, :]) * 2.0)
    return out
'''
    kern = snki.load_kernel(str(write_kernel(tmp_path, body)), "k")
    bench = nki.benchmark(warmup=1, iters=1)(kern)[2]
    bench(np.zeros((256, 64), dtype=np.float32))
    assert bench.benchmark_result.nc_latency.get_latency_percentile(50) > 0


def test_full_fp32_min_and_a_baremetal_grid(tmp_path) -> None:
    """nl.full fills with its value exactly (nl.fp32.min is 0xff7fffff); baremetal(k)[2]
    runs both instances, each doubling its half (exact)."""
    import nki

    body = '''
@nki.jit
def k(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    i = nl.program_id(0)
    f = nl.full((128, 64), fill_value=nl.fp32.min, dtype=nl.float32)
    t = nl.load(a[i * 128:(i + 1) * 128, :])
    nl.store(out[i * 128:(i + 1) * 128, :], nl.maximum(t * 2.0, f))
    return out
'''
    kern = snki.load_kernel(str(write_kernel(tmp_path, body)), "k")
    a = np.random.default_rng(1).normal(0, 1, (256, 64)).astype(np.float32)
    assert np.array_equal(nki.baremetal(kern)[2](a), a * 2)
    assert np.float32(snki.language.fp32.min).view(np.uint32) == 0xFF7FFFFF


VERSION = '''
@nki.jit
def k(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    if nisa.get_nc_version() >= nisa.nc_version.gen3:
        nl.store(out, nl.multiply(t, 3.0))
    else:
        nl.store(out, nl.multiply(t, 2.0))
    return out
'''


@pytest.mark.parametrize(("arch", "factor"), [("trn1", 2.0), ("trn2", 3.0), ("trn3", 3.0)])
def test_get_nc_version_is_the_target_s_generation(tmp_path: Path, arch: str,
                                                   factor: float) -> None:
    # the nki-samples kernels branch on it (gen3 takes the DMA transpose); NKI docs:
    # gen2 Trn1/Inf2, gen3 Trn2, gen4 Trn3
    snki.install(arch)
    try:
        a = np.arange(128 * 8, dtype=np.float32).reshape(128, 8)
        got = kernel_values(tmp_path, VERSION, a)
        np.testing.assert_array_equal(got, factor * a)
    finally:
        snki.install("trn2")
    import systolic.nki.isa as nisa

    assert [int(v) for v in nisa.nc_version] == [2, 3, 4]


def test_finfo_is_the_format_s_limits() -> None:
    import systolic.nki.language as nl

    # bf16: 8 exponent bits, 7 mantissa bits: lowest finite -(2 - 2^-7) * 2^127
    assert float(nl.finfo(nl.bfloat16).min) == -(2 - 2**-7) * 2.0**127
    assert float(nl.finfo(nl.float32).max) == (2 - 2**-23) * 2.0**127
    assert float(nl.finfo(nl.float8_e4m3).max) == 240.0  # IEEE-style e4m3: 1.875 * 2^7
    with pytest.raises(KernelError, match="floating-point"):
        nl.finfo(nl.int32)


FULL_MIN = '''
@nki.jit
def k(a):
    out = nl.ndarray((128, 4), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    t = nl.full((128, 4), dtype=nl.bfloat16, buffer=nl.sbuf,
                fill_value=nl.finfo(nl.bfloat16).min)
    nl.store(out, t)
    return out
'''


def test_full_takes_the_format_s_own_scalar(tmp_path: Path) -> None:
    """``nl.full(fill_value=nl.finfo(nl.bfloat16).min)`` (nki-samples' select_and_scatter):
    the limit is an ml_dtypes.bfloat16 scalar, a number; it was refused as 'not a number'."""
    import ml_dtypes

    got = np.asarray(kernel_values(tmp_path, FULL_MIN, np.zeros((1,), np.float32)), np.float64)
    assert got.shape == (128, 4)
    assert np.all(got == float(ml_dtypes.finfo(ml_dtypes.bfloat16).min))


def test_mgrid_names_four_dimensions() -> None:
    """``.p .x .y .z`` are dimensions 1 to 4 of ``nl.mgrid`` (select_and_scatter reads
    ``window.z``); a name past the grid's dimensions is one line, not an IndexError."""
    import systolic.nki.language as nl

    g = nl.mgrid[0:128, 0:3, 0:5, 0:7]
    assert [a.size for a in (g.p, g.x, g.y, g.z)] == [128, 3, 5, 7]
    with pytest.raises(KernelError, match=r"2 dimension\(s\) has no \.y"):
        _ = nl.mgrid[0:128, 0:4].y


def test_numpy_scalars_are_numbers_everywhere(tmp_path) -> None:
    """np.float32 operands (kernels compute them with numpy: ``np.float32(1 / d)``) are
    numbers as Python floats are: a tensor_scalar operand, an activation scale, a memset
    by assignment, affine_select's fill. Every value here is exact in fp32."""
    body = '''
@nki.jit
def k(a):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    x = nl.load(a)
    y = nisa.tensor_scalar(x, np.multiply, np.float32(3.0))
    z = nisa.activation(op=nl.copy, data=y, scale=np.float32(0.5))
    t = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    t[...] = np.float32(2.0)
    i_p, i_f = nl.mgrid[0:128, 0:8]
    s = nisa.affine_select(i_p >= i_f, nl.add(z, t), np.float32(-1.0))
    nl.store(out, s)
    return out
'''
    a = np.arange(128 * 8, dtype=np.float32).reshape(128, 8)
    got = kernel_values(tmp_path, "import numpy as np\n" + body, a)
    i_p, i_f = np.mgrid[0:128, 0:8]
    assert np.array_equal(got, np.where(i_p >= i_f, a * 1.5 + 2, -1.0))
