"""Every NKI constraint fires at the kernel's own file and line, as a KernelError."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import systolic.nki as snki
from systolic.errors import KernelError, SystolicError

HEAD = "import nki\nimport nki.isa as nisa\nimport nki.language as nl\n\n"

# name -> (kernel body where the line marked "# HERE" must be reported, message part, arch)
CASES: dict[str, tuple[str, str, str]] = {
    "partition_over_128": ("""
    t = nl.ndarray((256, 64), dtype=nl.bfloat16, buffer=nl.sbuf)  # HERE
""", "partition dimension 256 exceeds 128", "trn2"),
    "stationary_free_over_128": ("""
    a = nl.ndarray((128, 256), dtype=nl.bfloat16, buffer=nl.sbuf)
    b = nl.ndarray((128, 512), dtype=nl.bfloat16, buffer=nl.sbuf)
    p = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=p, stationary=a, moving=b)  # HERE
""", "stationary free size 256 exceeds 128", "trn2"),
    "moving_free_over_512": ("""
    a = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.sbuf)
    b = nl.ndarray((128, 1024), dtype=nl.bfloat16, buffer=nl.sbuf)
    p = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=p, stationary=a, moving=b)  # HERE
""", "moving free size 1024 exceeds 512", "trn2"),
    "dst_not_psum": ("""
    a = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.sbuf)
    b = nl.ndarray((128, 512), dtype=nl.bfloat16, buffer=nl.sbuf)
    p = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.nc_matmul(dst=p, stationary=a, moving=b)  # HERE
""", "dst is in sbuf; it must be in PSUM", "trn2"),
    "dst_spans_banks": ("""
    a = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.sbuf)
    b = nl.ndarray((128, 512), dtype=nl.bfloat16, buffer=nl.sbuf)
    p = nl.ndarray((128, 1024), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=p[:, 256:768], stationary=a, moving=b)  # HERE
""", "spans two PSUM banks", "trn2"),
    "fp32_mixed": ("""
    a = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    b = nl.ndarray((128, 512), dtype=nl.bfloat16, buffer=nl.sbuf)
    p = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=p, stationary=a, moving=b)  # HERE
""", "fp32 operands pair only with fp32", "trn2"),
    "double_row_gen2": ("""
    a = nl.ndarray((128, 2, 128), dtype=nl.float8_e4m3, buffer=nl.sbuf)
    b = nl.ndarray((128, 2, 512), dtype=nl.float8_e4m3, buffer=nl.sbuf)
    p = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=p, stationary=a, moving=b, perf_mode="double_row")  # HERE
""", "needs NeuronCore-v3", "trn1"),
    "double_row_column_tiling": ("""
    a = nl.ndarray((128, 2, 64), dtype=nl.float8_e4m3, buffer=nl.sbuf)
    b = nl.ndarray((128, 2, 512), dtype=nl.float8_e4m3, buffer=nl.sbuf)
    p = nl.ndarray((64, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=p, stationary=a, moving=b, perf_mode="double_row",  # HERE
                   tile_size=(128, 64))
""", "cannot be combined with column tiling", "trn2"),
    "tile_position_not_multiple": ("""
    a = nl.ndarray((32, 32), dtype=nl.bfloat16, buffer=nl.sbuf)
    b = nl.ndarray((32, 512), dtype=nl.bfloat16, buffer=nl.sbuf)
    p = nl.ndarray((32, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=p, stationary=a, moving=b, tile_position=(16, 0),  # HERE
                   tile_size=(32, 32))
""", "must be a multiple of tile_size 32", "trn2"),
    "gpsimd_on_psum": ("""
    p = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    s = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=s, src=p, engine=nisa.engine.gpsimd)  # HERE
""", "GpSimd cannot access", "trn2"),
    "shapes_do_not_match": ("""
    s = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    t = nl.ndarray((128, 256), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=t, src=s)  # HERE
""", "do not match", "trn2"),
    "mx_before_gen4": ("""
    nisa.nc_matmul_mx(None, None, None, None, None)  # HERE
""", "needs NeuronCore-v4", "trn2"),
    "sbuf_exhausted": ("""
    tiles = []
    for i in range(8):
        t = nl.ndarray((128, 16384), dtype=nl.float32, buffer=nl.sbuf)  # HERE
        nisa.memset(dst=t, value=0.0)
        tiles.append(t)
    for t in tiles:
        nisa.tensor_copy(dst=t, src=t)
""", "SBUF is full", "trn2"),
    "psum_exhausted": ("""
    tiles = []
    for i in range(9):
        t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)  # HERE
        nisa.memset(dst=t, value=0.0)
        tiles.append(t)
    for t in tiles:
        nisa.tensor_copy(dst=t, src=t)
