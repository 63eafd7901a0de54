"""Random numbers: ``nl.rand``, ``nl.random_seed``, ``nisa.dropout`` / ``nl.dropout``.

The hardware random number generator is not published, so the model cannot give a device's
bits. It gives reproducible ones instead (docs/nki.md "Random numbers"): every random
instruction carries a seed, ``(kernel seed) * 2**32 + (its number among the kernel's random
instructions)``; the kernel seed is 0 unless the kernel calls ``nl.random_seed(s)`` with a
Python integer ``s`` (a seed computed on chip is refused). The values are numpy's Philox
counter-based generator keyed by that seed (systolic.sim.functional_select.uniform): the same
kernel, arguments and seed always draw the same numbers, on any machine.

* ``nl.rand(shape, dtype=nl.float32)``: uniform in [0, 1) (Vector engine; unsure which);
* ``nisa.dropout(data, prob)`` / ``nl.dropout(x, rate)``: elements whose draw is below the
  probability (a number, or a [P, 1] tile) become 0, the others are kept unscaled (NKI
  docs, nki.isa.dropout: "replace some elements ... with zeros").
"""

from __future__ import annotations

import weakref
from typing import Any

from .calls import RecordFn, emit, take
from .index import check_mask
from .lazy import LazyKind, Pending, is_number
from .opkind import DropoutArgs, RandArgs
from .ops import _add, _match, _on_chip, _vector
from .record import Recorder, current, fail, here
from .select import Shaper, result_dtype
from .tensor import Tensor, View, as_view
from .types import BUFFERS, to_dtype

__all__ = ["RULES", "dropout", "nl_dropout", "rand", "random_seed"]

Where = tuple[str, int]


class _Rng:
    __slots__ = ("count", "seed")

    def __init__(self) -> None:
        self.seed, self.count = 0, 0


_STATE: weakref.WeakKeyDictionary[Recorder, _Rng] = weakref.WeakKeyDictionary()


def _next_seed() -> int:
    st = _STATE.setdefault(current(), _Rng())
    st.count += 1
    return st.seed * 2 ** 32 + st.count


def random_seed(seed: Any, mask: Any = None, **kw: Any) -> None:
    """``nl.random_seed(seed)``: the seed of the random instructions after it (records no
    instruction: the model's seeds are fixed when the kernel is recorded)."""
    where = here()
    check_mask(mask, "nl.random_seed", where)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2 ** 32:
        raise fail("nl.random_seed takes a 32-bit Python integer here; a seed computed on "
                   "chip (a tile) is not modelled, the model's random numbers being fixed "
                   "when the kernel is recorded", where)
    st = _STATE.setdefault(current(), _Rng())
    st.seed, st.count = int(seed), 0


def rand(shape: Any, dtype: Any = "float32", **kw: Any) -> Pending:
    """``nl.rand(shape, dtype=nl.float32)``: a new tile of uniform values in [0, 1)."""
    where = here()
    kw.pop("name", None)
    kw.pop("buffer", None)
    if kw:
        raise fail(f"nl.rand: argument(s) {', '.join(sorted(kw))} not modelled", where)
    if not isinstance(shape, tuple | list) or not all(isinstance(s, int) for s in shape):
        raise fail(f"nl.rand shape is a tuple of whole numbers, not {shape!r}", where)
    return Pending(LazyKind.RAND, where, shape=tuple(shape), dtype=dtype)


def _record_rand(dst: View, a: dict[str, Any], where: Where) -> None:
    _on_chip(dst, "dst", "nl.rand", where)
    _add(RandArgs(_next_seed()), dst, (), where)


def _rand_tile(a: dict[str, Any], where: Where) -> Tensor:
    return Tensor(a["shape"], to_dtype(a["dtype"]), BUFFERS["sbuf"], where)


def dropout(*args: Any, **kw: Any) -> Pending | None:
    """``nisa.dropout(data, prob, dtype=)``: zero the elements whose draw falls below prob."""
    where = here()
    m = check_mask(kw.pop("mask", None), "dropout", where)
    a = take(args, kw, ("data", "prob", "dtype", "dst"), "dropout", where, 2)
    return _dropout(a["data"], a["prob"], a.get("dtype"), a.get("dst"), "dropout", where, m)


def nl_dropout(*args: Any, **kw: Any) -> Pending | None:
    """``nl.dropout(x, rate, dtype=)``: nisa.dropout."""
    where = here()
    m = check_mask(kw.pop("mask", None), "nl.dropout", where)
    a = take(args, kw, ("x", "rate", "dtype"), "nl.dropout", where, 2)
    return _dropout(a["x"], a["rate"], a.get("dtype"), None, "nl.dropout", where, m)


def _dropout(data: Any, prob: Any, dtype: Any, dst: Any, what: str, where: Where,
             mask: Any) -> Pending | None:
    if is_number(prob) and not 0 <= prob <= 1:
        raise fail(f"{what} probability {prob} is outside 0..1", where)
    return emit(LazyKind.DROPOUT, dst, {"src": data, "prob": prob, "dtype": dtype,
                                        "what": what, "mask": mask}, where,
                _record_dropout)


def _record_dropout(dst: View, a: dict[str, Any], where: Where) -> None:
    what = a["what"]
    src = as_view(a["src"])
    _on_chip(src, "data", what, where)
    _on_chip(dst, "dst", what, where)
    _match(dst, src, what, where)
    prob = a["prob"]
    srcs: tuple[View, ...] = (src,)
    const: float | None = None
    if is_number(prob):
        const = float(prob)
    else:
        srcs = (src, _vector(prob, src, "prob", what, where))
    _add(DropoutArgs(const, _next_seed()), dst, srcs, where)


def _dropout_tile(a: dict[str, Any], where: Where) -> Tensor:
    src = as_view(a["src"])
    return Tensor(tuple(src.shape), result_dtype(a, src), BUFFERS["sbuf"], where)


RULES: dict[LazyKind, tuple[Shaper, RecordFn]] = {
    LazyKind.RAND: (_rand_tile, _record_rand),
    LazyKind.DROPOUT: (_dropout_tile, _record_dropout),
}
