"""One Idempotency-Key, many simultaneous posts: one run, one order, one answer.

N identical ``POST /runs`` with one key go to the real ASGI app at the same moment (httpx
over the ASGI transport, all in flight together), on a real SQLite file and on a real
redis-server. Every round the order book must hold exactly one order and every request
must be answered with the same run id: 202 for the one that started it, 200 for the rest.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from closedloop import Runtime
from closedloop.agent import Agent, RequiredField, RunLimits, Task, as_tool, stop_on_repeats
from closedloop.execution import AtomicAction, EffectClass, EffectRecord, Reconciliation
from closedloop.feedback import RedisStore, SQLiteStore, StateStore
from closedloop.models import CallInfo, FunctionModel, Message
from closedloop.server import AgentContext, ApiKeys, RateLimit, create_app
from closedloop.server._deps import Service

from .conftest import ManualClock, build_settings, make_registry

ROUNDS = 20


@dataclass
class OrderBook:
    """The world the agents order from: every order placed, per customer."""

    orders: dict[str, list[str]] = field(default_factory=dict)

    def count(self) -> int:
        return sum(len(placed) for placed in self.orders.values())


def orderer(book: OrderBook) -> Callable[[AgentContext], Agent]:
    def build(ctx: AgentContext) -> Agent:
        customer = str(ctx.params["customer"])

        async def place_order(customer: str) -> dict[str, Any]:
            """Place one order for ``customer`` (irreversible)."""
            await asyncio.sleep(0)  # in flight: other requests are served meanwhile
            placed = book.orders.setdefault(customer, [])
            placed.append(f"ORD-{customer}-{len(placed) + 1}")
            return {"order_id": placed[-1]}

        async def reconcile(args: Mapping[str, Any], _: EffectRecord) -> Reconciliation:
            placed = book.orders.get(str(args["customer"]), [])
            if placed:
                return Reconciliation.was_applied({"order_id": placed[0]})
            return Reconciliation.not_applied()

        def reply(messages: tuple[Message, ...], info: CallInfo) -> dict[str, Any]:
            found = re.search(r"(ORD-[\w\-]+)", "\n".join(m.content for m in messages[1:]))
            if found:
                return {"final": f"ordered as {found.group(1)}"}
            return {"tool": "place_order", "arguments": {"customer": customer}}

        action = AtomicAction(
            name="place_order",
            fn=place_order,
            effect=EffectClass.IRREVERSIBLE,
            reconciler=reconcile,
        )
        return Agent(
            FunctionModel(reply, name="orderer"),
            [as_tool(action, fills={"order_id": "order_id"})],
            limits=RunLimits(max_steps=4, stop=stop_on_repeats(1)),
            runtime=Runtime(store=ctx.store),
        )

    return build


def order_task(text: str, ctx: AgentContext) -> Task:
    return Task(text, required_fields=[RequiredField(name="order_id", source="place_order")])


@dataclass
class Shop:
    app: FastAPI
    book: OrderBook
    client: httpx.AsyncClient
    store: StateStore
    scope: str  # the prefix of everything the client's key owns in the store

    @property
    def service(self) -> Service:
        service: Service = self.app.state.service
        return service


@pytest.fixture(params=["sqlite", "redis"])
async def shop(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Shop]:
    store: StateStore
    if request.param == "sqlite":
        store = SQLiteStore(tmp_path / "state.db")
    else:
        store = RedisStore(request.getfixturevalue("redis_url"))
    book = OrderBook()
    registry = make_registry()
    registry.register("orderer", orderer(book), task=order_task)
    # A burst the size of the whole test: the limiter's clock never moves here.
    unlimited = RateLimit(rate_per_s=1.0, burst=100_000)
    app = create_app(
        build_settings(store, tmp_path, ManualClock(), registry=registry, rate_limit=unlimited)
    )
    lifespan = app.router.lifespan_context(app)
    await lifespan.__aenter__()
    key = await ApiKeys(store).create("alice")
    token = key.token
    client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://service.test",
        headers={"Authorization": f"Bearer {token}"},
    )
    try:
        yield Shop(app, book, client, store, f"key_{key.info.key_id}")
    finally:
        await app.state.service.runs.wait_idle()
        await client.aclose()
        await lifespan.__aexit__(None, None, None)
        await store.close()


def order_body(customer: str) -> dict[str, Any]:
    return {"agent": "orderer", "task": "order one", "params": {"customer": customer}}


async def session_of(shop: Shop) -> str:
    created = await shop.client.post("/v1/sessions")
    assert created.status_code == 201, created.text
    session_id: str = created.json()["id"]
    return session_id


@pytest.mark.parametrize("posts", [2, 8, 32])
async def test_simultaneous_posts_with_one_key_start_one_run_and_one_order(
    shop: Shop, posts: int
) -> None:
    session = await session_of(shop)
    path = f"/v1/sessions/{session}/runs"
    for round_ in range(ROUNDS):
        customer = f"c{posts}-{round_}"
        headers = {"Idempotency-Key": f"order-{customer}"}
        answers = await asyncio.gather(
            *(
                shop.client.post(path, json=order_body(customer), headers=headers)
                for _ in range(posts)
            )
        )
        codes = sorted(a.status_code for a in answers)
        assert codes == [200] * (posts - 1) + [202], [a.text for a in answers]
        run_ids = {a.json()["id"] for a in answers}
        assert len(run_ids) == 1, run_ids
        await shop.service.runs.wait_idle()
        assert shop.book.orders[customer] == [f"ORD-{customer}-1"], f"round {round_}"
        (run_id,) = run_ids
        done = (await shop.client.get(f"{path}/{run_id}")).json()
        assert (done["status"], done["success"]) == ("done", True), done
    listed = (await shop.client.get(path)).json()["runs"]
    assert len(listed) == ROUNDS  # one run per key, however many posts
    assert shop.book.count() == ROUNDS


async def test_a_repeated_key_is_answered_with_the_first_run_and_its_status(shop: Shop) -> None:
    session = await session_of(shop)
    path = f"/v1/sessions/{session}/runs"
    headers = {"Idempotency-Key": "k-1"}
    first = await shop.client.post(path, json=order_body("ann"), headers=headers)
    assert first.status_code == 202, first.text
    await shop.service.runs.wait_idle()

    again = await shop.client.post(path, json=order_body("ann"), headers=headers)
    assert again.status_code == 200, again.text
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["status"] == "done"  # the first run's status now, not "running"
    assert shop.book.orders == {"ann": ["ORD-ann-1"]}
    assert len((await shop.client.get(path)).json()["runs"]) == 1


async def test_the_same_key_with_a_different_body_is_refused_naming_the_key(shop: Shop) -> None:
    session = await session_of(shop)
    path = f"/v1/sessions/{session}/runs"
    headers = {"Idempotency-Key": "k-2"}
    first = await shop.client.post(path, json=order_body("bob"), headers=headers)
    assert first.status_code == 202, first.text

    other = await shop.client.post(path, json=order_body("eve"), headers=headers)
    assert other.status_code == 422, other.text
    body = other.json()
    assert body["error"] == "idempotency_key_reused"
    assert body["problems"] == [
        {
            "where": "header.idempotency-key",
            "problem": body["problems"][0]["problem"],
        }
    ]
    assert "'k-2'" in body["problems"][0]["problem"]
    assert first.json()["id"] in body["detail"]
    await shop.service.runs.wait_idle()
    assert shop.book.orders == {"bob": ["ORD-bob-1"]}  # eve's order was never placed


async def test_keys_are_per_session_and_forgotten_with_it(shop: Shop) -> None:
    headers = {"Idempotency-Key": "same"}
    one, two = await session_of(shop), await session_of(shop)
    a = await shop.client.post(f"/v1/sessions/{one}/runs", json=order_body("x"), headers=headers)
    b = await shop.client.post(f"/v1/sessions/{two}/runs", json=order_body("y"), headers=headers)
    assert (a.status_code, b.status_code) == (202, 202)
    assert a.json()["id"] != b.json()["id"]
    await shop.service.runs.wait_idle()
    assert (await shop.client.delete(f"/v1/sessions/{one}")).status_code == 204
    left = [r.key for r in await shop.store.record_list(f"{shop.scope}:idempotency")]
    assert not [k for k in left if k.startswith(one)] and any(k.startswith(two) for k in left)
