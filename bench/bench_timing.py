"""Benchmark: the timing model side by side with SCALE-Sim 3.0.0 on square GEMMs.

    python bench/bench_timing.py             # ours on 2048^3 and 8192^3; SCALE-Sim on 512^3, 1024^3
    python bench/bench_timing.py --large     # also SCALE-Sim on 2048^3 (about 14 minutes)
    python bench/bench_timing.py --json out.json
    python bench/bench_timing.py --core      # the whole-core timing path (timing/core.py)
    python bench/bench_timing.py --core --large   # also the full schedule at 16384^3
    python bench/bench_timing.py --nki --runs 3   # the full-size NKI tiled kernel, by stage
    python bench/bench_timing.py --nki --base /tmp/old/src   # ... beside another tree

Every measurement runs in its own child process, so that wall time and peak memory
(``ru_maxrss`` of that child, from :func:`os.wait4`) are measured the same way for both
tools. SCALE-Sim needs numpy < 2.4 (FACTS), so it runs from its own venv::

    python3 -m venv .bench-venv && .bench-venv/bin/pip install scalesim==3.0.0 'numpy<2.4'

Mapping (FACTS, "The peer"): our a[M, K] @ b[K, N] keeps a.T tiles [K, M] in the array and
streams b; SCALE-Sim keeps its filter [K, N'] and streams its ifmap [M', K], so our (M, K, N)
is its (M' = N, N' = M, K). Its weight-stationary cycles are
ceil(K/R) * ceil(N'/C) * (2R + C + M' - 2) - 1 (weight load never overlapped, tiles padded).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from math import ceil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV_PY = ROOT / ".bench-venv" / "bin" / "python"

# The child that runs our model: lowering, scheduling and the report, timed separately.
OURS = r"""
import json, sys, time
from systolic.arch import get_arch
from systolic.compiler import MatmulSpec, lower
from systolic.views.report import build_report
from systolic.timing.tensor_engine import schedule
n = int(sys.argv[1]); arch = get_arch("trn2")
t0 = time.perf_counter(); low = lower(MatmulSpec(n, n, n, "bf16"), arch, check=False)
t1 = time.perf_counter(); sch = schedule(low.program, arch)
t2 = time.perf_counter(); rep = build_report(low.program, arch)
t3 = time.perf_counter()
print(json.dumps({"instructions": len(low.program), "lower_s": t1 - t0,
                  "schedule_s": t2 - t1, "report_s": t3 - t2, "cycles": sch.cycles,
                  "utilization": rep.utilization}))
"""

# The child that runs SCALE-Sim from Python with save_disk_space=True (no traces; FACTS).
SCALESIM = r"""
import contextlib, io, json, sys, time
from scalesim.scale_sim import scalesim
cfg, topo, layout, out = sys.argv[1:5]
t0 = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()):
    s = scalesim(save_disk_space=True, verbose=False, config=cfg, topology=topo,
                 layout=layout, input_type_gemm=True)
    s.run_scale(top_path=out)
run_s = time.perf_counter() - t0
# scalesim.get_total_cycles() indexes a method (3.0.0 bug): read the layer's report items
# (DRAM-to-DRAM span, compute cycles, stalls, util %, mapping efficiency %, compute util %)
span, compute, stall, util, mapping_eff, compute_util = (
    s.runner.single_layer_sim_object_list[0].get_compute_report_items())
print(json.dumps({"cycles": int(compute), "dram_span_cycles": int(span),
                  "stall_cycles": int(stall), "utilization": float(util) / 100,
                  "run_s": run_s}))
"""

CONFIG = """[general]
run_name = bench

[architecture_presets]
ArrayHeight : 128
ArrayWidth : 128
IfmapSramSzkB : 6144
FilterSramSzkB : 6144
OfmapSramSzkB : 2048
IfmapOffset : 0
FilterOffset : 10000000
OfmapOffset : 20000000
Bandwidth : 10
Dataflow : ws
ReadRequestBuffer : 32
WriteRequestBuffer : 32

