"""Tiled matmul with the loads hoisted out of the K loop (current API): chapter 2 of
docs/tutorial.md "Why is my kernel slow".

For each M tile, its K stationary tiles [128, 128] are loaded once and serve every N tile;
for each output tile, its K moving tiles [128, 512] are loaded together before the K loop,
so the loads' fixed costs overlap instead of queueing behind each matmul.
lhsT [K, M], rhs [K, N]; K, M multiples of 128, N a multiple of 512.
"""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def hoisted_matmul(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    TK, TM, TN = 128, 128, 512
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        a_tiles = []
        for k in nl.affine_range(K // TK):  # the M tile's stationary column, loaded once
            a = nl.ndarray((TK, TM), dtype=lhsT.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=a, src=lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
            a_tiles.append(a)
        for n in nl.affine_range(N // TN):
            b_tiles = []
            for k in nl.affine_range(K // TK):  # every moving tile of the output tile first
                b = nl.ndarray((TK, TN), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=b, src=rhs[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
                b_tiles.append(b)
            acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TK):
                nisa.nc_matmul(dst=acc, stationary=a_tiles[k], moving=b_tiles[k])
            res = nl.ndarray((TM, TN), dtype=out.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], src=res)
    return out
