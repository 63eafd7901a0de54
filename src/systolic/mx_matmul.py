"""``systolic.matmul`` for the MX formats: quantize, lower, simulate (gen4 only).

:func:`run_mx` is what :func:`systolic.matmul` calls for ``mxfp8_e4m3``, ``mxfp8_e5m2`` and
``mxfp4``:

1. pad K up to a multiple of 32 with zeros (a zero adds nothing to a block's dot product
   and changes no other element's code, so the result is that of the unpadded product);
2. quantize both operands along K with the blocks the hardware sees
   (:func:`systolic.mx.quantize_hw` of a.T [K, M] and of b [K, N], contiguous layout: the
   OCP blocks of 32 consecutive k) under ``mx_rule`` (``trainium``, the default, or
   ``ocp``; docs/mx_layout.md);
3. pack them four to a container and place them in device memory as
   :mod:`systolic.compiler.mx_lower` lays them out, lower, and run the Program on the
   functional simulator (``numerics`` = ``fast`` or ``systolic``, the orders of
   :mod:`systolic.sim.functional_mx`).

The result ``out`` is the fp32 product of the *dequantized* operands, as the engine computes
it; its difference from ``a @ b`` is the quantization error (docs/NUMERICS.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from .arch import Arch
from .compiler import MatmulSpec, lower
from .compiler.mx_lower import MxLayout, padded_k
from .errors import FormatError
from .mx import MXTensor, ScaleRule, pack_x4, quantize_hw
from .sim.functional import FunctionalSimulator

if TYPE_CHECKING:
    from .api import MatmulResult

__all__ = ["quantize_operands", "run_mx", "write_operands"]


def _rule(mx_rule: str) -> ScaleRule:
    if mx_rule not in ("ocp", "trainium"):
        raise FormatError(f"unknown MX scale rule {mx_rule!r}; use 'trainium' or 'ocp'")
    return mx_rule  # type: ignore[return-value]


def quantize_operands(a: np.ndarray, b: np.ndarray, fmt: str, mx_rule: str = "trainium"
                      ) -> tuple[MXTensor, MXTensor]:
    """MX-quantize a [M, K] and b [K, N] along K, K zero-padded to a multiple of 32.

    Returns (a.T quantized [Kp, M], b quantized [Kp, N]), each from :func:`quantize_hw`.
    """
    a32 = np.asarray(a, dtype=np.float32)
    b32 = np.asarray(b, dtype=np.float32)
    k = a32.shape[1]
    kp = padded_k(k)
    at = np.zeros((kp, a32.shape[0]), np.float32)
    at[:k] = a32.T
    bp = np.zeros((kp, b32.shape[1]), np.float32)
    bp[:k] = b32
    rule = _rule(mx_rule)
    return quantize_hw(at, fmt, rule=rule), quantize_hw(bp, fmt, rule=rule)


def _put(dram: np.ndarray, offset: int, values: np.ndarray) -> None:
    raw = np.ascontiguousarray(values).reshape(-1).view(np.uint8)
    dram[offset:offset + raw.size] = raw


def write_operands(dram: np.ndarray, layout: MxLayout, qa: MXTensor, qb: MXTensor) -> None:
    """Place quantized operands in device memory as :mod:`systolic.compiler.mx_lower` lays
    them out: a as [M, Kp/4] containers and [M, Kp/32] scales, b as [Kp/4, N] and
    [Kp/32, N]. Containers are little-endian (element 0 in the low bits; FACTS)."""
    kp, n = qb.elements.shape
    word = "<u2" if qa.fmt == "mxfp4" else "<u4"  # x4 container: 2 bytes fp4, 4 bytes fp8
    _put(dram, layout.a_offset, pack_x4(qa.elements.T, qa.fmt).astype(word))
    _put(dram, layout.a_scale_offset, qa.scales.T)
    # b [Kp, N]: container (r, n) holds k = 4r..4r+3 -> [Kp/4, N, 4] then pack the last axis
    b4 = qb.elements.reshape(kp // 4, 4, n).transpose(0, 2, 1)
    _put(dram, layout.b_offset, pack_x4(b4, qb.fmt).astype(word))
    _put(dram, layout.b_scale_offset, qb.scales)


def run_mx(a: np.ndarray, b: np.ndarray, spec: MatmulSpec, arch: Arch, numerics: str,
           mx_rule: str, progress: Callable[[int], None] | None = None) -> MatmulResult:
    """``a @ b`` in the MX format ``spec.dtype`` on ``arch`` (gen4); see the module docstring.

    Raises :class:`FormatError` for an unknown ``mx_rule`` and :class:`ArchError` (from the
    lowering) for an arch without the MX path.
    """
    from .api import MatmulResult

    lowered = lower(spec, arch)
    layout = lowered.layout
    assert isinstance(layout, MxLayout)
    qa, qb = quantize_operands(a, b, spec.dtype, mx_rule)
    sim = FunctionalSimulator(arch, order=numerics,  # type: ignore[arg-type]
                              dram_bytes=layout.dram_bytes)
    write_operands(sim.memory.dram, layout, qa, qb)
    sim.run(lowered.program, check=False, progress=progress)
    out = sim.read_dram(layout.out_offset, (spec.m, spec.n), "fp32").copy()
    return MatmulResult(out, lowered.program, arch, spec, lowered)
