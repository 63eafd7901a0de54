"""``systolic sweep FILE.yaml --out RESULTS`` and ``systolic sweep show RESULTS``."""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import re
import signal
import sys
from collections.abc import Iterator
from typing import Any

from ..artifacts import open_artifact
from ..errors import SweepError
from .common import bounded_int, positive_int, positive_seconds, wrote

# A local pool of more processes than this only thrashes a machine of this class (each
# worker imports the model and holds its own Program); also below the OS's semaphore limits
MAX_WORKERS = 1024
# sweep/runner.py DEFAULT_POINT_TIMEOUT (not imported: --help stays fast; a test checks them)
DEFAULT_POINT_TIMEOUT = 600.0

HELP = "run a sweep of many timing runs into a results store, or show one"
DESCRIPTION = """\
Run every point of a sweep file (a grid or a seeded random sample over kernel params,
shapes, dtypes, perf modes, arch presets and Arch fields) and store one row per point in
an SQLite file. Re-running the same command resumes: points already stored are skipped.
A point that fails (a format the arch lacks, an SBUF overflow) is stored with its error.

  systolic sweep FILE.yaml --out RESULTS [--workers N | --dask ADDRESS | --dask local[:N]]
                           [--point-timeout S] [--retry-failed]
  systolic sweep show RESULTS [--top N] [--best-per INPUT,...] [--json] [--csv F] [--all]
                              [--parquet F] [--pareto X,Y] [--plot F.png [--x AXIS] [--y AXIS]]

examples:
  systolic sweep examples/sweeps/blocked_matmul_tune.yaml --out tune.sqlite
  systolic sweep show tune.sqlite --top 5 --best-per dim.M,dim.K,dim.N,arch
  systolic sweep examples/sweeps/swiglu_array_hbm.yaml --out swiglu.sqlite
  systolic sweep show swiglu.sqlite --top 5 --pareto latency_us,max:rows
  systolic sweep show swiglu.sqlite --plot swiglu.png --x rows --y hbm_bytes_per_s
  systolic sweep examples/sweeps/swiglu_array_hbm.yaml --out s.sqlite --dask local:2

The file format is in docs/sweep.md; a bad file gets one line FILE:LINE: what is wrong.
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("sweep", help=HELP, description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("file", metavar="FILE.yaml|show", help="the sweep file, or 'show'")
    p.add_argument("results", nargs="?", metavar="RESULTS", help="with show: the store")
    r = p.add_argument_group("running a sweep")
    r.add_argument("--out", metavar="RESULTS", help="the results store (SQLite file)")
    r.add_argument("--workers", type=bounded_int(MAX_WORKERS, "local processes"), metavar="N",
                   help="local pool size (default: every core)")
    r.add_argument("--dask", metavar="ADDRESS",
                   help="run on a Dask scheduler (tcp://HOST:8786), or local[:N] for a "
                        "LocalCluster of N workers here (needs the dask extra)")
    r.add_argument("--retry-failed", action="store_true",
                   help="run the stored failed points again")
    r.add_argument("--point-timeout", type=positive_seconds, metavar="S",
                   help=f"stop a point after S seconds and store it as failed "
                        f"({DEFAULT_POINT_TIMEOUT:g})")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    s = p.add_argument_group("show")
    s.add_argument("--top", type=positive_int, default=10, metavar="N",
                   help="the N best points by the objective (10)")
    s.add_argument("--best-per", metavar="INPUT,...",
                   help="the best point for each combination of these inputs (for example "
                        "dim.M,dim.K,dim.N,arch: the best block size per shape and arch)")
    s.add_argument("--csv", metavar="F.csv", help="write every row as CSV")
    s.add_argument("--parquet", metavar="F.parquet",
                   help="write every row as Parquet (needs pandas and pyarrow)")
    s.add_argument("--pareto", metavar="X,Y",
                   help="the Pareto front of two figures or inputs (max:NAME to maximise)")
    s.add_argument("--plot", metavar="F.png", help="plot the objective against one or two axes")
    s.add_argument("--x", metavar="AXIS", help="the plot's x axis (default: the first axis)")
    s.add_argument("--y", metavar="AXIS", help="a second axis: the plot is then a heatmap")
    s.add_argument("--all", action="store_true",
                   help="every row of the store, also those of earlier versions of the sweep "
                        "(another kernel file, other args); default: the latest only")
    p.add_argument("--json", action="store_true", help="print one JSON object for scripts")
    p.set_defaults(run=run)


_RUN_ONLY = ("out", "workers", "dask", "retry_failed", "no_progress", "point_timeout")
_SHOW_ONLY = ("csv", "parquet", "pareto", "plot", "x", "y", "best_per", "all")


def run(args: argparse.Namespace) -> int:
    if args.file == "show":
        used = [f"--{a.replace('_', '-')}" for a in _RUN_ONLY if getattr(args, a) is not None
                and getattr(args, a) is not False]
        if used or not args.results:
            raise SweepError("usage: systolic sweep show RESULTS [--top N] ... "
                             + (f"({', '.join(used)} belong to a run)" if used else
                                "(name the store)"))
        return _show(args)
    used = [f"--{a.replace('_', '-')}" for a in _SHOW_ONLY if getattr(args, a) is not None
            and getattr(args, a) is not False]
    if args.results or used:
        raise SweepError(f"{' '.join(used) or args.results}: only with systolic sweep show")
    if not args.out:
        raise SweepError("name the results store: systolic sweep FILE.yaml --out RESULTS")
    if args.dask and args.workers:
        raise SweepError("--workers sizes the local pool; with --dask the cluster has its own")
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    from ..sweep import load_sweep
    from ..sweep.executors import parse_dask
    from ..sweep.runner import execute

    if args.dask:
        parse_dask(args.dask)  # a typo refused before the store is touched
    spec = load_sweep(args.file)
    bar = _progress(spec.size, not args.no_progress and not args.json)
    timeout = DEFAULT_POINT_TIMEOUT if args.point_timeout is None else args.point_timeout
    try:
        with _sigterm_stops(), bar as tick:
            summary = execute(spec, args.out, workers=args.workers, dask=args.dask,
                              retry_failed=args.retry_failed, progress=tick,
                              on_start=bar.start,
                              announce=lambda s: print(s, file=sys.stderr, flush=True),
                              point_timeout=timeout)
    except _Terminated:
        sys.stderr.write(f"systolic: stopped by SIGTERM; the points that finished are in "
                         f"{args.out} (run the same command again to resume)\n")
        return 128 + signal.SIGTERM
    if args.json:
        print(json.dumps({"total": summary.total, "ran": summary.ran,
                          "failed": summary.failed, "skipped": summary.skipped,
                          "seconds": summary.seconds, "points_per_s": summary.rate,
                          "workers": summary.workers, "out": args.out}, indent=2))
    else:
        print(summary.line(args.out))
    return 0


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread. A KeyboardInterrupt (a BaseException), so the
    sweep unwinds as on Ctrl-C and no ``except Exception`` (a serial point's) takes it."""


