"""Shared test configuration. Sections are owned by the area that needs them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Hypothesis: a thorough profile for benchmarks and local runs, a lean one in CI.
settings.register_profile(
    "ci", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "dev", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def closedloop_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An isolated $CLOSEDLOOP_HOME for tests that write state or runs."""
    home = tmp_path / "closedloop-home"
    home.mkdir()
    monkeypatch.setenv("CLOSEDLOOP_HOME", str(home))
    yield home


# --- models: real-model guard (owned by the models area) ---


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "real_model: the test may call real models (local GGUF or a real server)"
    )


@pytest.fixture(autouse=True)
def _real_model_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    """Block real model calls in every test unless it is marked ``real_model``."""
    from closedloop.models import allow_real_model_calls

    allowed = request.node.get_closest_marker("real_model") is not None
    with allow_real_model_calls(allowed):
        yield
