"""Hand-made mutation testing: would the tests catch these realistic bugs?

A tool, not a test (issue 13 section 4). Each :class:`Mutant` of :data:`CATALOGUE` names a
file under ``src/systolic``, one exact snippet of it, its replacement, the test files that
should catch the change and what real bug it stands for. The tool copies ``src`` into a
temporary directory once, then for each mutant writes the mutated file into that copy,
runs ``python3 -m pytest -x -q -p no:cacheprovider TESTS`` from the repository root with
``PYTHONPATH`` pointed at the copy (the real tree is never edited), restores the file and
records the outcome:

* ``killed``: a test failed (or the run passed its timeout: a hang is caught too);
* ``survived``: every named test passed, so the tests miss that bug;
* ``equivalent``: not run; the catalogue says why the change cannot alter behaviour;
* ``not found`` / ``ambiguous``: the snippet is not in the file exactly once (the code
  moved since the catalogue was written: refresh the snippet), reported, never a crash.

The kill rate is killed / (killed + survived): equivalent and unfound mutants are left out.
Before the mutants, the union of the named tests runs once on the unmutated copy (skip with
``--no-baseline``): a test that fails there would make every mutant look killed.

    python3 bench/mutants.py                 # every mutant, one at a time
    python3 bench/mutants.py --list          # the catalogue and whether each snippet is found
    python3 bench/mutants.py -m start_adds   # some mutants by name (repeatable)
    python3 bench/mutants.py --jobs 2        # two mutants at a time, each in its own copy
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = "systolic"

# The new tests written to kill the survivors of issue 13 section 4; every mutant runs them.
KILLS = "tests/test_mutant_kills.py"
FUNCTIONAL = ("tests/test_functional.py", "tests/test_int_path.py", KILLS)
COMPILER = ("tests/test_compiler.py", KILLS)
VERIFY = ("tests/test_verify.py", KILLS)
DTYPES = ("tests/test_dtypes.py", KILLS)
BUNDLE = ("tests/test_bundle.py", KILLS)
ISA = ("tests/test_isa.py", KILLS)
MX = ("tests/test_mx.py", "tests/test_mx_matmul.py", KILLS)
TIMING = ("tests/test_timing.py", KILLS)
WORKLOAD = ("tests/test_workload.py", KILLS)


@dataclass(frozen=True)
class Mutant:
    """One realistic bug: ``old`` (exactly once in ``file``) becomes ``new``."""

    name: str
    file: str  # relative to src/systolic
    old: str
    new: str
    tests: tuple[str, ...]
    desc: str
    equivalent: str = ""  # why the change cannot alter behaviour ("" = a real bug)


M = Mutant
# the MatmultMx layout lines between its two dtype bytes
_MX_MIDDLE = ("        Flags(0x2B, rules(gen)),  # the raw accumulate byte, the gen4 rule of the "
              "table\n        GroupByte(\"row_group\", 0x2C),\n        _MX_COL,\n")
CATALOGUE: tuple[Mutant, ...] = (
    # -- the functional simulator (issue 13 section 4, items 1-6) ---------------------------
    M("start_adds", "sim/_base.py",
      "    elif CalcFlags.START in flags:\n        view[...] = res\n    else:\n",
      "    else:\n",
      FUNCTIONAL + COMPILER, "START adds into the PSUM region instead of overwriting it"),
    # the decode cache lives only in the threaded path (the default: workers > 0)
    M("decode_cache_kept", "sim/threaded_caches.py",
      ":meth:`Keys.of`).\"\"\"\n        self.forget(dst)\n",
      ":meth:`Keys.of`).\"\"\"\n",
      FUNCTIONAL, "the decode cache is not cleared after a DmaLoad writes over a tile"),
    M("decode_cache_kept_sbuf_dma", "sim/functional_threaded.py",
      "                        if dst.space is Space.SBUF:\n"
      "                            cache.forget(keys.of(dst))\n",
      "                        if dst.space is Space.SBUF:\n"
      "                            pass\n",
      FUNCTIONAL, "the decode cache is not cleared after a reshaping DmaLoad (one copied in "
      "place, not deferred) writes over a tile"),
    M("decode_cache_partition_only", "sim/threaded_caches.py",
      "                if q0 < p1 and p0 < q1 and a < hi and lo < z:",
      "                if q0 < p1 and p0 < q1 and a == lo:",
      FUNCTIONAL, "a DmaLoad forgets only decoded tiles that start at its first byte"),
    M("pending_flush_partition_only", "sim/threaded_caches.py",
      "and p0 < got[2] and got[3] < hi \\\n                        and lo < got[4]:",
      "and p0 < got[2] and got[3] == lo:",
      FUNCTIONAL, "a read of SBUF lands only the deferred DmaLoads that start at its first "
      "byte (the same bug in the deferred-copy bookkeeping)"),
    M("fp32_lo_unrounded", "sim/products.py",
      "        lo = (w - hi).astype(ml_dtypes.bfloat16).astype(np.float32)",
      "        lo = w - hi",
      FUNCTIONAL, "the fp32 two-pass lo half is latched unrounded (w - hi instead of bf16)"),
    M("fp32_hi_fp16", "sim/products.py",
      "        hi = w.astype(ml_dtypes.bfloat16).astype(np.float32)",
      "        hi = w.astype(np.float16).astype(np.float32)",
      FUNCTIONAL, "the fp32 two-pass hi half rounded to fp16 instead of bf16"),
    M("int48_wrap_removed", "sim/_base.py",
      "view[...] = wrap48(res if CalcFlags.START in flags else view + res)",
      "view[...] = res if CalcFlags.START in flags else view + res",
      FUNCTIONAL, "the functional simulator's integer PSUM never wraps at 48 bits"),
    M("int_zp_sign", "sim/products.py",
      "return x - ins.zp_moving if ins.zp_moving else x",
      "return x + ins.zp_moving if ins.zp_moving else x",
      FUNCTIONAL, "the moving zero point is added instead of subtracted"),
    M("int_zp_swapped", "sim/products.py",
      "return wt - ins.zp_stationary if ins.zp_stationary else wt",
      "return wt - ins.zp_moving if ins.zp_stationary else wt",
      FUNCTIONAL, "the stationary operand is offset by the moving zero point"),
    M("latch_evicts_neighbour", "sim/_base.py",
      "        for key in [k for k in self.tiles if k.overlaps(rect)]:\n",
      "        for key in [k for k in self.tiles if k.row <= rect.row_end\n"
      "                    and rect.row <= k.row_end\n"
      "                    and k.col < rect.col_end and rect.col < k.col_end]:\n",
      FUNCTIONAL + COMPILER, "a load evicts the latched tile on the adjacent array rows"),
    M("systolic_sum_skips_row0", "sim/products.py",
      "        for k in range(w.shape[0]):\n            acc += np.multiply.outer(w[k], x[k])",
      "        for k in range(1, w.shape[0]):\n            acc += np.multiply.outer(w[k], x[k])",
      FUNCTIONAL, "the systolic order drops the first array row's products"),
    # -- the MX executor and quantizer (item 5, MX scale rule) ------------------------------
    M("fp4_nibbles_swapped", "sim/functional_mx.py",
      "np.stack([b & np.uint8(0x0F), b >> np.uint8(4)], axis=1)",
      "np.stack([b >> np.uint8(4), b & np.uint8(0x0F)], axis=1)",
      MX, "the MX executor reads fp4 nibbles high first (both operands alike)"),
    M("mx_scale_bias", "sim/functional_mx.py",
      "return MxOperand(elems, codes - 127, codes == 255)",
      "return MxOperand(elems, codes - 128, codes == 255)",
      MX, "the MX executor's E8M0 bias off by one (every scale halved)"),
    M("mx_pack_nibbles_swapped", "mx/layout.py",
      "nib[..., 0] | nib[..., 1] << 4 | nib[..., 2] << 8 | nib[..., 3] << 12",
      "nib[..., 1] | nib[..., 0] << 4 | nib[..., 3] << 8 | nib[..., 2] << 12",
      MX, "pack_x4 puts fp4 element 2j in the high nibble (and unpack disagrees)"),
    M("mx_scale_binade", "mx/quantize.py",
      "    e = _floor_log2_bits(abits) - np.int32(step)\n",
      "    e = _floor_log2_bits(abits) - np.int32(step) + np.int32(1)\n",
      MX, "the MX scale rule off by one binade (scale twice too large)"),
    M("mx_rule_trainium_is_ocp", "mx/quantize.py",
      'step = emax if rule == "ocp" else emax - 1', "step = emax",
      MX, "the trainium scale rule is the OCP one (no headroom binade)"),
    M("mx_floor_log2", "mx/quantize.py",
      "return np.where(abits == 0, np.int32(-1000), e.astype(np.int32) - 1)",
      "return np.where(abits == 0, np.int32(-1000), e.astype(np.int32))",
      MX, "floor(log2 |a|) one too big: frexp's exponent used as is"),
    # -- dtypes (rounding mode, NaN payloads, overflow) -------------------------------------
    M("bf16_encode_truncates", "dtypes.py",
      "        return x32.astype(f.storage)\n",
      "        if f.name == \"bf16\":  # truncate: keep the top 16 bits\n"
      "            x32 = (x32.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)\n"
      "        return x32.astype(f.storage)\n",
      FUNCTIONAL, "encode truncates to bf16 instead of rounding to nearest even; only the "
      "functional tests run, whose references used the package's round_to"),
    M("tf32_truncates", "dtypes.py",
      "rounded = (bits + np.uint32((1 << (drop - 1)) - 1) + lsb) & keep",
      "rounded = bits & keep",
      DTYPES, "tf32/fp32r rounding truncates instead of round-to-nearest-even"),
    M("tf32_ties_away", "dtypes.py",
      "rounded = (bits + np.uint32((1 << (drop - 1)) - 1) + lsb) & keep",
      "rounded = (bits + np.uint32(1 << (drop - 1))) & keep",
      DTYPES, "tf32/fp32r ties round away from zero instead of to even"),
    M("tf32_nan_payload_rounded", "dtypes.py",
      "out = np.where(special, bits, rounded)", "out = rounded",
      DTYPES, "tf32/fp32r NaN payloads go through the rounding (a low payload becomes inf)"),
    M("tf32_nan_payload_cut", "dtypes.py",
      "out = np.where(special, bits, rounded)", "out = np.where(special, bits & keep, rounded)",
      DTYPES, "tf32/fp32r NaN payloads truncated to 10 bits (a low payload becomes inf)"),
    M("overflow_tie_flipped", "dtypes.py",
      "return float(self.max + ulp / 2), int(self.max / ulp) % 2 == 1",
      "return float(self.max + ulp / 2), int(self.max / ulp) % 2 == 0",
      DTYPES, "the overflow threshold's tie rounds the wrong way (fp8_e4m3fn 464, bf16 max)"),
    M("e8m0_range", "dtypes.py",
      "code = np.where((biased < 0) | (biased > 254), 255, biased)",
      "code = np.where((biased < 0) | (biased > 255), 255, biased)",
      DTYPES + MX, "e8m0_from_exponent lets exponent 128 through as a scale byte",
      equivalent="exponent 128 biases to 255, the NaN byte either way, and 129 and above "
                 "still map to 255"),
    M("e8m0_smallest", "dtypes.py",
      "code = np.where((biased < 0) | (biased > 254), 255, biased)",
      "code = np.where((biased < 1) | (biased > 254), 255, biased)",
      DTYPES + MX, "e8m0_from_exponent makes 2**-127 (byte 0x00) a NaN scale"),
    M("fp4_nan_accepted", "dtypes.py",
      'if f.name == "fp4_e2m1" and np.isnan(x32).any():',
      'if f.name == "fp4_e2m1" and np.isnan(x32).all():',
      DTYPES, "fp4_e2m1 silently turns a NaN into zero unless every value is NaN"),
    # -- the verifier (item 7, issue 13 section 2.4/2.5) ------------------------------------
    M("verify_perf_mismatch", "verify/program.py",
      "if tile.perf_mode != ins.perf_mode:", "if tile.perf_mode.k_fold != ins.perf_mode.k_fold:",
      VERIFY, "the verifier accepts a MatMul whose perf mode differs from its tile's"),
    M("verify_e4m3fn_mix", "verify/program.py",
      'if {mv.dtype, ins.stationary_dtype} == {"fp8_e4m3", "fp8_e4m3fn"}:',
      'if {mv.dtype, ins.stationary_dtype} == {"fp8_e4m3fn"}:',
      VERIFY, "the verifier lets fp8_e4m3fn mix with the legacy fp8_e4m3"),
    M("verify_float_zero_points", "verify/program.py",
      "if not ints.pop() and (ins.zp_moving or ins.zp_stationary):",
      "if not ints.pop() and (ins.zp_moving and ins.zp_stationary):",
      VERIFY, "the verifier accepts a zero point on a float MatMul unless both are set"),
    M("verify_fp32_pass_range", "verify/program.py",
      'if split is not Fp32Pass.FULL and src.dtype != "fp32":',
      'if split is Fp32Pass.LO and src.dtype != "fp32":',
      VERIFY, "the verifier lets a non-fp32 tile latch the fp32 two-pass hi half"),
    M("verify_tile_position", "verify/program.py",
      "        self._position(i, \"rows\", row, rows)\n", "",
      VERIFY, "the verifier accepts a tile whose row start is not a multiple of its class"),
    M("verify_done_region", "verify/program.py",
      '                if state == "done":\n', '                if state == "never":\n',
      VERIFY, "START may overwrite a finished PSUM result that was never read out"),
    M("verify_k_mismatch", "verify/program.py",
      "        if tile.k != k:\n", "        if tile.k < k:\n",
      VERIFY, "a MatMul whose moving K is smaller than the latched tile's verifies",
      equivalent="unreachable: the tile is found by the moving pattern's own partitions, "
                 "perf modes must match and the leading dims must equal the fold, so the "
                 "moving K always equals the tile's"),
    M("verify_acc_dtype", "verify/program.py",
      "        if dst.dtype not in accs:\n",
      "        if dst.dtype not in accs and dst.dtype != \"int48\":\n",
      VERIFY, "a float MatMul may write an int48 PSUM region (integers may write fp32 or "
      "int48 since PSUM is fp32 by default)"),
    M("position_rule_quadrant", "isa/fields.py",
      "    if pos % span:\n", "    if pos % quadrant:\n",
      VERIFY + ISA, "a 64-lane tile may start at lane 32 (its mask misstates its quadrants)"),
    # -- the quadrant rule and the generation table -----------------------------------------
    M("quadrant_half_mask", "isa/fields.py",
      "return TileGroup.Q01 if idx < 2 else TileGroup.Q23",
      "return TileGroup.Q01 if idx < 1 else TileGroup.Q23",
      ISA + COMPILER, "the half mask of a 64-lane tile at lane 32 is 12, not 3"),
    M("quadrant_size_class", "isa/fields.py",
      "    if size <= quadrant:\n        return TileGroup(1 << idx)",
      "    if size < quadrant:\n        return TileGroup(1 << idx)",
      ISA + COMPILER, "a 32-lane tile gets a half mask instead of its quadrant"),
    M("fp32r_col_group_not_forced", "isa/fields.py",
      'FULL_COL_GROUP_FORMATS = frozenset({"fp32r"})', "FULL_COL_GROUP_FORMATS = frozenset()",
      COMPILER + VERIFY, "fp32r's column group is not forced to 15"),
    M("gen3_gate_inclusive", "isa/generation.py",
      "return self.calc_gate_level is None or arch_level <= self.calc_gate_level",
      "return self.calc_gate_level is None or arch_level < self.calc_gate_level",
      BUNDLE + VERIFY, "gen3's calc-byte gate closes at arch level 40 instead of above it"),
    M("gen3_gate_missing", "isa/generation.py",
      "\"the calc field is 3 bits (START 1, STOP 2, ACCUMULATE 4)\", 40,",
      "\"the calc field is 3 bits (START 1, STOP 2, ACCUMULATE 4)\", None,",
      BUNDLE + VERIFY, "gen3 above arch level 40 still writes the calc byte (issue 13 2.2)"),
    M("gen2_writes_accumulate", "isa/generation.py",
      "2: GenerationRules(2, \"CoreV2\", CalcFlags.START | CalcFlags.STOP, frozenset(range(4)),",
      "2: GenerationRules(2, \"CoreV2\", _ALL_BITS, frozenset(range(8)),",
      COMPILER + BUNDLE, "gen2 writes the ACCUMULATE bit gen3 introduced"),
    M("gen4_accepts_5_7", "isa/generation.py",
      "frozenset({0, 1, 2, 3, 4, 6}),", "frozenset(range(8)),",
      VERIFY + BUNDLE, "gen4 accepts calc bytes 5 and 7 that checkAccumulationFlag refuses"),
    M("accumulate_not_on_stop", "isa/generation.py",
      "if not first and self.writes_accumulate(arch_level):",
      "if not first and not last and self.writes_accumulate(arch_level):",
      COMPILER + BUNDLE, "the last MatMul of a group loses its ACCUMULATE bit"),
    M("accumulate_gate_unchecked", "isa/generation.py",
      "if value & CalcFlags.ACCUMULATE and not self.writes_accumulate(arch_level):",
      "if False:",
      VERIFY + BUNDLE, "the verifier accepts ACCUMULATE where the gate omits the byte"),
    # -- the compiler: tiling, the weight-tile cache, fp32 two-pass -------------------------
    M("spans_ragged_short", "compiler/tiling.py",
      "return tuple(Span(i, s, min(size, total - s)) for i, s in enumerate(range(0, total, size)))",
      "return tuple(Span(i, s, min(size, total - s - 1)) for i, s in enumerate("
      "range(0, total, size)))",
      COMPILER, "the ragged last tile is one element short"),
    M("spans_drops_last", "compiler/tiling.py",
      "for i, s in enumerate(range(0, total, size)))",
      "for i, s in enumerate(range(0, total - size + 1, size)))",
      COMPILER, "a ragged last tile is dropped"),
    M("ktile_odd_fits", "compiler/tiling.py",
      "        elif span.size <= arch.rows:  # odd ragged tile that fits unfolded",
      "        elif span.size < arch.rows - 1:  # odd ragged tile that fits unfolded",
      COMPILER, "an odd 127-row DoubleRow ragged K tile is split though it fits unfolded"),
    M("ktile_count_odd", "compiler/tiling.py",
      "return full + (1 if rest % fold == 0 or rest <= arch.rows else 2)",
      "return full + (1 if rest % fold == 0 or rest < arch.rows - 1 else 2)",
      COMPILER, "matmul_count disagrees with tile() for an odd 127-row ragged K tile"),
    M("cache_hit_any_weights", "compiler/codegen.py",
      "if (t.group == group and (t.stationary is stationary or t.stationary == stationary)\n"
      "                    and t.perf_mode is perf_mode",
      "if (t.group == group\n                    and t.perf_mode is perf_mode",
      COMPILER, "the weight-tile cache hits on the same group with other weights"),
    M("cache_hit_any_perf", "compiler/codegen.py",
      "and t.perf_mode is perf_mode and t.rect == rect):",
      "and t.rect == rect):",
      COMPILER, "the weight-tile cache hits across perf modes"),
    M("cache_hit_any_rect", "compiler/codegen.py",
      "and t.perf_mode is perf_mode and t.rect == rect):",
      "and t.perf_mode is perf_mode):",
      COMPILER, "the weight-tile cache hits on the same weights latched on other PEs",
      equivalent="in a Program that verifies, the group and the SBUF pattern fix the PEs: the "
                 "row is the pattern's partition and a tile must start at a multiple of its "
                 "size class, so one group holds one position per tile size"),
    M("cache_writer_ignored", "compiler/codegen.py",
      "        return self if len(kept) == len(self.tiles) else WeightTileState(kept)\n",
      "        return self\n",
      COMPILER, "a DMA over a cached tile's SBUF bytes does not invalidate it"),
    M("fp32_lo_pass_tagged_hi", "compiler/codegen.py",
      "                LoadStationary(stationary, col, rg, cg, perf_mode, Fp32Pass.LO),",
      "                LoadStationary(stationary, col, rg, cg, perf_mode, Fp32Pass.HI),",
      COMPILER + FUNCTIONAL, "the fp32 two-pass second load latches hi again"),
    M("fp32_second_no_accumulate", "compiler/codegen.py",
      "        if writes_accumulate_bit(arch):\n            second |= CalcFlags.ACCUMULATE\n",
      "",
      COMPILER + BUNDLE, "the fp32 two-pass second MatMul lacks ACCUMULATE on gen3"),
    M("psum_bank_span_unchecked", "memory.py",
      "first, last = lo // arch.psum_bank_bytes, (hi - 1) // arch.psum_bank_bytes",
      "first, last = lo // arch.psum_bank_bytes, lo // arch.psum_bank_bytes",
      VERIFY, "an accumulation group may span two PSUM banks (seed 000 GOTCHA)"),
    M("partitions_off_by_one", "memory.py",
      "    if ap.partition + ap.partitions > parts:\n",
      "    if ap.partition + ap.partitions > parts + 1:\n",
      VERIFY, "a pattern may reach one partition past the last"),
    M("bytes_start_only", "memory.py",
      "    if lo < 0 or hi > row_bytes:\n", "    if lo < 0 or lo >= row_bytes:\n",
      VERIFY, "only a pattern's first byte is bounds-checked in SBUF/PSUM"),
    M("zero_points_bool", "api.py",
      "all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value))",
      "all(isinstance(v, (int, np.integer)) for v in value))",
      COMPILER, "zero_points=(True, 0) is taken as (1, 0) instead of refused"),
    M("banks_not_double_buffered", "compiler/schedule.py",
      "base = (chunk_no % 2) * per_chunk if arch.psum_banks >= 2 else 0",
      "base = 0",
      COMPILER + TIMING, "every chunk of groups uses the same PSUM banks (no double buffer)"),
    M("slots_fifo_not_lru", "compiler/codegen.py",
      "            self.held.move_to_end(key)\n", "",
      COMPILER, "the SBUF slot cache evicts the oldest tile, not the least recently used"),
    # -- bundles (item 8): field offsets -----------------------------------------------------
    M("bundle_ls_fp32_pass_offset", "compiler/bundle.py",
      '        EnumByte("fp32_pass", 0x17, Fp32Pass),\n        Perf(0x21),\n        _groups(gen),\n'
      "    ]\n\n\ndef _matmul",
      '        EnumByte("fp32_pass", 0x1F, Fp32Pass),\n        Perf(0x21),\n        _groups(gen),\n'
      "    ]\n\n\ndef _matmul",
      BUNDLE, "LoadStationary's fp32_pass byte moved from +0x17"),
    M("bundle_zp_stationary_offset", "compiler/bundle.py",
      'Int("zp_stationary", 0x1C, 2, signed=True),', 'Int("zp_stationary", 0x22, 2, signed=True),',
      BUNDLE, "MatMul's zp_stationary moved from +0x1C to reserved bytes"),
    M("bundle_mx_column_offset", "compiler/bundle.py",
      'Int("column", 0x28), DtypeByte("fmt", 0x29),',
      'Int("column", 0x2A), DtypeByte("fmt", 0x29),',
      BUNDLE, "LdWeightMx's column byte moved from +0x28"),
    M("bundle_psum_zero_offset", "compiler/bundle.py",
      'Int("psum_zero_region", 0x2F),', 'Int("psum_zero_region", 0x3F),',
      BUNDLE, "MatmultMx's psum_zero_region moved from +0x2F (onto the dst dims)"),
    M("bundle_mx_fmt_bytes_swapped", "compiler/bundle.py",
      '        DtypeByte("fmt", 0x2A),\n' + _MX_MIDDLE
      + '        DtypeByte("stationary_fmt", 0x2E),',
      '        DtypeByte("fmt", 0x2E),\n' + _MX_MIDDLE
      + '        DtypeByte("stationary_fmt", 0x2A),',
      BUNDLE, "MatmultMx's fmt and stationary_fmt bytes swapped (round trip still passes)"),
    M("bundle_active_cols_interleave", "compiler/bundle.py",
      'scale = 2 if values["perf_mode"] == PerfMode.DOUBLE_ROW else 1',
      'scale = 2 if values["perf_mode"].k_fold == 2 else 1',
      BUNDLE, "num_active_cols halved for DoubleRowSwInterleave too (seed: perf == 1 only)"),
    M("sbuf_partition_shift", "isa/fields.py",
      "            return (self.partition << 18) | self.offset",
      "            return (self.partition << 17) | self.offset",
      BUNDLE, "the SBUF start address folds the partition in at bit 17"),
    # -- the timing model ---------------------------------------------------------------------
    M("interval_no_init_latency", "timing/pe.py",
      "return max(column_period(ins, arch) * moving_n(ins), arch.mm_init_latency)",
      "return column_period(ins, arch) * moving_n(ins)",
      TIMING, "the MatMul issue interval is N, not max(N, MM_INIT_LATENCY)"),
    M("readout_no_wait", "timing/tensor_engine.py",
      "            t = ro_free if ro_free > done else done\n",
      "            t = ro_free\n",
      TIMING, "a ReadOut does not wait for the last MatMul of its group"),
    M("readout_waits_all", "timing/tensor_engine.py",
      "done = max((g for other, g in group_end.items() if reg.overlaps(other)),",
      "done = max((g for other, g in group_end.items()),",
      TIMING, "a ReadOut waits for every group, not only the overlapping ones"),
    M("wavefront_off_by_one", "geometry.py",
      "return period * (n - 1) + k + m - 1", "return period * (n - 1) + k + m - 2",
      TIMING, "the wavefront spans one cycle too few"),
    M("regions_touch_overlap", "timing/tensor_engine.py",
      "if end > 0 and dreg.overlaps(other)), default=0)",
      "if end > 0 and dreg.row <= other.row_end and other.row <= dreg.row_end\n"
      "                             and dreg.col <= other.col_end and other.col <= dreg.col_end),\n"
      "                            default=0)",
      TIMING, "touching PSUM regions count as overlapping (false read-out waits)"),
    M("rect_touch_overlap", "geometry.py",
      "        return (self.row < other.row_end and other.row < self.row_end\n"
      "                and self.col < other.col_end and other.col < self.col_end)",
      "        return (self.row <= other.row_end and other.row <= self.row_end\n"
      "                and self.col <= other.col_end and other.col <= self.col_end)",
      VERIFY + COMPILER, "touching rectangles overlap (adjacent PSUM regions clash)"),
    # -- the text form and workloads ---------------------------------------------------------
    M("asm_no_negative_int", "isa/asm.py",
      '_INT = r"-?(?:0x[0-9a-fA-F]+|[0-9]+)"', '_INT = r"(?:0x[0-9a-fA-F]+|[0-9]+)"',
      ISA, "the text form cannot parse a negative integer field"),
    M("asm_no_negative_dim_step", "isa/asm.py",
      r'''_DIM_RE = re.compile(r"\((-?[0-9]+):([0-9]+)\)")''',
      r'''_DIM_RE = re.compile(r"\(([0-9]+):([0-9]+)\)")''',
      ISA, "the text form drops a free dim with a negative step"),
    M("asm_no_negative_partition_step", "isa/asm.py",
      r'r"^(SBUF|PSUM|DRAM)\[([0-9]+):([0-9]+)(?::(-?[0-9]+))?\]',
      r'r"^(SBUF|PSUM|DRAM)\[([0-9]+):([0-9]+)(?::([0-9]+))?\]',
      ISA, "a DRAM pattern with a negative partition step does not round-trip (issue 13 3.6)"),
    M("asm_no_negative_float", "isa/asm.py",
      r'_FLOAT_RE = re.compile(r"^-?(?:', r'_FLOAT_RE = re.compile(r"^(?:',
      ISA, "the text form cannot parse a negative float field"),
    M("workload_line_zero_based", "yaml_source.py",
      "                else node_or_line.start_mark.line + 1)",
      "                else node_or_line.start_mark.line)",
      WORKLOAD, "workload errors name the 0-based line of a YAML node"),
    M("workload_op_line", "workload.py",
      "    line = node.start_mark.line + 1\n    if \"name\" not in fields:",
      "    line = node.start_mark.line\n    if \"name\" not in fields:",
      WORKLOAD, "an op's line (and its errors) is one too small"),
    # -- the register-level simulator (simcore is changing it: refresh after merging) -------
    M("reg_sim_readout_no_wait", "sim/systolic.py",
      "            s = max(ro_free, *done) if done else ro_free\n",
      "            s = ro_free\n",
      ("tests/test_systolic_sim.py", KILLS),
      "the register-level schedule's ReadOut does not wait for its group"),
)


# -- running ---------------------------------------------------------------------------------
@dataclass
class Outcome:
    mutant: Mutant
    status: str  # killed / survived / equivalent / not found / ambiguous / timeout
    seconds: float = 0.0
    detail: str = ""


def _count(m: Mutant, text: str) -> int:
    return text.count(m.old)


def _env(copy: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(copy / "src")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.pop("PYTEST_ADDOPTS", None)
    return env


def _make_copy() -> Path:
    tmp = Path(tempfile.mkdtemp(prefix="systolic-mutants-"))
    shutil.copytree(ROOT / "src", tmp / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
    return tmp


def _check_import(copy: Path) -> None:
    out = subprocess.run([sys.executable, "-c", f"import {PKG}; print({PKG}.__file__)"],
                         env=_env(copy), cwd=ROOT, capture_output=True, text=True, check=True)
    where = Path(out.stdout.strip()).resolve()
    if copy.resolve() not in where.parents:
        raise SystemExit(f"the tests would import {where}, not the copy under {copy}: is "
                         f"{PKG} installed non-editable ahead of PYTHONPATH?")


def _ordered(tests: Iterable[str], kills: bool = True) -> list[str]:
    """The test files once each, the kill tests first (they are fast and aimed: with -x a
    killed mutant stops there); ``kills=False`` drops them (the suite as it was)."""
    seen = dict.fromkeys(t for t in tests if t != KILLS)
    return ([KILLS] if kills and KILLS in tests else []) + list(seen)


def _pytest(copy: Path, tests: Iterable[str], timeout: float) -> tuple[str, str]:
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    try:
        proc = subprocess.run(cmd, env=_env(copy), cwd=ROOT, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", f"no result in {timeout:g} s"
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    failed = next((ln for ln in lines if ln.startswith(("FAILED", "ERROR"))), "")
    tail = lines[-1] if lines else ""
    if proc.returncode == 0:
        return "passed", tail
    return "failed", failed or tail


def run_mutant(m: Mutant, copy: Path, timeout: float, kills: bool = True) -> Outcome:
    if m.equivalent:
        return Outcome(m, "equivalent", detail=m.equivalent)
    path = copy / "src" / PKG / m.file
    if not path.exists():
        return Outcome(m, "not found", detail=f"no file src/{PKG}/{m.file}")
    original = path.read_text()
    n = _count(m, original)
    if n != 1:
        status = "not found" if n == 0 else "ambiguous"
        return Outcome(m, status, detail=f"snippet occurs {n} times in src/{PKG}/{m.file}: "
                                         f"refresh it")
    t0 = time.perf_counter()
    path.write_text(original.replace(m.old, m.new))
    try:
        result, detail = _pytest(copy, _ordered(m.tests, kills), timeout)
    finally:
        path.write_text(original)
    status = {"passed": "survived", "failed": "killed", "timeout": "timeout"}[result]
    return Outcome(m, status, time.perf_counter() - t0, detail)


# Catalogues written with the tests of later issues (19-22), one module per layer, each a
# ``MUTANTS`` tuple of the same records; loaded when the tool runs.
EXTRA = ("mutants_sweep", "mutants_cli", "mutants_nki_breadth", "mutants_timing", "mutants_nki",
         "mutants_extrapolate", "mutants_speed")


def catalogue() -> list[Mutant]:
    """:data:`CATALOGUE` and every :data:`EXTRA` module's ``MUTANTS`` that exists."""
    import importlib.util

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    out = list(CATALOGUE)
    for name in EXTRA:
        if importlib.util.find_spec(name) is not None:
            out.extend(importlib.import_module(name).MUTANTS)
    return out


