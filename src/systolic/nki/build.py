"""From a recording to ONE Program: accumulation groups, memory placement, instructions.

Three passes over the recorded operations:

1. **Groups** (NKI's ``accumulate``): a matmul with ``accumulate=None`` overwrites the first
   time it writes a PSUM region and adds after; ``False`` always overwrites; ``True`` adds
   (onto a region that ``nl.zeros``/``memset(0)`` cleared, the first add is an overwrite of
   zeros, i.e. START). A group closes at the next operation of another engine that touches
   its region, or at the end: its first matmul gets START, its last STOP.
2. **Lifetimes**: each on-chip tensor lives from its first to its last use.
3. **Emission**: tensors are placed at first use and released after last use
   (:mod:`systolic.nki.alloc`); each operation becomes instructions, nc_matmul through the
   codegen adapter (:mod:`systolic.nki.lower`), the rest as DmaCopy / TensorCopy /
   TensorTensor / Memset / Activation. The Program is verified before it is returned.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ..arch import Arch
from ..errors import FormatError, KernelError, SystolicError, VerifyError
from ..isa import (
    AccessPattern,
    Activation,
    DmaCopy,
    Instruction,
    Memset,
    Program,
    QuantizeMx,
    Space,
    TensorCopy,
    TensorReduce,
    TensorScalar,
    TensorTensor,
)
from ..timing.dma import queue_for
from ..verify import verify
from .alloc import DEFAULT_BUFFERS, OnChip, Rotation
from .lower import LOWER, emit_nc_matmul, emit_nc_matmul_mx, new_state
from .record import Op, Recorder
from .tensor import Tensor, View

__all__ = ["Recorded", "build"]

_HBM_ALIGN = 64
_SPACE = {"sbuf": Space.SBUF, "psum": Space.PSUM}


@dataclass(frozen=True)
class Allocation:
    """What the compiler stage did: ``buffers`` asked per rotating tile, the rotation of
    each declaration made in an affine_range body, and the PSUM memsets replaced by START."""

    buffers: int
    rotations: list[Rotation]
    memsets_to_start: int

    def lines(self) -> list[str]:
        """The report ``systolic kernel`` prints (one line per rotating declaration)."""
        out = [f"compiler: {self.memsets_to_start} PSUM memset(s) lowered to the matmul "
               f"START flag; a tile made in an affine_range body rotates over "
               f"{self.buffers} physical copies (of all its declaration's tiles live at "
               f"once)"]
        for r in self.rotations:
            fit = (f"; did not fit {self.buffers} times over: {r.short} held copy(ies) "
                   f"given up for room" if r.short else "")
            out.append(f"  {os.path.basename(r.where[0])}:{r.where[1]}  {r.buffer} "
                       f"{r.bytes:,} B/partition  {r.tiles:,} tiles at {r.buffers} "
                       f"distinct address(es){fit}")
        return out


@dataclass
class Recorded:
    """A recorded kernel: the Program, where every tensor lives, and what came back.

    ``addresses``: tensor id -> byte offset (in device memory for HBM tensors, in each
    partition for SBUF, in the PSUM partition for PSUM). ``ops``: NKI operations recorded.
    ``lines``: per instruction, the (file, line) of the NKI call it came from."""

    program: Program
    arch: Arch
    inputs: list[Tensor]
    outputs: list[Tensor]
    result: Any
    addresses: dict[int, int]
    dram_bytes: int
    ops: int
    lines: list[tuple[str, int]] = field(default_factory=list)
    cache_hits: int = 0
    checked: bool = True
    allocation: Allocation | None = None
    constants: list[tuple[Tensor, Any]] = field(default_factory=list)
    # ids of the argument tensors the kernel writes (the older API's output arguments)
    written_inputs: frozenset[int] = frozenset()

    def counts(self) -> dict[str, int]:
        """Instructions per engine (tensor, vector, scalar, gpsimd, dma)."""
        out: dict[str, int] = {}
        for ins in self.program:
            name = ins.engine.value  # type: ignore[union-attr]
            out[name] = out.get(name, 0) + 1
        return out


def _rect(v: View) -> tuple[int, int, int, int]:
    """(first partition, end partition, first element, end element) of a view's footprint."""
    lo = hi = v.offset
    p0, np_ = v.p0, 1
    for a in v.axes:
        if a.part:
            np_ = a.num
        else:
            hi += a.stride * (a.num - 1)
    return (p0, p0 + np_, lo, hi + 1)


def _overlap(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]


def _contains(outer: tuple[int, int, int, int], inner: tuple[int, int, int, int]) -> bool:
    return (outer[0] <= inner[0] and inner[1] <= outer[1] and outer[2] <= inner[2]
            and inner[3] <= outer[3])


