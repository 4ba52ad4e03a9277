"""The service calls its model through the limiters by default; /metrics, /v1/limits and the
dashboard show their state, shared across workers when it is in Redis."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from closedloop import ModelRateLimitError
from closedloop.models import CallInfo, GatedModel, Message
from closedloop.server._provider import GatedTransport

from .conftest import HarnessFactory, RoutingModel, new_session, start_run


class _BusyOnce(RoutingModel):
    """Answers its first call with a 429 (Retry-After 0), then as the routing model."""

    def __init__(self) -> None:
        super().__init__()
        inner = self._fn
        self.refused = 0

        def reply(messages: tuple[Message, ...], info: CallInfo) -> Any:
            if not self.refused:
                self.refused += 1
                raise ModelRateLimitError("busy", retry_after=0.0)
            return inner(messages, info)

        self._fn = reply


def _gauge(text: str, name: str) -> float:
    match = re.search(rf'^closedloop_provider_{name}{{provider="model"}} (\S+)$', text, re.M)
    assert match is not None, f"{name} missing from /metrics"
    return float(match.group(1))


async def _calc_run(harness: Any) -> dict[str, Any]:
    alice = harness.client("alice")
    session = await new_session(alice)
    run = await start_run(alice, session, "calc", "Add 17 and 25.")
    await harness.settle()
    status: dict[str, Any] = (await alice.get(f"/v1/sessions/{session}/runs/{run}")).json()
    return status


async def test_runs_go_through_the_gate_and_a_429_is_retried_and_shown(
    make_harness: HarnessFactory,
) -> None:
    model = _BusyOnce()
    harness = await make_harness(model=model)
    assert isinstance(harness.service.model(), GatedModel)
    status = await _calc_run(harness)
    assert status["success"] is True and status["answer"] == "42"
    assert model.refused == 1  # the 429 was retried inside the gate, not a failed step

    limits = (await harness.client("alice").get("/v1/limits")).json()["providers"]
    assert [p["provider"] for p in limits] == ["model", "tools"] and not limits[0]["shared"]
    assert limits[0]["rejected"] == 1 and limits[0]["inflight"] == 0
    assert limits[0]["breaker"] == "closed" and limits[0]["limit"] >= 1

    text = (await harness.client("anonymous").get("/metrics")).text
    assert _gauge(text, "rejected") == 1.0
    assert _gauge(text, "limit") == pytest.approx(limits[0]["limit"])
    assert _gauge(text, "inflight") == 0.0 and _gauge(text, "breaker") == 0.0
    for name in ("retry_tokens", "capacity_deficit", "delay_ratio", "cooldown_seconds"):
        _gauge(text, name)


async def test_the_limiters_can_be_switched_off(make_harness: HarnessFactory) -> None:
    harness = await make_harness(provider_limits=False)
    assert not isinstance(harness.service.model(), GatedModel)
    assert (await harness.client("alice").get("/v1/limits")).json() == {"providers": []}
    assert (
        "closedloop_provider_limit{" not in (await harness.client("anonymous").get("/metrics")).text
    )


async def test_two_workers_share_the_limiter_state_through_redis(
    make_harness: HarnessFactory, redis_url: str
) -> None:
    first = await make_harness(model=_BusyOnce(), provider_state=redis_url)
    second = await make_harness(provider_state=redis_url)
    done = await _calc_run(first)
    assert done["success"] is True, {k: done.get(k) for k in ("halt_reason", "error", "answer")}
    # The 429 the first worker saw is in the second worker's view of the provider.
    seen = (await second.client("alice").get("/v1/limits")).json()["providers"][0]
    assert seen["shared"] is True and seen["rejected"] == 1 and seen["rejected_here"] == 0
    assert (await _calc_run(second))["success"] is True


async def test_the_dashboard_shows_the_provider_limits(make_harness: HarnessFactory) -> None:
    harness = await make_harness()
    page = (await harness.client("anonymous").get("/")).text
    assert 'id="limits"' in page
    script = (await harness.client("anonymous").get("/static/app.js")).text
    assert '"/v1/limits"' in script and "capacity deficit" in script


async def test_tool_requests_go_through_their_own_gate(make_harness: HarnessFactory) -> None:
    harness = await make_harness()
    limits = harness.service.tool_limits
    assert limits is not None and harness.service.tool_transport is not None
    seen: list[str] = []

    def world(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.path)
        if len(seen) == 1:
            return httpx.Response(429, headers={"retry-after": "0"})
        return httpx.Response(200, json={"ok": True})

    transport = GatedTransport(limits, httpx.MockTransport(world))
    async with httpx.AsyncClient(transport=transport) as client:
        assert (await client.get("http://world.test/a")).status_code == 429
        assert (await client.get("http://world.test/b")).status_code == 200
    providers = (await harness.client("alice").get("/v1/limits")).json()["providers"]
    tools = next(p for p in providers if p["provider"] == "tools")
    assert tools["rejected"] == 1 and tools["inflight"] == 0
    text = (await harness.client("anonymous").get("/metrics")).text
    assert 'closedloop_provider_rejected{provider="tools"} 1.0' in text


async def test_an_open_tool_breaker_reaches_the_tool_as_a_connection_error(
    make_harness: HarnessFactory,
) -> None:
    harness = await make_harness()
    limits = harness.service.tool_limits
    assert limits is not None

    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    transport = GatedTransport(limits, httpx.MockTransport(down))
    async with httpx.AsyncClient(transport=transport) as client:
        for _ in range(limits.state.rules.failure_threshold):
            with pytest.raises(httpx.ConnectError, match="refused"):
                await client.get("http://world.test/")
        with pytest.raises(httpx.ConnectError, match="circuit breaker is open"):
            await client.get("http://world.test/")


def test_a_reference_factory_that_takes_a_transport_gets_the_tools_gate() -> None:
    from closedloop.feedback import MemoryStore
    from closedloop.server import AgentContext
    from closedloop.server._registry import _reference_factory

    def build(model: Any, *, base_url: str, **options: Any) -> Any:
        return options

    marker = object()
    ctx = AgentContext(
        model=RoutingModel(), store=MemoryStore(), session_id="s", run_id="r",
        world_url="http://world.test", tool_transport=marker,
    )  # fmt: skip
    assert _reference_factory(build)(ctx)["transport"] is marker
