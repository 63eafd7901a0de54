"""From a recording to ONE Program: named passes over the recorded operations, each a
function of its inputs returning data (:func:`build` reads as the pipeline):

0. :func:`systolic.nki.blocks.split`: a PSUM tensor of several blocks becomes a tensor
   per block where every use lies within one (the compiler's physical tile per logical
   tile).
1. :func:`groups` (NKI's ``accumulate``): a matmul with ``accumulate=None`` overwrites the
   first time it writes a PSUM region and adds after; ``False`` always overwrites; ``True``
   adds (onto a region that ``nl.zeros``/``memset(0)`` cleared, the first add is an
   overwrite of zeros, i.e. START). The older API's ``psum[...] += nc_matmul(...)`` is
   ``True``, except that onto a region no instruction wrote, or whose last group was
   finished and read, it opens a new group (START; unsure, docs/DESIGN-NOTES.md "PSUM
   ``+=``"). A group closes at the next operation of another engine that touches its
   region, or at the end: its first matmul gets START, its last STOP.
2. :func:`check_reads`: nothing reads memory nothing wrote; then
   :func:`systolic.nki.valid.check_values`: nothing computed from memory nothing wrote
   leaves the chip (a partly written tile may be computed on, its unwritten part not kept).
3. :func:`lifetimes`: each on-chip tensor lives from its first to its last use; the
   device-memory tensors in order of first use.
4. :func:`place`: device memory in that order; on-chip tensors placed at first use and
   released after last use (:mod:`systolic.nki.alloc`, with the compiler's rotation).
5. :func:`lower`: each operation becomes instructions by its kind's ONE rule
   (:data:`systolic.nki.lower.LOWER`), each naming its engine.
6. :func:`checked`: the Program verified, a failure named at its kernel line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ..arch import Arch
from ..errors import FormatError, KernelError, SystolicError, VerifyError
from ..isa import ACCESS, AccessPattern, Instruction, Program, Space
from ..verify import verify
from .alloc import DEFAULT_BUFFERS, OnChip, Rotation
from .blocks import split
from .lower import LOWER, UNMERGED_SOURCES, Placed, new_state
from .opkind import MemsetArgs, OpKind
from .record import Op, Recorder
from .tensor import Tensor, View
from .valid import check_values

__all__ = ["Groups", "Lifetimes", "Lowered", "Placement", "Recorded", "build", "check_reads",
           "checked", "groups", "lifetimes", "lower", "place"]

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
    # an SPMD launch on several NeuronCores: each core's own Program, for timing
    # (nki/cores.py); empty on one core
    cores: tuple[Program, ...] = ()

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


@dataclass(frozen=True)
class Groups:
    """Pass 1's result: the indices of matmuls that START and STOP their group, and of the
    PSUM memsets a group's START makes dead."""

    starts: set[int]
    stops: set[int]
    dead: set[int]


_MATMULS = (OpKind.MATMUL, OpKind.MATMUL_MX)
_NONE: Any = object()  # groups(): no instruction wrote the region