@contextlib.contextmanager
def _sigterm_stops() -> Iterator[None]:
    """SIGTERM (``kill``, a job scheduler's stop) ends the sweep as Ctrl-C does: the
    workers are stopped, the Dask cluster closed (its semaphores released: no leaked-
    semaphore warning), the store's last transaction rolled back or committed and its WAL
    folded in (no -wal/-shm left). Left to its default, SIGTERM ended the process at once
    and did none of that (issue 22). A second SIGTERM during the clean-up is ignored."""
    def stop(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise _Terminated

    old = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


class _progress:
    """A rich bar on stderr (a terminal only) over the whole sweep: points found in the store
    and points run, failed, rate, ETA."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.enabled = total, enabled and sys.stderr.isatty()
        self.failed = self.done = self.skipped = 0

    def __enter__(self) -> Any:
        if not self.enabled:
            return None
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        self.prog = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TextColumn("{task.fields[failed]} failed"),
                             TextColumn("{task.fields[rate]}"), TextColumn("ETA"),
                             TimeRemainingColumn(), console=Console(stderr=True),
                             transient=True)
        self.prog.__enter__()
        self.task = self.prog.add_task("sweep", total=self.total, failed=0, rate="")
        return self.tick

    def start(self, total: int, stored: int) -> None:
        if self.enabled:
            label = f"sweep ({stored:,} rows in the store)" if stored else "sweep"
            self.prog.update(self.task, total=total, description=label)

    def tick(self, n: int, failed: int, skipped: int = 0) -> None:
        self.failed += failed
        self.skipped += skipped
        self.prog.advance(self.task, n + skipped)
        if skipped:
            self.prog.update(self.task, description=f"sweep ({self.skipped:,} already done)")
        speed = self.prog.tasks[0].speed
        self.prog.update(self.task, failed=self.failed,
                         rate=f"{speed:,.1f} pts/s" if speed else "")

    def __exit__(self, *exc: Any) -> None:
        if self.enabled:
            self.prog.__exit__(*exc)


def _show(args: argparse.Namespace) -> int:
    from ..sweep.analysis import best, best_per, feasible, objective_of, pareto
    from ..sweep.store import read_store

    if args.plot:
        from ..views.plots import check_plot_path

        check_plot_path(args.plot)
    elif args.x is not None or args.y is not None:
        raise SweepError(f"{'--x' if args.x is not None else '--y'} sets an axis of the plot; "
                         f"add --plot F.png")
    groups = ([n.strip() for n in args.best_per.split(",")] if args.best_per is not None
              else [])
    if args.best_per is not None and (not groups or not all(groups)):
        raise SweepError(f"--best-per {args.best_per!r}: name inputs, INPUT,... (for example "
                         f"dim.M,arch)")
    view = read_store(args.results, every=args.all,
                      notice=lambda s: print(f"systolic: {s}", file=sys.stderr, flush=True))
    rows, meta = view.rows, view.meta
    if not rows:
        raise SweepError(f"{args.results}: the store has no points yet"
                         + (f" of its latest sweep ({view.hidden:,} rows of earlier versions; "
                            f"--all shows them)" if view.hidden else ""))
    obj = objective_of(meta)
    ok = feasible(rows, meta)
    top = best(rows, meta, args.top)
    front: list[dict[str, Any]] = []
    if args.pareto:
        names = [n.strip() for n in args.pareto.split(",")]
        if len(names) != 2:
            raise SweepError(f"--pareto {args.pareto}: name two figures, X,Y")
        front = pareto(rows, meta, names[0], names[1])
    per = best_per(rows, meta, groups) if groups else []
    for r, f in zip(rows, ok, strict=True):
        r["feasible"] = bool(f)
    if args.csv:
        _write_csv(rows, args.csv)
    if args.parquet:
        _write_parquet(rows, args.parquet)
    if args.plot:
        from ..sweep.plot import sweep_plot

        sweep_plot(rows, meta, args.plot, x=args.x, y=args.y,
                   pareto_of=args.pareto.split(",") if args.pareto else None)
    failed = sum(r["status"] != "ok" for r in rows)
    if args.json:
        print(json.dumps({"name": meta.get("name"), "points": len(rows), "failed": failed,
                          "hidden": view.hidden,
                          "feasible": int(ok.sum()), "objective": meta.get("objective"),
                          "best": top, "pareto": front,
                          **({"best_per": {"inputs": groups, "rows": per}} if groups else {})},
                         indent=2, default=str))
    else:
        _print_best(rows, meta, top, front, failed, int(ok.sum()), obj.figure, args, groups,
                    per, view.hidden)
    for path, what in ((args.csv, f"CSV, {len(rows):,} rows"),
                       (args.parquet, f"Parquet, {len(rows):,} rows"),
                       (args.plot, f"plot of {obj.figure}")):
        if path:
            wrote(path, what, json_mode=args.json)
    return 0


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(k for r in rows for k in r))


def _write_csv(rows: list[dict[str, Any]], path: str) -> None:
    with open_artifact(path, "CSV") as f:
        w = csv.DictWriter(f, fieldnames=_columns(rows), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


def _write_parquet(rows: list[dict[str, Any]], path: str) -> None:
    try:
        import pandas as pd
        import pyarrow  # noqa: F401
    except ImportError:
        raise SweepError("--parquet needs pandas and pyarrow: pip install "
                         "'systolic[parquet]'") from None
    with open_artifact(path, "Parquet file", binary=True) as f:
        pd.DataFrame(rows, columns=_columns(rows)).to_parquet(f, index=False)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _print_best(rows: list[dict[str, Any]], meta: dict[str, Any], top: list[dict[str, Any]],
                front: list[dict[str, Any]], failed: int, n_ok: int, figure: str,
                args: argparse.Namespace, groups: list[str], per: list[dict[str, Any]],
                hidden: int) -> None:
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    from .common import print_rich

    out: list[Any] = []  # printed at the width the widest table needs: no cell is cut
    varied = [n for n in meta.get("inputs", [])
              if len({str(r.get(n)) for r in rows}) > 1] or list(meta.get("inputs", []))[:4]
    extra = [f for f in ("latency_us", "hfu", "bound", "sbuf_bytes")
             if f != figure and any(f in r for r in top)][:3]
    way = "max" if meta.get("objective", {}).get("maximize") else "min"

    def table(title: str, picked: list[dict[str, Any]], cols: list[str]) -> Table:
        t = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left")
        for c in ["#", *cols]:  # dim.M -> M, param.X -> X: the table stays readable
            t.add_column(c.removeprefix("param.").removeprefix("dim."),
                         justify="left" if c in varied else "right", no_wrap=True)
        for i, r in enumerate(picked, 1):
            t.add_row(str(i), *(_fmt(r.get(c, "")) for c in cols))
        return t

    out.append(escape(f"{meta.get('name', args.results)}: {len(rows):,} points, {failed:,} "
                      f"failed, {n_ok:,} feasible; objective {way} {figure}"
                      + (f"; constraints: {', '.join(meta['constraints'])}"
                         if meta.get("constraints") else "")
                      + (f"; {hidden:,} rows of earlier versions of the sweep not shown "
                         f"(--all shows them)" if hidden else "")))
    # errors that differ only in their numbers (byte counts, lines) are one kind
    kinds: dict[str, list[Any]] = {}
    for r in rows:
        if r["status"] != "ok":
            text = str(r.get("error"))
            kind = kinds.setdefault(re.sub(r"\d[\d,.]*", "#", text), [0, text])
            kind[0] += 1
    for count, text in sorted(kinds.values(), key=lambda e: -e[0])[:4]:
        out.append(escape(f"  {count:,} failed{' like' if count > 1 else ''}: {text}"))
    if top:
        out.append(table(f"best {len(top)} by {figure}", top, [*varied, figure, *extra]))
    if groups:
        rest = [n for n in varied if n not in groups]
        out.append(table(f"best by {figure} per {', '.join(groups)} ({len(per)} groups)", per,
                        [*groups, *rest, figure, *extra]))
    if args.pareto:
        x, y = (n.split(":")[-1] for n in args.pareto.split(","))
        cols = list(dict.fromkeys([*varied, x, y]))
        out.append(table(f"Pareto front of {args.pareto} ({len(front)} points)", front, cols))
    print_rich(*out)
