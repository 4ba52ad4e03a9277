"""The action contract: preconditions, postconditions, timeouts, retries, confirmation."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping
from typing import Any

import pytest

from closedloop import (
    ActionTimeoutError,
    ConfigurationError,
    ConfirmationRequiredError,
    PostconditionFailedError,
    PreconditionFailedError,
)
from closedloop.execution import (
    AtomicAction,
    Condition,
    Confirmation,
    EffectClass,
    ExecutionEvent,
    Executor,
    OutcomeStatus,
    RetryPolicy,
    execute,
)


class Counter:
    """A callable that counts its calls and fails the first ``failures`` of them."""

    def __init__(self, failures: int = 0, error: type[Exception] = OSError) -> None:
        self.calls: list[dict[str, Any]] = []
        self.failures = failures
        self.error = error

    async def __call__(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        if len(self.calls) <= self.failures:
            raise self.error(f"failure {len(self.calls)}")
        return {"ok": True, **kwargs}


async def run(action: AtomicAction, args: Mapping[str, Any] | None = None, **kw: Any):
    return await execute(action, args, ledger=None, task_id="t", step=0, **kw)


async def test_precondition_failure_never_runs_the_action() -> None:
    fn = Counter()
    action = AtomicAction(
        name="pay",
        fn=fn,
        preconditions=[
            Condition("amount positive", lambda args, state: args["amount"] > 0),
            Condition("order created", lambda args, state: state.get("order") == "CREATED"),
        ],
    )
    outcome = await run(action, {"amount": 5}, state={"order": "PAID"})
    assert outcome.status is OutcomeStatus.PRECONDITION_FAILED
    assert fn.calls == []
    assert "order created" in str(outcome.error)
    with pytest.raises(PreconditionFailedError, match="order created"):
        outcome.unwrap()
    ok = await run(action, {"amount": 5}, state={"order": "CREATED"})
    assert ok.status is OutcomeStatus.SUCCEEDED and len(fn.calls) == 1


async def test_precondition_reasons_and_crashing_checks_fail_closed() -> None:
    fn = Counter()

    def balance_covers(args: Mapping[str, Any], state: Mapping[str, Any]) -> bool | str:
        return True if state["balance"] >= args["amount"] else "balance below amount"

    action = AtomicAction(name="pay", fn=fn, preconditions=[balance_covers])
    low = await run(action, {"amount": 9}, state={"balance": 1})
    assert "balance_covers: balance below amount" in str(low.error)
    missing = await run(action, {"amount": 9}, state={})  # KeyError inside the check
    assert missing.status is OutcomeStatus.PRECONDITION_FAILED
    assert "raised KeyError" in str(missing.error)
    assert fn.calls == []


async def test_async_preconditions_are_awaited() -> None:
    async def service_up(args: Mapping[str, Any], state: Mapping[str, Any]) -> bool:
        await asyncio.sleep(0)
        return False

    outcome = await run(AtomicAction(name="a", fn=Counter(), preconditions=[service_up]))
    assert outcome.status is OutcomeStatus.PRECONDITION_FAILED
    assert "service_up: is false" in str(outcome.error)


async def test_postcondition_failure_runs_compensation_then_reports() -> None:
    compensated: list[tuple[Mapping[str, Any], Any]] = []

    async def lock(**kwargs: Any) -> dict[str, Any]:
        return {"lock_id": "L1", "status": "PARTIAL"}

    action = AtomicAction(
        name="lock_stock",
        fn=lock,
        effect=EffectClass.OVERWRITABLE,
        postconditions=[lambda result, args: result["status"] == "LOCKED"],
        compensation=lambda args, result: compensated.append((args, result)),
    )
    outcome = await run(action, {"sku": "x"})
    assert outcome.status is OutcomeStatus.POSTCONDITION_FAILED
    assert outcome.compensated is True
    assert compensated == [({"sku": "x"}, {"lock_id": "L1", "status": "PARTIAL"})]
    with pytest.raises(PostconditionFailedError, match=r"postcondition\[0\].*compensation ran"):
        outcome.unwrap()


async def test_failing_compensation_is_reported() -> None:
    def broken(args: Mapping[str, Any], result: Any) -> None:
        raise RuntimeError("refund service down")

    action = AtomicAction(
        name="a", fn=Counter(), postconditions=[lambda r, a: "never"], compensation=broken
    )
    outcome = await run(action)
    assert outcome.compensated is False
    assert "compensation FAILED" in str(outcome.error)


async def test_timeout_cancels_the_call() -> None:
    cancelled = asyncio.Event()

    async def hang(**kwargs: Any) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    action = AtomicAction(name="slow", fn=hang, timeout_s=0.001)
    outcome = await run(action)
    assert outcome.status is OutcomeStatus.TIMED_OUT
    assert isinstance(outcome.error, ActionTimeoutError)
    assert cancelled.is_set()


async def test_own_timeout_error_is_not_mistaken_for_ours() -> None:
    async def raises_timeout(**kwargs: Any) -> None:
        raise TimeoutError("socket timed out")

    outcome = await run(AtomicAction(name="a", fn=raises_timeout, timeout_s=60.0))
    assert outcome.status is OutcomeStatus.FAILED
    assert type(outcome.error) is TimeoutError


async def test_retries_use_injected_sleep_and_seeded_jitter(sleep: Any, make_sleep: Any) -> None:
    policy = RetryPolicy.exponential(4, initial_s=0.5, multiplier=2.0, jitter_s=0.1)
    fn = Counter(failures=3)
    action = AtomicAction(name="fetch", fn=fn, retry=policy)
    executor = Executor(sleep=sleep, rng=random.Random(42))
    outcome = await executor.execute(action, {"q": 1}, task_id="t", step=0)
    assert outcome.status is OutcomeStatus.SUCCEEDED
    assert outcome.attempts == 4 and len(fn.calls) == 4
    assert outcome.delays_s == tuple(sleep.calls)
    base = [0.5, 1.0, 2.0]
    assert all(b <= d <= b + 0.1 for b, d in zip(base, sleep.calls, strict=True))
    # The same seed gives the same delays; another seed gives others.
    again = make_sleep()
    await Executor(sleep=again, rng=random.Random(42)).execute(
        AtomicAction(name="fetch", fn=Counter(failures=3), retry=policy), task_id="t", step=0
    )
    other = make_sleep()
    await Executor(sleep=other, rng=random.Random(7)).execute(
        AtomicAction(name="fetch", fn=Counter(failures=3), retry=policy), task_id="t", step=0
    )
    assert again.calls == sleep.calls != other.calls


async def test_retries_stop_at_the_attempt_limit(sleep: Any) -> None:
    fn = Counter(failures=10)
    action = AtomicAction(name="a", fn=fn, retry=RetryPolicy.exponential(3, jitter_s=0.0))
    outcome = await Executor(sleep=sleep).execute(action, task_id="t", step=0)
    assert outcome.status is OutcomeStatus.FAILED
    assert outcome.attempts == 3 and len(fn.calls) == 3 and len(sleep.calls) == 2
    assert str(outcome.error) == "failure 3"


async def test_controller_can_change_the_policy_between_calls(sleep: Any) -> None:
    action = AtomicAction(name="a", fn=Counter(failures=10))
    assert (await Executor(sleep=sleep).execute(action, task_id="t", step=0)).attempts == 1
    per_call = RetryPolicy.exponential(2, jitter_s=0.0)
    outcome = await Executor(sleep=sleep).execute(action, task_id="t", step=0, retry=per_call)
    assert outcome.attempts == 2
    derived = action.with_retry(RetryPolicy.exponential(5, jitter_s=0.0))
    assert action.retry == RetryPolicy() and derived.name == action.name
    assert (await Executor(sleep=sleep).execute(derived, task_id="t", step=0)).attempts == 5


async def test_non_retryable_errors_are_not_retried(sleep: Any) -> None:
    fn = Counter(failures=10, error=KeyError)
    policy = RetryPolicy.exponential(5, retry_on=(OSError,))
    outcome = await Executor(sleep=sleep).execute(
        AtomicAction(name="a", fn=fn, retry=policy), task_id="t", step=0
    )
    assert outcome.attempts == 1 and sleep.calls == []


async def test_programming_errors_raise_instead_of_becoming_outcomes() -> None:
    def wrong(*, x: int) -> int:
        return x

    with pytest.raises(TypeError):
        await run(AtomicAction(name="a", fn=wrong, retry=RetryPolicy.exponential(3)), {"y": 1})


async def test_confirmation_required_blocks_before_running() -> None:
    fn = Counter()
    action = AtomicAction(name="delete_account", fn=fn, requires_confirmation=True)
    outcome = await run(action)
    assert outcome.status is OutcomeStatus.CONFIRMATION_REQUIRED and fn.calls == []
    with pytest.raises(ConfirmationRequiredError, match="delete_account"):
        outcome.unwrap()
    wrong = await run(action, confirmation=Confirmation("ops", action="other_action"))
    assert wrong.status is OutcomeStatus.CONFIRMATION_REQUIRED and fn.calls == []
    ok = await run(action, confirmation=Confirmation("ops", action="delete_account"))
    assert ok.status is OutcomeStatus.SUCCEEDED and len(fn.calls) == 1


async def test_sync_callables_run_and_return() -> None:
    def add(*, a: int, b: int) -> int:
        return a + b

    outcome = await run(AtomicAction(name="add", fn=add, timeout_s=5.0), {"a": 2, "b": 3})
    assert outcome.unwrap() == 5


async def test_events_are_emitted_in_order(sleep: Any) -> None:
    events: list[ExecutionEvent] = []
    action = AtomicAction(name="a", fn=Counter(failures=1), retry=RetryPolicy.exponential(2))
    executor = Executor(sleep=sleep, on_event=events.append)
    await executor.execute(action, task_id="t", step=2)
    assert [e.name for e in events] == ["started", "failed", "retrying", "called"]
    assert {(e.task_id, e.step, e.action) for e in events} == {("t", 2, "a")}


async def test_once_effects_need_a_ledger() -> None:
    action = AtomicAction(name="pay", fn=Counter(), effect=EffectClass.IRREVERSIBLE)
    with pytest.raises(ConfigurationError) as info:
        await run(action)
    assert info.value.argument == "ledger"


def test_outcome_summary_is_json_ready() -> None:
    import json

    outcome = asyncio.run(run(AtomicAction(name="a", fn=Counter(failures=1))))
    summary = json.loads(json.dumps(outcome.summary()))
    assert summary["status"] == "failed" and summary["error"] == "OSError: failure 1"


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"name": ""}, "name"),
        ({"name": "a/b"}, "name"),
        ({"fn": 3}, "fn"),
        ({"effect": "sometimes"}, "effect"),
        ({"timeout_s": 0.0}, "timeout_s"),
        ({"retry": 3}, "retry"),
        ({"compensation": "undo"}, "compensation"),
        ({"preconditions": [42]}, "preconditions[0]"),
        ({"uncertain_errors": (int,)}, "uncertain_errors"),
    ],
)
def test_bad_action_arguments_are_named(kwargs: dict[str, Any], argument: str) -> None:
    base: dict[str, Any] = {"name": "a", "fn": Counter()}
    with pytest.raises(ConfigurationError) as info:
        AtomicAction(**{**base, **kwargs})
    assert info.value.argument == argument


async def test_condition_must_return_bool_or_reason() -> None:
    action = AtomicAction(name="a", fn=Counter(), preconditions=[lambda a, s: None])
    with pytest.raises(ConfigurationError):
        await run(action)


def test_confirmation_needs_an_approver() -> None:
    with pytest.raises(ConfigurationError):
        Confirmation(" ")


def test_execute_sync_runs_the_action_to_its_end_without_an_event_loop() -> None:
    from closedloop.execution import execute_sync

    action = AtomicAction(name="double", fn=lambda n: 2 * n)
    outcome = execute_sync(action, {"n": 21}, ledger=None, task_id="t", step=0)
    assert outcome.status is OutcomeStatus.SUCCEEDED and outcome.result == 42
    assert execute_sync.__name__ == "execute_sync" and "without an event loop" in str(
        execute_sync.__doc__
    )