""", "PSUM is full", "trn2"),
}


@pytest.fixture(autouse=True)
def _hook():
    snki.install("trn2")


@pytest.mark.parametrize("name", sorted(CASES))
def test_error_names_the_kernel_line(tmp_path: Path, name: str) -> None:
    body, message, arch = CASES[name]
    src = HEAD + "@nki.jit\ndef k(x):\n" + body + "    return x\n"
    path = tmp_path / f"{name}.py"
    path.write_text(src)
    line = next(i for i, t in enumerate(src.splitlines(), 1) if "# HERE" in t)
    kernel = snki.load_kernel(str(path), "k")
    with pytest.raises(KernelError) as exc:
        snki.record(kernel, [np.zeros((128, 8), np.float32)], arch=arch)
    assert (exc.value.path, exc.value.line) == (str(path), line)
    assert message in exc.value.message
    assert str(exc.value).startswith(f"{path}:{line}: ")
    assert isinstance(exc.value, SystolicError)


def test_sbuf_overflow_is_reported_not_wrapped(tmp_path: Path) -> None:
    """Tiles that fit one at a time reuse space; the same tiles all alive do not fit."""
    path = tmp_path / "k.py"
    path.write_text(HEAD + '''
@nki.jit
def k(x, alive):
    out = nl.ndarray((128, 16384), dtype=nl.float32, buffer=nl.shared_hbm)
    keep = []
    for i in range(8):
        t = nl.ndarray((128, 16384), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        keep.append(t)
        if not alive:
            nisa.dma_copy(dst=out, src=t)
    if alive:
        for t in keep:
            nisa.dma_copy(dst=out, src=t)
    return out
''')
    kernel = snki.load_kernel(str(path), "k")
    x = np.ones((128, 16384), np.float32)
    rec = snki.record(kernel, [x], {"alive": False})
    starts = {i.dst.offset for i in rec.program if i.dst.space.value == "SBUF"}
    assert starts == {0}  # each tile reuses the space of the previous one
    with pytest.raises(KernelError, match="SBUF is full"):
        snki.record(kernel, [x], {"alive": True})


def test_nothing_half_written(tmp_path: Path) -> None:
    """A failing kernel leaves no recorder behind: the next kernel records cleanly."""
    import sys

    rec_mod = sys.modules["systolic.nki.record"]

    path = tmp_path / "k.py"
    path.write_text(HEAD + "@nki.jit\ndef k(x):\n    assert x.shape[0] == 1, 'bad'\n")
    with pytest.raises(KernelError, match="assertion failed: bad"):
        snki.record(snki.load_kernel(str(path), "k"), [np.zeros((128, 8), np.float32)])
    assert rec_mod._STACK.items == []  # this thread's recorders: none left


def test_hook_resolves_both_generations() -> None:
    import neuronxcc.nki.isa as old_isa
    import neuronxcc.nki.language as old_nl
    import nki.isa

    assert nki.isa.nc_matmul is old_isa.nc_matmul is snki.isa.nc_matmul
    assert old_nl.bfloat16 == ml_dtypes.bfloat16



def test_cli_error_names_the_kernel_file_as_the_user_wrote_it(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The loader would make the path absolute; the error names it as typed (relative)."""
    from pathlib import Path

    from systolic.cli import main

    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    rel = "examples/kernels/fp8_double_row.py"
    code = main(["kernel", f"{rel}:fp8_double_row", "--arch", "trn1",
                 "--arg", "lhsT=fp8_e4m3[256,128]", "--arg", "rhs=fp8_e4m3[256,512]"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"systolic: error: {rel}:"), err


# -- bad keywords and values (issue 22): one line naming the call and the kernel line --------
_MM = """
    a = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.sbuf)
    b = nl.ndarray((128, 512), dtype=nl.bfloat16, buffer=nl.sbuf)
    p = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.memset(dst=a, value=1.0)
    nisa.memset(dst=b, value=1.0)
"""
_T = "    t = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)\n"
# name -> (kernel body with the "# HERE" line, the words the message must contain)
BAD_CALLS: dict[str, tuple[str, tuple[str, ...]]] = {
    "memset_without_value": (_T + "    nisa.memset(dst=t)  # HERE\n",
                             ("memset", "missing", "value")),
    "memset_without_dst": ("    nisa.memset(value=1.0)  # HERE\n", ("memset", "dst")),
    "memset_value_not_a_number": (_T + "    nisa.memset(dst=t, value='1')  # HERE\n",
                                  ("memset", "number")),
    "nc_matmul_without_moving": (_MM + "    nisa.nc_matmul(dst=p, stationary=a)  # HERE\n",
                                 ("nc_matmul", "missing", "moving")),
    "nc_matmul_old_api_without_moving": (_MM + "    r = nisa.nc_matmul(a)  # HERE\n",
                                         ("nc_matmul", "moving")),
    "perf_mode_int": (_MM + "    nisa.nc_matmul(dst=p, stationary=a, moving=b, "
                      "perf_mode=128)  # HERE\n", ("nc_matmul", "perf_mode=128")),
    "perf_mode_tuple": (_MM + "    nisa.nc_matmul(dst=p, stationary=a, moving=b, "
                        "perf_mode=(0, 0))  # HERE\n", ("nc_matmul", "perf_mode=(0, 0)")),
    "perf_mode_unknown_name": (_MM + "    nisa.nc_matmul(dst=p, stationary=a, moving=b, "
                               "perf_mode='fast')  # HERE\n", ("nc_matmul", "'fast'")),
    "tile_position_bool": (_MM + "    nisa.nc_matmul(dst=p, stationary=a, moving=b, "
                           "tile_position=True)  # HERE\n", ("nc_matmul", "tile_position=True")),
    "tile_size_strings": (_MM + "    nisa.nc_matmul(dst=p, stationary=a, moving=b, "
                          "tile_size=('a', 'b'))  # HERE\n", ("nc_matmul", "tile_size")),
    "tensor_tensor_without_op": (_T + "    nisa.tensor_tensor(dst=t, data1=t, data2=t)"
                                 "  # HERE\n", ("tensor_tensor", "missing", "op")),
    "tensor_tensor_old_api_without_op": (_T + "    r = nisa.tensor_tensor(t, t)  # HERE\n",
                                         ("tensor_tensor", "op")),
    "tensor_tensor_unknown_op": (_T + "    nisa.tensor_tensor(dst=t, data1=t, data2=t, "
                                 "op='pow')  # HERE\n", ("tensor_tensor", "'pow'")),
    "tensor_copy_without_src": (_T + "    nisa.tensor_copy(dst=t)  # HERE\n",
                                ("tensor_copy", "src")),
    "slice_step_zero": (_T + "    v = t[0:128:0]  # HERE\n", ("slice 0:128:0",)),
    "slice_float_bound": (_T + "    v = t[:, 0:1.5]  # HERE\n", ("slice 0:1.5",)),
    "mgrid_open_stop": ("    i = nl.mgrid[0:128, 0:]  # HERE\n", ("nl.mgrid", "0:")),
    "mgrid_step_zero": ("    i = nl.mgrid[0:128:0, 0:64]  # HERE\n", ("nl.mgrid", "0:128:0")),
    "mgrid_int": ("    i = nl.mgrid[0:128, 5]  # HERE\n", ("nl.mgrid",)),
    "arange_step_zero": ("    i = nl.arange(0, 8, 0)  # HERE\n", ("nl.arange",)),
    "affine_range_float": ("    for i in nl.affine_range(2.5):  # HERE\n        pass\n",
                           ("nl.affine_range",)),
    "ndarray_unknown_buffer": ("    t = nl.ndarray((128, 4), dtype=nl.float32, "
                               "buffer='dram')  # HERE\n", ("nl.ndarray", "'dram'")),
    "ndarray_int_shape": ("    t = nl.ndarray(128, dtype=nl.float32, buffer=nl.sbuf)"
                          "  # HERE\n", ("nl.ndarray", "shape=128")),
    "unknown_dtype_name": ("    t = nl.ndarray((128, 4), dtype='float64', buffer=nl.sbuf)"
                           "  # HERE\n", ("dtype 'float64'",)),
    "reduce_axis_string": (_T + "    d = nl.ndarray((128, 1), dtype=nl.float32, "
                           "buffer=nl.sbuf)\n    nisa.tensor_reduce(dst=d, op=nl.add, data=t, "
                           "axis='x')  # HERE\n", ("tensor_reduce", "axis='x'")),
    "ap_not_pairs": (_T + "    v = t.ap(5)  # HERE\n", ("ap(pattern=5",)),
    "ap_zero_count": (_T + "    v = t.ap([[128, 128], [1, 0]])  # HERE\n", ("count",)),
    "mod_alloc_zero_tiles": ("    import nki.compiler as ncc\n    t = nl.ndarray((4, nl.par_dim("
                             "128), 64), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr"
                             "=0, num_free_tiles=0))  # HERE\n",
                             ("num_free_tiles=0", "tile count")),
    "alloc_func_raises": ("    import nki.compiler as ncc\n    t = nl.ndarray((2, nl.par_dim("
                          "128), 64), dtype=nl.float32, buffer=ncc.sbuf.alloc(lambda idx, "
                          "pdim_size, fdim_size: (0, 'x')))  # HERE\n",
                          ("allocation of block (0,)", "whole numbers")),
}


def _kernel(tmp_path: Path, name: str, body: str, params: str = "") -> tuple[Path, int]:
    src = HEAD + f"@nki.jit\ndef k({params}):\n" + body + "    return None\n"
    path = tmp_path / f"{name}.py"
    path.write_text(src)
    return path, next((i for i, t in enumerate(src.splitlines(), 1) if "# HERE" in t), 0)


@pytest.mark.parametrize("name", sorted(BAD_CALLS))
def test_a_bad_call_is_one_line_at_its_kernel_line(tmp_path: Path, name: str) -> None:
    """Before: KeyError 'value', TypeError "bool has no len()", ValueError "128 is not a
    valid PerfMode" (named at enum.py's line), "slice step cannot be zero" ... each wrapped
    as "an NKI call failed inside the model ... please report it"."""
    body, words = BAD_CALLS[name]
    path, line = _kernel(tmp_path, name, body)
    with pytest.raises(KernelError) as exc:
        snki.record(snki.load_kernel(str(path), "k"), [])
    text = str(exc.value)
    assert (exc.value.path, exc.value.line) == (str(path), line), text
    assert "\n" not in text and "inside the model" not in text and "Error:" not in text, text
    for w in words:
        assert w in exc.value.message, text


def test_an_error_from_a_library_names_the_kernel_line_not_the_library(
        tmp_path: Path) -> None:
    """The kernel's own numpy call failing is named at the kernel's line (before: at the
    innermost frame outside systolic/nki, e.g. enum.py or systolic/isa/fields.py)."""
    path, line = _kernel(tmp_path, "np_fail", "    import numpy\n"
                         "    numpy.reshape(numpy.zeros(6), (4, 4))  # HERE\n")
    with pytest.raises(KernelError) as exc:
        snki.record(snki.load_kernel(str(path), "k"), [])
    assert (exc.value.path, exc.value.line) == (str(path), line)
    assert exc.value.message.startswith("the kernel raised ValueError")


# -- memset values (issue 21 survivor, issue 22 W3) -------------------------------------------
_FILL = """
    t = nl.ndarray((128, 2), dtype=nl.{dt}, buffer=nl.sbuf)
    nisa.memset(dst=t, value={value!r})  # HERE
    out = nl.ndarray((128, 2), dtype=nl.{dt}, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out
"""


def _fill(tmp_path: Path, dt: str, value: float) -> np.ndarray:
    path, _ = _kernel(tmp_path, f"fill_{dt}", _FILL.format(dt=dt, value=value))
    return np.asarray(snki.simulate(snki.load_kernel(str(path), "k"))())


def test_memset_values_round_once_from_the_python_float(tmp_path: Path) -> None:
    """0.1 into fp32 is float32(0.1), 1e5 is 1e5: a value passed through fp16 on the way
    (0.099975586, and inf for 1e5) is caught. The reference is numpy's own rounding."""
    for value in (0.1, 1e5, -3.0e38, 1.0 / 3.0):
        got = _fill(tmp_path, "float32", value)
        assert got.dtype == np.float32
        assert np.array_equal(got.view(np.uint32),
                              np.full((128, 2), np.float32(value)).view(np.uint32)), value
    got = _fill(tmp_path, "bfloat16", 0.1)
    assert np.array_equal(got.astype(np.float64),
                          np.full((128, 2), float(ml_dtypes.bfloat16(0.1))))


_FLOATS = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float32": np.float32,
           "float8_e4m3": ml_dtypes.float8_e4m3, "float8_e5m2": ml_dtypes.float8_e5m2}


