"""@controlled: sensing, a PID per key and scheduled retries around sync and async callables."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import math
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from closedloop import ConfigurationError
from closedloop.control import (
    ActuatorSchedule,
    Strictness,
    schedule_levels,
    schedule_linear,
)
from closedloop.integrations import (
    EMPTY_ERROR,
    ControlContext,
    ControlLoop,
    Invocation,
    controlled,
    inject_rigour,
)
from closedloop.models import FunctionModel
from closedloop.perception import error_edit_distance
from closedloop.policy import retry_if_exception_type

from .conftest import FakeClock, SleepRecorder

# Up to four retries as the rigour rises, so retry budgets are visible in the tests.
GENEROUS = ActuatorSchedule(max_retries=schedule_levels((0, 1, 2, 3, 4), (0.2, 0.4, 0.6, 0.8)))


class Flaky:
    """Fails (raises or answers empty) on the attempts listed in ``script``, then answers."""

    def __init__(self, script: list[str]) -> None:
        self.script = script
        self.calls = 0
        self.contexts: list[ControlContext] = []

    def step(self, control: ControlContext | None) -> str:
        if control is not None:
            self.contexts.append(control)
        outcome = self.script[self.calls] if self.calls < len(self.script) else "ok"
        self.calls += 1
        if outcome == "raise":
            raise ConnectionError(f"attempt {self.calls} failed")
        return "" if outcome == "empty" else f"answer {self.calls}"


def test_a_sync_function_is_retried_after_the_scheduled_delay(sleeper: SleepRecorder) -> None:
    flaky = Flaky(["raise"])

    @controlled(sleep=sleeper)
    def fetch(city: str, *, control: ControlContext | None = None) -> str:
        return flaky.step(control)

    assert not inspect.iscoroutinefunction(fetch)
    assert fetch("Paris") == "answer 2"
    first, second = fetch.controller.history
    assert (first.attempt, second.attempt) == (1, 2)
    assert first.call == second.call
    assert first.error == 1.0 and first.failed
    assert first.exception == "ConnectionError: attempt 1 failed"
    assert second.error == 0.0 and not second.failed
    assert sleeper.delays == [first.settings.retry_delay_ms / 1000]
    assert first.u > first.applied.u == 0.0
    assert second.u < first.u


def test_the_function_sees_the_rigour_rise_on_each_retry(sleeper: SleepRecorder) -> None:
    flaky = Flaky(["raise", "empty", "raise"])

    @controlled(sleep=sleeper, schedule=GENEROUS)
    def fetch(*, control: ControlContext) -> str:
        return flaky.step(control)

    fetch()  # type: ignore[call-arg]
    records = fetch.controller.history
    assert [c.attempt for c in flaky.contexts] == [1, 2, 3, 4]
    assert [r.error for r in records] == [1.0, EMPTY_ERROR, 1.0, 0.0]
    for ctx, record in zip(flaky.contexts, records, strict=True):
        assert ctx.settings == record.applied  # each attempt ran with the settings it was given
    for before, after in itertools.pairwise(records):
        assert after.applied == before.settings
    assert flaky.contexts[0].strictness is Strictness.LOOSE
    assert flaky.contexts[1].strictness is Strictness.STRICT
    assert flaky.contexts[1].last_error == 1.0


def test_an_empty_answer_is_retried_but_a_true_answer_is_not(sleeper: SleepRecorder) -> None:
    answers = iter(["", "  ", "Sunny, 25°C"])

    @controlled(sleep=sleeper, schedule=GENEROUS)
    def ask() -> str:
        return next(answers)

    assert ask() == "Sunny, 25°C"
    assert [r.error for r in ask.controller.history] == [EMPTY_ERROR, EMPTY_ERROR, 0.0]
    assert len(sleeper.delays) == 2


def test_when_retries_run_out_the_last_exception_is_raised(sleeper: SleepRecorder) -> None:
    flaky = Flaky(["raise"] * 10)

    @controlled(sleep=sleeper)
    def fetch() -> str:
        return flaky.step(None)

    with pytest.raises(ConnectionError, match="attempt 2 failed"):
        fetch()
    # The default schedule allows one retry once u ≥ 0.5: two attempts.
    history = fetch.controller.history
    assert [r.attempt for r in history] == [1, 2]
    assert history[-1].settings.max_retries == 1
    assert len(sleeper.delays) == 1


def test_when_retries_run_out_the_last_poor_answer_is_returned(sleeper: SleepRecorder) -> None:
    @controlled(sleep=sleeper)
    def ask() -> list[str]:
        return []

    assert ask() == []
    assert all(r.failed for r in ask.controller.history)
    assert len(ask.controller.history) == 2


def test_max_attempts_caps_any_schedule(sleeper: SleepRecorder) -> None:
    always = ActuatorSchedule(max_retries=schedule_levels((100,), ()))
    flaky = Flaky(["raise"] * 10)

    @controlled(sleep=sleeper, schedule=always, max_attempts=3)
    def fetch() -> str:
        return flaky.step(None)

    with pytest.raises(ConnectionError):
        fetch()
    assert flaky.calls == 3


@given(st.lists(st.sampled_from(["raise", "empty", "ok"]), min_size=1, max_size=8))
def test_retry_decisions_follow_the_updated_settings(script: list[str]) -> None:
    sleeper = SleepRecorder()
    flaky = Flaky(script)

    @controlled(sleep=sleeper, schedule=GENEROUS)
    def fetch() -> str:
        return flaky.step(None)

    try:
        result: str | None = fetch()
    except ConnectionError:
        result = None
    records = fetch.controller.history
    assert len(records) == flaky.calls
    for i, record in enumerate(records):
        retried = i + 1 < len(records)
        allowed = record.failed and record.attempt <= record.settings.max_retries
        assert retried == allowed
        if retried:
            assert sleeper.delays[i] == record.settings.retry_delay_ms / 1000
    assert len(sleeper.delays) == len(records) - 1
    last = records[-1]
    assert (result is None) == (last.exception is not None)


async def test_an_async_function_stays_async_and_awaits_its_sleep() -> None:
    sleeper = SleepRecorder()
    flaky = Flaky(["raise", "raise"])

    @controlled(sleep=sleeper.asleep, schedule=GENEROUS)
    async def fetch(*, control: ControlContext | None = None) -> str:
        await asyncio.sleep(0)
        return flaky.step(control)

    assert inspect.iscoroutinefunction(fetch)
    assert await fetch() == "answer 3"
    records = fetch.controller.history
    assert sleeper.delays == [r.settings.retry_delay_ms / 1000 for r in records[:-1]]
    assert [c.attempt for c in flaky.contexts] == [1, 2, 3]


async def test_an_async_function_accepts_a_plain_sleep_recorder() -> None:
    sleeper = SleepRecorder()
    flaky = Flaky(["raise"])

    @controlled(sleep=sleeper)
    async def fetch() -> str:
        return flaky.step(None)

    assert await fetch() == "answer 2"
    assert len(sleeper.delays) == 1


async def test_enforce_timeout_cuts_a_hanging_async_attempt_off() -> None:
    # A 1 ms scheduled timeout: the hanging attempt is cancelled, never waited for.
    fast = ActuatorSchedule(timeout_ms=schedule_linear(1.0, 0.0))
    never = asyncio.Event()
    calls = 0
    sleeper = SleepRecorder()

    @controlled(schedule=fast, enforce_timeout=True, sleep=sleeper.asleep)
    async def fetch() -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            await never.wait()
        return "done"

    assert await fetch() == "done"
    first = fetch.controller.history[0]
    assert first.exception is not None and first.exception.startswith("TimeoutError")


def test_programming_errors_pass_through_without_touching_the_controller() -> None:
    @controlled(sleep=SleepRecorder())
    def broken() -> str:
        raise TypeError("bad call")

    with pytest.raises(TypeError):
        broken()
    assert broken.controller.history == ()


def test_retry_on_selects_the_exceptions_worth_retrying(sleeper: SleepRecorder) -> None:
    calls: list[type[Exception]] = []

    @controlled(sleep=sleeper, retry_on=retry_if_exception_type(ConnectionError))
    def fetch(kind: type[Exception]) -> str:
        calls.append(kind)
        raise kind("x")

    with pytest.raises(KeyError):
        fetch(KeyError)
    assert fetch.controller.history == ()
    with pytest.raises(ConnectionError):
        fetch(ConnectionError)
    assert len(fetch.controller.history) == 2

    @controlled(sleep=sleeper, retry_on=(KeyError,))
    def other() -> str:
        raise KeyError("k")

    with pytest.raises(KeyError):
        other()
    assert len(other.controller.history) == 2


def test_a_key_function_gives_each_kind_of_call_its_own_pid(sleeper: SleepRecorder) -> None:
    known = {"北京": "晴 25°C"}

    @controlled(sleep=sleeper, key=lambda city: f"weather:{city}")
    def weather(city: str) -> str:
        return known.get(city, "")

    weather("北就")
    weather("北京")
    loop = weather.controller
    assert loop.settings("weather:北就").u > 0.5
    assert loop.settings("weather:北京").u == 0.0
    assert {r.key for r in loop.history} == {"weather:北就", "weather:北京"}


def test_a_two_argument_metric_sees_the_call(sleeper: SleepRecorder) -> None:
    # e2: the edit distance between the city asked for and the city answered.
    def city_error(answer: dict[str, str], call: Invocation) -> float:
        return error_edit_distance(call.args[0], answer["city"])

    @controlled(metric=city_error, sleep=sleeper, retry_above=0.6)
    def lookup(city: str) -> dict[str, str]:
        return {"city": "北京"}

    lookup("北就")
    assert lookup.controller.history[0].error == 0.5
    assert len(lookup.controller.history) == 1  # 0.5 ≤ retry_above: accepted


def test_out_of_range_metric_values_are_clipped_and_noted(sleeper: SleepRecorder) -> None:
    @controlled(metric=lambda r: r, sleep=sleeper)
    def score(value: float) -> float:
        return value

    score(-0.25)
    record = score.controller.history[-1]
    assert record.error == 0.0
    assert record.note == "metric returned -0.25; clipped to 0.0"


@pytest.mark.parametrize("bad", [math.nan, math.inf, "high"])
def test_a_broken_metric_raises_naming_it(sleeper: SleepRecorder, bad: object) -> None:
    @controlled(metric=lambda r: bad, sleep=sleeper)
    def f() -> str:
        return "x"

    with pytest.raises(ConfigurationError) as info:
        f()
    assert info.value.argument == "metric"
    assert f.controller.history == ()


def test_latencies_come_from_the_injected_clock(clock: FakeClock, sleeper: SleepRecorder) -> None:
    @controlled(clock=clock, sleep=sleeper)
    def slow() -> str:
        clock.advance(0.25)
        return "x"

    slow()
    assert slow.controller.history[0].latency_s == pytest.approx(0.25)


def test_methods_and_a_shared_controller(sleeper: SleepRecorder) -> None:
    shared = ControlLoop()

    class Client:
        def __init__(self) -> None:
            self.fail = True

        @controlled(controller=shared, sleep=sleeper)
        def get(self) -> str:
            if self.fail:
                self.fail = False
                raise ConnectionError("once")
            return "ok"

    @controlled(controller=shared, key="other", sleep=sleeper)
    def other() -> str:
        return "ok"

    assert Client().get() == "ok"
    other()
    assert Client.get.controller is shared is other.controller
    keys = [r.key for r in shared.history]
    assert keys[0].endswith("Client.get") and keys[-1] == "other"


def test_bare_decorator_uses_the_defaults() -> None:
    @controlled
    def ok() -> int:
        return 1

    assert ok() == 1
    assert ok.__name__ == "ok"
    assert ok.controller.history[0].error == 0.0


async def test_the_loop_closes_through_the_prompt_with_a_function_model() -> None:
    """A model that only answers in JSON when told to be strict: the retry gets it there."""

    def answer(messages: Any, call: Any) -> str:
        system = messages[0].content if messages[0].role == "system" else ""
        if "JSON object" in system:
            return '{"city": "北京", "temperature": 25}'
        return "It is sunny in Beijing today."

    model = FunctionModel(answer)
    sleeper = SleepRecorder()

    @controlled(key_fields=["city", "temperature"], sleep=sleeper.asleep)
    async def ask_weather(city: str, *, control: ControlContext | None = None) -> str:
        assert control is not None
        messages = inject_rigour(
            [{"role": "system", "content": "You are a weather assistant."},
             {"role": "user", "content": f"Weather in {city}?"}],
            control,
        )  # fmt: skip
        completion = await model.complete(messages)
        return completion.text

    text = await ask_weather("北京")
    assert '"temperature": 25' in text
    errors = [r.error for r in ask_weather.controller.history]
    assert errors == [1.0, 0.0]
    prompts = [c.messages[0].content for c in model.calls]
    assert "JSON object" not in prompts[0] and "JSON object" in prompts[1]


def _gen() -> Iterator[int]:
    yield 1


async def _agen() -> Any:
    yield 1


@pytest.mark.parametrize(
    ("make", "argument"),
    [
        (lambda: controlled(42), "fn"),  # type: ignore[call-overload]
        (lambda: controlled(_gen), "fn"),
        (lambda: controlled(_agen), "fn"),
        (lambda: controlled(metric=len, key_fields=["a"]), "metric"),
        (lambda: controlled(controller=ControlLoop(), gains=(1.0, 0.0, 0.0)), "gains"),
        (lambda: controlled(controller="loop"), "controller"),  # type: ignore[call-overload]
        (lambda: controlled(gains=(1.0, -1.0, 0.0)), "gains.ki"),
        (lambda: controlled(retry_above=1.5), "retry_above"),
        (lambda: controlled(max_attempts=0), "max_attempts"),
        (lambda: controlled(retry_on=42), "retry_on"),  # type: ignore[call-overload]
        (lambda: controlled(metric="len"), "metric"),
        (lambda: controlled(sleep=asyncio.sleep)(lambda: 1), "sleep"),
        (lambda: controlled(sleep=3)(lambda: 1), "sleep"),  # type: ignore[call-overload]
        (lambda: controlled(key=3)(lambda: 1), "key"),  # type: ignore[call-overload]
        (lambda: controlled(context_param="not a name")(lambda: 1), "context_param"),
    ],
)
def test_bad_arguments_name_themselves(make: Any, argument: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        make()
    assert info.value.argument == argument


def test_bad_calls_name_the_problem() -> None:
    @controlled(key=lambda x: x)
    def f(x: Any, control: ControlContext | None = None) -> Any:
        return x

    with pytest.raises(ConfigurationError) as info:
        f(3)
    assert info.value.argument == "key"
    with pytest.raises(ConfigurationError) as info:
        f("k", control="mine")  # type: ignore[arg-type]
    assert info.value.argument == "control"


async def test_a_callable_object_with_an_async_call_stays_async() -> None:
    class Tool:
        def __init__(self) -> None:
            self.calls = 0

        async def __call__(self, query: str) -> str:
            self.calls += 1
            return "" if self.calls == 1 else query

    wrapped = controlled(sleep=SleepRecorder())(Tool())
    assert inspect.iscoroutinefunction(wrapped)
    assert await wrapped("q") == "q"
    assert {r.key for r in wrapped.controller.history} == {f"{__name__}.{Tool.__qualname__}"}


def test_the_retries_are_a_policy_of_the_shared_algebra() -> None:
    from closedloop.integrations._decorator import build_plan
    from closedloop.policy import PolicyState, Verdict

    plan = build_plan({"retry_above": 0.5, "max_attempts": 3}, caller="controlled")

    def after(attempt: int, **facts: Any) -> PolicyState:
        return PolicyState(attempt=attempt, facts=facts)

    policy = plan.policy
    wait = policy.decide(after(1, failed=True, max_retries=2, retry_delay_s=0.3))
    assert wait.verdict is Verdict.WAIT and wait.delay_s == 0.3
    assert policy.decide(after(1, failed=False, max_retries=2)).verdict is Verdict.STOP
    # The settings just produced decide the budget: two retries allowed, two spent.
    assert policy.decide(after(3, failed=True, max_retries=2)).verdict is Verdict.STOP
    # max_attempts caps whatever the schedule says.
    assert policy.decide(after(3, failed=True, max_retries=9)).verdict is Verdict.STOP
    assert policy.decide(after(2, failed=True, max_retries=9)).verdict is Verdict.WAIT


def test_an_unknown_option_is_refused_like_any_unknown_keyword() -> None:
    with pytest.raises(
        TypeError, match="controlled\\(\\) got an unexpected keyword argument 'retries'"
    ):
        controlled(retries=3)  # type: ignore[call-overload]
