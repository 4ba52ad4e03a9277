"""Deadline, budget and cancellation end a model or tool call in flight, not after it."""

from __future__ import annotations

import asyncio
from typing import Any

from closedloop.agent import (
    Budget,
    HaltReason,
    RunLimits,
    Runtime,
    stop_after_delay,
    stop_on_no_progress,
    stop_on_repeats,
)
from closedloop.models import CallInfo, FunctionModel, Message

from .conftest import FakeClock, add, call, final, make_agent, plain, scripted


def _hanging_model(started: asyncio.Event) -> FunctionModel:
    async def reply(messages: tuple[Message, ...], info: CallInfo) -> str:
        started.set()
        await asyncio.Event().wait()  # never fires
        return "unreachable"

    return FunctionModel(reply)


async def test_the_deadline_cancels_a_hung_model_call(clock: FakeClock) -> None:
    started = asyncio.Event()
    agent, trace = make_agent(
        _hanging_model(started),
        [add],
        limits=RunLimits(deadline_s=30),
        runtime=Runtime(clock=clock, sleep=clock.sleep),
    )
    result = await agent.run("2+2")
    assert started.is_set()
    assert result.halt_reason is HaltReason.DEADLINE and not result.success
    assert clock.slept == [30.0]  # the watcher's timer, driven by the fake clock
    assert len(result.steps) == 1 and result.steps[0].halt is HaltReason.DEADLINE
    assert "cut off (deadline)" in result.steps[0].notes[0]
    assert trace.result is not None  # the trace holds the plain result, the caller the typed one
    assert trace.result.model_dump() == result.model_dump(exclude={"output"})


async def test_the_deadline_cancels_a_hung_tool_call(clock: FakeClock) -> None:
    entered: list[int] = []

    async def hang(x: int) -> int:
        """Never answers."""
        entered.append(x)
        await asyncio.Event().wait()
        return x

    agent, _ = make_agent(
        scripted(call("hang", x=1), final("x")),
        [hang],
        limits=RunLimits(deadline_s=60),
        runtime=Runtime(clock=clock, sleep=clock.sleep),
    )
    result = await agent.run("hang")
    assert entered == [1]
    assert result.halt_reason is HaltReason.DEADLINE
    step = result.steps[0]
    assert step.step_type == "hang" and step.action is not None and step.observation is None
    assert step.halt is HaltReason.DEADLINE


async def test_a_stop_after_delay_policy_also_bounds_calls_in_flight(clock: FakeClock) -> None:
    agent, _ = make_agent(
        _hanging_model(asyncio.Event()),
        [add],
        runtime=Runtime(clock=clock, sleep=clock.sleep),
        limits=RunLimits(stop=stop_after_delay(5)),
    )
    result = await agent.run("2+2")
    assert result.halt_reason is HaltReason.DEADLINE and clock.slept == [5.0]


async def test_cancellation_ends_a_call_in_flight() -> None:
    started = asyncio.Event()
    cancel = asyncio.Event()
    agent, trace = make_agent(_hanging_model(started), [add])
    running = asyncio.create_task(agent.run("2+2", cancel=cancel))
    await started.wait()
    cancel.set()
    result = await running
    assert result.halt_reason is HaltReason.CANCELLED and not result.success
    assert trace.result == plain(result)
    assert result.steps[-1].halt is HaltReason.CANCELLED


async def test_a_budget_spent_elsewhere_ends_a_call_in_flight() -> None:
    started = asyncio.Event()
    budget = Budget(tokens=1_000)
    agent, _ = make_agent(_hanging_model(started), [add])
    running = asyncio.create_task(agent.run("2+2", budget=budget))
    await started.wait()
    budget.charge(tokens=1_500)  # a parallel run sharing the budget spent the rest
    result = await running
    assert result.halt_reason is HaltReason.BUDGET and not result.success


async def test_the_runs_own_spending_stops_it_between_steps() -> None:
    budget = Budget(tokens=300)
    model = scripted(*(call("add", a=i, b=1) for i in range(10)))
    agent, _ = make_agent(
        model, [add], limits=RunLimits(stop=stop_on_no_progress(20) | stop_on_repeats(2))
    )
    result = await agent.run("count", budget=budget)
    assert result.halt_reason is HaltReason.BUDGET
    assert budget.tokens_used >= 300 and len(result.steps) < 10
    assert all(c.max_tokens <= 300 for c in model.calls)  # no call may outspend the budget


async def test_a_run_cancelled_before_it_starts_takes_no_step() -> None:
    cancel = asyncio.Event()
    cancel.set()
    model = scripted(final("x"))
    agent, trace = make_agent(model, [add])
    result = await agent.run("x", cancel=cancel)
    assert result.halt_reason is HaltReason.CANCELLED and result.steps == []
    assert model.calls == [] and trace.result == plain(result)


async def test_time_is_read_from_the_injected_clock_between_steps(clock: FakeClock) -> None:
    def reply(messages: tuple[Message, ...], info: CallInfo) -> dict[str, Any]:
        clock.advance(50.0)  # each model call "takes" 50 s
        return call("add", a=len(messages), b=clock.now)

    agent, _ = make_agent(
        FunctionModel(reply), [add], limits=RunLimits(deadline_s=120), runtime=Runtime(clock=clock)
    )
    result = await agent.run("slow")
    assert result.halt_reason is HaltReason.DEADLINE
    assert [round(r.t_s) for r in result.steps] == [50, 100, 150]
    assert result.steps[-1].halt is HaltReason.DEADLINE


async def test_a_short_real_deadline_cancels_a_hung_call() -> None:
    # The one test on the real clock: 0.2 s, and nothing asserts how long it took.
    agent, _ = make_agent(_hanging_model(asyncio.Event()), [add], limits=RunLimits(deadline_s=0.2))
    result = await agent.run("2+2")
    assert result.halt_reason is HaltReason.DEADLINE


# --- the deadline on the event loop's own clock -------------------------------------------


async def test_a_deadline_on_the_loop_clock_cuts_a_hung_call_off() -> None:
    from closedloop.agent._inflight import Deadline, race

    started = asyncio.Event()

    async def hang() -> int:
        started.set()
        await asyncio.Event().wait()  # never fires
        return 1

    # A zero deadline fires on the loop's next turn: no real wait.
    result, reason = await race(hang(), {HaltReason.DEADLINE: Deadline(0.0, asyncio.sleep)})
    assert started.is_set() and (result, reason) == (None, HaltReason.DEADLINE)


async def test_within_the_deadline_the_call_runs_in_the_callers_task() -> None:
    from closedloop.agent._inflight import Deadline, race

    async def which() -> asyncio.Task[Any] | None:
        return asyncio.current_task()

    result, reason = await race(which(), {HaltReason.DEADLINE: Deadline(60.0, asyncio.sleep)})
    assert result is asyncio.current_task() and reason is None


async def test_a_calls_own_timeout_is_its_error_not_the_deadline() -> None:
    from closedloop.agent._inflight import Deadline, race

    async def late() -> int:
        raise TimeoutError("the tool's own timeout")

    try:
        await race(late(), {HaltReason.DEADLINE: Deadline(60.0, asyncio.sleep)})
    except TimeoutError as exc:
        assert str(exc) == "the tool's own timeout"
    else:
        raise AssertionError("the call's TimeoutError was swallowed")
