"""RedisStore beyond the shared contract: native TTL, two workers racing, resent writes, config.

The shared behaviour (versions, CAS, field TTLs, records, the sync facade) runs in
test_store_contract.py against all three backends; this module checks what only a store
shared by several processes through a real redis-server has to get right.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from closedloop import (
    ConfigurationError,
    SessionNotFoundError,
    StaleStateError,
    StateSerializationError,
    StoreUnavailableError,
)
from closedloop.feedback import MemoryStore, RedisStore, Snapshot, SyncStore
from closedloop.server._settings import open_store

from .conftest import FakeClock


@pytest.fixture
async def raw(redis_url: str) -> AsyncIterator[Redis]:
    """A plain redis-py client on the test database, to look under the store."""
    client = Redis.from_url(redis_url, decode_responses=True)
    yield client
    await client.aclose()


@pytest.fixture
async def workers(redis_url: str, clock: FakeClock) -> AsyncIterator[tuple[RedisStore, RedisStore]]:
    """Two store objects on one URL: what two service workers hold."""
    a, b = RedisStore(redis_url, clock=clock), RedisStore(redis_url, clock=clock)
    yield a, b
    await a.close()
    await b.close()


# --- native expiry ---------------------------------------------------------------------------


async def test_a_session_ttl_is_also_a_native_redis_expiry(redis_url: str, raw: Redis) -> None:
    clock = FakeClock()
    async with RedisStore(redis_url, clock=clock, native_ttl_grace_s=5) as store:
        await store.create("short", {"a": 1}, ttl_s=10)
        await store.create("forever", {"a": 1})
        key = "{closedloop}:s:short"
        assert 10_000 < await raw.pttl(key) <= 15_001
        assert await raw.pttl("{closedloop}:s:forever") == -1  # no expiry at all

        await store.touch("short", ttl_s=100)
        assert 100_000 < await raw.pttl(key) <= 105_001
        # Writes keep the expiry (a put must not make a session immortal).
        await store.put("short", {"a": 2}, expected_version=1)
        assert await raw.pttl(key) > 100_000
        # Visibility follows the injected clock, not Redis's: the key is still there.
        clock.advance(100)
        with pytest.raises(SessionNotFoundError, match="expired"):
            await store.get("short")
        assert await raw.exists(key) == 1


async def test_a_session_redis_already_expired_is_gone_and_counted_by_gc(
    redis_url: str, raw: Redis
) -> None:
    clock = FakeClock()
    async with RedisStore(redis_url, clock=clock) as store:
        await store.create("s", {"a": 1}, ttl_s=5)
        await raw.delete("{closedloop}:s:s")  # what Redis's own expiry does, without waiting
        with pytest.raises(SessionNotFoundError, match="'s' not found"):
            await store.get("s")
        clock.advance(10)
        assert await store.gc() == 1
        assert await store.gc() == 0
        assert await raw.zcard("{closedloop}:sx") == 0
        assert store.stats.gc_sessions == 1


async def test_gc_of_fields_does_not_resurrect_a_concurrent_write(
    workers: tuple[RedisStore, RedisStore], clock: FakeClock
) -> None:
    a, b = workers
    await a.create("s", {})
    await a.put("s", {"tmp": 1, "keep": 1}, expected_version=1, field_ttl_s={"tmp": 5})
    clock.advance(6)
    # Worker b rewrites the document after a's field expired: gc on a must only drop tmp.
    await b.put("s", {"keep": 2, "new": 3}, expected_version=2)
    assert await a.gc() == 0  # b's put already dropped the expired field and its expiry
    snap = await b.get("s")
    assert snap.to_dict() == {"keep": 2, "new": 3} and snap.version == 3
    assert dict(snap.field_expires_at) == {}


# --- two workers ------------------------------------------------------------------------------


async def test_concurrent_updates_from_two_workers_lose_nothing(
    workers: tuple[RedisStore, RedisStore],
) -> None:
    a, b = workers
    await a.create("counter", {"n": 0, "by": []})

    def bump(who: str) -> Callable[[Snapshot], dict[str, Any]]:
        def fn(snap: Snapshot) -> dict[str, Any]:
            data = snap.to_dict()
            return {"n": data["n"] + 1, "by": [*data["by"], who]}

        return fn

    per_worker = 40
    await asyncio.gather(
        *(a.update("counter", bump("a"), max_attempts=1000) for _ in range(per_worker)),
        *(b.update("counter", bump("b"), max_attempts=1000) for _ in range(per_worker)),
    )
    final = await b.get("counter")
    assert final.data["n"] == 2 * per_worker
    assert final.version == 1 + 2 * per_worker  # one version per applied update, no more
    by = list(final.data["by"])  # type: ignore[arg-type]
    assert (by.count("a"), by.count("b")) == (per_worker, per_worker)
    # The workers really raced: every lost CAS was retried, none was applied twice.
    retries = a.stats.cas_retries + b.stats.cas_retries
    assert retries == a.stats.cas_conflicts + b.stats.cas_conflicts
    assert retries > 0


async def test_a_write_by_another_worker_between_read_and_put_forces_a_retry(
    workers: tuple[RedisStore, RedisStore], redis_url: str, clock: FakeClock
) -> None:
    a, _ = workers
    await a.create("s", {"n": 0})
    with SyncStore(RedisStore(redis_url, clock=clock)) as other:
        calls: list[int] = []

        def fn(snap: Snapshot) -> dict[str, Any]:
            calls.append(snap.version)
            if len(calls) == 1:  # the other worker wins the race, every time
                other.put("s", {"n": 100}, expected_version=snap.version)
            return {"n": snap.data["n"] + 1}  # type: ignore[operator]

        result = await a.update("s", fn)
    assert calls == [1, 2]
    assert (result.version, result.data["n"]) == (3, 101)
    assert (a.stats.cas_retries, a.stats.cas_conflicts) == (1, 1)


async def test_a_claim_has_exactly_one_winner_across_workers(
    workers: tuple[RedisStore, RedisStore],
) -> None:
    a, b = workers

    async def claim(store: RedisStore, who: int) -> int | None:
        try:
            await store.record_put("ledger", "pay-1", {"by": who}, expected_version=0)
        except StaleStateError:
            return None
        return who

    outcomes = await asyncio.gather(*(claim(a if i % 2 else b, i) for i in range(30)))
    winners = [w for w in outcomes if w is not None]
    assert len(winners) == 1
    for store in (a, b):
        record = await store.record_get("ledger", "pay-1")
        assert record is not None and record.version == 1 and record.value["by"] == winners[0]


async def test_sessions_created_on_one_worker_continue_on_the_other(
    workers: tuple[RedisStore, RedisStore], clock: FakeClock
) -> None:
    a, b = workers
    created = await a.create("task-7", {"step": 1, "plan": ["search", "book"]}, ttl_s=60)
    clock.advance(1)
    moved = await b.update("task-7", lambda s: {**s.to_dict(), "step": 2})
    assert await a.get("task-7") == moved
    assert (moved.version, moved.created_at, moved.expires_at) == (
        2,
        created.created_at,
        created.expires_at,
    )
    with pytest.raises(ConfigurationError, match="task-7"):
        await b.create("task-7", {})


async def test_stores_with_other_prefixes_do_not_see_each_other(
    redis_url: str, clock: FakeClock
) -> None:
    async with (
        RedisStore(redis_url, clock=clock, prefix="app1") as one,
        RedisStore(redis_url, clock=clock, prefix="app2") as two,
    ):
        await one.create("s", {"who": 1})
        await one.record_put("ns", "k", {"who": 1})
        with pytest.raises(SessionNotFoundError):
            await two.get("s")
        assert await two.record_list("ns") == []
        await two.create("s", {"who": 2})
        assert (await one.get("s")).data["who"] == 1


# --- a step's state and its bookkeeping in one atomic write ---------------------------------


async def test_put_with_records_writes_all_or_nothing(
    workers: tuple[RedisStore, RedisStore], clock: FakeClock
) -> None:
    a, b = workers
    await a.create("s", {"step": 0})
    await b.record_put("hints", "h1", {"n": 0})
    snap = await a.put_with_records(
        "s",
        {"step": 1},
        expected_version=1,
        records=[("hints", "h1", {"n": 1}), ("hints", "h2", {"n": 2}), ("other", "x", {})],
    )
    assert (snap.version, snap.data["step"]) == (2, 1)
    h1, h2 = await b.record_list("hints")
    assert (h1.version, dict(h1.value), h1.updated_at) == (2, {"n": 1}, clock.now)
    assert (h2.key, h2.version) == ("h2", 1)
    assert [r.key for r in await b.record_list("other")] == ["x"]

    # A lost compare-and-set writes none of the records.
    with pytest.raises(StaleStateError):
        await b.put_with_records(
            "s", {"step": 99}, expected_version=1, records=[("hints", "h3", {"n": 3})]
        )
    assert await a.record_get("hints", "h3") is None
    assert (await a.get("s")).data["step"] == 1
    assert a.stats.cas_conflicts + b.stats.cas_conflicts == 1


async def test_put_with_records_checks_every_record_before_writing(
    workers: tuple[RedisStore, RedisStore],
) -> None:
    store, _ = workers
    await store.create("s", {"step": 0})
    with pytest.raises(StateSerializationError, match=r"value\['bad'\]"):
        await store.put_with_records(
            "s", {"step": 1}, expected_version=1, records=[("ns", "k", {"bad": {1, 2}})]
        )
    assert (await store.get("s")).version == 1


# --- records: prefix scans match a plain filter exactly ----------------------------------


_KEY_CHARS = st.characters(codec="utf-8")
_EXAMPLES = itertools.count()


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    keys=st.lists(st.text(_KEY_CHARS, min_size=1, max_size=6), max_size=12, unique=True),
    prefix=st.text(_KEY_CHARS, max_size=3),
)
async def test_record_list_matches_the_memory_store(
    workers: tuple[RedisStore, RedisStore], keys: list[str], prefix: str
) -> None:
    store, _ = workers
    reference = MemoryStore()
    namespace = f"ns-{next(_EXAMPLES)}"  # the examples share one database
    for i, key in enumerate(keys):
        await store.record_put(namespace, key, {"i": i})
        await reference.record_put(namespace, key, {"i": i})
    if keys:  # prefixes taken from real keys hit more often than random ones
        prefix = keys[0][: len(prefix)]
    got = await store.record_list(namespace, prefix)
    want = await reference.record_list(namespace, prefix)
    assert [(r.key, r.version, dict(r.value)) for r in got] == [
        (r.key, r.version, dict(r.value)) for r in want
    ]


async def test_record_list_reads_one_namespace_only(
    workers: tuple[RedisStore, RedisStore], raw: Redis
) -> None:
    store, _ = workers
    for start in range(0, 1200, 100):  # more than one HMGET batch inside the script
        await asyncio.gather(
            *(store.record_put("big", f"k{i:05d}", {"i": i}) for i in range(start, start + 100))
        )
    await store.record_put("big-other", "k00001", {"other": True})
    listed = await store.record_list("big", "k00")
    assert [r.key for r in listed] == [f"k{i:05d}" for i in range(1000)]
    assert all(r.value["i"] == int(r.key[1:]) for r in listed)
    # Deleted records leave the index too.
    assert await store.record_delete("big", "k00000") is True
    assert await raw.zcard("{closedloop}:ri:big") == 1199


# --- a write resent after a lost reply is applied once ----------------------------------


def _drop_first_reply(store: RedisStore, attribute: str) -> list[int]:
    """Make the script's first call run in Redis, then lose its reply as a dropped link would."""
    script = getattr(store, attribute)
    calls: list[int] = []

    async def flaky(**kwargs: Any) -> Any:
        result = await script(**kwargs)
        calls.append(1)
        if len(calls) == 1:
            raise RedisConnectionError("Connection reset by peer (simulated)")
        return result

    setattr(store, attribute, flaky)
    return calls


