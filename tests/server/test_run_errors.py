"""An exception inside a run reaches the service as a run record with status ``error``."""

from __future__ import annotations

import json

from closedloop import Runtime
from closedloop.agent import Agent
from closedloop.models import ScriptedModel
from closedloop.server import AgentContext, AgentRegistry

from .conftest import HarnessFactory, new_session


def broken(city: str) -> dict[str, object]:
    """The weather in a city (with a bug)."""
    return {"city": city, "days": len(city) + "1"}  # type: ignore[operator]


async def test_a_bug_in_a_tool_ends_the_run_record_as_error(make_harness: HarnessFactory) -> None:
    registry = AgentRegistry()

    def build(ctx: AgentContext) -> Agent:
        script = [json.dumps({"tool": "broken", "arguments": {"city": "Paris"}})]
        return Agent(ScriptedModel(script), [broken], runtime=Runtime(store=ctx.store))

    registry.register("weather", build)
    harness = await make_harness(registry=registry)
    alice = harness.client("alice")
    sid = await new_session(alice)
    posted = await alice.post(f"/v1/sessions/{sid}/runs", json={"agent": "weather", "task": "?"})
    await harness.settle()
    run = (await alice.get(f"/v1/sessions/{sid}/runs/{posted.json()['id']}")).json()
    assert (run["status"], run["halt_reason"], run["success"]) == ("error", "error", False)
    assert "tool 'broken'" in run["message"] and "TypeError" in run["message"]
