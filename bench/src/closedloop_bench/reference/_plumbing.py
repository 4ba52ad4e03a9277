"""What every world tool shares: one HTTP client, one latency tracker, the journal of calls,
the world's refusals made readable, and idempotency keys taken from the effect ledger.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import httpx

from closedloop._exceptions import ConfigurationError
from closedloop._validation import require_int_at_least
from closedloop.control import LatencyTracker
from closedloop.execution import RecordStore, canonical_json, normalise
from closedloop.perception import EventListener, HttpTool, Observation, ObservationStatus

__all__ = [
    "READS",
    "ReadSpec",
    "ToolCallRecord",
    "WorldClient",
    "explain_refusal",
    "http_status",
    "problem_of",
]

_HTTP = re.compile(r"^HTTP (\d{3})\b")


def http_status(observation: Observation) -> int | None:
    """The HTTP status behind an error observation (``HttpTool`` writes ``HTTP 404``)."""
    match = _HTTP.match(observation.error or "")
    return int(match.group(1)) if match else None


def problem_of(observation: Observation) -> dict[str, Any] | None:
    """The world's problem body (``{"error": ..., "detail": ...}``) of a refused request."""
    for candidate in (observation.value, observation.raw):
        data = candidate
        if isinstance(candidate, str):
            try:
                data = json.loads(candidate)
            except ValueError:
                continue
        if isinstance(data, Mapping) and isinstance(data.get("error"), str):
            return dict(data)
    return None


@dataclass(frozen=True, slots=True)
class ReadSpec:
    """One read endpoint: its path, the fields a complete answer has, its result list."""

    path: str
    key_fields: tuple[str, ...] = ()
    result_field: str | None = None
    item_fields: tuple[str, ...] = ()


READS: Mapping[str, ReadSpec] = {
    "list_cities": ReadSpec("/cities", (), "cities", ("name", "name_en", "code")),
    "get_weather": ReadSpec("/weather", ("city", "date", "temperature_c", "condition")),
    "search_flights": ReadSpec(
        "/flights", (), "flights", ("flight_id", "depart_time", "price_cny", "seats_left")
    ),
    "get_booking": ReadSpec("/bookings/{booking_id}", ("booking_id", "status", "order_id")),
    "get_payment": ReadSpec("/payments/{payment_id}", ("payment_id", "status")),
    "get_order": ReadSpec("/orders/{order_id}", ("order_id", "status", "total_cny", "paid_cny")),
    "list_orders": ReadSpec("/orders", (), "orders", ("order_id", "status")),
    "list_rooms": ReadSpec("/rooms", (), "rooms", ("room_id", "capacity")),
    "get_room_slots": ReadSpec("/rooms/{room_id}/slots", ("open",), "free_slots"),
    "search_documents": ReadSpec("/documents", (), "documents", ("doc_id", "quarter")),
    "get_document": ReadSpec("/documents/{doc_id}", ("doc_id", "text")),
    "list_products": ReadSpec("/products", (), "products", ("sku", "price_cny")),
}
"""The world's read endpoints by tool name."""


def _check_items(observation: Observation, spec: ReadSpec) -> Observation:
    if (
        observation.status is not ObservationStatus.OK
        or spec.result_field is None
        or not spec.item_fields
        or not isinstance(observation.value, Mapping)
    ):
        return observation
    items = observation.value.get(spec.result_field)
    if not isinstance(items, list):
        return observation
    missing = sorted(
        {
            f
            for item in items
            if isinstance(item, Mapping)
            for f in spec.item_fields
            if f not in item
        }
    )
    if not missing:
        return observation
    where = ", ".join(f"{spec.result_field}[].{f}" for f in missing)
    return Observation.partial(
        observation.value,
        source=observation.source,
        missing=[f"{spec.result_field}[].{f}" for f in missing],
        timestamp=observation.timestamp,
        meaning=f"{observation.source}'s answer is incomplete: items lack {where} (renamed "
        "or dropped); read the items with care",
        raw=observation.raw,
        latency_s=observation.latency_s,
        error=f"items lack {where}",
    )


@dataclass(frozen=True, slots=True)
class ToolCallRecord:
    """One tool call as the toolkit saw it: the tool, its arguments, its observation."""

    tool: str
    arguments: Mapping[str, Any]
    observation: Observation


