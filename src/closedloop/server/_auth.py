"""API keys: created once, stored hashed in the state store, checked in constant time.

A key reads ``sk-cl-<key id>-<secret>``. Only the key id, a random per-key salt and
HMAC-SHA256(salt, secret) are stored (namespace ``api_keys``); the key itself is shown
once, when it is created. The ``sk-`` form is one that closedloop's redaction already
recognises, so a key pasted into a task or echoed by a tool is scrubbed from traces
and logs like any other credential.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from .._conflict import retry_on_conflict
from .._exceptions import ConfigurationError, SessionNotFoundError
from .._policy import retry_if_result
from ..feedback import StateStore

__all__ = ["KEY_NAMESPACE", "ApiKeyInfo", "ApiKeys", "CreatedKey", "Principal"]

KEY_NAMESPACE = "api_keys"
"""The record namespace (of the shared, unscoped store) that holds the hashed keys."""

_PREFIX = "sk-cl-"
_KEY = re.compile(r"^sk-cl-([0-9a-f]{12})-([0-9a-f]{48})$")
_NAME = re.compile(r"^[\w .@-]{1,64}$")
# Compared against when the key id is unknown, so a miss costs what a hit costs.
_DUMMY_SALT = bytes(16)
_DUMMY_HASH = hmac.new(_DUMMY_SALT, b"-", hashlib.sha256).hexdigest()


def _digest(salt: bytes, secret: str) -> str:
    return hmac.new(salt, secret.encode("ascii"), hashlib.sha256).hexdigest()


class ApiKeyInfo(BaseModel):
    """What is known about a key, never the key: its id, name and lifetime."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key_id: str
    name: str
    created_at: float
    revoked_at: float | None = None

    @property
    def active(self) -> bool:
        """True until the key is revoked."""
        return self.revoked_at is None


@dataclass(frozen=True, slots=True)
class CreatedKey:
    """A new key: ``token`` is the only copy of the secret (show it once, then drop it)."""

    info: ApiKeyInfo
    token: str


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller behind a request: a key id, its name, and the store scope it owns."""

    key_id: str
    name: str

    @property
    def scope(self) -> str:
        """The prefix of everything this key owns in the shared store."""
        return f"key_{self.key_id}"


class ApiKeys:
    """Create, list, revoke and verify API keys kept in ``store``."""

    def __init__(self, store: StateStore, *, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self._clock = clock

    def __repr__(self) -> str:
        return f"ApiKeys({self.store!r})"

    async def create(self, name: str) -> CreatedKey:
        """A new active key named ``name`` (letters, digits, space, ``.@_-``; 1-64 chars)."""
        if not isinstance(name, str) or not _NAME.match(name):
            raise ConfigurationError(
                "name", name, "must be 1-64 letters, digits, spaces or . @ _ -"
            )
        salt = secrets.token_bytes(16)
        secret = secrets.token_hex(24)

        async def draw(_: int) -> CreatedKey | None:
            key_id = secrets.token_hex(6)
            info = ApiKeyInfo(key_id=key_id, name=name, created_at=float(self._clock()))
            value = {
                **info.model_dump(mode="json"),
                "salt": salt.hex(),
                "hash": _digest(salt, secret),
            }
            if await self.store.record_get(KEY_NAMESPACE, key_id) is not None:
                return None  # the id is taken: draw another
            await self.store.record_put(KEY_NAMESPACE, key_id, value, expected_version=0)
            return CreatedKey(info=info, token=f"{_PREFIX}{key_id}-{secret}")

        taken = retry_if_result(lambda created: created is None)
        created = (await retry_on_conflict(draw, 8, conflict=taken)).value
        if created is not None:
            return created
        raise ConfigurationError("key_id", "(random)", "no free key id after 8 draws")

    async def list(self) -> list[ApiKeyInfo]:
        """Every key, active and revoked, oldest first."""
        records = await self.store.record_list(KEY_NAMESPACE)
        infos = [ApiKeyInfo.model_validate(_public(r.to_dict())) for r in records]
        return sorted(infos, key=lambda i: (i.created_at, i.key_id))

    async def get(self, key_id: str) -> ApiKeyInfo:
        """The key with this id; ``SessionNotFoundError`` if there is none."""
        record = await self.store.record_get(KEY_NAMESPACE, key_id)
        if record is None:
            raise SessionNotFoundError(f"no API key with id {key_id!r}")
        return ApiKeyInfo.model_validate(_public(record.to_dict()))

    async def revoke(self, key_id: str) -> ApiKeyInfo:
        """Revoke a key (at once, for every later request); revoking twice is harmless."""
        record = await self.store.record_get(KEY_NAMESPACE, key_id)
        if record is None:
            raise SessionNotFoundError(f"no API key with id {key_id!r}")
        value = record.to_dict()
        if value.get("revoked_at") is None:
            value["revoked_at"] = float(self._clock())
            record = await self.store.record_put(
                KEY_NAMESPACE, key_id, value, expected_version=record.version
            )
        return ApiKeyInfo.model_validate(_public(record.to_dict()))

    async def verify(self, token: str) -> Principal | None:
        """The principal of an active key, or None for anything else (same work either way)."""
        match = _KEY.match(token) if isinstance(token, str) else None
        key_id, secret = (match.group(1), match.group(2)) if match else ("", "-")
        record = await self.store.record_get(KEY_NAMESPACE, key_id) if key_id else None
        if record is None:
            hmac.compare_digest(_digest(_DUMMY_SALT, secret), _DUMMY_HASH)
            return None
        value = record.to_dict()
        try:
            salt = bytes.fromhex(str(value["salt"]))
            expected = str(value["hash"])
        except (KeyError, ValueError):
            return None
        good = hmac.compare_digest(_digest(salt, secret), expected)
        if not good or value.get("revoked_at") is not None:
            return None
        return Principal(key_id=key_id, name=str(value.get("name", key_id)))


def _public(value: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in value.items() if k in ApiKeyInfo.model_fields}
