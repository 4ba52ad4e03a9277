"""HttpTool's scoring matrix, driven through httpx.MockTransport with a hand-moved clock."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from closedloop import ConfigurationError
from closedloop.control import LatencyTracker
from closedloop.perception import (
    EMPTY_MEANING,
    ConfidencePolicy,
    HttpTool,
    Observation,
    ObservationStatus,
    RateLimited,
    parse_retry_after,
)

from .conftest import FakeClock

Handler = Callable[[httpx.Request], httpx.Response]


class Weather(BaseModel):
    city: str
    temperature: float


def make_tool(
    handler: Handler,
    clock: FakeClock,
    *,
    url: str = "http://api.test/weather/{city}",
    method: str = "GET",
    **kw: Any,
) -> HttpTool:
    kw.setdefault("response_schema", Weather)
    kw.setdefault("key_fields", ("city", "temperature"))
    return HttpTool(
        "weather",
        method,
        url,
        transport=httpx.MockTransport(handler),
        clock=clock,
        timer=clock,
        latency_tracker=kw.pop("latency_tracker", LatencyTracker()),
        **kw,
    )


class Script:
    """A MockTransport handler that plays scripted responses and advances the clock."""

    def __init__(self, clock: FakeClock, latency_s: float = 0.25) -> None:
        self.clock = clock
        self.latency_s = latency_s
        self.responses: list[httpx.Response | Exception] = []
        self.requests: list[httpx.Request] = []

    def then(self, *items: httpx.Response | Exception) -> Script:
        self.responses.extend(items)
        return self

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        self.clock.advance(self.latency_s)
        item = self.responses.pop(0)
        if isinstance(item, Exception):
            raise item
        return item


GOOD = {"city": "北京", "temperature": 25.0}


def ok(body: Any = GOOD, **kw: Any) -> httpx.Response:
    return httpx.Response(200, json=body, **kw)


async def test_valid_answer_is_ok_with_full_confidence_and_recorded_latency(
    clock: FakeClock,
) -> None:
    script = Script(clock).then(ok())
    tool = make_tool(script, clock)
    obs = await tool(city="北京")
    assert obs.status is ObservationStatus.OK
    assert obs.confidence == 1.0
    assert obs.value == GOOD
    assert obs.source == "weather"
    assert obs.latency_s == pytest.approx(0.25)
    assert tool.latency_tracker.samples == (pytest.approx(0.25),)
    assert obs.timestamp == clock.now
    assert json.loads(obs.raw) == GOOD
    assert str(script.requests[0].url) == "http://api.test/weather/%E5%8C%97%E4%BA%AC"


async def test_key_field_missing_without_cache_is_partial_with_the_fresh_answer(
    clock: FakeClock,
) -> None:
    tool = make_tool(Script(clock).then(ok({"city": "北京"})), clock, response_schema=None)
    obs = await tool(city="北京")
    assert obs.status is ObservationStatus.PARTIAL
    assert obs.confidence == 0.6
    assert obs.value == {"city": "北京"}
    assert obs.age_s is None
    assert "temperature" in (obs.error or "")
    assert "no earlier one is cached" in obs.meaning


async def test_key_field_none_after_a_good_answer_falls_back_to_it_and_says_so(
    clock: FakeClock,
) -> None:
    script = Script(clock).then(ok(), ok({"city": "北京", "temperature": None}))
    tool = make_tool(script, clock, response_schema=None)
    first = await tool(city="北京")
    clock.advance(40.0)
    second = await tool(city="北京")
    assert second.status is ObservationStatus.PARTIAL
    assert second.confidence == 0.6
    assert second.value == first.value == GOOD
    assert second.age_s == pytest.approx(40.25)
    assert "last good answer" in second.meaning and "not the fresh one" in second.meaning
    assert json.loads(second.raw)["temperature"] is None  # raw keeps what was really sent


async def test_schema_mismatch_is_partial_and_names_the_problem(clock: FakeClock) -> None:
    tool = make_tool(Script(clock).then(ok({"city": "北京", "temperature": "hot"})), clock)
    obs = await tool(city="北京")
    assert obs.status is ObservationStatus.PARTIAL
    assert obs.error is not None and "schema" in obs.error and "temperature" in obs.error


@pytest.mark.parametrize("body", [[], {}, None])
async def test_an_empty_answer_is_empty_never_ok(clock: FakeClock, body: Any) -> None:
    response = httpx.Response(200, content=json.dumps(body).encode())  # json=None sends nothing
    tool = make_tool(Script(clock).then(response), clock)
    obs = await tool(city="北京")
    assert obs.status is ObservationStatus.EMPTY
    assert obs.meaning.startswith(EMPTY_MEANING)
    assert obs.confidence == 0.9
    assert obs.value == body


async def test_result_field_decides_emptiness_inside_an_envelope(clock: FakeClock) -> None:
    script = Script(clock).then(ok({"rooms": []}), ok({"rooms": ["3F-A"]}))
    tool = make_tool(
        script,
        clock,
        url="http://api.test/rooms",
        response_schema=None,
        key_fields=("rooms",),
        result_field="rooms",
    )
    empty = await tool()
    full = await tool()
    assert empty.status is ObservationStatus.EMPTY
    assert "not the absence of a constraint" in empty.meaning
    assert empty.value == {"rooms": []}
    assert full.status is ObservationStatus.OK and full.value == {"rooms": ["3F-A"]}


async def test_a_missing_result_field_is_partial_not_empty(clock: FakeClock) -> None:
    tool = make_tool(
        Script(clock).then(ok({"total": 0})),
        clock,
        url="http://api.test/rooms",
        response_schema=None,
        key_fields=(),
        result_field="rooms",
    )
    obs = await tool()
    assert obs.status is ObservationStatus.PARTIAL
    assert "rooms" in (obs.error or "")


async def test_an_empty_answer_replaces_the_cached_match(clock: FakeClock) -> None:
    # t0: a room is free; t1: no room; t2: the service is down. The fallback must not
    # resurrect the older match, and must keep saying what the empty answer meant.
    script = Script(clock).then(ok({"rooms": ["3F-A"]}), ok({"rooms": []}), httpx.Response(503))
    tool = make_tool(
        script,
        clock,
        url="http://api.test/rooms",
        response_schema=None,
        key_fields=(),
        result_field="rooms",
    )
    assert (await tool()).status is ObservationStatus.OK
    assert (await tool()).status is ObservationStatus.EMPTY
    clock.advance(10.0)
    down = await tool()
    assert down.status is ObservationStatus.STALE
    assert down.value == {"rooms": []}
    assert EMPTY_MEANING in down.meaning


async def test_no_body_is_empty_with_low_confidence(clock: FakeClock) -> None:
    tool = make_tool(Script(clock).then(httpx.Response(204)), clock)
    obs = await tool(city="x")
    assert obs.status is ObservationStatus.EMPTY
    assert obs.confidence == 0.5
    assert "no body" in obs.meaning


async def test_429_scores_zero_reads_retry_after_and_emits_an_event(clock: FakeClock) -> None:
    seen: list[RateLimited] = []
    seen_sync: list[RateLimited] = []

    async def on_async(event: RateLimited) -> None:
        seen.append(event)

    def broken(event: RateLimited) -> None:
        raise RuntimeError("listener bug")

    response = httpx.Response(429, json={"detail": "slow"}, headers={"Retry-After": "12"})
    tool = make_tool(
        Script(clock).then(response), clock, on_event=[on_async, broken, seen_sync.append]
    )
    obs = await tool(city="北京")
    assert obs.status is ObservationStatus.RATE_LIMITED
    assert obs.confidence == 0.0
    assert obs.value is None
    assert obs.retry_after_s == 12.0
    assert seen == seen_sync == [RateLimited(source="weather", retry_after_s=12.0, at=clock.now)]


async def test_a_429_reaches_the_default_healing_policy(clock: FakeClock) -> None:
    from closedloop.feedback import (
        EventBus,
        HealingAction,
        HealingKind,
        MemoryStore,
        install_healing,
    )
    from closedloop.feedback import RateLimited as FeedbackRateLimited

    assert RateLimited is FeedbackRateLimited  # one class for a 429, not two look-alikes
    bus = EventBus()
    install_healing(bus, MemoryStore(), circuit_clock=clock, clock=clock)
    response = httpx.Response(429, json={"detail": "slow"}, headers={"Retry-After": "7"})
    deliveries = []

    async def relay(event: RateLimited) -> None:
        deliveries.append(await bus.publish(event))

    tool = make_tool(Script(clock).then(response), clock, on_event=relay)
    assert (await tool(city="Paris")).status is ObservationStatus.RATE_LIMITED
    (delivery,) = deliveries
    assert delivery.handled
    kinds = {action.kind for action in delivery.results_of(HealingAction)}
    assert HealingKind.USE_CACHE in kinds


async def test_429_with_an_http_date_retry_after(clock: FakeClock) -> None:
    when = datetime.fromtimestamp(clock.now + 90.25, tz=UTC)  # the date form has whole seconds
    response = httpx.Response(429, headers={"Retry-After": format_datetime(when, usegmt=True)})
    tool = make_tool(Script(clock, latency_s=0.0).then(response), clock)
    obs = await tool(city="x")
    assert obs.retry_after_s == pytest.approx(90.0)


async def test_5xx_serves_the_cached_answer_as_stale_with_its_age(clock: FakeClock) -> None:
    down = httpx.Response(503, text="down", headers={"Retry-After": "7"})
    tool = make_tool(Script(clock).then(ok(), down), clock)
    await tool(city="北京")
    clock.advance(100.0)
    obs = await tool(city="北京")
    assert obs.status is ObservationStatus.STALE
    assert obs.confidence == 0.7
    assert obs.value == GOOD
    assert obs.age_s == pytest.approx(100.25)
    assert obs.error == "HTTP 503"
    assert obs.retry_after_s == 7.0
    assert "last good answer" in obs.meaning


async def test_5xx_without_cache_is_an_error_at_0_2(clock: FakeClock) -> None:
    tool = make_tool(Script(clock).then(httpx.Response(500, text="boom")), clock)
    obs = await tool(city="北京")
    assert obs.status is ObservationStatus.ERROR
    assert obs.confidence == 0.2
    assert obs.value is None
    assert obs.raw == "boom"


async def test_the_cache_is_per_request_and_respects_max_age(clock: FakeClock) -> None:
    script = Script(clock).then(ok(), httpx.Response(503), ok(), httpx.Response(503))
    tool = make_tool(script, clock, cache_max_age_s=60.0)
    await tool(city="北京")
    other_city = await tool(city="上海")
    assert other_city.status is ObservationStatus.ERROR  # 北京's answer is not 上海's
    await tool(city="上海")
    clock.advance(61.0)
    expired = await tool(city="上海")
    assert expired.status is ObservationStatus.ERROR and expired.confidence == 0.2


async def test_other_4xx_is_an_error_with_no_confidence(clock: FakeClock) -> None:
    tool = make_tool(Script(clock).then(httpx.Response(404, json={"detail": "no"})), clock)
    obs = await tool(city="x")
    assert obs.status is ObservationStatus.ERROR
    assert obs.confidence == 0.0
    assert obs.error == "HTTP 404"


async def test_network_error_scores_0_1_and_is_timed(clock: FakeClock) -> None:
    tool = make_tool(Script(clock).then(httpx.ConnectError("refused")), clock)
    obs = await tool(city="x")
    assert obs.status is ObservationStatus.ERROR
    assert obs.confidence == 0.1
    assert "ConnectError" in (obs.error or "")
    assert tool.latency_tracker.samples == (pytest.approx(0.25),)


async def test_timeout_is_its_own_status_and_uses_the_cache_when_there_is_one(
    clock: FakeClock,
) -> None:
    script = Script(clock).then(httpx.ReadTimeout("slow"), ok(), httpx.ReadTimeout("slow"))
    tool = make_tool(script, clock)
    cold = await tool(city="北京")
    assert cold.status is ObservationStatus.TIMEOUT
    assert cold.confidence == 0.1 and cold.value is None and cold.age_s is None
    await tool(city="北京")
    clock.advance(5.0)
    warm = await tool(city="北京")
    assert warm.status is ObservationStatus.TIMEOUT
    assert warm.value == GOOD and warm.confidence == 0.7
    assert warm.age_s == pytest.approx(5.25)
    assert warm.usable and not cold.usable
    assert len(tool.latency_tracker.samples) == 3


async def test_the_timeout_comes_from_the_latency_tracker(clock: FakeClock) -> None:
    tracker = LatencyTracker(window=10, default_s=0.4, min_samples=5)
    script = Script(clock, latency_s=8.0).then(*[ok() for _ in range(7)])
    tool = make_tool(script, clock, latency_tracker=tracker)

    def sent_timeout(i: int) -> float:
        timeout = script.requests[i].extensions["timeout"]
        assert timeout["read"] == timeout["connect"]
        return float(timeout["read"])

    await tool(city="a")
    assert sent_timeout(0) == pytest.approx(0.8)  # default p95 0.4 s x headroom 2
    for _ in range(5):
        await tool(city="a")
    # Five 8 s latencies: p95 8 s > 5 s, so fail fast at min(3, 8 x 0.6) = 3 s.
    assert tracker.degraded
    assert sent_timeout(5) == pytest.approx(tracker.dynamic_timeout()) == pytest.approx(3.0)
    tool.timeout_s = 1.5
    await tool(city="a")
    assert sent_timeout(6) == 1.5


async def test_an_overall_deadline_cuts_a_transport_that_never_answers(clock: FakeClock) -> None:
    never = asyncio.Event()

    async def stuck(request: httpx.Request) -> httpx.Response:
        await never.wait()
        return httpx.Response(200)

    tool = HttpTool(
        "stuck", "GET", "http://api.test/", transport=httpx.MockTransport(stuck), timeout_s=0.01
    )
    obs = await tool()
    assert obs.status is ObservationStatus.TIMEOUT
    assert obs.error is not None and "0.01" in obs.error


@pytest.mark.parametrize(
    ("body", "content_type", "error_part"),
    [
        (b'{"city": "\xe5\x8c\x97", "temperature": 2', "application/json", "invalid JSON"),
        (b"<html>Login</html>", "text/html", "expected JSON, got text/html"),
        (b"\xff\xfe\xfa{}", "application/json", "not valid utf-8"),
        (b'{"city": "x", "temperature": NaN}', "application/json", "NaN"),
        (b"[" * 100_000, "application/json", "invalid JSON"),
    ],
)
async def test_unusable_bodies_are_scored_never_raised(
    clock: FakeClock, body: bytes, content_type: str, error_part: str
) -> None:
    bad = httpx.Response(200, content=body, headers={"content-type": content_type})
    tool = make_tool(Script(clock).then(bad, ok(), bad), clock)
    cold = await tool(city="x")
    assert cold.status is ObservationStatus.ERROR and cold.confidence == 0.2
    assert error_part in (cold.error or "")
    await tool(city="x")
    warm = await tool(city="x")
    assert warm.status is ObservationStatus.STALE and warm.value == GOOD


async def test_json_served_as_text_plain_is_accepted_and_noted(clock: FakeClock) -> None:
    response = httpx.Response(200, text=json.dumps(GOOD), headers={"content-type": "text/plain"})
    tool = make_tool(Script(clock).then(response), clock)
    obs = await tool(city="x")
    assert obs.status is ObservationStatus.OK
    assert "served as text/plain" in obs.meaning


async def test_a_byte_order_mark_is_tolerated(clock: FakeClock) -> None:
    body = b"\xef\xbb\xbf" + json.dumps(GOOD).encode()
    response = httpx.Response(200, content=body, headers={"content-type": "application/json"})
    obs = await make_tool(Script(clock).then(response), clock)(city="x")
    assert obs.status is ObservationStatus.OK and obs.value == GOOD


async def test_a_body_over_max_body_bytes_stops_reading(clock: FakeClock) -> None:
    huge = ok({"city": "x" * 5000, "temperature": 1.0})
    tool = make_tool(Script(clock).then(huge), clock, max_body_bytes=1000)
    obs = await tool(city="x")
    assert obs.status is ObservationStatus.ERROR
    assert "larger than 1000 bytes" in (obs.error or "")
    assert len(obs.raw) <= 1000


async def test_a_huge_valid_answer_is_compacted_with_a_note(clock: FakeClock) -> None:
    flights = [{"no": f"CA{i}", "price": 800 + i} for i in range(2000)]
    tool = make_tool(
        Script(clock).then(ok({"flights": flights})),
        clock,
        url="http://api.test/flights",
        response_schema=None,
        key_fields=("flights",),
        max_chars=2000,
    )
    obs = await tool()
    assert obs.status is ObservationStatus.OK
    assert obs.value["flights"][0] == {"no": "CA0", "price": 800}
    assert obs.value["flights"][-1].startswith("…[+")  # the cut is visible in the value itself
    assert "value compacted" in obs.meaning and "kept" in obs.meaning
    assert "raw compacted" in obs.meaning
    assert len(json.dumps(obs.value, ensure_ascii=False, separators=(",", ":"))) <= 2000


async def test_bad_arguments_become_error_observations_without_a_request(clock: FakeClock) -> None:
    script = Script(clock)
    tool = make_tool(script, clock)
    missing = await tool(unit="c")
    assert missing.status is ObservationStatus.ERROR
    assert "missing argument 'city'" in (missing.error or "")
    not_scalar = await tool(city="x", when={"day": 1})
    assert not_scalar.status is ObservationStatus.ERROR
    assert script.requests == []
    assert tool.latency_tracker.samples == ()
    post = HttpTool("p", "POST", "http://api.test/", transport=httpx.MockTransport(script))
    assert (await post(blob=object())).status is ObservationStatus.ERROR
    assert (await post(["not", "a", "mapping"])).status is ObservationStatus.ERROR  # type: ignore[arg-type]
    assert (await post({1: "x"})).status is ObservationStatus.ERROR  # type: ignore[dict-item]
    assert script.requests == []


async def test_arguments_fill_the_template_then_query_or_body(clock: FakeClock) -> None:
    script = Script(clock).then(ok(), ok())
    get = make_tool(script, clock)
    await get({"city": "a/b c"}, unit="c", days=[1, 2])
    assert script.requests[0].url.raw_path.startswith(b"/weather/a%2Fb%20c?")
    assert script.requests[0].url.params.get_list("days") == ["1", "2"]
    post = make_tool(script, clock, url="http://api.test/search/{city}", method="POST")
    await post(city="北京", budget=800)
    assert json.loads(script.requests[1].content) == {"budget": 800}


def test_configuration_errors_name_the_argument(clock: FakeClock) -> None:
    transport = httpx.MockTransport(lambda r: ok())
    cases: list[tuple[Callable[[], object], str]] = [
        (lambda: HttpTool("", "GET", "http://x/"), "name"),
        (lambda: HttpTool("t", "GE T", "http://x/"), "method"),
        (lambda: HttpTool("t", "GET", "http://x/{a.b}"), "url"),
        (lambda: HttpTool("t", "GET", "http://x/{"), "url"),
        (lambda: HttpTool("t", "GET", "http://[::1/{city}"), "url"),
        (lambda: HttpTool("t", "GET", "http://x/", key_fields="city"), "key_fields"),
        (lambda: HttpTool("t", "GET", "http://x/", response_schema=dict), "response_schema"),
        (lambda: HttpTool("t", "GET", "http://x/", timeout_s=0.0), "timeout_s"),
        (
            lambda: HttpTool(
                "t", "GET", "http://x/", transport=transport, client=httpx.AsyncClient()
            ),
            "transport",
        ),
        (lambda: ConfidencePolicy(stale=1.5), "stale"),
    ]
    for build, argument in cases:
        with pytest.raises(ConfigurationError) as info:
            build()
        assert info.value.argument == argument


def test_call_sync_runs_a_call_on_a_fresh_client(clock: FakeClock) -> None:
    tool = make_tool(Script(clock).then(ok()), clock)
    assert tool.call_sync(city="x").status is ObservationStatus.OK
    injected = HttpTool("t", "GET", "http://x/", client=httpx.AsyncClient())
    with pytest.raises(ConfigurationError):
        injected.call_sync()


async def test_aclose_closes_only_a_client_the_tool_owns(clock: FakeClock) -> None:
    client = httpx.AsyncClient(transport=httpx.MockTransport(lambda r: ok()))
    async with HttpTool("t", "GET", "http://x/", client=client) as tool:
        assert (await tool()).status is ObservationStatus.OK
    assert not client.is_closed
    await client.aclose()
    async with make_tool(Script(clock).then(ok()), clock) as owned:
        await owned(city="x")
        inner = owned._client
    assert inner is not None and inner.is_closed


@given(
    status=st.integers(100, 599),
    body=st.binary(max_size=200)
    | st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=10),
        lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=5), c, max_size=4),
        max_leaves=10,
    ).map(lambda v: json.dumps(v).encode()),
    content_type=st.sampled_from(["application/json", "text/html", "", "application/x+json"]),
    retry_after=st.none() | st.text(max_size=30),
)
def test_any_answer_becomes_a_valid_observation(
    status: int, body: bytes, content_type: str, retry_after: str | None
) -> None:
    headers = {"content-type": content_type} if content_type else {}
    if retry_after is not None and retry_after.isprintable() and retry_after.isascii():
        headers["retry-after"] = retry_after
    clock = FakeClock()
    if status < 200:  # httpx cannot deliver a final 1xx; the lowest final code stands in
        status = 200

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body, headers=headers)

    async def call() -> Observation:
        async with make_tool(handler, clock) as tool:
            return await tool(city="x")

    obs = asyncio.run(call())
    assert isinstance(obs, Observation)
    assert 0.0 <= obs.confidence <= 1.0
    assert obs.meaning
    assert obs.status in set(ObservationStatus)
    if obs.status is ObservationStatus.OK:
        assert 200 <= status < 300 and Weather.model_validate(obs.value)
    if status == 429:
        assert obs.status is ObservationStatus.RATE_LIMITED


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("120", 120.0),
        (" 1.5 ", 1.5),
        ("0", 0.0),
        ("-3", None),
        ("nan", None),
        ("inf", None),
        ("soon", None),
        ("", None),
        (None, None),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),  # in the past: retry now
    ],
)
def test_parse_retry_after(header: str | None, expected: float | None) -> None:
    assert parse_retry_after(header, now=1_700_000_000.0) == expected


@given(st.text(max_size=60), st.floats(0, 4e9))
def test_parse_retry_after_never_raises_and_is_never_negative(text: str, now: float) -> None:
    result = parse_retry_after(text, now)
    assert result is None or (math.isfinite(result) and result >= 0.0)
