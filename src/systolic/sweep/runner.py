"""Run a sweep into a store: skip what is done, run the rest, write each result as it lands.

Resuming is the normal path, not a special one: a point's key is the hash of its inputs,
its target and the project version (:func:`~systolic.sweep.store.point_key`), and every
point whose key is in the store is skipped. A sweep killed at any moment therefore loses
only the points in flight, and the next run does exactly those.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import SweepError
from ..version import __version__
from .evaluate import KernelTarget
from .executors import (
    chunked,
    dask_client,
    dask_workers,
    default_workers,
    run_dask,
    run_pool,
    run_serial,
)
from .spec import SweepSpec
from .store import Store, point_key

__all__ = ["Summary", "execute", "spec_meta"]

Progress = Callable[[int, int], None]  # (points finished now, of which failed)


@dataclass(frozen=True, slots=True)
class Summary:
    total: int
    skipped: int
    ran: int
    failed: int
    seconds: float
    workers: int
    where: str

    @property
    def rate(self) -> float:
        return self.ran / self.seconds if self.seconds > 0 else 0.0

    def line(self, out: str) -> str:
        return (f"{self.ran:,} point{'s' * (self.ran != 1)} run ({self.failed:,} failed), "
                f"{self.skipped:,} already in the store, {self.total:,} in the sweep; "
                f"{self.seconds:.1f} s on {self.where} ({self.rate:,.1f} points/s); "
                f"results in {out}")


def spec_meta(spec: SweepSpec) -> dict[str, Any]:
    """What ``sweep show`` needs to know about the sweep, stored beside the rows."""
    t = spec.target
    what = (f"{t.path}:{t.function}" if isinstance(t, KernelTarget) else
            t.workload.path if t.kind == "workload" else "matmul")
    return {"name": spec.name, "file": spec.path, "target": {"kind": t.kind, "what": what},
            "inputs": spec.input_names, "axes": [list(a.names) for a in spec.axes],
            "objective": {"figure": spec.objective.figure, "maximize": spec.objective.maximize},
            "constraints": [c.text for c in spec.constraints], "version": __version__}


def execute(spec: SweepSpec, out: str | os.PathLike[str], *, workers: int | None = None,
            dask: Any = None, retry_failed: bool = False, progress: Progress | None = None,
            announce: Callable[[str], None] | None = None, executor: str | None = None,
            dask_processes: bool = True, on_start: Callable[[int, int], None] | None = None
            ) -> Summary:
    """Run every point of ``spec`` not yet in the store ``out``.

    ``executor`` is ``serial``, ``pool`` (default) or ``dask`` (default when ``dask`` is an
    address, ``local[:N]`` or a ``distributed.Client``). ``on_start(to_run, skipped)`` is
    called once the store has been read, ``progress(n, failed)`` as results are written;
    ``announce`` gets one-line notices (the Dask dashboard link)."""
    path = os.fspath(out)
    kind = executor or ("dask" if dask is not None else "pool")
    if kind not in ("serial", "pool", "dask"):
        raise SweepError(f"unknown executor {kind!r}; use serial, pool or dask")
    with Store(path) as store:
        meta = store.meta()
        new_meta = spec_meta(spec)
        if meta and meta.get("target") != new_meta["target"]:
            old = meta["target"]
            raise SweepError(f"{path} holds the results of another sweep ({old['kind']} "
                             f"{old['what']}); use another --out for this one")
        store.set_meta(**new_meta)
        fingerprint = spec.target.fingerprint()
        done = store.done(include_failed=not retry_failed)
        todo: list[tuple[str, dict[str, Any]]] = []
        seqs: dict[str, int] = {}
        inputs_of: dict[str, dict[str, Any]] = {}
        for seq, inputs in spec.points():
            key = point_key(__version__, fingerprint, inputs)
            if key in done or key in seqs:
                continue
            seqs[key] = seq
            inputs_of[key] = inputs
            todo.append((key, inputs))
        skipped = spec.size - len(todo)
        if on_start is not None:
            on_start(len(todo), skipped)
        t0 = time.perf_counter()
        failed = 0
        with _results(kind, spec, todo, workers, dask, announce, dask_processes) as (results, n):
            for chunk in results:
                store.write([(seqs[r["key"]], inputs_of[r["key"]], r) for r in chunk])
                bad = sum(r["status"] != "ok" for r in chunk)
                failed += bad
                if progress is not None:
                    progress(len(chunk), bad)
        where = {"serial": "this process", "pool": f"a local pool of {n}",
                 "dask": f"Dask ({n} workers)"}[kind]
        return Summary(spec.size, skipped, len(todo), failed, time.perf_counter() - t0, n,
                       where)


@contextlib.contextmanager
def _results(kind: str, spec: SweepSpec, todo: list[tuple[str, dict[str, Any]]],
             workers: int | None, dask: Any, announce: Callable[[str], None] | None,
             processes: bool) -> Iterator[tuple[Generator[list[dict[str, Any]], None, None], int]]:
    """The executor's stream of result chunks and its worker count, closed on exit."""
    if kind == "serial":
        serial = run_serial(spec.target, chunked(todo, 1))
        yield serial, 1
        serial.close()
        return
    if kind == "pool":
        n = workers or default_workers()
        if n < 1:
            raise SweepError(f"--workers {n}: need at least 1")
        gen = run_pool(spec.target, chunked(todo, n), n)
        try:
            yield gen, n
        finally:
            gen.close()
        return
    with dask_client(dask if dask is not None else "local", processes=processes,
                     announce=announce) as client:
        n = dask_workers(client)
        gen = run_dask(spec.target, chunked(todo, n), client)
        try:
            yield gen, n
        finally:
            gen.close()
