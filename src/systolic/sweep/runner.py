"""Run a sweep into a store: skip what is done, run the rest, write each result as it lands.

Resuming is the normal path, not a special one: a point's key is the hash of its inputs,
its target's fingerprint (the workload's or kernel's file, the modules a kernel imports from
its folder, the kernel's args) and the project version
(:func:`~systolic.sweep.store.point_key`), and every point whose key is in the store is
skipped. A sweep killed at any moment therefore loses only the points in flight, and the
next run does exactly those. Points are streamed: keys are hashed as the executor asks for
work, so the first point of a billion-point grid runs at once (issue 22 H3).

The store keeps one sweep (its name and target; another is refused). Its definition's
digest, :func:`sweep_id`, marks the rows it ran or found done, so that readers show only the
rows of the latest definition: an edited kernel or new args leave the old rows in the file,
out of the ranking (``show --all`` shows them).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any

from ..errors import SweepError
from ..version import __version__
from .axes import RangeValues
from .evaluate import KernelTarget
from .executors import (
    chunk_size,
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

__all__ = ["DEFAULT_POINT_TIMEOUT", "Summary", "execute", "spec_meta", "sweep_id"]

# (points finished now, of which failed, points found already done now)
Progress = Callable[[int, int, int], None]
# Seconds one point may run: far above the slowest public point (docs/sweep.md: a kernel
# point takes 0.5 s at most, a SwiGLU point of the architect's sweep about 3 s), low enough
# that a kernel stuck in a loop costs minutes, not the night (issue 22 H4).
DEFAULT_POINT_TIMEOUT = 600.0
# Rows found done are marked as the current sweep's this many at a time (one transaction).
_CLAIM_BATCH = 4096
# finished points are stored at most this long after they finish, in one transaction per
# batch: a transaction per point (the serial executor's chunks are single points) cost
# ~60 us of a ~1 ms point in BEGIN and COMMIT (issue 20); a killed run loses at most this
# long of work, which a rerun computes again (the store never holds half a batch)
WRITE_EVERY_S = 0.25


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


def sweep_id(spec: SweepSpec) -> str:
    """A digest of everything that decides the sweep's set of point keys: the version, the
    target's fingerprint, the fixed inputs, every axis's values (a range by its formula),
    the sample. Equal ids, equal points."""
    axes = [[list(a.names), a.values.describe() if isinstance(a.values, RangeValues)
             else [list(v) for v in a.values]] for a in spec.axes]
    text = json.dumps({"version": __version__, "target": spec.target.fingerprint(),
                       "fixed": spec.fixed, "axes": axes, "sample": spec.sample,
                       "seed": spec.seed}, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def spec_meta(spec: SweepSpec) -> dict[str, Any]:
    """What ``sweep show`` needs to know about the sweep, stored beside the rows."""
    t = spec.target
    what = (f"{t.path}:{t.function}" if isinstance(t, KernelTarget) else
            t.workload.path if t.kind == "workload" else "matmul")
    return {"name": spec.name, "file": spec.path, "target": {"kind": t.kind, "what": what},
            "inputs": spec.input_names, "axes": [list(a.names) for a in spec.axes],
            "objective": {"figure": spec.objective.figure, "maximize": spec.objective.maximize},
            "constraints": [c.text for c in spec.constraints], "version": __version__,
            "sweep_id": sweep_id(spec), "size": spec.size}


def execute(spec: SweepSpec, out: str | os.PathLike[str], *, workers: int | None = None,
            dask: Any = None, retry_failed: bool = False, progress: Progress | None = None,
            announce: Callable[[str], None] | None = None, executor: str | None = None,
            dask_processes: bool = True, on_start: Callable[[int, int], None] | None = None,
            point_timeout: float | None = DEFAULT_POINT_TIMEOUT) -> Summary:
    """Run every point of ``spec`` not yet in the store ``out``.

    ``executor`` is ``serial``, ``pool`` (default) or ``dask`` (default when ``dask`` is an
    address, ``local[:N]`` or a ``distributed.Client``). ``on_start(points, stored)`` is
    called once the store has been read (the sweep's size, the rows already in the store);
    ``progress(ran, failed, skipped)`` as points are found done or results are written;
    ``announce`` gets one-line notices (the Dask dashboard link). A point running longer than
    ``point_timeout`` seconds (None: no limit) is stopped and stored as failed.

    A store holding another sweep (another name or target) is refused."""
    path = os.fspath(out)
    kind = executor or ("dask" if dask is not None else "pool")
    if kind not in ("serial", "pool", "dask"):
        raise SweepError(f"unknown executor {kind!r}; use serial, pool or dask")
    if point_timeout is not None and not 0 < point_timeout < float("inf"):
        raise SweepError(f"point timeout {point_timeout!r}: give a number of seconds above 0")
    if kind == "pool" and workers is not None and workers < 1:
        raise SweepError(f"--workers {workers}: need at least 1")
    with Store(path, notice=announce) as store:
        meta = store.meta()
        new_meta = spec_meta(spec)
        if meta and ((meta.get("name"), meta.get("target"))
                     != (new_meta["name"], new_meta["target"])):
            old = meta.get("target") or {}
            was, what = old.get("kind"), old.get("what")
            raise SweepError(f"{path} holds the results of another sweep ({meta.get('name')!r}:"
                             f" {was if what == was else f'{was} {what}'}); use another "
                             f"--out for this one")
        sid = new_meta["sweep_id"]
        store.set_meta(**new_meta)
        fingerprint = spec.target.fingerprint()
        stored = store.stored()
        if on_start is not None:
            on_start(spec.size, len(stored))
        inflight: dict[str, tuple[int, dict[str, Any]]] = {}
        count = {"skipped": 0, "ran": 0, "failed": 0}

        def todo() -> Iterator[tuple[str, dict[str, Any]]]:
            claim: list[str] = []
            skipped = 0
            for seq, inputs in spec.points():
                key = point_key(__version__, fingerprint, inputs)
                got = stored.get(key)
                if got is not None and (got[0] or not retry_failed):
                    skipped += 1
                    if got[1] != sid:
                        claim.append(key)
                    if len(claim) >= _CLAIM_BATCH or skipped >= _CLAIM_BATCH:
                        store.claim(claim, sid)
                        claim.clear()
                        count["skipped"] += skipped
                        if progress is not None:
                            progress(0, 0, skipped)
                        skipped = 0
                    continue
                inflight[key] = (seq, inputs)
                yield key, inputs
            store.claim(claim, sid)
            count["skipped"] += skipped
            if progress is not None and skipped:
                progress(0, 0, skipped)

        t0 = time.perf_counter()
        estimate = max(spec.size - len(stored), 1)
        done: list[tuple[int, dict[str, Any], dict[str, Any]]] = []
        last = [time.perf_counter()]

        def flush() -> None:
            """Store the finished points held, in one transaction."""
            batch = done.copy()
            done.clear()  # cleared first: a write that fails is not tried again
            if batch:
                store.write(batch, sid)
            last[0] = time.perf_counter()

        with _results(kind, spec, todo(), estimate, workers, dask, announce, dask_processes,
                      point_timeout) as (results, n):
            try:
                for chunk in results:
                    done.extend((*inflight.pop(r["key"]), r) for r in chunk)
                    bad = sum(r["status"] != "ok" for r in chunk)
                    count["ran"] += len(chunk)
                    count["failed"] += bad
                    if time.perf_counter() - last[0] >= WRITE_EVERY_S:
                        flush()
                    if progress is not None:
                        progress(len(chunk), bad, 0)
            except BaseException:
                # stopped (Ctrl-C, SIGTERM, a progress callback, a failing executor): the
                # points that finished still go in; the error is the one that stopped it
                with contextlib.suppress(Exception):
                    flush()
                raise
            flush()
        where = {"serial": "this process", "pool": f"a local pool of {n}",
                 "dask": f"Dask ({n} workers)"}[kind]
        return Summary(spec.size, count["skipped"], count["ran"], count["failed"],
                       time.perf_counter() - t0, n, where)


@contextlib.contextmanager
def _results(kind: str, spec: SweepSpec, todo: Iterator[tuple[str, dict[str, Any]]],
             estimate: int, workers: int | None, dask: Any,
             announce: Callable[[str], None] | None, processes: bool, timeout: float | None
             ) -> Iterator[tuple[Generator[list[dict[str, Any]], None, None], int]]:
    """The executor's stream of result lists and its worker count, closed on exit."""
    if kind == "serial":
        serial = run_serial(spec.target, chunked(todo, 1), timeout)
        try:
            yield serial, 1
        finally:
            serial.close()
        return
    if kind == "pool":
        n = workers or default_workers()
        gen = run_pool(spec.target, chunked(todo, chunk_size(estimate, n)), n, timeout)
        try:
            yield gen, n
        finally:
            gen.close()
        return
    with dask_client(dask if dask is not None else "local", processes=processes,
                     announce=announce) as client:
        n = dask_workers(client)
        gen = run_dask(spec.target, chunked(todo, chunk_size(estimate, n)), client, timeout)
        try:
            yield gen, n
        finally:
            gen.close()