@pytest.mark.parametrize("dt", sorted(_FLOATS))
def test_memset_beyond_the_format_is_refused_and_its_max_is_kept(tmp_path: Path,
                                                                 dt: str) -> None:
    """docs/NUMERICS.md: a value beyond a format's range is an error by default (before:
    memset(1000.0) into fp8_e4m3 and 1e39 into bf16 wrote inf). The format's largest
    value (from ml_dtypes) is written exactly; twice it, and 1e39, are refused at the line."""
    big = float(ml_dtypes.finfo(_FLOATS[dt]).max)
    got = _fill(tmp_path, dt, big)
    assert np.all(got.astype(np.float64) == big)
    for value in (2 * big, 1e39, -1e39):
        path, line = _kernel(tmp_path, f"over_{dt}", _FILL.format(dt=dt, value=value))
        with pytest.raises(KernelError) as exc:
            snki.record(snki.load_kernel(str(path), "k"), [])
        assert exc.value.line == line and "memset" in exc.value.message
        assert "holds at most" in exc.value.message


def test_assigning_a_number_beyond_the_format_is_refused(tmp_path: Path) -> None:
    path, line = _kernel(tmp_path, "assign", "    t = nl.ndarray((128, 2), "
                         "dtype=nl.float8_e4m3, buffer=nl.sbuf)\n    t[...] = 1000.0  # HERE\n")
    with pytest.raises(KernelError) as exc:
        snki.record(snki.load_kernel(str(path), "k"), [])
    assert exc.value.line == line and "fp8_e4m3 holds at most 240" in exc.value.message


