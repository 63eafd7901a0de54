"""NKI's value vocabulary: dtypes, memory buffers, ``par_dim``, ``tile_size``, tensor specs.

NKI spells dtypes as ``nl.bfloat16``, ``nl.float8_e4m3`` ...; each maps to one of the
project's format names (:mod:`systolic.dtypes`). A :class:`DType` compares equal to its
numpy dtype, its NKI name and its project name, so kernels that test ``x.dtype ==
nl.float32`` or pass ``dtype=lhsT.dtype`` keep working.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

from ..errors import FormatError

__all__ = ["BUFFERS", "DTYPES", "Buffer", "DType", "ParDim", "TensorSpec", "TileSize",
           "fill_value", "to_dtype"]


@dataclass(frozen=True, slots=True)
class DType:
    """An NKI dtype: its NKI name, the project's format name and numpy's storage dtype."""

    nki: str
    fmt: str
    np_dtype: np.dtype | None
    itemsize: int = 0  # bytes per element (container bytes for the _x4 MX types)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DType):
            return self.fmt == other.fmt
        if isinstance(other, str):
            return other in (self.nki, self.fmt)
        try:
            return self.np_dtype is not None and np.dtype(other) == self.np_dtype  # type: ignore
        except TypeError:
            return False

    def __hash__(self) -> int:
        return hash(self.fmt)

    @property
    def dtype(self) -> np.dtype | None:
        """numpy's dtype, so that numpy takes an NKI dtype where it takes its own
        (``x.astype(nl.float8_e4m3)``, ``np.zeros(s, dtype=nl.bfloat16)``: numpy reads an
        object's ``dtype`` attribute); None for tfloat32 and the MX containers, which numpy
        has no dtype for (numpy then refuses them)."""
        return self.np_dtype

    def __repr__(self) -> str:
        return f"nl.{self.nki}"


# Element sizes of dtypes the project has no format for: raw words an NKI kernel only
# reinterprets (``.ap(dtype=nl.float8_e4m3fn_x4)`` over a uint32 array, as the MX tutorial).
_SIZES: dict[str, int] = {"uint32": 4, "int32": 4, "uint16": 2}


def _itemsize(fmt: str) -> int:
    size = _SIZES.get(fmt)
    if size is None:
        from ..dtypes import get_format

        size = _SIZES[fmt] = get_format(fmt).container_bytes
    return size


def _d(nki: str, fmt: str, np_dtype: object) -> DType:
    return DType(nki, fmt, None if np_dtype is None else np.dtype(np_dtype),  # type: ignore
                 _itemsize(fmt))


# NKI docs, "Supported data types"; the _x4 types are the MX containers of four elements
# (nki.isa.nc_matmul_mx), e8m0 the MX block scale.
DTYPES: dict[str, DType] = {d.nki: d for d in (
    _d("bfloat16", "bf16", ml_dtypes.bfloat16),
    _d("float16", "fp16", np.float16),
    _d("float32", "fp32", np.float32),
    _d("tfloat32", "tf32", None),
    _d("float8_e4m3", "fp8_e4m3", ml_dtypes.float8_e4m3),
    _d("float8_e4m3fn", "fp8_e4m3fn", ml_dtypes.float8_e4m3fn),
    _d("float8_e5m2", "fp8_e5m2", ml_dtypes.float8_e5m2),
    _d("float8_e4m3fn_x4", "mxfp8_e4m3", None),
    _d("float8_e5m2_x4", "mxfp8_e5m2", None),
    _d("float4_e2m1fn_x4", "mxfp4", None),
    _d("float8_e8m0fnu", "e8m0", ml_dtypes.float8_e8m0fnu),
    _d("uint8", "uint8", np.uint8),
    _d("int8", "int8", np.int8),
    _d("int16", "int16", np.int16),
    _d("int32", "int32", np.int32),
    _d("uint32", "uint32", np.uint32),
    _d("uint16", "uint16", np.uint16),
)}
_BY_FMT = {d.fmt: d for d in DTYPES.values()}
_BY_NP = {d.np_dtype: d for d in DTYPES.values() if d.np_dtype is not None}
# numpy's bool is one byte holding 0 or 1, NKI's ``bool_`` too (NKI docs, "Supported data
# types": "bool_"); the model keeps such a tensor as uint8 bytes of the same values
_BY_NP[np.dtype(np.bool_)] = DTYPES["uint8"]
DTYPE_ALIASES = {"bool_": DTYPES["uint8"]}


def to_dtype(x: object) -> DType:
    """The NKI dtype of ``x``: a DType, an NKI or project name, or a numpy dtype."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str):
        if x in DTYPES:
            return DTYPES[x]
        if x in _BY_FMT:
            return _BY_FMT[x]
        raise FormatError(f"unknown dtype {x!r}; use one of {', '.join(DTYPES)}")
    try:
        return _BY_NP[np.dtype(x)]  # type: ignore[call-overload]
    except (KeyError, TypeError):
        raise FormatError(f"dtype {x!r} has no NKI equivalent; use one of "
                          f"{', '.join(DTYPES)}") from None


def fill_value(value: object, dtype: DType) -> float:
    """A memset value, checked against the tile's format by the project's overflow policy
    (docs/NUMERICS.md "Out-of-range values", the default ``"error"``): 1000.0 into
    float8_e4m3 (max 240) or 1e39 into bfloat16 would round to inf, so they are refused,
    as are non-integers for an integer tile. Raises :class:`FormatError` saying why."""
    if isinstance(value, np.generic) and type(value).__module__ == "ml_dtypes":
        value = value.item()  # an ml_dtypes scalar: nl.finfo(nl.bfloat16).min is a bfloat16
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise FormatError(f"the value must be a number, not {type(value).__name__} "
                          f"{value!r}")
    from ..dtypes import FORMATS, encode

    f = FORMATS.get(dtype.fmt)
    if f is not None and f.kind in ("float", "int"):
        try:
            encode(np.float64(value), f)
        except FormatError as exc:  # the reason without encode()'s advice on arrays
            why = str(exc).split(": scale the input")[0]
            raise FormatError(f"{value!r} does not fit the {dtype} tile: {why} "
                              f"(docs/NUMERICS.md, overflow policy); use a value the "
                              f"format holds") from None
    return float(value)


@dataclass(frozen=True, slots=True)
class Buffer:
    """Where an ``nl.ndarray`` lives: ``sbuf``, ``psum`` or one of the HBM kinds.
    ``locate``: a direct allocation's function of (block index, partitions, bytes per
    partition) -> the physical tile's place (nki/compiler.py, nki/direct.py); None: the
    compiler places the tile (nki/alloc.py)."""

    name: str
    locate: Callable[..., tuple[int, ...]] | None = None
    # SBUF or PSUM; a field, not a property: the recording and build passes ask it
    # nearly a million times for a 100,000-operation kernel
    on_chip: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "on_chip", self.name in ("sbuf", "psum"))

    def __repr__(self) -> str:
        return f"nl.{self.name}"


BUFFERS = {n: Buffer(n) for n in ("sbuf", "psum", "hbm", "shared_hbm", "private_hbm")}


@dataclass(frozen=True, slots=True)
class ParDim:
    """``nl.par_dim(n)``: marks the partition dimension of an on-chip tensor's shape."""

    size: int


class TileSize:
    """``nl.tile_size``: the Tensor Engine's tile limits (NKI docs, nki.language.tile_size):
    pmax partitions, a stationary free size of 128, a moving free size of 512 (one fp32
    PSUM bank), and a PSUM partition's 2 KiB bank in fp32 elements."""

    pmax = 128
    gemm_stationary_fmax = 128
    gemm_moving_fmax = 512
    psum_fmax = 512
    psum_max_num_banks = 8


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """``nt.tensor[[shape], dtype]`` of the older API: a shape and dtype, no values."""

    shape: tuple[int, ...]
    dtype: DType


class _TensorTyping:
    def __getitem__(self, key: tuple[object, object]) -> TensorSpec:
        shape, dtype = key
        return TensorSpec(tuple(int(s) for s in shape), to_dtype(dtype))  # type: ignore


tensor = _TensorTyping()
