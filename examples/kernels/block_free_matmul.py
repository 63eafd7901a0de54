"""Matmul with both free dimensions blocked (current API): chapter 3 of docs/tutorial.md
"Why is my kernel slow".

A block of TILES_M stationary tiles and a block of TILES_N moving tiles are loaded with one
DMA per K tile each ([128, 128 * TILES_M] and [128, 512 * TILES_N]: long contiguous runs)
and stay in SBUF while the TILES_M x TILES_N output tiles of the block are computed, so
each byte loaded from HBM serves TILES_N (stationary) or TILES_M (moving) matmuls.
lhsT [K, M], rhs [K, N]; K a multiple of 128, M of 128 * TILES_M, N of 512 * TILES_N.
"""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def block_free_matmul(lhsT, rhs, TILES_M=4, TILES_N=2):
    K, M = lhsT.shape
    _, N = rhs.shape
    TK, TM, TN = 128, 128, 512
    BM, BN = TM * TILES_M, TN * TILES_N
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for mb in nl.affine_range(M // BM):
        a_block = []
        for k in nl.affine_range(K // TK):
            a = nl.ndarray((TK, BM), dtype=lhsT.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=a, src=lhsT[k * TK:(k + 1) * TK, mb * BM:(mb + 1) * BM])
            a_block.append(a)
        for nb in nl.affine_range(N // BN):
            b_block = []
            for k in nl.affine_range(K // TK):
                b = nl.ndarray((TK, BN), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=b, src=rhs[k * TK:(k + 1) * TK, nb * BN:(nb + 1) * BN])
                b_block.append(b)
            for i in nl.affine_range(TILES_M):
                row = nl.ndarray((TM, BN), dtype=out.dtype, buffer=nl.sbuf)
                for j in nl.affine_range(TILES_N):
                    acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(K // TK):
                        nisa.nc_matmul(dst=acc, stationary=a_block[k][:, i * TM:(i + 1) * TM],
                                       moving=b_block[k][:, j * TN:(j + 1) * TN])
                    nisa.tensor_copy(dst=row[:, j * TN:(j + 1) * TN], src=acc)
                r0 = mb * BM + i * TM
                nisa.dma_copy(dst=out[r0:r0 + TM, nb * BN:(nb + 1) * BN], src=row)
    return out
