"""The weather agent against a real world server: checked by the tasks' own checkers, under
no faults and under the seed000 faults, on bad input, with the model past the gate, and with
the PID on e2 driving its actuators."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from closedloop.agent import HaltReason
from closedloop.feedback import HandoverQueue, MemoryStore
from closedloop.models import CallInfo, FunctionModel, Message
from closedloop_bench.reference import ReferenceTask, check, load_tasks
from closedloop_bench.reference.weather import build_weather_agent
from closedloop_bench.world import EndpointFaults, WorldHandle, load_world, serve_world

WEATHER = [t for t in load_tasks("eval") if t.domain == "weather"]


async def no_wait(seconds: float) -> None:
    """Retry delays pass at once; the loop's deadline watcher (a long sleep) never fires."""
    if seconds > 30:
        await asyncio.Event().wait()


TYPOS = {t: c.name for c in load_world(0).cities for t in c.typos}


def read_place(messages: Sequence[Message], _call: CallInfo) -> dict[str, Any]:
    """A competent reader for the one question the agent asks: which served city a name
    means. It knows the world's misspellings and homophones (as a good model knows
    Chinese) and answers ``none`` for any other place."""
    written = messages[-1].content.rsplit("Name as written:", 1)[1].strip()
    return {"city": TYPOS.get(written, "none")}


def place_model() -> FunctionModel:
    return FunctionModel(read_place, name="place-reader")


@pytest.fixture(scope="module")
def faulty() -> Iterator[WorldHandle]:
    with serve_world("seed000", latency_scale=0.0) as handle:
        yield handle


async def _success(
    world: WorldHandle,
    tasks: Sequence[ReferenceTask],
    injected: list[int] | None = None,
    **options: Any,
) -> float:
    """The share of ``tasks`` the checkers pass; ``injected`` collects the errors injected."""
    async with build_weather_agent(
        options.pop("model", place_model()), base_url=world.base_url, sleep=no_wait, **options
    ) as agent:
        ok = 0
        for index, task in enumerate(tasks):
            world.reset(fault_seed=index)
            result = await agent.run(task)
            ok += check(task, result, world).success
            if injected is not None:
                injected.append(len(world.faults(kind="error")))
    return ok / len(tasks)


async def test_most_weather_tasks_succeed_on_a_clean_world(world: WorldHandle) -> None:
    # Measured: 84/84 of the evaluation split's weather tasks; a homophone (背景) is handed
    # over, since no rule can verify the model's reading of it.
    assert await _success(world, WEATHER[::2]) >= 0.95


async def test_seed000_faults_are_absorbed(faulty: WorldHandle) -> None:
    # 10 % of calls fail with 500/503: the executor retries with the PID's settings.
    injected: list[int] = []
    assert await _success(faulty, WEATHER[1::2], injected) >= 0.95  # measured 84/84
    assert sum(injected) >= 10


def _task(**match: Any) -> ReferenceTask:
    return next(
        t
        for t in (*load_tasks("dev"), *WEATHER)
        if t.domain == "weather" and all(getattr(t, k) == v for k, v in match.items())
    )


@pytest.mark.parametrize(
    ("prompt", "says"),
    [
        ("How is the weather in Atlantis tomorrow?", "Atlantis"),
        ("火星城明天的天气怎么样？", "火星城"),
        ("北京6月31日的天气如何？", "2025-06-31"),
        ("What is the weather in Beijing on June 28?", "2025-06-28"),
    ],
)
async def test_bad_input_is_answered_as_impossible(
    world: WorldHandle, prompt: str, says: str
) -> None:
    model = place_model()
    async with build_weather_agent(model, base_url=world.base_url, sleep=no_wait) as agent:
        result = await agent.run(prompt)
    answer = result.fields["answer"]
    assert result.halt_reason is HaltReason.FINAL
    assert answer["status"] == "impossible" and says in answer["reason"]
    assert not world.world.effects()
    # Latin names and dates are rules' business; only the Chinese name reached the model.
    assert len(model.calls) == (1 if says == "火星城" else 0)


async def test_impossible_tasks_of_the_split_are_never_answered(world: WorldHandle) -> None:
    bad = [t for t in WEATHER if t.impossible]
    assert bad and await _success(world, bad) == 1.0