class _Group:
    __slots__ = ("first", "last", "read", "rect", "where")

    def __init__(self, i: int, rect: tuple[int, int, int, int], where: tuple[str, int]) -> None:
        self.first = self.last = i
        self.rect, self.read, self.where = rect, False, where


# the NKI call behind each recorded kind, for messages
_NAMES = {"memset": "memset", "copy": "tensor_copy", "tt": "tensor_tensor",
          "ts": "tensor_scalar", "act": "activation", "reduce": "tensor_reduce",
          "dma": "dma_copy", "mm": "nc_matmul"}


def _groups(ops: list[Op]) -> tuple[set[int], set[int], set[int]]:
    """Pass 1: the indices of matmuls that START and STOP their group, and of the PSUM
    memsets a group's START makes dead (``nl.zeros(psum)`` then ``+=``: the compiler
    lowers the zeroing to the START flag, which overwrites; FACTS "PSUM accumulation")."""
    starts: set[int] = set()
    stops: set[int] = set()
    zero_by: dict[tuple[int, tuple[int, int, int, int]], int] = {}  # (t, rect) -> memset
    dead: set[int] = set()
    open_: dict[int, list[_Group]] = {}  # PSUM tensor id -> open groups
    closed: list[_Group] = []
    closed_by: dict[int, list[_Group]] = {}  # PSUM tensor id -> its finished groups
    zeroed: dict[int, list[tuple[int, int, int, int]]] = {}
    # by a finished group (op None) or another engine's op: (rect, the op that wrote it)
    written: dict[int, list[tuple[tuple[int, int, int, int], Op | None]]] = {}

    def close(g: _Group, t: int) -> None:
        starts.add(g.first)
        stops.add(g.last)
        closed.append(g)
        closed_by.setdefault(t, []).append(g)

    for i, op in enumerate(ops):
        if op.kind in ("mm", "mmx"):
            t, r = op.dst.tensor.id, _rect(op.dst)
            groups = open_.setdefault(t, [])
            same = next((g for g in groups if g.rect == r), None)
            clash = next((g for g in groups if g is not same and _overlap(g.rect, r)), None)
            if clash is not None:
                raise KernelError(*op.where, (
                    f"nc_matmul writes part of a PSUM accumulation still open since line "
                    f"{clash.where[1]}; accumulate into the same dst slice, or copy the "
                    f"first result out before"))
            acc = op.attrs["accumulate"]
            if same is not None and acc is not False:
                same.last = i
                continue
            if same is not None:
                raise KernelError(*op.where, (
                    f"accumulate=False overwrites the PSUM accumulation begun at line "
                    f"{same.where[1]} before anything read it; copy that result out first, "
                    f"or use accumulate=None to add"))
            if acc is True and not any(_contains(z, r) for z in zeroed.get(t, [])):
                before = [o for w, o in written.get(t, []) if _overlap(w, r)]
                why = ("that nothing wrote (its values are undefined)" if not before else
                       "whose accumulation already finished (it was read), which this "
                       "model's PSUM cannot extend" if before[-1] is None else
                       f"that {_NAMES.get(before[-1].kind, before[-1].kind)} at line "
                       f"{before[-1].where[1]} wrote: a matmul accumulating onto values a "
                       f"non-matmul instruction wrote is undefined on NeuronCore-v2 and v3 "
                       f"hardware (NKI docs, nc_matmul accumulate) and not modelled")
                raise KernelError(*op.where, (
                    f"accumulate=True onto a PSUM region {why}; use accumulate=None (the "
                    f"first matmul overwrites) or add partial results on the Vector engine"))
            j = zero_by.pop((t, r), None)
            if j is not None and r in zeroed.get(t, ()):  # zeroed whole, nothing read it
                dead.add(j)
            zeroed[t] = [z for z in zeroed.get(t, []) if not _overlap(z, r)]
            groups.append(_Group(i, r, op.where))
            continue
        for v, is_dst in ((op.dst, True), *((o, True) for o in op.outs),
                          *((s, False) for s in op.srcs)):
            if v.buffer.name != "psum":
                continue
            t, r = v.tensor.id, _rect(v)
            for g in [g for g in open_.get(t, []) if _overlap(g.rect, r)]:
                open_[t].remove(g)
                close(g, t)
                g.read = not is_dst
                written.setdefault(t, []).append((g.rect, None))
            for g in closed_by.get(t, ()):
                if not is_dst and _overlap(g.rect, r):
                    g.read = True
            for key in [k for k in zero_by if k[0] == t and _overlap(k[1], r)]:
                del zero_by[key]  # the zeros were read or overwritten: the memset stays
            if is_dst:
                zs = [z for z in zeroed.get(t, []) if not _overlap(z, r)]
                if op.kind == "memset" and op.attrs["value"] == 0.0:
                    zs.append(r)
                    zero_by[(t, r)] = i
                zeroed[t] = zs
                written.setdefault(t, []).append((r, op))
    for t, groups in open_.items():
        for g in groups:
            close(g, t)
    for g in closed:
        if not g.read:  # a finished group nobody read would block its bank's next START
            raise KernelError(*ops[g.last].where, (
                "the result of this nc_matmul is never read out of PSUM; copy it out "
                "(nisa.tensor_copy) or drop the matmul"))
    return starts, stops, dead


