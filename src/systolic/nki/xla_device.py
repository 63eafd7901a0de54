"""Stand-ins for ``torch_xla`` and ``torch_neuronx``, for NKI's PyTorch scripts on a
machine without them (the import hook installs them only there).

NKI's PyTorch examples put their tensors on ``xm.xla_device()`` and call the kernel with
them; on hardware that device is a NeuronCore. Here the kernel runs on the model
(:mod:`systolic.nki.frameworks` hands it the tensors' values), so the device is the CPU,
where PyTorch computes the script's own reference. ``torch_neuronx.nki_jit`` is NKI's jit.
Any other name of those packages is refused in one line naming it.
"""

from __future__ import annotations

from typing import Any

from .spmd import jit as nki_jit

__all__ = ["mark_step", "nki_jit", "trace", "xla_device"]


def xla_device(n: Any = None, devkind: Any = None) -> Any:
    """``torch_xla.core.xla_model.xla_device()``: the CPU, where the model's results land."""
    import torch

    return torch.device("cpu")


def mark_step(*args: Any, **kwargs: Any) -> None:
    """``xm.mark_step()`` cuts an XLA graph and runs it; a kernel here has run already."""


def trace(func: Any, example_inputs: Any = None, *args: Any, **kwargs: Any) -> Any:
    """``torch_neuronx.trace(func, example_inputs)`` compiles a PyTorch function for a
    NeuronCore; NKI's scripts use it for the reference they compare a kernel with. Here
    that reference is ``func`` itself, run by PyTorch on the CPU (the model times and
    computes NKI kernels, not PyTorch graphs)."""
    return func
