"""The StateStore contract, run against MemoryStore, SQLiteStore and RedisStore alike."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from closedloop import (
    ConfigurationError,
    SessionNotFoundError,
    StaleStateError,
    StateSerializationError,
    StoreUnavailableError,
)
from closedloop.feedback import (
    MemoryStore,
    RedisStore,
    Snapshot,
    SQLiteStore,
    StateStore,
    SyncStore,
)
from closedloop.feedback._store import BaseStore

from .conftest import FakeClock, StoreFactory


@pytest.fixture(params=["memory", "sqlite", "redis"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
    """The backends this contract holds for; Redis ones share one flushed real server."""

    def make(**kwargs: Any) -> BaseStore:
        if request.param == "memory":
            return MemoryStore(**kwargs)
        if request.param == "sqlite":
            return SQLiteStore(tmp_path / "state.db", **kwargs)
        return RedisStore(redis_url, **kwargs)

    # Only the Redis runs need (and start) the shared server.
    redis_url: str = request.getfixturevalue("redis_url") if request.param == "redis" else ""
    return make


@pytest.fixture
async def store(make_store: StoreFactory, clock: FakeClock) -> AsyncIterator[BaseStore]:
    s = make_store(clock=clock)
    if isinstance(s, RedisStore):
        # Open a few pooled connections first: a cold pool's connect handshake would
        # reorder the concurrent calls that the interleaving tests below set up.
        await asyncio.gather(*(s.ping() for _ in range(4)))
    yield s
    await s.close()


# --- sessions: create, get, put, versions ------------------------------------------------


async def test_store_implements_the_protocol(store: BaseStore) -> None:
    assert isinstance(store, StateStore)


async def test_create_starts_at_version_one_and_put_increments(
    store: BaseStore, clock: FakeClock
) -> None:
    created = await store.create("s1", {"step": 0})
    assert (created.version, dict(created.data)) == (1, {"step": 0})
    assert created.created_at == created.updated_at == clock.now
    assert created.expires_at is None

    clock.advance(2.5)
    put = await store.put("s1", {"step": 1, "note": "hi"}, expected_version=1)
    assert put.version == 2
    assert put.updated_at == clock.now and put.created_at == created.created_at

    got = await store.get("s1")
    assert got == put
    assert got.to_dict() == {"step": 1, "note": "hi"}


async def test_create_without_data_is_empty(store: BaseStore) -> None:
    assert dict((await store.create("empty")).data) == {}


async def test_create_twice_is_a_configuration_error(store: BaseStore) -> None:
    await store.create("dup", {"a": 1})
    with pytest.raises(ConfigurationError, match="dup"):
        await store.create("dup", {"a": 2})
    assert dict((await store.get("dup")).data) == {"a": 1}


async def test_put_with_a_stale_version_raises_and_writes_nothing(store: BaseStore) -> None:
    await store.create("s", {"n": 0})
    await store.put("s", {"n": 1}, expected_version=1)
    with pytest.raises(StaleStateError) as info:
        await store.put("s", {"n": 99}, expected_version=1)
    assert (info.value.expected, info.value.actual) == (1, 2)
    assert "'s'" in str(info.value)
    snap = await store.get("s")
    assert (snap.version, snap.data["n"]) == (2, 1)
    assert store.stats.cas_conflicts == 1


@pytest.mark.parametrize("operation", ["get", "put", "update", "touch"])
async def test_unknown_session_names_the_id(store: BaseStore, operation: str) -> None:
    calls: dict[str, Any] = {
        "get": lambda: store.get("ghost-42"),
        "put": lambda: store.put("ghost-42", {}, expected_version=1),
        "update": lambda: store.update("ghost-42", lambda s: {}),
        "touch": lambda: store.touch("ghost-42"),
    }
    with pytest.raises(SessionNotFoundError, match="ghost-42"):
        await calls[operation]()


async def test_delete(store: BaseStore) -> None:
    await store.create("gone", {"a": 1})
    assert await store.delete("gone") is True
    assert await store.delete("gone") is False
    with pytest.raises(SessionNotFoundError):
        await store.get("gone")


@pytest.mark.parametrize("bad", ["", None, 3, "x" * 2000])
async def test_bad_session_ids_are_configuration_errors(store: BaseStore, bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="session_id"):
        await store.create(bad, {})


@pytest.mark.parametrize("bad", [-1, 1.0, True, "1", None])
async def test_bad_expected_versions(store: BaseStore, bad: Any) -> None:
    await store.create("s", {})
    with pytest.raises(ConfigurationError, match="expected_version"):
        await store.put("s", {}, expected_version=bad)


async def test_data_must_be_a_mapping(store: BaseStore) -> None:
    await store.create("s", {})
    with pytest.raises(ConfigurationError, match="data"):
        await store.put("s", [1, 2], expected_version=1)  # type: ignore[arg-type]


# --- immutability ------------------------------------------------------------------------


async def test_snapshots_cannot_be_mutated(store: BaseStore) -> None:
    await store.create("s", {"items": [1, {"deep": [2]}], "meta": {"k": "v"}})
    snap = await store.get("s")
    with pytest.raises(TypeError):
        snap.data["new"] = 1  # type: ignore[index]
    with pytest.raises(TypeError):
        snap.data["meta"]["k"] = "changed"  # type: ignore[index]
    with pytest.raises(AttributeError):
        snap.data["items"].append(3)  # type: ignore[union-attr]
    with pytest.raises(TypeError):
        snap.data["items"][1]["deep"] = []  # type: ignore[index]
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.version = 9  # type: ignore[misc]
    # The mutable copy is independent of the store.
    copy = snap.to_dict()
    copy["items"][1]["deep"].append(3)
    assert (await store.get("s")).to_dict()["items"][1]["deep"] == [2]


async def test_mutating_the_input_after_a_write_changes_nothing(store: BaseStore) -> None:
    data: dict[str, Any] = {"list": [1, 2], "obj": {"a": 1}}
    await store.create("s", data)
    data["list"].append(3)
    data["obj"]["a"] = 2
    assert (await store.get("s")).to_dict() == {"list": [1, 2], "obj": {"a": 1}}


# --- update: read-modify-CAS ---------------------------------------------------------------


async def test_update_retries_after_a_lost_race_and_counts_it(store: BaseStore) -> None:
    await store.create("s", {"n": 0})
    calls = 0

    def bump(snap: Snapshot) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        return {"n": snap.data["n"] + 1}  # type: ignore[operator]

    async def interfere() -> None:
        snap = await store.get("s")
        await store.put("s", {"n": snap.data["n"] + 100}, expected_version=snap.version)  # type: ignore[operator]

    # Both read version 1. Usually the interferer's put lands first, so bump must retry
    # once; on a remote store the update can win the race instead, and then the
    # interferer's stale put must be refused. Either way exactly one write per read wins.
    results = await asyncio.gather(interfere(), store.update("s", bump), return_exceptions=True)
    final = (await store.get("s")).data["n"]
    if isinstance(results[0], StaleStateError):
        assert (final, calls, store.stats.cas_retries) == (1, 1, 0)
    else:
        assert results[0] is None
        assert not isinstance(results[1], BaseException)
        if calls == 1:  # no overlap at all: one write after the other, both applied
            assert results[1].data["n"] in (1, 101)
            assert (final, store.stats.cas_retries) == (101, 0)
        else:
            assert results[1].data["n"] == final == 101
            assert calls == 2
            assert store.stats.cas_retries == 1


async def test_update_gives_up_after_max_attempts(store: BaseStore) -> None:
    await store.create("s", {"n": 0})

    def always_lose(snap: Snapshot) -> dict[str, Any]:
        # Someone else writes between our read and our CAS, every time.
        loop_writes.append(snap.version)
        return {"n": -1}

    loop_writes: list[int] = []
    original_put = store.put

    async def racing_put(session_id: str, data: Any, **kw: Any) -> Snapshot:
        current = await store.get(session_id)
        await original_put(session_id, {"n": current.version}, expected_version=current.version)
        return await original_put(session_id, data, **kw)

    store.put = racing_put  # type: ignore[method-assign]
    with pytest.raises(StaleStateError):
        await store.update("s", always_lose, max_attempts=3)
    assert len(loop_writes) == 3
    assert store.stats.cas_retries == 2
    with pytest.raises(ConfigurationError, match="max_attempts"):
        await store.update("s", always_lose, max_attempts=0)


async def test_update_does_not_swallow_errors_from_fn(store: BaseStore) -> None:
    await store.create("s", {"n": 0})

    def broken(snap: Snapshot) -> dict[str, Any]:
        raise KeyError("missing")

    with pytest.raises(KeyError):
        await store.update("s", broken)
    assert (await store.get("s")).version == 1


# --- TTL: sessions -------------------------------------------------------------------------


async def test_session_ttl_hides_then_gc_deletes(store: BaseStore, clock: FakeClock) -> None:
    snap = await store.create("short", {"a": 1}, ttl_s=10)
    await store.create("forever", {"b": 2})
    assert snap.expires_at == clock.now + 10

    clock.advance(9.999)
    assert (await store.get("short")).data["a"] == 1

    clock.advance(0.001)
    with pytest.raises(SessionNotFoundError, match=r"'short' expired at"):
        await store.get("short")
    with pytest.raises(SessionNotFoundError, match="expired"):
        await store.put("short", {"a": 2}, expected_version=1)

    assert await store.gc() == 1
    assert store.stats.gc_sessions == 1
    with pytest.raises(SessionNotFoundError, match="not found"):
        await store.get("short")
    assert (await store.get("forever")).data["b"] == 2
    assert await store.gc() == 0


async def test_an_expired_id_can_be_created_again(store: BaseStore, clock: FakeClock) -> None:
    await store.create("s", {"old": True}, ttl_s=1)
    clock.advance(5)
    fresh = await store.create("s", {"new": True})
    assert (fresh.version, fresh.to_dict(), fresh.expires_at) == (1, {"new": True}, None)
    assert await store.delete("s") is True


async def test_deleting_an_expired_session_reports_false(
    store: BaseStore, clock: FakeClock
) -> None:
    await store.create("s", {}, ttl_s=1)
    clock.advance(1)
    assert await store.delete("s") is False
    assert await store.gc() == 0


async def test_touch_renews_without_a_new_version(store: BaseStore, clock: FakeClock) -> None:
    await store.create("s", {"a": 1}, ttl_s=10)
    clock.advance(8)
    renewed = await store.touch("s")
    assert renewed.expires_at == clock.now + 10 and renewed.version == 1
    clock.advance(8)
    assert (await store.get("s")).data["a"] == 1
    longer = await store.touch("s", ttl_s=100)
    assert longer.expires_at == clock.now + 100
    clock.advance(50)
    assert (await store.get("s")).version == 1


@pytest.mark.parametrize("ttl", [0, -1, float("nan"), float("inf")])
async def test_bad_ttls(store: BaseStore, ttl: float) -> None:
    with pytest.raises(ConfigurationError, match="ttl_s"):
        await store.create("s", {}, ttl_s=ttl)


# --- TTL: fields ---------------------------------------------------------------------------


async def test_a_field_expires_on_its_own(store: BaseStore, clock: FakeClock) -> None:
    await store.create("s", {"keep": 1})
    written = await store.put(
        "s", {"keep": 1, "tmp": [1, 2]}, expected_version=1, field_ttl_s={"tmp": 5}
    )
    assert dict(written.field_expires_at) == {"tmp": clock.now + 5}

    clock.advance(4)
    assert (await store.get("s")).to_dict() == {"keep": 1, "tmp": [1, 2]}

    clock.advance(1)
    snap = await store.get("s")
    assert snap.to_dict() == {"keep": 1}
    assert dict(snap.field_expires_at) == {}
    assert snap.version == 2  # expiry is not a write

    assert await store.gc() == 1
    assert store.stats.gc_fields == 1
    after = await store.get("s")
    assert (after.version, after.to_dict()) == (2, {"keep": 1})


async def test_field_expiry_survives_rewrites_until_renewed(
    store: BaseStore, clock: FakeClock
) -> None:
    await store.create("s", {})
    await store.put("s", {"tmp": 1}, expected_version=1, field_ttl_s={"tmp": 10})
    clock.advance(6)
    # A full rewrite that carries the field keeps its original deadline.
    carried = await store.update("s", lambda s: {**s.data, "other": 2})
    assert carried.field_expires_at["tmp"] == clock.now + 4
    clock.advance(3)
    renewed = await store.put(
        "s", {**carried.data, "tmp": 3}, expected_version=carried.version, field_ttl_s={"tmp": 10}
    )
    assert renewed.field_expires_at["tmp"] == clock.now + 10
    clock.advance(9)
    assert (await store.get("s")).data["tmp"] == 3
    clock.advance(1)
    assert "tmp" not in (await store.get("s")).data


async def test_rewriting_an_expired_field_makes_it_permanent(
    store: BaseStore, clock: FakeClock
) -> None:
    await store.create("s", {})
    await store.put("s", {"tmp": 1}, expected_version=1, field_ttl_s={"tmp": 1})
    clock.advance(2)
    again = await store.put("s", {"tmp": 2}, expected_version=2)
    assert dict(again.field_expires_at) == {}
    clock.advance(1000)
    assert (await store.get("s")).data["tmp"] == 2
    assert await store.gc() == 0


async def test_dropping_a_field_drops_its_expiry(store: BaseStore, clock: FakeClock) -> None:
    await store.create("s", {})
    await store.put("s", {"tmp": 1}, expected_version=1, field_ttl_s={"tmp": 5})
    dropped = await store.put("s", {}, expected_version=2)
    assert dict(dropped.field_expires_at) == {}
    clock.advance(10)
    assert await store.gc() == 0


async def test_gc_counts_sessions_and_fields(store: BaseStore, clock: FakeClock) -> None:
    for i in range(3):
        await store.create(f"dies-{i}", {"x": i}, ttl_s=1)
    await store.create("lives", {})
    await store.put(
        "lives", {"a": 1, "b": 2, "c": 3}, expected_version=1, field_ttl_s={"a": 1, "b": 1}
    )
    clock.advance(1)
    assert await store.gc() == 5
    assert (store.stats.gc_sessions, store.stats.gc_fields) == (3, 2)
    assert (await store.get("lives")).to_dict() == {"c": 3}


@pytest.mark.parametrize(
    ("field_ttl", "match"),
    [({"nope": 1.0}, "not in data"), ({"a": 0}, "field_ttl_s"), ({"a": float("nan")}, "finite")],
)
async def test_bad_field_ttls(store: BaseStore, field_ttl: dict[str, float], match: str) -> None:
    await store.create("s", {})
    with pytest.raises(ConfigurationError, match=match):
        await store.put("s", {"a": 1}, expected_version=1, field_ttl_s=field_ttl)
    assert (await store.get("s")).version == 1


# --- values: JSON only, size-limited -------------------------------------------------------


async def test_non_json_values_are_refused_with_their_path(store: BaseStore) -> None:
    await store.create("s", {})
    with pytest.raises(StateSerializationError, match=r"data\['x'\]\[2\]: object of type set"):
        await store.put("s", {"x": [1, 2, {3}]}, expected_version=1)
    with pytest.raises(StateSerializationError, match=r"data\['k'\]: key 1 of type int"):
        await store.put("s", {"k": {1: "a"}}, expected_version=1)
    with pytest.raises(StateSerializationError, match=r"data\['f'\]: float nan"):
        await store.put("s", {"f": float("nan")}, expected_version=1)
    with pytest.raises(StateSerializationError, match=r"value\['when'\]: object of type datetime"):
        import datetime

        await store.record_put("ns", "k", {"when": datetime.datetime(2024, 1, 1)})
    assert (await store.get("s")).version == 1
    assert await store.record_get("ns", "k") is None


async def test_cycles_and_lone_surrogates_are_refused(store: BaseStore) -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(StateSerializationError, match=r"data\['a'\]\[0\]: circular"):
        await store.create("s", {"a": loop})
    with pytest.raises(StateSerializationError, match=r"data\['t'\]: string is not valid Unicode"):
        await store.create("s", {"t": "ok \ud800"})


async def test_oversized_documents_are_refused_not_truncated(
    make_store: StoreFactory, clock: FakeClock
) -> None:
    store = make_store(clock=clock, max_document_bytes=100)
    try:
        await store.create("s", {"small": "x"})
        with pytest.raises(StateSerializationError, match="max_document_bytes=100") as info:
            await store.put("s", {"big": "é" * 60}, expected_version=1)
        assert "nothing was written" in str(info.value)
        assert "'s'" in str(info.value)
        assert (await store.get("s")).to_dict() == {"small": "x"}
        with pytest.raises(StateSerializationError, match="record 'ns/k'"):
            await store.record_put("ns", "k", {"big": "y" * 200})
    finally:
        await store.close()


async def test_max_document_bytes_is_validated(make_store: StoreFactory) -> None:
    with pytest.raises(ConfigurationError, match="max_document_bytes"):
        make_store(max_document_bytes=0)


# --- records -------------------------------------------------------------------------------


async def test_record_versions_and_expected_version(store: BaseStore, clock: FakeClock) -> None:
    assert await store.record_get("ledger", "k") is None
    first = await store.record_put("ledger", "k", {"status": "pending"})
    assert (first.version, dict(first.value), first.updated_at) == (1, {"status": "pending"}, 1000)

    with pytest.raises(StaleStateError) as info:
        await store.record_put("ledger", "k", {"status": "x"}, expected_version=0)
    assert (info.value.expected, info.value.actual) == (0, 1)
    assert "ledger/k" in str(info.value)

    second = await store.record_put("ledger", "k", {"status": "done"}, expected_version=1)
    assert second.version == 2
    with pytest.raises(StaleStateError):
        await store.record_put("ledger", "k", {"status": "y"}, expected_version=1)
    third = await store.record_put("ledger", "k", {"status": "forced"})
    assert third.version == 3
    assert await store.record_get("ledger", "k") == third

    with pytest.raises(StaleStateError) as missing:
        await store.record_put("ledger", "absent", {}, expected_version=4)
    assert missing.value.actual is None
    with pytest.raises(TypeError):
        third.value["status"] = "mutated"  # type: ignore[index]


async def test_record_list_filters_by_exact_prefix(store: BaseStore) -> None:
    keys = ["a/2", "a/1", "a%", "a_x", "A/1", "b/1", "ab"]
    for key in keys:
        await store.record_put("q", key, {"key": key})
    await store.record_put("other", "a/3", {})
    assert [r.key for r in await store.record_list("q", "a/")] == ["a/1", "a/2"]
    assert [r.key for r in await store.record_list("q", "a%")] == ["a%"]
    assert [r.key for r in await store.record_list("q", "a_")] == ["a_x"]
    assert [r.key for r in await store.record_list("q")] == sorted(keys)
    assert await store.record_list("q", "zzz") == []


async def test_record_delete(store: BaseStore) -> None:
    await store.record_put("q", "k", {})
    assert await store.record_delete("q", "k") is True
    assert await store.record_delete("q", "k") is False
    assert await store.record_get("q", "k") is None


async def test_concurrent_claims_have_exactly_one_winner(store: BaseStore) -> None:
    async def claim(who: int) -> int | None:
        try:
            await store.record_put("ledger", "effect-1", {"by": who}, expected_version=0)
        except StaleStateError:
            return None
        return who

    outcomes = await asyncio.gather(*(claim(i) for i in range(20)))
    winners = [w for w in outcomes if w is not None]
    assert len(winners) == 1
    record = await store.record_get("ledger", "effect-1")
    assert record is not None and record.value["by"] == winners[0] and record.version == 1


# --- lifecycle and the sync facade ---------------------------------------------------------


async def test_closed_store_refuses_work(make_store: StoreFactory) -> None:
    store = make_store()
    await store.create("s", {})
    await store.close()
    await store.close()  # idempotent
    with pytest.raises(StoreUnavailableError, match="closed"):
        await store.get("s")


async def test_async_context_manager_closes(make_store: StoreFactory) -> None:
    async with make_store() as store:
        await store.create("s", {})
    with pytest.raises(StoreUnavailableError):
        await store.get("s")


def test_sync_store_from_plain_and_other_threads(make_store: StoreFactory) -> None:
    with SyncStore(make_store()) as sync:
        sync.create("s", {"n": 0})
        errors: list[BaseException] = []

        def work() -> None:
            try:
                for _ in range(10):
                    sync.update("s", lambda snap: {"n": snap.data["n"] + 1}, max_attempts=100)  # type: ignore[operator]
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert sync.get("s").data["n"] == 40
        assert sync.touch("s", ttl_s=5).expires_at is not None
        rec = sync.record_put("ns", "k", {"v": 1}, expected_version=0)
        assert sync.record_get("ns", "k") == rec
        assert [r.key for r in sync.record_list("ns")] == ["k"]
        assert sync.record_delete("ns", "k") is True
        assert sync.put("s", {"n": 0}, expected_version=sync.get("s").version).data["n"] == 0
        assert sync.delete("s") is True
        assert sync.gc() == 0
        assert sync.stats.cas_conflicts == sync.stats.cas_retries
    with pytest.raises(StoreUnavailableError):
        sync.get("s")


def test_sync_store_rejects_non_stores() -> None:
    with pytest.raises(ConfigurationError, match="store"):
        SyncStore(object())  # type: ignore[arg-type]
