"""On-chip placement (nki/alloc.py): the buffer rotation keeps each physical tile in the
space it was taken from. Issue 19 item 5: the nki-samples SD-attention reference kernel ended
in a KeyError because one kernel line made an SBUF and a PSUM tile in an affine_range body and
the rotation handed a held SBUF tile back to PSUM."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import write_kernel

import systolic.nki as snki
from systolic.arch import get_arch
from systolic.nki.alloc import OnChip
from systolic.nki.record import Loop
from systolic.nki.tensor import Tensor
from systolic.nki.types import BUFFERS, to_dtype


def _tile(buffer: str, loop: Loop, line: int = 10) -> Tensor:
    t = Tensor((128, 512), to_dtype("float32"), BUFFERS[buffer], ("k.py", line))
    t.loop = loop
    return t


def test_a_line_that_makes_sbuf_and_psum_tiles_rotates_each_in_its_own_space() -> None:
    """Two iterations of one affine_range body whose line makes an SBUF and a PSUM tile,
    released PSUM first the second time: every tile goes back to the space it came from,
    and after the loop both spaces are empty again."""
    chip = OnChip(get_arch("trn2"), buffers=2)
    loop = Loop("affine", 1, None)
    for order in (("sbuf", "psum"), ("psum", "sbuf")):
        tiles = {b: _tile(b, loop) for b in ("sbuf", "psum")}
        for b in ("sbuf", "psum"):
            chip.place(tiles[b])
        for b in order:
            chip.release(tiles[b])
    chip.end_loop(1)
    assert chip.sbuf.used == {} and chip.psum.used == {}
    assert chip.sbuf.free == [(0, chip.sbuf.size)] and chip.psum.free == [(0, chip.psum.size)]


# the same shape of kernel: nl.store of a matmul result makes, on one line, the PSUM result
# and the SBUF tile the store copies it through (nl.store of a PSUM tile)
STORE_MATMUL = '''
@nki.jit
def k(a, b):
    K, M = a.shape
    out = nl.ndarray((4, M, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    x = nl.load(a)
    for i in nl.affine_range(4):
        y = nl.load(b[:, i * 512:(i + 1) * 512])
        nl.store(out[i], nl.matmul(x, y, transpose_x=True))
    return out
'''


def test_a_kernel_line_making_psum_and_sbuf_tiles_in_a_loop_runs(tmp_path) -> None:
    snki.install("trn2")
    rng = np.random.default_rng(0)
    a = rng.integers(-4, 5, (128, 128)).astype(np.float32)
    b = rng.integers(-4, 5, (128, 2048)).astype(np.float32)
    out = snki.values(snki.load_kernel(str(write_kernel(tmp_path, STORE_MATMUL)), "k"),
                      [a, b])
    want = (a.astype(np.float64).T @ b.astype(np.float64)).reshape(128, 4, 512)
    # small integers: every product and sum is exact in the model's fp32 matmul
    assert np.array_equal(np.asarray(out, np.float64), want.transpose(1, 0, 2))


@pytest.mark.parametrize("buffers", [1, 2, 3])
def test_rotation_never_frees_a_tile_twice(buffers: int) -> None:
    chip = OnChip(get_arch("trn2"), buffers=buffers)
    loop = Loop("affine", 7, None)
    for it in range(6):
        made = [_tile("sbuf" if (it + j) % 2 else "psum", loop) for j in range(3)]
        for t in made:
            chip.place(t)
        for t in reversed(made) if it % 2 else made:
            chip.release(t)
    chip.end_loop(7)
    assert chip.sbuf.used == {} and chip.psum.used == {}
