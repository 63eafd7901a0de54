"""Time a large product from a slice of its M tiles: the regular-run path of the timing.

A product lowers to the same block of instructions for every full M tile (the compiler's
outer loop, compiler/schedule.py), and the schedule of a program's prefix depends only on
that prefix. So a product of ``mt`` M tiles is timed from a slice of ``J`` of them (``J - 1``
full tiles and the real last, possibly ragged, tile):

* one schedule of the slice gives every quantity Q (latency, each cause of the critical
  path, each queue's busy time, bytes, MACs, the Tensor Engine's cycles and loss units)
  for the prefixes of 1, 2, ..., J - 1 full blocks and for the whole slice;
* the increments Q(j + 1) - Q(j) of the last two full blocks must be equal, and every
  queue that works in them must end its block later by the latency's increment (no backlog
  grows): the schedule is in a steady state, checked exactly, in integers; then
  ``Q(product) = Q(slice) + (mt - J) x increment``.

J is 3 when the last tile is full, else 4. If the check fails, the slice grows by two
tiles (up to ``MAX_SLICE``), and past that the
whole product is lowered and timed. ``tests/test_extrapolate.py`` checks the result against
the full schedule on products both can run.

A slice still holds every K tile of its M tiles, so its cost grows with K x N. A product of
many K tiles is timed from three stand-ins with ``k0``, ``k0 + 1`` and ``k0 + 2`` K tiles
(the same M, N and last K tile), each from its own M slice as above; when the two
increments of every quantity agree, it is extrapolated along K to the product's K tiles.
Why that holds: every K tile adds the same instructions (LoadStationary, the moving loads,
the MatMuls of one chunk of N tiles) with the same costs (a DMA's cost depends on its
contiguous run, which for K tiles past the first is the tile's row, not K), and the
steady, shifted slices show the loop settled. What could differ is the compiler's SBUF
tile caches (compiler/codegen.py, LRU slots): over an M tile each moving tile is used once
and each stationary tile once per chunk, so the moving tiles of an M tile stay resident
(K x N tiles at most the slots) or every access misses, and the same for the stationary
tiles; ``k0`` (at least ``K_SLICE``) is the fewest K tiles in the product's own regime.
``tests/test_extrapolate_k.py`` checks it against the full schedule in both regimes.

A product whose stationary tiles thrash (more K tiles than the compiler's stationary slots
S, 224 for trn2 bf16) would need stand-ins of more than S K tiles, as costly as its M
slice. Its K stand-ins are instead compiled with S' = k0 - 1 stationary slots
(``lower(..., _stat_slots=)``; ``k0`` as above with the moving slots' regime only, at least
``K_SLICE``), so that they thrash too; the product is as it would be compiled with S' slots
when, in that compile's schedule, no stationary slot's previous tile sets when the DMA of
the slot's next tile may start. Why (``_k_fewer_slots``, ``_check_slots``):

* With every stationary access a miss (LRU over a cycle longer than the slots), S and S'
  slots give the same instructions but for the SBUF offset of each stationary tile
  (tested): every tile is DMAed, latched by a LoadStationary (the DMA's write drops the
  latched copy) and used by its chunk's MatMuls; the LRU puts the j-th stationary DMA
  into the slot of the (j - S)-th (of the (j - S')-th with S'; for j < S, resp. S', it is
  the slot's first tenant). The costs do not depend on offsets (timing/dma.py, the Tensor Engine
  model never reads them), and nothing but these DMAs and LoadStationaries touches the
  stationary window, so the only difference in the whole-core scheduler's input is each
  stationary DMA's dependencies (timing/deps.py: the previous tenant's DMA, WAW, and
  LoadStationary, WAR; a LoadStationary's only dependency, RAW, is its own tile's DMA).
* The scheduler (timing/core.py) places an op from ``max(its dependencies' ends + latency,
  the end of the last transfer of its DMA queue on its engines)`` (+ the fixed DMA
  latency) on timelines and a FIFO state made by earlier ops alone. LoadStationaries run
  one after another in program order (timing/pe.py ``load_step``: a load starts after the
  previous one ends), and a tile's DMA ends before its LoadStationary starts, so the
  tenant S back ends no later than the tenant S' back: with S slots a stationary DMA's
  dependencies end no later (latency 0 from the Tensor and DMA queues to a DMA queue).
  If with S' its queue, not its dependencies, set that start (``time_prefixes(...,
  dep_led=)`` does not list it: a tie counts as set by them), the start is the same with
  S, and so are its placement and its critical-path record; by induction over the ops in
  program order, every op's start, end and record, and so every figure, is the same.
* ``_from_slice`` makes the check on each stand-in's slice schedule and raises
  ``_SlotBound`` when a stationary DMA is listed; ``_k_reduced`` then (or when those
  stand-ins are not steady or do not extrapolate) times the product as before this path
  existed. The gap: the check is made on the stand-ins' schedules, not on the product's
  (compiled with S'), which is never built; it is carried to the product by the same
  regularity the K extrapolation already relies on (every K tile adds the same ops, the
  slices repeat op for op, the increments agree). tests/test_extrapolate_k.py compares
  such products with their full schedules, and the schedules with S and S' slots op for
  op. The check is sufficient, not necessary: where a stationary DMA is bound by its slot
  (the DMAs run ahead of a PE-bound product), a DMA's start moves with S, though in the
  cases tried no figure did.

Along N the same argument holds chunk by chunk (compiler/schedule.py: the N tiles of an M
tile are taken in chunks of half the PSUM banks, each chunk a K loop then its read-outs, the
chunks' banks alternating). A product of many chunks is timed from three stand-ins with
``n0``, ``n0 + 1`` and ``n0 + 2`` chunks (the same M and K, the last chunk kept), each timed
as above (from its K stand-ins or its M slice), and extrapolated along N when the
increments agree. Every chunk after an M tile's first adds the same instructions: the
stationary tiles it reuses are resident if the K of them fit (the first chunk loaded them)
or all miss if not, whatever the chunk count; its moving tiles are new to the M tile, and
resident from the previous M tile exactly when the M tile's K x N moving tiles fit the
slots. So ``n0`` is at least ``N_SLICE`` (2: the first chunk differs) and, for a product
whose moving tiles thrash, large enough that the stand-in's thrash too; a chunk's banks
alternate with its neighbours' in any stand-in, so the chunk count's parity does not
matter. The N level is taken only where the stand-ins cost less than timing every N tile
(``_cost``); the stand-ins must then each be steady, and their increments agree, or the
product is timed by the K level or its M slice as before. ``tests/test_extrapolate_n.py``
checks it against the full schedule.
"""

