"""EventBus: dispatch by type and base classes, results returned, handler errors isolated."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import pytest

from closedloop import ConfigurationError
from closedloop.feedback import (
    EventBus,
    FaultEvent,
    HealingAction,
    RateLimited,
    ServerError,
    SwitchToCache,
    TimeoutEvent,
)


async def test_dispatch_by_type_and_mro_most_specific_first() -> None:
    bus = EventBus()
    calls: list[str] = []

    @bus.on(RateLimited)
    def rate(event: RateLimited) -> str:
        calls.append("rate")
        return f"rate:{event.retry_after_s}"

    @bus.on(FaultEvent)
    async def fault(event: FaultEvent) -> str:
        calls.append("fault")
        return f"fault:{event.source}"

    @bus.on(object)
    def audit(event: object) -> None:
        calls.append("audit")

    @bus.on(RateLimited)
    def rate_second(event: RateLimited) -> str:
        calls.append("rate2")
        return "rate2"

    delivery = await bus.publish(RateLimited(source="api", retry_after_s=3))
    assert calls == ["rate", "rate2", "fault", "audit"]
    # None results are kept in outcomes, left out of results.
    assert delivery.results == ("rate:3", "rate2", "fault:api")
    assert [o.registered_for for o in delivery.outcomes] == [
        RateLimited,
        RateLimited,
        FaultEvent,
        object,
    ]
    assert delivery.ok and delivery.handled

    calls.clear()
    delivery = await bus.publish(ServerError(source="api", status_code=502))
    assert calls == ["fault", "audit"]
    assert delivery.results == ("fault:api",)


async def test_decorator_returns_the_function_unchanged() -> None:
    bus = EventBus()

    def handler(event: FaultEvent) -> int:
        return 7

    assert bus.on(FaultEvent)(handler) is handler
    assert handler(FaultEvent(source="x")) == 7


async def test_unhandled_events_are_delivered_to_nobody() -> None:
    delivery = await EventBus().publish(TimeoutEvent(source="x"))
    assert not delivery.handled and delivery.ok and delivery.results == ()


async def test_a_failing_handler_is_isolated_reported_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bus = EventBus()
    ran: list[str] = []

    @bus.on(FaultEvent)
    def broken(event: FaultEvent) -> None:
        ran.append("broken")
        raise RuntimeError("handler bug")

    @bus.on(FaultEvent)
    async def broken_async(event: FaultEvent) -> None:
        ran.append("broken_async")
        await asyncio.sleep(0)
        raise ValueError("async bug")

    @bus.on(FaultEvent)
    def fine(event: FaultEvent) -> str:
        ran.append("fine")
        return "ok"

    with caplog.at_level(logging.WARNING, logger="closedloop.feedback"):
        delivery = await bus.publish(FaultEvent(source="api"))

    assert ran == ["broken", "broken_async", "fine"]
    assert not delivery.ok
    assert delivery.results == ("ok",)
    assert [type(e) for e in delivery.errors] == [RuntimeError, ValueError]
    assert [o.handler.rsplit(".", 1)[-1] for o in delivery.outcomes if not o.ok] == [
        "broken",
        "broken_async",
    ]
    assert "handler bug" in caplog.text and "async bug" in caplog.text


async def test_cancellation_is_not_swallowed() -> None:
    bus = EventBus()

    @bus.on(FaultEvent)
    async def cancelled(event: FaultEvent) -> None:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        await bus.publish(FaultEvent(source="x"))


async def test_a_handler_registered_on_a_base_and_a_subclass_runs_once() -> None:
    bus = EventBus()
    seen: list[str] = []

    class Counter:
        def handle(self, event: FaultEvent) -> None:
            seen.append(type(event).__name__)

    counter = Counter()
    bus.subscribe(FaultEvent, counter.handle)
    bus.subscribe(RateLimited, counter.handle)
    # Equal-but-distinct strategy objects are distinct handlers.
    bus.subscribe(RateLimited, SwitchToCache())
    bus.subscribe(FaultEvent, SwitchToCache())

    delivery = await bus.publish(RateLimited(source="api"))
    assert seen == ["RateLimited"]
    assert len(delivery.results_of(HealingAction)) == 2


async def test_foreign_event_classes_dispatch_by_their_own_type() -> None:
    """An event class from another part (e.g. perception's) needs no import of ours."""

    @dataclass(frozen=True)
    class HttpRateLimited:  # shaped like perception's event, unrelated to ours
        source: str
        retry_after_s: float | None = None

    bus = EventBus()
    bus.subscribe(HttpRateLimited, SwitchToCache(max_age_s=60))
    delivery = await bus.publish(HttpRateLimited(source="weather", retry_after_s=2.0))
    (action,) = delivery.results_of(HealingAction)
    assert action.params["source"] == "weather"
    assert action.params["retry_after_s"] == 2.0
    # Our own RateLimited is a different type and does not reach that handler.
    assert not (await bus.publish(RateLimited(source="weather"))).handled


def test_subscribe_validates() -> None:
    bus = EventBus()
    with pytest.raises(ConfigurationError, match="event_type"):
        bus.subscribe("RateLimited", print)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="handler"):
        bus.subscribe(RateLimited, 42)  # type: ignore[arg-type]


def test_events_validate_their_fields() -> None:
    with pytest.raises(ConfigurationError, match="source"):
        FaultEvent(source="")
    with pytest.raises(ConfigurationError, match="retry_after_s"):
        RateLimited(source="x", retry_after_s=-1)
    with pytest.raises(ConfigurationError, match="timeout_s"):
        TimeoutEvent(source="x", timeout_s=0)
