"""The RTL side: the integer PE cell of seed 004 and arrays built from it.

``cell`` and ``array`` are numpy behavioural models (no extra dependencies); ``hdl`` holds the
same cell and array in Amaranth HDL, imported on first use (``pip install 'systolic[rtl]'``).
"""

from systolic.rtl.array import (
    AdderTreeArray,
    ArrayCost,
    ArrayStimulus,
    ArrayTrace,
    WeightStationaryArray,
    array_cost,
)
from systolic.rtl.cell import (
    ACT_BITS,
    SUM_BITS,
    WEIGHT_BITS,
    CellTrace,
    PECell,
    PEChain,
    exact_depth,
    wrap48,
)

__all__ = [
    "ACT_BITS",
    "SUM_BITS",
    "WEIGHT_BITS",
    "AdderTreeArray",
    "ArrayCost",
    "ArrayStimulus",
    "ArrayTrace",
    "CellTrace",
    "PECell",
    "PEChain",
    "WeightStationaryArray",
    "array_cost",
    "exact_depth",
    "wrap48",
]
