"""The NKI front end: example kernels' values against float64 numpy, both API generations,
the weight-tile cache, accumulate semantics, uninitialised memory, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from helpers import QUANTIZE_MX_KERNEL, fp32_bound, write_kernel

import systolic.nki as snki
from systolic.errors import KernelError
from systolic.isa import Fp32Pass, LoadStationary, MatMul, Program

EX = Path(__file__).resolve().parents[1] / "examples" / "kernels"
U = {"bfloat16": 2.0**-8, "float32": 2.0**-24}


@pytest.fixture(autouse=True)
def _hook():
    snki.install("trn2")
    yield


def _kernel(name: str):
    return snki.load_kernel(str(EX / f"{name}.py"), name)


def _check(out: np.ndarray, a: np.ndarray, b: np.ndarray, extra: float = 0.0) -> None:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = a64.T @ b64
    bound = fp32_bound(a64.T, b64, extra) + np.abs(ref) * U[str(out.dtype)]
    err = np.abs(out.astype(np.float64) - ref)
    assert np.all(err <= bound), float((err - bound).max())


def _operands(k: int, m: int, n: int, dt: object, seed: int = 1):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((k, m)).astype(np.float32).astype(dt),
            rng.standard_normal((k, n)).astype(np.float32).astype(dt))


@pytest.mark.parametrize("name", ["basic_matmul"])
def test_basic(name: str) -> None:
    a, b = _operands(128, 128, 512, ml_dtypes.bfloat16)
    import nki

    out = nki.simulate(_kernel(name))(a, b)
    assert out.shape == (128, 512) and out.dtype == ml_dtypes.bfloat16
    _check(out, a, b)


@pytest.mark.parametrize("name", ["tiled_matmul", "tiled_matmul_legacy", "blocked_matmul"])
def test_several_tiles_every_dimension(name: str) -> None:
    a, b = _operands(384, 256, 2048, ml_dtypes.bfloat16)  # 3 K x 2 M x 4 N tiles
    import nki

    out = nki.simulate_kernel(_kernel(name), a, b)
    _check(out, a, b)


def test_both_generations_give_the_same_program_values() -> None:
    a, b = _operands(256, 256, 1024, ml_dtypes.bfloat16, seed=3)
    new = snki.values(_kernel("tiled_matmul"), [a, b])
    old = snki.values(_kernel("tiled_matmul_legacy"), [a, b])
    assert np.array_equal(new.view(np.uint16), old.view(np.uint16))


def test_fp8_double_row() -> None:
    a, b = _operands(512, 256, 1024, ml_dtypes.float8_e4m3)
    rec = snki.record(_kernel("fp8_double_row"), [a, b])
    assert all(i.perf_mode.spelling == "double_row" for i in rec.program
               if isinstance(i, LoadStationary | MatMul))
    out = snki.execute(rec, [a, b])
    _check(out, a, b)


def test_fp32_two_pass() -> None:
    a, b = _operands(256, 128, 512, np.float32)
    rec = snki.record(_kernel("tiled_matmul"), [a, b])
    passes = {i.fp32_pass for i in rec.program if isinstance(i, LoadStationary)}
    assert passes == {Fp32Pass.HI, Fp32Pass.LO}
    _check(snki.execute(rec, [a, b]), a, b, extra=2e-5)  # hi + lo carries ~16 bits


def test_weight_cache_hits_when_a_stationary_tile_is_reused() -> None:
    a, b = _operands(384, 256, 2048, ml_dtypes.bfloat16)
    rec = snki.record(_kernel("blocked_matmul"), [a, b], {"TILES_N": 2})
    loads = sum(isinstance(i, LoadStationary) for i in rec.program)
    mms = sum(isinstance(i, MatMul) for i in rec.program)
    # 2 N blocks x 2 M tiles x 3 K tiles latched tiles, each serving 2 moving tiles
    assert (loads, mms, rec.cache_hits) == (12, 24, 12)
    rec_t = snki.record(_kernel("tiled_matmul"), [a, b])
    assert rec_t.cache_hits == 0  # every tile is a fresh load into a new SBUF tile




ACC = '''
@nki.jit
def k(lhsT, rhs):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    if MODE == "zeros_true":
        nisa.memset(dst=acc, value=0.0)
    for kk in nl.affine_range(2):
        a = nl.ndarray((128, 128), dtype=lhsT.dtype, buffer=nl.sbuf)
        b = nl.ndarray((128, 512), dtype=rhs.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=lhsT[kk * 128:(kk + 1) * 128, :])
        nisa.dma_copy(dst=b, src=rhs[kk * 128:(kk + 1) * 128, :])
        nisa.nc_matmul(dst=acc, stationary=a, moving=b, accumulate=ACC)
    res = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out
'''


@pytest.mark.parametrize("mode,acc,want", [("none", None, "both"), ("zeros_true", True, "both")])
def test_accumulate_semantics(tmp_path: Path, mode: str, acc: object, want: str) -> None:
    p = write_kernel(tmp_path, f"MODE = {mode!r}\nACC = {acc!r}\n" + ACC)
    a, b = _operands(256, 128, 512, ml_dtypes.bfloat16)
    out = snki.values(snki.load_kernel(str(p), "k"), [a, b])
    lo = 128 if want == "last" else 0
    _check(out, a[lo:], b[lo:])


def test_accumulate_false_over_an_unread_accumulation_is_an_error(tmp_path: Path) -> None:
    p = write_kernel(tmp_path, "MODE = 'x'\nACC = False\n" + ACC)
    a, b = _operands(256, 128, 512, ml_dtypes.bfloat16)
    with pytest.raises(KernelError, match="overwrites the PSUM accumulation"):
        snki.record(snki.load_kernel(str(p), "k"), [a, b])


def test_accumulate_true_onto_unwritten_psum_is_an_error(tmp_path: Path) -> None:
    p = write_kernel(tmp_path, "MODE = 'x'\nACC = True\n" + ACC)
    a, b = _operands(256, 128, 512, ml_dtypes.bfloat16)
    with pytest.raises(KernelError, match="nothing wrote") as exc:
        snki.record(snki.load_kernel(str(p), "k"), [a, b])
    assert exc.value.path == str(p)
    assert "accumulate=ACC" in p.read_text().splitlines()[exc.value.line - 1]


def test_storing_unwritten_memory_is_refused_naming_the_tile_and_line(tmp_path: Path) -> None:
    """Half a tile loaded, the whole tile stored: the unwritten half would be whatever SBUF
    held (NaN in the model's fresh memory). Refused in one line at the store, naming the
    tile's line and the line that read it (issue 19 item 6)."""
    p = write_kernel(tmp_path, '''
@nki.jit
def k(x):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t[:, 0:32], src=x)
    nisa.dma_copy(dst=out, src=t)
    return out
''')
    x = np.ones((128, 32), np.float32)
    with pytest.raises(KernelError) as exc:
        snki.values(snki.load_kernel(str(p), "k"), [x])
    assert exc.value.line == 11 and "\n" not in str(exc.value)
    assert "made at line 9" in str(exc.value) and "read at line 11" in str(exc.value)


def test_engine_ops_values(tmp_path: Path) -> None:
    p = write_kernel(tmp_path, '''
@nki.jit
def k(x, y):
    out = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.shared_hbm)
    a = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    b = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    c = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    d = nl.ndarray((128, 64), dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x)
    nisa.dma_copy(dst=b, src=y)
    nisa.tensor_tensor(dst=c, data1=a, data2=b, op=nl.multiply)
    nisa.activation(dst=c, op=nl.copy, data=c, scale=0.5)
    nisa.tensor_tensor(dst=c, data1=c, data2=a, op=nl.maximum, engine=nisa.engine.gpsimd)
    nisa.tensor_copy(dst=d, src=c)
    nisa.dma_copy(dst=out, src=d)
    return out
''')
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal((128, 64)).astype(np.float32) for _ in range(2))
    out = snki.values(snki.load_kernel(str(p), "k"), [x, y])
    ref = np.maximum((x * y) * np.float32(0.5), x).astype(ml_dtypes.bfloat16)
    assert np.array_equal(out.view(np.uint16), ref.view(np.uint16))