def groups(ops: list[Op]) -> Groups:
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
        if op.kind in _MATMULS:
            t, r = op.dst.tensor.id, _rect(op.dst)
            groups = open_.setdefault(t, [])
            same = clash = None  # the open group of this region; another it overlaps
            for g in groups:
                if same is None and g.rect == r:
                    same = g
                elif clash is None and _overlap(g.rect, r):
                    clash = g
            if clash is not None:
                raise KernelError(*op.where, (
                    f"nc_matmul writes part of a PSUM accumulation still open since line "
                    f"{clash.where[1]}; accumulate into the same dst slice, or copy the "
                    f"first result out before"))
            acc = op.args.accumulate  # type: ignore[union-attr]
            if same is not None and acc is not False:
                same.last = i
                continue
            if same is not None:
                raise KernelError(*op.where, (
                    f"accumulate=False overwrites the PSUM accumulation begun at line "
                    f"{same.where[1]} before anything read it; copy that result out first, "
                    f"or use accumulate=None to add"))
            if acc is True and not any(_contains(z, r) for z in zeroed.get(t, [])):
                # the region's last writer: nothing (_NONE), a finished group (None), an op
                last = next((o for w, o in reversed(written.get(t, [])) if _overlap(w, r)),
                            _NONE)
                if not (op.args.iadd and (last is _NONE or last is None)):  # type: ignore[union-attr]
                    why = ("that nothing wrote (its values are undefined)" if last is _NONE
                           else "whose accumulation already finished (it was read), which "
                           "this model's PSUM cannot extend" if last is None else
                           f"that {last.kind.value} at line "
                           f"{last.where[1]} wrote: a matmul accumulating onto values a "
                           f"non-matmul instruction wrote is undefined on NeuronCore-v2 "
                           f"and v3 hardware (NKI docs, nc_matmul accumulate) and not "
                           f"modelled")
                    raise KernelError(*op.where, (
                        f"accumulate=True onto a PSUM region {why}; use accumulate=None "
                        f"(the first matmul overwrites) or add partial results on the "
                        f"Vector engine"))
                # the older API's ``+=`` onto a region nothing wrote or a finished, read
                # group: the compiler's accumulation group, its first matmul writing ("A
                # series of TensorE matmul instructions with the first one writing to a
                # PSUM bank", trainium_inferentia2_arch.rst, aws-neuron-sdk 7c165a3e), as
                # the vendor's hardware-tested kernels need (DESIGN-NOTES "PSUM +=";
                # unsure for a finished group: the docs are silent)
            j = zero_by.pop((t, r), None)
            if j is not None and r in zeroed.get(t, ()):  # zeroed whole, nothing read it
                dead.add(j)
            zeroed[t] = [z for z in zeroed.get(t, []) if not _overlap(z, r)]
            groups.append(_Group(i, r, op.where))
            continue
        if op.dst.buffer.name != "psum":  # most ops touch no PSUM: skip them at once
            for v in (*op.outs, *op.srcs) if op.outs else op.srcs:
                if v.buffer.name == "psum":
                    break
            else:
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
                if isinstance(op.args, MemsetArgs) and op.args.value == 0.0:
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
    return Groups(starts, stops, dead)


# The kinds whose dst and outs are written and whose srcs are read, whole (the MX kinds
# write or read scale rows in quadrants, and kinds added later are not checked until they
# are listed here).
_PLAIN = frozenset({OpKind.DMA, OpKind.INDIRECT_DMA, OpKind.COPY, OpKind.TENSOR_TENSOR,
                    OpKind.TENSOR_SCALAR, OpKind.TENSOR_REDUCE, OpKind.ACTIVATION,
                    OpKind.MATMUL, OpKind.MEMSET,
                    OpKind.AFFINE_SELECT, OpKind.RANGE_SELECT, OpKind.SELECT,
                    OpKind.COPY_PREDICATED, OpKind.PARTITION_REDUCE, OpKind.MAX8,
                    OpKind.FIND_INDEX8, OpKind.MATCH_REPLACE8, OpKind.STREAM_SHUFFLE,
                    OpKind.LOCAL_GATHER, OpKind.SEQUENCE_BOUNDS, OpKind.RAND,
                    OpKind.DROPOUT, OpKind.TENSOR_COPY_DYNAMIC, OpKind.GATHER_FLATTENED,
                    # its dst is the region the window may write: counted here as written,
                    # so a later read of it passes (this rule refuses only reads of memory
                    # nothing at all wrote; nki/valid.py does not count it written)
                    OpKind.TENSOR_COPY_DYNAMIC_DST})

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


def check_reads(ops: list[Op], inputs: list[Tensor]) -> None:
    """Pass 2: refuse an operation that reads a region of a tensor where nothing at all was written
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
                r0, r1, r2, r3 = _footprint(v)
                for w in written.get(t.id, ()):  # _overlap, inline: 200,000 reads a kernel
                    if w[0] < r1 and r0 < w[1] and w[2] < r3 and r2 < w[3]:
                        break
                else:
                    made = "an argument" if t.is_input else f"the tensor made at line {t.where[1]}"
                    raise KernelError(*op.where, (
                        f"{op.kind.value} reads {made} where nothing was "
                        f"written before: its values would be whatever the memory held; write "
                        f"it first (dma_copy, memset, a computation assigned to it)"))
        for v in (op.dst, *op.outs) if plain else op.views():
            r = _footprint(v)
            rects = written.get(v.tensor.id)
            if rects is None:
                written[v.tensor.id] = [r]
            elif r not in rects:  # (written again: the rects already cover it)
                r0, r1, r2, r3 = r  # drop the rects r covers (_contains, inline)
                rects[:] = [w for w in rects
                            if not (r0 <= w[0] and w[1] <= r1 and r2 <= w[2] and w[3] <= r3)]
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
    key = _ap_key(v, base, reorder, merge)
    hit = _AP_CACHE.get(key)
    if hit is None:
        if len(_AP_CACHE) > 1 << 16:
            _AP_CACHE.clear()
        try:
            hit = _AP_CACHE[key] = _make_ap(v, base, where, reorder, merge)
        except FormatError as exc:  # int32, bool ...: dtypes with no format in this model
            raise KernelError(*where, f"{v.dtype} tensors are not modelled: {exc}") from None
    return hit


def _ap_key(v: View, base: int, reorder: bool, merge: bool) -> tuple[object, ...]:
    """:func:`_ap`'s memo key: the view's place and axes at its tensor's address."""
    dt = v.dtype
    return (v.buffer.name, dt.fmt, base + v.offset * dt.itemsize, v.p0, v.axes, reorder, merge)


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


