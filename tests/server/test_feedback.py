"""``POST /v1/sessions/{id}/runs/{run_id}/feedback``: a verdict for the risk controller."""

from __future__ import annotations

import pytest

from closedloop import Runtime
from closedloop.agent import Agent, ControlConfig, RiskControl, Sampling
from closedloop.control import FixedVotes
from closedloop.server import AgentContext

from .conftest import HarnessFactory, add, make_registry, new_session, start_run

RISK = RiskControl(alpha=0.1, ki=0.1, start=0.5)


def risky_agent(ctx: AgentContext) -> Agent:
    sampling = Sampling(stop=FixedVotes(k=2), risk=RISK)
    return Agent(
        ctx.model, [add], control=ControlConfig(sampling=sampling), runtime=Runtime(store=ctx.store)
    )


async def test_feedback_moves_the_threshold_in_the_callers_store(
    make_harness: HarnessFactory,
) -> None:
    registry = make_registry()
    registry.register("risky", risky_agent, description="adds, with a risk controller")
    harness = await make_harness(registry=registry)
    alice = harness.client("alice")
    sid = await new_session(alice)
    rid = await start_run(alice, sid, "risky", "Add 2 and 3")
    await harness.settle()
    result = (await alice.get(f"/v1/sessions/{sid}/runs/{rid}/result")).json()
    assert result["success"], result
    url = f"/v1/sessions/{sid}/runs/{rid}/feedback"

    wrong = await alice.post(url, json={"ok": False})
    assert wrong.status_code == 200, wrong.text
    thresholds = wrong.json()["thresholds"]
    (key,) = [k for k in thresholds if k.endswith("/add")]
    assert thresholds[key] == pytest.approx(0.5 + 0.1 * 0.9)
    # Kept in the store: a second verdict, from a fresh agent, starts from the first.
    again = await alice.post(url, json={"ok": False})
    assert again.json()["thresholds"][key] == pytest.approx(0.5 + 2 * 0.1 * 0.9)
    right = await alice.post(url, json={"ok": True})
    assert right.json()["thresholds"][key] == pytest.approx(0.5 + 0.1 * (1.8 - 0.1))

    # Another key cannot see the run, and so cannot move its threshold.
    hidden = await harness.client("bob").post(url, json={"ok": True})
    assert hidden.status_code == 404


async def test_feedback_for_an_agent_without_a_risk_controller_is_refused(
    make_harness: HarnessFactory,
) -> None:
    harness = await make_harness()
    alice = harness.client("alice")
    sid = await new_session(alice)
    rid = await start_run(alice, sid, "calc", "Add 2 and 3")
    await harness.settle()
    url = f"/v1/sessions/{sid}/runs/{rid}/feedback"
    refused = await alice.post(url, json={"ok": True})
    assert refused.status_code == 422
    assert "risk" in refused.json()["detail"]
    assert (await alice.post(url, json={"ok": "maybe"})).status_code == 422
