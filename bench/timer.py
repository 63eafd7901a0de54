"""Wall-clock timing shared by the benchmarks (run as ``python bench/NAME.py``, so this
module is importable as ``timer``). Best of several runs: the least disturbed one."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def timed(fn: Callable[[], T], repeat: int) -> tuple[float, T]:
    """Best wall-clock seconds over ``repeat`` calls, and the last call's result."""
    best = float("inf")
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def best(fn: Callable[[], object], repeat: int) -> float:
    """Best wall-clock seconds over ``repeat`` calls."""
    return timed(fn, repeat)[0]


def best_interleaved(fns: list[Callable[[], object]], repeat: int) -> list[float]:
    """Best time of each function; the functions take turns so drift hits all alike."""
    times = [float("inf")] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            times[i] = min(times[i], time.perf_counter() - t0)
    return times


def wall_and_cpu(fn: Callable[[], T]) -> tuple[float, float, T]:
    """One call's wall-clock and process CPU seconds (every thread's work), and its
    result."""
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - w0, time.process_time() - c0, out