class WorldClient:
    """The plumbing under ``WorldTools``; see there for the arguments."""

    def __init__(
        self,
        base_url: str,
        *,
        client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        latency_tracker: LatencyTracker | None = None,
        timeout_s: float | None = None,
        store: RecordStore | None = None,
        ledger_namespace: str = "ledger",
        session: str | None = None,
        on_event: EventListener | Sequence[EventListener] | None = None,
        clock: Callable[[], float] = time.time,
        timer: Callable[[], float] = time.perf_counter,
        journal_size: int = 64,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ConfigurationError("base_url", base_url, "must be an http(s) URL")
        if client is not None and transport is not None:
            raise ConfigurationError("transport", transport, "give either client or transport")
        if client is not None and not isinstance(client, httpx.AsyncClient):
            raise ConfigurationError("client", client, "must be an httpx.AsyncClient")
        if session is not None and (not isinstance(session, str) or not session):
            raise ConfigurationError("session", session, "must be a non-empty str")
        self.base_url = base_url.rstrip("/")
        self._client = client
        self._owns_client = client is None
        self._transport = transport
        self.latency_tracker = latency_tracker if latency_tracker is not None else LatencyTracker()
        self.timeout_s = timeout_s
        self._store = store
        self._namespace = ledger_namespace
        # Keys sent without a ledger are scoped to this toolkit, so two agents booking the
        # same flight for the same passenger never share a key by accident.
        self.session = session or uuid.uuid4().hex[:12]
        self._on_event = on_event
        self._clock = clock
        self._timer = timer
        self._journal: deque[ToolCallRecord] = deque(
            maxlen=require_int_at_least("journal_size", journal_size, 1)
        )
        self._reads: dict[str, HttpTool] = {}

    # --- lifecycle -----------------------------------------------------------------------

    @property
    def client(self) -> httpx.AsyncClient:
        """The HTTP client every tool shares (created on first use unless injected)."""
        if self._client is None:
            self._client = httpx.AsyncClient(transport=self._transport)
        return self._client

    async def aclose(self) -> None:
        """Close the client if the toolkit created it; an injected one stays open."""
        if self._owns_client and self._client is not None:
            await self._client.aclose()
            self._client = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # --- the journal -----------------------------------------------------------------------

    @property
    def journal(self) -> tuple[ToolCallRecord, ...]:
        """The latest calls, oldest first (rules read it; so does the ideal-trajectory player)."""
        return tuple(self._journal)

    def last(self, tool: str) -> ToolCallRecord | None:
        """The newest call of ``tool``, if any."""
        for record in reversed(self._journal):
            if record.tool == tool:
                return record
        return None

    def clear_journal(self) -> None:
        """Forget the recorded calls (between tasks)."""
        self._journal.clear()

    def _note(self, tool: str, arguments: Mapping[str, Any], observation: Observation) -> None:
        self._journal.append(ToolCallRecord(tool, dict(arguments), observation))

    # --- HTTP ------------------------------------------------------------------------------

    def http_tool(
        self,
        name: str,
        method: str,
        path: str,
        *,
        key_fields: Sequence[str] = (),
        result_field: str | None = None,
        headers: Mapping[str, str] | None = None,
        cache: bool = True,
    ) -> HttpTool:
        """A perception ``HttpTool`` on this world, sharing the client and the tracker."""
        return HttpTool(
            name,
            method,
            self.base_url + path,
            key_fields=key_fields,
            result_field=result_field,
            client=self.client,
            clock=self._clock,
            timer=self._timer,
            latency_tracker=self.latency_tracker,
            timeout_s=self.timeout_s,
            on_event=self._on_event,
            headers=headers,
            cache_size=128 if cache else 0,
        )

    async def read(self, name: str, arguments: Mapping[str, Any]) -> Observation:
        """Call the read endpoint ``name`` (see ``READS``) and score its answer.

        A refusal carries the world's reason in value and meaning; list items that lost
        an expected field (schema drift inside a list) make the answer ``partial``.
        """
        spec = READS[name]
        tool = self._reads.get(name)
        if tool is None:
            tool = self.http_tool(
                name, "GET", spec.path, key_fields=spec.key_fields, result_field=spec.result_field
            )
            self._reads[name] = tool
        # httpx would send None as an empty parameter, which the world reads as a value.
        args = {k: v for k, v in arguments.items() if v is not None}
        observation = _check_items(explain_refusal(await tool(args)), spec)
        self._note(name, args, observation)
        return observation

    # --- idempotency keys --------------------------------------------------------------------

    async def idempotency_key(
        self, action: str, arguments: Mapping[str, Any], defaults: Mapping[str, Any]
    ) -> str:
        """The ``Idempotency-Key`` for one effect: the effect ledger's key when it holds one.

        The loop's executor claims ``task/step/action/digest`` in the ledger just before it
        calls the action, and the action sees only its arguments; with ``store`` given the
        toolkit finds that pending claim (same action, same arguments) and sends its key,
        so a retry or a reconciliation after a crash reaches the world under the same key.
        Without a store, or called outside the loop, the key is derived from the
        toolkit's ``session``, the action and the canonical arguments.
        """
        wanted = canonical_json(normalise(dict(arguments), coerce_integral=False))
        if self._store is not None:
            best: tuple[int, str] | None = None
            for record in await self._store.record_list(self._namespace):
                value = record.value
                if value.get("status") != "pending" or value.get("action") != action:
                    continue
                stored = {**defaults, **_thaw(value.get("args") or {})}
                if canonical_json(normalise(stored, coerce_integral=False)) != wanted:
                    continue
                # Two pending claims of one call: the later step is the one running now.
                rank = (int(value.get("step") or 0), record.key)
                if best is None or rank > best:
                    best = rank
            if best is not None:
                return best[1]
        digest = hashlib.sha256(f"{action}|{wanted}".encode()).hexdigest()[:32]
        return f"{self.session}/{action}/{digest}"


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _thaw(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_thaw(v) for v in value]
    return value


def explain_refusal(observation: Observation) -> Observation:
    """Put the world's reason for a 4xx into ``value`` and ``meaning``.

    ``HttpTool`` says only "refused (HTTP 404)", and the loop drops ``raw`` before the
    model reads it; but 404 ``unknown_city`` and 404 ``no_data_for_date`` call for
    different answers, and both are definite, not passing faults.
    """
    status = http_status(observation)
    if observation.status is not ObservationStatus.ERROR or status is None or status >= 500:
        return observation
    problem = problem_of(observation)
    if problem is None:
        return observation
    code, detail = problem.get("error"), problem.get("detail", "")
    meaning = (
        f"{observation.source}: the service refused the request (HTTP {status} {code}): "
        f"{detail}. This is a definite answer, not a passing fault; retrying the same "
        "request will not change it"
    )
    return observation.model_copy(update={"value": problem, "meaning": meaning})
