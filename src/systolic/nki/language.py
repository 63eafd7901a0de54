"""``nki.language`` (``nl``): tensors, dtypes, buffers, loops, and the older API's tile
operations (``nl.load``, ``nl.store``, ``nl.matmul``, ``nl.copy``, ``nl.zeros`` ...)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..isa import ActivationFunc, AluOp
from . import ops as _isa
from .direct import pin
from .index import Expr, Grid, check_mask, reduce_axis, whole
from .mask import TRANSPOSED, applying, whole_only
from .record import current, fail, here
from .tensor import LazyKind, NlOp, Pending, Tensor, View, as_view, binary
from .types import BUFFERS, DTYPE_ALIASES, DTYPES, Buffer, ParDim, TileSize, to_dtype

__all__ = [
    "affine_range",
    "arange",
    "atomic_rmw",
    "copy",
    "device_print",
    "empty_like",
    "fp32",
    "full",
    "load",
    "load_transpose2d",
    "matmul",
    "mgrid",
    "ndarray",
    "par_dim",
    "sequential_range",
    "static_cast",
    "static_range",
    "store",
    "tile_size",
    "zeros",
    "zeros_like",
]

globals().update(DTYPES)  # nl.bfloat16, nl.float32, nl.float8_e4m3 ...
globals().update(DTYPE_ALIASES)  # nl.bool_ (kept as uint8 bytes)
sbuf, psum = BUFFERS["sbuf"], BUFFERS["psum"]
hbm, shared_hbm, private_hbm = BUFFERS["hbm"], BUFFERS["shared_hbm"], BUFFERS["private_hbm"]
tile_size = TileSize


def par_dim(size: int) -> ParDim:
    return ParDim(int(size))


class _Range:
    """A loop range: Python iterates it (the kernel unrolls as it runs) and the recording
    notes which loop each tile is made in, because the kinds differ in what the Neuron
    compiler may do with them: ``affine_range`` iterations carry no dependency, so tiles
    made in its body get rotating physical buffers (nki/alloc.py); ``sequential_range``
    keeps its iterations' dependencies; ``static_range`` is unrolled as written."""

    __slots__ = ("kind", "range")

    def __init__(self, kind: str, args: tuple[int, ...]) -> None:
        self.kind, self.range = kind, _range(f"{kind}_range", args)

    def __len__(self) -> int:
        return len(self.range)

    def __getitem__(self, i: int) -> int:
        return self.range[i]

    def __iter__(self) -> Iterator[int]:
        from .record import _STACK

        items = _STACK.items  # this thread's recorders
        if not items:
            yield from self.range
            return
        rec = items[-1]
        loop = rec.enter_loop(self.kind)
        try:
            yield from self.range
        finally:
            rec.exit_loop(loop)


def _range(what: str, args: tuple[Any, ...]) -> range:
    """``range(*args)`` of whole numbers, else one line naming the call."""
    if not 1 <= len(args) <= 3 or not all(whole(a) for a in args) or (
            len(args) == 3 and args[2] == 0):
        raise fail(f"nl.{what}({', '.join(map(repr, args))}): it takes one to three whole "
                   f"numbers (stop, or start, stop[, step]) with a step other than 0")
    return range(*(int(a) for a in args))


def affine_range(*args: int, **kw: Any) -> _Range:
    return _Range("affine", args)


def sequential_range(*args: int, **kw: Any) -> _Range:
    return _Range("sequential", args)


def static_range(*args: int, **kw: Any) -> _Range:
    return _Range("static", args)


def ndarray(shape: Any, dtype: Any = None, buffer: Any = None, name: str = "",
            **kw: Any) -> Tensor:
    where = here()
    buf = buffer if buffer is not None else sbuf
    if isinstance(buf, str) and buf in BUFFERS:
        buf = BUFFERS[buf]
    if not isinstance(buf, Buffer):
        raise fail(f"nl.ndarray buffer={buf!r}: use nl.sbuf, nl.psum, nl.hbm, nl.shared_hbm "
                   f"or nl.private_hbm", where)
    if not isinstance(shape, tuple | list):
        raise fail(f"nl.ndarray shape={shape!r}: a shape is a tuple of dimensions, e.g. "
                   f"(128, 512)", where)
    t = Tensor(tuple(shape), to_dtype(dtype if dtype is not None else "float32"), buf, where,
               name)
    rec = current()
    if buf.on_chip and t.partitions > rec.arch.rows:
        raise fail(f"partition dimension {t.partitions} exceeds {rec.arch.rows} "
                   f"(nl.tile_size.pmax); put the larger dimension in the free dimensions or "
                   f"split it over several tiles", where)
    if buf.locate is not None:
        return pin(t, rec)
    rec.add_tensor(t)
    return t