@dataclass(frozen=True)
class Lifetimes:
    """Pass 3's result (dead operations left out): the device-memory tensors in order of
    first use, and per operation index the tensors whose last use it is (``ends``) and the
    on-chip tensors whose first use it is (``begins``, in the order the operation names
    them)."""

    hbm: list[Tensor]
    ends: dict[int, list[Tensor]]
    begins: dict[int, list[Tensor]] = field(default_factory=dict)


def lifetimes(rec: Recorder, outputs: list[Tensor], dead: set[int]) -> Lifetimes:
    """Pass 3: the lifetimes of on-chip tensors and the device-memory tensors to place."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    hbm: list[Tensor] = list(rec.inputs)
    seen_hbm: set[int] = {t.id for t in hbm}
    begins: dict[int, list[Tensor]] = {}
    for i, op in enumerate(rec.ops):
        if i in dead:
            continue
        for v in op.views():
            t = v.tensor
            if t.buffer.on_chip:
                if t.id not in first:
                    first[t.id] = i
                    begins.setdefault(i, []).append(t)
                last[t.id] = i
            elif t.id not in seen_hbm:
                seen_hbm.add(t.id)
                hbm.append(t)
    for t in outputs:
        if t.buffer.on_chip:  # a returned tile is read after the end: it lives to the end
            if t.id in last:
                last[t.id] = len(rec.ops)
            continue
        if t.id not in seen_hbm:
            seen_hbm.add(t.id)
            hbm.append(t)
    ends: dict[int, list[Tensor]] = {}
    for t in rec.tensors:
        if t.id in last:
            ends.setdefault(last[t.id], []).append(t)
    return Lifetimes(hbm, ends, begins)


@dataclass(frozen=True)
class Placement:
    """Pass 4's result: tensor id -> byte offset (device memory, or in each partition on
    chip), the device-memory size, and what the compiler stage's rotation did."""

    addresses: dict[int, int]
    dram_bytes: int
    allocation: Allocation