from __future__ import annotations

import dataclasses
from itertools import pairwise
from typing import Any

import numpy as np

from .arch import Arch, get_arch
from .compiler import Lowered, MatmulSpec, lower
from .compiler.codegen import DenseState
from .compiler.tiling import check_size, matmul_count, tile
from .errors import ShapeError, SystolicError
from .isa import DmaLoad, Program, ReadOut, Space
from .isa.program import count_opcodes
from .timing.core import CoreTiming, time_prefixes
from .timing.tensor_engine import ComputeCosts, Kind, Schedule
from .views.report import Report, _breakdown_units, build_report

__all__ = ["FULL_LIMIT", "MAX_SLICE", "N_SLICE", "matmul_report"]

# Products of at most this many instructions (estimated) are lowered and timed whole, with
# the what-if re-runs the slice path leaves out. A slice costs 3-7 M-tile blocks, the whole
# product ``mt`` of them, so past a few thousand instructions the slice is the cheaper one:
# measured (bench/bench_timing.py --core, issue 20) 4096^3 bf16, 19,712 instructions, took
# 1.70 s wall timed whole and 0.45 s from its slice, to the same latency. 2048^3 (3,072
# estimated) stays whole.
FULL_LIMIT = 8_000
MAX_SLICE = 8
# A product timed whole (it has too few M tiles to slice, or --trace/--timeline asks for
# every instruction) lowers and schedules every instruction, at about 30,000 per second
# (docs/PERFORMANCE.md): past this many (estimated) it is refused in one line rather than
# run for minutes (issue 22: `matmul 3 3 2147483648` is one M tile of 4 M MatMuls).
WHOLE_LIMIT = 1_000_000


def _estimate(spec: MatmulSpec, arch: Arch) -> tuple[int, int]:
    plan = tile(spec, arch)
    per = len(plan.k_tiles) * len(plan.n_tiles) * (4 if spec.dtype == "fp32" else 3)
    return len(plan.m_tiles), per


