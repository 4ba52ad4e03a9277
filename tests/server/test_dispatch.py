"""The run queue and the takeover layer, piece by piece: the settings' bounds, the consumer
loop's heartbeat against a queue double, the stream's ownership on a real redis-server,
and a person's choice on a pending effect written to a real ledger. Nothing here sleeps."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import httpx
import pytest

from closedloop import Runtime
from closedloop._exceptions import ConfigurationError, StoreUnavailableError
from closedloop.execution import AtomicAction, EffectClass, EffectLedger, EffectStatus
from closedloop.feedback import HandoverQueue, MemoryStore, StateStore
from closedloop.server import ServerSettings
from closedloop.server._dispatch import QueuedRun, RunQueue
from closedloop.server._run_records import RUNS
from closedloop.server._takeover import (
    CHOICES,
    Dispatcher,
    apply_choice,
    is_pending_effect,
    pending_effect_audit,
)


def test_the_default_takeover_happens_within_thirty_seconds() -> None:
    settings = ServerSettings()
    assert settings.queue is None  # the embedded default dispatches in-process
    assert settings.takeover_after_s + settings.heartbeat_s <= 30.0


@pytest.mark.parametrize(
    ("options", "argument"),
    [
        ({"queue": "http://127.0.0.1:6379"}, "queue"),
        ({"takeover_after_s": 0.0}, "takeover_after_s"),
        ({"takeover_after_s": 2.0, "heartbeat_s": 2.0}, "heartbeat_s"),
    ],
)
def test_bad_queue_settings_are_refused_naming_the_argument(
    options: dict[str, Any], argument: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        ServerSettings(**options)
    assert caught.value.argument == argument


def test_a_queue_url_must_be_redis() -> None:
    with pytest.raises(ConfigurationError, match="redis://"):
        RunQueue("sqlite:///x.db")


# --- the consumer loop, against a queue double ---------------------------------------------


class _Queue:
    """A queue double: what was touched, acknowledged and reclaimed."""

    heartbeat_s = 1.0

    def __init__(self, reclaimable: list[QueuedRun], lost: list[str]) -> None:
        self.reclaimable = reclaimable
        self.lost = lost
        self.touched: list[list[str]] = []
        self.acked: list[str] = []

    async def touch(self, ids: list[str]) -> list[str]:
        self.touched.append(list(ids))
        return [i for i in ids if i in self.lost]

    async def reclaim(self) -> list[QueuedRun]:
        found, self.reclaimable = self.reclaimable, []
        return found

    async def ack(self, entry_id: str) -> None:
        self.acked.append(entry_id)


def _entry(entry_id: str, key: str) -> QueuedRun:
    return QueuedRun(entry_id=entry_id, scope="", key=key, taken_over=True, at=0.0)


def test_a_heartbeat_touches_its_runs_stops_lost_ones_and_takes_idle_ones_over() -> None:
    async def scenario() -> None:
        store = MemoryStore()
        await store.record_put(RUNS, "ses_a/run_a", {"status": "running"}, expected_version=0)
        queue = _Queue(
            [_entry("1-0", "ses_a/run_a"), _entry("2-0", "ses_a/gone"), _entry("3-0", "mine")],
            lost=["4-0"],
        )
        taken: list[tuple[str, Mapping[str, Any]]] = []
        lost: list[list[str]] = []

        async def take(_: StateStore, run: Mapping[str, Any], entry: QueuedRun) -> str:
            taken.append((entry.key, run))
            return "recover"

        dispatcher = Dispatcher(
            queue,  # type: ignore[arg-type]
            lambda scope: store,
            take,
            lambda: ["3-0", "4-0"],
            lost.append,
        )
        assert await dispatcher.beat() == 2
        assert queue.touched == [["3-0", "4-0"]] and lost == [["4-0"]]
        assert taken == [("ses_a/run_a", {"status": "running"})]  # not ours, not the gone one
        assert queue.acked == ["2-0"]  # a run deleted meanwhile: nothing to run
        assert dispatcher.taken_over == 2
        assert await dispatcher.beat() == 0  # nothing idle any more

    asyncio.run(scenario())


def test_a_run_that_cannot_be_taken_ends_in_error_and_leaves_the_queue() -> None:
    async def scenario() -> None:
        store = MemoryStore()
        await store.record_put(RUNS, "ses_a/run_a", {"status": "running"}, expected_version=0)
        queue = _Queue([_entry("1-0", "ses_a/run_a")], lost=[])

        async def take(_: StateStore, run: Mapping[str, Any], entry: QueuedRun) -> str:
            raise RuntimeError("the registry lost the agent")

        dispatcher = Dispatcher(
            queue,  # type: ignore[arg-type]
            lambda scope: store,
            take,
            list,
            lambda ids: None,
        )
        await dispatcher.beat()
        record = await store.record_get(RUNS, "ses_a/run_a")
        assert record is not None and record.to_dict()["status"] == "error"
        assert "the registry lost the agent" in record.to_dict()["message"]
        assert queue.acked == ["1-0"]

    asyncio.run(scenario())


class _AwayStore(MemoryStore):
    """A store that cannot be reached."""

    async def record_get(self, namespace: str, key: str) -> Any:
        raise StoreUnavailableError("the store is away")


def test_with_the_store_away_an_entry_stays_in_the_queue_to_be_taken_again() -> None:
    async def scenario() -> None:
        queue = _Queue([_entry("1-0", "ses_a/run_a")], lost=[])

        async def take(_: StateStore, run: Mapping[str, Any], entry: QueuedRun) -> str:
            raise AssertionError("nothing to take without the record")

        store = _AwayStore()
        dispatcher = Dispatcher(
            queue,  # type: ignore[arg-type]
            lambda scope: store,
            take,
            list,
            lambda ids: None,
        )
        assert await dispatcher.beat() == 1
        assert queue.acked == []  # pending still: idle, then taken again

    asyncio.run(scenario())


# --- the stream's ownership on a real redis-server -----------------------------------------


def test_an_entry_taken_over_by_another_consumer_is_reported_lost_by_the_first(
    redis_url: str,
) -> None:
    async def scenario() -> None:
        first = RunQueue(redis_url, consumer="first", block_s=0.1)
        second = RunQueue(redis_url, consumer="second", block_s=0.1)
        await first.open()
        await second.open()
        try:
            entry_id = await first.submit("scope", "ses_a/run_a")
            (read,) = await first.read()
            assert (read.entry_id, read.scope, read.key, read.taken_over) == (
                entry_id,
                "scope",
                "ses_a/run_a",
                False,
            )
            assert await second.read() == []  # delivered once
            assert await first.touch([entry_id]) == []
            assert await first.owner(entry_id) == "first"
            # What XAUTOCLAIM does after the idle time, done at once.
            client = second._require()
            await client.xclaim(second.stream, second.group, "second", 0, [entry_id])
            assert await first.touch([entry_id]) == [entry_id]  # lost, not stolen back
            assert await first.owner(entry_id) == "second"
            await second.ack(entry_id)
            assert await first.owner(entry_id) is None
        finally:
            await first.close()
            await second.close()

    asyncio.run(scenario())


# --- a person's choice on a pending effect -------------------------------------------------


async def _pending(store: StateStore, action: AtomicAction) -> tuple[EffectLedger, str]:
    ledger = EffectLedger(store)
    key = ledger.key_for("task_a", 1, action.name, {"customer": "c1"})
    await ledger.claim(
        key=key, task_id="task_a", step=1, action=action, args={"customer": "c1"}, attempts=1
    )
    return ledger, key


def _place(customer: str) -> str:
    return f"ORD-{customer}"


@pytest.mark.parametrize(
    ("choice", "status"),
    [
        ("mark_applied", EffectStatus.COMMITTED),
        ("retry", EffectStatus.FAILED),
        ("abandon", EffectStatus.PENDING),
    ],
)
def test_a_choice_on_a_pending_effect_is_written_to_the_ledger(
    choice: str, status: EffectStatus
) -> None:
    async def scenario() -> None:
        store = MemoryStore()
        action = AtomicAction(name="place_order", fn=_place, effect=EffectClass.IRREVERSIBLE)
        ledger, key = await _pending(store, action)
        run = {"id": "run_a", "task": "order", "worker": 4242}
        audit = await pending_effect_audit(store, "task_a", run, "no reconciler")
        assert audit["choices"] == dict(CHOICES)
        (effect,) = audit["pending_effects"]
        # the ledger names its claimant; the run's worker only stands in for an old entry
        assert effect["idempotency_key"] == key and effect["claimed_by"] == ledger.owner
        assert effect["arguments"] == {"customer": "c1"} and effect["tool"] == "place_order"
        queue = HandoverQueue(store)
        item = await queue.get(await queue.submit("task_a", "run_a", audit))
        assert is_pending_effect(item)

        settled = await apply_choice(store, item, choice, {"order_id": "ORD-c1"}, "alice")
        record = await ledger.get(key)
        assert record is not None and record.status is status
        assert settled == ([] if choice == "abandon" else [key])
        if choice == "mark_applied":
            assert record.result == {"order_id": "ORD-c1"}
            assert record.note == "marked applied by alice"
        # Settled once: a second pass finds nothing pending to settle.
        assert await apply_choice(store, item, "retry", None, "bob") == (
            [key] if choice == "abandon" else []
        )

    asyncio.run(scenario())


# --- the embedded service: no queue, a pending effect at a manual recovery -----------------


async def test_without_a_queue_a_pending_effect_at_recovery_waits_for_a_choice(
    make_harness: Any, tmp_path: Any
) -> None:
    from closedloop.agent import (
        Agent,
        RequiredField,
        RunLimits,
        Task,
        as_tool,
        stop_on_no_progress,
        stop_on_repeats,
    )
    from closedloop.models import CallInfo, FunctionModel, Message
    from closedloop.server import AgentContext, create_app

    from .conftest import build_settings, make_registry, new_session

    entered, never = asyncio.Event(), asyncio.Event()
    calls: list[str] = []

    async def place_order(customer: str) -> dict[str, str]:
        """Place one order (irreversible, no reconciler)."""
        calls.append(customer)
        if len(calls) == 1:
            entered.set()
            await never.wait()  # the first worker stops answering inside the effect
        return {"order_id": f"ORD-{customer}"}

    def reply(messages: tuple[Message, ...], info: CallInfo) -> dict[str, Any]:
        if "ORD-c1" in "\n".join(m.content for m in messages[1:]):
            return {"final": "ordered"}
        return {"tool": "place_order", "arguments": {"customer": "c1"}}

    def blind(ctx: AgentContext) -> Agent:
        action = AtomicAction(name="place_order", fn=place_order, effect=EffectClass.IRREVERSIBLE)
        return Agent(
            FunctionModel(reply, name="blind"),
            [as_tool(action, fills={"order_id": "order_id"})],
            limits=RunLimits(max_steps=4, stop=stop_on_no_progress(3) | stop_on_repeats(1)),
            runtime=Runtime(store=ctx.store),
        )

    def task(text: str, ctx: AgentContext) -> Task:
        return Task(text, required_fields=[RequiredField(name="order_id", source="place_order")])

    registry = make_registry()
    registry.register("blind", blind, task=task)
    first = await make_harness(registry=registry)
    # A second worker on the same store, with its own runs.
    second_app = create_app(build_settings(first.store, tmp_path, first.clock, registry=registry))
    lifespan = second_app.router.lifespan_context(second_app)
    await lifespan.__aenter__()
    second = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=second_app),
        base_url="http://service.test",
        headers={"Authorization": f"Bearer {first.keys['alice']}"},
    )
    try:
        client = first.client("alice")
        session = await new_session(client)
        started = await client.post(
            f"/v1/sessions/{session}/runs", json={"agent": "blind", "task": "order"}
        )
        path = f"/v1/sessions/{session}/runs/{started.json()['id']}"
        await asyncio.wait_for(entered.wait(), 30)

        recovering = await second.post(f"{path}/recover")
        assert recovering.status_code == 202, recovering.text
        await second_app.state.service.runs.wait_idle()
        waiting = (await second.get(path)).json()
        assert waiting["status"] == "handover", waiting
        handover = f"/v1/handovers/{waiting['handover_id']}"
        item = (await second.get(handover)).json()
        assert item["audit"]["kind"] == "pending_effect"
        assert item["audit"]["pending_effects"][0]["tool"] == "place_order"

        chosen = await second.post(f"{handover}/choose", json={"choice": "retry"})
        assert chosen.status_code == 200, chosen.text
        await second_app.state.service.runs.wait_idle()
        done = (await second.get(path)).json()
        assert (done["status"], done["success"]) == ("done", True), done
        assert calls == ["c1", "c1"]  # the person said it never reached the world
    finally:
        for local in list(first.service.runs._local.values()):
            local.task.cancel()  # the first worker, still stuck in its effect
        await first.settle()
        await second.aclose()
        await lifespan.__aexit__(None, None, None)


@pytest.mark.parametrize(
    ("queue", "store", "expected"),
    [
        ("auto", "redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("auto", "sqlite:///state.db", None),
        ("auto", None, None),
        ("none", "redis://127.0.0.1:6379/0", None),
        ("redis://10.0.0.2:6379/1", "sqlite:///state.db", "redis://10.0.0.2:6379/1"),
    ],
)
def test_serve_dispatches_through_redis_when_the_store_is_redis_or_when_told(
    queue: str, store: str | None, expected: str | None
) -> None:
    from closedloop.cli._serve import _queue_url

    assert _queue_url(queue, store) == expected


def test_serve_refuses_a_queue_that_is_not_redis() -> None:
    import typer

    from closedloop.cli._serve import _queue_url

    with pytest.raises(typer.BadParameter, match="'http://x' is not a redis:// URL"):
        _queue_url("http://x", None)
