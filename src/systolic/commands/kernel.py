"""``systolic kernel FILE.py:FUNCTION``: record an NKI kernel, time it on the whole
NeuronCore, show its Program, its values."""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..collector import paused
from ..errors import KernelError, SystolicError
from ..nki.alloc import DEFAULT_BUFFERS
from ..nki.record import DEFAULT_MAX_OPS, DEFAULT_TIME_LIMIT_S
from ..timing.core import SCHEDULES
from .common import (
    MAX_PLOT_PX,
    PLOT_WIDTH,
    add_arch,
    add_json,
    add_progress,
    bounded_int,
    check_plot_size,
    file_size,
    output_path,
    plot_path,
    positive_int,
    positive_seconds,
    seed,
    stage,
    wrote,
)

HELP = """\
Run an NKI kernel file unmodified on the model and time it on the whole NeuronCore (every
engine, DMA queue and HBM: latency, TFLOP/s, what bounds it). --arg gives the kernel's
tensor arguments in order (shapes only: no values are computed unless --values); --param
passes keyword meta-parameters (ints, floats, or strings). --trace writes a Perfetto
profile (gzip-compressed when named .gz) and --timeline a PNG/SVG with one row per engine
and DMA queue. --json prints the whole core's view under "core" and the Tensor Engine's
alone (the kernel's PE instructions with their operands on chip, seed 003) under "pe", as
systolic matmul (docs/json.md); the flat keys beside them are schema 1's, kept for one
release.

The kernel file is Python, run with your privileges, as nki.simulate runs it: run only
files you trust. Output paths are written through symlinks (the link's target is replaced).
Its recording is bounded: --max-ops NKI operations (and tensors) and --time-limit seconds of
its Python; past either it stops with one line naming the kernel line it had reached.

examples:
  systolic kernel examples/kernels/tiled_matmul.py:tiled_matmul --arch trn2 \\
      --arg lhsT=bf16[512,256] --arg rhs=bf16[512,1024] --values
  systolic kernel examples/kernels/blocked_matmul.py:blocked_matmul --arch trn2 \\
      --arg lhsT=bf16[2048,2048] --arg rhs=bf16[2048,2048] --param TILES_N=2 --json
  systolic kernel examples/kernels/tiled_matmul.py:tiled_matmul \\
      --arg lhsT=bf16[2048,2048] --arg rhs=bf16[2048,2048] --timeline tiled.png
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("kernel", help="run an NKI kernel file: its Program, counts, "
                                      "whole-core time, values",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", metavar="FILE.py:FUNCTION")
    add_arch(p, "arch preset (default trn2)")
    p.add_argument("--arg", action="append", default=[], metavar="NAME=DTYPE[D0,D1,...]",
                   help="a tensor argument, in order")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="a keyword meta-parameter")
    p.add_argument("--values", action="store_true",
                   help="fill the inputs with seeded random data and run the functional "
                        "simulator")
    p.add_argument("--seed", type=seed, default=0, help="seed of --values (default 0)")
    p.add_argument("--program", action="store_true",
                   help="print the Program text, as the compiler stage allocated it")
    p.add_argument("--buffers", type=positive_int, default=DEFAULT_BUFFERS, metavar="N",
                   help="physical buffers per tile made in an affine_range body (the "
                        f"compiler's rotation; default {DEFAULT_BUFFERS}; 1 turns it off)")
    p.add_argument("--max-ops", type=positive_int, default=DEFAULT_MAX_OPS, metavar="N",
                   help=f"the recording budget: the most NKI operations (and tensors) the "
                        f"kernel may make ({DEFAULT_MAX_OPS:,}: the largest public kernels "
                        f"fit three times over)")
    p.add_argument("--time-limit", type=positive_seconds, default=DEFAULT_TIME_LIMIT_S, metavar="S",
                   help=f"the most seconds the kernel's Python may run while it is recorded "
                        f"({DEFAULT_TIME_LIMIT_S:g})")
    p.add_argument("--schedule", choices=SCHEDULES, default="list",
                   help="list: engines issue ready instructions ahead of blocked ones, as "
                        "the Neuron compiler schedules (default); program-order: each "
                        "queue in program order")
    p.add_argument("--trace", metavar="FILE.json", type=output_path("trace"),
                   help="write a Chrome/Perfetto trace: one row per engine and DMA queue")
    p.add_argument("--timeline", metavar="FILE.png", type=plot_path,
                   help="plot the whole-core timeline: one row per engine and DMA queue")
    p.add_argument("--width", type=bounded_int(MAX_PLOT_PX, "the largest plot side"),
                   metavar="PX",
                   help=f"--timeline width in pixels ({PLOT_WIDTH}; the height follows the "
                        f"rows)")
    add_progress(p)
    add_json(p)
    p.set_defaults(run=run)


# nki/record.py and nki/run.py name the budget by its Python keywords; on the command line
# the options set it
_BUDGET_WORDS = {"max_ops": "--max-ops", "time_limit_s": "--time-limit"}


def _record(kernel: Any, specs: list[Any], params: dict[str, Any], arch: Any,
            args: argparse.Namespace) -> Any:
    """Record under the budget of --max-ops / --time-limit; a kernel past it is the front
    end's one line at the kernel line reached, naming the option that raises it."""
    from ..nki.run import record

    try:
        return record(kernel, specs, params, arch=arch, buffers=args.buffers,
                      max_ops=args.max_ops, time_limit_s=args.time_limit)
    except KernelError as exc:
        if "recording budget" not in exc.message and "time limit" not in exc.message:
            raise
        message = re.sub(r"\b(max_ops|time_limit_s)\b", lambda m: _BUDGET_WORDS[m[1]],
                         exc.message)
        raise KernelError(exc.path, exc.line, message) from None


