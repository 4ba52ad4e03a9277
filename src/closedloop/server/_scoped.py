"""A tenant's view of the shared state store: every id and namespace under one prefix.

The service gives each API key a :class:`ScopedStore` over the one shared store, and
builds that key's agents on it. Sessions, runs, task states, the controllers' history,
the effect ledger, past successes and the handover queue of one key then live under a
prefix no other key can name, so isolation holds by construction rather than by a
check remembered in every handler (a suggested fix drawn from "the nearest past
success" can only come from the same key's own runs).
"""

from __future__ import annotations

import dataclasses

from .._exceptions import ConfigurationError
from ..feedback import Record, Snapshot, StateStore, StoreProxy

__all__ = ["ScopedStore"]

_SEPARATOR = ":"


class ScopedStore(StoreProxy):
    """A :class:`StateStore` that prefixes session ids and record namespaces with ``scope``.

    Reads come back with the prefix removed, so code on top sees its own ids. ``close``
    does nothing: the shared store belongs to whoever opened it. Everything else is
    :class:`~closedloop.feedback.StoreProxy`'s forwarding, through the names below, the
    shared store's writes of several records at once included: a run on this view pays one
    synced commit for a step's save and its records, as on the shared store itself.
    """

    def __init__(self, inner: StateStore, scope: str) -> None:
        if not isinstance(scope, str) or not scope or _SEPARATOR in scope:
            raise ConfigurationError("scope", scope, f"must be non-empty, without {_SEPARATOR!r}")
        super().__init__(inner)
        self.scope = scope
        self._prefix = scope + _SEPARATOR

    def __repr__(self) -> str:
        return f"ScopedStore({self.store!r}, scope={self.scope!r})"

    @property
    def inner(self) -> StateStore:
        """The shared store this view is of."""
        return self.store

    def _session_id(self, session_id: str) -> str:
        if not isinstance(session_id, str) or not session_id:
            raise ConfigurationError("session_id", session_id, "must be a non-empty string")
        return self._prefix + session_id

    def _namespace(self, namespace: str) -> str:
        if not isinstance(namespace, str) or not namespace:
            raise ConfigurationError("namespace", namespace, "must be a non-empty string")
        return self._prefix + namespace

    def _outward_snapshot(self, snapshot: Snapshot) -> Snapshot:
        return dataclasses.replace(snapshot, session_id=snapshot.session_id[len(self._prefix) :])

    def _outward_record(self, record: Record) -> Record:
        return dataclasses.replace(record, namespace=record.namespace[len(self._prefix) :])

    async def close(self) -> None:
        """Nothing to release: the shared store is closed by its owner."""
        return None
