"""RedisStore when Redis goes away: a clear StoreUnavailableError, then recovery, nothing lost.

The server is a real redis-server killed with SIGKILL (``redis_server.kill()``) and started
again on the same port and data directory; it fsyncs every write (``appendfsync always``),
so whatever a store call returned before the kill must be there after the restart.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from closedloop import StaleStateError, StoreUnavailableError
from closedloop.feedback import RedisStore, Snapshot, SyncStore


def _bump(snap: Snapshot) -> dict[str, Any]:
    return {"n": snap.data["n"] + 1}  # type: ignore[operator]


def _operations(store: RedisStore) -> dict[str, Callable[[], Awaitable[Any]]]:
    return {
        "create": lambda: store.create("new", {}),
        "get": lambda: store.get("s"),
        "put": lambda: store.put("s", {"n": -1}, expected_version=21),
        "update": lambda: store.update("s", _bump),
        "touch": lambda: store.touch("s", ttl_s=60),
        "delete": lambda: store.delete("s"),
        "gc": store.gc,
        "record_get": lambda: store.record_get("ledger", "k0"),
        "record_put": lambda: store.record_put("ledger", "k0", {"x": 1}, expected_version=1),
        "record_list": lambda: store.record_list("ledger"),
        "record_delete": lambda: store.record_delete("ledger", "k0"),
        "ping": store.ping,
    }


@pytest.mark.timeout(120)
async def test_a_killed_server_fails_clearly_then_recovers_with_every_commit(
    redis_server: Any, redis_url: str
) -> None:
    store = RedisStore(redis_url, socket_timeout_s=2, connect_timeout_s=1)
    try:
        await store.create("s", {"n": 0})
        for _ in range(20):
            await store.update("s", _bump)
        for i in range(10):
            await store.record_put("ledger", f"k{i}", {"status": "committed"}, expected_version=0)

        redis_server.kill()

        for name, operation in _operations(store).items():
            with pytest.raises(StoreUnavailableError) as info:
                await operation()
            message = str(info.value)
            assert type(info.value) is StoreUnavailableError, name
            assert redis_url in message and "cannot reach Redis" in message, (name, message)
            assert name in message or name == "update", (name, message)
        # A store opened while Redis is down fails the same way, and so does the sync facade.
        with SyncStore(RedisStore(redis_url, connect_timeout_s=1)) as sync:
            with pytest.raises(StoreUnavailableError, match=re.escape(redis_url)):
                sync.get("s")

            redis_server.start()

            # The same objects work again, and every write acknowledged before the kill is there.
            assert sync.get("s").data["n"] == 20
        snap = await store.get("s")
        assert (snap.version, snap.data["n"]) == (21, 20)  # the put tried while down never landed
        records = await store.record_list("ledger")
        assert [(r.key, r.version) for r in records] == [(f"k{i}", 1) for i in range(10)]
        with pytest.raises(StaleStateError):
            await store.record_put("ledger", "k3", {"status": "again"}, expected_version=0)
        after = await store.update("s", _bump)
        assert (after.version, after.data["n"]) == (22, 21)
    finally:
        if not redis_server.running:
            redis_server.start()
        await store.close()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # nothing listens once the socket is closed


async def test_an_unreachable_url_is_named_and_its_password_hidden() -> None:
    url = f"redis://:hunter2@127.0.0.1:{_closed_port()}/0"
    async with RedisStore(url, connect_timeout_s=1) as store:
        with pytest.raises(StoreUnavailableError) as info:
            await store.record_get("ns", "k")
    message = str(info.value)
    assert "hunter2" not in message and ":***@127.0.0.1" in message
    assert "cannot reach Redis during record_get" in message


async def test_a_refusing_server_is_a_store_error_not_a_redis_one(redis_server: Any) -> None:
    # No such ACL user on the test server: Redis answers WRONGPASS, redis-py raises its own.
    url = f"redis://ghost:wrong@127.0.0.1:{redis_server.port}/0"
    async with RedisStore(url) as store:
        with pytest.raises(StoreUnavailableError) as info:
            await store.get("s")
    message = str(info.value)
    assert "wrong" not in message.replace("WRONGPASS", "") and "ghost:***@127.0.0.1" in message