def _dtype_case(text: str) -> str:
    """``BF16[128,512]`` is ``bf16[128,512]``: format names are case-insensitive on the
    command line, as --dtype and --arch are (every NKI and project dtype name is lower
    case)."""
    name, bracket, dims = text.partition("[")
    return name.lower() + bracket + dims


def _value(text: str) -> Any:
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def _split(text: str, what: str) -> tuple[str, str]:
    name, sep, rest = text.partition("=")
    if not sep or not name or not rest:
        raise SystolicError(f"{what} {text!r} is not NAME=VALUE")
    return name.strip(), rest.strip()


def _bind(kernel: Any, func: str, named: list[tuple[str, Any]], params: dict[str, Any]
          ) -> list[Any]:
    """The --arg tensors in the kernel's parameter order, checked against its signature
    (issue 22: a missing, extra or repeated --arg, or an unknown --param, is one line)."""
    import inspect

    from ..nki.run import kernel_function

    sig = inspect.signature(kernel_function(kernel))
    names = list(sig.parameters)
    seen: dict[str, Any] = {}
    for name, spec in named:
        if name in seen:
            raise SystolicError(f"--arg {name} is given twice")
        if name not in sig.parameters:
            raise SystolicError(f"--arg {name}: {func} has no parameter {name!r} (it takes "
                                f"{', '.join(names) or 'none'})")
        seen[name] = spec
    for name in params:
        if name in seen:
            raise SystolicError(f"{name} is given both as --arg and as --param")
        if name not in sig.parameters and not any(
                q.kind is inspect.Parameter.VAR_KEYWORD for q in sig.parameters.values()):
            raise SystolicError(f"--param {name}: {func} has no parameter {name!r} (it takes "
                                f"{', '.join(names) or 'none'})")
    tensors = [n for n in names if n not in params and
               sig.parameters[n].default is inspect.Parameter.empty]
    missing = [n for n in tensors if n not in seen]
    if missing:
        raise SystolicError(f"{func} needs --arg {missing[0]}=DTYPE[D0,D1,...] (its tensor "
                            f"parameters: {', '.join(tensors)})")
    order = [n for n in names if n in seen]  # passed positionally, in signature order
    if any(n not in seen for n in names[:len(order)]):
        gap = next(n for n in names[:len(order)] if n not in seen)
        raise SystolicError(f"--arg {order[-1]} comes after {func}'s parameter {gap!r}, "
                            f"which has no --arg; give it one, or pass it with --param")
    return [seen[n] for n in order]


def _refuse_unwritten(rec: Any, func: str) -> None:
    """A kernel that leaves part of an output unwritten is refused, as the sweep does."""
    from ..nki.run import unwritten

    why = unwritten(rec)
    if why:
        raise SystolicError(f"{func} {why}")


def _refuse_unwritten_reads(outs: Sequence[Any], again: Any, func: str) -> None:
    """The values are computed twice, memory nothing wrote starting as 0xFF bytes (NaN) and
    as 0x00; outputs that differ read such memory (issue 22, found by tests/test_nki_fuzz.py:
    fp8_double_row loading one of its two DoubleRow slots exited 0 with values made of
    whatever SBUF held). Refused, as an output left unwritten is."""
    other = again if isinstance(again, tuple | list) else [again]
    for i, (a, b) in enumerate(zip(outs, other, strict=True)):
        # bit for bit: a NaN the kernel computes is the same NaN both times
        if isinstance(a, np.ndarray) and a.tobytes() != np.asarray(b).tobytes():
            raise SystolicError(f"{func}'s output #{i + 1} depends on memory nothing wrote "
                                f"(its values change with what SBUF or PSUM held before); "
                                f"does it read a tile, or part of one, it never loaded?")


