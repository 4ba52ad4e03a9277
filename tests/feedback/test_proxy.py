"""StoreProxy: the store interface spelled once, every call forwarded to the wrapped store."""

from __future__ import annotations

from pathlib import Path

import pytest

from closedloop import SessionNotFoundError, StaleStateError
from closedloop.feedback import MemoryStore, SQLiteStore, StateStore, StoreProxy


class Counting(StoreProxy):
    """Counts the writes it sees before they reach the wrapped store."""

    def __init__(self, store: StateStore) -> None:
        super().__init__(store)
        self.flushes = 0

    async def _before_write(self) -> None:
        self.flushes += 1


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> StateStore:
    return MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "s.db")


async def test_a_proxy_answers_as_the_store_behind_it(store: StateStore) -> None:
    proxy = Counting(store)
    made = await proxy.create("s1", {"a": 1})
    assert (await proxy.get("s1")) == made == (await store.get("s1"))
    put = await proxy.put("s1", {"a": 2}, expected_version=made.version)
    with pytest.raises(StaleStateError):
        await proxy.put("s1", {"a": 3}, expected_version=made.version)
    updated = await proxy.update("s1", lambda s: {"a": s.data["a"] + 1})
    assert updated.data["a"] == 3 and updated.version == put.version + 1
    record = await proxy.record_put("ns", "k1", {"v": 1})
    assert (await proxy.record_get("ns", "k1")) == record == (await store.record_get("ns", "k1"))
    fenced = await proxy.record_put_fenced("ns", "k1", {"v": 2, "fence": 1}, token=0)
    assert fenced.version == record.version + 1
    assert [r.key for r in await proxy.record_list("ns")] == ["k1"]
    assert await proxy.record_delete("ns", "k1") and await proxy.record_get("ns", "k1") is None
    assert await proxy.delete("s1")
    with pytest.raises(SessionNotFoundError):
        await store.get("s1")
    # create, put (twice), update, record_put, record_put_fenced, record_delete, delete
    assert proxy.flushes == 8
    assert await proxy.gc() == 0
    await proxy.close()
