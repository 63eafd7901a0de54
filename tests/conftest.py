"""Shared test settings: hypothesis profiles (CI runs fewer examples of the slow ones), and
the dependency tracker's two modes for the timing tests that ask for them."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=25, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.fixture(scope="module", params=["buckets", "flat"])
def tracker_mode(request: pytest.FixtureRequest):
    """Each test of a module that uses it (``pytestmark = pytest.mark.usefixtures(
    "tracker_mode")``) twice: the dependency tracker scans its records flat up to
    ``deps.FLAT_REGIONS`` regions and files them in buckets past that (issue 20); the
    programs of the hand-worked timing tests are small, so without this they would only see
    the flat scan."""
    from systolic.timing import deps

    old = deps.FLAT_REGIONS
    deps.FLAT_REGIONS = 0 if request.param == "buckets" else old
    yield request.param
    deps.FLAT_REGIONS = old
