"""Normalised signatures: timestamps, ids and nonces do not make a repeated call look new;
and a repeat of the call that just succeeded may close the run with its result."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from closedloop.agent import ControlConfig, HaltReason, Task
from closedloop.agent._repeats import action_signature, looks_volatile, normalise_arguments

from .conftest import add, call, divide, final, make_agent, scripted


def test_volatile_values_are_recognised() -> None:
    assert looks_volatile("2024-05-01T10:11:12Z")
    assert looks_volatile("2024-05-01 10:11:12.123+08:00")
    assert looks_volatile(str(uuid.uuid4()))
    assert looks_volatile(uuid.uuid4().hex)
    assert looks_volatile(1_716_000_000)
    assert looks_volatile(1_716_000_000_123)
    assert looks_volatile(1_716_000_000.5)


def test_real_arguments_are_not_volatile() -> None:
    for value in ("2024-05-01", "Paris", "ABC-001", 42, 3.5, True, 1999, "deadbeef"):
        assert not looks_volatile(value), value


def test_volatile_keys_are_dropped_at_every_depth() -> None:
    args = {"city": "Paris", "timestamp": 1, "meta": {"request_id": "x", "page": 2}}
    assert normalise_arguments(args) == {"city": "paris", "meta": {"page": 2}}


def test_whitespace_case_and_integral_floats_do_not_matter() -> None:
    a = action_signature("search", {"q": "  Rooms  free ", "n": 3.0})
    b = action_signature("search", {"n": 3, "q": "rooms free"})
    assert a == b
    assert a != action_signature("search", {"n": 4, "q": "rooms free"})
    assert a != action_signature("find", {"n": 3, "q": "rooms free"})


@given(
    st.dictionaries(st.sampled_from(["city", "date", "room"]), st.sampled_from(["a", "b", "c"])),
    st.floats(1_000_000_000, 9_000_000_000),
    st.uuids(),
)
def test_fresh_clock_readings_and_ids_never_change_the_signature(
    args: dict[str, str], now: float, nonce: uuid.UUID
) -> None:
    base = action_signature("tool", args)
    assert action_signature("tool", {**args, "ts": now}) == base
    assert action_signature("tool", {**args, "nonce": str(nonce)}) == base
    assert action_signature("tool", {**args, "at": now}) == action_signature(
        "tool", {**args, "at": now + 1.0}
    )


async def test_a_repeat_of_a_successful_call_closes_the_run_with_its_result() -> None:
    # The one-call pattern of small models: the call, then the same call again.
    model = scripted(call("add", a=1, b=2), cycle=True)
    agent, _ = make_agent(model, [add], control=ControlConfig(end_on_repeat=True))
    result = await agent.run("1+2")
    assert result.halt_reason is HaltReason.FINAL and result.success
    assert result.answer == "3.0" and len(model.calls) == 2
    ran = [s for s in result.steps if s.observation is not None]
    assert len(ran) == 1  # executed once: the repeat closed the run, it did not run again
    assert result.steps[-1].action is not None and result.steps[-1].observation is None
    assert result.steps[-1].error == 0.0


async def test_without_end_on_repeat_the_repeat_is_refused_as_before() -> None:
    model = scripted(call("add", a=1, b=2), cycle=True)
    agent, _ = make_agent(model, [add])
    result = await agent.run("1+2")
    assert result.halt_reason is HaltReason.REPEATED_ACTION and not result.success
    assert result.steps[1].error == 1.0


async def test_only_the_call_that_last_ran_and_succeeded_closes_the_run() -> None:
    # A, B, A is a loop: the guard keeps refusing it.
    loop = scripted(
        call("add", a=1, b=2), call("add", a=2, b=2), call("add", a=1, b=2), final("4.0")
    )
    agent, _ = make_agent(loop, [add], control=ControlConfig(end_on_repeat=True))
    result = await agent.run("1+2, then 2+2")
    assert result.answer == "4.0" and len(loop.calls) == 4
    assert result.steps[2].error == 1.0  # refused as a repeat
    # A call that failed, proposed again: refused, not an answer.
    failed = scripted(call("divide", numerator=1, denominator=0), cycle=True)
    agent, _ = make_agent(failed, [divide], control=ControlConfig(end_on_repeat=True))
    result = await agent.run("1/0")
    assert result.halt_reason is not HaltReason.FINAL and not result.success


async def test_a_task_with_required_fields_is_not_closed_by_a_repeat() -> None:
    model = scripted(call("add", a=1, b=2), call("add", a=1, b=2), final("3", total=3))
    agent, _ = make_agent(model, [add], control=ControlConfig(end_on_repeat=True))
    result = await agent.run(Task(prompt="1+2", required_fields=["total"]))
    assert result.answer == "3" and len(model.calls) == 3
