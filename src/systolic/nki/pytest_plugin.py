"""A pytest plugin that runs a kernel author's own NKI tests on the model, unchanged.

    pytest -p systolic.nki.pytest_plugin tests/test_my_kernels.py [--nki-arch trn3]

At configuration, before any test module is imported, it installs the import hook
(:func:`systolic.nki.install`), so ``import nki`` / ``import neuronxcc.nki`` in the test files
and in the kernels they import resolve to systolic's front end; kernels then run on the
functional simulator (``nki.simulate_kernel``, ``@nki.jit`` calls) and ``nki.benchmark``
times them on the modelled NeuronCore. ``--nki-arch`` names the machine of kernels that
name no ``platform_target`` (default trn2). Unsupported NKI calls fail the test with the
model's one-line ``KernelError`` naming the feature. A store of values computed from memory
nothing wrote is a warning here, not an error (:data:`systolic.nki.valid.POLICY`): the
values are the model's fill (NaN for floats), as hardware stores garbage, and the test's
own assertions judge them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["pytest_addoption", "pytest_configure", "pytest_unconfigure"]


def pytest_addoption(parser: Any) -> None:
    parser.addoption("--nki-arch", default="trn2",
                     help="machine of kernels that name no platform_target (systolic.nki)")


_POLICY: list[str] = []


def pytest_configure(config: Any) -> None:
    from . import valid
    from .hook import install

    install(config.getoption("--nki-arch"))
    _POLICY.append(valid.POLICY)
    valid.POLICY = "warn"


def pytest_unconfigure(config: Any) -> None:
    from . import valid
    from .hook import uninstall

    uninstall()
    if _POLICY:
        valid.POLICY = _POLICY.pop()
