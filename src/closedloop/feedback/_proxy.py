"""``StoreProxy``: a state store in front of another, forwarding every call to it.

A tenant's scoped view, writes that wait for the next save, the ledger's riding commits:
each changes one thing about a store. Built on ``StoreProxy`` each overrides that one
thing and inherits the rest, as ``WrapperModel`` is for models. The forwarding methods are
made from the protocol's own signatures (:func:`forwarded`), so the store interface is
written once, in ``StateStore``, and a proxy is typed exactly as the store it wraps. What a
proxy may change:

- the names it passes in and hands back (``_session_id``, ``_namespace``, ``_inward_hints``,
  ``_inward_writes``, ``_outward_snapshot``, ``_outward_record``: the identity here; a scoped
  view prefixes and strips them);
- what happens before a write reaches the wrapped store (``_before_write``: nothing here;
  a view holding writes back writes them first, so writes keep their order);
- whether a record write goes on at all (``_held_write``: a view that keeps some writes
  for later answers for them);
- any method outright.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

from ._contract import Hint, Record, Snapshot, StateStore, Write
from ._store import BaseStore

__all__ = ["StoreProxy", "forwarded"]

_P = ParamSpec("_P")
_R = TypeVar("_R")

_SESSION = {"session_id": "_session_id"}
_NAMESPACE = {"namespace": "_namespace"}


async def _one_by_one(store: StateStore, items: Sequence[Write]) -> list[Record]:
    return [
        await store.record_put(ns, key, value, expected_version=v) for ns, key, value, v in items
    ]


async def _saved_one_by_one(
    store: StateStore, records: Sequence[Hint] = (), writes: Sequence[Write] = (), **put: Any
) -> Snapshot:
    # BaseStore.put_with_records's order: the conditional writes, the put, the hints.
    if writes:
        await _one_by_one(store, writes)
    snapshot = await store.put(**put)
    for namespace, key, value in records:
        await store.record_put(namespace, key, value)
    return snapshot


def forwarded(
    method: Callable[Concatenate[Any, _P], Coroutine[Any, Any, _R]],
    *,
    inward: Mapping[str, str] | None = None,
    outward: str | None = None,
    writes: bool = False,
    holds: bool = False,
    fallback: Callable[..., Coroutine[Any, Any, Any]] | None = None,
) -> Callable[Concatenate[StoreProxy, _P], Coroutine[Any, Any, _R]]:
    """The proxy method that forwards ``method`` (a protocol's) to ``self.store``.

    ``inward`` maps an argument's name to the proxy method that translates it; ``outward``
    names the one that translates the result (each record of a list, nothing for None);
    ``writes`` calls ``_before_write`` first; ``holds`` asks ``_held_write`` whether the
    view keeps a record write itself; ``fallback(store, **arguments)`` serves a wrapped store
    without the method. Every argument reaches the wrapped store by name.
    """
    translations = tuple((inward or {}).items())
    op = method.__name__
    names = tuple(inspect.signature(method).parameters)[1:]  # after self

    async def forward(self: StoreProxy, /, *args: Any, **kwargs: Any) -> _R:
        call = dict(zip(names, args, strict=False))
        call.update(kwargs)
        if writes:
            await self._before_write()
        for name, translate in translations:
            if name in call:
                call[name] = getattr(self, translate)(call[name])
        if holds:
            write = (call["namespace"], call["key"], call["value"], call.get("expected_version"))
            held = self._held_write(write)
            if held is not None:
                return cast(_R, held)
        target = getattr(self.store, op, None)
        if target is None and fallback is not None:
            result: _R = await fallback(self.store, **call)
        else:
            result = await getattr(self.store, op)(**call)
        return result if outward is None else self._outward(outward, result)

    forward.__name__ = forward.__qualname__ = op
    forward.__doc__ = method.__doc__
    return forward


class StoreProxy:
    """Forwards the :class:`StateStore` interface, ``record_put_fenced``,
    ``record_put_many`` and ``put_with_records`` to ``store``.

    A subclass sets ``self.store`` (the constructor here does) and overrides what it
    changes; ``close`` closes the wrapped store unless a subclass says otherwise. A wrapped
    store without ``record_put_many`` or ``put_with_records`` gets their writes one by one.
    """

    store: StateStore

    def __init__(self, store: StateStore) -> None:
        self.store = store

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.store!r})"

    # --- what a subclass changes (the identity here) ------------------------------------

    def _session_id(self, session_id: str) -> str:
        return session_id

    def _namespace(self, namespace: str) -> str:
        return namespace

    def _inward_hints(self, hints: Sequence[Hint]) -> list[Hint]:
        return [(self._namespace(ns), key, value) for ns, key, value in hints]

    def _inward_writes(self, writes: Sequence[Write]) -> list[Write]:
        return [(self._namespace(ns), key, value, v) for ns, key, value, v in writes]

    def _update_fn(
        self, fn: Callable[[Snapshot], Mapping[str, Any]]
    ) -> Callable[[Snapshot], Mapping[str, Any]]:
        return lambda snapshot: fn(self._outward_snapshot(snapshot))

    def _outward_snapshot(self, snapshot: Snapshot) -> Snapshot:
        return snapshot

    def _outward_record(self, record: Record) -> Record:
        return record

    async def _before_write(self) -> None:
        """Write what this view holds back (it holds nothing); called before every write."""
        return None

    def _held_write(self, write: Write) -> Record | None:
        """The record this view keeps instead of writing it now (None: write it now)."""
        return None

    def _outward(self, name: str, result: Any) -> Any:
        translate = getattr(self, name)
        if result is None:
            return result
        if isinstance(result, list):
            return [translate(r) for r in result]
        return translate(result)

    # --- sessions ------------------------------------------------------------------------

    create = forwarded(StateStore.create, inward=_SESSION, outward="_outward_snapshot", writes=True)
    get = forwarded(StateStore.get, inward=_SESSION, outward="_outward_snapshot")
    put = forwarded(StateStore.put, inward=_SESSION, outward="_outward_snapshot", writes=True)
    update = forwarded(
        StateStore.update,
        inward={**_SESSION, "fn": "_update_fn"},
        outward="_outward_snapshot",
        writes=True,
    )
    delete = forwarded(StateStore.delete, inward=_SESSION, writes=True)
    gc = forwarded(StateStore.gc)

    # --- records -------------------------------------------------------------------------

    record_get = forwarded(StateStore.record_get, inward=_NAMESPACE, outward="_outward_record")
    record_put = forwarded(
        StateStore.record_put,
        inward=_NAMESPACE,
        outward="_outward_record",
        writes=True,
        holds=True,
    )
    record_put_fenced = forwarded(
        BaseStore.record_put_fenced, inward=_NAMESPACE, outward="_outward_record", writes=True
    )
    record_list = forwarded(StateStore.record_list, inward=_NAMESPACE, outward="_outward_record")
    record_delete = forwarded(StateStore.record_delete, inward=_NAMESPACE, writes=True)

    # --- several writes at once: the wrapped store's, so its one transaction holds -------

    record_put_many = forwarded(
        BaseStore.record_put_many,
        inward={"items": "_inward_writes"},
        outward="_outward_record",
        writes=True,
        fallback=_one_by_one,
    )
    put_with_records = forwarded(
        BaseStore.put_with_records,
        inward={**_SESSION, "records": "_inward_hints", "writes": "_inward_writes"},
        outward="_outward_snapshot",
        writes=True,
        fallback=_saved_one_by_one,
    )

    async def close(self) -> None:
        """Close the wrapped store."""
        await self.store.close()
