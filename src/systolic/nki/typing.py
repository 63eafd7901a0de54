"""``nki.typing`` (``nt``) of the older API: ``nt.tensor[[shape], dtype]`` describes a
kernel argument by shape and dtype only (for ``nki.benchmark`` without values)."""

from __future__ import annotations

from .types import TensorSpec, tensor

__all__ = ["TensorSpec", "tensor"]
