"""Program checks: one call, :func:`verify`, before any executor runs a Program.

* :mod:`.program`: the PE stream (order, accumulation groups, banks, limits, arch gates)
  and the driver that walks every instruction;
* :mod:`.mx`: the MX pair (LdWeightMx / MatmultMx) and its scale tiles;
* :mod:`.engines`: DMA and Vector/Scalar/GpSimd instructions.
"""

from __future__ import annotations

from .program import Checker, Tile, verify

__all__ = ["Checker", "Tile", "verify"]
