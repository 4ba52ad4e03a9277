"""The LangGraph adapter against real LangGraph graphs, and LangGraph's own RetryPolicy."""

from __future__ import annotations

import operator
import random
from typing import Annotated, Any

import pytest
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, RetryPolicy

from closedloop import ConfigurationError
from closedloop.control import ActuatorSchedule, Strictness, schedule_levels
from closedloop.integrations import ControlContext, ControlLoop
from closedloop.integrations.langgraph import ControlledRunnable, ControlState, controlled_node

from .conftest import SleepRecorder

GENEROUS = ActuatorSchedule(max_retries=schedule_levels((0, 1, 2, 3, 4), (0.2, 0.4, 0.6, 0.8)))


class WeatherState(ControlState, total=False):
    city: str
    forecast: dict[str, Any]
    report: str


class FlakyWeather:
    """A weather service whose bad calls are fixed by a seeded draw: deterministic per seed.

    ``failures`` of the first ``window`` calls go wrong; ``mode`` says how: an exception
    (a dropped connection) or a 200-and-empty answer.
    """

    def __init__(self, *, seed: int, failures: int, window: int, mode: str = "raise") -> None:
        self.bad_calls = set(random.Random(seed).sample(range(1, window + 1), failures))
        self.mode = mode
        self.calls = 0
        self.contexts: list[ControlContext | None] = []

    def __call__(
        self, state: WeatherState, control: ControlContext | None = None
    ) -> dict[str, Any]:
        self.calls += 1
        self.contexts.append(control)
        if self.calls in self.bad_calls:
            if self.mode == "raise":
                raise ConnectionError(f"call {self.calls} was reset")
            return {"forecast": {}}
        return {"forecast": {"city": state["city"], "temp": 25}}


def report(state: WeatherState) -> dict[str, Any]:
    temp = state.get("forecast", {}).get("temp")
    return {"report": f"{state['city']}: {temp if temp is not None else 'unknown'}"}


def build(fetch: Any, *, retry_policy: RetryPolicy | None = None) -> Any:
    graph = StateGraph(WeatherState)
    graph.add_node("fetch", fetch, retry_policy=retry_policy)
    graph.add_node("report", report)
    graph.add_edge(START, "fetch")
    graph.add_edge("fetch", "report")
    graph.add_edge("report", END)
    return graph.compile()


def seed_with_first_two_bad(window: int = 3) -> int:
    # The seeded draw that makes calls 1 and 2 fail, found deterministically.
    return next(
        s for s in range(1000) if set(random.Random(s).sample(range(1, window + 1), 2)) == {1, 2}
    )


def test_the_adapter_retries_and_writes_the_signals_into_the_state() -> None:
    service = FlakyWeather(seed=seed_with_first_two_bad(), failures=2, window=3)
    sleeper = SleepRecorder()
    node = controlled_node(service, key_fields=["forecast.temp"], schedule=GENEROUS, sleep=sleeper)
    final = build(node).invoke({"city": "北京"})

    assert final["report"] == "北京: 25"
    assert service.calls == 3
    (signal,) = final["closedloop"]
    assert signal["node"] == "fetch"  # the node's name in the graph is the PID key
    assert signal["attempts"] == 3
    assert signal["errors"] == [1.0, 1.0, 0.0]
    assert signal["exceptions"][0] == "ConnectionError: call 1 was reset"
    assert signal["u"][0] < signal["u"][1] and signal["u"][2] < signal["u"][1]
    assert signal["failed"] is False
    records = node.controller.history  # type: ignore[attr-defined]
    assert signal["settings"] == records[-1].settings.as_dict()
    assert sleeper.delays == [r.settings.retry_delay_ms / 1000 for r in records[:2]]
    # The node saw its rigour rise: loose first, strict on the retries.
    strictness = [c.strictness for c in service.contexts if c is not None]
    assert strictness == [Strictness.LOOSE, Strictness.STRICT, Strictness.STRICT]


def test_langgraph_retry_policy_recovers_too_but_records_nothing() -> None:
    seed = seed_with_first_two_bad()
    service = FlakyWeather(seed=seed, failures=2, window=3)
    # initial_interval=0 and no jitter: LangGraph's sleeps are zero-length.
    policy = RetryPolicy(max_attempts=3, initial_interval=0.0, jitter=False)
    final = build(service, retry_policy=policy).invoke({"city": "北京"})
    assert final["report"] == "北京: 25"
    assert service.calls == 3
    assert final["closedloop"] == []  # three attempts, two failures: no trace in the state
    assert service.contexts == [None, None, None]  # and no rigour to adapt to

    controlled = FlakyWeather(seed=seed, failures=2, window=3)
    node = controlled_node(controlled, key_fields=["forecast.temp"], schedule=GENEROUS,
                           sleep=SleepRecorder())  # fmt: skip
    signals = build(node).invoke({"city": "北京"})["closedloop"]
    assert [s["errors"] for s in signals] == [[1.0, 1.0, 0.0]]


def test_an_empty_answer_passes_retry_policy_but_not_the_controller() -> None:
    policy = RetryPolicy(max_attempts=3, initial_interval=0.0, jitter=False)
    plain = FlakyWeather(seed=0, failures=1, window=1, mode="empty")
    assert build(plain, retry_policy=policy).invoke({"city": "Oslo"})["report"] == "Oslo: unknown"
    assert plain.calls == 1

    service = FlakyWeather(seed=0, failures=1, window=1, mode="empty")
    node = controlled_node(service, key_fields=["forecast.temp"], sleep=SleepRecorder())
    final = build(node).invoke({"city": "Oslo"})
    assert final["report"] == "Oslo: 25"
    assert service.calls == 2
    assert final["closedloop"][0]["errors"] == [1.0, 0.0]


