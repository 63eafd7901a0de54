"""The garbage collector paused around work that makes many objects and no reference cycles.

Recording a kernel, timing a Program and the what-if passes each make hundreds of thousands
of small objects (ints in lists, a tuple an op, a few objects a region), none cyclic: the
collector's runs, every few thousand allocations over every object the process holds, only
cost time there (issue 20: 0.4-1.4 s of a 3.5 s recording). :func:`paused` turns it off for
a block and back on after, if it was on; nested pauses leave it as the outermost found it.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["paused"]


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """The collector off inside the block, restored after (on an exception too)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
