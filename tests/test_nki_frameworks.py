"""A kernel called from PyTorch or JAX (NKI's ``*_torch.py`` / ``*_jax.py`` scripts): the
arguments' values reach the model bit for bit, the outputs come back as the caller's kind
of array, and the ``torch_xla`` / ``torch_neuronx`` stand-ins answer only where those
packages are missing."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from helpers import require_module, write_kernel

import systolic.nki as snki
from systolic.errors import KernelError, SystolicError
from systolic.nki.frameworks import from_numpy, to_numpy

# the [test] extra's frameworks: skipped where missing on a developer's machine, a failure
# in CI (helpers.missing_extra)
torch: Any = require_module("torch", "torch (the PyTorch callers' tests)")
jax: Any = require_module("jax", "jax (the JAX callers' tests)")
jnp: Any = require_module("jax.numpy", "jax (the JAX callers' tests)")

BF16 = ml_dtypes.bfloat16

_ADD_SCALE = '''
@nki.jit
def k(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    nl.store(out, nl.add(nl.load(a), nl.multiply(nl.load(b), 3.0)))
    return out
'''


@pytest.fixture(autouse=True)
def _hook():
    snki.uninstall()
    snki.install("trn2")
    yield
    snki.uninstall()
    snki.install("trn2")


def _reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float64's 3b rounded to bf16 (the multiply's tile), then a + that rounded to bf16."""
    three_b = (3 * b.astype(np.float64)).astype(BF16)
    return (a.astype(np.float64) + three_b.astype(np.float64)).astype(BF16)


def _bf16_pair(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.normal(0, 1, (128, 64)).astype(BF16), rng.normal(0, 1, (128, 64)).astype(BF16))


def test_torch_tensors_in_and_out_bit_for_bit(tmp_path: Path) -> None:
    """bf16 torch tensors (one of them a transposed view) reach the kernel as the same
    bits, and its output is a bf16 torch tensor with the bits numpy arguments give; those
    are float64's 3b rounded to bf16 (the multiply's bf16 tile), then a + that rounded to
    bf16 (the Vector engine's fp32 is exact for both: 3b has 10 significant bits, and the
    sum of two bf16 values of like size fits fp32's 24)."""
    kern = snki.load_kernel(str(write_kernel(tmp_path, _ADD_SCALE)), "k")
    a, b = _bf16_pair(0)
    ta = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    tb = torch.from_numpy(np.ascontiguousarray(b.T).view(np.int16)).view(torch.bfloat16).T
    assert not tb.is_contiguous()
    out = kern(ta, tb)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    assert out.shape == (128, 64)
    want = snki.values(kern, [a, b])
    assert np.array_equal(to_numpy(out).view(np.int16), want.view(np.int16))
    assert np.array_equal(want.view(np.int16), _reference(a, b).view(np.int16))


def test_jax_arrays_in_and_out(tmp_path: Path) -> None:
    kern = snki.load_kernel(str(write_kernel(tmp_path, _ADD_SCALE)), "k")
    a, b = _bf16_pair(1)
    out = kern(jnp.asarray(a), jnp.asarray(b))
    assert isinstance(out, jax.Array) and out.dtype == jnp.bfloat16
    assert np.array_equal(np.asarray(out).view(np.int16),
                          snki.values(kern, [a, b]).view(np.int16))
    assert np.array_equal(np.asarray(out).view(np.int16), _reference(a, b).view(np.int16))


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float32",
                                  "int32"])
def test_conversions_keep_every_bit(name: str) -> None:
    """Every bit pattern of the narrow formats (NaNs included) survives torch -> numpy ->
    torch; numpy's own dtypes go through torch unchanged."""
    np_dtype = np.dtype(getattr(ml_dtypes, name, None) or name)
    width = np_dtype.itemsize
    raw = np.arange(2 ** (8 * min(width, 2)), dtype=np.uint64).astype(f"u{width}")
    a = raw.view(np_dtype)
    like = torch.zeros(1)
    t = from_numpy(a, like)
    assert t.dtype == getattr(torch, name) and t.device == like.device
    assert np.array_equal(to_numpy(t).view(f"u{width}"), raw)


def test_the_xla_stand_ins(tmp_path: Path) -> None:
    """NKI's PyTorch scripts: ``xm.xla_device()`` is the CPU, ``xm.mark_step()`` does
    nothing, ``torch_neuronx.nki_jit`` is NKI's jit and ``torch_neuronx.trace(f, inputs)``
    is ``f`` (the script's reference, run by PyTorch); any other name is one line."""
    import nki
    from torch_xla.core import xla_model as xm  # type: ignore[import-not-found]

    assert xm.xla_device() == torch.device("cpu")
    assert xm.mark_step() is None
    import torch_neuronx  # type: ignore[import-not-found]

    assert torch_neuronx.nki_jit is nki.jit

    def f(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    assert torch_neuronx.trace(f, (torch.ones(2),)) is f
    with pytest.raises(KernelError, match=r"xla_model\.all_reduce is not modelled") as e:
        getattr(xm, "all_reduce")  # noqa: B009
    assert "\n" not in str(e.value)


def test_a_real_torch_xla_is_not_shadowed(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "torch_xla"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("REAL = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    snki.uninstall()
    snki.install("trn2")
    sys.modules.pop("torch_xla", None)
    try:
        import torch_xla

        assert torch_xla.REAL
    finally:
        sys.modules.pop("torch_xla", None)


def test_the_bundled_examples_package_is_refused_in_one_line() -> None:
    with pytest.raises(SystolicError, match=r"neuronxcc\.nki\.docs: .*bundled copies") as e:
        import neuronxcc.nki.docs.examples.layernorm  # type: ignore[import-not-found]  # noqa: F401
    assert "\n" not in str(e.value)