def _select(names: list[str]) -> list[Mutant]:
    every = catalogue()
    if not names:
        return every
    by_name = {m.name: m for m in every}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise SystemExit(f"unknown mutant(s) {', '.join(unknown)}; see --list")
    return [by_name[n] for n in names]


def _print_list(mutants: list[Mutant]) -> None:
    for m in mutants:
        path = ROOT / "src" / PKG / m.file
        n = _count(m, path.read_text()) if path.exists() else 0
        found = "ok" if n == 1 else ("NOT FOUND" if n == 0 else f"AMBIGUOUS x{n}")
        eq = f"  [equivalent: {m.equivalent}]" if m.equivalent else ""
        print(f"{m.name:34} {m.file:26} {found:10} {m.desc}{eq}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-m", "--mutant", action="append", default=[], help="run only this one")
    p.add_argument("--list", action="store_true", help="list the catalogue and exit")
    p.add_argument("--timeout", type=float, default=240.0, help="seconds per mutant")
    p.add_argument("--jobs", type=int, default=1, help="mutants run at a time")
    p.add_argument("--without-kills", action="store_true",
                   help=f"leave out {KILLS} (the kill rate of the suite without it)")
    p.add_argument("--no-baseline", action="store_true",
                   help="skip the run of the tests on the unmutated copy")
    args = p.parse_args(argv)
    mutants = _select(args.mutant)
    # a SIGTERM unwinds like Ctrl-C, so the temporary copies are removed
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.list:
        _print_list(mutants)
        return 0
    copies = [_make_copy() for _ in range(max(1, args.jobs))]
    try:
        _check_import(copies[0])
        if not args.no_baseline:
            tests = _ordered([t for m in mutants if not m.equivalent for t in m.tests],
                             not args.without_kills)
            status, detail = _pytest(copies[0], tests, 10 * args.timeout)
            if status != "passed":
                print(f"baseline: the unmutated tests do not pass ({detail}); fix that first")
                return 1
            print(f"baseline: {len(tests)} test files pass on the unmutated copy")
        outcomes = _run_all(mutants, copies, args.timeout, not args.without_kills)
    finally:
        for c in copies:
            shutil.rmtree(c, ignore_errors=True)
    return _report(outcomes)


