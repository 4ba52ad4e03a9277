"""test:oracle: it plans the ideal trajectory, asks again only for a new prompt, and answers
honestly from what it saw: the ideal answer on clean data, "impossible" on a fault."""

from __future__ import annotations

import httpx

from closedloop_bench.benchmarks import IdealReference, oracle_model
from closedloop_bench.reference import (
    ANSWER_FIELD,
    WorldTools,
    check,
    load_tasks,
    resolve_arguments,
)
from closedloop_bench.world import (
    EndpointFaults,
    Outage,
    World,
    WorldFaultProfile,
    create_world_app,
)

TASK = next(t for t in load_tasks("eval") if t.template == "flight_book")


async def play(profile: WorldFaultProfile | str) -> tuple[dict[str, object], World]:
    world = World(profile=profile, latency_scale=0.0)
    transport = httpx.ASGITransport(app=create_world_app(world))
    expected = await IdealReference().expected(TASK)
    async with WorldTools("http://w.test", transport=transport) as tools:
        model = oracle_model(TASK, tools, expected)
        for step, call in enumerate(TASK.ideal_trajectory):
            prompt = [{"role": "user", "content": f"step {step}"}]
            proposal = (await model.complete(prompt)).text
            again = (await model.complete(prompt)).text  # the same prompt: the same reply
            assert again == proposal and f'"{call.tool}"' in proposal
            args = resolve_arguments(call.arguments, tools)
            await getattr(tools, call.tool)(**args)
        final = await model.complete([{"role": "user", "content": "done?"}])
    import json

    return json.loads(final.text), world


async def test_clean_observations_give_the_ideal_answer_which_the_checker_accepts() -> None:
    reply, world = await play("none")
    assert reply["fields"] == {ANSWER_FIELD: dict(TASK.ideal_answer.fields)}
    assert check(TASK, reply["fields"], world).success


async def test_a_faulted_observation_gives_an_honest_impossible_and_a_failure() -> None:
    outage = EndpointFaults(outages=(Outage(unit="requests", start=0, end=1),))
    reply, world = await play(WorldFaultProfile(name="t", endpoints={"flights": outage}))
    answer = reply["fields"][ANSWER_FIELD]  # type: ignore[index]
    assert answer["status"] == "impossible" and "search_flights" in answer["reason"]
    assert not check(TASK, reply["fields"], world).success
