"""write_dram encodes a large operand in row blocks: the same bytes as one encode, and the
same error (naming the whole operand's worst value) when a late block overflows."""

from __future__ import annotations

import numpy as np
import pytest

from systolic import FunctionalSimulator
from systolic.dtypes import encode
from systolic.errors import FormatError


@pytest.mark.parametrize("dtype", ["bf16", "fp8_e4m3", "fp16", "int8"])
def test_blocks_give_the_bytes_of_one_encode(dtype: str) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1500, 700)).astype(np.float32)  # several 1 MiB blocks
    if dtype == "int8":
        x = np.round(x * 20)
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
