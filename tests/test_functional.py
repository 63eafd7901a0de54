"""The functional simulator against float64 numpy on the rounded operands."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import fp32_bound
from hypothesis import given
from hypothesis import strategies as st

from systolic import (
    AccessPattern,
    CalcFlags,
    FunctionalSimulator,
    LoadStationary,
    MatMul,
    PerfMode,
    Program,
    Space,
    round_to,
)
from systolic.isa import FULL_COL_GROUP_FORMATS, Fp32Pass, col_group, row_group


def build(k: int, m: int, n: int, steps: int, dtype: str, mode: PerfMode,
          rng: np.random.Generator, zp: tuple[int, int] = (0, 0)
          ) -> tuple[FunctionalSimulator, Program, list[tuple[np.ndarray, np.ndarray]], str]:
    """A group of ``steps`` MatMuls (each with its own weights) into one PSUM region."""
    sims = {}
    fold = mode.k_fold
    parts = k // fold
    pairs = []
    instrs: list[object] = []
    isint = dtype.startswith(("int", "uint"))
    for order in ("fast", "systolic"):
        sims[order] = FunctionalSimulator("trn2", order=order)
    for i in range(steps):
        if isint:
            w = rng.integers(-50, 50, (k, m))
            x = rng.integers(-50, 50, (k, n))
        else:
            w = rng.standard_normal((k, m)).astype(np.float32) * 4
            x = rng.standard_normal((k, n)).astype(np.float32) * 4
        lead = 2 if fold == 2 else 0
        w_off, x_off = i * 4096, 0x10000 + i * 4096
        w_dims = ((m, 2), (1, m)) if lead else ((1, m),)
        x_dims = ((n, 2), (1, n)) if lead else ((1, n),)
        w_ap = AccessPattern(Space.SBUF, 0, parts, w_off, w_dims, dtype)
        x_ap = AccessPattern(Space.SBUF, 0, parts, x_off, x_dims, dtype)
        for sim in sims.values():
            sim.memory.write(w_ap, w.reshape(w_ap.shape))
            sim.memory.write(x_ap, x.reshape(x_ap.shape))
        flags = CalcFlags.NONE
        if i == 0:
            flags |= CalcFlags.START
        else:
            flags |= CalcFlags.ACCUMULATE
        if i == steps - 1:
            flags |= CalcFlags.STOP
        acc = "int48" if isint else "fp32"
        dst = AccessPattern(Space.PSUM, 0, m, 2048 * 3, ((1, n),), acc)
        rg = row_group(0, parts)
        cg = col_group(0, m, force=dtype in FULL_COL_GROUP_FORMATS)  # fp32r: 15 (seed 000)
        instrs.append(LoadStationary(w_ap, 0, rg, cg, mode))
        instrs.append(MatMul(x_ap, dst, flags, dtype, 0, rg, cg, mode, zp[1], zp[0]))
        pairs.append((w, x))
    return sims, Program(instrs), pairs, dst  # type: ignore[return-value]


FLOAT_CASES = [("bf16", PerfMode.NONE), ("fp16", PerfMode.NONE), ("fp8_e4m3", PerfMode.NONE),
               ("fp8_e5m2", PerfMode.DOUBLE_ROW), ("tf32", PerfMode.NONE),
               ("fp32r", PerfMode.NONE), ("fp32", PerfMode.NONE)]


@pytest.mark.parametrize(("dtype", "mode"), FLOAT_CASES)
@given(k=st.integers(1, 64), m=st.integers(1, 128), n=st.integers(1, 512),
       steps=st.integers(1, 4), seed=st.integers(0, 2**32 - 1))
def test_accumulation_programs_match_float64(dtype: str, mode: PerfMode, k: int, m: int,
                                             n: int, steps: int, seed: int) -> None:
    k = k * mode.k_fold
    rng = np.random.default_rng(seed)
    sims, prog, pairs, dst = build(k, m, n, steps, dtype, mode, rng)
    wr = [round_to(w, dtype) for w, _ in pairs]
    xr = [round_to(x, dtype) for _, x in pairs]
    ref = sum(w.astype(np.float64).T @ x.astype(np.float64) for w, x in zip(wr, xr, strict=True))
    big_w = np.concatenate(wr).T
    big_x = np.concatenate(xr)
    bound = fp32_bound(big_w, big_x)
    for sim in sims.values():
        sim.run(prog)
        got = sim.memory.read(dst).astype(np.float64)
        assert np.all(np.abs(got - ref) <= bound)


def test_systolic_order_is_sequential_fp32() -> None:
    # With order=systolic the sum is ((0 + p0) + p1) + ... in fp32: 2^24 + 1 + 1 loses both
    # ones, while float64 keeps them. A single instruction of K = 3, M = N = 1.
    rng = np.random.default_rng(0)
    sims, prog, _, dst = build(3, 1, 1, 1, "fp32r", PerfMode.NONE, rng)
    w_ap = prog[0].src  # type: ignore[union-attr]
    x_ap = prog[1].moving  # type: ignore[union-attr]
    sim = sims["systolic"]
    sim.memory.write(w_ap, np.array([[2.0**24], [1.0], [1.0]], dtype=np.float32))
    sim.memory.write(x_ap, np.ones((3, 1), dtype=np.float32))
    sim.run(prog)
    assert sim.memory.read(dst)[0, 0] == np.float32(2.0**24)


@given(k=st.integers(1, 128), m=st.integers(1, 64), n=st.integers(1, 256),
       steps=st.integers(1, 3), zp_w=st.integers(-20, 20), zp_x=st.integers(-20, 20),
       seed=st.integers(0, 2**32 - 1))
def test_integer_path_is_exact(k: int, m: int, n: int, steps: int, zp_w: int, zp_x: int,
                               seed: int) -> None:
    rng = np.random.default_rng(seed)
    sims, prog, pairs, dst = build(k, m, n, steps, "int8", PerfMode.NONE, rng, (zp_w, zp_x))
    ref = sum((w - zp_w).T @ (x - zp_x) for w, x in pairs)
    for sim in sims.values():
        sim.run(prog)
        np.testing.assert_array_equal(sim.memory.read(dst), ref)


def test_fp32_two_pass_halves_add_up() -> None:
    # hi = bf16(w), lo = bf16(w - hi): the two passes carry w to about 16 significant bits.
    rng = np.random.default_rng(1)
    w = rng.standard_normal((64, 8)).astype(np.float32)
    x = rng.standard_normal((64, 16)).astype(np.float32)
    w_ap = AccessPattern(Space.SBUF, 0, 64, 0, ((1, 8),), "fp32")
    x_ap = AccessPattern(Space.SBUF, 0, 64, 4096, ((1, 16),), "fp32")
    dst = AccessPattern(Space.PSUM, 0, 8, 0, ((1, 16),), "fp32")
    rg, cg = row_group(0, 64), col_group(0, 8)
    prog = Program([
        LoadStationary(w_ap, 0, rg, cg, fp32_pass=Fp32Pass.HI),
        MatMul(x_ap, dst, CalcFlags.START, "fp32", 0, rg, cg, fp32_pass=Fp32Pass.HI),
        LoadStationary(w_ap, 0, rg, cg, fp32_pass=Fp32Pass.LO),
        MatMul(x_ap, dst, CalcFlags.STOP | CalcFlags.ACCUMULATE, "fp32", 0, rg, cg,
               fp32_pass=Fp32Pass.LO),
    ])
    sim = FunctionalSimulator("trn2")
    sim.memory.write(w_ap, w)
    sim.memory.write(x_ap, x)
    sim.run(prog)
    ref = w.astype(np.float64).T @ x.astype(np.float64)
    got = sim.memory.read(dst)
    mag = np.abs(w.astype(np.float64)).T @ np.abs(x.astype(np.float64))
    err = np.abs(got - ref)
    assert np.all(err <= 2.0**-15 * mag)  # two bf16 halves: ~2^-17 relative per weight
    one_pass = np.abs(round_to(w, "bf16").astype(np.float64).T @ x - ref)
    assert err.max() < one_pass.max() / 50  # far better than a single bf16 pass
