"""The older API's ``nisa.nc_matmul(stationary, moving, tile_position=, tile_size=)``
(issue 19 item 4): the compiler allocates the operands where the PE row tile reads them
(row r reads SBUF partition r) and the result where its columns drain (column m into PSUM
partition m); values against float64 numpy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import opcodes, record_source, write_kernel

import systolic.nki as snki
from systolic.errors import KernelError


@pytest.fixture(autouse=True)
def _hook() -> None:
    snki.install("trn2")


TILED = '''
@nki.jit
def k(g_tensor, h_tensor):
    out = nl.ndarray((4, 64, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    for i in nl.affine_range(2):
        for j in nl.affine_range(2):
            g = nl.load(g_tensor[i * 2 + j])
            h = nl.load(h_tensor[i * 2 + j])
            r = nisa.nc_matmul(g, h, tile_position=(i * 64, j * 64), tile_size=(64, 64))
            nl.store(out[i * 2 + j], r)
    return out
'''


def test_older_api_tile_position_places_operands_and_result(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    g = rng.integers(-4, 5, (4, 64, 64)).astype(np.float32)
    h = rng.integers(-4, 5, (4, 64, 512)).astype(np.float32)
    got = snki.values(snki.load_kernel(str(write_kernel(tmp_path, TILED)), "k"), [g, h])
    want = np.einsum("bkm,bkn->bmn", g.astype(np.float64), h.astype(np.float64))
    assert np.array_equal(np.asarray(got, np.float64), want)  # small ints: exact in fp32
    rec = record_source(tmp_path, TILED, ["fp32[4,64,64]", "fp32[4,64,512]"])
    tiles = {(i.src.partition, i.src.partitions, i.column)
             for i in rec.program if type(i).__name__ == "LoadStationary"}
    # each tile latched at its row and column position, 64 x 64
    assert tiles == {(r, 64, c) for r in (0, 64) for c in (0, 64)}
    drains = {i.dst.partition for i in rec.program if type(i).__name__ == "MatMul"}
    assert drains == {0, 64}
    assert opcodes(rec).count("DmaCopy") == 12


def test_an_operand_already_placed_elsewhere_is_refused_in_one_line(tmp_path: Path) -> None:
    body = TILED.replace("            r = nisa", "            nl.store(out[0], nl.copy(h))\n"
                                               "            r = nisa")
    with pytest.raises(KernelError, match="reads SBUF partitions 64"):
        record_source(tmp_path, body, ["fp32[4,64,64]", "fp32[4,64,512]"])