def zeros(shape: Any, dtype: Any = None, buffer: Any = None, name: str = "",
          **kw: Any) -> Tensor:
    t = ndarray(shape, dtype, buffer, name)
    _isa.record_memset(t.full, 0.0, None, t.where)
    return t


def _like(what: str, a: Any, dtype: Any, buffer: Any, kw: dict[str, Any]) -> Tensor:
    where = here()
    kw.pop("name", None)
    if kw:
        raise fail(f"nl.{what}: argument(s) {', '.join(sorted(kw))} not modelled", where)
    v = as_view(a)
    t = ndarray(tuple(v.shape), dtype if dtype is not None else v.dtype,
                buffer if buffer is not None else v.buffer)
    t.where = where
    return t


class fp32:
    """``nl.fp32``: FP32 constants; ``min`` is the bit pattern 0xff7fffff, the most negative
    finite fp32 value (NKI docs, nki.language.fp32)."""

    min = -3.4028234663852886e38


def full(shape: Any, fill_value: Any, dtype: Any = None, buffer: Any = None, name: str = "",
         **kw: Any) -> Tensor:
    """``nl.full(shape, fill_value, dtype, buffer=)``: a new on-chip tensor filled with
    ``fill_value`` (one memset; the value must be representable, as any memset's)."""
    from ..errors import SystolicError
    from .types import fill_value as _fill

    t = ndarray(shape, dtype, buffer, name)
    if not t.buffer.on_chip:
        raise fail("nl.full in device memory is not modelled; fill an nl.sbuf tile and store "
                   "it", t.where)
    try:
        v = _fill(fill_value, t.dtype)
    except SystolicError as exc:
        raise fail(f"nl.full fill_value: {exc}", t.where) from None
    _isa.record_memset(t.full, v, None, t.where)
    return t


def empty_like(a: Any, dtype: Any = None, buffer: Any = None, **kw: Any) -> Tensor:
    """``nl.empty_like(a, dtype=, buffer=)``: a new tensor of a's shape (and dtype, buffer
    unless given); nothing is written."""
    return _like("empty_like", a, dtype, buffer, kw)


def zeros_like(a: Any, dtype: Any = None, buffer: Any = None, **kw: Any) -> Tensor:
    """``nl.zeros_like``: ``empty_like`` filled with zeros (a memset)."""
    t = _like("zeros_like", a, dtype, buffer, kw)
    _isa.record_memset(t.full, 0.0, None, t.where)
    return t


def device_print(prefix: str, x: Any = None, **kw: Any) -> None:
    """``nl.device_print``: prints nothing here. The model computes values after the kernel
    is recorded, so there is nothing to print while it runs (read the outputs, or
    ``systolic kernel --values``); it records no instruction (a debugging aid, not part of
    the kernel's work)."""


def static_cast(x: Any, dtype: Any) -> Any:
    """``nl.static_cast(array, dtype)`` of the kernels' host code: the numpy array cast to
    the dtype's numpy storage type (ml_dtypes for bf16 / fp8), rounded to nearest even,
    from float32 (FACTS: float64 would round twice). A tile: one line (use nl.copy(x,
    dtype=) in a kernel)."""
    import numpy as np

    if isinstance(x, Tensor | View | Pending):
        raise fail("nl.static_cast of a tile is not modelled; use nl.copy(x, dtype=...)")
    d = to_dtype(dtype)
    if d.np_dtype is None:
        raise fail(f"nl.static_cast to {d} is not modelled (no numpy storage type)")
    arr = np.asarray(x)
    if arr.dtype.kind == "f" and arr.dtype != np.float32:
        arr = arr.astype(np.float32)
    return arr.astype(d.np_dtype)


class _MGrid:
    def __getitem__(self, key: Any) -> Grid:
        return Grid(key if isinstance(key, tuple) else (key,))


mgrid = _MGrid()


def arange(*args: int) -> Expr:
    r = _range("arange", args)
    return Expr(1, len(r), r.start, r.step)