[layout]
IfmapCustomLayout : False
IfmapSRAMBankBandwidth : 10
IfmapSRAMBankNum : 10
IfmapSRAMBankPort : 2
FilterCustomLayout : False
FilterSRAMBankBandwidth : 10
FilterSRAMBankNum : 10
FilterSRAMBankPort : 2

[sparsity]
SparsitySupport : false
SparseRep : ellpack_block
OptimizedMapping : false
BlockSize : 8
RandomNumberGeneratorSeed : 40

[run_presets]
InterfaceBandwidth : CALC
UseRamulatorTrace : False
"""


def popen_rusage(argv: list[str], env: dict[str, str] | None = None) -> dict[str, object]:
    """Run one child and reap it with os.wait4, so that the rusage is that child's alone.

    Returns the child's last stdout line (JSON) plus wall_s and peak_mib (its ru_maxrss)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        if proc.returncode:
            raise RuntimeError(f"{argv[0]} failed ({proc.returncode}):\n{err.read()[-3000:]}")
        res = json.loads(out.read().strip().splitlines()[-1])
    res["wall_s"] = wall
    res["peak_mib"] = usage.ru_maxrss / 1024  # Linux: KiB
    return res


def ours(n: int) -> dict[str, object]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    return popen_rusage([sys.executable, "-c", OURS, str(n)], env)


def scalesim(n: int, workdir: Path) -> dict[str, object]:
    cfg, topo, layout = workdir / "ws128.cfg", workdir / f"g{n}.csv", workdir / "layout.csv"
    cfg.write_text(CONFIG)
    # our (M, K, N) = its (N, M, K); square here. The trailing comma is required (FACTS).
    topo.write_text(f"Layer,M,N,K,\ng{n},{n},{n},{n},\n")
    layout.write_text("Layer,IFMAP Height,IFMAP Width,Filter Height,Filter Width,Channels,"
                      "Num Filter,Strides,\n")
    out = workdir / f"out{n}"
    out.mkdir(exist_ok=True)
    return popen_rusage([str(VENV_PY), "-c", SCALESIM, str(cfg), str(topo), str(layout),
                         str(out)])


def scalesim_formula(m: int, k: int, n: int, rows: int = 128, cols: int = 128) -> int:
    """FACTS: ceil(K/R) * ceil(N'/C) * (2R + C + M' - 2) - 1 with (M', N') = (n, m)."""
    return ceil(k / rows) * ceil(m / cols) * (2 * rows + cols + n - 2) - 1


# The whole-core path: `systolic matmul M K N --json` (the regular-run path of
# systolic.extrapolate, timed as a command in fresh processes) against lowering and
# scheduling every instruction (the reference the regular path is tested against).
CORE_FULL = r"""
import json, sys, time
from systolic.arch import get_arch
from systolic.compiler import MatmulSpec, lower
from systolic.timing.core import time_program
n = int(sys.argv[1]); arch = get_arch("trn2")
t0 = time.perf_counter(); low = lower(MatmulSpec(n, n, n, "bf16"), arch, check=False)
t1 = time.perf_counter(); ct = time_program(low.program, arch)
t2 = time.perf_counter()
print(json.dumps({"run_s": t2 - t0, "lower_s": t1 - t0, "core_s": t2 - t1,
                  "latency_us": ct.latency_us, "instructions": len(low.program)}))
"""
# 100,000 engine instructions: DMA in, Vector copy, GpSimd add, Scalar activation, DMA out,
# over 16 rotating SBUF slots (reuse: WAR/RAW dependencies on every slot).
CORE_ENGINES = r"""
import json, time
from systolic.isa import (AccessPattern, Activation, AluOp, DmaCopy, Engine, Program,
                          Space, TensorCopy, TensorTensor)
from systolic.timing.core import time_program
def sb(off, n): return AccessPattern(Space.SBUF, 0, 128, off, ((1, n),), "bf16")
def hbm(off): return AccessPattern(Space.DRAM, 0, 128, off, ((1, 1024),), "bf16",
                                   partition_step=2048)
ins = []
j = 0
t0 = time.perf_counter()
while len(ins) < 100_000:
    s = (j % 16) * 4096
    ins += [DmaCopy(hbm(j * 262144), sb(s, 1024), queue=j % 16),
            TensorCopy(sb(s, 1024), sb(65536 + s, 1024)),
            TensorTensor(sb(65536 + s, 1024), sb(s, 1024), sb(131072 + s, 1024), AluOp.ADD,
                         Engine.GPSIMD),
            Activation(sb(131072 + s, 1024), sb(s, 1024)),
            DmaCopy(sb(s, 1024), hbm((1 << 34) + j * 262144), queue=(j + 3) % 16)]
    j += 1
prog = Program(ins)
t1 = time.perf_counter(); ct = time_program(prog, "trn2"); t2 = time.perf_counter()
print(json.dumps({"build_s": t1 - t0, "core_s": t2 - t1, "instructions": len(prog),
                  "latency_us": ct.latency_us, "bound": ct.bound}))
"""


