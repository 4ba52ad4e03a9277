"""The world's services as the tools an agent calls.

Reads are typed async methods (their signatures and docstrings give the loop its JSON
schemas) that return scored ``Observation``s through perception's ``HttpTool``; effects
are ``AtomicAction``s (see ``_effects.py``). ``tools(domain)`` hands the loop the right
set for one of the four task domains.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import httpx

from closedloop._exceptions import ConfigurationError, ToolError
from closedloop.control import LatencyTracker
from closedloop.execution import AtomicAction, RecordStore
from closedloop.perception import EventListener, Observation, ObservationStatus

from ._contracts import EffectTools

__all__ = ["DOMAIN_TOOLS", "Domain", "WorldTools"]

Domain = Literal["weather", "flight", "meeting", "report", "shop"]

DOMAIN_TOOLS: Mapping[str, tuple[str, ...]] = {
    "weather": ("list_cities", "get_weather"),
    "flight": (
        "list_cities",
        "search_flights",
        "book_flight",
        "pay",
        "get_booking",
        "get_order",
        "cancel_booking",
        "refund_payment",
    ),
    "meeting": (
        "list_cities",
        "get_weather",
        "list_rooms",
        "get_room_slots",
        "book_room",
        "cancel_room_booking",
    ),
    "report": ("search_documents", "get_document"),
    "shop": ("list_products", "create_order", "get_order", "pay", "cancel_order"),
}
"""The tools each domain's agent needs, by name (the loop sees only these)."""