def matmul_report(spec: MatmulSpec, arch: Arch, *, full: bool = False
                  ) -> tuple[Report, Lowered | None]:
    """The timing Report of ``spec`` (both views), and the Lowered product when it was
    lowered whole (``full`` forces that: the trace and timeline need every instruction)."""
    check_size(spec, arch)  # by arithmetic, before any tile list is built (issue 22 H1)
    if full or -(-spec.m // arch.cols) <= 4:  # timed whole: refused before tile() too
        _refuse_whole(spec, matmul_count(spec, arch) * (4 if spec.dtype == "fp32" else 3),
                      full)
    mt, per = _estimate(spec, arch)
    if full or mt * per <= FULL_LIMIT or mt <= 4 or spec.dtype.startswith("mx"):
        _refuse_whole(spec, mt * per, full)
        low = lower(spec, arch, check=not _preset(arch))
        return build_report(low.program, arch, spec), low
    sl = _n_reduced(spec, arch, mt)
    if sl is None:
        sl = _k_reduced(spec, arch, mt)
    if sl is None:  # three full blocks give two increments to compare
        sl = _m_slices(spec, arch, mt)
    if sl is not None:
        return _assemble(sl), None
    _refuse_whole(spec, mt * per, full)
    low = lower(spec, arch, check=not _preset(arch))
    return build_report(low.program, arch, spec), low


# A product of at least 2 K_SLICE K tiles is timed from stand-ins with K_SLICE, K_SLICE + 1
# and K_SLICE + 2 of them (the last, possibly ragged, tile kept): each from its own M slice,
# then every quantity extrapolated along K when the two increments agree (module docstring).
K_SLICE = 8


def _preset(arch: Arch) -> bool:
    """Whether ``arch`` is a preset itself. The compiler's output for a preset is not
    verified again here (issue 20: 13% of a sweep point): tests/test_compiler.py's
    test_lower_output_verifies checks every spec the API accepts on the presets. An Arch
    with changed fields (a sweep's overrides) is still verified."""
    try:
        return get_arch(arch.name) is arch
    except SystolicError:
        return False


def _k_start(spec: MatmulSpec, arch: Arch) -> int | None:
    """The K tiles of the smallest K stand-in (module docstring), or None when ``spec`` is
    not timed from K stand-ins."""
    got = _k_regular(spec, arch)
    if got is None:
        return None
    kt, caps, nt = got
    # the fewest K tiles in the product's regime: past a cache's capacity if it is
    k0 = max(_k_moving0(kt, caps, nt), caps[0] + 1 if kt > caps[0] else 0)
    if kt < 2 * k0:  # the stand-ins would cost about as much as the M slice
        return None
    return k0


def _k_moving0(kt: int, caps: tuple[int, int], nt: int) -> int:
    """The fewest K tiles (at least K_SLICE) in the product's regime of the moving slots:
    past their capacity if the product's moving tiles of one M tile are."""
    return max(K_SLICE, caps[1] // nt + 1 if kt * nt > caps[1] else 0)


def _k_regular(spec: MatmulSpec, arch: Arch) -> tuple[int, tuple[int, int], int] | None:
    """(K tiles, :func:`_caps`, N tiles) of a product with at least 2 K_SLICE K tiles all
    alike but the last, else None (not timed from K stand-ins). The SBUF tile caches must
    behave alike in the stand-ins and the product (module docstring): the moving tiles of
    one M tile fit (hits from the second M tile on) or not (LRU over a cycle: every access
    a miss), and likewise the stationary tiles of one M tile across its chunks; the callers
    choose the stand-ins' K tiles from these counts."""
    plan = tile(spec, arch)
    ks = plan.k_tiles
    kt = len(ks)
    if kt < 2 * K_SLICE or any((k.size, k.perf_mode) != (ks[0].size, ks[0].perf_mode)
                               for k in ks[:-1]):
        return None
    return kt, _caps(arch, plan), len(plan.n_tiles)


def _caps(arch: Arch, plan: Any) -> tuple[int, int]:
    """(stationary, moving) SBUF tile slots of the compiler's caches for ``plan``."""
    st = DenseState.for_plan(arch, plan)
    return len(st.stat.free), len(st.mov.free)


def _k_spec(spec: MatmulSpec, arch: Arch, k: int) -> MatmulSpec:
    """``spec`` with ``k`` K tiles: its last (possibly ragged) tile kept, full ones dropped."""
    ks = tile(spec, arch).k_tiles
    kt = len(ks)
    return dataclasses.replace(spec, k=spec.k - (kt - k) * ks[0].size)


def _k_fewer_slots(spec: MatmulSpec, arch: Arch) -> tuple[int, int] | None:
    """(K tiles of the smallest K stand-in, stationary slots of their compile) when the
    product's stationary tiles thrash the compiler's stationary slots and its K stand-ins
    may be compiled with fewer slots (module docstring), else None."""
    got = _k_regular(spec, arch)
    if got is None:
        return None
    kt, caps, nt = got
    if kt <= caps[0]:  # the stationary tiles of a chunk fit: today's K stand-ins
        return None
    # the moving slots' regime as in _k_start; the stand-ins' own stationary slots are one
    # fewer than their K tiles, so that they thrash too
    k0 = _k_moving0(kt, caps, nt)
    if k0 - 1 >= caps[0] or kt < 2 * k0:
        return None
    return k0, k0 - 1


class _SlotBound(Exception):
    """A K stand-in compiled with fewer stationary slots placed a stationary tile's DMA
    where its slot's previous tile let it start (module docstring): not timed that way."""


def _k_reduced(spec: MatmulSpec, arch: Arch, mt: int,
               label: MatmulSpec | None = None) -> _Slice | None:
    few = _k_fewer_slots(spec, arch)
    if few is not None:
        try:
            got = _k_stand_ins(spec, arch, mt, label, few[0], few[1])
        except _SlotBound:
            got = None
        if got is not None:
            return got
    # the product's own slots (the stationary tiles fit, or the stand-ins with fewer slots
    # did not time it)
    k0 = _k_start(spec, arch)
    if k0 is None:
        return None
    return _k_stand_ins(spec, arch, mt, label, k0, None)


def _k_stand_ins(spec: MatmulSpec, arch: Arch, mt: int, label: MatmulSpec | None, k0: int,
                 stat_slots: int | None) -> _Slice | None:
    """``spec`` from its K stand-ins of ``k0``, ``k0 + 1`` and ``k0 + 2`` K tiles, compiled
    with ``stat_slots`` stationary slots (None: the compiler's own), or None. Raises
    _SlotBound when a stand-in with ``stat_slots`` fails the slot check."""
    kt = len(tile(spec, arch).k_tiles)
    sizes = (k0, k0 + 1, k0 + 2)
    got = []
    for k in sizes:
        sub = _k_spec(spec, arch, k)
        sl = _m_slices(sub, arch, mt, label=label or spec, stat_slots=stat_slots)
        if sl is None:
            return None
        got.append(sl)
    extra = kt - sizes[-1]
    q = _linear([g.q for g in got], extra)
    return None if q is None else dataclasses.replace(got[-1], q=q, k_tiles=sizes[-1])


def _linear(qs: list[dict[str, int]], extra: int) -> dict[str, int] | None:
    """Every quantity of three stand-ins one step apart carried ``extra`` steps past the
    last, when its two increments agree (else None)."""
    a, b, c = qs
    if not (set(a) == set(b) == set(c)) or any(b[x] - a[x] != c[x] - b[x] for x in a):
        return None
    return {x: c[x] + extra * (c[x] - b[x]) for x in c}


# A product of at least 2 (N_SLICE + 2) chunks of N tiles (the PSUM banks' halves,
# compiler/schedule.py) may be timed from stand-ins with n0, n0 + 1 and n0 + 2 chunks (the
# last, possibly ragged, chunk kept), each timed as above (K stand-ins or an M slice), then
# every quantity extrapolated along N when the two increments agree (module docstring).
N_SLICE = 2


def _chunking(spec: MatmulSpec, arch: Arch) -> tuple[int, int, int]:
    """(N tiles per chunk, chunks, elements of a full chunk) of ``spec``'s N tiles."""
    per = max(1, arch.psum_banks // 2)
    nts = tile(spec, arch).n_tiles
    return per, -(-len(nts) // per), per * nts[0].size


def _n_spec(spec: MatmulSpec, arch: Arch, chunks: int) -> MatmulSpec:
    """``spec`` with ``chunks`` chunks of N tiles: its last (possibly ragged) chunk kept."""
    _, c, width = _chunking(spec, arch)
    return dataclasses.replace(spec, n=spec.n - (c - chunks) * width)


def _n_start(spec: MatmulSpec, arch: Arch) -> int | None:
    """The chunks of the smallest N stand-in, or None when N stand-ins would not cost less
    than timing every N tile. The moving tiles of an M tile (K x N of them) must fit the
    compiler's moving slots in a stand-in exactly when they fit in the product (module
    docstring); the first chunk of an M tile loads its stationary tiles and the later ones
    may reuse them, so a stand-in has at least N_SLICE chunks."""
    plan = tile(spec, arch)
    nts = plan.n_tiles
    per, c, _ = _chunking(spec, arch)
    if c < 2 * (N_SLICE + 2) or any(n.size != nts[0].size for n in nts[:-1]):
        return None
    kt = len(plan.k_tiles)
    cap = _caps(arch, plan)[1]
    last = len(nts) - (c - 1) * per  # N tiles of the last chunk
    n0 = N_SLICE
    if kt * len(nts) > cap:  # thrashing: so must each stand-in
        while kt * ((n0 - 1) * per + last) <= cap:
            n0 += 1
    if c < 2 * (n0 + 2):
        return None
    own = _cost(spec, arch)
    mine = sum(_cost(_n_spec(spec, arch, x), arch) for x in (n0, n0 + 1, n0 + 2))
    return n0 if mine < own else None


def _cost(spec: MatmulSpec, arch: Arch) -> int:
    """MatMuls scheduled to time ``spec`` from its K stand-ins or its M slice (the slices
    of 3 M tiles; an estimate, to choose between the levels). It counts the stand-ins of
    the product's own slots (_k_start), not those of _k_fewer_slots: the N level is chosen
    as before that path, which then times each stand-in it can."""
    plan = tile(spec, arch)
    per_k = 3 * len(plan.n_tiles)
    k0 = _k_start(spec, arch)
    return per_k * (3 * k0 + 3 if k0 is not None else len(plan.k_tiles))


def _n_reduced(spec: MatmulSpec, arch: Arch, mt: int) -> _Slice | None:
    """``spec`` from three stand-ins with fewer chunks of N tiles (module docstring), or
    None."""
    n0 = _n_start(spec, arch)
    if n0 is None:
        return None
    sizes = (n0, n0 + 1, n0 + 2)
    got = []
    for c in sizes:
        sub = _n_spec(spec, arch, c)
        sl = _k_reduced(sub, arch, mt, label=spec) or _m_slices(sub, arch, mt, label=spec)
        if sl is None:
            return None
        got.append(sl)
    q = _linear([g.q for g in got], _chunking(spec, arch)[1] - sizes[-1])
    return None if q is None else dataclasses.replace(got[-1], q=q)


def _refuse_whole(spec: MatmulSpec, estimated: int, full: bool) -> None:
    if estimated > WHOLE_LIMIT:
        why = ("the trace and timeline need every instruction" if full else
               "it has too few M tiles to time from a slice")
        raise ShapeError(f"{spec.m}x{spec.k}x{spec.n} would be timed whole ({why}): about "
                         f"{estimated:,} instructions, over {WHOLE_LIMIT:,} (minutes of "
                         f"scheduling); use a smaller shape, or more rows (M) and fewer "
                         f"columns (N)")


def _blocks(program: Program, spec: MatmulSpec, arch: Arch, out_offset: int,
            acc_isz: int) -> list[int]:
    """Instruction index just after the last ReadOut of each M tile."""
    cuts: list[int] = []
    for i, ins in enumerate(program.instructions):
        if type(ins) is ReadOut:
            row = (ins.dst.offset - out_offset) // (spec.n * acc_isz)
            t = row // arch.cols
            if len(cuts) <= t:
                cuts.append(i + 1)
            else:
                cuts[t] = i + 1
    return cuts


def _pe_prefix(sch: Schedule, cut: int, pack: int) -> dict[str, int]:
    kinds = sch.kinds[:cut]
    cc = sch.compute
    nc = int(np.searchsorted(cc.index, cut))
    sub = ComputeCosts(**{f.name: getattr(cc, f.name)[:nc]
                          for f in dataclasses.fields(ComputeCosts)})
    comp_end = int(sch.ends[cc.index[:nc]].max()) if nc else 0
    ro = np.flatnonzero(kinds == Kind.READOUT)
    ro_end = int(sch.ends[ro].max()) if len(ro) else 0
    trunc = Schedule(arch=sch.arch, kinds=kinds, starts=sch.starts[:cut], ends=sch.ends[:cut],
                     cause=sch.cause[:cut], cycles=comp_end,
                     readout_tail=max(0, ro_end - comp_end), compute=sub)
    units = _breakdown_units(trunc, pack)
    macs2 = int(np.sum(2 * sub.n // sub.passes * sub.cols * sub.rows * sub.fold))
    return {"cycles": comp_end, "readout_tail": trunc.readout_tail, "macs2": macs2,
            "pe_readout_end": max(ro_end, comp_end),
            **{"u_" + k: v for k, v in units.items()}}


def _core_numbers(ct: CoreTiming) -> dict[str, int]:
    names = list(ct.busy_ticks)
    ends = {f"end_{names[q]}": int(ct.ends[ct.op_queue == q].max())
            for q in np.unique(ct.op_queue).tolist()}
    return {**ends, "latency": ct.latency, "dma_bytes": ct.dma_bytes, "hbm_bytes": ct.hbm_bytes,
            "useful_macs": ct.useful_macs,
            **{"b_" + k: v for k, v in ct.bound_ticks.items()},
            **{"busy_" + k: v for k, v in ct.busy_ticks.items()},
            **{"n_" + k: v for k, v in ct.instructions.items()}}


def _steady(values: list[dict[str, int]]) -> dict[str, int] | None:
    """The common increment of every quantity over consecutive prefixes, or None. Steady
    also means no backlog grows: the last end of every queue that works in each block
    (``end_*``) moves on by the same time per block, the latency's increment."""
    if any(set(v) != set(values[0]) for v in values):
        return None
    incs = [{k: b[k] - a[k] for k in a} for a, b in pairwise(values)]
    if not incs or any(inc != incs[-1] for inc in incs[:-1]):
        return None
    inc = incs[-1]
    if any(inc[k] not in (0, inc["latency"]) for k in inc if k.startswith("end_")) or \
            inc["pe_readout_end"] != inc["cycles"]:
        return None
    return inc


def _shifted(ct: CoreTiming, cuts: tuple[int, ...]) -> bool:
    """The last two full blocks repeat the one before them op for op: the same queues and
    the same starts and ends, shifted by one time. Equal totals alone are not enough: a
    list schedule can settle into a pattern that repeats every few blocks (for example two
    blocks fast, one slow), whose increments agree over two blocks by chance."""
    lo, mid, hi = (int(np.searchsorted(ct.op_instr, c)) for c in cuts)
    if mid - lo != hi - mid or mid == lo:
        return False
    prev = slice(2 * lo - mid, lo) if 2 * lo - mid >= 0 else None
    blocks = [b for b in (prev, slice(lo, mid), slice(mid, hi)) if b is not None]
    if len(blocks) < 3:
        return False
    base = blocks[0]
    for b in blocks[1:]:
        if not np.array_equal(ct.op_queue[b], ct.op_queue[base]):
            return False
        shift = ct.starts[b][0] - ct.starts[base][0]
        if not (np.array_equal(ct.starts[b] - shift, ct.starts[base])
                and np.array_equal(ct.ends[b] - shift, ct.ends[base])):
            return False
        base = b
    return True


def _from_slice(spec: MatmulSpec, arch: Arch, mt: int, j: int,
                label: MatmulSpec | None = None, stat_slots: int | None = None
                ) -> _Slice | None:
    """The quantities of ``spec`` from a slice of ``j`` of its ``mt`` M tiles, or None when
    the slice is not steady. ``label`` is the product the report names (its format and peak:
    the full product when ``spec`` is its K-reduced stand-in). ``stat_slots``: compiled with
    that many stationary slots, the slot check made (raises _SlotBound; module docstring)."""
    plan = tile(spec, arch)
    m_slice = (j - 1) * arch.cols + plan.m_tiles[-1].size
    sspec = dataclasses.replace(spec, m=m_slice)
    # the compiler's own code: verified on full runs
    low = lower(sspec, arch, check=False, _stat_slots=stat_slots)
    prog = low.program
    cuts = _blocks(prog, sspec, arch, low.layout.out_offset, plan.acc_itemsize)
    if len(cuts) != j:
        return None
    sl = build_report(prog, arch, label or spec)
    pack = sl.pack
    full_last = plan.m_tiles[-1].size == arch.cols
    full_cuts = tuple(cuts if full_last else cuts[:j - 1])  # prefixes of the full blocks
    # no what-if re-runs: a prefix's what-if latencies would each need their own re-run,
    # and the extrapolated timing leaves them out (``what_if`` empty) rather than report
    # the slice's
    led: list[int] | None = None if stat_slots is None else []
    cts = time_prefixes(prog, arch, (*full_cuts, len(prog)), fmt=sl.fmt,
                        perf_mode=sl.perf_mode, what_if=False, dep_led=led)
    if led:
        _check_slots(prog, arch, plan, led)
    sch = sl.schedule
    counts = [_counts(prog, c) for c in full_cuts]
    pre = [{**_core_numbers(ct), **_pe_prefix(sch, c, pack), **n}
           for ct, c, n in zip(cts, full_cuts, counts, strict=False)]
    inc = _steady(pre[-3:])  # the last two full blocks: increments must agree
    if inc is None or not _shifted(cts[-1], full_cuts[-3:]):
        return None
    whole = {**_core_numbers(cts[-1]), **_pe_prefix(sch, len(prog), pack),
             **_counts(prog, len(prog))}
    if set(whole) != set(inc):
        return None
    extra = mt - j
    return _Slice(sl, cts[-1], {k: v + extra * inc[k] for k, v in whole.items()}, j)


@dataclasses.dataclass(frozen=True)
class _Slice:
    """A product's quantities (``q``, integers) found from a slice: its report and last
    core timing are the template the extrapolated report is made from."""

    report: Report
    core: CoreTiming
    q: dict[str, int]
    tiles: int
    k_tiles: int = 0  # K tiles of the largest K stand-in, when the K loop was extrapolated


def _assemble(s: _Slice) -> Report:
    q, ct = s.q, s.core
    core = dataclasses.replace(
        ct, latency=q["latency"], dma_bytes=q["dma_bytes"], hbm_bytes=q["hbm_bytes"],
        useful_macs=q["useful_macs"],
        bound_ticks={k: q["b_" + k] for k in ct.bound_ticks},
        busy_ticks={k: q["busy_" + k] for k in ct.busy_ticks},
        instructions={k: q["n_" + k] for k in ct.instructions}, what_if={})
    return dataclasses.replace(
        s.report, cycles=q["cycles"], readout_tail=q["readout_tail"],
        useful_macs=q["macs2"] // 2,
        # in opcode order: _counts's (count_opcodes), which every step below keeps
        counts={k[2:]: q[k] for k in q if k.startswith("c_")},
        units={k[2:]: q[k] for k in q if k.startswith("u_")}, core_timing=core,
        program=None, slice_tiles=s.tiles, slice_k_tiles=s.k_tiles)


def _check_slots(prog: Program, arch: Arch, plan: Any, led: list[int]) -> None:
    """Raise _SlotBound when a DmaLoad into a stationary slot is among ``led``, the
    transfers whose dependencies set their placement's start (time_prefixes' dep_led): a
    stationary slot's only dependencies are its previous tile's DmaLoad and LoadStationary
    (module docstring)."""
    window = DenseState.for_plan(arch, plan).mov.base  # the stationary window's end
    instructions = prog.instructions
    for i in led:
        ins = instructions[i]
        if type(ins) is DmaLoad and ins.dst.space is Space.SBUF and ins.dst.offset < window:
            raise _SlotBound(i)


def _m_slices(spec: MatmulSpec, arch: Arch, mt: int,
              label: MatmulSpec | None = None, stat_slots: int | None = None
              ) -> _Slice | None:
    """The first steady slice of 3 (or 4, a ragged last tile) M tiles, growing by two up to
    MAX_SLICE, or None (``stat_slots``: _from_slice's)."""
    full_last = tile(spec, arch).m_tiles[-1].size == arch.cols
    j = 3 if full_last else 4
    while j <= min(MAX_SLICE, mt - 1):
        got = _from_slice(spec, arch, mt, j, label, stat_slots)
        if got is not None:
            return got
        j += 2
    return None


def _counts(program: Program, cut: int) -> dict[str, Any]:
    return {"c_" + k: v for k, v in count_opcodes(program.instructions[:cut]).items()}
