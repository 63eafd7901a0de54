"""Verify rules of the engine instructions: DmaCopy, TensorCopy, TensorTensor, Memset,
Activation, TensorScalar, TensorReduce (what an NKI kernel does besides nc_matmul).

Called by :class:`systolic.verify.Checker` for these instruction kinds. The rules (NKI docs,
nki.isa.*): operands are in bounds; a DMA moves bytes and does not cast, between DRAM and
SBUF or within SBUF (PSUM through DMA is not modelled); elementwise operations read and
write SBUF or PSUM only, on shapes of equal partitions and elements; GpSimd cannot access
PSUM; the Scalar engine runs Activation; per-partition operands (an activation's bias and
scales, a tensor_scalar's operand tiles) and reduction results are [P, 1] on the source's
partitions; tensor_reduce runs on Vector or GpSimd. A read of PSUM needs the accumulation groups it
overlaps to be finished (STOP), and marks them read out, so a START may reuse the region.
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod
from typing import TYPE_CHECKING, Any

from ..errors import ShapeError
from ..isa import (
    AccessPattern,
    Activation,
    DmaCopy,
    DmaIndirect,
    Engine,
    Instruction,
    Memset,
    QuantizeMx,
    Space,
    TensorCopy,
    TensorReduce,
    TensorScalar,
    TensorTensor,
)
from ..isa.fields import INDEX_FORMATS
from ..memory import check_bounds

if TYPE_CHECKING:
    from . import Checker

__all__ = ["check_engine", "check_indirect", "replay_engines"]

_ON_CHIP = (Space.SBUF, Space.PSUM)
_ELEMENTWISE_ENGINES = (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD)


def _bounds(c: Checker, i: int, ap: AccessPattern, role: str, spaces: tuple[Space, ...]
            ) -> None:
    if ap.space not in spaces:
        names = " or ".join(s.value for s in spaces)
        c._fail(i, f"{role} must be in {names}, not {ap.space.value}")
    try:
        check_bounds(ap, c.arch, c.dram_bytes)
    except ShapeError as exc:
        c._fail(i, f"{role}: {exc}")


def _same(c: Checker, i: int, a: AccessPattern, b: AccessPattern, what: str) -> None:
    if a.partitions * a.free_elems != b.partitions * b.free_elems:
        c._fail(i, f"{what} moves {a.partitions * a.free_elems} elements into "
                   f"{b.partitions * b.free_elems}")
    on_chip = a.space in _ON_CHIP and b.space in _ON_CHIP
    if on_chip and a.partitions != b.partitions:
        c._fail(i, f"{what} keeps the partition dimension: {a.partitions} vs {b.partitions}")


def _touch_psum(c: Checker, i: int, ap: AccessPattern, *, write: bool) -> None:
    """An engine reading or writing PSUM ends every accumulation group it overlaps: a
    finished one is read out (or overwritten) and may START again; an open one is an
    error (its STOP must come first)."""
    if ap.space is not Space.PSUM:
        return
    reg = ap.rect
    for other, (state, start) in list(c.regions.items()):
        if other.overlaps(reg):
            if state == "open":
                c._fail(i, f"writes PSUM inside an accumulation group opened at instruction "
                           f"{start}; finish the group (STOP) first" if write else
                           f"reads PSUM of an accumulation group opened at instruction "
                           f"{start} that never saw STOP; flag its last MatMul STOP first")
            del c.regions[other]


def check_engine(c: Checker, i: int, ins: Instruction) -> None:
    """Check one engine instruction against the rules above (raises VerifyError)."""
    if isinstance(ins, DmaCopy):
        _bounds(c, i, ins.src, "DmaCopy src", (Space.DRAM, Space.SBUF))
        _bounds(c, i, ins.dst, "DmaCopy dst", (Space.DRAM, Space.SBUF))
        if ins.src.dtype != ins.dst.dtype:
            c._fail(i, f"DmaCopy moves bytes and does not cast: {ins.src.dtype} -> "
                       f"{ins.dst.dtype}")
        if ins.queue < 0:
            c._fail(i, f"DmaCopy queue {ins.queue} must be >= 0")
        _same(c, i, ins.src, ins.dst, "DmaCopy")
        return
    if isinstance(ins, QuantizeMx):
        _quantize_mx(c, i, ins)
        return
    if type(ins).__name__ in _BREADTH:
        _breadth(c, i, ins)
        return
    eng = ins.engine  # type: ignore[union-attr]
    if eng not in _ELEMENTWISE_ENGINES:
        c._fail(i, f"{type(ins).__name__} runs on Vector, Scalar or GpSimd, not {eng.value}")
    if isinstance(ins, Activation) and eng is not Engine.SCALAR:
        c._fail(i, "Activation runs on the Scalar engine")
    if isinstance(ins, TensorScalar) and ins.acc is not None and eng is not Engine.VECTOR:
        c._fail(i, "TensorScalar with acc (tensor_scalar_reduce) runs on the Vector engine "
                   "(NKI docs)")
    srcs = _sources(ins)
    if srcs is None:  # pragma: no cover - the dispatcher sends only the kinds above
        c._fail(i, f"unknown engine instruction {type(ins).__name__}")
        return
    if isinstance(ins, TensorReduce) and eng is Engine.SCALAR:
        c._fail(i, "TensorReduce runs on the Vector or GpSimd engine (NKI docs)")
    name = type(ins).__name__
    dst: AccessPattern = ins.dst  # type: ignore[union-attr]
    vectors = _vectors(ins)
    for role, ap in (*((f"{name} src", s) for s in srcs), (f"{name} dst", dst),
                     *((f"{name} {r}", v) for r, v in vectors)):
        _bounds(c, i, ap, role, _ON_CHIP)
        if eng is Engine.GPSIMD and ap.space is Space.PSUM:
            c._fail(i, f"{name} on GpSimd touches PSUM, which GpSimd cannot access (NKI "
                       f"docs); run it on Vector or Scalar")
    parts = srcs[0].partitions if srcs else dst.partitions
    if isinstance(ins, TensorReduce):  # one result per run of the innermost elements
        vectors = ()
        if dst.partitions != parts or srcs[0].free_elems % dst.free_elems:
            c._fail(i, f"TensorReduce dst [{dst.partitions}, {dst.free_elems}] must have "
                       f"the {parts} partitions of its source and divide its "
                       f"{srcs[0].free_elems} elements per partition")
        _touch_psum(c, i, dst, write=True)
    for role, v in vectors:
        if v.partitions != parts or v.free_elems != 1:
            c._fail(i, f"{name} {role} must be one element on each of the {parts} "
                       f"partitions ([{parts}, 1]), not [{v.partitions}, {v.free_elems}]")
    for s in srcs:
        if not isinstance(ins, TensorReduce):
            _same(c, i, s, dst, name)
        _touch_psum(c, i, s, write=False)
    for role, v in vectors:
        _touch_psum(c, i, v, write=role in _VECTOR_OUTPUTS)
    _touch_psum(c, i, dst, write=True)


_VECTOR_OUTPUTS = ("acc", "dst")


def _vectors(ins: Instruction) -> tuple[tuple[str, AccessPattern], ...]:
    """The [P, 1] operands and results of an instruction, by role."""
    named: tuple[tuple[str, AccessPattern | None], ...]
    if isinstance(ins, Activation):
        named = (("bias", ins.bias), ("scales", ins.scales), ("acc", ins.acc))
    elif isinstance(ins, TensorScalar):
        named = (("operand0", ins.operand0_ap), ("operand1", ins.operand1_ap),
                 ("acc", ins.acc))
    elif isinstance(ins, TensorReduce):
        return (("dst", ins.dst),)
    else:
        return ()
    return tuple((r, ap) for r, ap in named if ap is not None)


def _sources(ins: Instruction) -> tuple[AccessPattern, ...] | None:
    if isinstance(ins, TensorCopy | Activation | TensorScalar | TensorReduce):
        return (ins.src,)
    if isinstance(ins, TensorTensor):
        return (ins.a, ins.b)
    if isinstance(ins, Memset):
        return ()
    return None


def check_indirect(c: Checker, i: int, ins: DmaIndirect) -> None:
    """An indirect DMA (isa DmaIndirect): the table in device memory, the rows and the
    indices in SBUF, one int32/uint32 index per row's partition, a row of the table as many
    elements as a partition of ``data``, no cast; ``accumulate`` only on a scatter and not
    with ``skip_oob`` (NKI docs, nki.isa.dma_copy: "If dst_rmw_op is specified, only
    oob_mode=oob_mode.error is allowed"). The index values are not checked here: they exist
    only when the instruction executes (systolic.sim)."""
    _bounds(c, i, ins.table, "DmaIndirect table", (Space.DRAM,))
    _bounds(c, i, ins.data, "DmaIndirect data", (Space.SBUF,))
    _bounds(c, i, ins.index, "DmaIndirect index", (Space.SBUF,))
    if ins.index.dtype not in INDEX_FORMATS:
        c._fail(i, f"DmaIndirect index must be int32 or uint32, not {ins.index.dtype}")
    k = ins.data.partitions
    if ins.index.partitions != k or ins.index.free_elems != 1:
        c._fail(i, f"DmaIndirect index must be one element on each of the {k} partitions of "
                   f"data ([{k}, 1]), not [{ins.index.partitions}, {ins.index.free_elems}]")
    if ins.data.dtype != ins.table.dtype:
        c._fail(i, f"DmaIndirect moves bytes and does not cast: {ins.table.dtype} table, "
                   f"{ins.data.dtype} data")
    if ins.data.free_elems != ins.table.free_elems:
        c._fail(i, f"DmaIndirect moves whole rows: a table row has {ins.table.free_elems} "
                   f"elements, a partition of data {ins.data.free_elems}")
    if ins.accumulate and not ins.scatter:
        c._fail(i, "DmaIndirect accumulate adds into the table: a scatter only")
    if ins.accumulate and ins.skip_oob:
        c._fail(i, "DmaIndirect accumulate takes no skip_oob (NKI docs: with dst_rmw_op only "
                   "oob_mode.error is allowed)")
    if ins.queue < 0:
        c._fail(i, f"DmaIndirect queue {ins.queue} must be >= 0")


def _dma_state(c: Checker, i: int, ins: DmaCopy, _memo: None) -> None:
    """A DmaCopy has no state to check (it never touches PSUM)."""


def _elementwise_state(c: Checker, i: int, ins: Instruction, _memo: None) -> None:
    """The PSUM group checks of an elementwise instruction (state), in check_engine's order;
    the verifier runs only these for an instruction equal to one that passed before."""
    for s in _sources(ins) or ():
        _touch_psum(c, i, s, write=False)
    for role, v in _vectors(ins):
        _touch_psum(c, i, v, write=role in _VECTOR_OUTPUTS)
    _touch_psum(c, i, ins.dst, write=True)  # type: ignore[union-attr]


def replay_engines() -> dict[type, Callable[[Checker, int, Any, Any], None]]:
    """The stateful part of each engine kind (QuantizeMx is always checked whole)."""
    return {DmaCopy: _dma_state, TensorCopy: _elementwise_state,
            TensorTensor: _elementwise_state, Memset: _elementwise_state,
            Activation: _elementwise_state, TensorScalar: _elementwise_state,
            TensorReduce: _elementwise_state}


def _quantize_mx(c: Checker, i: int, ins: QuantizeMx) -> None:
    """nki.isa.quantize_mx: gen4, Vector engine, SBUF only; src bf16/fp16 [P, F] with P a
    multiple of 32 up to 128 and F a multiple of 4; dst an fp8 MX format [P, F/4]; scale
    e8m0 spanning the rows of the blocks' scales (block g at 32*(g//4) + g%4)."""
    from ..dtypes import get_format
    from .mx import scale_span

    if ins.engine is not Engine.VECTOR:
        c._fail(i, "QuantizeMx runs on the Vector engine (NKI docs)")
    for role, ap in (("src", ins.src), ("dst", ins.dst), ("scale", ins.scale)):
        _bounds(c, i, ap, f"QuantizeMx {role}", (Space.SBUF,))
    if ins.dst.dtype not in c.arch.mx_formats or ins.dst.dtype == "mxfp4":
        c._fail(i, f"QuantizeMx writes an fp8 MX format of gen4 (mxfp8_e4m3, mxfp8_e5m2), "
                   f"not {ins.dst.dtype} on {c.arch.name}")
    if ins.src.dtype not in ("bf16", "fp16"):
        c._fail(i, f"QuantizeMx reads bf16 or fp16, not {ins.src.dtype}")
    p, f = ins.src.partitions, ins.src.free_elems
    if p % 32 or p > c.arch.rows or f % 4:
        c._fail(i, f"QuantizeMx src [{p}, {f}] needs partitions a multiple of 32 (at most "
                   f"{c.arch.rows}) and a free size a multiple of 4")
    if ins.dst.partitions != p or ins.dst.free_elems * 4 != f:
        c._fail(i, f"QuantizeMx dst must be [{p}, {f // 4}] x4 containers, not "
                   f"[{ins.dst.partitions}, {ins.dst.free_elems}]")
    if get_format(ins.scale.dtype).kind != "scale":
        c._fail(i, f"QuantizeMx scales are e8m0, not {ins.scale.dtype}")
    if ins.scale.partitions != scale_span(p) or ins.scale.free_elems != f // 4:
        c._fail(i, f"QuantizeMx scale must span {scale_span(p)} partitions x {f // 4}, not "
                   f"{ins.scale.partitions} x {ins.scale.free_elems}")


# -- the NKI breadth of issue 19 (NKI docs, nki.isa.nc_transpose / bn_stats / bn_aggr / iota)
_BREADTH = ("Transpose", "BnStats", "BnAggr", "Iota", "Reciprocal", "TensorTensorScan",
            "ScalarTensorTensor")
# nki.isa.nc_transpose: "Vector Engine can handle shape (32, 32) or smaller"
_VECTOR_TRANSPOSE_MAX = 32
# nki.isa.bn_stats: the free size "must not exceed 512 (nl.tile_size.bn_stats_fmax)"
_BN_STATS_FMAX = 512


def _breadth(c: Checker, i: int, ins: Any) -> None:
    """Transpose (Vector, <= 32 x 32, SBUF/PSUM, dtype kept, dst [F, P]); BnStats (Vector,
    src [P, N <= 512], dst [P, 6]); BnAggr (Vector, src [P, 3k], dst [P, 2]); Iota (GpSimd,
    dst in SBUF, its outer axes dividing dst's free elements)."""
    name = type(ins).__name__
    want = Engine.GPSIMD if name == "Iota" else Engine.VECTOR
    if ins.engine is not want:
        c._fail(i, f"{name} runs on the {want.value} engine (NKI docs), not "
                   f"{getattr(ins.engine, 'value', ins.engine)}")
    dst: AccessPattern = ins.dst
    if name == "Iota":
        _bounds(c, i, dst, "Iota dst", (Space.SBUF,))
        outer = prod(ins.outer_sizes)
        if (len(ins.outer_steps) != len(ins.outer_sizes) or min(ins.outer_sizes, default=1) < 1
                or dst.free_elems % outer):
            c._fail(i, f"Iota outer axes (steps {list(ins.outer_steps)}, sizes "
                       f"{list(ins.outer_sizes)}) must pair up and divide dst's "
                       f"{dst.free_elems} free elements")
        return
    if name == "TensorTensorScan":
        _scan(c, i, ins)
        return
    if name == "ScalarTensorTensor":
        _scalar_tensor_tensor(c, i, ins)
        return
    src: AccessPattern = ins.src
    _bounds(c, i, src, f"{name} src", _ON_CHIP)
    _bounds(c, i, dst, f"{name} dst", _ON_CHIP)
    p, f = src.partitions, src.free_elems
    if name == "Reciprocal":
        _same(c, i, src, dst, name)
    elif name == "Transpose":
        if p > _VECTOR_TRANSPOSE_MAX or f > _VECTOR_TRANSPOSE_MAX:
            c._fail(i, f"Transpose on the Vector engine takes at most 32 x 32, not [{p}, {f}]")
        if (dst.partitions, dst.free_elems) != (f, p):
            c._fail(i, f"Transpose of [{p}, {f}] writes [{f}, {p}], not "
                       f"[{dst.partitions}, {dst.free_elems}]")
        if src.dtype != dst.dtype:
            c._fail(i, f"Transpose keeps the dtype: {src.dtype} -> {dst.dtype}")
    else:
        if name == "BnStats" and f > _BN_STATS_FMAX:
            c._fail(i, f"BnStats takes at most {_BN_STATS_FMAX} elements per partition "
                       f"(nl.tile_size.bn_stats_fmax), not {f}")
        if name == "BnAggr" and f % 3:
            c._fail(i, f"BnAggr reads (count, mean, variance x count) triples: {f} elements "
                       f"per partition is not a multiple of 3")
        width = 6 if name == "BnStats" else 2
        if dst.partitions != p or dst.free_elems != width:
            c._fail(i, f"{name} writes [{p}, {width}], not [{dst.partitions}, "
                       f"{dst.free_elems}]")
    _touch_psum(c, i, src, write=False)
    _touch_psum(c, i, dst, write=True)


def _scan(c: Checker, i: int, ins: Any) -> None:
    """TensorTensorScan (nki.isa.tensor_tensor_scan): data0, data1 and dst on chip with the
    same partitions and elements, data0 and data1 not both in PSUM, ``initial_ap`` [P, 1]."""
    d0, d1, dst = ins.data0, ins.data1, ins.dst
    for role, ap in (("data0", d0), ("data1", d1), ("dst", dst)):
        _bounds(c, i, ap, f"TensorTensorScan {role}", _ON_CHIP)
    if d0.space is Space.PSUM and d1.space is Space.PSUM:
        c._fail(i, "TensorTensorScan: data0 and data1 cannot both be in PSUM (NKI docs)")
    _same(c, i, d0, dst, "TensorTensorScan")
    _same(c, i, d1, dst, "TensorTensorScan")
    if ins.initial_ap is not None:
        v = ins.initial_ap
        _bounds(c, i, v, "TensorTensorScan initial", _ON_CHIP)
        if v.partitions != d0.partitions or v.free_elems != 1:
            c._fail(i, f"TensorTensorScan initial must be [{d0.partitions}, 1], not "
                       f"[{v.partitions}, {v.free_elems}]")
        _touch_psum(c, i, v, write=False)
    _touch_psum(c, i, d0, write=False)
    _touch_psum(c, i, d1, write=False)
    _touch_psum(c, i, dst, write=True)


def _scalar_tensor_tensor(c: Checker, i: int, ins: Any) -> None:
    """ScalarTensorTensor (nki.isa.scalar_tensor_tensor): data, operand1 and dst on chip
    with the same partitions and elements, data and operand1 not both in PSUM,
    ``operand0_ap`` [P, 1]."""
    name = "ScalarTensorTensor"
    data, t, dst = ins.data, ins.operand1, ins.dst
    for role, ap in (("data", data), ("operand1", t), ("dst", dst)):
        _bounds(c, i, ap, f"{name} {role}", _ON_CHIP)
    if data.space is Space.PSUM and t.space is Space.PSUM:
        c._fail(i, f"{name}: data and operand1 cannot both be in PSUM (NKI docs)")
    _same(c, i, data, dst, name)
    _same(c, i, t, dst, name)
    reads = [data, t]
    if ins.operand0_ap is not None:
        v = ins.operand0_ap
        _bounds(c, i, v, f"{name} operand0", _ON_CHIP)
        if v.partitions != data.partitions or v.free_elems != 1:
            c._fail(i, f"{name} operand0 must be [{data.partitions}, 1], not "
                       f"[{v.partitions}, {v.free_elems}]")
        reads.append(v)
    for ap in reads:
        _touch_psum(c, i, ap, write=False)
    _touch_psum(c, i, dst, write=True)
