"""Matrix transpose (current API): out = a.T, one 128 x 128 tile at a time.

Each tile is loaded, transposed on the Tensor Engine (nisa.nc_transpose: a matmul of the
tile, as stationary, against an identity, into PSUM; the identity is made once), copied
out of PSUM by the Vector engine and stored at its transposed place. bf16 is exact; fp32
goes through the model's fp32 matmul (two bf16 passes, ~16 significant bits). a [N, M] with
N and M multiples of 128.
"""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def transpose(a):
    N, M = a.shape
    out = nl.ndarray((M, N), dtype=a.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(N // 128):
        for j in nl.affine_range(M // 128):
            t = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=a[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128])
            tp = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.psum)
            nisa.nc_transpose(dst=tp, data=t, engine=nisa.engine.tensor)
            ts = nl.ndarray((128, 128), dtype=a.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=ts, src=tp)
            nisa.dma_copy(dst=out[j * 128:(j + 1) * 128, i * 128:(i + 1) * 128], src=ts)
    return out