def place(rec: Recorder, life: Lifetimes, dead: set[int], buffers: int) -> Placement:
    """Pass 4: device-memory tensors one after another (64-byte aligned); on-chip tensors at
    their first use, released after their last (nki/alloc.py), loops ending where they end."""
    addr: dict[int, int] = {}
    top = 0
    for t in life.hbm:
        addr[t.id] = top
        top += -(-t.free_elems * t.dtype.itemsize // _HBM_ALIGN) * _HBM_ALIGN
    chip = OnChip(rec.arch, buffers)
    for t in rec.tensors:
        if t.pin is not None:
            chip.reserve(t)
    loop_ends: dict[int, list[int]] = {}
    for lid, at in rec.loop_ends.items():
        loop_ends.setdefault(at, []).append(lid)
    # only the operations where something happens, in order (a dead one, a PSUM memset the
    # group's START replaces, begins and ends nothing: lifetimes leaves it out)
    n = len(rec.ops)  # (a returned tile's end, n, is after the last operation: kept)
    events = sorted(i for i in {*loop_ends, *life.begins, *life.ends} if i < n)
    for i in events:
        for lid in loop_ends.get(i, ()):
            chip.end_loop(lid)
        for t in life.begins.get(i, ()):
            addr[t.id] = chip.place(t)
        for t in life.ends.get(i, ()):
            chip.release(t)
    return Placement(addr, max(top, _HBM_ALIGN),
                     Allocation(buffers, list(chip.report.values()), len(dead)))


@dataclass(frozen=True)
class Lowered:
    """Pass 5's result: the instructions, per instruction the kernel line it came from, and
    the weight-tile cache hits."""

    instructions: list[Instruction]
    lines: list[tuple[str, int]]
    cache_hits: int


def lower(rec: Recorder, grp: Groups, addr: dict[int, int]) -> Lowered:
    """Pass 5: each live operation through its kind's rule (nki/lower.py LOWER). After each,
    the SBUF its instructions write is an intervening writer for the weight-tile cache."""
    out: list[Instruction] = []
    lines: list[tuple[str, int]] = []
    st = new_state(rec.arch)
    starts, stops, dead = grp.starts, grp.stops, grp.dead
    written = {t: fields[1] for t, fields in ACCESS.items()}
    cache, sbuf = _AP_CACHE, Space.SBUF
    for i, op in enumerate(rec.ops):
        if i in dead:
            continue
        w, dst, srcs, outs = op.where, op.dst, op.srcs, op.outs
        merge = op.kind not in UNMERGED_SOURCES
        # _ap's memo asked here first: 233,000 views in the full-size tiled kernel, nearly
        # all hits; _ap itself on a miss
        base = addr[dst.tensor.id]
        reorder = not srcs
        d = cache.get(_ap_key(dst, base, reorder, True)) or _ap(dst, base, w, reorder)
        placed_srcs = []
        for s in srcs:
            base = addr[s.tensor.id]
            placed_srcs.append(cache.get(_ap_key(s, base, False, merge))
                               or _ap(s, base, w, False, merge))
        placed = Placed(d, placed_srcs,
                        [_ap(o, addr[o.tensor.id], w) for o in outs] if outs else [],
                        i in starts, i in stops)
        insts = LOWER[op.kind](op, placed, st)
        for ins in insts:
            for f in written[type(ins)]:  # isa writes(), without a tuple per instruction
                ap = getattr(ins, f)
                # (an empty weight-tile cache has nothing to invalidate: WeightTileState
                # .written returns itself)
                if ap is not None and ap.space is sbuf and st.cache.tiles:
                    st.invalidate(ap)
        out.extend(insts)
        lines.extend([w] * len(insts))
    return Lowered(out, lines, st.hits)


def checked(program: Program, arch: Arch, dram_bytes: int,
            lines: list[tuple[str, int]]) -> None:
    """Pass 6: verify the Program; a rule the recording checks missed is named at the kernel
    line of the instruction that breaks it."""
    try:
        verify(program, arch, dram_bytes)
    except VerifyError as exc:
        path, line = lines[exc.index]
        raise KernelError(path, line, exc.message) from None


def build(rec: Recorder, result: Any, outputs: list[Tensor], check: bool = True,
          buffers: int = DEFAULT_BUFFERS) -> Recorded:
    """The passes, in order; ``check`` verifies the Program (leave it on unless it is
    verified later, e.g. by an executor that runs :func:`systolic.verify.verify` itself);
    ``buffers`` physical tiles per tile made in an affine_range body (nki/alloc.py)."""
    if not isinstance(buffers, int) or isinstance(buffers, bool) or buffers < 1:
        raise SystolicError(f"buffers must be a whole number of at least 1, not {buffers!r}")
    ops, blocks = split(rec.ops, rec.tensors, outputs)
    if blocks:  # PSUM tensors placed block by block (nki/blocks.py)
        rec.ops = ops
        rec.tensors.extend(blocks)
    grp = groups(rec.ops)
    given = [*rec.inputs, *(t for t, _ in rec.constants)]
    check_reads(rec.ops, given)
    check_values(rec.ops, given, {i for i, op in enumerate(rec.ops)
                                  if op.kind is OpKind.MATMUL and i not in grp.starts})
    life = lifetimes(rec, outputs, grp.dead)
    placement = place(rec, life, grp.dead, buffers)
    low = lower(rec, grp, placement.addresses)
    program = Program(low.instructions)
    if check:
        checked(program, rec.arch, placement.dram_bytes, low.lines)
    addr = placement.addresses
    return Recorded(program, rec.arch, list(rec.inputs), outputs, result, addr,
                    placement.dram_bytes, len(rec.ops), low.lines, low.cache_hits, check,
                    placement.allocation, [(t, v) for t, v in rec.constants if t.id in addr],
                    frozenset(v.tensor.id for op in rec.ops for v in (op.dst, *op.outs)
                              if v.tensor.is_input))