# -- PSUM: memset then accumulate (issue 21 survivor and defect 5) ----------------------------
_ACC = """
    s = nl.ndarray((128, 32), dtype=nl.bfloat16, buffer=nl.sbuf)
    m = nl.ndarray((128, 16), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.dma_copy(dst=s, src=a)
    nisa.dma_copy(dst=m, src=b)
    p = nl.ndarray((32, 16), dtype=nl.float32, buffer=nl.psum)
    nisa.memset(dst=p, value={value})  # MEMSET
    nisa.nc_matmul(dst=p, stationary=s, moving=m, accumulate=True)  # HERE
    o = nl.ndarray((32, 16), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=o, src=p)
    out = nl.ndarray((32, 16), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=o)
    return out
"""


def _ints(shape: tuple[int, int], seed: int) -> np.ndarray:
    """Small integers: every product and sum is exact in bf16 and fp32."""
    return np.random.default_rng(seed).integers(-4, 5, shape).astype(ml_dtypes.bfloat16)


def test_memset_nonzero_then_accumulate_is_refused_naming_the_memset(tmp_path: Path) -> None:
    """The NKI docs (nc_matmul, accumulate): on NeuronCore-v2 and v3 a matmul accumulating
    onto a PSUM location a non-matmul instruction initialised is undefined, so memset(1.0)
    then accumulate=True is refused, naming the memset (before the fix: "already finished
    (it was read)"; with every memset counted as zeroing it silently gave a.T @ b)."""
    path, line = _kernel(tmp_path, "acc1", _ACC.format(value=1.0), "a, b")
    mline = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if "# MEMSET" in t)
    with pytest.raises(KernelError) as exc:
        snki.record(snki.load_kernel(str(path), "k"), [_ints((128, 32), 1), _ints((128, 16), 2)])
    assert exc.value.line == line
    assert f"memset at line {mline}" in exc.value.message
    assert "non-matmul instruction" in exc.value.message
    assert "already finished" not in exc.value.message


