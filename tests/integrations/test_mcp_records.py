"""What a run's records say about its MCP tools: each tool's effect class, and the retries
the server's own policy made after its process died (a real server, killed by the test)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from closedloop import Agent, Runtime
from closedloop.agent import HaltReason, RunLimits
from closedloop.integrations import McpServer, mcp_server
from closedloop.models import FunctionModel, ScriptedModel

from .conftest import SHOP_SERVER, PidFile, process_alive

pytestmark = pytest.mark.integration  # each test starts the SDK's server (seconds)


def shop(pidfile: PidFile, **options: Any) -> McpServer:
    return mcp_server([sys.executable, str(SHOP_SERVER), "--pidfile", str(pidfile.path)], **options)


def call(tool: str, **arguments: Any) -> dict[str, Any]:
    return {"tool": tool, "arguments": arguments}


def kill_and_wait(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10.0  # the kernel's time to end it, not a clock under test
    while process_alive(pid):
        assert time.monotonic() < deadline, f"server {pid} outlived SIGKILL"
        time.sleep(0.01)


def test_each_tools_effect_class_is_in_the_trace_and_the_result_file(
    pidfile: PidFile, tmp_path: Path
) -> None:
    server = shop(pidfile, effects={"note": "once"})
    model = ScriptedModel(
        [call("lookup", city="Paris"), call("note", text="hi"), {"final": "done"}]
    )
    trace = tmp_path / "run" / "trace.jsonl"
    result = Agent(
        model, tools=[server], runtime=Runtime(trace=trace), limits=RunLimits(stop=None)
    ).run_sync("Look and note.")
    assert result.success, result.message
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    steps = [line for line in lines if line.get("action")]
    assert [(s["action"]["tool"], s["effect"]) for s in steps] == [
        ("lookup", "recomputable"),  # the server annotates it read-only
        ("note", "once"),  # declared
    ]
    stored = json.loads((trace.parent / "result.json").read_text())
    assert stored["tool_effects"]["lookup"] == "recomputable"
    assert stored["tool_effects"]["place_order"] == "irreversible"  # unannotated: the default
    assert stored["tool_effects"]["note"] == "once"
    assert [s["effect"] for s in stored["steps"] if s["action"]] == ["recomputable", "once"]
    assert pidfile.alive() == []


def test_a_killed_server_is_reconnected_and_the_retry_is_on_the_step(pidfile: PidFile) -> None:
    def model_fn(messages: Any, info: Any) -> Any:
        if len(model.calls) == 1:
            return call("lookup", city="Paris")
        if len(model.calls) == 2:  # between the two reads the server dies
            (pid,) = pidfile.alive()
            kill_and_wait(pid)
            return call("search", prefix="ap")
        return {"final": "18.5 C; apple and apricot"}

    model = FunctionModel(model_fn)
    agent = Agent(model, tools=[shop(pidfile)], limits=RunLimits(max_steps=4, stop=None), runtime=Runtime(trace=False))  # fmt: skip
    result = agent.run_sync("Twice the weather in Paris.")
    assert result.halt_reason is HaltReason.FINAL and result.success, result.message
    first, second = result.steps[0], result.steps[1]
    assert first.retries == []
    assert second.observation is not None and second.observation["status"] == "ok"
    assert len(second.retries) == 1, second.retries
    retry = second.retries[0]
    assert retry["attempt"] == 1 and retry["status"] == "error"
    assert "reconnected" in retry["reason"] and "search" in (retry["error"] or "")
    assert any("more time(s)" in note for note in second.notes)
    # the listing's server, the run's first, and the one the read reconnected to
    assert len(pidfile.pids()) == 3 and pidfile.alive() == []


def test_a_call_that_kills_its_server_says_it_was_retried(pidfile: PidFile) -> None:
    model = ScriptedModel([call("crash"), {"final": "gone"}])
    agent = Agent(
        model, tools=[shop(pidfile)], runtime=Runtime(trace=False), limits=RunLimits(stop=None)
    )
    result = agent.run_sync("Crash it.")
    crashed = result.steps[0]
    assert crashed.observation is not None and crashed.observation["status"] == "error"
    assert "retried 1 time(s) after reconnecting" in crashed.observation["error"]
    assert [r["attempt"] for r in crashed.retries] == [1]
    assert pidfile.alive() == []
