"""Where points run: in this process, on a local process pool, or on a Dask cluster.

Each executor takes chunks of ``(key, inputs)`` and yields the results of
:func:`~systolic.sweep.evaluate.evaluate_chunk` as chunks finish, in any order. Only the
parent writes the store (workers return results), and at most a few chunks per worker are
in flight, so a sweep of millions of points never holds millions of futures.

* ``serial``: no pool (tests, one-point debugging);
* ``pool``: :class:`concurrent.futures.ProcessPoolExecutor`, ``workers`` processes
  (default: every core);
* ``dask``: a ``distributed.Client`` on a scheduler address, or ``local[:N]`` for a
  ``LocalCluster`` of N single-threaded worker processes (default 2) started here.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.context
import os
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

from ..errors import SweepError
from .evaluate import Target, evaluate_chunk

__all__ = ["Chunk", "chunked", "run_dask", "run_pool", "run_serial"]

Chunk = list[tuple[str, dict[str, Any]]]
Results = Generator[list[dict[str, Any]], None, None]
# Chunks in flight per worker: enough to hide the round trip, few enough to lose little work
# when the sweep is killed.
_IN_FLIGHT = 3


def chunked(items: list[tuple[str, dict[str, Any]]], workers: int) -> list[Chunk]:
    """Chunks of about 1/16 of each worker's share, 1 to 32 points: big enough to amortise a
    task's overhead, small enough to balance the load and show progress."""
    size = max(1, min(32, len(items) // (16 * max(workers, 1))))
    return [items[i:i + size] for i in range(0, len(items), size)]


def run_serial(target: Target, chunks: Iterable[Chunk]) -> Results:
    for chunk in chunks:
        yield evaluate_chunk(target, chunk)


def _bounded(submit: Callable[[Chunk], Any], chunks: Iterable[Chunk], limit: int,
             wait_one: Callable[[set[Any]], tuple[set[Any], set[Any]]]) -> Results:
    pending: set[Any] = set()
    it = iter(chunks)
    for chunk in it:
        pending.add(submit(chunk))
        if len(pending) >= limit:
            break
    while pending:
        finished, pending = wait_one(pending)
        for fut in finished:
            yield fut.result()
            nxt = next(it, None)
            if nxt is not None:
                pending.add(submit(nxt))


def _context() -> multiprocessing.context.BaseContext:
    """forkserver where there is one: a plain fork would copy the parent's threads' locks
    (the progress bar's, a Dask client's) in whatever state they are; the server preloads
    the evaluator once, so each worker starts warm."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["systolic.sweep.evaluate"])
        return ctx
    return multiprocessing.get_context("spawn")


def _watch_parent(pid: int) -> None:
    """Runs in each pool worker: exit once the sweep's process is gone. A worker blocked on
    its task queue would otherwise outlive a parent killed with SIGKILL."""
    def watch() -> None:
        while True:
            time.sleep(1.0)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                os._exit(1)
            except PermissionError:  # the pid was reused by another user's process
                os._exit(1)

    threading.Thread(target=watch, name="watch-parent", daemon=True).start()


def run_pool(target: Target, chunks: Iterable[Chunk], workers: int) -> Results:
    with ProcessPoolExecutor(max_workers=workers, mp_context=_context(),
                             initializer=_watch_parent, initargs=(os.getpid(),)) as pool:
        def submit(chunk: Chunk) -> Future[list[dict[str, Any]]]:
            return pool.submit(evaluate_chunk, target, chunk)

        def wait_one(pending: set[Any]) -> tuple[set[Any], set[Any]]:
            done, not_done = wait(pending, return_when=FIRST_COMPLETED)
            return set(done), set(not_done)

        try:
            yield from _bounded(submit, chunks, _IN_FLIGHT * workers, wait_one)
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise


def parse_dask(address: str) -> tuple[str | None, int]:
    """``local`` / ``local:N`` -> (None, N); anything else is a scheduler address."""
    if address == "local" or address.startswith("local:"):
        text = address.partition(":")[2] or "2"
        if not text.isdigit() or int(text) < 1:
            raise SweepError(f"--dask {address}: local:N needs a positive worker count")
        return None, int(text)
    return address, 0


@contextlib.contextmanager
def dask_client(address: str | Any, *, processes: bool = True,
                announce: Callable[[str], None] | None = None) -> Iterator[Any]:
    """A ``distributed.Client``: an existing one passed in, one on ``address``, or one on a
    LocalCluster for ``local[:N]`` (closed on exit)."""
    if not isinstance(address, str):
        yield address
        return
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise SweepError("--dask needs Dask distributed: pip install 'systolic[dask]'") from None
    where, n = parse_dask(address)
    with contextlib.ExitStack() as stack:
        if where is None:
            cluster = stack.enter_context(LocalCluster(
                n_workers=n, threads_per_worker=1, processes=processes,
                dashboard_address=":0", silence_logs=40))
            client = stack.enter_context(Client(cluster))
        else:
            try:
                client = stack.enter_context(Client(where, timeout="10s"))
            except (OSError, TimeoutError) as exc:
                raise SweepError(f"--dask {where}: cannot reach the scheduler ({exc})") from None
        if announce is not None:
            announce(f"dask: {len(client.scheduler_info().get('workers', {}))} workers, "
                     f"dashboard {client.dashboard_link}")
        yield client


def dask_workers(client: Any) -> int:
    return max(1, sum(w.get("nthreads", 1)
                      for w in client.scheduler_info().get("workers", {}).values()))


def run_dask(target: Target, chunks: Iterable[Chunk], client: Any) -> Results:
    from distributed import wait as dwait

    # The target is sent once and shared by every task (not pickled per chunk).
    [shared] = client.scatter([target], broadcast=True)

    def submit(chunk: Chunk) -> Any:
        return client.submit(evaluate_chunk, shared, chunk, pure=False)

    def wait_one(pending: set[Any]) -> tuple[set[Any], set[Any]]:
        done, not_done = dwait(list(pending), return_when="FIRST_COMPLETED")
        return set(done), set(not_done)

    yield from _bounded(submit, chunks, _IN_FLIGHT * dask_workers(client), wait_one)


def default_workers() -> int:
    """Every core this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