def test_the_pid_carries_over_between_graph_runs() -> None:
    service = FlakyWeather(seed=seed_with_first_two_bad(), failures=2, window=3)
    loop = ControlLoop(schedule=GENEROUS)
    graph = build(controlled_node(service, key_fields=["forecast.temp"], controller=loop,
                                  sleep=SleepRecorder()))  # fmt: skip
    graph.invoke({"city": "a"})
    second = graph.invoke({"city": "b"})
    (signal,) = second["closedloop"]
    assert signal["attempts"] == 1 and signal["call"] == 2
    assert [r.call for r in loop.records("fetch")] == [1, 1, 1, 2]


async def test_an_async_node_keeps_config_injection_and_gets_the_context() -> None:
    seen: list[tuple[str, int, float]] = []
    calls = 0

    async def fetch(
        state: WeatherState, config: RunnableConfig, *, control: ControlContext
    ) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        seen.append((config["metadata"]["langgraph_node"], control.attempt, control.rigour))
        if calls == 1:
            raise ConnectionError("reset")
        return {"forecast": {"temp": 1}}

    sleeper = SleepRecorder()
    graph = StateGraph(WeatherState)
    graph.add_node("lookup", controlled_node(fetch, sleep=sleeper.asleep))
    graph.add_edge(START, "lookup")
    graph.add_edge("lookup", END)
    final = await graph.compile().ainvoke({"city": "x"})
    assert final["forecast"] == {"temp": 1}
    assert [(name, attempt) for name, attempt, _ in seen] == [("lookup", 1), ("lookup", 2)]
    assert seen[1][2] > seen[0][2]
    assert final["closedloop"][0]["node"] == "lookup"
    assert len(sleeper.delays) == 1


def test_a_node_that_keeps_failing_raises_and_the_history_keeps_the_attempts() -> None:
    service = FlakyWeather(seed=1, failures=5, window=5)
    node = controlled_node(service, key="weather", sleep=SleepRecorder())
    with pytest.raises(ConnectionError):
        build(node).invoke({"city": "x"})
    records = node.controller.history  # type: ignore[attr-defined]
    assert [r.key for r in records] == ["weather", "weather"]
    assert all(r.failed for r in records)


def test_commands_none_and_other_keys() -> None:
    class State(ControlState, total=False):
        n: int
        signals: Annotated[list[dict[str, Any]], operator.add]

    def jump(state: State) -> Command[Any]:
        return Command(update={"n": 1}, goto="last")

    def last(state: State) -> None:
        return None

    graph = StateGraph(State)
    graph.add_node("jump", controlled_node(jump), destinations=("last",))
    graph.add_node("last", controlled_node(last, state_key="signals"))
    graph.add_node("quiet", controlled_node(lambda s: {"n": 2}, state_key=None))
    graph.add_edge(START, "jump")
    graph.add_edge("last", "quiet")
    graph.add_edge("quiet", END)
    final = graph.compile().invoke({"n": 0})
    assert final["n"] == 2
    assert [s["node"] for s in final["closedloop"]] == ["jump"]
    # None is an empty answer: it is scored high, retried once, then recorded as failed.
    assert [s["node"] for s in final["signals"]] == ["last"]
    assert final["signals"][0]["failed"] is True


def test_controlled_runnable_as_a_node() -> None:
    calls: list[ControlContext] = []

    def inner(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        ctx = config["configurable"]["closedloop"]
        calls.append(ctx)
        if len(calls) == 1:
            return {"forecast": {}}
        return {"forecast": {"temp": 7}}

    sleeper = SleepRecorder()
    runnable = ControlledRunnable(
        RunnableLambda(inner, name="forecast"), key_fields=["forecast.temp"], sleep=sleeper
    )
    final = build(runnable).invoke({"city": "Rome"})
    assert final["report"] == "Rome: 7"
    assert [c.attempt for c in calls] == [1, 2]
    assert final["closedloop"][0]["node"] == "forecast"
    assert runnable.controller.history[-1].error == 0.0
    assert len(sleeper.delays) == 1


async def test_controlled_runnable_async() -> None:
    answers = iter(["", "ready"])
    sleeper = SleepRecorder()
    runnable = ControlledRunnable(
        RunnableLambda(lambda _: next(answers)), async_sleep=sleeper.asleep, key="ask"
    )
    assert await runnable.ainvoke("question") == "ready"  # not a mapping: returned as is
    assert [r.attempt for r in runnable.controller.records("ask")] == [1, 2]
    assert len(sleeper.delays) == 1


@pytest.mark.parametrize(
    ("make", "argument"),
    [
        (lambda: controlled_node(42), "node"),  # type: ignore[arg-type]
        (lambda: controlled_node(RunnableLambda(lambda x: x)), "node"),
        (lambda: controlled_node(report, state_key=""), "state_key"),
        (lambda: controlled_node(report, key=3), "key"),  # type: ignore[arg-type]
        (lambda: controlled_node(report, metric=len, key_fields=["a"]), "metric"),
        (lambda: ControlledRunnable(report), "runnable"),  # type: ignore[arg-type]
        (lambda: ControlledRunnable(RunnableLambda(report), sleep=1), "sleep"),  # type: ignore[arg-type]
    ],
)
def test_bad_arguments(make: Any, argument: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        make()
    assert info.value.argument == argument
