"""The PID history and the success memory ride along with each step's state save."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from closedloop.agent._deferred import DeferredRecords
from closedloop.feedback import MemoryStore, SQLiteStore

from .conftest import call, final, make_agent, scripted


class CountingStore(SQLiteStore):
    """A real SQLite store that counts its write calls by kind and namespace."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.writes: list[tuple[str, str]] = []

    async def put(self, *args: Any, **kwargs: Any) -> Any:
        self.writes.append(("put", ""))
        return await super().put(*args, **kwargs)

    async def put_with_records(self, *args: Any, **kwargs: Any) -> Any:
        names = ",".join(sorted({r[0] for r in kwargs.get("records", ())}))
        self.writes.append(("put_with_records", names))
        return await super().put_with_records(*args, **kwargs)

    async def record_put(self, namespace: str, *args: Any, **kwargs: Any) -> Any:
        self.writes.append(("record_put", namespace))
        return await super().record_put(namespace, *args, **kwargs)


def lookup(city: str) -> dict[str, Any]:
    """Look a city up."""
    return {"city": city, "temp_c": 20 + len(city)}


async def test_a_step_costs_one_state_commit_with_its_hints(tmp_path: Path) -> None:
    store = CountingStore(tmp_path / "state.db")
    try:
        model = scripted(call("lookup", city="Paris"), call("lookup", city="Rome"), final("ok"))
        agent, _ = make_agent(model, [lookup], store=store)
        result = await agent.run("weather")
        assert result.success
        hints = [
            w for w in store.writes if w[0] == "record_put" and w[1] in {"control", "successes"}
        ]
        assert hints == []  # no commit of their own
        together = [w for w in store.writes if w[0] == "put_with_records"]
        assert len(together) == len(result.steps)
        assert all("control" in w[1] for w in together)
        pid = await store.record_get("control", "lookup")
        assert pid is not None and len(pid.value["errors"]) == 2
        remembered = await store.record_list("successes", "lookup/")
        assert {r.value["arguments"]["city"] for r in remembered} == {"Paris", "Rome"}
    finally:
        await store.close()


async def test_waiting_writes_are_read_back_before_they_are_stored() -> None:
    inner = MemoryStore()
    await inner.record_put("hints", "old", {"n": 0})
    deferred = DeferredRecords(inner, ["hints"])
    await deferred.record_put("hints", "new", {"n": 1})
    await deferred.record_put("other", "direct", {"n": 2})
    assert await inner.record_get("hints", "new") is None
    assert await inner.record_get("other", "direct") is not None  # not deferred
    got = await deferred.record_get("hints", "new")
    assert got is not None and got.value["n"] == 1
    assert [r.key for r in await deferred.record_list("hints")] == ["new", "old"]
    assert deferred.waiting == 1
    waiting = deferred.drain()
    assert waiting == [("hints", "new", {"n": 1})] and deferred.waiting == 0
    deferred.requeue(waiting)
    await deferred.flush()
    stored = await inner.record_get("hints", "new")
    assert stored is not None and stored.version == 1 and deferred.waiting == 0


async def test_a_failed_save_keeps_the_hints_for_the_next() -> None:
    inner = MemoryStore()
    deferred = DeferredRecords(inner, ["hints"])
    await deferred.record_put("hints", "a", {"n": 1})
    waiting = deferred.drain()
    await deferred.record_put("hints", "a", {"n": 2})  # newer than the failed save's
    deferred.requeue(waiting)
    assert deferred.drain() == [("hints", "a", {"n": 2})]
