"""Runners (objects with run/resume, like the reference agents) behind the same API."""

from __future__ import annotations

from typing import Any

import pytest

from closedloop import RunLimits, Runtime
from closedloop.agent import Agent, RunResult, Task, TraceSink, stop_on_no_progress, stop_on_repeats
from closedloop.feedback import StateStore
from closedloop.models import Model
from closedloop.server import AgentContext, AgentRegistry
from closedloop_bench.world import serve_world_async

from .conftest import SENSOR_CONTROL, HarnessFactory, RoutingModel, add, new_session, probe


class MiniRunner:
    """What a reference agent looks like to the service: run/resume, traces at construction."""

    def __init__(self, model: Model, tools: list[Any], store: StateStore, trace: TraceSink | None):
        self.store = store
        self.closed = False
        self._agent = Agent(
            model,
            tools,
            control=SENSOR_CONTROL,
            runtime=Runtime(store=store, trace=trace),
            limits=RunLimits(stop=stop_on_no_progress(20) | stop_on_repeats(2)),
        )

    async def run(self, task: str, *, session_id: str) -> RunResult:
        return await self._agent.run(Task(task, task_id=session_id), session_id=session_id)

    async def resume(self, handover_id: str, task: str) -> RunResult:
        return await self._agent.resume(handover_id)

    async def aclose(self) -> None:
        self.closed = True


def runner_registry(made: list[MiniRunner]) -> AgentRegistry:
    registry = AgentRegistry()

    def factory(tools: list[Any]) -> Any:
        def build(ctx: AgentContext) -> MiniRunner:
            runner = MiniRunner(ctx.model, tools, ctx.store, ctx.trace)
            made.append(runner)
            return runner

        return build

    registry.register("calc", factory([add]))
    registry.register("sensor", factory([probe]))
    return registry


async def test_a_runner_runs_freezes_and_resumes_through_the_api(
    make_harness: HarnessFactory,
) -> None:
    made: list[MiniRunner] = []
    harness = await make_harness(registry=runner_registry(made))
    alice = harness.client("alice")
    sid = await new_session(alice)
    calc = await alice.post(
        f"/v1/sessions/{sid}/runs", json={"agent": "calc", "task": "Add 20 and 22."}
    )
    sensor = await alice.post(f"/v1/sessions/{sid}/runs", json={"agent": "sensor", "task": "Read."})
    await harness.settle()
    done = (await alice.get(f"/v1/sessions/{sid}/runs/{calc.json()['id']}")).json()
    assert done["status"] == "done" and done["answer"] == "42" and done["steps"] == 2
    assert all(r.closed for r in made)
    frozen = (await alice.get(f"/v1/sessions/{sid}/runs/{sensor.json()['id']}")).json()
    assert frozen["status"] == "handover"
    (listed,) = (await alice.get("/v1/handovers")).json()["handovers"]
    assert listed["run_id"] == sensor.json()["id"] and listed["session_id"] == sid
    decided = await alice.post(f"/v1/handovers/{frozen['handover_id']}/approve")
    assert decided.status_code == 200
    await harness.settle()
    final = (await alice.get(f"/v1/sessions/{sid}/runs/{sensor.json()['id']}")).json()
    assert final["status"] == "done" and final["success"] is True and final["steps"] == 9
    trace = (await alice.get(f"/v1/sessions/{sid}/runs/{sensor.json()['id']}/trace")).json()
    assert [s["step"] for s in trace["steps"]] == list(range(9))
    assert (await alice.delete(f"/v1/sessions/{sid}")).status_code == 204


async def test_a_runner_is_cancelled_by_cancelling_its_task(make_harness: HarnessFactory) -> None:
    harness = await make_harness(registry=runner_registry([]), model=RoutingModel(delay_s=5.0))
    alice = harness.client("alice")
    sid = await new_session(alice)
    run = (
        await alice.post(f"/v1/sessions/{sid}/runs", json={"agent": "calc", "task": "Add 1 and 1."})
    ).json()
    assert (await alice.post(f"/v1/sessions/{sid}/runs/{run['id']}/cancel")).status_code == 202
    await harness.settle()
    status = (await alice.get(f"/v1/sessions/{sid}/runs/{run['id']}")).json()
    assert status["status"] == "cancelled" and status["message"] == "cancelled on request"


async def test_a_runner_cancelled_before_its_task_began_is_recorded_cancelled(
    make_harness: HarnessFactory,
) -> None:
    harness = await make_harness(registry=runner_registry([]), model=RoutingModel(delay_s=5.0))
    alice = harness.client("alice")
    sid = await new_session(alice)
    principal = await harness.service.keys.verify(harness.keys["alice"])
    assert principal is not None
    store = harness.service.scoped(principal)
    record, started = await harness.service.runs.start_or_join(
        store, sid, "calc", "Add 1 and 1.", {}
    )
    # In the same turn of the event loop: the run's task exists but has not begun.
    assert started and harness.service.runs.cancel(store, f"{sid}/{record['id']}")
    await harness.settle()
    status = (await alice.get(f"/v1/sessions/{sid}/runs/{record['id']}")).json()
    assert status["status"] == "cancelled" and status["message"] == "cancelled on request"
    assert harness.service.runs.local_runs == 0


@pytest.mark.integration
async def test_the_weather_reference_agent_runs_against_a_real_world(
    make_harness: HarnessFactory,
) -> None:
    async with serve_world_async("none", latency_scale=0.0) as world:
        harness = await make_harness(
            registry=AgentRegistry.with_reference(), world_url=world.base_url
        )
        alice = harness.client("alice")
        agents = {a["name"]: a for a in (await alice.get("/v1/agents")).json()["agents"]}
        assert agents["weather"]["source"] == "reference" and agents["weather"]["available"]
        sid = await new_session(alice)
        started = await alice.post(
            f"/v1/sessions/{sid}/runs", json={"agent": "weather", "task": "上海明天天气怎么样?"}
        )
        assert started.status_code == 202, started.text
        await harness.settle()
        run = (await alice.get(f"/v1/sessions/{sid}/runs/{started.json()['id']}")).json()
        assert run["status"] in ("done", "handover"), run
        assert run["steps"] >= 1
        trace = (await alice.get(f"/v1/sessions/{sid}/runs/{run['id']}/trace")).json()["steps"]
        assert trace and trace[0]["run_id"] == run["agent_run_id"]
        if run["status"] == "done" and run["success"]:
            assert "上海" in run["answer"] or "Shanghai" in run["answer"]
