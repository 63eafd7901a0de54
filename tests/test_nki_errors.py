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
    assert rec_mod._STACK == []


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
