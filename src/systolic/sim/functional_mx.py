"""The MX pair on the functional simulator: the living definition of its numerics.

``LdWeightMx`` decodes the stationary tile from its dual-address descriptor (x4 containers
and E8M0 scales, layout in :mod:`systolic.isa`) and latches it: ``state.tiles`` holds the
dequantized values [K, M] (X * P, exact in float32 unless it overflows) with the element
values and scales beside them (``Latched.mx``) for the product. Both handlers are functions
of (:class:`~systolic.sim._base.MachineState`, instruction), in the simulator's table.

``MatmultMx`` computes, for the tile's blocks b = 0..G-1 (G = K/32, at most 16; block b is
k = 32b..32b+31, partitions 8b..8b+7)::

    S_b[m, n] = sum over the block's 32 k of  P_a[k, m] * P_b[k, n]     (fp32)
    R_b[m, n] = fl32(X_a[b, m] * X_b[b, n] * S_b[m, n])                  (one rounding)
    res       = (((R_0 + R_1) + R_2) + ... + R_{G-1})                    (fp32, block order)

and adds ``res`` into the fp32 PSUM region like a dense MatMul: START writes it, anything else
adds it with one fp32 rounding, in program order (``state.accumulate``). This is OCP MX v1.0
section 6's dot product (X_a X_b sum P_a P_b per block, longer dots summing block dots in
fp32), with the implementation-defined parts chosen as follows:

* Element products are exact in fp32 (FACTS "Numerics": every fp8 or fp4 product is).
* The scale product X_a X_b = 2**(e_a + e_b) multiplies the fp32 block sum with a single
  rounding to fp32, so R_b is the correctly rounded scaled block sum (it underflows or
  overflows only if that value does). When 2**(e_a + e_b) is itself a float32 (exponent
  -149..127) one fp32 multiply does it; otherwise the product is taken exactly in float64
  and rounded once. An E8M0 NaN scale (0xFF) makes the block NaN.
* The block sum S_b depends on the simulator's ``order``:

  - ``fast``: one fp32 GEMM per block (a batched ``matmul`` over the tile's blocks); BLAS
    picks the order of the 32 additions. For MXFP4 any order gives the same S_b (a 32-term
    e2m1 block sum is exact in fp32, FACTS); for MXFP8 it may differ in the last bits.
  - ``systolic``: the partial sum flows down the block's 8 PE rows, 4 slots each: starting
    from 0, add the products for k = 32b, 32b+1, ..., 32b+31 (partition, then slot order)
    with one fp32 rounding per step. All blocks run at once (vectorised over blocks).

  Both then add R_b in block order as above. The whole error stays within the fp32 bound of
  a K-term sum of the dequantized operands (at most K - 1 roundings along any path plus one
  per block), which tests/test_mx_matmul.py checks against float64.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np

from ..dtypes import get_format
from ..errors import SystolicError
from ..geometry import Rect
from ..isa import AccessPattern, LdWeightMx, MatmultMx
from ..memory import Memory
from ..mx import BLOCK, SLOTS
from ..verify.mx import scale_rows
from ._base import MachineState

__all__ = ["MxOperand", "block_products", "load_mx", "matmul_mx", "read_operand"]


@dataclass(frozen=True, slots=True)
class MxOperand:
    """One decoded MX tile: ``elems`` float32 [G, 32, F] element values (block, k within the
    block, free index), ``exps`` int32 [G, F] scale exponents e (X = 2**e) and ``nan`` bool
    [G, F], True where the scale byte is 0xFF (NaN; OCP MX v1.0 5.4)."""

    elems: np.ndarray
    exps: np.ndarray
    nan: np.ndarray

    def scales(self, dtype: type[np.floating] = np.float64) -> np.ndarray:
        """X = 2**e as ``dtype`` [G, F] (exact in float64; float32 holds 2**-149..2**127)."""
        with np.errstate(over="ignore"):  # 0xFF's exponent 128 overflows; it is NaN below
            x = np.ldexp(dtype(1.0), self.exps).astype(dtype)
        x[self.nan] = np.nan
        return x

    def dequantized(self) -> np.ndarray:
        """X * P as float32 [K, F] (an overflow to inf is the format's, mx.dequantize)."""
        with np.errstate(over="ignore", invalid="ignore"):
            v = (self.elems * self.scales()[:, None, :]).astype(np.float32)
        return v.reshape(-1, v.shape[-1])


@cache
def _byte_lut(elem: str) -> np.ndarray:
    """Container byte -> its element values, float32 [256, slots per byte]: one fp8 value,
    or two fp4 values (low nibble first: FACTS "Hardware", element 2i low, 2i+1 high)."""
    f = get_format(elem)
    b = np.arange(256, dtype=np.uint8)
    if f.bits == 8:
        return b.view(f.storage).astype(np.float32)[:, None]
    nibbles = np.stack([b & np.uint8(0x0F), b >> np.uint8(4)], axis=1)  # ml_dtypes: 1 per byte
    return nibbles.view(f.storage).astype(np.float32)


def read_operand(memory: Memory, data: AccessPattern, scale: AccessPattern,
                 fmt: str) -> MxOperand:
    """Decode one dual-address descriptor: k = 4p + q (partition p, slot q) of the tile.

    The x4 containers are read as their little-endian bytes, so element 0 comes first
    (fp8: the low byte; fp4: the low nibble of byte 0), the layout :func:`mx.pack_x4`
    writes (FACTS "Hardware")."""
    parts, free = data.partitions, data.dims[-1][1]
    elem = get_format(fmt).element
    assert elem is not None
    raw = np.ascontiguousarray(memory.view(data)).reshape(parts, free)
    vals = _byte_lut(elem)[raw.view(np.uint8)].reshape(parts, free, SLOTS)  # [P, F, 4]
    blocks = parts * SLOTS // BLOCK
    # k = 4p + q and block = k // 32: [P, F, 4] -> [P, 4, F] -> [G, 32, F]
    elems = np.ascontiguousarray(vals.transpose(0, 2, 1)).reshape(blocks, BLOCK, free)
    codes = memory.view(scale).reshape(scale.partitions, free).view(np.uint8)
    codes = codes[scale_rows(blocks)].astype(np.int32)
    return MxOperand(elems, codes - 127, codes == 255)


def block_products(a: MxOperand, b: MxOperand, order: str) -> np.ndarray:
    """The instruction's float32 result [M, N] by the module docstring's order."""
    if order == "fast":
        s = np.matmul(a.elems.transpose(0, 2, 1), b.elems)  # [G, M, N] fp32, BLAS order
    else:
        g, _, m = a.elems.shape
        s = np.zeros((g, m, b.elems.shape[2]), np.float32)
        for j in range(BLOCK):  # k = 32b + j for every block b at once
            s += a.elems[:, j, :, None] * b.elems[:, j, None, :]
    # X_a X_b = 2**(e_a + e_b). When every such power is a float32 (exponent -149..127) the
    # fp32 product S * X is the one correctly rounded result; otherwise multiply in float64
    # (exact) and round once.
    lo = int(a.exps.min()) + int(b.exps.min())
    hi = int(a.exps.max()) + int(b.exps.max())
    wide = np.float32 if lo >= -149 and hi <= 127 else np.float64
    sa, sb = a.scales(wide), b.scales(wide)
    with np.errstate(over="ignore", invalid="ignore"):
        r = (s * (sa[:, :, None] * sb[:, None, :])).astype(np.float32, copy=False)
        res = r[0].copy()
        for blk in range(1, r.shape[0]):  # block order, one fp32 rounding per add
            res += r[blk]
    return res


def load_mx(state: MachineState, ins: LdWeightMx) -> None:
    """Latch the MX stationary tile [K, M] at rows src.partition.., columns 0.. ."""
    op = read_operand(state.memory, ins.src, ins.scale, ins.fmt)
    rect = Rect(ins.src.partition, ins.src.partitions, ins.column, ins.src.dims[-1][1])
    state.latch(rect, op.dequantized(), mx=op)


def matmul_mx(state: MachineState, ins: MatmultMx) -> None:
    """Multiply the moving tile by the latched MX tile and accumulate into PSUM."""
    mv, dst = ins.moving, ins.dst
    held = state.tiles.get(Rect(mv.partition, mv.partitions, dst.partition, dst.partitions))
    if held is None or not isinstance(held.mx, MxOperand):
        raise SystolicError("MatmultMx found no tile latched by an LdWeightMx at its rows and "
                            "columns; run verify() on the Program")
    b = read_operand(state.memory, mv, ins.scale, ins.fmt)
    state.accumulate(dst, ins.flags, block_products(held.mx, b, state.order))
