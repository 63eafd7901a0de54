"""Mutants of the K-loop extrapolation (systolic/extrapolate.py ``_k_reduced``, issue 20),
written after tests/test_extrapolate_k.py; loaded by bench/mutants.py (``EXTRA``)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutants import Mutant

_T = ("tests/test_extrapolate_k.py",)

MUTANTS = (
    Mutant("k_regime_ignored", "extrapolate.py",
           "    k0 = max(_k_moving0(kt, caps, nt), caps[0] + 1 if kt > caps[0] else 0)\n",
           "    k0 = K_SLICE\n", _T,
           "the stand-ins start at K_SLICE K tiles whatever the product's cache regime"),
    Mutant("k_extra_off_by_one", "extrapolate.py",
           "    extra = kt - sizes[-1]\n", "    extra = kt - sizes[-1] + 1\n", _T,
           "one K tile too many extrapolated"),
    Mutant("k_standin_size_off", "extrapolate.py",
           "spec.k - (kt - k) * ks[0].size", "spec.k - (kt - k - 1) * ks[0].size", _T,
           "the stand-ins have one K tile more than they are counted with"),
    Mutant("k_too_few_tiles", "extrapolate.py",
           "    if kt < 2 * k0:", "    if kt < k0 + 3:", _T,
           "the K path taken where the stand-ins cost about what the M slice does"),
    Mutant("k_linearity_unchecked", "extrapolate.py",
           " or any(b[x] - a[x] != c[x] - b[x] for x in a)", "", _T,
           "the two increments along K not compared"),
    Mutant("k_slot_check_skipped", "extrapolate.py",
           "            raise _SlotBound(i)\n", "            pass\n", _T,
           "K stand-ins compiled with fewer stationary slots used even where a stationary "
           "DMA waits for its slot's previous tenant"),
    Mutant("k_slot_check_wrong_window", "extrapolate.py",
           "ins.dst.offset < window:", "ins.dst.offset >= window:", _T,
           "the slot check looks at the moving tiles' DMAs instead of the stationary ones"),
    Mutant("dep_led_never_listed", "timing/core.py",
           "        if fifo_op < 0 and db >= 0 and self.dep_led is not None:\n",
           "        if fifo_op < -1 and db >= 0 and self.dep_led is not None:\n", _T,
           "the scheduler never lists a transfer placed by its dependencies"),
)