# The kinds whose dst and outs are written and whose srcs are read, whole (the MX kinds
# write or read scale rows in quadrants, and kinds added later are not checked until they
# are listed here).
_PLAIN = frozenset({"dma", "copy", "tt", "ts", "reduce", "act", "mm", "memset"})

Rect = tuple[int, int, int, int]


def _footprint(v: View) -> Rect:
    """(first partition, end partition, first element, end element) a view can touch,
    for any sign of its steps."""
    lo = hi = v.offset
    np_ = 1
    for a in v.axes:
        if a.part:
            np_ = a.num
        elif a.stride >= 0:
            hi += a.stride * (a.num - 1)
        else:
            lo += a.stride * (a.num - 1)
    return (v.p0, v.p0 + np_, lo, hi + 1)


def _check_reads(ops: list[Op], inputs: list[Tensor]) -> None:
    """Refuse an operation that reads a region of a tensor where nothing at all was written
    before it (a tile whose load was dropped, an older-API result never assigned): its
    values would be whatever the memory held, NaN in this model's fresh memory and garbage
    on hardware. A read that overlaps something written passes: a kernel may compute on a
    whole tile and keep only the part it loaded (the unwritten rest reads as NaN)."""
    written: dict[int, list[Rect]] = {t.id: [(0, 1, 0, t.free_elems)] for t in inputs}
    for op in ops:
        plain = op.kind in _PLAIN
        if plain:
            for v in op.srcs:
                t = v.tensor
                r = _footprint(v)
                if not any(_overlap(w, r) for w in written.get(t.id, ())):
                    made = "an argument" if t.is_input else f"the tensor made at line {t.where[1]}"
                    raise KernelError(*op.where, (
                        f"{_NAMES.get(op.kind, op.kind)} reads {made} where nothing was "
                        f"written before: its values would be whatever the memory held; write "
                        f"it first (dma_copy, memset, a computation assigned to it)"))
        for v in (op.dst, *op.outs) if plain else op.views():
            rects = written.setdefault(v.tensor.id, [])
            r = _footprint(v)
            rects[:] = [w for w in rects if not _contains(r, w)]
            rects.append(r)