# The floor of the same command (issue 20): a process that imports numpy (the baseline's
# CPU), plus the whole-core scheduling the command does (every time_program /
# time_prefixes call of matmul_report, CPU seconds, measured here), nothing else: no CLI,
# lowering, Tensor Engine schedule, report or JSON.
CORE_FLOOR = r"""
import json, sys, time
c0 = time.process_time()
import numpy
numpy_cpu = time.process_time() - c0
import systolic.extrapolate as ex
import systolic.views.report as vr
from systolic.api import make_spec
from systolic.arch import get_arch
spent = [0.0]
def timed(f):
    def g(*a, **k):
        t = time.process_time(); r = f(*a, **k); spent[0] += time.process_time() - t
        return r
    return g
ex.time_prefixes = timed(ex.time_prefixes)
vr.time_program = timed(vr.time_program)
arch = get_arch("trn2")
m, k, n = (int(x) for x in sys.argv[1:4])
rep, _ = ex.matmul_report(make_spec(m, k, n, "bf16", arch, "none"), arch)
rep.core
print(json.dumps({"numpy_cpu": numpy_cpu, "schedule_cpu": spent[0]}))
"""


def _env() -> dict[str, str]:
    """The children's environment: this tree first, and bytecode written and read as an
    installed package has it (PYTHONDONTWRITEBYTECODE=1, set on the development machine,
    makes every child compile the package's sources again: ~0.05 s of each command)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _median(argv: list[str], env: dict[str, str], runs: int) -> tuple[float, float]:
    """(median wall, median CPU = user + sys) of ``runs`` fresh children."""
    walls, cpus = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        if os.waitstatus_to_exitcode(status):
            raise RuntimeError(f"{argv} failed")
        walls.append(time.perf_counter() - t0)
        cpus.append(usage.ru_utime + usage.ru_stime)
    return sorted(walls)[runs // 2], sorted(cpus)[runs // 2]


# the last three: flat in N, and in K past the compiler's 224 stationary slots (issue 20)
CORE_SIZES = [(2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192),
              (16384, 16384, 16384), (16384, 16384, 65536), (16384, 8192, 131072),
              (16384, 32768, 16384), (32768, 32768, 32768), (4096, 65536, 4096)]


def core_bench(large: bool, runs: int = 5) -> dict[str, object]:
    env = _env()
    subprocess.run([sys.executable, "-m", "systolic", "matmul", "256", "256", "256"],
                   check=True, stdout=subprocess.DEVNULL, env=env)  # bytecode written
    # issue 20's baselines, in the same run: the targets are ratios to `systolic --help`
    # (which no longer imports numpy) and so also to `import numpy`
    numpy_s, numpy_cpu = _median([sys.executable, "-c", "import numpy"], env, runs)
    help_s, help_cpu = _median([sys.executable, "-m", "systolic", "--help"], env, runs)
    print(f"load average {os.getloadavg()[0]:.1f}; medians of {runs} fresh processes "
          f"(wall / CPU = user + sys)", flush=True)
    print(f"baselines: import numpy {numpy_s:.3f} / {numpy_cpu:.3f} s, systolic --help "
          f"{help_s:.3f} / {help_cpu:.3f} s", flush=True)
    out: dict[str, object] = {"import_numpy_s": numpy_s, "import_numpy_cpu": numpy_cpu,
                              "help_s": help_s, "help_cpu": help_cpu}
    for m, k, n in CORE_SIZES:
        wall, cpu = _median([sys.executable, "-m", "systolic", "matmul", str(m), str(k), str(n),
                             "--json"], env, runs)
        fl = popen_rusage([sys.executable, "-c", CORE_FLOOR, str(m), str(k), str(n)], env)
        floor = numpy_cpu + float(fl["schedule_cpu"])  # a process importing numpy, + that
        line = (f"core {m}x{k}x{n}: systolic matmul --json wall {wall:.3f} s CPU {cpu:.3f} s "
                f"= {wall / numpy_s:.2f}x / {cpu / numpy_cpu:.2f}x import numpy "
                f"({wall / help_s:.1f}x --help); floor (import numpy + its scheduling) "
                f"{floor:.3f} s CPU, the command {cpu / floor:.2f}x it")
        full = None
        if (m == k == n and m < 8192) or large:
            full = popen_rusage([sys.executable, "-c", CORE_FULL, str(m)], env)
            line += (f" | every instruction: wall {full['wall_s']:.2f} s (lower "
                     f"{full['lower_s']:.2f} s, time_program {full['core_s']:.2f} s)")
        print(line, flush=True)
        out[f"{m}x{k}x{n}"] = {"wall_s": wall, "cpu_s": cpu, "floor_cpu_s": floor,
                               "full": full}
    eng = popen_rusage([sys.executable, "-c", CORE_ENGINES], env)
    print(f"core engines: {eng['instructions']:,} instructions timed in {eng['core_s']:.2f} s "
          f"({eng['instructions'] / eng['core_s']:,.0f} per s; built in {eng['build_s']:.2f} "
          f"s), latency {eng['latency_us']:,.1f} us, bound {eng['bound']}", flush=True)
    out["engines"] = eng
    return out


# The NKI row of issue 20: `systolic kernel tiled_matmul.py:tiled_matmul` at full size
# (4096 x 8192 operands: 100,352 NKI ops, 133,120 instructions), the command itself run
# in-process with its stages timed (CPU = user + sys of this process, wall): recording,
# the build (placement and emission), verify, time_program, the three what-if latencies
# (read by the JSON), the Tensor Engine's own view (pe_alone) and the rest; then the floor of
# the timing side: a bare loop over the ops doing only the cost lookup (each op's duration)
# and one max per dependency, over the dependencies the scheduler found.
NKI_KERNEL = "examples/kernels/tiled_matmul.py:tiled_matmul"
NKI_ARGS = ["--arg", "lhsT=bf16[4096,8192]", "--arg", "rhs=bf16[4096,8192]"]
NKI_STAGES = r"""
import contextlib, io, json, os, sys, time
t_start = os.times()
import systolic.cli as cli
import systolic.commands.kernel as ck
import systolic.nki.build as nb
import systolic.nki.run as nr
import systolic.timing.whatif as tw
spent = {}
def cpu_wall():
    t = os.times(); return t.user + t.system, time.perf_counter()
