"""Layer normalisation (current API): y = (x - mean) / sqrt(var + eps) * gamma + beta, per row.

Rows go 128 to a tile (the partitions). Per tile: nisa.bn_stats on each 512-element slice of
the row (nl.tile_size.bn_stats_fmax) into one [128, 6k] statistics tile, nisa.bn_aggr of it
into [mean, variance] (Vector), var + eps (Vector) and its rsqrt (Scalar), then one
tensor_scalar with two operators, (x - mean) * rstd, and gamma / beta (tensor_tensor). gamma
and beta [F] are read once onto all 128 partitions (a DMA whose partitions read the same row:
partition step 0). x [N, F] with N a multiple of 128 and F of 512.
"""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def layernorm(x, gamma, beta, eps=1e-5):
    N, F = x.shape
    FMAX = nl.tile_size.bn_stats_fmax
    out = nl.ndarray((N, F), dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.ndarray((128, F), dtype=gamma.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=g, src=gamma.ap([[0, 128], [1, F]]))
    b = nl.ndarray((128, F), dtype=beta.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=b, src=beta.ap([[0, 128], [1, F]]))
    for i in nl.affine_range(N // 128):
        t = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[i * 128:(i + 1) * 128, :])
        stats = nl.ndarray((128, 6 * (F // FMAX)), dtype=nl.float32, buffer=nl.sbuf)
        for j in nl.affine_range(F // FMAX):
            nisa.bn_stats(dst=stats[:, j * 6:(j + 1) * 6], data=t[:, j * FMAX:(j + 1) * FMAX])
        mv = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.sbuf)
        nisa.bn_aggr(dst=mv, data=stats)
        ve = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=ve, data=mv[:, 1:2], op0=nl.add, operand0=eps)
        rstd = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=rstd, op=nl.rsqrt, data=ve)
        z = nl.ndarray((128, F), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=z, data=t, op0=nl.subtract, operand0=mv[:, 0:1],
                           op1=nl.multiply, operand1=rstd)
        zg = nl.ndarray((128, F), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=zg, data1=z, data2=g, op=nl.multiply)
        y = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=y, data1=zg, data2=b, op=nl.add)
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=y)
    return out
