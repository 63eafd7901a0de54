"""Where points run: in this process, on a local process pool, or on a Dask cluster.

Each executor takes chunks of ``(key, inputs)`` (a stream: a grid of a billion points is
never listed) and yields lists of results of :func:`~systolic.sweep.evaluate.evaluate_one`
as points finish, in any order. Only the parent writes the store (workers return results),
and at most a few chunks per worker are in flight, so a sweep of millions of points never
holds millions of futures. Every point has a time limit (``timeout`` seconds, None for none).

* ``serial``: no pool (tests, one-point debugging); a point that ends the process (a
  kernel calling ``os._exit``) ends the sweep too;
* ``pool``: ``workers`` processes of our own (default: every core), each fed one chunk at a
  time through a pipe and answering point by point. A worker that dies inside a point (a
  kernel calling ``os._exit``, a segfault, the OOM killer) costs that point only: it is
  stored as failed with the exit status, a new worker takes the rest of the chunk. A worker
  that does not stop at its time limit (stuck inside a C call) is killed a few seconds later;
* ``dask``: a ``distributed.Client`` on a scheduler address, or ``local[:N]`` for a
  ``LocalCluster`` of N single-threaded worker processes (default 2) started here; a task
  the cluster gives up on (its worker died, ``KilledWorker``) is stored as failed points.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import multiprocessing
import multiprocessing.context
import multiprocessing.process
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from multiprocessing.connection import Connection, wait
from typing import Any

from ..errors import SweepError
from .evaluate import Target, evaluate_chunk, evaluate_one
from .watchdog import timeout_error

__all__ = ["Chunk", "chunk_size", "chunked", "run_dask", "run_pool", "run_serial"]

Chunk = list[tuple[str, dict[str, Any]]]
Results = Generator[list[dict[str, Any]], None, None]
# Chunks in flight per worker: enough to hide the round trip, few enough to lose little work
# when the sweep is killed.
_IN_FLIGHT = 3
_POLL_S = 0.01  # seconds between looks at the Dask futures in flight (a point takes ms)


def chunk_size(estimate: int, workers: int) -> int:
    """About 1/16 of each worker's share of ``estimate`` points, 1 to 32: big enough to
    amortise a task's overhead, small enough to balance the load and show progress."""
    return max(1, min(32, estimate // (16 * max(workers, 1))))


def chunked(items: Iterable[tuple[str, dict[str, Any]]], size: int) -> Iterator[Chunk]:
    """``items`` in lists of ``size``, taken from the stream as they are needed."""
    it = iter(items)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


def run_serial(target: Target, chunks: Iterable[Chunk], timeout: float | None = None
               ) -> Results:
    for chunk in chunks:
        yield evaluate_chunk(target, chunk, timeout)


def _bounded(submit: Callable[[Chunk], Any], chunks: Iterable[Chunk], limit: int,
             wait_one: Callable[[set[Any]], tuple[set[Any], set[Any]]],
             result: Callable[[Any], list[dict[str, Any]]]) -> Results:
    pending: set[Any] = set()
    it = iter(chunks)
    for chunk in it:
        pending.add(submit(chunk))
        if len(pending) >= limit:
            break
    while pending:
        finished, pending = wait_one(pending)
        for fut in finished:
            yield result(fut)
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


def _worker(conn: Connection, target: Target, parent: int, timeout: float | None) -> None:
    """A pool worker: take a chunk, send each point's result as it finishes; None stops."""
    _watch_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    while True:
        try:
            chunk = conn.recv()
        except (EOFError, OSError):
            return
        if chunk is None:
            return
        for key, inputs in chunk:
            result = evaluate_one(target, key, inputs, timeout)
            try:
                conn.send(result)
            except OSError:  # the sweep is gone (stopped, killed): nobody to answer
                return


# A worker past its point's time limit by this much more is killed: the limit's own
# exception cannot stop a long call into C (a huge numpy operation) until it returns.
KILL_GRACE_S = 5.0


def _died(proc: multiprocessing.process.BaseProcess, key: str, elapsed: float
          ) -> dict[str, Any]:
    proc.join(1.0)
    code = proc.exitcode
    how = (f"was killed by signal {-code} (out of memory?)" if code is not None and code < 0
           else f"exited with status {code} (os._exit, sys.exit in a thread or a crash)")
    return {"key": key, "status": "failed", "elapsed_s": elapsed, "figures": {},
            "error": f"the point's worker process {how} before the point returned; the "
                     f"sweep went on without it"}


class _Slot:
    """One worker process and the chunk it is running."""

    def __init__(self, ctx: multiprocessing.context.BaseContext, target: Target,
                 timeout: float | None) -> None:
        self.conn, child = ctx.Pipe(duplex=True)
        process: Any = ctx.Process  # type: ignore[attr-defined]
        self.proc = process(target=_worker, args=(child, target, os.getpid(), timeout),
                            daemon=True, name="sweep-worker")
        self.proc.start()
        child.close()
        self.chunk: Chunk = []
        self.got: list[dict[str, Any]] = []
        self.since = time.monotonic()  # when the point now running started

    def give(self, chunk: Chunk) -> None:
        self.chunk, self.got, self.since = chunk, [], time.monotonic()
        self.conn.send(chunk)

    def stop(self, kill: bool) -> None:
        if kill:
            self.proc.kill()
        else:
            with contextlib.suppress(OSError):
                self.conn.send(None)
        self.proc.join(0 if kill else 2.0)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(1.0)
        self.conn.close()


def run_pool(target: Target, chunks: Iterable[Chunk], workers: int,
             timeout: float | None = None) -> Results:
    ctx = _context()
    queue: collections.deque[Chunk] = collections.deque()
    it = iter(chunks)

    def next_chunk() -> Chunk | None:
        if queue:
            return queue.popleft()
        return next(it, None)

    slots: list[_Slot] = []
    try:
        while len(slots) < workers and (chunk := next_chunk()) is not None:
            slot = _Slot(ctx, target, timeout)
            slot.give(chunk)
            slots.append(slot)
        while slots:
            ready = set(wait([s.conn for s in slots] + [s.proc.sentinel for s in slots],
                             timeout=0.5))
            now = time.monotonic()
            for slot in list(slots):
                at = slots.index(slot)
                out: list[dict[str, Any]] = []
                dead = False
                if slot.conn in ready or slot.proc.sentinel in ready:
                    try:
                        while slot.conn.poll():
                            out.append(slot.conn.recv())
                    except (EOFError, OSError):
                        dead = True
                    dead = dead or not slot.proc.is_alive()
                slot.got.extend(out)
                if out:
                    slot.since = now
                busy = len(slot.got) < len(slot.chunk)
                stuck = busy and timeout is not None and now - slot.since > timeout + KILL_GRACE_S
                if busy and (dead or stuck):  # that point is lost; the rest goes on
                    key = slot.chunk[len(slot.got)][0]
                    if stuck:
                        slot.proc.kill()
                        out.append({"key": key, "status": "failed", "figures": {},
                                    "elapsed_s": now - slot.since,
                                    "error": timeout_error(timeout or 0.0, "a call that never "
                                                           "returned (its worker was killed)")})
                    else:
                        out.append(_died(slot.proc, key, now - slot.since))
                    rest = slot.chunk[len(slot.got) + 1:]
                    if rest:
                        queue.appendleft(rest)
                if dead or stuck:
                    slot.stop(kill=True)
                    slot = slots[at] = _Slot(ctx, target, timeout)
                if out:
                    yield out
                if len(slot.got) >= len(slot.chunk):  # idle: the next chunk, or stop
                    nxt = next_chunk()
                    if nxt is None:
                        slot.stop(kill=False)
                        slots.remove(slot)
                    else:
                        slot.give(nxt)
    finally:
        for slot in slots:
            slot.stop(kill=True)


# A LocalCluster of more worker processes than this only thrashes one machine (as the pool's
# --workers bound, commands/sweep.py MAX_WORKERS).
MAX_LOCAL_DASK = 1024
_ADDRESS = re.compile(r"^(?:(tcp|tls|ucx|inproc|ws|wss)://)?(\[[0-9a-fA-F:]+\]|[\w.-]+):(\d{1,5})$")


def parse_dask(address: str) -> tuple[str | None, int]:
    """``local`` / ``local:N`` -> (None, N); else a scheduler address ``[PROTOCOL://]HOST:
    PORT`` (PROTOCOL one of Dask's: tcp, tls, ucx, inproc, ws, wss), checked here so that a
    typo is one line, not Dask's traceback."""
    if address == "local" or address.startswith("local:"):
        text = address.partition(":")[2] or "2"
        if not text.isdigit() or not 1 <= int(text) <= MAX_LOCAL_DASK:
            raise SweepError(f"--dask {address}: local:N needs a worker count from 1 to "
                             f"{MAX_LOCAL_DASK:,}")
        return None, int(text)
    m = _ADDRESS.match(address)
    if m is None or not 0 < int(m.group(3)) < 65536:
        raise SweepError(f"--dask {address!r}: expected local, local:N or a scheduler "
                         f"address such as tcp://HOST:8786")
    return address, 0


@contextlib.contextmanager
def dask_client(address: str | Any, *, processes: bool = True,
                announce: Callable[[str], None] | None = None) -> Iterator[Any]:
    """A ``distributed.Client``: an existing one passed in, one on ``address``, or one on a
    LocalCluster for ``local[:N]`` (closed on exit)."""
    if not isinstance(address, str):
        yield address
        return
    where, n = parse_dask(address)  # before the import: a typo is refused without Dask
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise SweepError("--dask needs Dask distributed: pip install 'systolic[dask]'") from None
    with contextlib.ExitStack() as stack:
        if where is None:
            cluster = stack.enter_context(LocalCluster(
                n_workers=n, threads_per_worker=1, processes=processes,
                dashboard_address=":0", silence_logs=40))
            client = stack.enter_context(Client(cluster))
        else:
            try:
                client = stack.enter_context(Client(where, timeout="10s"))
            except (OSError, TimeoutError, ValueError) as exc:
                text = " ".join(str(exc).split())
                raise SweepError(f"--dask {where}: cannot reach the scheduler ({text})"
                                 ) from None
        if announce is not None:
            announce(f"dask: {len(client.scheduler_info().get('workers', {}))} workers, "
                     f"dashboard {client.dashboard_link}")
        yield client


def dask_workers(client: Any) -> int:
    return max(1, sum(w.get("nthreads", 1)
                      for w in client.scheduler_info().get("workers", {}).values()))


def run_dask(target: Target, chunks: Iterable[Chunk], client: Any,
             timeout: float | None = None) -> Results:
    # The target is sent once and shared by every task (not pickled per chunk).
    [shared] = client.scatter([target], broadcast=True)
    keys: dict[Any, Chunk] = {}

    def submit(chunk: Chunk) -> Any:
        fut = client.submit(evaluate_chunk, shared, chunk, timeout, pure=False)
        keys[fut] = chunk
        return fut

    def wait_one(pending: set[Any]) -> tuple[set[Any], set[Any]]:
        # polled in this thread's own code rather than waited in distributed.wait: Ctrl-C or
        # SIGTERM (a KeyboardInterrupt) landing inside distributed's sync() made its cancel
        # callback fail with a NameError traceback (distributed 2026.8, utils.sync)
        while True:
            done = {f for f in pending if f.done()}
            if done:
                return done, pending - done
            time.sleep(_POLL_S)

    def result(fut: Any) -> list[dict[str, Any]]:
        chunk = keys.pop(fut)
        try:
            return list(fut.result())
        except Exception as exc:  # the task, not a point, failed: KilledWorker and the like
            text = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            return [{"key": k, "status": "failed", "elapsed_s": 0.0, "figures": {},
                     "error": f"the Dask task of this point failed ({text})"}
                    for k, _ in chunk]

    yield from _bounded(submit, chunks, _IN_FLIGHT * dask_workers(client), wait_one, result)


def default_workers() -> int:
    """Every core this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1