async def test_a_resent_put_is_not_applied_twice(workers: tuple[RedisStore, RedisStore]) -> None:
    a, b = workers
    await a.create("s", {"n": 0})
    calls = _drop_first_reply(a, "_lua_put")
    result = await a.update("s", lambda s: {"n": s.data["n"] + 1})  # type: ignore[operator]
    assert len(calls) == 2  # it was sent twice ...
    assert (result.version, result.data["n"]) == (2, 1)  # ... and applied once
    assert (await b.get("s")).version == 2
    assert a.stats.cas_conflicts == 0


async def test_a_resent_claim_still_wins(workers: tuple[RedisStore, RedisStore]) -> None:
    a, b = workers
    calls = _drop_first_reply(a, "_lua_record_put")
    record = await a.record_put("ledger", "k", {"by": "a"}, expected_version=0)
    assert len(calls) == 2 and record.version == 1
    with pytest.raises(StaleStateError):
        await b.record_put("ledger", "k", {"by": "b"}, expected_version=0)


async def test_a_resent_write_that_lost_to_another_is_reported_unknown(
    workers: tuple[RedisStore, RedisStore],
) -> None:
    """Applied, then overwritten by another worker before the resend: neither success nor
    a conflict can be claimed, and update() must not run fn again on top of it."""
    a, b = workers
    await a.create("s", {"n": 0})
    script = a._lua_put

    async def applied_then_overtaken(**kwargs: Any) -> Any:
        await script(**kwargs)
        await b.put("s", {"n": 50}, expected_version=2)
        setattr(a, "_lua_put", script)  # noqa: B010
        raise RedisConnectionError("Connection reset by peer (simulated)")

    a._lua_put = applied_then_overtaken  # type: ignore[assignment]
    with pytest.raises(StoreUnavailableError, match="may or may not have been applied"):
        await a.update("s", lambda s: {"n": s.data["n"] + 1})  # type: ignore[operator]
    snap = await b.get("s")
    assert (snap.version, snap.data["n"]) == (3, 50)


