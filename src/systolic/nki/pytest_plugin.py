"""A pytest plugin that runs a kernel author's own NKI tests on the model, unchanged.

    pytest -p systolic.nki.pytest_plugin tests/test_my_kernels.py [--nki-arch trn3]

At configuration, before any test module is imported, it installs the import hook
(:func:`systolic.nki.install`), so ``import nki`` / ``import neuronxcc.nki`` in the test files
and in the kernels they import resolve to systolic's front end; kernels then run on the
functional simulator (``nki.simulate_kernel``, ``@nki.jit`` calls) and ``nki.benchmark``
times them on the modelled NeuronCore. ``--nki-arch`` names the machine of kernels that
name no ``platform_target`` (default trn2). Unsupported NKI calls fail the test with the
model's one-line ``KernelError`` naming the feature.
"""

from __future__ import annotations

from typing import Any

__all__ = ["pytest_addoption", "pytest_configure", "pytest_unconfigure"]


def pytest_addoption(parser: Any) -> None:
    parser.addoption("--nki-arch", default="trn2",
                     help="machine of kernels that name no platform_target (systolic.nki)")


def pytest_configure(config: Any) -> None:
    from .hook import install

    install(config.getoption("--nki-arch"))


def pytest_unconfigure(config: Any) -> None:
    from .hook import uninstall

    uninstall()