async def test_a_homophone_is_handed_over_and_resumed_after_a_person_approves(
    world: WorldHandle,
) -> None:
    task = _task(prompt="查一下背景2025-06-05的天气。")
    store = MemoryStore()
    async with build_weather_agent(
        place_model(), base_url=world.base_url, store=store, sleep=no_wait
    ) as agent:
        frozen = await agent.run(task)
        assert frozen.halt_reason is HaltReason.HANDOVER and frozen.handover_id
        assert check(task, frozen, world).reason == "handed over a task that has an answer"
        queue = HandoverQueue(store)
        item = await queue.get(frozen.handover_id)
        assert item.audit["pending_action"]["arguments"]["suggestion"] == "北京"
        await queue.decide(frozen.handover_id, "approve", decided_by="tester")
        resumed = await agent.resume(frozen.handover_id, task)
    assert resumed.halt_reason is HaltReason.FINAL
    assert check(task, resumed, world).success
    assert resumed.fields["answer"]["city"] == "北京"


async def test_e2_raises_the_pid_which_raises_timeout_retries_and_prompt_rigour(
    world: WorldHandle,
) -> None:
    store = MemoryStore()
    prompts: list[str] = []

    def model(messages: Sequence[Message], call: CallInfo) -> Any:
        prompts.append(messages[0].content)
        return read_place(messages, call)

    async with build_weather_agent(
        FunctionModel(model), base_url=world.base_url, store=store, sleep=no_wait
    ) as agent:
        cold = await agent.run("查一下成都2025-06-05的天气。")
        await agent.run("拉萨2025-06-06的天气怎么样？")  # the model is asked, u = 0
        typo = await agent.run("查一下北就2025-06-05的天气。")  # e2 = 0.5
        for day in ("03", "04", "07"):
            await agent.run(f"查一下重亲2025-06-{day}的天气。")
        await agent.run("拉萨2025-06-06的天气怎么样？")  # asked again, u high
        warm = await agent.run("查一下成都2025-06-06的天气。")

    def weather_step(result: Any) -> Any:
        return next(s for s in result.steps if s.step_type == "get_weather")

    assert weather_step(cold).error == 0.0
    assert weather_step(typo).error == pytest.approx(0.5)
    before, after = weather_step(cold).actuators, weather_step(warm).actuators
    assert after["u"] > before["u"] > -1
    assert after["timeout_ms"] > before["timeout_ms"]
    assert after["max_retries"] >= before["max_retries"]
    # The dynamic prompt: the rigour text follows the PID level of get_weather.
    assert "Answer directly." in prompts[0]
    assert "Answer directly." not in prompts[-1]


async def test_passing_failures_are_retried_with_the_pids_settings(
    serve_faults: Any,
) -> None:
    faults = {"weather": EndpointFaults(error_rate=0.5, error_statuses=(503,))}
    tasks = [t for t in WEATHER if t.template == "weather_range" and not t.impossible][:6]
    ok = injected = 0
    with serve_faults(faults) as world:
        async with build_weather_agent(None, base_url=world.base_url, sleep=no_wait) as agent:
            for task in tasks:
                world.reset()
                result = await agent.run(task)
                ok += check(task, result, world).success
                injected += len(world.faults("weather"))
                weather = [s for s in result.steps if s.step_type == "get_weather"]
                assert max(s.actuators["max_retries"] for s in weather) >= 2
    assert injected >= 5
    assert ok >= len(tasks) - 1


@pytest.mark.integration
@pytest.mark.real_model
async def test_the_weather_agent_on_the_real_local_model(world: WorldHandle) -> None:
    # No skip: a missing model file fails here with the `closedloop models pull` message.
    task = next(
        t for t in (*WEATHER, *load_tasks("dev"))
        if t.template == "weather_unknown_city" and t.language == "zh"
    )  # fmt: skip
    started = time.perf_counter()
    async with build_weather_agent(
        "local:qwen2.5-coder-0.5b", base_url=world.base_url, sleep=no_wait
    ) as agent:
        assert agent.model is not None
        result = await agent.run(task)
        calls = agent.model.usage.snapshot().total.calls  # type: ignore[attr-defined]
    verdict = check(task, result, world)
    # The model is asked about the unknown Chinese name; whatever it says, the agent never
    # invents a weather report: "none" is stated as impossible, a city goes to a person.
    assert calls >= 1
    assert verdict.success, verdict.reason
    assert time.perf_counter() - started < 120