def test_memset_zero_then_accumulate_is_the_product(tmp_path: Path) -> None:
    """memset(0) then accumulate=True: the compiler's START over zeros gives a.T @ b
    exactly (small integers; float64 reference)."""
    path, _ = _kernel(tmp_path, "acc0", _ACC.format(value=0.0), "a, b")
    a, b = _ints((128, 32), 1), _ints((128, 16), 2)
    got = snki.simulate(snki.load_kernel(str(path), "k"))(a, b)
    assert np.array_equal(got, a.astype(np.float64).T @ b.astype(np.float64))


def test_a_matvec_with_n_1_runs(tmp_path: Path) -> None:
    """N = 1: the PSUM footprint of a [M, 1] result is one element per partition; counted
    one short it is empty, the copy out does not close the group, and a valid kernel is
    refused ("never read out of PSUM")."""
    path, _ = _kernel(tmp_path, "matvec", """
    s = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.sbuf)
    v = nl.ndarray((128, 1), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.dma_copy(dst=s, src=a)
    nisa.dma_copy(dst=v, src=x)
    p = nl.ndarray((64, 1), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=p, stationary=s, moving=v)
    o = nl.ndarray((64, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=o, src=p)
    out = nl.ndarray((64, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=o)
    return out
""", "a, x")
    a, x = _ints((128, 64), 3), _ints((128, 1), 4)
    got = snki.simulate(snki.load_kernel(str(path), "k"))(a, x)
    assert np.array_equal(got, a.astype(np.float64).T @ x.astype(np.float64))


