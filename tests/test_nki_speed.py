"""The NKI front end's fast paths (issue 20: the full-size tiled kernel cold in under 5 s)
held to the plain paths they shortcut: the same views, the same errors."""

from __future__ import annotations

import gc
import itertools
import random
from typing import Any

import pytest

from systolic.errors import KernelError
from systolic.nki import lazy
from systolic.nki.tensor import Axis, Tensor, View, _layout, as_view
from systolic.nki.types import BUFFERS, ParDim, to_dtype

WHERE = ("k.py", 1)


def _tensors() -> list[Tensor]:
    bf16 = to_dtype("bfloat16")
    return [Tensor((64, 96), bf16, BUFFERS["hbm"], WHERE),
            Tensor((5, 7, 9), to_dtype("float32"), BUFFERS["shared_hbm"], WHERE),
            Tensor((128, 512), bf16, BUFFERS["sbuf"], WHERE),
            Tensor((4, 3, 10), bf16, BUFFERS["sbuf"], WHERE),
            Tensor((6, ParDim(32), 8), bf16, BUFFERS["sbuf"], WHERE),
            Tensor((128, 512), to_dtype("float32"), BUFFERS["psum"], WHERE),
            Tensor((17,), bf16, BUFFERS["hbm"], WHERE)]


def _fields(v: View) -> tuple[Any, ...]:
    return (type(v), v.tensor, v.offset, v.p0, v.axes, v.dt, v.dtype, v.shape, v.buffer,
            v.outside)


def _outcome(f: Any) -> tuple[Any, ...]:
    try:
        return ("view", _fields(f()))
    except KernelError as exc:
        return ("error", exc.message)


def _one_key(rng: random.Random, n: int) -> Any:
    pick = rng.random()
    bound = [None, *range(-n - 3, n + 4)]
    if pick < 0.45:
        return slice(rng.choice(bound), rng.choice(bound))
    if pick < 0.55:
        return slice(rng.choice(bound), rng.choice(bound), rng.choice([None, 1, 2, 3]))
    if pick < 0.85:
        return rng.randrange(-n - 2, n + 2)
    return rng.choice([True, ..., slice(0, n, 1), slice(1.0, 2), None, (1 << 70)])


def test_plain_index_matches_the_general_path() -> None:
    """View._plain (ints and step-1 slices) gives exactly _index's view, and declines
    every key _index refuses or marks as reaching outside its dimension."""
    rng = random.Random(20)
    seen = {"plain": 0, "general": 0}
    for t in _tensors():
        bases = [t.full, t.full[1:] if t.shape[0] > 2 else t.full]
        for v, _ in itertools.product(bases, range(300)):
            nkeys = rng.choice([1, len(v.axes), len(v.axes), len(v.axes) + 1])
            keys = tuple(_one_key(rng, v.shape[min(d, len(v.shape) - 1)])
                         for d in range(nkeys))
            key: Any = keys[0] if nkeys == 1 and rng.random() < 0.5 else keys
            want = _outcome(lambda: v._index(key))  # noqa: B023
            got = _outcome(lambda: v[key])  # noqa: B023
            assert got == want, (t, key)
            fast = v._plain(key) if v.outside is None else None
            if fast is not None:
                seen["plain"] += 1
                assert want == ("view", _fields(fast))
            else:
                seen["general"] += 1
    assert min(seen.values()) > 200  # both paths taken


def test_plain_index_of_a_view_past_its_dimension_still_refuses() -> None:
    """A view marked as reaching outside its tensor takes the general path (which refuses
    any further indexing without a mask)."""
    t = Tensor((128, 512), to_dtype("bfloat16"), BUFFERS["sbuf"], WHERE)
    past = t[0:128, 256:768]
    assert past.outside is not None
    with pytest.raises(KernelError, match="out of range"):
        past[0:64, 0:128]


def test_as_view_fast_cases_match_lazy_as_view() -> None:
    for t in _tensors():
        assert _fields(as_view(t)) == _fields(lazy.as_view(t))
        v = t.full
        assert as_view(v) is v is lazy.as_view(v)
    with pytest.raises(KernelError, match="expected a tensor or a tile"):
        as_view(3)


@pytest.mark.parametrize("shape,pdim", [((128, 512), 0), ((4, 3, 10), 0), ((6, 32, 8), 1),
                                        ((5, 7, 9), None), ((17,), None), ((1, 1), 0)])