def test_record_kernel_returns_a_program_without_values() -> None:
    rec = snki.record_kernel(str(EX / "tiled_matmul.py"), "tiled_matmul",
                             ["bf16[4096,1024]", ((4096, 2048), "bfloat16")], {}, "trn2")
    assert isinstance(rec.program, Program)
    assert rec.counts()["tensor"] == 2 * 32 * 8 * 4
    assert rec.ops == 8 * 4 * (32 * 3 + 2)


def test_psum_and_sbuf_space_is_reused_after_last_use() -> None:
    rec = snki.record_kernel(str(EX / "tiled_matmul.py"), "tiled_matmul",
                             ["bf16[512,512]", "bf16[512,2048]"], {}, "trn2")
    banks = {i.dst.offset // 2048 for i in rec.program if isinstance(i, MatMul)}
    assert len(banks) < 16 and len(banks) >= 1  # 16 output tiles share the 8 banks


def test_cli_values_agree_with_python_api(capsys: pytest.CaptureFixture[str]) -> None:
    from systolic.cli import main
    from systolic.commands.kernel import random_inputs

    target = f"{EX / 'tiled_matmul.py'}:tiled_matmul"
    args = ["kernel", target, "--arch", "trn2", "--arg", "lhsT=bf16[256,256]",
            "--arg", "rhs=bf16[256,1024]", "--values", "--json"]
    assert main(args) == 0
    info = json.loads(capsys.readouterr().out)
    specs = [snki.parse_arg("bf16[256,256]"), snki.parse_arg("bf16[256,1024]")]
    arrays = random_inputs(specs, 0)
    out = snki.values(_kernel("tiled_matmul"), arrays)
    assert info["outputs"][0]["sum"] == pytest.approx(float(out.astype(np.float64).sum()),
                                                      rel=0, abs=1e-9)
    assert info["counts"]["tensor"] == 2 * 2 * 2 * 2
    assert info["engines"]["tensor"]["instructions"] == 2 * 2 * 2 * 2


def test_cli_error_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                      ) -> None:
    from systolic.cli import main

    target = f"{EX / 'fp8_double_row.py'}:fp8_double_row"
    rc = main(["kernel", target, "--arch", "trn1", "--arg", "lhsT=fp8_e4m3[256,128]",
               "--arg", "rhs=fp8_e4m3[256,512]"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert "fp8_double_row.py:" in err and "double_row" in err


def _mx_operand(rng: np.random.Generator, p: int, f: int) -> tuple[np.ndarray, ...]:
    """Random fp8_e4m3fn codes packed four to a uint32, E8M0 scales; and the float64 values
    [P, F, 4] they stand for (independent of systolic.mx)."""
    vals = rng.standard_normal((p, f, 4)).astype(np.float32).astype(ml_dtypes.float8_e4m3fn)
    words = np.ascontiguousarray(vals).view(np.uint8).reshape(p, f, 4).view(np.uint32)[..., 0]
    scale = rng.integers(120, 134, size=(p // 8, f), dtype=np.uint8)
    real = vals.astype(np.float64) * np.exp2(scale.astype(np.float64) - 127)[
        np.arange(p) // 8][:, :, None]
    return words, scale, real


def test_mx_matmul_trn3() -> None:
    rng = np.random.default_rng(5)
    aw, asc, ar = _mx_operand(rng, 256, 256)
    bw, bsc, br = _mx_operand(rng, 256, 1024)
    rec = snki.record(_kernel("mx_matmul"), [aw, asc, bw, bsc])
    names = rec.program.counts()
    assert names["LdWeightMx"] == names["MatmultMx"] == 2 * 2 * 2
    out = snki.execute(rec, [aw, asc, bw, bsc])
    a2 = ar.transpose(0, 2, 1).reshape(-1, 256)  # (p, q) pairs as K rows
    b2 = br.transpose(0, 2, 1).reshape(-1, 1024)
    _check(out, a2, b2)


def test_mx_is_gen4_only() -> None:
    rng = np.random.default_rng(5)
    aw, asc, _ = _mx_operand(rng, 128, 128)
    bw, bsc, _ = _mx_operand(rng, 128, 512)
    with pytest.raises(KernelError, match="needs NeuronCore-v4"):
        snki.record(_kernel("mx_matmul"), [aw, asc, bw, bsc], arch="trn2")


ROWTILE = '''
@nki.jit
def k(lhsT, rhs):
    out = nl.ndarray((64, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.ndarray((128, 64), dtype=lhsT.dtype, buffer=nl.sbuf)
    b = nl.ndarray((128, 512), dtype=rhs.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=lhsT)
    nisa.dma_copy(dst=b, src=rhs)
    acc = nl.ndarray((64, 512), dtype=nl.float32, buffer=nl.psum)
    for r in nl.static_range(4):  # four 32-row tiles on four quadrants, summed in PSUM
        nisa.nc_matmul(dst=acc, stationary=a[32 * r:32 * (r + 1), :],
                       moving=b[32 * r:32 * (r + 1), :], tile_position=(32 * r, 0),
                       tile_size=(32, 64))
    res = nl.ndarray((64, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out
'''


def test_row_tiling_places_tiles_on_quadrants(tmp_path: Path) -> None:
    p = write_kernel(tmp_path, ROWTILE)
    a, b = _operands(128, 64, 512, ml_dtypes.bfloat16)
    rec = snki.record(snki.load_kernel(str(p), "k"), [a, b])
    loads = [i for i in rec.program if isinstance(i, LoadStationary)]
    assert [(i.src.partition, i.row_group, i.col_group) for i in loads] == [
        (0, 1, 3), (32, 2, 3), (64, 4, 3), (96, 8, 3)]
    _check(snki.execute(rec, [a, b]), a, b)


def test_gen2_writes_no_accumulate_bit_and_gen3_gate() -> None:
    import dataclasses

    from systolic.arch import get_arch
    from systolic.isa import CalcFlags

    a, b = _operands(384, 128, 512, ml_dtypes.bfloat16)
    kern = _kernel("tiled_matmul")
    flags = {arch: [i.flags for i in snki.record(kern, [a, b], arch=arch).program
                    if isinstance(i, MatMul)] for arch in ("trn1", "trn2")}
    assert flags["trn1"] == [CalcFlags.START, CalcFlags.NONE, CalcFlags.STOP]
    assert flags["trn2"] == [CalcFlags.START, CalcFlags.ACCUMULATE,
                             CalcFlags.ACCUMULATE | CalcFlags.STOP]
    high = dataclasses.replace(get_arch("trn2"), arch_level=41)  # seed 000's gen3 gate
    gated = [i.flags for i in snki.record(kern, [a, b], arch=high).program
             if isinstance(i, MatMul)]
    assert gated == flags["trn1"]
    _check(snki.execute(snki.record(kern, [a, b], arch="trn1"), [a, b]), a, b)


def test_legacy_sbuf_accumulation_is_a_vector_add(tmp_path: Path) -> None:
    p = tmp_path / "k.py"
    p.write_text('''
import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def k(lhsT, rhs):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    total = nl.zeros((nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.sbuf)
    i = nl.mgrid[0:128, 0:512]
    for kk in nl.affine_range(3):  # three K blocks summed in SBUF, as the tutorial does
        part = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
        part[...] += nisa.nc_matmul(nl.load(lhsT[kk * 128 + nl.arange(128)[:, None],
                                                 nl.arange(128)[None, :]]),
                                    nl.load(rhs[kk * 128 + i.p, i.x]))
        total[i.p, i.x] += part[i.p, i.x]
    nl.store(out, value=nl.add(total, total))
    return out
''')
    a, b = _operands(384, 128, 512, np.float32, seed=7)
    a = a.astype(ml_dtypes.bfloat16)
    b = b.astype(ml_dtypes.bfloat16)
    rec = snki.record(snki.load_kernel(str(p), "k"), [a, b])
    counts = rec.program.counts()
    assert counts["TensorTensor"] == 3 + 1 and counts["MatMul"] == 3
    out = snki.execute(rec, [a, b])
    _check(out / 2, a, b)




def test_quantize_mx_matches_the_ocp_rule(tmp_path: Path) -> None:
    p = write_kernel(tmp_path, QUANTIZE_MX_KERNEL)
    rng = np.random.default_rng(2)
    x = (rng.standard_normal((128, 256)) * np.exp2(rng.integers(-6, 6, (128, 1)))
         ).astype(np.float32).astype(ml_dtypes.bfloat16)
    q, s = snki.values(snki.load_kernel(str(p), "k"), [x])
    # independent reference: E8M0 code = max fp32 biased exponent of the 8 x 4 group - 8
    x32 = x.astype(np.float32)
    g = x32.reshape(16, 8, 64, 4)
    code = ((g.view(np.uint32) >> 23) & 0xFF).max(axis=(1, 3)).astype(np.int64) - 8
    rows = [32 * (b // 4) + b % 4 for b in range(16)]
    assert np.array_equal(s[rows].astype(np.int64), code)
    scale = np.exp2(code - 127.0)[np.arange(128) // 8][:, :, None]
    want = np.clip(x32.reshape(128, 64, 4) / scale, -448, 448).astype(ml_dtypes.float8_e4m3fn)
    got = q.view(np.uint8).reshape(128, 64, 4).view(ml_dtypes.float8_e4m3fn)
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8))


IADD_REUSED = '''
@nki.jit
def k(lhsT, rhs):
    out = nl.ndarray((2, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    if MODE == "ones":
        nisa.memset(dst=acc, value=1.0)
    for g in nl.sequential_range(2):
        for kk in nl.affine_range(2):
            a = nl.load(lhsT[g, kk * 128:(kk + 1) * 128, :])
            b = nl.load(rhs[g, kk * 128:(kk + 1) * 128, :])
            acc += nisa.nc_matmul(a, b)
        res = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        res[...] = nisa.tensor_copy(acc)
        nl.store(out[g], value=res)
    return out
'''


def test_iadd_opens_a_group_on_unwritten_or_finished_psum(tmp_path: Path) -> None:
    """The older API's ``acc += nc_matmul(...)`` onto a PSUM tile nothing zeroed, reused by
    a second group after the first was read: each group is its own sum (START at its first
    matmul), as nki-samples' hardware-tested allocated attention needs (DESIGN-NOTES "PSUM
    +="). Refused before ("nothing wrote"); a second group adding onto the first would
    fail the comparison."""
    p = write_kernel(tmp_path, "MODE = 'x'\n" + IADD_REUSED)
    a = np.stack([_operands(256, 128, 512, ml_dtypes.bfloat16, seed=s)[0] for s in (1, 2)])
    b = np.stack([_operands(256, 128, 512, ml_dtypes.bfloat16, seed=s)[1] for s in (3, 4)])
    out = snki.values(snki.load_kernel(str(p), "k"), [a, b])
    for g in range(2):
        _check(out[g], a[g], b[g])


def test_iadd_onto_psum_a_vector_op_wrote_is_still_refused(tmp_path: Path) -> None:
    """``+=`` onto PSUM a memset of 1.0 wrote: undefined on hardware (nc_matmul docs), so
    refused naming the memset, not silently overwritten by a START."""
    p = write_kernel(tmp_path, "MODE = 'ones'\n" + IADD_REUSED)
    a, b = (np.zeros((2, 256, n), ml_dtypes.bfloat16) for n in (128, 512))
    with pytest.raises(KernelError, match="memset at line"):
        snki.record(snki.load_kernel(str(p), "k"), [a, b])


MOD_ALLOC = '''
import neuronxcc.nki.compiler as ncc

@nki.jit
def k(x):
    out = nl.ndarray((4, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((4, nl.par_dim(128), 64), dtype=nl.float32,
                   buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
    for i in nl.sequential_range(4):
        t[i] = nl.load(x[i])
    for i in nl.sequential_range(4):
        nl.store(out[i], value=t[i])
    return out
'''


def test_mod_alloc_blocks_share_their_physical_tile(tmp_path: Path) -> None:
    """``ncc.sbuf.mod_alloc(num_free_tiles=(2,))``: logical tiles 0 and 2 (1 and 3) are one
    physical tile (the API reference's ``i % 2``), so after all four loads, tile 0 reads
    what tile 2 wrote. Before, each logical tile had its own memory (out == x)."""
    p = write_kernel(tmp_path, MOD_ALLOC)
    x = np.arange(4 * 128 * 64, dtype=np.float32).reshape(4, 128, 64)
    out = snki.values(snki.load_kernel(str(p), "k"), [x])
    np.testing.assert_array_equal(out, x[[2, 3, 2, 3]])


def test_mod_alloc_psum_tile_needs_only_its_physical_banks(tmp_path: Path) -> None:
    """A [2, 8] block PSUM tensor of one bank each (16 banks, twice PSUM) with
    ``num_bank_tiles=(2, 4)`` takes 8 banks and runs (refused "PSUM is full" before);
    each block's matmul result is read out before its bank's next tenant."""
    p = write_kernel(tmp_path, '''
import neuronxcc.nki.compiler as ncc

@nki.jit
def k(lhsT, rhs):
    out = nl.ndarray((2, 8, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    ps = nl.ndarray((2, 8, nl.par_dim(128), 512), dtype=nl.float32,
                    buffer=ncc.psum.mod_alloc(base_bank=0, num_bank_tiles=(2, 4)))
    a = nl.load(lhsT)
    b = nl.load(rhs)
    for i in nl.sequential_range(2):
        for j in nl.sequential_range(8):
            ps[i, j, :, :] = nisa.nc_matmul(a, b)
            res = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
            res[...] = nisa.tensor_copy(ps[i, j, :, :])
            nl.store(out[i, j], value=res)
    return out
''')
    a, b = _operands(128, 128, 512, ml_dtypes.bfloat16)
    out = snki.values(snki.load_kernel(str(p), "k"), [a, b])
    for i in range(2):
        for j in range(8):
            _check(out[i, j], a, b)


def test_alloc_func_places_tensors_over_each_other(tmp_path: Path) -> None:
    """``ncc.sbuf.alloc(func)`` is honoured: two tensors the kernel puts at the same bytes
    share them, so the second load overwrites what the first tensor reads back (before:
    each tensor had its own place, out[0] == x[0])."""
    p = write_kernel(tmp_path, '''
import neuronxcc.nki.compiler as ncc

def at(addr):
    return ncc.sbuf.alloc(lambda idx, pdim_size, fdim_size: (0, addr))

@nki.jit
def k(x):
    out = nl.ndarray((2, 128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.ndarray((nl.par_dim(128), 64), dtype=nl.float32, buffer=at(1024))
    b = nl.ndarray((nl.par_dim(128), 64), dtype=nl.float32, buffer=at(1024))
    a[...] = nl.load(x[0])
    b[...] = nl.load(x[1])
    nl.store(out[0], value=a)
    nl.store(out[1], value=b)
    return out
''')
    x = np.arange(2 * 128 * 64, dtype=np.float32).reshape(2, 128, 64)
    out = snki.values(snki.load_kernel(str(p), "k"), [x])
    np.testing.assert_array_equal(out, x[[1, 1]])


def test_direct_allocation_in_a_loop_body_keeps_its_first_place(tmp_path: Path) -> None:
    """NKI traces an affine_range body once, so an address counter the body advances moves
    once: every iteration's tile is at the first iteration's address (here the counter
    would pass the end of SBUF by the fourth of 64 iterations)."""
    p = write_kernel(tmp_path, '''
import neuronxcc.nki.compiler as ncc

@nki.jit
def k(x):
    out = nl.ndarray((64, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    addr = 0
    for i in nl.affine_range(64):
        t = nl.ndarray((nl.par_dim(128), 512), dtype=nl.float32,
                       buffer=ncc.sbuf.mod_alloc(base_addr=addr))
        addr += 65536
        t[...] = nl.load(x[i])
        nl.store(out[i], value=t)
    return out
''')
    x = np.random.default_rng(0).standard_normal((64, 128, 512)).astype(np.float32)
    out = snki.values(snki.load_kernel(str(p), "k"), [x])
    np.testing.assert_array_equal(out, x)


@pytest.mark.parametrize("func,match", [
    ("lambda idx, pdim_size, fdim_size: (0,)", "expected \\(start_partition, byte_addr\\)"),
    ("lambda idx, pdim_size, fdim_size: (0, 10**9)", "pass the end of SBUF"),
    ("lambda idx, pdim_size, fdim_size: (idx[0] * 32, 0)", "different start partitions"),
])
def test_bad_allocation_functions_are_one_line_errors(tmp_path: Path, func: str,
                                                      match: str) -> None:
    p = write_kernel(tmp_path, f'''
import neuronxcc.nki.compiler as ncc

@nki.jit
def k(x):
    out = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.ndarray((2, nl.par_dim(32), 64), dtype=nl.float32, buffer=ncc.sbuf.alloc({func}))
    t[0] = nl.load(x[0:32])
    nl.store(out[0:32], value=t[0])
    return out
''')
    with pytest.raises(KernelError, match=match) as exc:
        snki.record(snki.load_kernel(str(p), "k"), [np.zeros((128, 64), np.float32)])
    assert "\n" not in exc.value.message


def test_nl_matmul_of_fp32_and_bf16_promotes_to_fp32(tmp_path: Path) -> None:
    """``nl.matmul`` of an fp32 tile and a bf16 tile (the attention tutorial's v1 in its
    bf16 benchmark mode): the bf16 tile is converted to fp32 (exact), so the product is
    the fp32 matmul's: within 2^-12 of float64 relative to |x|.T @ |y| (the fp32 tile
    rounded to bf16 instead would be off by about 2^-9). Refused before ("fp32 operands
    pair only with fp32")."""
    p = write_kernel(tmp_path, '''
@nki.jit
def k(x, y):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    xs = nl.load(x)
    ys = nl.load(y)
    nl.store(out, value=nl.matmul(xs, ys, transpose_x=True))
    return out
''')
    rng = np.random.default_rng(3)
    x = rng.standard_normal((128, 128)).astype(np.float32)
    y = rng.standard_normal((128, 512)).astype(ml_dtypes.bfloat16)
    out = snki.values(snki.load_kernel(str(p), "k"), [x, y])
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    err = np.abs(out - x64.T @ y64)
    assert np.all(err <= 2.0**-12 * (np.abs(x64).T @ np.abs(y64)))
    xb = x.astype(ml_dtypes.bfloat16).astype(np.float64)
    assert np.abs(xb.T @ y64 - x64.T @ y64).max() > 4 * err.max()  # the test can tell


def test_a_dropped_recording_is_freed_without_the_garbage_collector() -> None:
    """A recording holds no reference cycle (a tensor's whole view is made when asked), so
    dropping it frees it by reference counts, with the collector off: a process recording
    large kernels one after another does not grow (flash attention at 8K grew ~100 MB a
    call while a tensor kept its own view, a cycle per tensor)."""
    import gc
    import weakref

    a, b = _operands(128, 128, 512, ml_dtypes.bfloat16)
    was = gc.isenabled()
    gc.disable()
    try:
        first = snki.record(_kernel("tiled_matmul"), [a, b])
        gone = weakref.ref(first.outputs[0])
        del first
        assert gone() is None
    finally:
        if was:
            gc.enable()


PSUM_BLOCKS = '''
@nki.jit
def k(lhsT, rhs):
    out = nl.ndarray((NB, 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    ps = nl.ndarray((NB, nl.par_dim(128), 512), dtype=nl.float32, buffer=nl.psum)
    if WHOLE:
        nisa.memset(dst=ps, value=0.0)
    a = nl.load(lhsT)
    for j in nl.affine_range(NB):
        b = nl.load(rhs[:, j * 512:(j + 1) * 512])
        ps[j, :, :] = nisa.nc_matmul(a, b)
        res = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
        res[...] = nisa.tensor_copy(ps[j, :, :])
        nl.store(out[j], value=res)
    return out
'''


def test_a_psum_tensor_of_many_blocks_gets_a_bank_per_live_block(tmp_path: Path) -> None:
    """A [16, P, 512] fp32 PSUM tensor is 16 banks, twice PSUM, but each block is written
    and read at once: the compiler places logical tiles one by one (nki/blocks.py), so it
    runs; refused "PSUM is full" before. Each block is its own product."""
    p = write_kernel(tmp_path, "NB = 16\nWHOLE = False\n" + PSUM_BLOCKS)
    a, b = _operands(128, 128, 16 * 512, ml_dtypes.bfloat16)
    out = snki.values(snki.load_kernel(str(p), "k"), [a, b])
    for j in range(16):
        _check(out[j], a, b[:, j * 512:(j + 1) * 512])


def test_a_psum_tensor_used_whole_is_placed_whole(tmp_path: Path) -> None:
    """A whole-tensor memset spans the blocks, so the tensor keeps one place: 4 blocks fit
    (values right), 16 do not (the one-line PSUM refusal, as before the block placement)."""
    p = write_kernel(tmp_path, "NB = 4\nWHOLE = True\n" + PSUM_BLOCKS)
    a, b = _operands(128, 128, 4 * 512, ml_dtypes.bfloat16)
    out = snki.values(snki.load_kernel(str(p), "k"), [a, b])
    for j in range(4):
        _check(out[j], a, b[:, j * 512:(j + 1) * 512])
    p = write_kernel(tmp_path, "NB = 16\nWHOLE = True\n" + PSUM_BLOCKS)
    a, b = _operands(128, 128, 16 * 512, ml_dtypes.bfloat16)
    with pytest.raises(KernelError, match="PSUM is full"):
        snki.record(snki.load_kernel(str(p), "k"), [a, b])