# -- SBUF granules (issue 21 survivor) ------------------------------------------------------
def test_sbuf_tiles_of_a_partial_granule_do_not_overlap(tmp_path: Path) -> None:
    """A [128, 50] bf16 tile is 100 bytes per partition: two 64-byte granules. Rounded down
    to one, its neighbour starts 64 bytes in and overwrites its last 36 bytes."""
    path, _ = _kernel(tmp_path, "gran", """
    t1 = nl.ndarray((128, 50), dtype=nl.bfloat16, buffer=nl.sbuf)
    t2 = nl.ndarray((128, 50), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.dma_copy(dst=t1, src=x)
    nisa.dma_copy(dst=t2, src=y)
    o1 = nl.ndarray((128, 50), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    o2 = nl.ndarray((128, 50), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=o1, src=t1)
    nisa.dma_copy(dst=o2, src=t2)
    return o1, o2
""", "x, y")
    kern = snki.load_kernel(str(path), "k")
    x, y = _ints((128, 50), 5), _ints((128, 50), 6) + 10
    o1, o2 = snki.simulate(kern)(x, y)
    assert np.array_equal(o1, x) and np.array_equal(o2, y)
    rec = snki.record(kern, [x, y])
    sbuf = sorted({(i.dst.offset, i.dst.free_elems * 2) for i in rec.program
                   if i.dst.space.value == "SBUF"})
    assert len(sbuf) == 2
    (lo1, n1), (lo2, _) = sbuf
    assert lo2 >= lo1 + n1 and lo2 % 64 == 0  # 100 bytes each, on 64-byte starts


# -- raw access patterns stay inside their tensor (issue 21 defect 2) -------------------------
def test_an_hbm_access_pattern_past_its_tensor_is_refused(tmp_path: Path) -> None:
    """tensor.ap([[F, P], [1, 2F]]) on an HBM tensor read the next tensor's bytes."""
    path, line = _kernel(tmp_path, "ap_hbm", """
    t = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x.ap([[64, 128], [1, 128]]))  # HERE
""", "x, y")
    xs = np.zeros((128, 64), np.float32)
    with pytest.raises(KernelError) as exc:
        snki.record(snki.load_kernel(str(path), "k"), [xs, xs])
    assert exc.value.line == line and "0..8255" in exc.value.message
    assert "8192 elements" in exc.value.message
    # one element past the end: the last row's 64 elements and one more
    path, line = _kernel(tmp_path, "ap_hbm1", """
    t = nl.ndarray((64, 65), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x.ap([[64, 64], [1, 65]], offset=64 * 64))  # HERE
""", "x, y")
    with pytest.raises(KernelError) as exc:
        snki.record(snki.load_kernel(str(path), "k"), [xs, xs])
    assert exc.value.line == line and "4096..8192" in exc.value.message


