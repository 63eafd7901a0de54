"""Mutants for the NKI front end's correctness and bad-input fixes (issues 21 and 22), in
bench/mutants.py's CATALOGUE form. Run: python3 bench/mutants.py -m NAME from the
repository root (each mutant applied to a copy of src, its tests run, the copy restored)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutants import Mutant  # noqa: E402

M = Mutant
ERR = ("tests/test_nki_errors.py",)
FUZZ = ("tests/test_nki_fuzz.py",)
NKI = ("tests/test_nki.py",)
MUTANTS: tuple[Mutant, ...] = (
    # -- issue 21 survivors --------------------------------------------------------------
    M("nki_sbuf_round_down", "nki/alloc.py",
      "got = self.sbuf.take(t.id, -(-nbytes // SBUF_ALIGN))",
      "got = self.sbuf.take(t.id, max(1, nbytes // SBUF_ALIGN))",
      ERR, "SBUF sizes rounded down to 64-byte granules: a [128, 50] bf16 tile overlaps its "
      "neighbour"),
    M("nki_any_memset_zeroes_psum", "nki/build.py",
      'if isinstance(op.args, MemsetArgs) and op.args.value == 0.0:',
      'if isinstance(op.args, MemsetArgs):',
      ERR, "any memset counted as zeroing PSUM: memset(1.0) + accumulate gives a.T @ b"),
    M("nki_rect_one_short", "nki/build.py",
      "    return (p0, p0 + np_, lo, hi + 1)",
      "    return (p0, p0 + np_, lo, hi)",
      ERR, "a view's footprint one element short: a valid N = 1 mat-vec is refused"),
    M("nki_verify_line_off_by_one", "nki/build.py",
      "path, line = lines[exc.index]",
      "path, line = lines[max(exc.index - 1, 0)]",
      ERR, "a verifier error names the kernel line of the instruction before"),
    M("nki_memset_fp16", "sim/functional_engines.py",
      "np.full(ins.dst.shape, ins.value, dtype=np.float32)",
      "np.full(ins.dst.shape, ins.value, dtype=np.float16)",
      ERR, "memset values passed through fp16: 0.1 -> 0.099975586, 1e5 -> inf in fp32"),
    # -- issue 21 defects ----------------------------------------------------------------
    M("nki_hbm_ap_unchecked", "nki/tensor.py",
      "    _in_bounds(int(offset), pairs, t.free_elems,\n",
      "    0 and _in_bounds(int(offset), pairs, t.free_elems,\n",
      ERR, "an HBM access pattern past its tensor reads the next tensor's bytes (defect 2)"),
    M("nki_chip_ap_unchecked", "nki/tensor.py",
      "        _in_bounds(off, rest, t.free_elems,",
      "        0 and _in_bounds(off, rest, t.free_elems,",
      ERR, "an on-chip access pattern past its tile reads its neighbour (defect 2)"),
    M("nki_ap_bound_off_by_one", "nki/tensor.py",
      "    if lo < 0 or hi >= size:",
      "    if lo < 0 or hi > size:",
      ERR, "an access pattern one element past its tensor accepted"),
    M("nki_memset_acc_old_wording", "nki/build.py",
      '"this model\'s PSUM cannot extend" if last is None else',
      '"this model\'s PSUM cannot extend" if last is not _NONE else',
      ERR, "after memset(1.0) then accumulate=True the error says the accumulation "
      "'already finished (it was read)' (defect 5)"),
    # -- issue 22 ------------------------------------------------------------------------
    M("nki_memset_overflow_unchecked", "nki/types.py",
      '    if f is not None and f.kind in ("float", "int"):',
      '    if f is not None and f.kind in ("int",):',
      ERR, "memset(1000.0) into fp8_e4m3 or 1e39 into bf16 writes inf (W3)"),
    M("nki_op_budget_off", "nki/record.py",
      "        if len(self.ops) >= self.max_ops:",
      "        if False:",
      ERR, "no op budget: tiled_matmul at bf16[65536, 65536] records for hours (H4)"),
    M("nki_tensor_budget_off", "nki/record.py",
      "        if len(self.tensors) >= self.max_ops:",
      "        if False:",
      ERR, "no tensor budget: a loop making tiles grows without bound (H4)"),
    M("nki_time_guard_off", "nki/run.py",
      "        with time_guard(time_limit_s):",
      "        with time_guard(None):",
      ERR, "no time limit: while True: pass in a kernel hangs (H4)"),
    M("nki_kernel_line_from_library", "nki/run.py",
      "        if not outside(f.filename):",
      "        if not f.filename.startswith(_record._PKG_DIR):",
      ERR, "an error is named at enum.py's or systolic/isa's line, not the kernel's"),
    M("nki_matmul_need_dropped", "nki/matmul_isa.py",
      '        need(vals, names, "nc_matmul", where)\n        pos = ',
      '        pos = ',
      ERR, "nc_matmul without moving: KeyError 'moving'"),
    M("nki_memset_need_dropped", "nki/isa.py",
      '    need(vals, ("dst", "value"), "memset", where)\n',
      '',
      ERR, "memset without value: KeyError 'value'"),
    M("nki_tt_need_dropped", "nki/isa.py",
      '        need(vals, names, "tensor_tensor", where)\n        _tt_op(vals["op"], where)\n'
      '        with applying(',
      '        with applying(',
      ERR, "tensor_tensor without op: KeyError 'op'"),
    M("nki_perf_mode_unchecked", "nki/matmul_isa.py",
      "        perf = _perf_mode(kw.pop(\"perf_mode\", None), where)\n        acc = ",
      "        perf = kw.pop(\"perf_mode\", None)\n        acc = ",
      ERR, "perf_mode=128: ValueError from enum.py"),
    M("nki_tile_position_unchecked", "nki/matmul_isa.py",
      '        pos = _pair(kw.pop("tile_position", ()), "tile_position", where)',
      '        pos = kw.pop("tile_position", ())',
      ERR, "tile_position=True: TypeError bool has no len()"),
    M("nki_slice_step_zero", "nki/tensor.py",
      "                        or (kp is not None and kp < 1)):  # plain ints pass at once",
      "                        or (kp is not None and kp < 0)):  # plain ints pass at once",
      ERR, "a[0:128:0]: ValueError slice step cannot be zero"),
    M("nki_mgrid_unchecked", "nki/index.py",
      "            if not isinstance(s, slice) or not whole(s.stop) or not all(",
      "            if not isinstance(s, slice) or not all(",
      ERR, "nl.mgrid[0:128, 0:]: TypeError NoneType - int"),
    M("nki_mgrid_step_zero", "nki/index.py",
      "            if (s.step is not None and s.step < 1) or len(range(s.start or 0, s.stop)) < 1:",
      "            if len(range(s.start or 0, s.stop, s.step or 1)) < 1:",
      ERR, "nl.mgrid[0:128:0, ...]: ValueError range() arg 3 must not be zero (found by the "
      "fuzzer)"),
    M("nki_unwritten_read_unchecked", "nki/build.py",
      "                else:\n                    made = \"an argument\" if t.is_input",
      "                if False:\n                    made = \"an argument\" if t.is_input",
      ERR + FUZZ, "a store of a tile nothing wrote (an older-API result never assigned) "
      "exits 0 with NaN output (W2, found by the fuzzer)"),
    M("nki_execute_fill_ignored", "nki/run.py",
      "        buf.fill(fill)  # 0xFF",
      "        buf.fill(0xFF)  # 0xFF",
      FUZZ, "execute ignores fill: the fuzzer's two-fill oracle cannot see a read of "
      "unwritten memory"),
    # -- issue 19, stop 32: the compiler's allocation ------------------------------------
    M("nki_mod_alloc_no_modulo", "nki/compiler.py",
      "            lin = lin * n + i % n",
      "            lin = lin * n + i",
      NKI, "mod_alloc's logical tiles each get their own place: blocks 0 and 2 of "
      "num_free_tiles=(2,) no longer share a tile"),
    M("nki_iadd_finished_refused", "nki/build.py",
      "if not (op.args.iadd and (last is _NONE or last is None)):",
      "if not (op.args.iadd and last is _NONE):",
      NKI, "psum += nc_matmul onto a finished, read group refused (the allocated attention "
      "kernels stop)"),
    M("nki_iadd_onto_vector_writes", "nki/build.py",
      "if not (op.args.iadd and (last is _NONE or last is None)):",
      "if not op.args.iadd:",
      NKI, "psum += nc_matmul onto values a memset wrote silently starts a new group"),
    M("nki_psum_blocks_never_split", "nki/blocks.py",
      "                and prod(t.shape[:t.pdim]) > 1):",
      "                and prod(t.shape[:t.pdim]) > 1 << 30):",
      NKI, "an automatic PSUM tensor of many one-bank blocks is placed whole: 'PSUM is full'"),
    M("nki_direct_loop_new_tensor", "nki/direct.py",
      "    if key is not None and key in rec.direct:",
      "    if False:",
      NKI, "a directly allocated declaration in a loop body is a new tensor (and a new "
      "address) every iteration: the address counter runs past SBUF"),
    M("nki_recorder_stack_shared", "nki/record.py",
      "class ThreadStack(threading.local, Generic[_T]):",
      "class ThreadStack(Generic[_T]):",
      ("tests/test_nki_api.py",), "one recorder stack for the process: two threads running "
      "kernels at once record into each other's kernel"),
)
