"""Records that ride along with the next state save instead of a commit of their own.

The PID history of each step type and the memory of past successes are written every
step. On a durable store each such write is one synced commit, several per step, each
costing more than the whole rest of the step. They are hints (a warm start, a suggestion
for a human), not guarantees: :class:`DeferredRecords` keeps them in memory and hands
them to the next task-state save, which writes them in the same transaction when the
store can (``put_with_records``). A crash loses at most the hints of the step that was
not saved, the same step a recovery redoes anyway. Effects, the ledger's claims and the
task state itself are never deferred; the ledger's commits ride with the state save in one
transaction (:class:`RidingWrites`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from .._exceptions import StaleStateError
from ..feedback import Record, StateStore, StoreProxy
from ..feedback._contract import Hint, Write
from ..feedback._json import CheckedDocument, check_json, encode_document, freeze_mapping
from ..feedback._store import record_name

__all__ = [
    "DeferredRecords",
    "PendingRecord",
    "RidingWrites",
]

PendingRecord = Hint
"""``(namespace, key, value)`` of a record waiting for the next save."""


def _checked(value: Mapping[str, Any]) -> CheckedDocument:
    """``value`` checked now, so a bad one fails here and not inside a later, unrelated
    save, and kept checked and encoded, so that save does not check it again."""
    if type(value) is CheckedDocument:
        return value
    plain = check_json(value, "value")
    return CheckedDocument(plain, encode_document(plain))


class _HeldBack(StoreProxy):
    """A view of ``store`` that keeps some record writes back for a later save.

    Reads see the held records over the store's own; everything else goes to ``store``.
    """

    def __init__(self, store: StateStore) -> None:
        super().__init__(store)
        self._held: dict[tuple[str, str], Record] = {}  # what reads see of held writes

    async def record_get(self, namespace: str, key: str) -> Record | None:
        held = self._held.get((namespace, key))
        return held if held is not None else await self.store.record_get(namespace, key)

    async def record_list(self, namespace: str, prefix: str = "") -> list[Record]:
        stored = await self.store.record_list(namespace, prefix)
        merged = {r.key: r for r in stored}
        for (ns, key), record in self._held.items():
            if ns == namespace and key.startswith(prefix):
                merged[key] = record
        return [merged[k] for k in sorted(merged)]


class DeferredRecords(_HeldBack):
    """A :class:`StateStore` view whose unconditional record writes in ``namespaces`` wait.

    :meth:`drain` takes the waiting writes for a save, :meth:`requeue` puts them back when
    that save failed, :meth:`flush` writes them alone.
    """

    def __init__(self, store: StateStore, namespaces: Collection[str]) -> None:
        super().__init__(store)
        self.namespaces = frozenset(namespaces)
        self._values: dict[tuple[str, str], CheckedDocument] = {}  # what a save writes
        clock = getattr(store, "_now", None)  # a BaseStore's clock, so ages compare
        self._clock: Callable[[], float] | None = clock if callable(clock) else None
        self._tick = 0.0

    def __repr__(self) -> str:
        return f"DeferredRecords({self.store!r}, waiting={len(self._held)})"

    @property
    def waiting(self) -> int:
        """How many record writes wait for the next save."""
        return len(self._held)

    def drain(self) -> list[PendingRecord]:
        """Take every waiting write (in the order they were made)."""
        values = self._values
        out: list[PendingRecord] = [(ns, key, values[(ns, key)]) for ns, key in self._held]
        self._held.clear()
        values.clear()
        return out

    def requeue(self, items: list[PendingRecord]) -> None:
        """Put back writes a failed save did not make; newer waiting writes win."""
        for namespace, key, value in items:
            if (namespace, key) not in self._held:
                self._hold(namespace, key, _checked(value))

    async def flush(self) -> None:
        """Write the waiting records now, each on its own (when no save will follow)."""
        for namespace, key, value in self.drain():
            await self.store.record_put(namespace, key, value)

    def _now(self) -> float:
        if self._clock is not None:
            return float(self._clock())
        self._tick += 1.0  # order only: the memory trims by age
        return self._tick

    def _hold(self, namespace: str, key: str, checked: CheckedDocument) -> Record:
        record = Record(
            namespace=namespace,
            key=key,
            version=0,  # not stored yet
            value=freeze_mapping(checked.plain),
            updated_at=self._now(),
        )
        self._held[(namespace, key)] = record
        self._values[(namespace, key)] = checked
        return record

    def _held_write(self, write: Write) -> Record | None:
        namespace, key, value, expected_version = write
        if namespace not in self.namespaces or expected_version is not None:
            return None
        self._held.pop((namespace, key), None)  # the latest write goes last in the order
        return self._hold(namespace, key, _checked(value))

    async def record_delete(self, namespace: str, key: str) -> bool:
        held = self._held.pop((namespace, key), None)
        self._values.pop((namespace, key), None)
        stored = await self.store.record_delete(namespace, key)
        return stored or held is not None

    async def close(self) -> None:
        await self.flush()


class RidingWrites(_HeldBack):
    """The effect ledger's view of a store: its commits ride with the next state save.

    A claim must reach the disk before its effect runs, and does (``record_put`` goes
    straight through). The commit after the effect (``record_put_many``: the entry and the
    task's commit counter, each compare-and-set) is checked against what this view holds,
    kept, shown to reads, and written by the next :meth:`StateHandle.save` in the state's
    own transaction: a step then costs one synced commit for its claim and one for the rest.
    Any other write first writes what waits, so writes keep their order; a save that fails
    writes what waits on its own before the error goes on. A crash before the save leaves
    the entry ``pending``, as a crash between the effect and its commit always could.
    """

    def __init__(self, store: StateStore) -> None:
        super().__init__(store)
        self._writes: list[Write] = []  # in order: the store replays each compare-and-set

    def __repr__(self) -> str:
        return f"RidingWrites({self.store!r}, waiting={len(self._writes)})"

    @property
    def waiting(self) -> int:
        """How many writes wait for the next save."""
        return len(self._writes)

    def take(self) -> tuple[list[Write], dict[tuple[str, str], Record]]:
        """Every waiting write in order, and the view of them; none wait afterwards."""
        taken = (self._writes, self._held)
        self._writes, self._held = [], {}
        return taken

    def give_back(self, taken: tuple[list[Write], dict[tuple[str, str], Record]]) -> None:
        """Put back what :meth:`take` took when the save that took it failed."""
        writes, view = taken
        self._writes = [*writes, *self._writes]
        self._held = {**view, **self._held}

    async def flush(self) -> None:
        """Write what waits now, all or nothing, in one transaction where the store can."""
        if not self._writes:
            return
        taken = self.take()
        try:
            await self.store.record_put_many(taken[0])  # type: ignore[attr-defined]
        except BaseException:
            self.give_back(taken)
            raise

    _before_write = flush

    async def record_put_many(self, items: Sequence[Write]) -> list[Record]:
        if any(expected is None for _, _, _, expected in items):
            # No version to predict: write now, after what waits.
            await self.flush()
            return await self.store.record_put_many(items)  # type: ignore[attr-defined,no-any-return]
        staged: dict[tuple[str, str], Record] = {}
        writes: list[Write] = []
        for namespace, key, value, expected in items:
            assert expected is not None
            name = (namespace, key)
            known = staged.get(name) or self._held.get(name)
            if known is not None and known.version != expected:
                raise StaleStateError(record_name(namespace, key), expected, known.version)
            checked = _checked(value)
            writes.append((namespace, key, checked, expected))
            staged[name] = Record(
                namespace=namespace,
                key=key,
                version=expected + 1,
                value=freeze_mapping(checked.plain),
                updated_at=0.0,  # not stored yet
            )
        self._writes.extend(writes)
        self._held.update(staged)
        return [staged[(namespace, key)] for namespace, key, _, _ in items]
