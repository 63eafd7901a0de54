"""write_dram encodes a large operand in row blocks: the same bytes as one encode, and the
same error (naming the whole operand's worst value) when a late block overflows. Ordinary
float32 values are cast straight into device memory instead (dtypes.encode_into): the bytes
of ml_dtypes' own cast. systolic.matmul writes a large b on a second thread: the same bytes,
and the error written one after the other would raise."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import operands, run_lowered

import systolic
from systolic import FORMATS, FunctionalSimulator, get_arch
from systolic.compiler import MatmulSpec, lower
from systolic.dtypes import encode, get_format
from systolic.errors import FormatError


@pytest.mark.parametrize("wide", [False, True])
@pytest.mark.parametrize("dtype", ["bf16", "fp8_e4m3", "fp16", "int8"])
def test_blocks_give_the_bytes_of_one_encode(dtype: str, wide: bool) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1500, 700)).astype(np.float32)  # several 1 MiB blocks
    if dtype == "int8":
        x = np.round(x * 20)
    if wide:  # float64 values: the blocks, never the in-place cast of float32
        x = x.astype(np.float64)
    sim = FunctionalSimulator("trn2", dram_bytes=x.size * 4 + 64)
    sim.write_dram(8, x, dtype)
    want = np.ascontiguousarray(encode(x, dtype)).reshape(-1).view(np.uint8)
    got = sim.memory.dram[8:8 + want.size]
    assert np.array_equal(got, want)
    assert not sim.memory.dram[:8].any() and not sim.memory.dram[8 + want.size:].any()


def test_a_late_overflow_gives_the_whole_operands_error() -> None:
    x = np.ones((1500, 700), np.float32)
    x[1000, 3] = 1e6  # a smaller overflow of fp8_e4m3 (max 240), after a written block
    x[1400, 5] = 3e7  # the worst, in a late block
    with pytest.raises(FormatError) as whole:
        encode(x, "fp8_e4m3")
    for before in (0, 7):  # fresh (zero) and earlier-written device memory
        sim = FunctionalSimulator("trn2", dram_bytes=x.size + 64)
        sim.memory.dram[:] = before
        with pytest.raises(FormatError) as blocks:
            sim.write_dram(0, x, "fp8_e4m3")
        assert str(blocks.value) == str(whole.value)
        assert "3e+07" in str(blocks.value)
        assert (sim.memory.dram == before).all()  # nothing half-written


@pytest.mark.parametrize("name", [n for n in FORMATS if get_format(n).kind == "float"])
def test_ordinary_float32_lands_with_ml_dtypes_bytes(name: str) -> None:
    f = get_format(name)
    rng = np.random.default_rng(2)
    top = min(f.max, 1e38)  # normals up to the format's largest, subnormals, signed zeros
    x = (rng.uniform(-1, 1, (300, 400)) * top).astype(np.float32)
    x[0, :100] = rng.standard_normal(100).astype(np.float32) * np.float32(1e-40)
    x[1, :10] = [0.0, -0.0, f.max, -f.max, 1, -1, 0.5, 2, 3, -3]
    sim = FunctionalSimulator("trn2", dram_bytes=x.size * 4 + 64)
    sim.memory.dram[:] = 9  # earlier bytes: overwritten where it writes, kept elsewhere
    sim.write_dram(4, x, name)
    # the independent reference: ml_dtypes' (numpy's for fp16 and fp32) cast; tf32 and
    # fp32r round on their bits, so encode is theirs (test_dtypes holds it to float64)
    want = encode(x, name) if name in ("tf32", "fp32r") else x.astype(f.storage)
    raw = np.ascontiguousarray(want).reshape(-1).view(np.uint8)
    assert np.array_equal(sim.memory.dram[4:4 + raw.size], raw)
    assert (sim.memory.dram[:4] == 9).all() and (sim.memory.dram[4 + raw.size:] == 9).all()


@pytest.mark.parametrize("bad", ["a", "b", "both"])
def test_matmul_raises_the_first_operands_error_with_b_on_a_thread(bad: str) -> None:
    rng = np.random.default_rng(3)
    a = rng.standard_normal((64, 1024)).astype(np.float32)
    b = rng.standard_normal((1024, 1024)).astype(np.float32)  # 1 Mi elements: a thread
    if bad in ("a", "both"):
        a[5, 7] = 1e6
    if bad in ("b", "both"):
        b[900, 3] = 3e7
    with pytest.raises(FormatError) as got:
        systolic.matmul(a, b, dtype="fp8_e4m3")
    worst = "1e+06" if bad != "b" else "3e+07"  # a's first, as written one after the other
    assert worst in str(got.value)
    with pytest.raises(FormatError) as alone:
        encode(a if bad != "b" else b, "fp8_e4m3")
    assert str(got.value) == str(alone.value)


def test_matmul_with_b_on_a_thread_gives_the_serial_bits() -> None:
    a, b = operands(128, 1024, 1024, "bf16", seed=4)  # b of 1 Mi elements: a thread
    got = systolic.matmul(a, b, dtype="bf16").out
    sim = run_lowered(MatmulSpec(128, 1024, 1024, "bf16"), a, b, workers=0)  # one by one
    lay = lower(MatmulSpec(128, 1024, 1024, "bf16"), get_arch("trn2")).layout
    assert np.array_equal(got.view(np.uint32),
                          sim.read_dram(lay.out_offset, (128, 1024), "fp32").view(np.uint32))