async def test_a_resent_record_write_that_lost_to_another_is_reported_unknown(
    workers: tuple[RedisStore, RedisStore],
) -> None:
    """The same for a record (a ledger claim): its resend finds another worker's version,
    which is not a conflict this worker may report as such."""
    a, b = workers
    script, sent = a._lua_record_put, []

    async def applied_then_overtaken(**kwargs: Any) -> Any:
        result = await script(**kwargs)
        sent.append(1)
        if len(sent) > 1:
            return result  # the resend reaches Redis
        await b.record_put("ledger", "k", {"by": "b"}, expected_version=1)
        raise RedisConnectionError("Connection reset by peer (simulated)")

    a._lua_record_put = applied_then_overtaken  # type: ignore[assignment]
    with pytest.raises(StoreUnavailableError, match="may or may not have been applied"):
        await a.record_put("ledger", "k", {"by": "a"}, expected_version=0)
    assert len(sent) == 2
    record = await b.record_get("ledger", "k")
    assert record is not None and (record.version, record.value["by"]) == (2, "b")


# --- configuration ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"url": "http://127.0.0.1:6379"}, "url"),
        ({"url": 6379}, "url"),
        ({"url": "redis://127.0.0.1:6379", "prefix": ""}, "prefix"),
        ({"url": "redis://127.0.0.1:6379", "prefix": "a{b}"}, "prefix"),
        ({"url": "redis://127.0.0.1:6379", "socket_timeout_s": 0}, "socket_timeout_s"),
        ({"url": "redis://127.0.0.1:6379", "native_ttl_grace_s": -1}, "native_ttl_grace_s"),
        ({"url": "redis://127.0.0.1:notaport"}, "url"),
    ],
)
def test_bad_settings_are_configuration_errors(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        RedisStore(**kwargs)


def test_without_redis_py_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "redis.asyncio", None)
    with pytest.raises(ConfigurationError, match=r"closedloop\[redis\]"):
        RedisStore("redis://127.0.0.1:6379")


async def test_lone_surrogates_in_ids_are_configuration_errors(
    workers: tuple[RedisStore, RedisStore],
) -> None:
    store, _ = workers
    with pytest.raises(ConfigurationError, match="session_id"):
        await store.create("bad\udc80", {})
    with pytest.raises(ConfigurationError, match="key"):
        await store.record_put("ns", "bad\udc80", {})


async def test_open_store_selects_redis_by_url(redis_url: str) -> None:
    store = open_store(redis_url)
    assert isinstance(store, RedisStore) and store.url == redis_url
    try:
        await store.create("via-settings", {"ok": True})
        assert (await store.get("via-settings")).data["ok"] is True
    finally:
        await store.close()


def test_one_store_survives_a_new_event_loop(redis_url: str) -> None:
    """Scripts that call ``asyncio.run`` twice with one store get fresh connections."""
    store = RedisStore(redis_url)
    asyncio.run(store.create("s", {"n": 1}))
    assert asyncio.run(store.get("s")).data["n"] == 1
    asyncio.run(store.record_put("ns", "k", {}))
    assert [r.key for r in asyncio.run(store.record_list("ns"))] == ["k"]
    asyncio.run(store.close())
