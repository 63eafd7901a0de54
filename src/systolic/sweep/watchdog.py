"""A sweep point's time limit: SIGALRM in the main thread, a watchdog thread elsewhere.

:func:`time_limit` raises :class:`PointTimeout` in the code inside once it has run its
seconds. In the main thread (the serial executor, a pool worker) a SIGALRM interval timer
does it; in any other thread (a Dask worker's) one watchdog thread per process raises it
through ``PyThreadState_SetAsyncExc``. Python code is stopped between two bytecodes; a long
call into C returns first (the pool's parent kills a worker that does not answer,
:mod:`.executors`).
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["PointTimeout", "time_limit", "timeout_error"]


class PointTimeout(BaseException):
    """Raised inside a point that runs past its time limit. A BaseException, so that a
    kernel's own ``except Exception`` cannot swallow it."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise PointTimeout


# The C function ``signal.signal`` wraps: the wrapper converts the handler to an int and the
# old one to a Handlers enum, and for a Python function such as _on_alarm both conversions
# fail and are caught (an exception each: ~15 us a call, two calls a point, issue 20). The
# same handlers in and out, without them.
_set_handler = importlib.import_module("_signal").signal


class _Watchdog:
    """One thread per process that stops points running in other threads (a Dask worker's)
    past their deadline, by raising PointTimeout in them (``PyThreadState_SetAsyncExc``:
    delivered between two bytecodes, as a signal handler's exception is)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.deadlines: dict[int, float] = {}
        self.fired: set[int] = set()
        self.thread: threading.Thread | None = None

    def arm(self, tid: int, seconds: float) -> None:
        with self.lock:
            self.deadlines[tid] = time.monotonic() + seconds
            self.fired.discard(tid)
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="sweep-point-timeout",
                                               daemon=True)
                self.thread.start()

    def disarm(self, tid: int) -> None:
        with self.lock:
            self.deadlines.pop(tid, None)
            if tid in self.fired:  # clear one not yet delivered
                self.fired.discard(tid)
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid), None)

    def _run(self) -> None:
        while True:
            time.sleep(0.05)
            now = time.monotonic()
            with self.lock:
                for tid, due in list(self.deadlines.items()):
                    if now >= due:
                        del self.deadlines[tid]
                        self.fired.add(tid)
                        ctypes.pythonapi.PyThreadState_SetAsyncExc(
                            ctypes.c_ulong(tid), ctypes.py_object(PointTimeout))


_WATCHDOG = _Watchdog()


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise :class:`PointTimeout` in the code inside once it has run ``seconds`` (None:
    no limit): SIGALRM in the main thread, the watchdog thread elsewhere. Python code is
    stopped between two bytecodes; a long call into C returns first (the pool's parent
    kills a worker that does not answer, :mod:`.executors`)."""
    if not seconds:
        yield
        return
    if threading.current_thread() is threading.main_thread():
        old = _set_handler(signal.SIGALRM, _on_alarm)
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            _set_handler(signal.SIGALRM, old)
        return
    tid = threading.get_ident()
    _WATCHDOG.arm(tid, seconds)
    try:
        yield
    finally:
        _WATCHDOG.disarm(tid)


def timeout_error(seconds: float, where: str) -> str:
    return (f"the point ran past its time limit of {seconds:g} s (--point-timeout) and was "
            f"stopped at {where}")
