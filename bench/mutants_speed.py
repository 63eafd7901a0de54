"""Mutants for the functional simulator's and the compiler's speed work (issue 20): one per
shortcut that must keep the reference loop's bits, and one for the verification
systolic.matmul no longer repeats.

Written as bench/mutants.py's CATALOGUE entries; ``file`` is relative to src/systolic."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutants import Mutant

M = Mutant
FAST = ("tests/test_functional_fast.py",)
COMPILER = ("tests/test_compiler.py",)
SWEEP = ("tests/test_sweep_kernel.py",)
MUTANTS: tuple[Mutant, ...] = (
    M("stationary_landing_skips_sbuf", "sim/threaded_caches.py",
      "            return None\n        return np.ascontiguousarray(self.state.view(got[0].src)",
      "            return None\n        self.loads.pop(self.keys.of(ap)[0])\n"
      "        return np.ascontiguousarray(self.state.view(got[0].src)",
      FAST, "a LoadStationary latches from its deferred load but the SBUF copy never lands"),
    M("rows_meet_off_by_one", "sim/_base.py",
      "    first = lo // step + 1  # the least t with t * step > lo",
      "    first = lo // step  # the least t with t * step > lo",
      FAST, "two device-memory patterns of one row stride that only touch end to end are "
            "taken to share a row (a ReadOut waits for a neighbour it does not overlap)"),
    M("stationary_landing_no_two_pass", "sim/functional_threaded.py",
      "    if ls.fp32_pass is not Fp32Pass.FULL:\n        hi, lo = split_fp32(wt)",
      "    if False:\n        hi, lo = split_fp32(wt)",
      FAST, "fp32 weights latched from a deferred load are not split into bf16 halves"),
    M("direct_psum_add_overwrites", "sim/functional_threaded.py",
      "        np.add(view, buf, out=view)",
      "        np.copyto(view, buf)",
      FAST, "an accumulating product through the worker's buffer replaces PSUM instead of "
            "adding"),
    M("direct_psum_any_layout", "sim/functional_threaded.py",
      "    if not (direct and order == \"fast\" and view.shape == shape",
      "    if not (order == \"fast\" and view.ndim == 3 and view.shape[0] == shape[0]",
      FAST, "a PSUM region of two free dims takes the direct path (a reshaped write into a "
            "copy, lost)"),
    M("surely_in_range_takes_the_edge", "dtypes.py",
      "    return float(np.maximum(x32.max(), -x32.min())) < f.overflow_bound[0]",
      "    return float(np.maximum(x32.max(), -x32.min())) <= f.overflow_bound[0]",
      ("tests/test_dtypes.py",), "a value exactly at the overflow bound (which rounds out of "
                                 "range) takes the in-place cast and is written as inf"),
    M("encode_into_takes_tf32", "dtypes.py",
      "    if f.name in _CONTAINED or out.dtype != f.storage",
      "    if out.dtype != f.storage",
      ("tests/test_write_dram.py",), "tf32 and fp32r, rounded on their bits, are copied "
                                     "unrounded into device memory"),
    M("second_operands_error_first", "api.py",
      "    try:\n        sim.write_dram(a_offset, a, dtype)\n    finally:\n        other.join()"
      "\n    if failed:\n        raise failed[0]",
      "    other.join()\n    if failed:\n        raise failed[0]\n"
      "    sim.write_dram(a_offset, a, dtype)",
      ("tests/test_write_dram.py",), "with both operands bad, b's error (written on the second "
                                     "thread) is raised, not a's as one after the other"),
    M("sbuf_flag_not_passed", "sim/functional.py",
      "                         sbuf=sbuf)",
      "                         sbuf=True)",
      FAST, "run(sbuf=False) still lands every deferred SBUF copy (the flag is lost)"),
    M("kept_simulator_taken_while_zeroing", "api.py",
      "    if zeroing is not None:\n        zeroing.join()",
      "    if zeroing is not None and not zeroing:\n        zeroing.join()",
      FAST, "a call takes the kept simulator while its memories are still being zeroed: "
            "the memset lands on the new operands"),
    M("blas_count_given_back_by_any_run", "sim/blas.py",
      "            if not _held[0]:  # the last run out: the count the first found",
      "            if True:  # the last run out: the count the first found",
      FAST, "a run that ends gives BLAS its threads back while another run still holds it "
            "on another thread (that run's later GEMMs take the library's other kernel)"),
    M("codegen_never_stops_a_group", "compiler/codegen.py",
      "got = _FLAGS[key] = rules(arch.generation).calc_flags(first, last, arch.arch_level)",
      "got = _FLAGS[key] = rules(arch.generation).calc_flags(first, False, arch.arch_level)",
      COMPILER, "no MatMul closes its group (values unchanged, the Program invalid): "
                "systolic.matmul no longer verifies, the compiler's test must"),
    M("kernel_kept_across_edits", "sweep/evaluate.py",
      "    fn = _kernel_function(target.path, target.function, target.digest)",
      '    fn = _kernel_function(target.path, target.function, "")',
      SWEEP, "the kernel function loaded once per process is kept after its file is edited: "
             "the new version's points record the old kernel"),
)
