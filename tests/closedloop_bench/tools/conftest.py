"""Test configuration of the tool-calling benchmark: real model calls are blocked unless a
test is marked ``real_model``, as in the library's own suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from closedloop.models import allow_real_model_calls


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "real_model: the test may call real models (local GGUF or a real server)"
    )


@pytest.fixture(autouse=True)
def _real_model_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    allowed = request.node.get_closest_marker("real_model") is not None
    with allow_real_model_calls(allowed):
        yield