class WorldTools(EffectTools):
    """Every service of a ``closedloop_bench.world`` as agent tools.

    ``base_url`` is the world's (``WorldHandle.base_url``). All tools share one
    ``httpx.AsyncClient`` (inject ``client`` or ``transport``, else one is created and
    closed by ``aclose``/``async with``) and one ``latency_tracker``, whose p95 sets each
    call's timeout unless ``timeout_s`` fixes it. ``store`` is the agent's state store:
    with it, effects send the effect ledger's own key as ``Idempotency-Key`` (see
    ``idempotency_key``). ``guard_duplicates`` adds preconditions that ask the world
    whether a booking or payment already happened before repeating it. Reads never
    raise for what the world does; effects raise so the ledger knows whether they
    happened (see ``_effects.py``). ``journal`` keeps the latest calls for rules.
    """

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
        guard_duplicates: bool = True,
        on_event: EventListener | Sequence[EventListener] | None = None,
        clock: Callable[[], float] = time.time,
        timer: Callable[[], float] = time.perf_counter,
        journal_size: int = 64,
    ) -> None:
        super().__init__(
            base_url,
            client=client,
            transport=transport,
            latency_tracker=latency_tracker,
            timeout_s=timeout_s,
            store=store,
            ledger_namespace=ledger_namespace,
            session=session,
            on_event=on_event,
            clock=clock,
            timer=timer,
            journal_size=journal_size,
        )
        if not isinstance(guard_duplicates, bool):
            raise ConfigurationError("guard_duplicates", guard_duplicates, "must be a bool")
        self.guard_duplicates = guard_duplicates
        self.actions: Mapping[str, AtomicAction] = self.build_actions()
        """The effect tools as action contracts, by name."""

    def __repr__(self) -> str:
        return f"WorldTools({self.base_url!r})"

    # --- the tool lists -------------------------------------------------------------------

    def tool(self, name: str) -> Any:
        """One tool by name: a read method or an effect's ``AtomicAction``."""
        if name in self.actions:
            return self.actions[name]
        if name in _READ_METHODS:
            return getattr(self, name)
        known = sorted([*self.actions, *_READ_METHODS])
        raise ConfigurationError("name", name, f"no such tool; known: {', '.join(known)}")

    def tools(self, domain: Domain | None = None) -> list[Any]:
        """The tools for ``domain`` (see ``DOMAIN_TOOLS``), or every tool, for ``Agent(tools=)``."""
        if domain is None:
            names: Sequence[str] = [*_READ_METHODS, *self.actions]
        elif domain in DOMAIN_TOOLS:
            names = DOMAIN_TOOLS[domain]
        else:
            raise ConfigurationError(
                "domain", domain, f"must be one of {', '.join(DOMAIN_TOOLS)} or None"
            )
        return [self.tool(n) for n in names]

    async def today(self) -> str:
        """The world's date (YYYY-MM-DD), from ``/health``: what "today" means in its data.

        Not a tool for the model: an agent reads it once and puts it in its instructions.
        Raises ``ToolError`` when the world cannot say.
        """
        observation = await self.http_tool("health", "GET", "/health", key_fields=("today",))()
        if observation.status is not ObservationStatus.OK:
            raise ToolError(f"the world's date is unknown: {observation.meaning}")
        return str(observation.value["today"])

    # --- reads ----------------------------------------------------------------------------

    async def list_cities(self) -> Observation:
        """List every city the services know: Chinese name, English name, code, abbreviation."""
        return await self.read("list_cities", {})

    async def get_weather(self, city: str, date: str | None = None) -> Observation:
        """The weather of one city on one date.

        Args:
            city: the city's Chinese or English name or code, exactly as list_cities gives it.
            date: YYYY-MM-DD; today when left out.
        """
        return await self.read("get_weather", {"city": city, "date": date})

    async def search_flights(self, from_city: str, to_city: str, date: str) -> Observation:
        """Flights from one city to another on a date, by departure time, with prices and seats.

        Args:
            from_city: the departure city (name, English name or code).
            to_city: the arrival city.
            date: YYYY-MM-DD.
        """
        return await self.read("search_flights", {"from": from_city, "to": to_city, "date": date})

    async def get_booking(self, booking_id: str) -> Observation:
        """One flight booking: its flight, passenger, status and order.

        Args:
            booking_id: the booking (BK-...).
        """
        return await self.read("get_booking", {"booking_id": booking_id})

    async def get_order(self, order_id: str) -> Observation:
        """One order: its lines, total, amount paid and status.

        Args:
            order_id: the order (ORD-...).
        """
        return await self.read("get_order", {"order_id": order_id})

    async def get_payment(self, payment_id: str) -> Observation:
        """One payment: its order, amount and status.

        Args:
            payment_id: the payment (PAY-...).
        """
        return await self.read("get_payment", {"payment_id": payment_id})

    async def list_rooms(
        self, date: str | None = None, capacity: int | None = None, equipment: str | None = None
    ) -> Observation:
        """Meeting rooms with enough seats and the equipment asked for, smallest first.

        Args:
            date: YYYY-MM-DD; with a date only rooms with a free slot that day are listed.
            capacity: the minimum number of seats.
            equipment: one item the room must have (projector, video, whiteboard, tv,
                microphone).
        """
        return await self.read(
            "list_rooms", {"date": date, "capacity": capacity, "equipment": equipment}
        )

    async def get_room_slots(self, room_id: str, date: str) -> Observation:
        """A room's free one-hour slots on a date; empty means fully booked or closed.

        Args:
            room_id: the room (e.g. "room-3").
            date: YYYY-MM-DD.
        """
        return await self.read("get_room_slots", {"room_id": room_id, "date": date})

    async def search_documents(
        self, company: str | None = None, quarter: str | None = None
    ) -> Observation:
        """Quarterly report documents, filtered by company and/or quarter.

        Args:
            company: the company's Chinese or English name or ticker.
            quarter: the quarter, e.g. "2024Q2".
        """
        return await self.read("search_documents", {"company": company, "quarter": quarter})

    async def get_document(self, doc_id: str) -> Observation:
        """One report's text, as OCR read it (look-alike characters, stray spaces).

        Args:
            doc_id: the document (from search_documents).
        """
        return await self.read("get_document", {"doc_id": doc_id})

    async def list_products(self, query: str | None = None) -> Observation:
        """Products that can be ordered, with prices and stock.

        Args:
            query: a substring of the product's name or SKU.
        """
        return await self.read("list_products", {"q": query})


_READ_METHODS = (
    "list_cities",
    "get_weather",
    "search_flights",
    "get_booking",
    "get_order",
    "get_payment",
    "list_rooms",
    "get_room_slots",
    "search_documents",
    "get_document",
    "list_products",
)