def timed(name, f):
    def g(*a, **k):
        c0, w0 = cpu_wall(); r = f(*a, **k); c1, w1 = cpu_wall()
        c, w = spent.get(name, (0.0, 0.0)); spent[name] = (c + c1 - c0, w + w1 - w0)
        return r
    return g
nb.verify = timed("verify", nb.verify)
nb.build = timed("build", nb.build)
nr.build = nb.build
got = []
def keep(f):
    def g(*a, **k):
        r = f(*a, **k); got.append(r); return r
    return g
nr.time_program = timed("time_program", keep(nr.time_program))
ck.pe_alone = timed("pe_view", ck.pe_alone)
record = timed("record", nr.record)
nr.record = record
cls = tw.LazyWhatIf
cls.__getitem__ = timed("what_if", cls.__getitem__)
c0, w0 = cpu_wall()
with contextlib.redirect_stdout(io.StringIO()) as buf:
    cli.main(["kernel", sys.argv[1], *sys.argv[2:], "--json"])
c1, w1 = cpu_wall()
out = {k: list(v) for k, v in spent.items()}
# record() includes the build, the build its verify
out["record"] = [a - b for a, b in zip(out["record"], out["build"])]
out["build"] = [a - b for a, b in zip(out["build"], out["verify"])]
out["command"] = [c1 - c0, w1 - w0]
out["latency_us"] = json.loads(buf.getvalue())["latency_us"]
plans = getattr(got[0].what_if, "_plans", None)  # the ops' durations and dependencies
if hasattr(plans, "dep_end"):  # timing/whatif.py's Plans (not in trees before issue 20)
    dur, dep_end, dep_op, dep_lat = plans.dur, plans.dep_end, plans.dep_op, plans.dep_lat
    c0, w0 = cpu_wall()
    ends = []
    for op in range(len(dur)):
        t = 0
        for k in range(dep_end[op - 1] if op else 0, dep_end[op]):
            e = ends[dep_op[k]] + dep_lat[k]
            if e > t:
                t = e
        ends.append(t + dur[op])
    c1, w1 = cpu_wall()
    out["floor"] = [c1 - c0, w1 - w0]
    out["ops"], out["deps"] = len(dur), len(dep_op)
