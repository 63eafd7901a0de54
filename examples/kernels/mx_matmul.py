"""MX (microscaling) matmul on trn3 with nisa.nc_matmul_mx, several tiles in every dimension.

Inputs, quantized offline: ``a_data`` [P, M] and ``b_data`` [P, N] uint32 words, each
holding four fp8 elements (an _x4 container, read as ``nl.float8_e4m3fn_x4``), so the
contraction is K = 4P; ``a_scale`` [P/8, M] and ``b_scale`` [P/8, N] uint8 E8M0 scales, one
per 8 partitions x 4 elements, stored contiguously. In SBUF the scales of block g go to
partition 32*(g//4) + g%4 of the block's quadrant (NKI docs, nki.isa.nc_matmul_mx).
out[M, N] = sum over K tiles of the dequantized stationary.T @ moving, fp32.
"""

import nki
import nki.isa as nisa
import nki.language as nl


def load_mx(data_hbm, scale_hbm, row0, col0, cols, dtype):
    """One [128, cols] MX tile and its scales, from partition row row0 / column col0."""
    width = data_hbm.shape[1]
    data = nl.ndarray((128, cols), dtype=dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=data, src=data_hbm.ap(pattern=[[width, 128], [1, cols]],
                                            offset=row0 * width + col0, dtype=dtype))
    scale = nl.ndarray((128, cols), dtype=nl.uint8, buffer=nl.sbuf)
    nisa.memset(dst=scale, value=0)
    for q in nl.static_range(4):  # blocks 4q..4q+3 -> partitions 32q..32q+3
        nisa.dma_copy(dst=scale[32 * q:32 * q + 4, :],
                      src=scale_hbm[row0 // 8 + 4 * q:row0 // 8 + 4 * q + 4, col0:col0 + cols])
    return data, scale


@nki.jit(platform_target="trn3")
def mx_matmul(a_data, a_scale, b_data, b_scale):
    P, M = a_data.shape
    _, N = b_data.shape
    TM, TN = 128, 512
    x4 = nl.float8_e4m3fn_x4
    out = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        for n in nl.affine_range(N // TN):
            acc = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(P // 128):
                sa, ssa = load_mx(a_data, a_scale, k * 128, m * TM, TM, x4)
                sb, ssb = load_mx(b_data, b_scale, k * 128, n * TN, TN, x4)
                nisa.nc_matmul_mx(dst=acc, stationary=sa, moving=sb, stationary_scale=ssa,
                                  moving_scale=ssb)
            res = nl.ndarray((TM, TN), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=res, src=acc)
            nisa.dma_copy(dst=out[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], src=res)
    return out
