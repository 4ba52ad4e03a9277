"""``retry_on_conflict``: the compare-and-set retry every store-backed update runs on."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from closedloop._conflict import retry_on_conflict
from closedloop._exceptions import ConfigurationError, StaleStateError
from closedloop.policy import retry_if_result


def _losing(times: int, calls: list[int]) -> Callable[[int], Awaitable[str]]:
    """An attempt that loses the race ``times`` times, then wins."""

    async def attempt(n: int) -> str:
        calls.append(n)
        if n <= times:
            raise StaleStateError("s", n - 1, n)
        return f"won at {n}"

    return attempt


def test_a_lost_race_runs_again_until_it_wins() -> None:
    calls: list[int] = []
    done = asyncio.run(retry_on_conflict(_losing(2, calls), 5))
    assert done.unwrap() == "won at 3"
    assert calls == [1, 2, 3]
    assert done.delays == (0.0, 0.0)  # no backoff between the attempts


def test_after_the_last_attempt_the_last_conflict_is_raised() -> None:
    calls: list[int] = []
    done = asyncio.run(retry_on_conflict(_losing(10, calls), 3))
    assert not done.ok
    assert calls == [1, 2, 3]
    with pytest.raises(StaleStateError) as raised:
        done.unwrap()
    assert raised.value is done.error
    assert "s" in str(raised.value)


def test_any_other_error_is_raised_at_once() -> None:
    calls: list[int] = []

    async def attempt(n: int) -> None:
        calls.append(n)
        raise KeyError("gone")

    with pytest.raises(KeyError):
        asyncio.run(retry_on_conflict(attempt, 4))
    assert calls == [1]


def test_a_conflict_may_be_a_result() -> None:
    answers = iter([None, None, "free"])

    async def draw(_: int) -> str | None:
        return next(answers)

    done = asyncio.run(retry_on_conflict(draw, 8, conflict=retry_if_result(lambda r: r is None)))
    assert (done.value, done.attempts) == ("free", 3)

    async def never(_: int) -> None:
        return None

    spent = asyncio.run(retry_on_conflict(never, 2, conflict=retry_if_result(lambda r: r is None)))
    assert (spent.value, spent.attempts, spent.reason) == (None, 2, "attempts")


@pytest.mark.parametrize("attempts", [0, -1, 1.5, True])
def test_attempts_must_be_a_positive_integer(attempts: object) -> None:
    async def attempt(_: int) -> int:
        return 1

    with pytest.raises(ConfigurationError, match="attempts"):
        asyncio.run(retry_on_conflict(attempt, attempts))  # type: ignore[arg-type]