def _merge(dims: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Merge adjacent free dims that are one contiguous run (outer step = inner extent)."""
    out: list[tuple[int, int]] = []
    for step, num in dims:
        if num == 1 and out:
            continue
        if out and out[-1][0] == step * num:
            out[-1] = (step, out[-1][1] * num)
        else:
            out.append((step, num))
    return out


_AP_CACHE: dict[tuple[Any, ...], AccessPattern] = {}


def _ap(v: View, base: int, where: tuple[str, int], reorder: bool = False,
        merge: bool = True) -> AccessPattern:
    """The access pattern of a view at its tensor's address (memoised: a loop makes the
    same SBUF/PSUM patterns over and over, and patterns are immutable)."""
    dt = v.dt if v.dt is not None else v.tensor.dtype
    key = (v.tensor.buffer.name, dt.fmt, base + v.offset * dt.itemsize, v.p0, v.axes,
           reorder, merge)
    hit = _AP_CACHE.get(key)
    if hit is None:
        if len(_AP_CACHE) > 1 << 16:
            _AP_CACHE.clear()
        try:
            hit = _AP_CACHE[key] = _make_ap(v, base, where, reorder, merge)
        except FormatError as exc:  # int32, bool ...: dtypes with no format in this model
            raise KernelError(*where, f"{v.dtype} tensors are not modelled: {exc}") from None
    return hit


def _make_ap(v: View, base: int, where: tuple[str, int], reorder: bool,
             merge: bool) -> AccessPattern:
    t = v.tensor
    isz, fmt = v.dtype.itemsize, v.dtype.fmt
    axes = list(v.axes)
    if t.buffer.on_chip:
        parts = 1
        if reorder and any(a.part for a in axes):  # a memset: element order is irrelevant
            axes.sort(key=lambda a: not a.part)
        if axes and axes[0].part:
            parts = axes.pop(0).num
        elif any(a.part for a in axes):
            raise KernelError(*where, (f"the partition dimension of {t.name or 'this tile'} "
                                       f"must come first in the index"))
        flat = [(a.stride, a.num) for a in axes]
        dims = (_merge(flat) if merge else flat) or [(1, 1)]  # matmul operands keep [2, F]
        if len(dims) > 3:
            raise KernelError(*where, f"this access has {len(dims)} free dimensions after "
                                      f"merging; the hardware takes at most 3")
        return AccessPattern(_SPACE[t.buffer.name], v.p0, parts, base + v.offset * isz,
                             tuple(dims), fmt)
    if not axes:
        return AccessPattern(Space.DRAM, 0, 1, base + v.offset * isz, ((1, 1),), fmt)
    head = axes.pop(0)
    dims = _merge([(a.stride, a.num) for a in axes]) or [(1, 1)]
    if len(dims) > 3:
        raise KernelError(*where, f"this HBM access has {len(dims)} free dimensions after "
                                  f"merging; the hardware takes at most 3")
    return AccessPattern(Space.DRAM, 0, head.num, base + v.offset * isz, tuple(dims), fmt,
                         partition_step=head.stride * isz)


def _mx_scale(scale: AccessPattern, data: AccessPattern) -> AccessPattern:
    """The E8M0 scale pattern of an MX operand: block g of the data's partitions keeps its
    scale at row 32*(g//4) + g%4 of the scale tile (NKI docs; FACTS "Hardware")."""
    from ..verify.mx import scale_span

    return AccessPattern(Space.SBUF, scale.partition, scale_span(data.partitions),
                         scale.offset, scale.dims, "e8m0")


def build(rec: Recorder, result: Any, outputs: list[Tensor], check: bool = True,
          buffers: int = DEFAULT_BUFFERS) -> Recorded:
    """Passes 1-3; ``check`` verifies the Program (leave it on unless it is verified
    later, e.g. by an executor that runs :func:`systolic.verify.verify` itself);
    ``buffers`` physical tiles per tile made in an affine_range body (nki/alloc.py)."""
    if not isinstance(buffers, int) or isinstance(buffers, bool) or buffers < 1:
        raise SystolicError(f"buffers must be a whole number of at least 1, not {buffers!r}")
    arch, ops = rec.arch, rec.ops
    starts, stops, dead = _groups(ops)
    _check_reads(ops, [*rec.inputs, *(t for t, _ in rec.constants)])
    # pass 2: lifetimes of on-chip tensors
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    hbm: list[Tensor] = []
    seen_hbm: set[int] = set()
    for t in rec.inputs:
        hbm.append(t)
        seen_hbm.add(t.id)
    for i, op in enumerate(ops):
        if i in dead:
            continue
        for v in op.views():
            t = v.tensor
            if t.buffer.on_chip:
                first.setdefault(t.id, i)
                last[t.id] = i
            elif t.id not in seen_hbm:
                seen_hbm.add(t.id)
                hbm.append(t)
    for t in outputs:
        if t.id not in seen_hbm:
            seen_hbm.add(t.id)
            hbm.append(t)
    addr: dict[int, int] = {}
    top = 0
    for t in hbm:
        addr[t.id] = top
        top += -(-t.free_elems * t.dtype.itemsize // _HBM_ALIGN) * _HBM_ALIGN
    dram_bytes = max(top, _HBM_ALIGN)
    ends: dict[int, list[Tensor]] = {}
    for t in rec.tensors:
        if t.id in last:
            ends.setdefault(last[t.id], []).append(t)
    # pass 3: placement and emission
    chip = OnChip(arch, buffers)
    loop_ends: dict[int, list[int]] = {}
    for lid, at in rec.loop_ends.items():
        loop_ends.setdefault(at, []).append(lid)
    out: list[Instruction] = []
    lines: list[tuple[str, int]] = []
    st = new_state(arch, out)
    for i, op in enumerate(ops):
        for lid in loop_ends.get(i, ()):
            chip.end_loop(lid)
        if i in dead:  # a PSUM memset the group's START replaces
            continue
        for v in op.views():
            t = v.tensor
            if t.buffer.on_chip and first[t.id] == i and t.id not in addr:
                addr[t.id] = chip.place(t)
        n0 = len(out)
        _emit(op, i, st, addr, starts, stops)
        lines.extend([op.where] * (len(out) - n0))
        for t in ends.get(i, ()):
            chip.release(t)
    program = Program(out)
    try:
        if check:
            verify(program, arch, dram_bytes)
    except VerifyError as exc:  # a rule the recording checks missed: name the kernel line
        path, line = lines[exc.index]
        raise KernelError(path, line, exc.message) from None
    return Recorded(program, arch, list(rec.inputs), outputs, result, addr, dram_bytes,
                    len(ops), lines, st.hits, check,
                    Allocation(buffers, list(chip.report.values()), len(dead)),
                    [(t, v) for t, v in rec.constants if t.id in addr],
                    frozenset(v.tensor.id for op in ops for v in (op.dst, *op.outs)
                              if v.tensor.is_input))


# The recorded kinds _emit lowers itself; every other kind must be in lower.LOWER.
EMITTED = frozenset({"mm", "mmx", "dma", "copy", "tt", "memset", "act", "ts", "reduce",
                     "qmx"})


def lowered_kinds() -> frozenset[str]:
    """Every recorded operation kind the emission pass turns into instructions."""
    return EMITTED | frozenset(LOWER)


def _emit(op: Op, i: int, st: Any, addr: dict[int, int], starts: set[int],
          stops: set[int]) -> None:
    w = op.where
    dst = _ap(op.dst, addr[op.dst.tensor.id], w, reorder=not op.srcs)
    srcs = [_ap(s, addr[s.tensor.id], w, merge=op.kind != "mm") for s in op.srcs]
    out = st.out
    k, a = op.kind, op.attrs
    if k == "mm":
        emit_nc_matmul(st, srcs[0], srcs[1], dst, first=i in starts, last=i in stops,
                       perf=a["perf"], column=a["col"], transpose=a.get("transpose", False))
        return
    if k == "mmx":
        emit_nc_matmul_mx(st, srcs[0], srcs[1], _mx_scale(srcs[2], srcs[0]),
                          _mx_scale(srcs[3], srcs[1]), dst, first=i in starts,
                          last=i in stops, bank=dst.offset // st.arch.psum_bank_bytes)
        return
    if k == "dma":  # the compiler's queue assignment (timing/dma.py queue_for)
        out.append(DmaCopy(srcs[0], dst, queue_for(srcs[0], dst)))
    elif k == "copy":
        out.append(TensorCopy(srcs[0], dst, a["engine"]))
    elif k == "tt":
        out.append(TensorTensor(srcs[0], srcs[1], dst, a["op"], a["engine"]))
    elif k == "memset":
        out.append(Memset(dst, a["value"], a["engine"]))
    elif k == "act":
        rest = iter(srcs[1:])  # bias, then scales, as recorded (nki/ops.py)
        bias = next(rest) if a["bias"] else None
        scales = next(rest) if a["scales"] else None
        acc = _ap(op.outs[0], addr[op.outs[0].tensor.id], w) if op.outs else None
        out.append(Activation(srcs[0], dst, a["func"], a["scale"], a["engine"], bias=bias,
                              scales=scales, acc=acc, acc_op=a["acc_op"]))
        if acc is not None and acc.space is Space.SBUF:
            st.invalidate(acc)
    elif k == "ts":
        rest = iter(srcs[1:])  # the operand tiles, in order (nki/ops.py)
        c0 = next(rest) if a["c0"] is None else None
        c1 = next(rest) if a["op1"] is not None and a["c1"] is None else None
        k0, k1 = a["c0"], a.get("c1")  # constants; None where a tile gives the operand
        out.append(TensorScalar(srcs[0], dst, a["op0"], 1.0 if k0 is None else k0,
                                a["engine"], operand0_ap=c0, reverse0=a["reverse0"],
                                op1=a["op1"], operand1=0.0 if k1 is None else k1,
                                operand1_ap=c1, reverse1=a["reverse1"]))
    elif k == "reduce":
        out.append(TensorReduce(srcs[0], dst, a["op"], a["engine"], a["negate"]))
    elif k == "qmx":
        scale = _mx_scale(srcs[1], dst)
        out.append(QuantizeMx(srcs[0], dst, scale))
        st.invalidate(scale)
    elif k in LOWER:  # kinds that carry their own lowering (nki/lower.py LOWER)
        out.extend(LOWER[k](op, dst, srcs))
    else:  # a kind the recorder makes and nothing lowers would vanish from the Program
        raise SystolicError(f"internal error: nki/build.py cannot lower the recorded "
                            f"operation kind {k!r} ({_NAMES.get(k, k)} at "
                            f"{os.path.basename(w[0])}:{w[1]}); please report it")
    if dst.space is Space.SBUF:
        st.invalidate(dst)