def test_an_on_chip_access_pattern_past_its_tile_is_refused(tmp_path: Path) -> None:
    path, line = _kernel(tmp_path, "ap_sbuf", """
    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    u = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=u, src=t.ap([[64, 128], [1, 128]]))  # HERE
""")
    with pytest.raises(KernelError) as exc:
        snki.record(snki.load_kernel(str(path), "k"), [])
    assert exc.value.line == line and "0..127" in exc.value.message


def test_an_access_pattern_inside_its_tensor_reads_what_numpy_reads(tmp_path: Path) -> None:
    """The bound is not too tight: the last row, and every other column, of an HBM tensor."""
    path, _ = _kernel(tmp_path, "ap_ok", """
    t = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x.ap([[64, 64], [2, 32]], offset=64 * 64))
    out = nl.ndarray((64, 32), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out
""", "x")
    x = np.arange(128 * 64, dtype=np.float32).reshape(128, 64)
    got = snki.simulate(snki.load_kernel(str(path), "k"))(x)
    assert np.array_equal(got, x[64:, 0::2])


# -- verifier errors name the kernel line of the instruction (issue 21 survivor) -------------
def test_a_verifier_error_names_the_line_of_its_instruction(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rule the recording does not check and the verifier does is reported at the line
    of the NKI call that made the failing instruction: here the verifier is made to refuse
    the first TensorCopy, whose call is on the "# HERE" line, between other lines' calls."""
    import systolic.nki.build as build
    from systolic.errors import VerifyError
    from systolic.isa import TensorCopy

    def refuse(program, arch, dram_bytes):  # type: ignore[no-untyped-def]
        i = next(i for i, ins in enumerate(program) if isinstance(ins, TensorCopy))
        raise VerifyError(i, "refused by the test")

    monkeypatch.setattr(build, "verify", refuse)
    path, line = _kernel(tmp_path, "verify_line", """
    a = nl.ndarray((128, 128), dtype=nl.bfloat16, buffer=nl.sbuf)
    b = nl.ndarray((128, 512), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x)
    nisa.dma_copy(dst=b, src=y)
    p = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=p, stationary=a, moving=b)
    r = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=r, src=p)  # HERE
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=r)
    return out
""", "x, y")
    args = [np.zeros((128, 128), ml_dtypes.bfloat16), np.zeros((128, 512), ml_dtypes.bfloat16)]
    with pytest.raises(KernelError) as exc:
        snki.record(snki.load_kernel(str(path), "k"), args)
    assert (exc.value.path, exc.value.line) == (str(path), line)
    assert exc.value.message == "refused by the test"


# -- unbounded kernel code (issue 22 H4) -----------------------------------------------------
def test_the_op_budget_stops_a_huge_kernel_at_its_line() -> None:
    """tiled_matmul at bf16[65536, 65536] would record 10^8 operations; the budget stops it
    at the first operation past max_ops, at the kernel line making it."""
    ex = Path(__file__).resolve().parents[1] / "examples" / "kernels" / "tiled_matmul.py"
    src = ex.read_text().splitlines()
    with pytest.raises(KernelError) as exc:
        snki.record_kernel(str(ex), "tiled_matmul", ["bf16[65536,65536]", "bf16[65536,65536]"],
                           max_ops=2000)
    assert exc.value.path == str(ex) and "nisa." in src[exc.value.line - 1]
    assert "more than 2,000 NKI operations" in exc.value.message


def test_the_default_budget_holds_the_largest_public_kernel() -> None:
    """The tiled matmul tutorial at 4096 x 8192 x 8192: per output tile [128, 512] and K
    tile of 128, two loads and a matmul, then a copy and a store per output tile, recorded
    as counted; the default budget holds it 20 times over (nki-samples' flash attention
    backward at 32K, the largest public kernel, records 1,810,211: nki/record.py)."""
    from systolic.nki.record import DEFAULT_MAX_OPS

    def count(k: int, m: int, n: int) -> int:
        return (m // 128) * (n // 512) * (3 * (k // 128) + 2)

    ex = Path(__file__).resolve().parents[1] / "examples" / "kernels" / "tiled_matmul.py"
    small = snki.record_kernel(str(ex), "tiled_matmul", ["bf16[512,1024]", "bf16[512,2048]"])
    assert small.ops == count(512, 1024, 2048) == 448  # the count, at a size a test can run
    ops = count(8192, 4096, 8192)
    assert ops == 99_328
    assert 20 * ops < DEFAULT_MAX_OPS < 100 * ops


def test_the_tensor_budget_stops_a_loop_making_tiles(tmp_path: Path) -> None:
    path, line = _kernel(tmp_path, "tiles", "    for i in nl.affine_range(10**12):\n"
                         "        t = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)"
                         "  # HERE\n")
    with pytest.raises(KernelError) as exc:
        snki.record(snki.load_kernel(str(path), "k"), [], max_ops=500)
    assert exc.value.line == line and "more than 500 tensors" in exc.value.message


@pytest.mark.parametrize("body", [
    "    while True:  # HERE\n        pass\n",
    "    n = 0\n    for i in nl.affine_range(10**12):  # HERE\n        n += i\n",
    "    while True:  # HERE\n        try:\n            pass\n        except Exception:\n"
    "            pass\n",
])
def test_the_time_limit_stops_a_pure_python_loop(tmp_path: Path, body: str) -> None:
    """No NKI call, so no op budget: the time limit stops it, at the loop's line, even when
    the kernel catches Exception; the next kernel records normally."""
    import time

    path, _ = _kernel(tmp_path, "loop", body)
    lines = path.read_text().splitlines()
    first = next(i for i, t in enumerate(lines, 1) if "# HERE" in t)
    t0 = time.monotonic()
    with pytest.raises(KernelError) as exc:
        snki.record(snki.load_kernel(str(path), "k"), [], time_limit_s=0.3)
    assert time.monotonic() - t0 < 30
    assert exc.value.path == str(path) and first <= exc.value.line <= len(lines)
    assert "time limit of 0.3 s" in exc.value.message and "\n" not in str(exc.value)
    time.sleep(0.5)  # a withdrawn timer must not fire into the next recording
    ok, _ = _kernel(tmp_path, "ok", "    x = 1\n")
    assert snki.record(snki.load_kernel(str(ok), "k"), [], time_limit_s=0.3).ops == 0


@pytest.mark.parametrize("kw", [{"max_ops": 0}, {"max_ops": 1.5}, {"time_limit_s": -1},
                                {"time_limit_s": float("nan")}])
def test_a_bad_budget_is_refused(tmp_path: Path, kw: dict[str, float]) -> None:
    ok, _ = _kernel(tmp_path, "ok", "    x = 1\n")
    with pytest.raises(SystolicError, match=r"max_ops|time_limit_s"):
        snki.record(snki.load_kernel(str(ok), "k"), [], **kw)  # type: ignore[arg-type]


def test_reading_a_tile_nothing_wrote_is_refused(tmp_path: Path) -> None:
    """An older-API result never assigned (``nisa.tensor_copy(src=acc)`` dropped) leaves
    its tile unwritten; the store reading it gave NaN and exit 0 (issue 22 W2, found by
    tests/test_nki_fuzz.py). A read overlapping what was written still runs (test_nki.py
    test_unwritten_memory_reads_as_nan)."""
    path, line = _kernel(tmp_path, "never", """
    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    r = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(src=t)
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=r)  # HERE
    return out
""", "x")
    with pytest.raises(KernelError) as exc:
        snki.record(snki.load_kernel(str(path), "k"), [np.zeros((128, 64), np.float32)])
    assert exc.value.line == line and "made at line 10" in exc.value.message
    assert "nothing was written" in exc.value.message


def test_an_extra_positional_argument_is_one_line_not_dropped(tmp_path) -> None:
    """``nisa.reciprocal(dst, data, "junk")`` ran and ignored "junk" (the entry points read
    their arguments by position through calls.named, which zipped them away)."""
    from helpers import record_source

    body = '''
@nki.jit
def k(a):
    t = nl.load(a)
    r = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.sbuf)
    nisa.reciprocal(r, t, "junk")
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, r)
    return out
'''
    with pytest.raises(KernelError, match=r"k\.py:10: reciprocal takes at most 2 positional "
                                          r"arguments \(dst, data\), not 3") as e:
        record_source(tmp_path, body, ["fp32[128,64]"])
    assert "\n" not in str(e.value)