def random_inputs(specs: list[Any], seed: int) -> list[np.ndarray]:
    """Seeded standard-normal inputs rounded to each argument's dtype."""
    from ..dtypes import FORMATS, decode, encode

    rng = np.random.default_rng(seed)
    out = []
    for s in specs:
        fmt = s.dtype.fmt
        if fmt not in FORMATS:  # raw words (MX x4 containers): finite fp8 bytes 0x00..0x7E
            raw = rng.integers(0, 0x7F, size=(*s.shape, s.dtype.itemsize), dtype=np.uint8)
            out.append(raw.view(s.dtype.np_dtype).reshape(s.shape))
            continue
        if fmt == "uint8":  # read as E8M0 scales by MX kernels: 2^-7 .. 2^7
            x = rng.integers(120, 135, size=s.shape).astype(np.float32)
        elif FORMATS[fmt].is_int:
            x = rng.integers(-8, 8, size=s.shape).astype(np.float32)
        else:
            x = rng.standard_normal(s.shape).astype(np.float32)
        raw = encode(x, fmt)
        out.append(raw if s.dtype.np_dtype is None else decode(raw, fmt).astype(s.dtype.np_dtype))
    return out


def pe_alone(rec: Any) -> Any:
    """The Tensor Engine alone of a recorded kernel (seed 003's view, as ``systolic matmul``
    gives it): its PE instructions in program order, operands on chip, or None when it has
    none."""
    from ..isa import Group, Program
    from ..views.report import build_report

    pe = Program(i for i in rec.program if isinstance(i, Group.PE))
    return build_report(pe, rec.arch) if len(pe) else None


def run(args: argparse.Namespace) -> int:
    """The command, with the garbage collector off throughout. Each stage (recording,
    timing, what-ifs) turns it off for itself, but between them it came back on, and its
    first collection then traversed every object the stage had made (a generation-0
    collection of ~1 M objects after the recording: 0.10 s; 0.16 s CPU of collections in
    all for the full-size tiled kernel, freeing nothing: the recording holds no reference
    cycle, nki/tensor.py Tensor.full). Peak memory is the same either way (docs/
    PERFORMANCE.md, issue 20's NKI row); restored after, for a caller running commands in
    process (the tests)."""
    with paused():
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from ..arch import get_arch
    from ..nki.run import execute, load_kernel, parse_arg, set_default_arch
    from ..nki.timing import longest_core, time_cores, timing_fields
    from ..schema import views

    check_plot_size(args, "--timeline", args.timeline is not None)
    path, sep, func = args.target.rpartition(":")
    if not sep or not path or not func:
        raise SystolicError(f"{args.target!r} is not FILE.py:FUNCTION")
    arch = get_arch(args.arch)
    set_default_arch(arch.name)
    named = [_split(a, "--arg") for a in args.arg]
    params = dict((k, _value(v)) for k, v in (_split(p, "--param") for p in args.param))
    kernel = load_kernel(path, func)
    specs = _bind(kernel, func, [(n, parse_arg(_dtype_case(v))) for n, v in named], params)
    with stage(f"recording {func}", args):
        rec = _record(kernel, specs, params, arch, args)
    _refuse_unwritten(rec, func)
    with stage(f"timing {len(rec.program):,} instructions on the whole core", args):
        # a launch on several NeuronCores is timed per core once; the report is its
        # longest core's
        each = time_cores(rec, args.schedule)
        core, timed = longest_core(rec, each)
        cores = each if rec.cores else []
        pe = pe_alone(rec)
    info: dict[str, Any] = {
        "kernel": args.target, "arch": arch.name, "nki_ops": rec.ops,
        "instructions": len(rec.program), "counts": rec.counts(),
        "opcodes": rec.program.counts(), "weight_cache_hits": rec.cache_hits,
        "allocation": _allocation(rec),
    }
    if cores:
        info["cores"] = [{"latency_us": c.latency_us, "instructions": len(p)}
                         for c, p in zip(cores, rec.cores, strict=True)]
    info.update(timing_fields(core))  # schema 1's flat keys, kept for one release
    info.update(views(pe, core))
    if args.values:
        arrays = random_inputs(specs, args.seed)
        with stage("computing the values", args):
            res = execute(rec, arrays)
            outs = res if isinstance(res, tuple | list) else [res]
            _refuse_unwritten_reads(outs, execute(rec, arrays, fill=0x00), func)
        info["outputs"] = [{"shape": list(o.shape), "dtype": str(o.dtype),
                            "sum": float(np.asarray(o, dtype=np.float64).sum()),
                            "max_abs": float(np.abs(np.asarray(o, dtype=np.float64)).max())}
                           for o in outs if isinstance(o, np.ndarray)]
    if args.trace is not None:
        from ..views.trace import write_trace

        with stage(f"writing the trace of {len(rec.program):,} instructions", args):
            write_trace(core, timed, args.trace, lines=None if cores else rec.lines,
                        metadata={**views(pe, core), "kernel": args.target,
                                  "bound_kind": info["core"]["bound"]["kind"]})
    if args.timeline is not None:
        from ..views.core_plot import core_timeline_plot

        with stage(f"drawing the timeline of {len(rec.program):,} instructions", args):
            core_timeline_plot(core, args.timeline, width=args.width or PLOT_WIDTH,
                               title=f"{os.path.basename(path)}:{func}")
    if args.program and args.json:  # one JSON object, the text in it (as matmul does)
        info["program"] = rec.program.text()
    elif args.program:
        print(rec.program.text())
    if args.json:
        print(json.dumps(info, indent=2))
    elif not args.program:
        _print_human(args.target, rec, core, info)
    if args.trace is not None:
        gz = ", gzip" if args.trace.endswith(".gz") else ""
        wrote(args.trace, f"Perfetto trace{gz}, {file_size(args.trace)}", json_mode=args.json)
    if args.timeline is not None:
        wrote(args.timeline, "whole-core timeline", json_mode=args.json)
    return 0


