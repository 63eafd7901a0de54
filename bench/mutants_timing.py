"""Mutants for the whole-core timing (issue 21 scheduler / DMA / deps / engines survivors, and
the bugs fixed with them), written as bench/mutants.py's CATALOGUE entries."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutants import Mutant

M = Mutant

# the fast hand-worked tests first: with -x a killed mutant stops there
NEW = "tests/test_timing_mutants.py"
RULES = ("tests/test_dma_rules.py",)
REF = ("tests/test_reference_scheduler.py",)
T = (NEW, *RULES, *REF, "tests/test_core_timing.py")
EX = (NEW, "tests/test_extrapolate.py")
FAST = "tests/test_timing_fast_paths.py"  # each issue-20 shortcut against the path it replaced

MUTANTS: tuple[Mutant, ...] = (
    M("core-pe-no-sync", "timing/core.py",
      "    return t.sync + t.access.get(qd, 0)\n",
      "    return (t.sync if q != _TENSOR else 0) + t.access.get(qd, 0)\n", T,
      "a PE op waiting on a DMA (or another engine) pays no sync latency"),
    M("core-dep-overhead-cross-engine", "timing/core.py",
      "    return t.sync + t.access.get(qd, 0)\n",
      "    return t.sync + t.access.get(qd, 0) + (t.dep_overhead.get(q, 0) if raw else 0)\n",
      T,
      "engine_dep_overhead charged on a cross-engine read after write"),
    M("core-hbm-during-fixed", "timing/core.py",
      "sh, hbind = hbm.fit(t, hb) if hb else (t, -1)",
      "sh, hbind = hbm.fit(max(0, t - self.fixed), hb) if hb else (t, -1)", T,
      "HBM bytes served during the DMA fixed latency"),
    M("core-region-memo-no-dtype", "timing/core.py",
      "        reg = _REGIONS.get(ap)  # by value: every field, as two dtypes touch different "
      "bytes\n        if reg is None:\n            if len(_REGIONS) >= _DMA_COSTS_MAX:\n"
      "                _REGIONS.clear()\n            reg = _REGIONS[ap] = region(ap)\n",
      "        key = (ap.space, ap.partition, ap.partitions, ap.offset, ap.dims,\n"
      "               ap.partition_step)  # every field but the dtype\n"
      "        reg = _REGIONS.get(key)  # type: ignore[call-overload]\n        if reg is None:\n"
      "            if len(_REGIONS) >= _DMA_COSTS_MAX:\n                _REGIONS.clear()\n"
      "            reg = _REGIONS[key] = region(ap)  # type: ignore[index]\n",
      ("tests/test_reference_scheduler.py::"
       "test_a_bf16_read_waits_for_the_fp32_dma_writing_those_bytes", *T),
      "the region memo keyed without the dtype: a bf16 read misses the fp32 write"),
    M("core-dma-memo-no-src-pitch", "timing/core.py",
      "src.partition_step, dst.space, dst.partition,",
      "dst.space, dst.partition,", T,
      "the DMA memo without the source partition_step"),
    M("core-dma-memo-no-dst-pitch", "timing/core.py",
      "               dst.dtype, dst.partition_step)",
      "               )", T,
      "issue 21 defect 1: the DMA memo without the destination pitch and dtype"),
    M("core-psum-bank-twice-offset", "timing/core.py",
      "                    for bank in range(lo // arch.psum_bank_bytes,\n"
      "                                      (hi - 1) // arch.psum_bank_bytes + 1):",
      "                    off = ap.offset  # type: ignore[attr-defined]\n"
      "                    for bank in range((off + lo) // arch.psum_bank_bytes,\n"
      "                                      (off + hi - 1) // arch.psum_bank_bytes + 1):", T,
      "found by the reference: the PSUM bank of an op counted the offset twice, so Vector and"
      " Scalar used one bank at once"),
    M("dma-even-share", "timing/dma.py",
      "    share = _largest_piece(p0, parts, arch) / parts",
      "    share = 1 / len(engines)", T,
      "uneven partition splits timed as an even share per engine"),
    M("dma-s2s-source-band", "timing/dma.py",
      "    side = dst if dst.space is not Space.DRAM else src",
      "    side = src if src.space is not Space.DRAM else dst", T,
      "SBUF->SBUF copies spread by the source band"),
    M("dma-transpose-load-only", "timing/dma.py",
      "    transposed = tr_s or tr_d", "    transposed = tr_s", T,
      "a transposing store timed as a plain one"),
    M("deps-first-reader-per-queue", "timing/deps.py",
      "                rec = self._record(r)\n            rec.readers.append(op)",
      "                rec = self._record(r)\n"
      "            if all(self.queue[x] != self.queue[op] for x in rec.readers):\n"
      "                rec.readers.append(op)", T,
      "a region keeping only the first reader per queue (WAR violated)"),
    M("deps-wrap-same-row", "timing/regions.py",
      "                Rect(row + 1, ap.partitions, 0, col + hi - lo - pitch))",
      "                Rect(row, ap.partitions, 0, col + hi - lo - pitch))", T,
      "the wrapped part of a strided DRAM row put on the same row (RAW violated)"),
    M("deps-negative-pitch-first-row", "timing/regions.py",
      "    if pitch < 0:  # rows stored bottom-up",
      "    if pitch < -(1 << 62):  # rows stored bottom-up", T,
      "found here: a negative-pitch DRAM region held only its first row (RAW missed)"),
    M("deps-cross-pitch-flat", "timing/regions.py",
      "    return _rows_overlap(a, b)\n", "    return True\n", T,
      "found by the reference: regions of different pitch compared by flat extents "
      "(false waits)"),
    M("deps-fine-bucket-lookup", "timing/deps.py",
      "            out.extend(self.fine.get((kind, pitch, rb, cb), ()))",
      "            pass", (*T, FAST),
      "the H6 index: a wide region not looking at the narrow regions filed in its cells"),
    M("costs-tt-always-n", "timing/costs.py",
      "    return _floor(arch, n if one_psum or fast else 2 * n)",
      "    return _floor(arch, n)", T, "tensor_tensor always N, never 2N"),
    M("costs-tt-memo-without-b", "timing/costs.py",
      "    return _cached(ins, arch, eng)\n",
      "    if isinstance(ins, TensorTensor):\n"
      "        tt = engine_cycles.__dict__.setdefault('tt', {})\n"
      "        k = (ins.a, ins.dst, ins.op, eng)\n"
      "        if k not in tt:\n            tt[k] = _cached(ins, arch, eng)\n"
      "        return tt[k]\n    return _cached(ins, arch, eng)\n", T,
      "issue 21 defect 1: TensorTensor's cost memo keyed without operand b"),

    # -- extrapolate (issue 21 survivors) ------------------------------------------------
    M("ex-unsteady-extrapolated", "extrapolate.py",
      "    if inc is None or not _shifted(cts[-1], full_cuts[-3:]):",
      "    if inc is None:", EX,
      "a slice whose blocks do not repeat op for op (trn2 1000x384x512 bf16) extrapolated"
      " anyway"),
    M("ex-increments-not-compared", "extrapolate.py",
      "    if not incs or any(inc != incs[-1] for inc in incs[:-1]):",
      "    if not incs:", EX,
      "the equal-increment check weakened: only the last increment is looked at"),
    M("ex-backlog-not-checked", "extrapolate.py",
      '    if any(inc[k] not in (0, inc["latency"]) for k in inc if k.startswith("end_")) or \\\n'
      '            inc["pe_readout_end"] != inc["cycles"]:',
      "    if False:", EX,
      "the equal-increment check weakened: a queue whose backlog grows passes"),
    # -- new mutants written after reading the tests ----------------------------------------
    M("ex-slice-without-ragged-tile", "extrapolate.py",
      "    m_slice = (j - 1) * arch.cols + plan.m_tiles[-1].size",
      "    m_slice = j * arch.cols", EX,
      "the slice made of full tiles only: a ragged last M tile timed as a full one"),
    M("ex-ragged-block-in-increments", "extrapolate.py",
      "    full_cuts = tuple(cuts if full_last else cuts[:j - 1])  # prefixes of the full blocks",
      "    full_cuts = tuple(cuts)", EX,
      "the ragged last block compared as a full one: no ragged product ever extrapolates"),
    M("deps-exact-rows-boundary", "timing/regions.py",
      "    if min(_rows(a)[2], _rows(b)[2]) > EXACT_ROWS:",
      "    if min(_rows(a)[2], _rows(b)[2]) >= EXACT_ROWS:", (NEW, *RULES),
      "regions of exactly EXACT_ROWS rows compared by their flat extents (false waits)"),
    M("deps-rows-touch", "timing/regions.py",
      "        lo = max(0, (x - wb - sb) // pb + 1)",
      "        lo = max(0, (x - wb - sb) // pb)", (NEW, *RULES),
      "rows of different pitch that only touch counted as overlapping (false waits)"),
    M("deps-negative-pitch-row-off", "timing/regions.py",
      "        lo, hi, pitch = lo + (ap.partitions - 1) * pitch, "
      "hi + (ap.partitions - 1) * pitch, \\",
      "        lo, hi, pitch = lo + ap.partitions * pitch, hi + ap.partitions * pitch, \\",
      (NEW, *RULES), "rows stored bottom-up counted from one row too low: the first row is"
      " missed (RAW)"),
    M("deps-fine-coarse-cell-off", "timing/deps.py",
      "                coarse = (bk[0], bk[1], bk[3], bk[4] // FINE)",
      "                coarse = (bk[0], bk[1], bk[3], (bk[4] + 1) // FINE)", (NEW, *RULES, FAST),
      "a narrow region in a coarse cell's last fine bucket filed under the next cell"),
    M("deps-wide-looks-only-wide", "timing/deps.py",
      "            return tuple(self.kinds.get((kind, pitch), ())), _KINDS",
      "            return ((kind, pitch, 0, -1, -1),), _FIXED", (*RULES, NEW, FAST),
      "a wide region looking only at the wide list, not at the narrow regions it covers"),
    M("deps-keys-cache-stale", "timing/deps.py",
      "        if hit is not None and hit[0] == len(self.pitches) and \\\n"
      "                hit[2] == self.versions[hit[1]]:",
      "        if hit is not None and hit[0] == len(self.pitches):", (*RULES, NEW, FAST),
      "a region's bucket lookup kept after new buckets were filed (issue 20 cache)"),
    M("dma-wrap-two-full-bands", "timing/dma.py",
      "    held[(nb - 1) % n_eng] -= per - last",
      "    held[(nb - 1) % n_eng] -= 0 if nb > n_eng else per - last", (*RULES, NEW),
      "found here: an HBM-to-HBM transfer past 128 rows held engine 0 for two full bands"
      " (130 rows: 16, not 8 + 2)"),
    M("dma-first-band-full", "timing/dma.py",
      "    held[0] -= per - first", "    held[0] -= 0", (*RULES, NEW),
      "a partial first band (partitions 3..7) timed as a full one"),
    M("dma-engines-one-short", "timing/dma.py",
      "    count = min(arch.dma_engines, last - first + 1)",
      "    count = min(arch.dma_engines, max(1, last - first))", (*RULES, NEW),
      "a transfer's last band left off its engines"),
    M("dma-loads-on-store-queue", "timing/dma.py",
      "    if s and not d:\n        return 0",
      "    if s and not d:\n        return 1", (NEW, *RULES, *REF),
      "loads and stores placed on one queue: a prefetch waits behind a store (FIFO)"),
    M("dma-curve-flat-below-first-point", "timing/dma.py",
      "        return pts[0][1] * run / pts[0][0]",
      "        return pts[0][1]", (*RULES, NEW),
      "descriptors smaller than the figure's first point at its efficiency (not a constant"
      " time per descriptor)"),
    M("dma-run-of-source-only", "timing/dma.py",
      "    run = max(1, min(run_s, run_d, nbytes))",
      "    run = max(1, min(run_s, nbytes))", (*RULES, NEW, *REF),
      "the descriptor size taken from the source alone (a scattering store at full speed)"),
    M("core-fifo-pays-fixed-again", "timing/core.py",
      "            if fe > t:\n                t, fifo_op = fe, fops[fends.index(fe, e0, e1)]",
      "            if fe + self.fixed > t:\n"
      "                t, fifo_op = fe + self.fixed, fops[fends.index(fe, e0, e1)]",
      (*RULES, NEW, *REF),
      "the fixed cost not overlapped with the previous transfer of the queue"),
    M("core-psum-bank-end-inclusive", "timing/core.py",
      "                                      (hi - 1) // arch.psum_bank_bytes + 1):",
      "                                      hi // arch.psum_bank_bytes + 1):",
      (NEW, *RULES, *REF),
      "an op ending on a PSUM bank boundary also holds the next bank (false waits)"),
    M("core-dma-after-engine-pays-sync", "timing/core.py",
      "    if q >= _DQ:\n        return t.access.get(qd, 0)",
      "    if q >= _DQ:\n        return t.sync + t.access.get(qd, 0)",
      (NEW, *RULES, *REF), "a DMA waiting on a compute engine pays the engines' sync latency"),
    M("core-shared-port-scalar-sbuf", "timing/core.py",
      "            if engine in (Engine.VECTOR, Engine.GPSIMD) and Space.SBUF in spaces:",
      "            if engine in (Engine.VECTOR, Engine.SCALAR) and Space.SBUF in spaces:",
      (NEW, "tests/test_core_timing.py"),
      "NeuronCore-v2: the SBUF port shared by Vector and Scalar instead of Vector and GpSimd"),
    M("costs-memset-half-any-value", "timing/costs.py",
      '    half = ins.value == 0.0 and get_format(ins.dst.dtype).family == "half"',
      '    half = get_format(ins.dst.dtype).family == "half"', (NEW, *RULES, *REF),
      "memset at N/2 for any value in bf16/fp16, not only zero"),
    M("costs-stride-16-bytes-slow", "timing/costs.py",
      "    return num > 1 and abs(step) * ap.itemsize > _FAST_STRIDE_BYTES",
      "    return num > 1 and abs(step) * ap.itemsize >= _FAST_STRIDE_BYTES", (NEW, *REF),
      "a minor stride of exactly 16 bytes taken as slow (the rule is above 16)"),
    # issue 20's shortcuts (tests/test_timing_fast_paths.py holds each to the path it replaced)
    M("deps-pipelined-skips-readers", "timing/deps.py",
      "                order.update(rec.readers)",
      "                if not pipelined:\n                    order.update(rec.readers)",
      (NEW, FAST, *REF),
      "an op of the Tensor queue answered without the readers of what it overwrites (WAR)"),
    M("deps-answers-stale-on-first-writer", "timing/deps.py",
      "                self._changed(w, False, True)",
      "                pass", (FAST, *REF),
      "a kept answer for records with writers not renewed when a record gets its first"),
    M("deps-written-hull-short", "timing/deps.py",
      "                    self.written_hi = max(self.written_hi, hi)",
      "                    self.written_hi = max(self.written_hi, hi - 1)", (FAST,),
      "the hull of written device memory one byte short: a read of a store's last byte "
      "answered without its writer"),
    M("timeline-early-out-before-end", "timing/timeline.py",
      "        if t >= self.end:  # every gap ends by the end",
      "        if t >= self.end - 1:  # every gap ends by the end", (FAST,),
      "a start one tick before a timeline's end answered as free"),
    M("timeline-finds-forgotten-gaps", "timing/timeline.py",
      "            i = bisect_right(his, t, self.base)",
      "            i = bisect_right(his, t)", (FAST,),
      "gaps forgotten past KEEP still found by the search"),
    M("whatif-load-ignores-previous-matmul", "timing/whatif.py",
      "            if ps0 > t0:\n                t0 = ps0\n",
      "", (FAST,),
      "a weight load in the DMA-free what-if not waiting for the previous MatMul's start"),
    M("latency-us-other-rounding", "timing/result.py",
      "        return self.seconds * 1e6\n",
      "        return self.latency * 1e6 / self.tick_hz\n",
      ("tests/test_sweep_fast_path.py",),
      "latency_us rounded otherwise than a sweep's total: the one-product command and the "
      "sweep differ in the last bit"),
)
