"""HttpTool against real HTTP servers on 127.0.0.1 (uvicorn + starlette, and raw asyncio)."""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable

import pytest
from pydantic import BaseModel

from closedloop.control import LatencyTracker
from closedloop.perception import (
    EMPTY_MEANING,
    HttpTool,
    ObservationStatus,
    RateLimited,
)

from .conftest import FakeClock, LoopbackApp

pytestmark = pytest.mark.integration


class Weather(BaseModel):
    city: str
    temperature: float


async def test_a_real_server_answer_is_ok_and_its_latency_is_recorded(
    loopback_app: LoopbackApp,
) -> None:
    tracker = LatencyTracker()
    async with HttpTool(
        "weather",
        "GET",
        loopback_app.base_url + "/weather/{city}",
        response_schema=Weather,
        key_fields=("city", "temperature"),
        latency_tracker=tracker,
    ) as tool:
        obs = await tool(city="北京", u="c")
    assert obs.status is ObservationStatus.OK, obs
    assert obs.value == {"city": "北京", "temperature": 25.5}
    assert obs.latency_s is not None and obs.latency_s > 0.0
    assert tracker.samples == (obs.latency_s,)


async def test_real_503_falls_back_to_the_cached_answer(loopback_app: LoopbackApp) -> None:
    clock = FakeClock()
    loopback_app.flaky_fail = False
    async with HttpTool(
        "flaky", "GET", loopback_app.base_url + "/flaky", response_schema=Weather, clock=clock
    ) as tool:
        good = await tool()
        loopback_app.flaky_fail = True
        clock.advance(30.0)
        stale = await tool()
    assert good.status is ObservationStatus.OK
    assert stale.status is ObservationStatus.STALE
    assert stale.value == good.value == {"city": "北京", "temperature": 21.0}
    assert stale.confidence == 0.7 and stale.age_s == 30.0
    assert stale.retry_after_s == 7.0


async def test_real_429_is_rate_limited_with_an_event(loopback_app: LoopbackApp) -> None:
    events: list[RateLimited] = []
    async with HttpTool(
        "limited", "GET", loopback_app.base_url + "/limited", on_event=events.append
    ) as tool:
        obs = await tool()
    assert obs.status is ObservationStatus.RATE_LIMITED
    assert obs.retry_after_s == 3.0
    assert [(e.source, e.retry_after_s) for e in events] == [("limited", 3.0)]


async def test_real_empty_rooms_and_an_html_login_page(loopback_app: LoopbackApp) -> None:
    async with HttpTool(
        "rooms", "GET", loopback_app.base_url + "/empty", result_field="rooms"
    ) as rooms:
        empty = await rooms()
    assert empty.status is ObservationStatus.EMPTY
    assert empty.meaning.startswith(EMPTY_MEANING)
    async with HttpTool("portal", "GET", loopback_app.base_url + "/html") as portal:
        page = await portal()
    assert page.status is ObservationStatus.ERROR
    assert "expected JSON, got text/html" in (page.error or "")


async def test_a_hanging_server_times_out_at_the_dynamic_timeout(
    loopback_app: LoopbackApp,
) -> None:
    # p95 defaults to 0.05 s until samples arrive, so the timeout is 2 x 0.05 = 0.1 s.
    tracker = LatencyTracker(default_s=0.05)
    expected_timeout = tracker.dynamic_timeout()
    async with HttpTool(
        "hang", "GET", loopback_app.base_url + "/hang", latency_tracker=tracker
    ) as tool:
        obs = await tool()
    assert expected_timeout == pytest.approx(0.1)
    assert obs.status is ObservationStatus.TIMEOUT
    assert obs.error == "timed out after 0.1 s"
    assert len(tracker.samples) == 1 and tracker.samples[0] >= 0.1


async def test_a_truncated_body_from_a_real_socket_is_scored(
    raw_server: Callable[[bytes], Awaitable[str]],
) -> None:
    body = '{"city": "北京", "temperature": 2'.encode()
    url = await raw_server(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        b"Content-Length: 400\r\nConnection: close\r\n\r\n" + body
    )
    async with HttpTool("cut", "GET", url, response_schema=Weather) as tool:
        obs = await tool()
    assert obs.status is ObservationStatus.ERROR
    assert obs.confidence == 0.1  # the connection broke mid-body: a network fault
    assert "RemoteProtocolError" in (obs.error or "")


async def test_a_body_that_lies_about_its_json_is_scored(
    raw_server: Callable[[bytes], Awaitable[str]],
) -> None:
    body = b'{"city": "x", "temperature": 3,'
    url = await raw_server(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body
    )
    async with HttpTool("bad", "GET", url, response_schema=Weather) as tool:
        obs = await tool()
    assert obs.status is ObservationStatus.ERROR
    assert obs.confidence == 0.2
    assert "invalid JSON" in (obs.error or "")


async def test_nothing_listening_is_a_network_error() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # the port is now free and nothing listens on it
    async with HttpTool("gone", "GET", f"http://127.0.0.1:{port}/") as tool:
        obs = await tool()
    assert obs.status is ObservationStatus.ERROR
    assert obs.confidence == 0.1
    assert "ConnectError" in (obs.error or "")
