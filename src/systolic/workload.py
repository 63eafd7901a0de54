"""Workload files: named matmuls in YAML, checked line by line, and what they cost.

A workload file (see ``examples/*.yaml``) is a mapping with an ``ops`` list, or just the
list::

    name: SwiGLU MLP                   # optional title
    defaults: {arch: trn2, dtype: bf16}  # optional: any op key but name, m, k, n
    ops:
      - name: gate                     # a[m, k] @ b[k, n], numpy semantics
        m: 2048
        k: 4096
        n: 14336
        repeat: 32                     # calls per step (e.g. one per layer)

Op keys: ``name``, ``m``, ``k``, ``n`` (required), ``dtype`` (bf16), ``arch`` (trn2),
``perf_mode`` (none), ``repeat`` (1). :func:`load_workload` reads and checks a file; every
problem raises :class:`WorkloadError` with one line ``FILE:LINE: what is wrong`` (lines are
1-based; the node marks of ``yaml.compose`` give them). :func:`evaluate` times each op on the
whole NeuronCore and on the Tensor Engine alone; :func:`workload_totals` sums the ops times
their repeats.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from .api import make_spec
from .arch import ARCHS, Arch, get_arch
from .compiler import MAX_MATMULS, MatmulSpec
from .dtypes import FORMATS, get_format
from .errors import SystolicError, WorkloadError
from .extrapolate import matmul_report
from .isa import PerfMode, Program
from .schema import SCHEMA_VERSION, core_fields, core_view, pe_fields, pe_view
from .views.report import CAUSES, Report
from .yaml_source import MAX_FILE_BYTES, YamlSource, compose, read_text

__all__ = ["MAX_FILE_BYTES", "OPERAND_FORMATS", "Op", "OpResult", "Workload", "evaluate",
           "intensity", "load_workload", "parse_workload", "time_op", "workload_json",
           "workload_totals"]

OP_KEYS = ("name", "m", "k", "n", "dtype", "arch", "perf_mode", "repeat")
TOP_KEYS = ("name", "defaults", "ops")
DEFAULTS: dict[str, Any] = {"dtype": "bf16", "arch": "trn2", "perf_mode": "none", "repeat": 1}
# Formats a product can take as operands (the rest are scales, the accumulator, or fp4
# outside MX), as in ``systolic matmul --dtype``.
OPERAND_FORMATS = tuple(f for f in FORMATS if f not in ("e8m0", "int48", "fp4_e2m1"))
_OUT_BYTES = 4  # the fp32 PSUM result written back, per element
# Bounds read from the file before anything is built: a dimension or a repeat past these is
# a typo (a trillion-row matrix), not a workload; the MatMul count is checked too.
MAX_DIM = 1 << 40
MAX_REPEAT = 1 << 40
# PyYAML composes nested nodes recursively: past a few hundred levels it would exhaust the
# stack (RecursionError), so deeper files are refused before parsing.
MAX_NESTING = 64
# MAX_FILE_BYTES (systolic.yaml_source): PyYAML composes about a megabyte of nodes a second
# here, so a spec file past it would take seconds before its first error.


@dataclass(frozen=True, slots=True)
class Op:
    """One named product of a workload; ``line`` is where it starts in the file (1-based)."""

    name: str
    spec: MatmulSpec
    arch: Arch
    repeat: int
    line: int

    @property
    def flops(self) -> int:
        """2 x M x K x N: one multiply and one add per MAC (seed 003)."""
        return 2 * self.spec.m * self.spec.k * self.spec.n


@dataclass(frozen=True, slots=True)
class Workload:
    path: str
    name: str
    ops: tuple[Op, ...]


def intensity(spec: MatmulSpec) -> float:
    """Arithmetic intensity, FLOP per byte of device memory: 2MKN over the bytes of a[M, K]
    and b[K, N] in their format (MX: element bits plus one E8M0 scale byte per 32) and of the
    fp32 result [M, N], each moved once (the roofline's ideal reuse)."""
    fmt = get_format(spec.dtype)
    per = fmt.bits / 8 + 1 / 32 if fmt.kind == "mx" else float(fmt.container_bytes)
    moved = per * (spec.m * spec.k + spec.k * spec.n) + _OUT_BYTES * spec.m * spec.n
    return 2 * spec.m * spec.k * spec.n / moved


# -- parsing ---------------------------------------------------------------------------------

def _positive(src: YamlSource, node: yaml.Node, what: str, limit: int) -> int:
    value = src.scalar(node)
    # YAML 1.1 reads yes/no as booleans, which Python counts as integers: refuse them.
    if isinstance(value, bool) or not isinstance(value, int):
        raise src.fail(node, f"{what} must be a positive integer, got {node.value!r}")
    if value < 1:
        raise src.fail(node, f"{what} must be a positive integer, got {value}")
    if value > limit:
        raise src.fail(node, f"{what} = {value:,} is more than this model takes "
                             f"({limit:,})")
    return value


def _check_size(src: YamlSource, line: int, name: str, spec: MatmulSpec, arch: Arch) -> None:
    """Refuse from arithmetic a product the compiler would refuse only after building its
    tiles: a lower bound of its MatMul count (K tiles at most 4 rows deep per PE row, the
    MX packing; M tiles of ``cols``; N tiles of a PSUM bank of fp32) against MAX_MATMULS."""
    fold = 4  # the most elements one PE row takes per MatMul (MX: 4 along K)
    least = (-(-spec.k // (arch.rows * fold)) * -(-spec.m // arch.cols)
             * -(-spec.n // (arch.psum_bank_bytes // 4)))
    if least > MAX_MATMULS:
        raise src.fail(line, f"op {name!r}: {spec.m}x{spec.k}x{spec.n} lowers to at least "
                             f"{least:,} MatMuls; this model lowers at most {MAX_MATMULS:,}: "
                             f"model a slice of the product and scale its cycles")


def _choice(src: YamlSource, node: yaml.Node, what: str, choices: Sequence[str]) -> str:
    value = src.scalar(node)
    text = str(value).lower() if value is not None else ""
    if text not in choices:
        raise src.fail(node, f"unknown {what} {node.value!r}; expected one of "
                             f"{', '.join(choices)}")
    return text


def _op(src: YamlSource, node: yaml.Node, index: int, defaults: dict[str, yaml.Node],
        arch_override: str | None) -> Op:
    fields = src.mapping(node, f"op {index + 1}", OP_KEYS)
    line = node.start_mark.line + 1
    if "name" not in fields:
        raise src.fail(line, f"op {index + 1} has no name; add name: ...")
    name_node = fields["name"][0]
    name = src.scalar(name_node)
    if name is None or str(name).strip() == "":
        raise src.fail(name_node, f"op {index + 1} has an empty name")
    name = str(name)
    missing = [d for d in ("m", "k", "n") if d not in fields]
    if missing:
        raise src.fail(line, f"op {name!r} is missing {', '.join(missing)} "
                             f"(a[m, k] @ b[k, n])")
    m, k, n = (_positive(src, fields[d][0], d, MAX_DIM) for d in ("m", "k", "n"))
    nodes = {key: fields[key][0] if key in fields else defaults.get(key)
             for key in DEFAULTS}
    dtype = (_choice(src, nodes["dtype"], "dtype", OPERAND_FORMATS)
             if nodes["dtype"] is not None else DEFAULTS["dtype"])
    arch_name = (_choice(src, nodes["arch"], "arch", list(ARCHS))
                 if nodes["arch"] is not None else DEFAULTS["arch"])
    mode = (_choice(src, nodes["perf_mode"], "perf_mode", [p.spelling for p in PerfMode])
            if nodes["perf_mode"] is not None else DEFAULTS["perf_mode"])
    repeat = (_positive(src, nodes["repeat"], "repeat", MAX_REPEAT)
              if nodes["repeat"] is not None else DEFAULTS["repeat"])
    arch = get_arch(arch_override or arch_name)
    try:
        spec = make_spec(m, k, n, dtype, arch, mode)
    except SystolicError as exc:  # a format the arch lacks, a perf mode the format lacks
        # point at the perf mode if one is asked for, else at the format, else at the op
        where = next((nodes[key] for key in ("perf_mode", "dtype")
                      if nodes[key] is not None and not (key == "perf_mode" and mode == "none")),
                     line)
        raise src.fail(where, f"op {name!r}: {exc}") from None
    _check_size(src, line, name, spec, arch)
    return Op(name, spec, arch, repeat, line)


def _depths(text: str) -> list[tuple[int, int]]:
    """(depth, line) after each opening bracket of flow style, outside quotes and comments
    (a cheap scan, so no recursive parser sees a 20,000-deep file)."""
    out: list[tuple[int, int]] = []
    depth, line, quote = 0, 1, ""
    comment = False
    for ch in text:
        if ch == "\n":
            line, comment = line + 1, False
            continue
        if comment:
            continue
        if quote:
            if ch == quote:
                quote = ""
            continue
        if ch in "'\"":
            quote = ch
        elif ch == "#":
            comment = True
        elif ch in "[{":
            depth += 1
            out.append((depth, line))
        elif ch in "]}":
            depth = max(0, depth - 1)
    return out


def _nesting(text: str) -> int:
    return max((d for d, _ in _depths(text)), default=0)


def depth_line(text: str, limit: int) -> int:
    """The line where flow nesting first passes ``limit``."""
    return next((ln for d, ln in _depths(text) if d > limit), 1)


def parse_workload(text: str, path: str = "<workload>", *, arch: str | None = None
                   ) -> Workload:
    """Check a workload's YAML text; ``path`` names it in errors. ``arch`` (a preset name)
    replaces every op's arch."""
    src = YamlSource(path)
    if arch is not None and arch not in ARCHS:
        raise WorkloadError(f"unknown arch {arch!r}; expected one of {', '.join(ARCHS)}")
    depth = _nesting(text)
    if depth > MAX_NESTING:
        raise src.fail(depth_line(text, MAX_NESTING), f"lists or mappings nested "
                       f"{depth:,} deep; a workload needs 3 (ops, an op, its keys)")
    root = compose(src, text, "a workload needs 3 levels (ops, an op, its keys)")
    if root is None:
        raise src.fail(1, "the file is empty; expected a list of ops (see examples/)")
    title = os.path.splitext(os.path.basename(path))[0]
    defaults: dict[str, yaml.Node] = {}
    if isinstance(root, yaml.SequenceNode):
        ops_node: yaml.Node = root
    else:
        top = src.mapping(root, "the workload", TOP_KEYS)
        if "ops" not in top:
            raise src.fail(root, "the workload has no 'ops:' list")
        ops_node = top["ops"][0]
        if "name" in top:
            name_node = top["name"][0]
            value = src.scalar(name_node)
            if value is None or str(value).strip() == "":
                raise src.fail(name_node, "the workload's name is empty; give a title or "
                                          "remove the name: line")
            title = str(value)
        if "defaults" in top:
            allowed = tuple(DEFAULTS)
            defaults = {k: v for k, (v, _) in
                        src.mapping(top["defaults"][0], "defaults", allowed).items()}
    if not isinstance(ops_node, yaml.SequenceNode):
        raise src.fail(ops_node, "ops must be a list of matmuls (each item starts with '- ')")
    if not ops_node.value:
        raise src.fail(ops_node, "ops is empty; add at least one matmul")
    ops: list[Op] = []
    seen: dict[str, int] = {}
    for i, node in enumerate(ops_node.value):
        op = _op(src, node, i, defaults, arch)
        if op.name in seen:
            raise src.fail(op.line, f"op name {op.name!r} is used twice (first on line "
                                    f"{seen[op.name]})")
        seen[op.name] = op.line
        ops.append(op)
    return Workload(path, title, tuple(ops))


def read_workload_text(path: str | os.PathLike[str]) -> tuple[str, str]:
    """``(name, text)`` of a workload file, refused in one line when it is not a regular
    file or is larger than :data:`MAX_FILE_BYTES` (the one rule of
    :func:`systolic.yaml_source.read_text`, which sweep files share)."""
    return read_text(path, "workload", WorkloadError,
                     hint="a workload is a short list of matmuls (examples/ holds files of "
                          "a few hundred)")


def load_workload(path: str | os.PathLike[str], *, arch: str | None = None) -> Workload:
    """Read and check a workload file (see the module docstring; :func:`read_workload_text`
    for the files it refuses)."""
    name, text = read_workload_text(path)
    return parse_workload(text, name, arch=arch)


# -- evaluation ------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True, eq=False)
class OpResult:
    """One op timed: ``report`` has both views (``report.core``: the whole NeuronCore;
    the Report itself: the Tensor Engine). ``program`` is the lowered product when it was
    lowered whole (a large regular product is timed from a slice: systolic.extrapolate)."""

    op: Op
    report: Report
    program: Program | None = None

    def largest_loss(self) -> tuple[str, float]:
        """The Tensor Engine's loss cause with the most cycles and its percent."""
        return _largest(self.report.percent())

    def to_dict(self) -> dict[str, Any]:
        """The op's JSON: the whole core's figures (``latency_us``, ``tflops``,
        ``peak_tflops``, ``hfu``, ``bound``, ``engines``, ``dma``, ``intensity``: measured,
        FLOPs per HBM byte moved) and the Tensor Engine's own view beside them, named as in
        ``systolic matmul --json`` (``cycles``, ``pe_us``, ``pe_tflops``, ``utilization``,
        ``breakdown``, ``largest_loss``)."""
        s, rep = self.op.spec, self.report
        d = rep.to_dict()
        cause, pct = self.largest_loss()
        return {
            "name": self.op.name, "m": s.m, "k": s.k, "n": s.n, "dtype": s.dtype,
            "perf_mode": s.perf_mode.spelling, "arch": self.op.arch.name,
            "repeat": self.op.repeat, "flops": self.op.flops,
            **{k: d[k] for k in ("latency_us", "tflops", "peak_tflops", "hfu", "bound",
                                 "engines", "dma", "intensity")},
            "cycles": rep.cycles, "pe_us": rep.seconds * 1e6, "pe_tflops": rep.tflops,
            **{k: d[k] for k in ("utilization", "useful_macs", "readout_tail_cycles",
                                 "instructions", "breakdown")},
            "largest_loss": {"cause": cause, "percent": pct},
            "ideal_intensity": intensity(s),
            "pe": pe_view(rep), "core": core_view(rep.core),
        }


def _largest(percent: dict[str, float]) -> tuple[str, float]:
    losses = [(v, k) for k, v in percent.items() if k != "useful" and v > 0]
    if not losses:
        return "none", 0.0
    v, k = max(losses)
    return k, v


def time_op(spec: MatmulSpec, arch: Arch, *, full: bool = False
            ) -> tuple[Report, Program | None]:
    """Time one product on both views (:func:`systolic.extrapolate.matmul_report`: a large
    regular product from a slice of its M tiles); ``full`` lowers it whole (a timeline
    needs every instruction)."""
    report, lowered = matmul_report(spec, arch, full=full)
    return report, (lowered.program if lowered is not None else None)


def evaluate(workload: Workload, progress: Callable[[int], None] | None = None
             ) -> list[OpResult]:
    """Time each op. Ops of the same shape, format and arch share one timing (a MLP's gate
    and up projections are the same product)."""
    done: dict[tuple[MatmulSpec, Arch], tuple[Report, Program | None]] = {}
    out: list[OpResult] = []
    for op in workload.ops:
        key = (op.spec, op.arch)
        if key not in done:
            done[key] = time_op(op.spec, op.arch)
        out.append(OpResult(op, *done[key]))
        if progress is not None:
            progress(1)
    return out


def workload_totals(results: Sequence[OpResult], *, views: bool = True) -> dict[str, Any]:
    """The workload's total, each op counted ``repeat`` times: the ops run one after the
    other, so times add.

    Whole core: ``latency_us`` (the sum), ``tflops`` (all FLOPs over it), ``peak_tflops``
    (all FLOPs over their time at each op's peak), ``hfu`` (time at peak over latency),
    ``bound`` (critical-path time per cause summed; ``by`` the largest), ``engines`` (busy
    fraction of the total latency, ops summed), ``dma``, ``intensity``. Tensor Engine:
    ``cycles``, ``pe_us``, ``pe_tflops``, ``utilization`` (useful MACs over the array's
    capacity in the total cycles), ``breakdown``, ``largest_loss``. The schema's ``pe``
    and ``core`` objects of the same sums are left out when ``views`` is False (a sweep
    point reads the keys above only)."""
    lat_s = pe_s = at_peak_s = 0.0
    cycles = flops = macs = capacity = dma_bytes = hbm_bytes = tail = 0
    bound: dict[str, float] = {}
    busy: dict[str, float] = {}
    ins: dict[str, int] = {}
    causes = dict.fromkeys(CAUSES, 0.0)
    for res in results:
        rep, r = res.report, res.op.repeat
        core = rep.core
        lat_s += core.seconds * r
        pe_s += rep.seconds * r
        at_peak_s += res.op.flops / (rep.peak_tflops * 1e12) * r
        cycles += rep.cycles * r
        tail += rep.readout_tail * r
        flops += res.op.flops * r
        macs += rep.useful_macs * r
        capacity += rep.cycles * res.op.arch.pes * rep.pack * r
        dma_bytes += core.dma_bytes * r
        hbm_bytes += core.hbm_bytes * r
        for k, v in core.bound_ticks.items():
            bound[k] = bound.get(k, 0.0) + v / core.tick_hz * r
        for k, v in core.busy_ticks.items():
            busy[k] = busy.get(k, 0.0) + v / core.tick_hz * r
            ins[k] = ins.get(k, 0) + core.instructions[k] * r
        for k, part in rep.breakdown.items():  # once per op
            causes[k] += part * r
    percent = {k: 100.0 * v / cycles if cycles else 0.0 for k, v in causes.items()}
    cause, pct = _largest(percent)
    flat = _flat_totals(results, lat_s, pe_s, at_peak_s, cycles, flops, macs, capacity,
                        dma_bytes, hbm_bytes, bound, busy, ins, causes, percent, cause, pct)
    if not views:
        return flat
    core_view_ = core_fields(latency_s=lat_s, flops=flops, peak_flops_s=at_peak_s,
                             bound_s=bound, busy_s=busy, instructions=ins,
                             dma_bytes=dma_bytes, hbm_bytes=hbm_bytes)
    pe = pe_fields(cycles=cycles, seconds=pe_s, useful_macs=macs, capacity_macs=capacity,
                   peak_tflops=core_view_["peak_tflops"], breakdown=causes, readout_tail=tail)
    return {"pe": pe, "core": core_view_, **flat}


def _flat_totals(results: Sequence[OpResult], lat_s: float, pe_s: float, at_peak_s: float,
                 cycles: int, flops: int, macs: int, capacity: int, dma_bytes: int,
                 hbm_bytes: int, bound: dict[str, float], busy: dict[str, float],
                 ins: dict[str, int], causes: dict[str, float], percent: dict[str, float],
                 cause: str, pct: float) -> dict[str, Any]:
    """Schema 1's flat keys of the total, kept for one release (docs/json.md)."""
    return {
        "latency_us": lat_s * 1e6, "flops": flops,
        "calls": sum(res.op.repeat for res in results),
        "tflops": flops / lat_s / 1e12 if lat_s else 0.0,
        "peak_tflops": flops / at_peak_s / 1e12 if at_peak_s else 0.0,
        "hfu": at_peak_s / lat_s if lat_s else 0.0,
        "bound": {"by": max(bound, key=lambda k: bound[k]) if bound else "idle",
                  "causes": {k: {"us": v * 1e6, "percent": 100.0 * v / lat_s if lat_s
                                 else 0.0} for k, v in bound.items()}},
        "engines": {k: {"busy": busy[k] / lat_s if lat_s else 0.0, "instructions": ins[k]}
                    for k in busy},
        "dma": {"bytes": dma_bytes, "hbm_bytes": hbm_bytes,
                "gbps": hbm_bytes / lat_s / 1e9 if lat_s else 0.0},
        "intensity": flops / hbm_bytes if hbm_bytes else float("inf"),
        "cycles": cycles, "pe_us": pe_s * 1e6,
        "pe_tflops": 2 * macs / pe_s / 1e12 if pe_s else 0.0,
        "utilization": macs / capacity if capacity else 0.0,
        "breakdown": {k: {"cycles": causes[k], "percent": percent[k]} for k in CAUSES},
        "largest_loss": {"cause": cause, "percent": pct},
    }


def workload_json(workload: Workload, results: Sequence[OpResult]) -> dict[str, Any]:
    """``{"name", "file", "ops": [...], "total": {...}}`` (:meth:`OpResult.to_dict`,
    :func:`workload_totals`)."""
    return {"schema": SCHEMA_VERSION, "name": workload.name, "file": workload.path,
            "ops": [r.to_dict() for r in results], "total": workload_totals(results)}
