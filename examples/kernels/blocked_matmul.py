"""Blocked matmul: a block of TILES_N moving tiles stays resident in SBUF for every M tile,
and each stationary tile serves the whole block, so the weight-tile cache hits (current API).

lhsT [K, M], rhs [K, N]; K, M multiples of 128; N a multiple of 512 * TILES_N.
"""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def blocked_matmul(lhsT, rhs, TILES_N=2):
    K, M = lhsT.shape
    _, N = rhs.shape
    TK, TM, TN = 128, 128, 512
    BN = TN * TILES_N
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for nb in nl.affine_range(N // BN):
        # the moving block: K/128 tiles of [128, BN], loaded once per N block
        rhs_tiles = []
        for k in nl.affine_range(K // TK):
            t = nl.ndarray((TK, BN), dtype=rhs.dtype, buffer=nl.sbuf)
            nisa.dma_copy(dst=t, src=rhs[k * TK:(k + 1) * TK, nb * BN:(nb + 1) * BN])
            rhs_tiles.append(t)
        for m in nl.affine_range(M // TM):
            accs = [nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
                    for _ in range(TILES_N)]
            for k in nl.affine_range(K // TK):
                a = nl.ndarray((TK, TM), dtype=lhsT.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
                for j in nl.affine_range(TILES_N):  # one latched tile, TILES_N moving tiles
                    nisa.nc_matmul(dst=accs[j], stationary=a,
                                   moving=rhs_tiles[k][:, j * TN:(j + 1) * TN])
            row = nl.ndarray((TM, BN), dtype=out.dtype, buffer=nl.sbuf)
            for j in nl.affine_range(TILES_N):
                nisa.tensor_copy(dst=row[:, j * TN:(j + 1) * TN], src=accs[j])
            nisa.dma_copy(dst=out[m * TM:(m + 1) * TM, nb * BN:(nb + 1) * BN], src=row)
    return out
