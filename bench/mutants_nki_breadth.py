"""Mutants of the NKI breadth (issue 19): realistic bugs in transposes, bn_stats / bn_aggr,
iota and SPMD launches, each killed by tests/test_nki_breadth.py (checked by hand: apply,
run, see a failure, restore)."""

from __future__ import annotations

from mutants import Mutant as M

T = ("tests/test_nki_breadth.py",)
MUTANTS: tuple[M, ...] = (
    M("bn_stats_halves_swapped", "sim/functional_engines.py",
      "cols = [*_moments(x[:, 0::2]), *_moments(x[:, 1::2])]",
      "cols = [*_moments(x[:, 1::2]), *_moments(x[:, 0::2])]",
      T, "bn_stats writes the odd elements' statistics first"),
    M("bn_aggr_within_only", "sim/functional_engines.py",
      "var = (m2.sum(axis=1) + (c * (m - mean[:, None]) ** 2).sum(axis=1)) / n",
      "var = m2.sum(axis=1) / n",
      T, "bn_aggr drops the between-group term of the parallel variance"),
    M("bn_aggr_cost_n", "timing/costs.py",
      "return _floor(arch, 13 * (_n(ins.src) / 3))", "return _floor(arch, _n(ins.src))",
      T, "bn_aggr costs max(MIN_II, N) instead of max(MIN_II, 13 N / 3)"),
    M("iota_no_fixed_cost", "timing/costs.py",
      "return _IOTA_FIXED_CYCLES + _n(ins.dst)", "return _n(ins.dst)",
      T, "iota loses its 150-cycle fixed cost"),
    M("identity_anti_diagonal", "nki/transpose.py",
      "base=0, partition_step=-1,", "base=0, partition_step=1,",
      T, "the PE transpose's identity is built from f + p instead of f - p"),
    M("spmd_outputs_not_shared", "nki/spmd.py",
      "    if alias:\n        _unify(rec.ops, alias)",
      "    if False:\n        _unify(rec.ops, alias)",
      T, "SPMD instances after the first write their own output tensors, not the shared one"),
    M("transpose_engine_or", "nki/transpose.py",
      "Engine.VECTOR if p <= VECTOR_MAX and f <= VECTOR_MAX",
      "Engine.VECTOR if p <= VECTOR_MAX or f <= VECTOR_MAX",
      T, "a 64 x 32 transpose with no engine named is sent to the Vector engine"),
)
