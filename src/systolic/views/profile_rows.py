"""The rows of a whole-core profile, named as Neuron Explorer names them (FACTS.md:
"per-engine rows (Tensor, TensorMatrix, Vector, Scalar, GpSimd, Sync, DMA queues)"; one
nc_matmul is LDWEIGHTS on the Tensor row and MATMUL on the TensorMatrix row).

One function, :func:`profile_rows`, cuts a :class:`~systolic.timing.core.CoreTiming` into
those rows; the Perfetto trace (:mod:`systolic.views.trace`) and the timeline plot
(:mod:`systolic.views.core_plot`) both draw from it, so they always show the same rows:

* Tensor (LDWEIGHTS): the tensor queue's weight loads;
* TensorMatrix (MATMUL): the tensor queue's MatMuls;
* Vector, Scalar, GpSimd: each engine's instruction queue (a ReadOut's PSUM evacuation
  sits on ``arch.readout_engine``'s row);
* DMA engine 0 ... DMA engine N-1: each DMA engine; a transfer that uses several engines
  has a slice on each.

The model has no separate Sync engine (its semaphore waits are the ``sync`` cause of the
critical path), so there is no Sync row.

Each op is a slice from its start to its end, clipped at the next op's start on the same
row: the PE pipelines its MatMuls (a MatMul's fill and drain run under the next one), and
trace viewers need the slices of one row not to overlap. Rows other than TensorMatrix
never overlap, so the clip changes nothing there. A row's busy share is the union of its
ops' full intervals over the latency (the same figure as ``CoreTiming.busy()`` for a
queue that is one row).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..geometry import interval_union
from ..timing.core import QUEUE_NAMES, CoreTiming
from ..timing.result import Cause

__all__ = ["ENGINE_ROWS", "ProfileRow", "profile_rows"]

# (profile row name, what it shows, queue name, op cause or "" for every op of the queue)
ENGINE_ROWS = (("Tensor", "LDWEIGHTS", "tensor", Cause.WEIGHT_LOAD),
               ("TensorMatrix", "MATMUL", "tensor", Cause.PE),
               ("Vector", "", "vector", None),
               ("Scalar", "", "scalar", None),
               ("GpSimd", "", "gpsimd", None))


@dataclass(frozen=True, eq=False)
class ProfileRow:
    """One row: ``ops`` (op indices into the CoreTiming, by start), their ``starts`` and
    true ``ends`` in ticks, and ``shown`` (the ends clipped at the next op's start)."""

    name: str
    what: str
    queue: str
    ops: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    shown: np.ndarray

    @property
    def label(self) -> str:
        return f"{self.name} ({self.what})" if self.what else self.name

    def busy_ticks(self) -> int:
        """Ticks in which at least one op of the row runs (the union of full intervals)."""
        lo, hi = interval_union(self.starts, self.ends)
        return int(np.sum(hi - lo))


def _row(core: CoreTiming, name: str, what: str, queue: str, sel: np.ndarray) -> ProfileRow:
    ops = np.flatnonzero(sel)
    ops = ops[np.argsort(core.starts[ops], kind="stable")]
    s, e = core.starts[ops], core.ends[ops]
    nxt = np.append(s[1:], np.iinfo(np.int64).max)
    return ProfileRow(name, what, queue, ops, s, e, np.maximum(np.minimum(e, nxt), s))


def profile_rows(core: CoreTiming) -> list[ProfileRow]:
    """Every row of the profile, engines first then DMA queues, idle rows included."""
    rows = []
    tensor = core.op_queue == 0
    for name, what, queue, cause in ENGINE_ROWS:
        q = QUEUE_NAMES.index(queue)
        sel = core.op_queue == q
        if q == 0 and core.op_cause is not None:  # split the PE queue into its two rows
            sel = tensor & (core.op_cause == int(cause))  # type: ignore[arg-type]
        elif q == 0 and cause is Cause.PE:  # a timing without causes: one Tensor row only
            continue
        rows.append(_row(core, name, what if core.op_cause is not None else "", queue, sel))
    first, n = len(QUEUE_NAMES), core.arch.dma_engines
    dma = core.op_queue >= first
    for k in range(n):
        # a transfer holds DMA engines first .. first + count - 1 (mod the engine count)
        sel = dma & ((k - (core.op_queue - first)) % n < core.op_queues)
        rows.append(_row(core, f"DMA engine {k}", "", f"dma{k}", sel))
    return rows