def load(src: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> Pending:
    where = here()
    return Pending(LazyKind.LOAD, where, src=src, mask=check_mask(mask, "nl.load", where))


def load_transpose2d(src: Any, mask: Any = None, dtype: Any = None, **kw: Any) -> Pending:
    """``nl.load_transpose2d(src)``: a 2-D device-memory tensor [P, F] loaded transposed
    into a new SBUF tile [F, P] (F <= 128): one DMA walking src column by column
    (nki/transpose.py record_dma_transpose), any dtype."""
    where = here()
    m = whole_only(mask, "nl.load_transpose2d", where, TRANSPOSED)
    kw.pop("name", None)
    if kw:
        raise fail(f"nl.load_transpose2d: argument(s) {', '.join(sorted(kw))} not modelled",
                   where)
    return Pending(LazyKind.DMA_TRANSPOSE, where, src=src, dtype=dtype,
                   what="nl.load_transpose2d", mask=m)


def store(dst: Any, value: Any, mask: Any = None, **kw: Any) -> None:
    where = here()
    m = check_mask(mask, "nl.store", where)
    target = as_view(dst)
    with applying(m, "nl.store", where):
        _isa.record_dma(target, as_view(value), where)


def atomic_rmw(dst: Any, value: Any, op: Any, mask: Any = None, **kw: Any) -> None:
    """``nl.atomic_rmw(dst, value, op)``: dst = op(dst, value) in device memory, as one
    read-modify-write DMA (NKI docs, nki.language.atomic_rmw). Modelled for ``op`` np.add /
    nl.add on ``dst`` indexed by a tile of indices (``x[idx_tile, ...]``: a scatter that
    adds, repeated indices adding up); refused otherwise, in one line."""
    where = here()
    if _isa._alu_of(op) is not AluOp.ADD:
        raise fail(f"nl.atomic_rmw op={op!r} is not modelled; np.add (nl.add) is", where)
    m = check_mask(mask, "nl.atomic_rmw", where)
    target = as_view(dst)
    with applying(m, "nl.atomic_rmw", where):
        _isa.record_dma(target, as_view(value), where, accumulate=True)


def matmul(x: Any, y: Any, transpose_x: bool = False, **kw: Any) -> Pending:
    """``nl.matmul(x, y, transpose_x=False)``: x @ y. The Tensor Engine computes
    stationary.T @ moving, so without ``transpose_x`` x [M, K] is transposed first, as
    ``nl.transpose`` does it (the engine by its shape, the result in SBUF): "matmul(x, y)
    lowers to nc_matmul(transpose(x), y)" (nki.language.matmul, NKI docs)."""
    where = here()
    if not transpose_x:
        from .transpose import transpose_pending

        x = transpose_pending(x, None, None, "sbuf", where)
    return Pending(LazyKind.MATMUL, where, stationary=x, moving=y, promote=True)


class _Callable(NlOp):
    """``nl.add``, ``nl.exp``, ... : an ``op=`` for nisa calls, and a function of tiles that
    returns a new tile (tensor_tensor, tensor_scalar with a constant, or activation)."""

    def __call__(self, *args: Any, **kw: Any) -> Pending:
        where = here()
        dtype = kw.pop("dtype", None)
        m = check_mask(kw.pop("mask", None), f"nl.{self.name}", where)
        if self.name in ("copy",):
            return Pending(LazyKind.COPY, where, src=args[0], dtype=dtype, mask=m)
        if self.alu is not None and len(args) == 2 and not kw:
            p = binary(self, args[0], args[1], where, dtype)
            p.args["mask"] = m
            return p
        if self.act is not None and len(args) == 1 and not kw:
            return Pending(LazyKind.ACTIVATION, where, src=args[0], op=self, scale=1.0,
                           dtype=dtype, mask=m)
        raise fail(f"nl.{self.name}({', '.join(['...'] * len(args))}"
                   f"{', ' if args and kw else ''}{', '.join(f'{k}=' for k in kw)}) is not "
                   f"modelled here", where)


def _reduce(name: str, alu: AluOp) -> Any:
    op = _Callable(name, alu, None)

    def reduce(x: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False,
               **kw: Any) -> Pending:
        where = here()
        m = check_mask(kw.pop("mask", None), f"nl.{name}", where)
        if kw:
            raise fail(f"nl.{name}: argument(s) {', '.join(sorted(kw))} not modelled", where)
        reduce_axis(axis, f"nl.{name}", where)
        return Pending(LazyKind.TENSOR_REDUCE, where, src=x, op=op, axis=axis, negate=False,
                       dtype=dtype, keepdims=bool(keepdims), engine=None, mask=m)

    reduce.alu, reduce.act = alu, None  # type: ignore[attr-defined]  # usable as op=
    reduce.__name__ = name
    reduce.__doc__ = (f"``nl.{name}(x, axis, dtype=None, keepdims=False)``: the {alu.value} "
                      f"of each partition's free elements (nisa.tensor_reduce on Vector).")
    return reduce


copy = _Callable("copy", None, ActivationFunc.COPY)
identity = _Callable("identity", None, ActivationFunc.IDENTITY)
add = _Callable("add", AluOp.ADD, None)
subtract = _Callable("subtract", AluOp.SUBTRACT, None)
multiply = _Callable("multiply", AluOp.MULTIPLY, None)
maximum = _Callable("maximum", AluOp.MAXIMUM, None)
minimum = _Callable("minimum", AluOp.MINIMUM, None)
divide = _Callable("divide", AluOp.DIVIDE, None)
# activation functions (nisa.activation's op=, and nl.exp(x) as a function), named as NKI
# names them: nl.exp is ActivationFunc.EXP, ...
(exp, log, sqrt, rsqrt, square, abs, relu, sigmoid, tanh, silu,
 gelu_apprx_tanh, reciprocal, negative) = (
    _Callable(f.value, None, f) for f in ActivationFunc
    if f not in (ActivationFunc.COPY, ActivationFunc.IDENTITY))
assert [c.name for c in (exp, log, sqrt, rsqrt, square, abs, relu, sigmoid, tanh, silu,
                         gelu_apprx_tanh, reciprocal, negative)] == [
    "exp", "log", "sqrt", "rsqrt", "square", "abs", "relu", "sigmoid", "tanh", "silu",
    "gelu_apprx_tanh", "reciprocal", "negative"], "each name is its ActivationFunc"
# the Python names NKI's docs use for the max/min operators
max = _reduce("max", AluOp.MAXIMUM)
min = _reduce("min", AluOp.MINIMUM)
sum = _reduce("sum", AluOp.ADD)
prod = _reduce("prod", AluOp.MULTIPLY)


def mean(x: Any, axis: Any = None, dtype: Any = None, keepdims: bool = False,
         **kw: Any) -> Pending:
    """``nl.mean``: the sum of each partition's free elements (tensor_reduce), times 1/n
    (tensor_scalar)."""
    from .results import materialize

    where = here()
    total = materialize(sum(x, axis=axis, dtype="float32", keepdims=keepdims, **kw))
    v = as_view(x)
    n = v.size // v.partitions
    return Pending(LazyKind.TENSOR_SCALAR, where, src=total, op0=multiply, operand0=1.0 / n,
                   reverse0=False, op1=None, operand1=None, reverse1=False, dtype=dtype,
                   mask=check_mask(kw.get("mask"), "nl.mean", where))


__all__ += [*DTYPES, "abs", "add", "divide", "exp", "gelu_apprx_tanh", "hbm", "identity",
            "log", "max", "maximum", "mean", "min", "minimum", "multiply", "negative",
            "private_hbm", "prod", "psum", "reciprocal", "relu", "rsqrt", "sbuf",
            "shared_hbm", "sigmoid", "silu", "sqrt", "square", "subtract", "sum", "tanh"]
_ = View  # re-exported type for annotations in kernels


# -- the NKI breadth of issue 19: transposes, nl.ds, SPMD program ids -----------------------
from .spmd import nc, num_programs, program_id, program_ndim, spmd_dim  # noqa: E402


def transpose(x: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> Pending:
    """``nl.transpose(x)``: x [P, F] -> [F, P] in a new SBUF tile (nki/transpose.py: the
    Vector engine for <= 32 x 32, else the Tensor Engine's identity matmul and a copy out of
    PSUM)."""
    from .transpose import transpose_pending

    where = here()
    m = whole_only(mask, "nl.transpose", where, TRANSPOSED)
    if kw:
        raise fail(f"nl.transpose: argument(s) {', '.join(sorted(kw))} not modelled", where)
    return transpose_pending(x, None, dtype, "sbuf", where, m)


def ds(start: int, size: int) -> slice:
    """``nl.ds(start, size)``: the slice start:start + size (a dynamic slice whose start is a
    Python integer when the kernel is recorded)."""
    if not isinstance(start, int) or not isinstance(size, int) or isinstance(start, bool):
        raise fail(f"nl.ds(start, size) takes integers here, not {type(start).__name__} and "
                   f"{type(size).__name__} (a start computed on device is not modelled)")
    if size < 1:
        raise fail(f"nl.ds size must be positive, not {size}")
    return slice(start, start + size)


def broadcast_to(x: Any, shape: Any = None, **kw: Any) -> Any:
    """``nl.broadcast_to(x, shape)``: ``x.broadcast_to(shape)`` (a [1, F] tile read on every
    partition, nki/tensor.py)."""
    where = here()
    kw.pop("name", None)
    shape = kw.pop("shape", shape)
    if kw:
        raise fail(f"nl.broadcast_to: argument(s) {', '.join(sorted(kw))} not modelled", where)
    if not isinstance(shape, tuple | list) or not all(isinstance(s, int) for s in shape):
        raise fail(f"nl.broadcast_to shape is a tuple of whole numbers, not {shape!r}", where)
    if not hasattr(x, "broadcast_to"):
        raise fail(f"nl.broadcast_to of a {type(x).__name__}: give a tile", where)
    return x.broadcast_to(tuple(shape))


def shared_constant(constant: Any, dtype: Any = None, **kw: Any) -> Tensor:
    """``nl.shared_constant(array, dtype=)``: a device-memory tensor holding ``array``'s
    values in ``dtype`` (default the array's), written before the kernel runs. Values must
    fit the dtype exactly (an identity of int8 as bfloat16: yes; 0.1 as bfloat16: no), so
    no rounding happens where the kernel does not see it."""
    import numpy as np

    from ..dtypes import FORMATS, decode, encode
    from ..errors import SystolicError

    where = here()
    kw.pop("name", None)
    if kw:
        raise fail(f"nl.shared_constant: argument(s) {', '.join(sorted(kw))} not modelled",
                   where)
    arr = np.asarray(constant)
    if arr.ndim == 0 or arr.size == 0 or arr.dtype.kind not in "biuf":
        raise fail(f"nl.shared_constant takes a non-empty numpy array of numbers, not "
                   f"{type(constant).__name__}", where)
    try:
        d = to_dtype(dtype if dtype is not None else arr.dtype)
    except SystolicError as exc:
        raise fail(f"nl.shared_constant: {exc}", where) from None
    f = FORMATS.get(d.fmt)
    if f is None or f.kind not in ("float", "int"):
        raise fail(f"nl.shared_constant in {d} is not modelled", where)
    wide = arr.astype(np.float64)
    try:
        back = decode(encode(wide, f), f).astype(np.float64)
    except SystolicError as exc:
        raise fail(f"nl.shared_constant: {exc}", where) from None
    if not np.array_equal(back, wide):
        raise fail(f"nl.shared_constant: the values do not fit {d} exactly; round them to "
                   f"{d} yourself first", where)
    t = Tensor(tuple(int(s) for s in arr.shape), d, BUFFERS["shared_hbm"], where,
               "shared_constant")
    rec = current()
    rec.add_tensor(t)
    rec.constants.append((t, wide))
    return t


def broadcast(*args: Any, **kw: Any) -> Any:
    """``nl.broadcast``: not modelled; nl.broadcast_to is."""
    raise fail("nl.broadcast is not modelled; use nl.broadcast_to(x, shape) or "
               "x.broadcast_to(shape)")


class _TileSizes(TileSize):
    """``nl.tile_size`` (NKI docs, nki.language.tile_size), with ``bn_stats_fmax``: bn_stats
    takes at most 512 elements per partition."""

    bn_stats_fmax = 512


# (types.TileSize could carry bn_stats_fmax itself; types.py is not this change's file)
tile_size = _TileSizes  # type: ignore[misc]


__all__ += [
    "broadcast",
    "broadcast_to",
    "ds",
    "nc",
    "num_programs",
    "program_id",
    "program_ndim",
    "shared_constant",
    "spmd_dim",
    "transpose",
]


# -- issue 19, second part: nl.where, comparisons, mod, random numbers ---------------------
from .gather import gather_flattened  # noqa: E402
from .rng import nl_dropout as dropout  # noqa: E402
from .rng import rand, random_seed  # noqa: E402
from .select import (  # noqa: E402
    equal,
    greater,
    greater_equal,
    less,
    less_equal,
    mod,
    not_equal,
    where,
)

__all__ += ["dropout", "equal", "gather_flattened", "greater", "greater_equal", "less",
            "less_equal", "mod", "not_equal", "rand", "random_seed", "where"]


def floor(x: Any, dtype: Any = None, mask: Any = None, **kw: Any) -> Pending:
    """``nl.floor(x, dtype=None, mask=None)``: the largest integer <= x, element-wise, in
    ``dtype`` (default x's). The NKI docs name no engine or instruction for it and neither
    the ALU operators nor the activation functions have a floor (nki.api.shared.rst,
    aws-neuron-sdk 7c165a3e), so the model computes it from two Vector-engine operators it
    has: frac = x mod 1.0 (tensor_scalar, numpy's fp32 np.mod, in [0, 1)) into an fp32 tile,
    then x - frac (tensor_tensor), exact for every finite fp32 x (unsure: the hardware's
    lowering and so its cost; +-inf gives NaN here, docs/NUMERICS.md)."""
    from .results import materialize

    where = here()
    m = check_mask(mask, "nl.floor", where)
    kw.pop("name", None)
    if kw:
        raise fail(f"nl.floor: argument(s) {', '.join(sorted(kw))} not modelled", where)
    src = as_view(x)
    frac = materialize(Pending(
        LazyKind.TENSOR_SCALAR, where, src=src, op0=mod, operand0=1.0, reverse0=False,
        op1=None, operand1=None, reverse1=False, dtype="float32", mask=m))
    return Pending(LazyKind.TENSOR_TENSOR, where, a=src, b=frac.full, op=subtract,
                   dtype=dtype, engine=None, mask=m)


__all__ += ["floor"]


# nl.loop_reduce's operators: commutative, so which side the destination takes does not
# matter (the docs say both: "The destination tile is also the rhs input to op", and give
# nisa.tensor_tensor(data1=b, data2=a) as its meaning, b the destination)
_LOOP_REDUCE_OPS = (AluOp.ADD, AluOp.MULTIPLY, AluOp.MAXIMUM, AluOp.MINIMUM)


def loop_reduce(x: Any, op: Any, loop_indices: Any, *, dtype: Any = None, mask: Any = None,
                **kw: Any) -> Pending:
    """``t[...] = nl.loop_reduce(x, op, loop_indices, dtype=, mask=)``: t = t op x, one
    Vector-engine tensor_tensor into the tile it is assigned to, as the NKI docs define it
    (nki.language.loop_reduce, aws-neuron-sdk 7c165a3e: ``b = nl.loop_reduce(a, op=np.add,
    loop_indices=[k_i])`` "is the same as" ``b = nisa.tensor_tensor(data1=b, data2=a,
    op=np.add)``). ``loop_indices`` only let the compiler reorder those loops (the model
    unrolls them: nothing to do); the result takes the destination's dtype, as the current
    tensor_tensor does. A result used other than by assigning it into a tile has nothing to
    reduce into: one line (nki/results.py)."""
    where = here()
    m = check_mask(mask, "nl.loop_reduce", where)
    kw.pop("name", None)
    if kw:
        raise fail(f"nl.loop_reduce: argument(s) {', '.join(sorted(kw))} not modelled", where)
    alu = _isa._alu_of(op)
    if alu is None or alu not in _LOOP_REDUCE_OPS:
        raise fail(f"nl.loop_reduce op {op!r}: this model reduces with np.add, np.multiply, "
                   f"np.maximum or np.minimum (nl.add ...)", where)
    return Pending(LazyKind.LOOP_REDUCE, where, src=x, op=alu.value, dtype=dtype,
                   loop_indices=loop_indices, mask=m)


__all__ += ["loop_reduce"]


def finfo(dtype: Any) -> Any:
    """``nl.finfo(dtype)``: numpy's ``finfo`` of a float dtype (ml_dtypes' for bfloat16 and
    the fp8 formats), so ``nl.finfo(nl.bfloat16).min`` is that format's lowest finite
    value; an integer or packed dtype is refused in one line."""
    import ml_dtypes

    from ..errors import SystolicError

    try:
        d = to_dtype(dtype)
    except SystolicError as exc:
        raise fail(f"nl.finfo: {exc}") from None
    if d.np_dtype is None or d.np_dtype.kind not in "fV":
        raise fail(f"nl.finfo takes a floating-point dtype, not {d}")
    return ml_dtypes.finfo(d.np_dtype)


__all__ += ["finfo"]