def _run_all(mutants: list[Mutant], copies: list[Path], timeout: float,
             kills: bool) -> list[Outcome]:
    free = list(copies)
    outcomes: list[Outcome] = []

    def one(m: Mutant) -> Outcome:
        copy = free.pop()
        try:
            return run_mutant(m, copy, timeout, kills)
        finally:
            free.append(copy)

    with ThreadPoolExecutor(max_workers=len(copies)) as pool:
        for o in pool.map(one, mutants):
            extra = f" ({o.detail})" if o.detail else ""
            print(f"{o.status:10} {o.seconds:6.1f}s  {o.mutant.name}: {o.mutant.desc}{extra}",
                  flush=True)
            outcomes.append(o)
    return outcomes


def _report(outcomes: list[Outcome]) -> int:
    killed = [o for o in outcomes if o.status in ("killed", "timeout")]
    survived = [o for o in outcomes if o.status == "survived"]
    skipped = [o for o in outcomes if o.status in ("not found", "ambiguous")]
    equivalent = [o for o in outcomes if o.status == "equivalent"]
    live = len(killed) + len(survived)
    rate = 100.0 * len(killed) / live if live else 100.0
    print(f"\n{len(outcomes)} mutants: {len(killed)} killed, {len(survived)} survived, "
          f"{len(equivalent)} equivalent, {len(skipped)} snippet not found")
    print(f"kill rate: {len(killed)}/{live} = {rate:.1f}% of the non-equivalent mutants run")
    for o in survived:
        print(f"  survived: {o.mutant.name} ({o.mutant.file}): {o.mutant.desc}")
    for o in skipped:
        print(f"  {o.status}: {o.mutant.name} ({o.mutant.file}): {o.detail}")
    return 0 if not survived else 3


if __name__ == "__main__":
    sys.exit(main())
