"""Matmul with all three dimensions blocked and the sums kept in SBUF (current API):
chapter 4 of docs/tutorial.md "Why is my kernel slow".

For each N block, the fp32 partial sums of every output row tile stay in SBUF for the
whole K loop. K goes in blocks of TILES_K tiles: the moving block [128 * TILES_K, BN] is
loaded once per (N block, K block) and serves every M block; each M block's stationary
tiles are loaded once per (N block, K block) too. Each output tile's PSUM group covers one
K block; each latched stationary tile serves the TILES_N moving tiles of its row (the
weight-tile cache hits), and the Vector engine adds a row tile's groups onto the SBUF sums
(nisa.tensor_tensor) while the PE computes the next row tile (the adds are issued one row
tile late, so two sets of PSUM banks alternate). HBM sees the output once, at the end.
lhsT [K, M], rhs [K, N]; K a multiple of 128 * TILES_K, M of 128 * TILES_M,
N of 512 * TILES_N.
"""

import nki
import nki.isa as nisa
import nki.language as nl


def _add_into(sums, pending, TN):
    """sums[row][:, j-th 512 columns] += accs[j] (Vector engine: PSUM + SBUF -> SBUF)."""
    row, accs = pending
    for j, acc in enumerate(accs):
        s = sums[row][:, j * TN:(j + 1) * TN]
        nisa.tensor_tensor(dst=s, data1=s, data2=acc, op=nl.add)


@nki.jit
def block_all_matmul(lhsT, rhs, TILES_M=4, TILES_N=2, TILES_K=8):
    K, M = lhsT.shape
    _, N = rhs.shape
    TK, TM, TN = 128, 128, 512
    BM, BN, BK = TM * TILES_M, TN * TILES_N, TK * TILES_K
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for nb in nl.affine_range(N // BN):
        sums = []  # one fp32 [128, BN] row of partial sums per M tile, in SBUF
        for _ in nl.affine_range(M // TM):
            s = nl.ndarray((TM, BN), dtype=nl.float32, buffer=nl.sbuf)
            nisa.memset(dst=s, value=0.0)
            sums.append(s)
        for kb in nl.affine_range(K // BK):
            b_block = []
            for k in nl.affine_range(TILES_K):
                r = kb * BK + k * TK
                b = nl.ndarray((TK, BN), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=b, src=rhs[r:r + TK, nb * BN:(nb + 1) * BN])
                b_block.append(b)
            for mb in nl.affine_range(M // BM):
                a_block = []
                for k in nl.affine_range(TILES_K):
                    r = kb * BK + k * TK
                    a = nl.ndarray((TK, BM), dtype=lhsT.dtype, buffer=nl.sbuf)
                    nisa.dma_copy(dst=a, src=lhsT[r:r + TK, mb * BM:(mb + 1) * BM])
                    a_block.append(a)
                pending = None  # the previous row tile's PSUM groups, added after this one's
                for i in nl.affine_range(TILES_M):
                    accs = [nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
                            for _ in range(TILES_N)]
                    for k in nl.affine_range(TILES_K):  # one latched tile, TILES_N moving
                        for j in nl.affine_range(TILES_N):
                            nisa.nc_matmul(dst=accs[j],
                                           stationary=a_block[k][:, i * TM:(i + 1) * TM],
                                           moving=b_block[k][:, j * TN:(j + 1) * TN])
                    if pending is not None:
                        _add_into(sums, pending, TN)
                    pending = (mb * TILES_M + i, accs)
                _add_into(sums, pending, TN)
        for i in nl.affine_range(M // TM):
            row = nl.ndarray((TM, BN), dtype=out.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=row, src=sums[i])
            nisa.dma_copy(dst=out[i * TM:(i + 1) * TM, nb * BN:(nb + 1) * BN], src=row)
    return out
