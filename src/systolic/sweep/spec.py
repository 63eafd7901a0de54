"""Sweep files: what to run, the axes, the sample, the objective; checked line by line.

A sweep file (``examples/sweeps/*.yaml``; docs/sweep.md has the whole reference)::

    name: SwiGLU, array size x HBM bandwidth
    run: {workload: ../swiglu_mlp.yaml}    # or {matmul: {m: 512, k: 512, n: 512}}
                                           # or {kernel: FILE.py:FUNC, args: {a: "bf16[M, K]"}}
                                           # (and max_ops: N, its recording budget)
    fixed: {arch: trn2}                    # inputs with one value
    axes:
      rows: [64, 128, 256]                 # an Arch field, by name
      hbm_bytes_per_s: {from: 1.0e11, to: 8.0e11, times: 2}
      m,k,n: [[512, 512, 512], [1024, 1024, 1024]]   # zipped: values taken together
    sample: grid                           # or {random: 200, seed: 0}
    objective: {minimize: roofline_us}     # or a figure name, or {maximize: utilization}
    constraints: ["utilization >= 0.5"]    # points that break one are kept, not ranked

Every problem raises :class:`SweepError` with one line ``FILE:LINE: what is wrong``.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import yaml

from ..errors import SweepError, SystolicError
from ..nki.record import DEFAULT_MAX_OPS
from ..workload import OPERAND_FORMATS, load_workload
from ..yaml_source import compose, read_text
from .axes import NAME as _NAME
from .axes import Axis, Src, parse_axis, parse_input
from .evaluate import (
    MAXIMIZE,
    KernelTarget,
    Target,
    WorkloadTarget,
    _digest,
    kernel_digest,
    matmul_target,
    target_figures,
)

__all__ = ["RESERVED", "Axis", "Constraint", "Objective", "SweepSpec", "load_sweep",
           "parse_sweep"]

TOP_KEYS = ("name", "run", "fixed", "axes", "sample", "objective", "constraints")
# Columns of the store that no input or figure may take.
RESERVED = ("key", "seq", "status", "error", "elapsed_s", "sweep_id", "feasible")
# numpy's seeded choice draws int64 indices; far below this no grid could ever finish anyway
MAX_GRID = 2**63 - 1
# a random sample is drawn (and sorted) whole before its first point: 80 MB of indices
MAX_SAMPLE = 10_000_000
_OPS = {"<=": np.less_equal, "<": np.less, ">=": np.greater_equal, ">": np.greater,
        "==": np.equal, "!=": np.not_equal}
_CONSTRAINT = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(<=|>=|==|!=|<|>)\s*(\S+)\s*$")
_ARG = re.compile(r"^\s*(\w+)\s*\[([^\]]*)\]\s*$")


@dataclass(frozen=True, slots=True)
class Objective:
    figure: str
    maximize: bool

    def better(self, a: float, b: float) -> bool:
        return a > b if self.maximize else a < b


@dataclass(frozen=True, slots=True)
class Constraint:
    field: str
    op: str
    value: float | str
    text: str

    def holds(self, column: np.ndarray) -> np.ndarray:
        """Element-wise truth over a column (missing values fail, ``!=`` too)."""
        if isinstance(self.value, str):
            missing = np.array([v is None or (isinstance(v, float) and math.isnan(v))
                                for v in column], dtype=bool)
            arr = np.array([str(v) for v in column], dtype=object)
            return np.asarray(_OPS[self.op](arr, self.value), dtype=bool) & ~missing
        vals = np.array([float(v) if isinstance(v, int | float) else math.nan for v in column])
        with np.errstate(invalid="ignore"):
            return np.asarray(_OPS[self.op](vals, self.value), dtype=bool) & ~np.isnan(vals)


@dataclass(frozen=True, slots=True)
class SweepSpec:
    path: str
    name: str
    target: Target
    fixed: dict[str, Any]
    axes: tuple[Axis, ...]
    sample: int | None  # None: the whole grid
    seed: int
    objective: Objective
    constraints: tuple[Constraint, ...]

    @property
    def grid_size(self) -> int:
        return math.prod(a.size for a in self.axes)

    @property
    def size(self) -> int:
        return self.grid_size if self.sample is None else self.sample

    @property
    def input_names(self) -> list[str]:
        return [*self.fixed, *(n for a in self.axes for n in a.names)]

    def points(self) -> Iterator[tuple[int, dict[str, Any]]]:
        """``(seq, inputs)`` in order: the grid with the last axis fastest, or the seeded
        random sample of distinct grid points in grid order."""
        lens = [a.size for a in self.axes]
        if self.sample is None:
            indices: Any = range(self.grid_size)
        else:  # Floyd's method inside choice: no array of the whole grid
            rng = np.random.default_rng(self.seed)
            indices = np.sort(rng.choice(self.grid_size, self.sample, replace=False)).tolist()
        for seq, flat in enumerate(indices):
            inputs = dict(self.fixed)
            digits = []
            for n in reversed(lens):
                flat, d = divmod(flat, n)
                digits.append(d)
            for axis, d in zip(self.axes, reversed(digits), strict=True):
                inputs.update(zip(axis.names, axis.values[d], strict=True))
            yield seq, inputs


# -- the file --------------------------------------------------------------------------------

def _target(src: Src, node: yaml.Node, base: str) -> tuple[Target, dict[str, yaml.Node]]:
    """What the sweep runs, and the inputs a ``matmul:`` mapping fixes."""
    fields = src.mapping(node, "run", ("workload", "matmul", "kernel", "args", "max_ops"))
    kinds = [k for k in ("workload", "matmul", "kernel") if k in fields]
    if len(kinds) != 1:
        raise src.fail(node, "run takes exactly one of workload: FILE.yaml, matmul: {m, k, n}"
                             " or kernel: FILE.py:FUNCTION")
    kind = kinds[0]
    value_node = fields[kind][0]
    for key in ("args", "max_ops"):
        if key in fields and kind != "kernel":
            raise src.fail(fields[key][1], f"{key} belong{'s' * (key == 'max_ops')} to a "
                                           f"kernel sweep")
    if kind == "matmul":
        if isinstance(value_node, yaml.ScalarNode) and src.scalar(value_node) is None:
            return matmul_target(), {}
        allowed = ("m", "k", "n", "dtype", "perf_mode", "arch")
        return matmul_target(), {k: v for k, (v, _) in
                                 src.mapping(value_node, "matmul", allowed).items()}
    text = str(src.scalar(value_node))
    if kind == "workload":
        path = os.path.join(base, text)
        try:
            wl = load_workload(path)
        except SystolicError as exc:
            raise src.fail(value_node, f"the workload does not load: {exc}") from None
        return WorkloadTarget(wl, _digest(path)), {}
    file, sep, function = text.rpartition(":")
    if not sep or not file.endswith(".py") or not _NAME.match(function):
        raise src.fail(value_node, f"kernel {text!r} must be FILE.py:FUNCTION")
    path = os.path.normpath(os.path.join(base, file))
    # The file may not exist yet: its points then fail one by one, as any point that
    # cannot run (the digest changes once it appears, so they run again). The digest covers
    # the modules it imports from its folder too.
    digest = kernel_digest(path) if os.path.isfile(path) else "missing"
    if "args" not in fields:
        raise src.fail(node, "a kernel sweep needs args: {NAME: DTYPE[D0, D1, ...]}, the "
                             "kernel's tensor arguments in order")
    args = []
    for arg_name, (arg_node, _) in src.mapping(fields["args"][0], "args",
                                               _AnyKeys()).items():
        m = _ARG.match(str(src.scalar(arg_node)))
        if not m:
            raise src.fail(arg_node, f"argument {arg_name} must be DTYPE[D0, D1, ...], for "
                                     f"example bf16[M, K] with M and K dim.M, dim.K inputs")
        dtype = m.group(1).lower()
        if dtype != "dtype" and dtype not in OPERAND_FORMATS:
            raise src.fail(arg_node, f"unknown dtype {dtype!r} in argument {arg_name}; use a "
                                     f"format or the word dtype (the dtype input)")
        dims: list[str | int] = []
        for tok in (t.strip() for t in m.group(2).split(",")):
            if tok.isdigit() and int(tok) > 0:
                dims.append(int(tok))
            elif _NAME.match(tok):
                dims.append(tok)
            else:
                raise src.fail(arg_node, f"dimension {tok!r} of {arg_name} must be a positive "
                                         f"integer or a name given by a dim.NAME input")
        args.append((str(arg_name), dtype, tuple(dims)))
    max_ops = DEFAULT_MAX_OPS
    if "max_ops" in fields:
        max_ops = src.scalar(fields["max_ops"][0])
        if isinstance(max_ops, bool) or not isinstance(max_ops, int) or max_ops < 1:
            raise src.fail(fields["max_ops"][0], f"max_ops {max_ops!r}: the recording budget "
                                                 f"is a number of NKI operations, at least 1")
    return KernelTarget(path, function, tuple(args), digest, max_ops=max_ops), {}


class _AnyKeys(tuple):  # type: ignore[type-arg]
    """Allows every key in ``YamlSource.mapping`` (argument names are the kernel's)."""

    def __contains__(self, key: object) -> bool:
        return True


def _objective(src: Src, node: yaml.Node | None, figures: tuple[str, ...]) -> Objective:
    if node is None:
        return Objective("latency_us", False)
    if isinstance(node, yaml.MappingNode):
        fields = src.mapping(node, "objective", ("minimize", "maximize"))
        if len(fields) != 1:
            raise src.fail(node, "objective takes one of minimize: FIGURE or maximize: FIGURE")
        (way, (fig_node, _)), = fields.items()
        name, maximize = str(src.scalar(fig_node)), way == "maximize"
    else:
        fig_node = node
        name = str(src.scalar(node))
        maximize = name in MAXIMIZE
    if name not in figures:
        raise src.fail(fig_node, f"unknown objective {name!r}; figures: {', '.join(figures)}")
    return Objective(name, maximize)


def _constraints(src: Src, node: yaml.Node, known: set[str]) -> tuple[Constraint, ...]:
    items = node.value if isinstance(node, yaml.SequenceNode) else None
    if items is None:
        raise src.fail(node, "constraints is a list of \"FIGURE <= NUMBER\" strings")
    out = []
    for item in items:
        text = str(src.scalar(item))
        m = _CONSTRAINT.match(text)
        if not m:
            raise src.fail(item, f"constraint {text!r} must read NAME OP VALUE, OP one of "
                                 f"{' '.join(_OPS)}")
        field, op, raw = m.groups()
        if field not in known:
            raise src.fail(item, f"constraint on {field!r}, which is no input or figure of "
                                 f"this sweep; known: {', '.join(sorted(known))}")
        value: float | str
        try:
            value = float(raw)
        except ValueError:
            if op not in ("==", "!="):
                raise src.fail(item, f"{op} needs a number, got {raw!r}") from None
            value = raw
        out.append(Constraint(field, op, value, text.strip()))
    return tuple(out)


def parse_sweep(text: str, path: str = "<sweep>") -> SweepSpec:
    """Check a sweep file's YAML text; ``path`` names it in errors and anchors the relative
    paths of ``run:``."""
    src = Src(path)
    root = compose(src, text, "a sweep file needs 4 levels (run:, a kernel, its args:, a value)")
    if root is None:
        raise src.fail(1, "the file is empty; expected run:, axes: ... (see examples/sweeps/)")
    top = src.mapping(root, "the sweep", TOP_KEYS)
    if "run" not in top:
        raise src.fail(root, "the sweep has no run: (a workload, a matmul or a kernel)")
    target, fixed_nodes = _target(src, top["run"][0], os.path.dirname(path) or ".")
    name = (str(src.scalar(top["name"][0])) if "name" in top
            else os.path.splitext(os.path.basename(path))[0])
    if "fixed" in top:
        for key, (v, k) in src.mapping(top["fixed"][0], "fixed", _AnyKeys()).items():
            if key in fixed_nodes:
                raise src.fail(k, f"{key} is fixed twice (run: and fixed:)")
            fixed_nodes[key] = v
    fixed: dict[str, Any] = {}
    for key, v in fixed_nodes.items():
        if str(key) in RESERVED:
            raise src.fail(v, f"{key!r} is a column of the results store; rename the input")
        fixed[str(key)] = parse_input(src, v, str(key), target)
    axes: list[Axis] = []
    if "axes" in top:
        axes_node = top["axes"][0]
        if not isinstance(axes_node, yaml.MappingNode):
            raise src.fail(axes_node, "axes must be a mapping of NAME: [values]")
        seen = set(fixed)
        for key_node, value_node in axes_node.value:
            axis = parse_axis(src, key_node, value_node, target)
            for n in axis.names:
                if n in seen:
                    raise src.fail(key_node, f"{n} is given twice (as fixed or as an axis)")
                if n in RESERVED:
                    raise src.fail(key_node, f"{n!r} is a column of the results store")
                seen.add(n)
            axes.append(axis)
    names = {*fixed, *(n for a in axes for n in a.names)}
    run_line = top["run"][0]
    if target.kind == "matmul" and not {"m", "k", "n"} <= names:
        missing = ", ".join(sorted({"m", "k", "n"} - names))
        raise src.fail(run_line, f"a matmul sweep needs m, k and n (fixed or axes); "
                                 f"missing {missing}")
    if isinstance(target, KernelTarget):
        need = {f"dim.{d}" for _, _, dims in target.args for d in dims if isinstance(d, str)}
        need |= {"dtype"} if any(d == "dtype" for _, d, _ in target.args) else set()
        if need - names:
            raise src.fail(run_line, f"the kernel's args use {', '.join(sorted(need - names))}"
                                     f", which no fixed input or axis gives")
    grid = math.prod(a.size for a in axes)
    if grid > MAX_GRID:
        raise src.fail(top["axes"][0], f"the axes make a grid of {grid:.3g} points; at most "
                                       f"{MAX_GRID:.3g} (sample: {{random: N}} draws from it)")
    sample, seed = None, 0
    if "sample" in top:
        node = top["sample"][0]
        if isinstance(node, yaml.ScalarNode) and src.scalar(node) == "grid":
            pass
        else:
            fields = src.mapping(node, "sample", ("random", "seed"))
            if "random" not in fields:
                raise src.fail(node, "sample is grid or {random: N, seed: S}")
            count = src.scalar(fields["random"][0])
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise src.fail(fields["random"][0], "random: takes a positive point count")
            if count > grid:
                raise src.fail(fields["random"][0], f"random: {count} points, but the grid "
                                                    f"has only {grid}; use sample: grid")
            if count > MAX_SAMPLE:
                raise src.fail(fields["random"][0], f"random: {count:,} points; at most "
                                                    f"{MAX_SAMPLE:,} (drawn before the first)")
            sample = count
            if "seed" in fields:
                seed = src.scalar(fields["seed"][0])
                if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
                    raise src.fail(fields["seed"][0], "seed must be a non-negative integer")
                if seed >= 2**128:  # numpy's SeedSequence takes any size; keep keys short
                    raise src.fail(fields["seed"][0], "seed must be below 2**128")
    figures = target_figures(target.kind)
    objective = _objective(src, top["objective"][0] if "objective" in top else None, figures)
    constraints = (_constraints(src, top["constraints"][0], {*figures, *names})
                   if "constraints" in top else ())
    return SweepSpec(path, name, target, fixed, tuple(axes), sample, seed, objective,
                     constraints)


def load_sweep(path: str | os.PathLike[str]) -> SweepSpec:
    """Read and check a sweep file."""
    name, text = read_text(path, "sweep file", SweepError)
    return parse_sweep(text, name)
