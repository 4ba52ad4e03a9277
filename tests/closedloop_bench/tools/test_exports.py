"""The public surface of closedloop_bench.tools is pinned (adding a name is a decision)."""

from __future__ import annotations

import inspect

import closedloop_bench.tools as tools

EXPECTED = {
    "AGENT_STRATEGY_NAMES", "DATA_DIR", "DEFAULT_COUNTS", "DEFAULT_MAX_STEPS", "FROZEN_U", "ENVIRONMENTS", "FAMILIES",
    "MAX_CALLS", "STRING_LIMIT", "TOOL_TEST_MODELS",
    "AgentStrategy", "ArgRule", "Attempt", "Call", "CallResult", "Cell", "Environment", "Expected",
    "ExpectedCall", "FunctionDef", "ModelProvider", "OpenLoop", "ParsedReply", "ReAsk", "ToolStrategy",
    "Strict", "ToolTask", "TaskFileError", "TaskMessage", "TaskResult", "TaskScore", "TaskTools",
    "ToolSchema", "ToolsConfig", "ToolsReport", "Votes",
    "agent_instructions", "agent_takes_ladder", "check_reply",
    "build_messages", "describe_tool_tasks", "dump_tasks", "fixed_frontier", "generate_split", "generate_tasks",
    "get_tool_strategy", "ideal_reply", "load_tool_tasks", "oracle_calls", "parse_reply", "parse_task",
    "plot_plane", "read_report", "register_family", "register_strategy", "render_table", "replay",
    "resolve_models", "run_tools_bench", "score", "states_match", "strategy_names",
    "strict_schema", "summarise", "system_prompt", "task_request", "write_data", "write_report",
}  # fmt: skip


def isort_order(name: str) -> tuple[int, str]:
    """ruff's __all__ order: CONSTANTS, then Classes, then functions."""
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


def test_exported_members_are_pinned_sorted_and_documented() -> None:
    assert set(tools.__all__) == EXPECTED
    assert tools.__all__ == sorted(tools.__all__, key=isort_order)
    for name in tools.__all__:
        obj = getattr(tools, name)
        if isinstance(obj, type) or inspect.isfunction(obj):
            # TaskFileError is the harness's, re-exported: one error for every task file.
            home = "closedloop.harness" if name == "TaskFileError" else "closedloop_bench.tools"
            assert obj.__module__.startswith(home), name
            assert inspect.getdoc(obj), f"{name} has no docstring"
