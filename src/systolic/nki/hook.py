"""The import hook: ``import nki`` (and the older ``neuronxcc.nki``) reach this front end.

:func:`install` puts a :class:`NkiFinder` first on ``sys.meta_path``. It answers only for
the module names in :data:`ALIASES`; each resolves to a fresh module object carrying the
public names of the matching ``systolic.nki`` module (so ``nki.isa.nc_matmul`` is
``systolic.nki.isa.nc_matmul``); ``nki.jit`` is :func:`systolic.nki.spmd.jit`, whose
kernels also launch on an SPMD grid (``kernel[4, 2](...)``). If a real ``nki`` or
``neuronxcc`` package is installed, :func:`install` says so in one warning line before it
takes precedence for this process.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings
from collections.abc import Sequence

from ..errors import SystolicError

__all__ = ["ALIASES", "FRAMEWORK_ALIASES", "NkiFinder", "install", "uninstall"]

ALIASES: dict[str, str] = {
    "nki": "systolic.nki",
    "nki.isa": "systolic.nki.isa",
    "nki.language": "systolic.nki.language",
    "nki.typing": "systolic.nki.typing",
    "nki.compiler": "systolic.nki.compiler",
    "neuronxcc": "systolic.nki.neuronxcc",
    "neuronxcc.nki": "systolic.nki",
    "neuronxcc.nki.isa": "systolic.nki.isa",
    "neuronxcc.nki.language": "systolic.nki.language",
    "neuronxcc.nki.typing": "systolic.nki.typing",
    "neuronxcc.nki.compiler": "systolic.nki.compiler",
}


# PyTorch's Neuron packages, for NKI's PyTorch scripts: stood in for only where they are
# not installed (install() decides; nki/xla_device.py)
FRAMEWORK_ALIASES: dict[str, str] = {
    "torch_xla": "systolic.nki.xla_device",
    "torch_xla.core": "systolic.nki.xla_device",
    "torch_xla.core.xla_model": "systolic.nki.xla_device",
    "torch_neuronx": "systolic.nki.xla_device",
}
_SHIMS: dict[str, str] = {}

# the names kernels import these modules as, for messages
_SHORT = {f"{top}{sub}": short for top in ("nki", "neuronxcc.nki") for sub, short in (
    (".isa", "nisa"), (".language", "nl"), (".typing", "nt"), (".compiler", "ncc"), ("", "nki"))}


class _Loader(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return types.ModuleType(spec.name, f"systolic's NKI front end ({self.target})")

    def exec_module(self, module: types.ModuleType) -> None:
        src = importlib.import_module(self.target)
        module.__dict__.update({k: v for k, v in vars(src).items()
                                if not k.startswith("__") or k == "__all__"})
        module.__dict__["__systolic_target__"] = self.target
        # a name the model lacks: one line naming it (nisa.X is not modelled), not an
        # AttributeError traceback
        from .record import missing_names

        module.__dict__["__getattr__"] = missing_names(_SHORT.get(module.__name__,
                                                                  module.__name__))


class NkiFinder(importlib.abc.MetaPathFinder):
    """Resolves the names of :data:`ALIASES` to the front end and those of ``_SHIMS`` to
    the framework stand-ins (nki/frameworks.py); refuses neuronxcc's bundled examples
    (``neuronxcc.nki.docs``) in one line; every other name passes."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: types.ModuleType | None = None
                  ) -> importlib.machinery.ModuleSpec | None:
        tgt = ALIASES.get(fullname) or _SHIMS.get(fullname)
        if tgt is None:
            if fullname.startswith(_BUNDLED):
                raise _bundled(fullname)
            return None
        is_pkg = any(name.startswith(fullname + ".") for name in (*ALIASES, *_SHIMS))
        return importlib.util.spec_from_loader(fullname, _Loader(tgt), is_package=is_pkg)


_FINDER = NkiFinder()

# neuronxcc ships copies of NKI's example kernels as a package (aws-neuron-sdk's layernorm
# PyTorch script imports its kernel from there)
_BUNDLED = "neuronxcc.nki.docs"


def _bundled(name: str) -> SystolicError:
    return SystolicError(f"{name}: neuronxcc's bundled copies of NKI's example kernels are "
                         f"not part of systolic's NKI front end; import the kernel file "
                         f"from its own folder")


def _real_package(name: str) -> bool:
    for finder in sys.meta_path:
        if finder is _FINDER or not hasattr(finder, "find_spec"):
            continue
        try:
            if finder.find_spec(name, None) is not None:
                return True
        except (ImportError, ValueError):
            continue
    return False


def install(arch: str = "trn2") -> None:
    """Route ``nki`` / ``neuronxcc.nki`` imports to this front end for the rest of the
    process, with ``arch`` as the default machine of kernels that name no target."""
    from .record import set_default_arch

    set_default_arch(arch)
    if _FINDER in sys.meta_path:
        return
    real = [n for n in ("nki", "neuronxcc") if _real_package(n)]
    if real:
        warnings.warn(f"systolic.nki.install: an installed {' and '.join(real)} is shadowed "
                      f"by systolic's NKI front end for this process", stacklevel=2)
    for name in ALIASES:  # a real module imported earlier would keep answering
        mod = sys.modules.get(name)
        if mod is not None and not hasattr(mod, "__systolic_target__"):
            del sys.modules[name]
    _SHIMS.clear()
    _SHIMS.update({n: t for n, t in FRAMEWORK_ALIASES.items()
                   if not _real_package(n.split(".")[0])})
    sys.meta_path.insert(0, _FINDER)


def uninstall() -> None:
    """Remove the hook and the aliased modules (tests use this to start clean)."""
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)
    for name in (*ALIASES, *_SHIMS):
        mod = sys.modules.get(name)
        if mod is not None and hasattr(mod, "__systolic_target__"):
            del sys.modules[name]
    _SHIMS.clear()
