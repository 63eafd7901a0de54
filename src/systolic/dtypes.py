"""The format table: one row per format, and the rounding and coding that follow from it.

Rounding goes through ``ml_dtypes`` (round to nearest-even, subnormals included) and always
starts from float32: ml_dtypes converts float64 through float32, rounding twice, so the API
takes operands as float32 first and says so. Arithmetic is never done on narrow arrays (each
step would round, FACTS "Numerics"): :func:`decode` widens to float32 before any maths.

Traps handled on purpose (FACTS "Numerics", verified with ml_dtypes 0.6.0):

* ``fp8_e4m3fn`` has no infinity: values above 464 become NaN, not the maximum 448.
* ``fp4_e2m1`` has no NaN: ml_dtypes turns NaN into a signed zero, silently. :func:`encode`
  refuses NaN for it instead (a silently wrong number is worse than an error).
* ``e8m0`` rounds 1.5*2^e up and maps 0 to NaN: scale bytes are built from the integer
  exponent (:func:`e8m0_from_exponent`), never by casting a float.
* ``tf32`` and ``fp32r`` have no ml_dtypes type; they live in float32 containers and are
  rounded to a 10-bit mantissa by integer arithmetic on the float32 bits (RNE).

Out-of-range values, one policy for every format (:func:`encode`'s ``overflow``):

* ``"error"`` (the default): a finite value whose nearest-even rounding lies beyond the
  format's largest finite value raises :class:`FormatError` naming that maximum, as the
  integer formats always did. Without it, ``fp8_e4m3`` turned 300 into inf silently (and
  the product into NaN), ``fp8_e4m3fn`` turned 500 into NaN and ``fp4_e2m1`` turned 100
  into 6. An infinity is refused only by a format that has none (``fp8_e4m3fn``, fp4).
* ``"saturate"``: such values (and infinities, for a format without them) become +-max;
  integers clamp to their range.
* ``"format"``: the format's own rule (:attr:`Format.overflow`: inf, NaN or saturate, as
  ml_dtypes casts), for callers that model the hardware's cast of an intermediate.

The threshold is derived from the table: max plus half its ulp, a tie rounding up exactly
when max's last mantissa bit is 1 (bf16, fp16, fp8_e4m3, fp8_e5m2, tf32) and down when it
is 0 (fp8_e4m3fn: 464 rounds to 448). Documented in docs/NUMERICS.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

import ml_dtypes
import numpy as np

from .errors import FormatError

__all__ = [
    "FORMATS",
    "Format",
    "accumulator_format",
    "accumulator_formats",
    "decode",
    "e8m0_from_exponent",
    "encode",
    "encode_into",
    "get_format",
    "round_to",
    "surely_in_range",
]

Kind = Literal["float", "int", "scale", "mx"]
# Which operands pair and which rules apply (nki.isa.nc_matmul, FACTS "Hardware"): "fp32"
# (fp32, fp32r, tf32: pair only with each other), "half" (bf16, fp16), "fp8" (the formats
# DoubleRow folds), "fp4", "int", "scale" (e8m0), "mx" (the gen4 block-scaled formats).
Family = Literal["fp32", "half", "fp8", "fp4", "int", "scale", "mx"]
Overflow = Literal["inf", "nan", "saturate", "error"]
# What encode does with values beyond a format's range (module docstring).
OverflowPolicy = Literal["error", "saturate", "format"]
_POLICIES = ("error", "saturate", "format")
# formats kept in a float32 container and rounded on their bits here (ml_dtypes has none)
_CONTAINED = ("tf32", "fp32r")
NanPolicy = Literal["ieee", "fn", "none", "e8m0"]


@dataclass(frozen=True, slots=True)
class Format:
    """One format: its bit layout, specials, overflow policy and storage.

    ``storage`` is the numpy dtype one element is stored as (one byte per fp4 element:
    ml_dtypes keeps e2m1 unpacked). ``container_bytes`` is the element's size in SBUF.
    ``codes`` maps generation -> the dtype code written in bundles; ``code_source`` says
    whether seed 000 gives that code or the project defined it. ``family`` is the pairing
    class (:data:`Family`); ``fp32_cost`` says the PE streams the format at the Arch's fp32
    rate (seed 003: fp32 "roughly 4x"; fp32 and fp32r). tf32 pairs as fp32 but runs at the
    bf16 rate (FACTS: trn1 peaks at 92 TFLOP/s for bf16, fp16, tf32 and cfp8 alike).
    ``pe_fold`` is how many contraction elements one PE row takes (MX x4 containers: 4).
    """

    name: str
    kind: Kind
    bits: int
    exp_bits: int
    man_bits: int
    bias: int
    inf: bool
    nan: NanPolicy
    overflow: Overflow
    storage: np.dtype
    container_bytes: int
    codes: Mapping[int, int]
    code_source: str = "project"
    family: Family = "half"
    fp32_cost: bool = False
    pe_fold: int = 1
    element: str | None = None  # MX formats: the element format
    emax: int | None = None  # MX element formats: exponent of the largest power of two
    max: float = field(init=False)
    min_normal: float = field(init=False)
    min_subnormal: float = field(init=False)

    def __post_init__(self) -> None:
        if self.kind == "int":
            mx = float((1 << 47) - 1) if self.bits == 48 else float(np.iinfo(self.storage).max)
            object.__setattr__(self, "max", mx)
            object.__setattr__(self, "min_normal", 1.0)
            object.__setattr__(self, "min_subnormal", 1.0)
            return
        if self.name in _CONTAINED:
            fi = np.finfo(np.float32)
            mx = float(np.float32(2.0) ** 127 * (2 - 2.0**-self.man_bits))
            object.__setattr__(self, "max", mx)
            object.__setattr__(self, "min_normal", float(fi.smallest_normal))
            object.__setattr__(self, "min_subnormal", 2.0 ** (-126 - self.man_bits))
            return
        fi = ml_dtypes.finfo(self.storage)
        object.__setattr__(self, "max", float(fi.max))
        object.__setattr__(self, "min_normal", float(fi.smallest_normal))
        object.__setattr__(self, "min_subnormal", float(fi.smallest_subnormal))

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind == "int"

    def code(self, generation: int) -> int:
        return self.codes[generation] if generation in self.codes else self.codes[0]

    @property
    def overflow_bound(self) -> tuple[float, bool]:
        """(t, tie_up): a finite value overflows when |x| > t, or |x| == t and tie_up.

        t is max plus half an ulp at max; at the tie, round-to-nearest-even goes up (out of
        range) exactly when max's last mantissa bit is 1. Derived from ``max`` and
        ``man_bits``, for the float kinds.
        """
        ulp = 2.0 ** (np.floor(np.log2(self.max)) - self.man_bits)
        return float(self.max + ulp / 2), int(self.max / ulp) % 2 == 1


def _codes(code: int) -> Mapping[int, int]:
    return MappingProxyType({0: code})


def _f(name: str, e: int, m: int, storage: type, cbytes: int, code: int, *, inf: bool,
       nan: NanPolicy, overflow: Overflow, family: Family, fp32_cost: bool = False,
       bias: int | None = None, bits: int | None = None, emax: int | None = None) -> Format:
    return Format(
        name=name, kind="float", bits=bits if bits is not None else 1 + e + m, exp_bits=e,
        man_bits=m, bias=bias if bias is not None else (1 << (e - 1)) - 1, inf=inf, nan=nan,
        overflow=overflow, storage=np.dtype(storage), container_bytes=cbytes,
        codes=_codes(code), family=family, fp32_cost=fp32_cost, emax=emax,
    )


# Project-defined dtype codes, except fp4_e2m1: seed 000 ("Shared vs. Diverged") gives the
# x4 fp4 entry the code 0x05 on gen2/gen3 (colliding with uint16, which this project does
# not model) and its own MX-era tag 0x10 on gen4.
_TABLE: list[Format] = [
    _f("bf16", 8, 7, ml_dtypes.bfloat16, 2, 0x03, inf=True, nan="ieee", overflow="inf",
       family="half"),
    _f("fp16", 5, 10, np.float16, 2, 0x04, inf=True, nan="ieee", overflow="inf",
       family="half"),
    _f("fp32", 8, 23, np.float32, 4, 0x0B, inf=True, nan="ieee", overflow="inf",
       family="fp32", fp32_cost=True),
    # fp32r: the reference model's "float32r", an fp32 operand rounded once before one
    # fp32 product (seed 000, fp32 GOTCHA). Its exact rounding is not public (FACTS,
    # unsure): this project rounds to a 10-bit mantissa (tf32 precision), RNE.
    _f("fp32r", 8, 10, np.float32, 4, 0x0C, inf=True, nan="ieee", overflow="inf", bits=32,
       family="fp32", fp32_cost=True),
    _f("tf32", 8, 10, np.float32, 4, 0x0A, inf=True, nan="ieee", overflow="inf", bits=19,
       family="fp32"),
    _f("fp8_e4m3", 4, 3, ml_dtypes.float8_e4m3, 1, 0x07, inf=True, nan="ieee", overflow="inf",
       family="fp8"),
    _f("fp8_e4m3fn", 4, 3, ml_dtypes.float8_e4m3fn, 1, 0x09, inf=False, nan="fn",
       overflow="nan", family="fp8", emax=8),
    _f("fp8_e5m2", 5, 2, ml_dtypes.float8_e5m2, 1, 0x08, inf=True, nan="ieee", overflow="inf",
       family="fp8", emax=15),
    Format(name="fp4_e2m1", kind="float", bits=4, exp_bits=2, man_bits=1, bias=1, inf=False,
           nan="none", overflow="saturate", storage=np.dtype(ml_dtypes.float4_e2m1fn),
           container_bytes=1, codes=MappingProxyType({0: 0x05, 2: 0x05, 3: 0x05, 4: 0x10}),
           code_source="seed 000", family="fp4", emax=2),
    Format(name="e8m0", kind="scale", bits=8, exp_bits=8, man_bits=0, bias=127, inf=False,
           nan="e8m0", overflow="error", storage=np.dtype(ml_dtypes.float8_e8m0fnu),
           container_bytes=1, codes=_codes(0x0E), family="scale"),
    Format(name="int8", kind="int", bits=8, exp_bits=0, man_bits=0, bias=0, inf=False,
           nan="none", overflow="error", storage=np.dtype(np.int8), container_bytes=1,
           codes=_codes(0x02), family="int"),
    Format(name="uint8", kind="int", bits=8, exp_bits=0, man_bits=0, bias=0, inf=False,
           nan="none", overflow="error", storage=np.dtype(np.uint8), container_bytes=1,
           codes=_codes(0x01), family="int"),
    Format(name="int16", kind="int", bits=16, exp_bits=0, man_bits=0, bias=0, inf=False,
           nan="none", overflow="error", storage=np.dtype(np.int16), container_bytes=2,
           codes=_codes(0x06), family="int"),
    # 16- and 32-bit integer tiles (NKI docs, "Supported data types"): on-chip formats of
    # the engines (iota, indices, integer masks), not Tensor Engine operands. Codes are the
    # project's own (the uint16 code of seed 000, 0x05, is fp4_e2m1's here).
    Format(name="uint16", kind="int", bits=16, exp_bits=0, man_bits=0, bias=0, inf=False,
           nan="none", overflow="error", storage=np.dtype(np.uint16), container_bytes=2,
           codes=_codes(0x11), family="int"),
    Format(name="int32", kind="int", bits=32, exp_bits=0, man_bits=0, bias=0, inf=False,
           nan="none", overflow="error", storage=np.dtype(np.int32), container_bytes=4,
           codes=_codes(0x12), family="int"),
    Format(name="uint32", kind="int", bits=32, exp_bits=0, man_bits=0, bias=0, inf=False,
           nan="none", overflow="error", storage=np.dtype(np.uint32), container_bytes=4,
           codes=_codes(0x13), family="int"),
    # The integer accumulator: seed 004's INT48, stored sign-extended in 8 bytes of PSUM,
    # wrapping as two's complement at 48 bits.
    Format(name="int48", kind="int", bits=48, exp_bits=0, man_bits=0, bias=0, inf=False,
           nan="none", overflow="error", storage=np.dtype(np.int64), container_bytes=8,
           codes=_codes(0x0D), family="int"),
]

# MX formats (gen4): elements packed x4 along K with one E8M0 scale per 32-element block
# (seed 000 "The MX Dispatch Path"; FACTS). Their element formats carry the codes.
_MX: list[tuple[str, str, int]] = [
    ("mxfp8_e4m3", "fp8_e4m3fn", 4),
    ("mxfp8_e5m2", "fp8_e5m2", 4),
    ("mxfp4", "fp4_e2m1", 2),
]

_BY_NAME: dict[str, Format] = {f.name: f for f in _TABLE}
for _name, _elem, _cbytes in _MX:
    _e = _BY_NAME[_elem]
    _BY_NAME[_name] = Format(
        name=_name, kind="mx", bits=_e.bits, exp_bits=_e.exp_bits, man_bits=_e.man_bits,
        bias=_e.bias, inf=_e.inf, nan=_e.nan, overflow="saturate", storage=_e.storage,
        container_bytes=_cbytes, codes=_e.codes, code_source=_e.code_source, family="mx",
        pe_fold=4, element=_elem, emax=_e.emax,
    )

FORMATS: Mapping[str, Format] = MappingProxyType(_BY_NAME)


def get_format(fmt: str | Format) -> Format:
    """The table row for a format name such as ``"bf16"`` or ``"fp8_e4m3"``."""
    if isinstance(fmt, Format):
        return fmt
    try:
        return _BY_NAME[fmt]
    except (KeyError, TypeError):
        raise FormatError(
            f"unknown format {fmt!r}; choose one of {', '.join(_BY_NAME)}"
        ) from None


def accumulator_format(dtype: str | Format) -> str:
    """The default PSUM accumulator format for an operand format: fp32 whatever the input
    (seed 000 "The fp32 PSUM Accumulator": the PE array accumulates in fp32 PSUM)."""
    get_format(dtype)
    return "fp32"


def accumulator_formats(dtype: str | Format, generation: int = 2) -> tuple[str, ...]:
    """The PSUM formats a MatMul of ``dtype`` may write on NeuronCore-v``generation``: fp32;
    for the integer formats also seed 004's exact INT48 cell (an explicit option, never the
    compiler's default); from NeuronCore-v3, for 8- and 16-bit float operands, also bf16 and
    fp16: the PE's fp32 sum rounded (RNE) as it is written, an accumulating MatMul adding
    its fp32 sum to the stored value and rounding again. trainium2_arch.rst (aws-neuron-sdk
    7c165a3e) "FP16/BF16 PSUM output for FP16/BF16 transpose" (v3, transpose mode);
    neuron-core-v4 (NeuronCore-v4 Architecture): "The output data type can either be FP32 or
    BF16". Which of them a kernel may ask for is the NKI front end's rule (nki/ops.py); the
    two-pass fp32 family writes fp32 only (a rounding per pass would round twice)."""
    f = get_format(dtype)
    if f.is_int:
        return ("fp32", "int48")
    if generation >= 3 and f.kind == "float" and f.family != "fp32":
        return ("fp32", "bf16", "fp16")
    return ("fp32",)


def _as_float32(x: object) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype.kind in "OSUMm" or (arr.dtype.kind == "V" and arr.dtype.names is not None):
        raise FormatError(f"cannot read values of dtype {arr.dtype} as numbers")
    return arr.astype(np.float32, copy=False)


def _round_mantissa(x32: np.ndarray, man_bits: int) -> np.ndarray:
    """Round float32 values to ``man_bits`` mantissa bits, nearest-even, on the bits.

    Used for tf32/fp32r, which ml_dtypes lacks. Inf and NaN pass through unchanged; a
    carry out of the mantissa correctly bumps the exponent (and overflows to inf).
    """
    drop = 23 - man_bits
    bits = np.ascontiguousarray(x32, dtype=np.float32).view(np.uint32)
    lsb = (bits >> np.uint32(drop)) & np.uint32(1)
    keep = np.uint32(0xFFFFFFFF ^ ((1 << drop) - 1))
    rounded = (bits + np.uint32((1 << (drop - 1)) - 1) + lsb) & keep
    special = (bits & np.uint32(0x7F800000)) == np.uint32(0x7F800000)
    out = np.where(special, bits, rounded)
    return out.view(np.float32)


def _overflowing(arr: np.ndarray, x32: np.ndarray, f: Format) -> np.ndarray | None:
    """Mask of the finite inputs whose rounding to ``f`` lies beyond +-max, or None if none.

    A value wider than float32 that float32 cannot hold (1e39 as float64) overflows too.
    """
    t, tie_up = f.overflow_bound
    a = np.abs(x32)
    big: np.ndarray | None = None
    if t < float(np.finfo(np.float32).max):  # fp32 itself: only the wide inputs below
        with np.errstate(invalid="ignore"):
            big = ((a >= np.float32(t)) if tie_up else (a > np.float32(t))) & (a < np.inf)
    if arr.dtype.itemsize > 4 or arr.dtype.kind in "iu":
        inf32 = np.isinf(a)
        if inf32.any():
            with np.errstate(invalid="ignore", over="ignore"):
                wide = inf32 & np.isfinite(arr.astype(np.float64))
            big = wide if big is None else big | wide
    return big if big is not None and big.any() else None


def surely_in_range(x32: np.ndarray, fmt: str | Format) -> bool:
    """True when every value of float32 ``x32`` is finite and rounds within float format
    ``fmt``'s range, so that encoding them raises nothing and no overflow policy changes
    them; False says nothing (NaN, inf, a value near the edge, another dtype). Two
    reductions and no temporary: about a quarter of the masks of :func:`_overflowing`,
    which an operand of ordinary values then skips (issue 20)."""
    f = get_format(fmt)
    if f.kind != "float" or x32.dtype != np.float32 or not x32.size:
        return False
    # NaN propagates through max and min, and NaN or inf < t is False
    return float(np.maximum(x32.max(), -x32.min())) < f.overflow_bound[0]


def encode_into(x32: np.ndarray, fmt: str | Format, out: np.ndarray) -> bool:
    """``out[...] = encode(x32, fmt)`` with no temporary, when that surely succeeds and
    changes nothing else: float32 ``x32`` of a float format that :func:`encode` rounds
    with its cast (not tf32 and fp32r, rounded on their bits), every value finite and in
    range (:func:`surely_in_range`), ``out`` of the format's storage dtype and ``x32``'s
    shape. False, having written nothing, otherwise: call :func:`encode`."""
    f = get_format(fmt)
    if f.name in _CONTAINED or out.dtype != f.storage or out.shape != x32.shape \
            or not surely_in_range(x32, f):
        return False
    with np.errstate(over="ignore"):  # encode's own cast, in place
        np.copyto(out, x32, casting="unsafe")
    return True


def _apply_overflow(arr: np.ndarray, x32: np.ndarray, f: Format,
                    policy: OverflowPolicy) -> np.ndarray:
    """``x32`` with the overflow policy applied (module docstring); raises for "error"."""
    if policy == "format" or surely_in_range(x32, f):
        return x32
    big = _overflowing(arr, x32, f)
    inf_in = None  # infinite inputs, for a format that has no infinity
    if not f.inf:
        m = np.isinf(x32) if big is None else np.isinf(x32) & ~big
        inf_in = m if m.any() else None
    if big is None and inf_in is None:
        return x32
    if policy == "error":
        if big is not None:
            worst = float(np.max(np.abs(np.asarray(arr, dtype=np.float64)[big])))
            raise FormatError(
                f"{f.name} holds at most {f.max:g} in magnitude; got {worst:g}, which would "
                f"round to {'inf' if f.inf else 'NaN' if f.nan == 'fn' else f'{f.max:g}'}: "
                f"scale the input, or saturate it first (round_to(x, {f.name!r}, "
                f"overflow='saturate'))")
        raise FormatError(f"{f.name} has no infinity; got an infinite input: pass finite "
                          f"values, or saturate them first (round_to(x, {f.name!r}, "
                          f"overflow='saturate'))")
    mask = np.zeros(x32.shape, dtype=bool)
    for part in (big, inf_in):
        if part is not None:
            mask |= part
    return np.where(mask, np.copysign(np.float32(f.max), x32), x32).astype(np.float32)


def encode(x: object, fmt: str | Format, *, overflow: OverflowPolicy = "error") -> np.ndarray:
    """Round ``x`` (read as float32) to ``fmt`` and return it in the format's storage dtype.

    Raises :class:`FormatError` for values a format cannot hold without a silent change:
    non-integers for integer formats, NaN for fp4_e2m1, and (``overflow="error"``, the
    default) values beyond the format's range; ``overflow`` is the module docstring's policy.
    """
    f = get_format(fmt)
    if overflow not in _POLICIES:
        raise FormatError(f"overflow must be one of {', '.join(_POLICIES)}, not {overflow!r}")
    if f.kind == "mx":
        raise FormatError(f"{f.name} is block-scaled: quantize with systolic.mx.quantize")
    if f.kind == "int":
        arr = np.asarray(x)
        lo, hi = (-(1 << 47), (1 << 47) - 1) if f.name == "int48" else (
            int(np.iinfo(f.storage).min), int(np.iinfo(f.storage).max))
        if overflow == "format" and arr.dtype.kind not in "iub":
            # an engine's float32 result cast to an integer tile: toward zero, saturated,
            # NaN as 0. Unsure: the NKI docs say the engines cast their fp32 results to the
            # output dtype but name no rounding mode for integers. Toward zero, not to
            # nearest: nki-samples' resize_nearest (hardware-tested) computes a row index as
            # int32 pos / width and reads past its table if 58.53 becomes 59; the vendor's
            # own simulator (numpy astype) truncates too (docs/NUMERICS.md).
            with np.errstate(invalid="ignore"):
                a64 = np.nan_to_num(arr.astype(np.float64), nan=0.0, posinf=hi, neginf=lo)
            return np.clip(np.trunc(a64), lo, hi).astype(np.int64).astype(f.storage)
        if arr.dtype.kind in "iub":
            vals = arr.astype(np.int64)
        else:
            a64 = arr.astype(np.float64)
            if not np.all(np.isfinite(a64)) or np.any(a64 != np.round(a64)):
                raise FormatError(f"{f.name} needs integer values; got non-integers")
            vals = a64.astype(np.int64)
        if overflow == "saturate":
            vals = np.clip(vals, lo, hi)
        if vals.size and (vals.min() < lo or vals.max() > hi):
            raise FormatError(
                f"{f.name} holds {lo}..{hi}; got values from {vals.min()} to {vals.max()}"
            )
        return vals.astype(f.storage)
    with np.errstate(over="ignore"):  # float64 beyond float32: caught as overflow below
        x32 = _as_float32(x)
    if f.kind == "scale":
        raise FormatError("e8m0 scales are built from exponents: use e8m0_from_exponent")
    x32 = _apply_overflow(np.asarray(x), x32, f, overflow)
    if f.name in _CONTAINED:
        return _round_mantissa(x32, f.man_bits)
    if f.name == "fp4_e2m1" and np.isnan(x32).any():
        raise FormatError("fp4_e2m1 has no NaN; NaN inputs would silently become zero")
    with np.errstate(over="ignore"):  # overflow follows the format's policy, on purpose
        return x32.astype(f.storage)


def decode(raw: np.ndarray, fmt: str | Format) -> np.ndarray:
    """Widen stored values to float32 (integers to int64) for arithmetic."""
    f = get_format(fmt)
    if f.kind == "int":
        return np.asarray(raw).astype(np.int64)
    arr = np.asarray(raw)
    if arr.dtype != f.storage:
        arr = arr.view(f.storage) if arr.dtype.itemsize == f.storage.itemsize else arr
    if f.storage == np.dtype(ml_dtypes.bfloat16):
        # bf16 -> f32 is a 16-bit shift; faster than the generic cast on big tiles.
        return np.left_shift(arr.view(np.uint16), 16, dtype=np.uint32).view(np.float32)
    return arr.astype(np.float32)


def round_to(x: object, fmt: str | Format, *,
             overflow: OverflowPolicy = "error") -> np.ndarray:
    """The values ``x`` takes in ``fmt``, as float32 (int64 for integer formats); ``overflow``
    as :func:`encode`."""
    return decode(encode(x, fmt, overflow=overflow), fmt)


def e8m0_from_exponent(exp: np.ndarray | int) -> np.ndarray:
    """E8M0 scale bytes for 2**exp: biased by 127, exponents outside -127..127 -> NaN 0xFF."""
    e = np.asarray(exp, dtype=np.int64)
    biased = e + 127
    code = np.where((biased < 0) | (biased > 254), 255, biased).astype(np.uint8)
    return code.view(ml_dtypes.float8_e8m0fnu)
