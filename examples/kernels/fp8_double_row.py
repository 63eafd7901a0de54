"""fp8 DoubleRow on trn2: each PE row takes two contraction rows, so one nc_matmul covers
K = 256 (current API, perf_mode=double_row).

This model's layout for DoubleRow operands (the NKI docs do not spell it out; unsure): an
SBUF tile [128, 2, F] holds contraction element k = 2p + j at partition p, slot j. In HBM the
operands are lhsT [K, M] and rhs [K, N] as usual; the DMA views pick rows 2p + j.
"""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit(platform_target="trn2")
def fp8_double_row(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    TK, TM, TN = 256, 128, 512
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        for n in nl.affine_range(N // TN):
            acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TK):
                a = nl.ndarray((128, 2, TM), dtype=lhsT.dtype, buffer=nl.sbuf)
                b = nl.ndarray((128, 2, TN), dtype=rhs.dtype, buffer=nl.sbuf)
                for j in nl.static_range(2):  # rows k0 + 2p + j of each operand
                    nisa.dma_copy(dst=a[:, j, :],
                                  src=lhsT[k * TK + j:(k + 1) * TK:2, m * TM:(m + 1) * TM])
                    nisa.dma_copy(dst=b[:, j, :],
                                  src=rhs[k * TK + j:(k + 1) * TK:2, n * TN:(n + 1) * TN])
                nisa.nc_matmul(dst=acc, stationary=a, moving=b,
                               perf_mode=nisa.matmul_perf_mode.double_row)
            res = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], src=res)
    return out
