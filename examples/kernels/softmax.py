"""Row softmax (current API): y[i, :] = exp(x[i, :] - max_i) / sum(exp(x[i, :] - max_i)).

Rows go 128 to a tile (the partitions); each tile takes four engine instructions besides its
two DMAs: the row maximum (nisa.tensor_reduce, Vector), exp(x - max) with the row sums
reduced in the same instruction (nisa.activation with bias and reduce_res, Scalar), the
reciprocal of the sums (Scalar) and the scaling (nisa.tensor_scalar, Vector).
x [N, F] with N a multiple of 128.
"""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def softmax(x):
    N, F = x.shape
    out = nl.ndarray((N, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(N // 128):
        t = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[i * 128:(i + 1) * 128, :])
        neg_max = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=neg_max, op=nl.maximum, data=t, axis=1, negate=True)
        e = nl.ndarray((128, F), dtype=nl.float32, buffer=nl.sbuf)
        sums = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=e, op=nl.exp, data=t, bias=neg_max, reduce_op=nl.add,
                        reduce_res=sums, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        inv = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=inv, op=nl.reciprocal, data=sums)
        y = nl.ndarray((128, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y, data=e, op0=nl.multiply, operand0=inv)
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=y)
    return out