print(json.dumps(out))
"""
NKI_ORDER = ("record", "build", "verify", "time_program", "what_if", "pe_view")


def nki_bench(runs: int, base: str | None) -> dict[str, object]:
    """The NKI row by stage, for this tree and (``base``) another ``src`` directory, the
    runs of the two interleaved; then the whole command cold (``/usr/bin/time``'s view)."""
    trees = {"ours": str(ROOT / "src")} | ({"base": base} if base else {})
    print(f"load average {', '.join(f'{x:.1f}' for x in os.getloadavg())}; medians of {runs} "
          f"fresh processes; CPU = user + sys / wall, s", flush=True)
    got: dict[str, list[dict[str, object]]] = {k: [] for k in trees}
    for _ in range(runs):
        for name, src in trees.items():
            env = dict(_env(), PYTHONPATH=src)
            got[name].append(popen_rusage([sys.executable, "-c", NKI_STAGES, NKI_KERNEL,
                                           *NKI_ARGS], env))
    out: dict[str, object] = {}
    for name, src in trees.items():
        rs = got[name]

        def med(key: str, i: int, rs: list[dict[str, object]] = rs) -> float:
            return sorted(float(r[key][i]) for r in rs)[len(rs) // 2]  # type: ignore[index]

        parts = {k: (med(k, 0), med(k, 1)) for k in (*NKI_ORDER, "command")
                 if all(k in r for r in rs)}
        env = dict(_env(), PYTHONPATH=src)
        wall, cpu = _median([sys.executable, "-m", "systolic", "kernel", NKI_KERNEL, *NKI_ARGS,
                             "--json"], env, runs)
        lat = {float(r["latency_us"]) for r in rs}  # type: ignore[arg-type]
        print(f"{name} ({src}): " + ", ".join(f"{k} {c:.2f}/{w:.2f}" for k, (c, w) in
                                              parts.items())
              + f"; timing side (verify + time_program + what-if) "
              f"{sum(parts[k][0] for k in ('verify', 'time_program', 'what_if')):.2f} CPU; "
              f"cold command {cpu:.2f} CPU / {wall:.2f} wall; latency_us {sorted(lat)}",
              flush=True)
        if all("floor" in r for r in rs):
            print(f"  floor ({rs[0]['ops']:,} ops, {rs[0]['deps']:,} dependencies): "
                  f"{med('floor', 0):.3f} s CPU", flush=True)
        out[name] = {"stages": parts, "cold_wall_s": wall, "cold_cpu_s": cpu}
    print(f"load average after {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--large", action="store_true", help="also SCALE-Sim on 2048^3")
    ap.add_argument("--ours", type=int, nargs="*", default=[512, 1024, 2048, 8192])
    ap.add_argument("--scalesim", type=int, nargs="*", default=[512, 1024])
    ap.add_argument("--json", type=Path, help="write the figures here too")
    ap.add_argument("--core", action="store_true", help="the whole-core timing path only")
    ap.add_argument("--runs", type=int, default=5,
                    help="--core, --nki: medians of this many (5)")
    ap.add_argument("--nki", action="store_true",
                    help="the full-size NKI tiled kernel by stage (issue 20's NKI row)")
    ap.add_argument("--base", help="--nki: also this src directory (an unchanged tree)")
    args = ap.parse_args(argv)
    if args.nki:
        res = nki_bench(args.runs, args.base)
        if args.json:
            args.json.write_text(json.dumps(res, indent=1))
        return 0
    if args.core:
        res = core_bench(args.large, args.runs)
        if args.json:
            args.json.write_text(json.dumps(res, indent=1))
        return 0
    peer = list(args.scalesim) + ([2048] if args.large and 2048 not in args.scalesim else [])
    results: dict[str, dict[int, dict[str, object]]] = {"ours": {}, "scalesim": {}}
    for n in args.ours:
        results["ours"][n] = r = ours(n)
        print(f"ours     {n:>5}^3: {r['instructions']:>7} instructions, lower "
              f"{r['lower_s']:.3f} s, schedule {r['schedule_s']:.3f} s, report "
              f"{r['report_s']:.3f} s, wall {r['wall_s']:.2f} s, peak {r['peak_mib']:.0f} MiB, "
              f"{r['cycles']:,} cycles ({100 * r['utilization']:.2f}%)", flush=True)
    if peer and not VENV_PY.exists():
        print(f"SCALE-Sim skipped: no {VENV_PY} (see the module docstring)")
        peer = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in peer:
            results["scalesim"][n] = r = scalesim(n, Path(tmp))
            print(f"scalesim {n:>5}^3: wall {r['wall_s']:.2f} s (run {r['run_s']:.2f} s), peak "
                  f"{r['peak_mib']:.0f} MiB, {r['cycles']:,} compute cycles "
                  f"({100 * r['utilization']:.2f}%; formula {scalesim_formula(n, n, n):,}), "
                  f"DRAM-to-DRAM span {r['dram_span_cycles']:,}", flush=True)
    print("\nside by side (same GEMM, bf16 on a 128x128 array; 'model' = in-process time:")
    print("ours lower + schedule, SCALE-Sim construct + run_scale; 'wall' = whole child):")
    print(f"{'shape':>7} {'ours model s':>13} {'theirs model s':>15} {'ratio':>7} "
          f"{'ours wall s':>12} {'theirs wall s':>14} {'ratio':>6} {'ours MiB':>9} "
          f"{'theirs MiB':>11} {'ours cycles':>12} {'theirs cycles':>14}")
    for n, s in results["scalesim"].items():
        o = results["ours"].get(n) or ours(n)
        results["ours"][n] = o
        model = o["lower_s"] + o["schedule_s"]
        print(f"{n:>6}^3 {model:>13.3f} {s['run_s']:>15.2f} {s['run_s'] / model:>6.0f}x "
              f"{o['wall_s']:>12.2f} {s['wall_s']:>14.2f} {s['wall_s'] / o['wall_s']:>5.0f}x "
              f"{o['peak_mib']:>9.0f} {s['peak_mib']:>11.0f} {o['cycles']:>12,} "
              f"{s['cycles']:>14,}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
