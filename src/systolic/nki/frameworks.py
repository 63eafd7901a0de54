"""PyTorch and JAX arrays in and out of a kernel call: the model computes on numpy.

On a Neuron machine a kernel is called from PyTorch (tensors on an XLA device,
``torch_xla``) or JAX and returns that framework's arrays; NKI's own examples come in
``*_torch.py`` / ``*_jax.py`` pairs around one kernel file. :func:`unwrap` turns every
``torch.Tensor`` or ``jax.Array`` argument into the numpy array of its values (bf16 and fp8
as ml_dtypes, bit for bit) and gives back the function that turns the kernel's numpy
outputs into the first such argument's kind (a torch tensor on that argument's device, or
a JAX array). Neither framework is imported here: an argument is one of theirs only if its
module is already loaded.

``torch_xla`` and ``torch_neuronx`` stand-ins (:mod:`systolic.nki.xla_device`) let the
PyTorch scripts run on a machine without them; the import hook installs them only where
those packages are missing.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["from_numpy", "is_framework_array", "to_numpy", "unwrap"]


def _torch() -> Any:
    return sys.modules.get("torch")


def _is_torch(x: Any) -> bool:
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


def _is_jax(x: Any) -> bool:
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(x, jax.Array)


def is_framework_array(x: Any) -> bool:
    """Whether ``x`` is a torch tensor or a JAX array."""
    return _is_torch(x) or _is_jax(x)


def _torch_views() -> dict[Any, tuple[Any, Any]]:
    """torch dtypes numpy lacks: (the torch integer dtype of the same width, ml_dtypes)."""
    import ml_dtypes

    torch = _torch()
    pairs = {"bfloat16": (torch.int16, ml_dtypes.bfloat16),
             "float8_e4m3fn": (torch.uint8, ml_dtypes.float8_e4m3fn),
             "float8_e5m2": (torch.uint8, ml_dtypes.float8_e5m2)}
    return {getattr(torch, k): v for k, v in pairs.items() if hasattr(torch, k)}


def to_numpy(x: Any) -> np.ndarray:
    """The numpy array of a torch tensor's or JAX array's values, bits unchanged."""
    if _is_jax(x):
        return np.asarray(x)  # JAX's bf16 / fp8 are ml_dtypes already
    t = x.detach().cpu()
    view = _torch_views().get(t.dtype)
    if view is not None:
        return t.contiguous().view(view[0]).numpy().view(view[1])
    return t.numpy()


def from_numpy(a: np.ndarray, like: Any) -> Any:
    """``a`` as the kind of array ``like`` is (a torch tensor on ``like``'s device, or a
    JAX array), bits unchanged."""
    if _is_jax(like):
        import jax.numpy as jnp

        return jnp.asarray(a)
    torch = _torch()
    a = np.ascontiguousarray(a)
    for tdtype, (tint, npdtype) in _torch_views().items():
        if a.dtype == np.dtype(npdtype):
            raw = a.view(np.int16 if tint == torch.int16 else np.uint8)
            return torch.from_numpy(raw).view(tdtype).to(like.device)
    return torch.from_numpy(a).to(like.device)


def unwrap(args: Sequence[Any], kwargs: dict[str, Any]
           ) -> tuple[list[Any], dict[str, Any], Callable[[Any], Any] | None]:
    """``args`` and ``kwargs`` with every framework array as numpy, and the function that
    turns the kernel's outputs back (None when no argument was a framework array)."""
    like = next((a for a in (*args, *kwargs.values()) if is_framework_array(a)), None)
    if like is None:
        return list(args), kwargs, None
    conv = [to_numpy(a) if is_framework_array(a) else a for a in args]
    kconv = {k: to_numpy(v) if is_framework_array(v) else v for k, v in kwargs.items()}

    def back(out: Any) -> Any:
        if isinstance(out, np.ndarray):
            return from_numpy(out, like)
        if isinstance(out, tuple | list):
            return type(out)(back(o) for o in out)
        return out

    return conv, kconv, back
