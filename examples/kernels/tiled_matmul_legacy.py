"""The tiled matmul in the older NKI API (neuronxcc.nki): nl.load / nl.store, index grids,
``+=`` into a zeroed PSUM tile."""

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def tiled_matmul_legacy(lhsT, rhs):
    K, M = lhsT.shape
    _, N = rhs.shape
    TK, TM, TN = 128, 128, 512
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    ia = nl.mgrid[0:TK, 0:TM]
    ib = nl.mgrid[0:TK, 0:TN]
    io = nl.mgrid[0:TM, 0:TN]
    for m in nl.affine_range(M // TM):
        for n in nl.affine_range(N // TN):
            acc = nl.zeros((TM, TN), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TK):
                a = nl.load(lhsT[k * TK + ia.p, m * TM + ia.x])
                b = nl.load(rhs[k * TK + ib.p, n * TN + ib.x])
                acc += nl.matmul(a, b, transpose_x=True)
            res = nl.copy(acc, dtype=out.dtype)
            nl.store(out[m * TM + io.p, n * TN + io.x], value=res)
    return out
