"""Busy time per queue: the union of the intervals of the ops that hold it.

A compute queue is held by its own ops; a DMA transfer holds engines ``first .. first + n -
1`` (mod the engine count), so a 128-partition transfer holds all 16. Ops holding the same
queues are merged once and a queue's busy time is the union of the merged intervals of the
groups that hold it (:func:`busy_grouped`; a 128-partition transfer's interval is not
repeated for each of its 16 engines, issue 20). :func:`busy_small` is the same in plain
Python for small programs (numpy's fixed cost per call was a tenth of a sweep point's
timing), and :func:`busy_each` the definition both are tested against (one queue at a
time). Queue ids are timing/result.py's: the compute queues, then the DMA engines from
``QUEUE_NAMES``'s length.
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np

from ..geometry import interval_union, union_pairs
from .result import QUEUE_NAMES

__all__ = ["busy_each", "busy_grouped", "busy_small"]

_DQ = len(QUEUE_NAMES)  # the first DMA engine's queue id


def _held(q0: int, n: int, n_dma: int) -> list[int]:
    """The queue ids an op on queue ``q0`` holds: a transfer from DMA engine ``q0`` over
    ``n`` engines holds them mod the engine count; a compute op its own queue."""
    return [_DQ + (q0 - _DQ + j) % n_dma for j in range(n)] if q0 >= _DQ else [q0]


def busy_grouped(starts: np.ndarray, ends: np.ndarray, queue: np.ndarray, nqs: np.ndarray,
                 nq: int, n_dma: int) -> tuple[list[int], list[int]]:
    """(busy ticks, ops) per queue id: the union of the intervals of the ops holding
    it (a transfer holds DMA engines first .. first + n - 1, mod their count). Ops that
    hold the same queues (a compute queue, or a transfer's first engine and count) are
    merged once, and a queue's busy time is the union of the merged intervals of the
    groups holding it: a 128-partition transfer's interval is not repeated for each of
    its 16 engines (issue 20: 1,064,960 intervals sorted for the NKI tiled kernel)."""
    busy, counts = [0] * nq, [0] * nq
    if not len(queue):
        return busy, counts
    dma = queue >= _DQ
    sig = queue * (n_dma + 1) + np.where(dma, nqs, 0)  # the queues an op holds
    order = np.argsort(sig, kind="stable")
    sig_sorted = sig[order]
    cut = np.flatnonzero(sig_sorted[1:] != sig_sorted[:-1]) + 1
    bounds = [0, *cut.tolist(), len(order)]
    held: list[list[int]] = [[] for _ in range(nq)]  # the groups holding each queue
    unions: list[tuple[np.ndarray, np.ndarray]] = []  # each group's merged intervals
    for a, b in pairwise(bounds):
        grp = order[a:b]
        q0, n = int(queue[grp[0]]), int(nqs[grp[0]])
        unions.append(interval_union(starts[grp], ends[grp]))
        for qid in _held(q0, n, n_dma):
            held[qid].append(len(unions) - 1)
            counts[qid] += b - a
    # queues held by the same groups have the same union, found once (as busy_small)
    done: dict[tuple[int, ...], int] = {}
    for qid, gs in enumerate(held):
        if not gs:
            continue
        size = done.get(key := tuple(gs), -1)
        if size < 0:
            if len(gs) == 1:
                lo, hi = unions[gs[0]]
            else:
                lo, hi = interval_union(np.concatenate([unions[g][0] for g in gs]),
                                        np.concatenate([unions[g][1] for g in gs]))
            size = done[key] = int(np.sum(hi - lo))
        busy[qid] = size
    return busy, counts


def busy_small(starts: list[int], ends: list[int], queue: list[int], nqs: list[int], nq: int,
               n_dma: int) -> tuple[list[int], list[int]]:
    """:func:`busy_grouped` in plain Python, for a program of up to ``BUSY_NUMPY`` ops (a sweep
    point's 40: numpy's fixed cost per call was a tenth of such a program's timing)."""
    groups: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for s, e, q, k in zip(starts, ends, queue, nqs, strict=True):
        key = (q, k if q >= _DQ else 0)  # the queues an op holds
        got = groups.get(key)
        if got is None:
            groups[key] = [(s, e)]
        else:
            got.append((s, e))
    held: list[list[int]] = [[] for _ in range(nq)]  # the groups holding each queue
    unions: list[list[tuple[int, int]]] = []  # each group's merged intervals
    busy, counts = [0] * nq, [0] * nq
    for (q0, n), pairs in groups.items():
        merged = union_pairs(pairs)
        g = len(unions)
        unions.append(merged)
        size = 0
        for s, e in merged:
            size += e - s
        qids = _held(q0, n, n_dma)
        for qid in qids:
            held[qid].append(g)
            busy[qid] = size  # the union of this group alone
            counts[qid] += len(pairs)
    # queues held by the same groups have the same union, found once: the 16 DMA queues
    # of transfers over every engine were 16 unions of the same intervals (issue 20)
    done: dict[tuple[int, ...], int] = {}
    for qid, gs in enumerate(held):
        if len(gs) > 1:  # several groups hold the queue: the union of them all
            held_by = tuple(gs)
            size = done.get(held_by, -1)
            if size < 0:
                size = 0
                for s, e in union_pairs([x for g in gs for x in unions[g]]):
                    size += e - s
                done[held_by] = size
            busy[qid] = size
    return busy, counts


def busy_each(starts: np.ndarray, ends: np.ndarray, queue: np.ndarray, nqs: np.ndarray,
              nq: int, n_dma: int) -> tuple[list[int], list[int]]:
    """:func:`busy_grouped` one queue at a time (no shifted times that could overflow)."""
    busy, counts = [], []
    for qid in range(nq):
        if qid < _DQ:
            sel = queue == qid
        else:  # a transfer holds engines first .. first + n - 1 (mod dma_engines)
            k = qid - _DQ
            sel = ((k - (queue - _DQ)) % n_dma < nqs) & (queue >= _DQ)
        lo, hi = interval_union(starts[sel], ends[sel])
        busy.append(int(np.sum(hi - lo)))
        counts.append(int(np.count_nonzero(sel)))
    return busy, counts