def _allocation(rec: Any) -> dict[str, Any]:
    """The compiler stage's report as JSON (nki/build.py Allocation)."""
    a = rec.allocation
    return {"buffers": a.buffers, "memsets_to_start": a.memsets_to_start,
            "rotations": [{"line": f"{os.path.basename(r.where[0])}:{r.where[1]}",
                           "buffer": r.buffer, "bytes_per_partition": r.bytes,
                           "tiles": r.tiles, "physical": r.buffers, "did_not_fit": r.short}
                          for r in a.rotations]}


def _print_human(target: str, rec: Any, core: Any, info: dict[str, Any]) -> None:
    from ..timing.core import CAUSES

    counts = ", ".join(f"{k} {v:,}" for k, v in info["counts"].items())
    print(f"{target} on {core.arch.name}: {rec.ops:,} NKI operations -> "
          f"{len(rec.program):,} instructions ({counts})")
    print("  " + ", ".join(f"{k}={v:,}" for k, v in info["opcodes"].items()))
    print(f"  weight-tile cache hits: {rec.cache_hits:,}")
    for line in rec.allocation.lines():
        print(line)
    if info.get("cores"):
        print(f"SPMD launch on {len(info['cores'])} NeuronCores, timed each on its own "
              f"(the launch is the longest; each core has its share of HBM): " + ", ".join(
                  f"core {k} {c['latency_us']:,.2f} us ({c['instructions']:,} instructions)"
                  for k, c in enumerate(info["cores"])))
    b = info["bound"]
    print(f"whole NeuronCore: {core.latency_us:,.2f} us, {core.tflops:.2f} of "
          f"{core.peak_tflops:.2f} TFLOP/s (hfu {100 * core.hfu:.1f}%), bound by "
          f"{CAUSES[b['by']]} ({b['kind']})")
    print(f"  {'critical path':<30} {'us':>12} {'%':>7}")
    for cause, part in b["causes"].items():
        print(f"  {CAUSES[cause]:<30} {part['us']:>12,.3f} {part['percent']:>7.2f}")
    print(f"  {'total':<30} {core.latency_us:>12,.3f} {100.0:>7.2f}")
    what = info.get("what_if_us", {})
    if what:
        print("  what if (the same schedule, one cost set to zero): " + ", ".join(
            f"{k.replace('_', ' ')} {v:,.2f} us" for k, v in what.items()))
    busy = core.busy()
    engines = ", ".join(f"{k} {100 * busy[k]:.0f}%" for k in ("tensor", "vector", "scalar",
                                                               "gpsimd"))
    dmas = [v for k, v in busy.items() if k.startswith("dma")]
    print(f"  engines busy: {engines}; busiest DMA queue {100 * max(dmas, default=0):.0f}%")
    print(f"  HBM {core.hbm_bytes:,} bytes at {info['dma']['gbps']:,.1f} GB/s of "
          f"{core.arch.hbm_bytes_per_s / 1e9:,.1f}; {info['intensity']:,.1f} FLOP per "
          f"HBM byte")
    for o in info.get("outputs", []):
        print(f"  output {o['shape']} {o['dtype']}: sum {o['sum']:.6g}, "
              f"max |x| {o['max_abs']:.6g}")
