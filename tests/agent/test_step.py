"""One step as one object: the control signal a step's update returns is what the next
step acts on, under the key scheme of ``_actuators.py``."""

from __future__ import annotations

from typing import Any

import pytest

from closedloop.agent import ControlConfig
from closedloop.agent._actuators import FINAL, Actuators, Controllers, act_key, propose_key
from closedloop.agent._control import ControllerBank
from closedloop.feedback import MemoryStore
from closedloop.perception import Observation

from .conftest import call, final, make_agent, scripted


def test_the_key_scheme_names_each_controller() -> None:
    assert propose_key("react") == "propose:react"
    assert act_key("search") == "search"
    assert FINAL == "final"


async def test_an_update_hands_on_the_settings_the_bank_would_answer() -> None:
    store = MemoryStore()
    bank = ControllerBank(ControlConfig(), store)
    controllers = Controllers(bank)
    start = Actuators()
    update = await controllers.update(start, "search", 0.8)
    carried = update.actuators.get("search")
    assert carried is not None and carried.u == pytest.approx(await bank.output("search"))
    assert carried.u > 0.0 and start.get("search") is None  # the value is new, not mutated
    assert await controllers.settings(update.actuators, "search") is carried
    held = await controllers.held(update.actuators, "search")
    assert held.u == carried.u and held.actuators is update.actuators


async def test_a_key_the_run_has_not_fed_starts_from_its_history() -> None:
    store = MemoryStore()
    await store.record_put("control", "lookup", {"errors": [1.0, 1.0, 1.0]})
    controllers = Controllers(ControllerBank(ControlConfig(), store))
    warm = await controllers.settings(Actuators(), "lookup")
    cold = await controllers.settings(Actuators(), "never_seen")
    assert warm.u > 0.5 and cold.u == 0.0


async def test_the_tools_error_reaches_its_next_call_as_its_settings() -> None:
    def lookup(key: str) -> Any:
        """Always answers with half the fields missing."""
        return Observation.partial({"key": key}, source="lookup", missing=["value"])

    model = scripted(call("lookup", key="a"), call("lookup", key="b"), final("none"))
    agent, _ = make_agent(model, [lookup])
    result = await agent.run("look both up")
    first, second = result.steps[0], result.steps[1]
    assert first.step_type == second.step_type == "lookup" and first.error > 0.0
    # u after the first lookup's update is the setting the second lookup ran under
    assert first.actuators["u"] == 0.0
    assert second.actuators["u"] == pytest.approx(first.control) and first.control > 0.0
    # the proposal was accepted both times: its own controller was fed a zero error
    assert second.actuators["model_u"] == 0.0


async def test_a_refused_proposal_raises_the_next_proposals_control_signal() -> None:
    model = scripted({"tool": "nope", "arguments": {}}, final("done"))
    agent, _ = make_agent(model, [lambda_free_tool])
    result = await agent.run("go")
    refused = result.steps[0]
    assert refused.step_type == propose_key("react") and refused.error == 1.0
    assert refused.validation_errors and refused.control > 0.0
    # the next proposal was made under the refused key's raised output
    assert result.steps[1].actuators["model_u"] == pytest.approx(refused.control)


def lambda_free_tool(x: int) -> int:
    """Echoes its argument."""
    return x
