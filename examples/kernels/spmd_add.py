"""SPMD elementwise add: one program instance per [128, 512] tile of the output.

``add_tile`` is the kernel; each instance finds its tile from nl.program_id(0) (rows) and
nl.program_id(1) (columns). ``add`` launches it on the grid [N / 128, M / 512]; all
instances share the one output tensor and write their part. The model runs the instances
one after another on one NeuronCore (docs/nki.md). a, b [N, M] with N a multiple of 128 and
M of 512.
"""

import nki
import nki.language as nl


@nki.jit
def add_tile(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    r = nl.program_id(0) * 128
    c = nl.program_id(1) * 512
    x = nl.load(a[r:r + 128, c:c + 512])
    y = nl.load(b[r:r + 128, c:c + 512])
    nl.store(out[r:r + 128, c:c + 512], value=x + y)
    return out


def add(a, b):
    return add_tile[a.shape[0] // 128, a.shape[1] // 512](a, b)
