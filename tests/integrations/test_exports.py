"""The public surface of closedloop.integrations is a decision, not an accident."""

from __future__ import annotations

import subprocess
import sys

import closedloop.integrations as integrations

EXPECTED = {
    "DEFAULT_GAINS", "EMPTY_ERROR", "EXCEPTION_ERROR", "ClosedLoopMiddleware", "ControlContext",
    "ControlLoop", "ControlRecord", "Controlled", "Invocation", "McpServer", "check_error",
    "controlled", "default_metric", "default_route_key", "inject_rigour", "json_metric",
    "mcp_server", "rigour_prompt", "status_error", "strip_rigour",
}  # fmt: skip


def isort_order(name: str) -> tuple[int, str]:
    """ruff's __all__ order: CONSTANTS, then Classes, then functions."""
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


def test_exported_members_are_pinned_and_sorted() -> None:
    assert set(integrations.__all__) == EXPECTED
    assert integrations.__all__ == sorted(integrations.__all__, key=isort_order)
    for name in integrations.__all__:
        obj = getattr(integrations, name)
        if isinstance(obj, type):
            assert obj.__module__ == "closedloop.integrations", name


def test_the_package_and_the_core_do_not_import_langgraph_or_mcp() -> None:
    # A fresh interpreter: other tests in this process may have imported langgraph.
    code = (
        "import sys, closedloop, closedloop.control, closedloop.perception, "
        "closedloop.integrations\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('langgraph', 'langchain_core', 'fastapi', 'starlette', 'mcp', 'mcp_types'))\n"
        "print(','.join(bad))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == ""


def test_the_core_never_imports_the_integrations() -> None:
    code = (
        "import sys, closedloop.control, closedloop.perception, closedloop.execution\n"
        "print(any(m.startswith('closedloop.integrations') for m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "False"