def test_layout_memo_is_the_row_major_layout(shape: tuple[int, ...], pdim: int | None) -> None:
    strides, free, axes = _layout(shape, pdim)
    free_dims = [i for i in range(len(shape)) if i != pdim]
    for i in free_dims:
        below = 1
        for j in free_dims:
            if j > i:
                below *= shape[j]
        assert strides[i] == below
    if pdim is not None:
        assert strides[pdim] == 0
    assert free == (1 if not free_dims else
                    __import__("math").prod(shape[i] for i in free_dims))
    assert axes == tuple(Axis(1 if i == pdim else strides[i], n, i == pdim)
                         for i, n in enumerate(shape))
    assert _layout(shape, pdim) is _layout(shape, pdim)  # memoised
    if (shape, pdim) == ((4, 3, 10), 0):  # written out, not derived: [par 4, 3, 10]
        assert _layout(shape, pdim) == ((0, 10, 1), 30, (
            Axis(1, 4, True), Axis(10, 3, False), Axis(1, 10, False)))


def test_kernel_command_turns_the_collector_off_and_back() -> None:
    """``systolic kernel`` runs with the garbage collector off and leaves it as it found
    it (tests run commands in process)."""
    from systolic.cli import main
    from systolic.commands import kernel as cmd

    states: list[bool] = []
    real = cmd._run

    def spy(args: Any) -> int:
        states.append(gc.isenabled())
        return real(args)

    cmd._run = spy  # type: ignore[assignment]
    try:
        for before in (True, False):
            (gc.enable if before else gc.disable)()
            argv = ["kernel", "examples/kernels/tiled_matmul.py:tiled_matmul",
                    "--arg", "lhsT=bf16[128,128]", "--arg", "rhs=bf16[128,512]", "--json"]
            assert main(argv) == 0
            assert gc.isenabled() is before
    finally:
        cmd._run = real  # type: ignore[assignment]
        gc.enable()
    assert states == [False, False]


def _placeless(v: View) -> tuple[Any, ...]:
    """A view's fields, its tensor by what the kernel made (two recordings make two)."""
    t = v.tensor
    return (t.shape, t.dtype, t.buffer, t.where[1], *_fields(v)[2:])


MATMULS = '''
@nki.jit
def k(lhsT, rhs):
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    acc = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    for i in nl.affine_range(2):
        a = nl.ndarray((128, 128), dtype=lhsT.dtype, buffer=nl.sbuf)
        b = nl.ndarray((128, 512), dtype=rhs.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=lhsT[i * 128:(i + 1) * 128, 0:128])
        nisa.dma_copy(dst=b, src=rhs[i * 128:(i + 1) * 128, 0:512])
        nisa.nc_matmul(dst=acc, stationary=a, moving=b{extra})
    res = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=res, src=acc)
    nisa.dma_copy(dst=out, src=res)
    return out
'''


@pytest.mark.parametrize("arch", ["trn1", "trn2", "trn3"])
def test_nc_matmul_by_name_records_as_the_general_path(tmp_path: Any, arch: str,
                                                      monkeypatch: Any) -> None:
    """nc_matmul(dst=, stationary=, moving=) (the short path) makes the same record_matmul
    call as the same call with its options spelled out at their defaults (the general
    path), and so the same Program, bit for bit."""
    from helpers import record_source

    import systolic.nki as snki
    from systolic.nki import matmul_isa as isa

    calls: list[list[Any]] = [[], []]
    real = isa.record_matmul

    def spy(*a: Any) -> None:
        calls[which].append(tuple(_placeless(x) if isinstance(x, View) else x for x in a))
        real(*a)

    monkeypatch.setattr(isa, "record_matmul", spy)
    snki.install(arch)
    recs = []
    for which, extra in enumerate(["", ", tile_position=(), tile_size=(), perf_mode=None, "
                                       "accumulate=None, is_transpose=False, mask=None"]):
        d = tmp_path / str(which)
        d.mkdir()
        recs.append(record_source(d, MATMULS.format(extra=extra),
                                  ["bf16[256,128]", "bf16[256,512]"], arch=arch))
    short, plain = recs
    assert len(calls[0]) == 2
    # the same call but for the kernel file's path (each in its own folder)
    assert [c[:7] + c[8:] for c in calls[0]] == [c[:7] + c[8:] for c in calls[1]]
    assert [c[7][1] for c in calls[0]] == [c[7][1] for c in calls[1]]
    assert list(short.program) == list(plain.program)


def test_paused_restores_the_collector_as_it_found_it() -> None:
    """collector.paused: off inside (nested too), back as the outermost found it, after an
    exception as well."""
    from systolic.collector import paused

    was = gc.isenabled()
    try:
        for before in (True, False):
            (gc.enable if before else gc.disable)()
            with paused():
                assert not gc.isenabled()
                with paused():
                    assert not gc.isenabled()
                assert not gc.isenabled()
            assert gc.isenabled() is before
            with pytest.raises(ZeroDivisionError), paused():
                1 / 0  # noqa: B018
            assert gc.isenabled() is before
    finally:
        (gc.enable if was else gc.disable)()
