"""The world's effects: book, pay, book a room, order, and their undoing.

Each effect sends an ``Idempotency-Key`` (the ledger's key, see ``idempotency_key``) and
ends in one of three ways, because the ledger must know which:

* the world answered 2xx: the effect happened; the observation is returned;
* the world refused it (4xx) or never saw it (429, connection refused): it did not
  happen; ``ToolError`` (final) or ``ActionError`` (worth retrying) is raised;
* anything else (5xx, timeout, a dropped connection): it may or may not have happened;
  ``ReconciliationRequiredError`` is raised, and the action's reconciler (``_contracts.py``)
  asks the world what became of it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from typing_extensions import TypedDict  # pydantic reads typing's TypedDict on 3.12+ only

from closedloop._exceptions import ActionError, ReconciliationRequiredError, ToolError
from closedloop.perception import Observation, ObservationStatus

from ._plumbing import WorldClient, explain_refusal, http_status, problem_of

__all__ = [
    "ROOM_DEFAULTS",
    "EffectClient",
    "OrderItem",
    "field_of",
    "observed_value",
    "parse_slot",
    "segment",
]

_SLOT = re.compile(r"^\s*(\d{1,2})(?::00)?\s*(?:[-–~到至]\s*(\d{1,2})(?::00)?)?\s*$")


class OrderItem(TypedDict):
    """One line of a shop order."""

    sku: str
    quantity: int


def observed_value(result: Any) -> Any:
    """The data inside an effect's result: an ``Observation``, its JSON form, or plain data.

    Compensations and postconditions receive the live ``Observation`` in-process, and its
    JSON dump from the ledger after a restart; both mean the same.
    """
    if isinstance(result, Observation):
        return result.value
    if isinstance(result, Mapping) and {"value", "status", "source"} <= set(result):
        return result["value"]
    return result


def field_of(result: Any, name: str) -> Any:
    """One field of an effect's result (see ``observed_value``), or None."""
    value = observed_value(result)
    return value.get(name) if isinstance(value, Mapping) else None


def parse_slot(slot: str) -> tuple[str, str]:
    """``"14:00"`` → (14:00, 15:00); ``"14:00-16:00"`` → (14:00, 16:00)."""
    match = _SLOT.match(str(slot))
    if match is None:
        raise ToolError(f"slot={slot!r}: expected 'HH:00' or 'HH:00-HH:00'")
    start = int(match.group(1))
    end = int(match.group(2)) if match.group(2) else start + 1
    return f"{start:02d}:00", f"{end:02d}:00"


def _is_booking_id(text: str) -> bool:
    return text.strip().upper().startswith("BK-")


ROOM_DEFAULTS: Mapping[str, Any] = {"organizer": "closedloop", "title": ""}


def segment(value: Any) -> str:
    """``value`` quoted for one path segment of a URL."""
    return quote(str(value), safe="")


class EffectClient(WorldClient):
    """The effect tools themselves; their contracts are in ``EffectTools``."""

    guard_duplicates: bool = True

    # --- sending an effect ------------------------------------------------------------

    async def _effect(
        self,
        name: str,
        path: str,
        body: Mapping[str, Any],
        arguments: Mapping[str, Any],
        *,
        key_fields: tuple[str, ...],
        defaults: Mapping[str, Any] | None = None,
    ) -> Observation:
        key = await self.idempotency_key(name, arguments, defaults or {})
        tool = self.http_tool(
            name,
            "POST",
            path,
            key_fields=key_fields,
            headers={"Idempotency-Key": key},
            cache=False,  # a cached answer to a POST would pass for an effect that never ran
        )
        observation = explain_refusal(await tool(dict(body)))
        self._note(name, arguments, observation)
        return _settle(name, observation)

    async def _compensate(self, name: str, path: str, key: str) -> Observation:
        """Run an undo; "already cancelled/refunded" counts as done (compensations repeat)."""
        tool = self.http_tool(name, "POST", path, headers={"Idempotency-Key": key}, cache=False)
        observation = explain_refusal(await tool({}))
        self._note(name, {"path": path}, observation)
        problem = problem_of(observation) or {}
        if http_status(observation) == 409 and str(problem.get("error", "")).startswith("already_"):
            return observation
        return _settle(name, observation)

    async def _get(self, name: str, args: Mapping[str, Any]) -> Any:
        """A read the contracts rely on: a complete or an empty answer, else ActionError.

        An empty list may be an injected fault; the cases that read one (no booking yet,
        no free slot) then retry under the same idempotency key, which the world replays.
        """
        observation = await self.read(name, args)
        if observation.status not in (ObservationStatus.OK, ObservationStatus.EMPTY):
            raise ActionError(f"could not ask the world ({observation.meaning})")
        value = observation.value
        return value if isinstance(value, Mapping) else {}

    async def _order_id(self, order_or_booking: str) -> str:
        if not _is_booking_id(order_or_booking):
            return order_or_booking
        booking = await self._get("get_booking", {"booking_id": order_or_booking})
        return str(booking["order_id"])

    # --- flights: book, pay, cancel, refund ----------------------------------------------

    async def book_flight(self, flight_id: str, passenger: str) -> Observation:
        """Book a seat on a flight for a passenger; the booking must then be paid.

        Args:
            flight_id: the flight's id from search_flights (e.g. "CA1234-20250605").
            passenger: the passenger's full name.
        """
        args = {"flight_id": flight_id, "passenger": passenger}
        return await self._effect(
            "book_flight", "/bookings", args, args, key_fields=("booking_id", "order_id")
        )

    async def pay(self, order_id: str, amount_cny: int) -> Observation:
        """Pay an order (a flight booking's order_id, or its booking_id) its exact amount.

        Args:
            order_id: the order to pay (ORD-...); a booking id (BK-...) is accepted too.
            amount_cny: the amount due in CNY; it must equal the order's total.
        """
        args = {"order_id": order_id, "amount_cny": amount_cny}
        target = await self._order_id(order_id)
        body = {"order_id": target, "amount_cny": amount_cny}
        return await self._effect("pay", "/payments", body, args, key_fields=("payment_id",))

    async def cancel_booking(self, booking_id: str) -> Observation:
        """Cancel a flight booking: frees the seat and refunds what was paid.

        Args:
            booking_id: the booking to cancel (BK-...).
        """
        args = {"booking_id": booking_id}
        path = f"/bookings/{segment(booking_id)}/cancel"
        return await self._effect("cancel_booking", path, {}, args, key_fields=("booking",))

    async def refund_payment(self, payment_id: str) -> Observation:
        """Refund one payment (for example a duplicate charge).

        Args:
            payment_id: the payment to refund (PAY-...).
        """
        args = {"payment_id": payment_id}
        path = f"/payments/{segment(payment_id)}/refund"
        return await self._effect("refund_payment", path, {}, args, key_fields=("payment_id",))

    # --- rooms ------------------------------------------------------------------------

    async def book_room(
        self, room_id: str, date: str, slot: str, organizer: str = "closedloop", title: str = ""
    ) -> Observation:
        """Book a meeting room for whole hours on a date.

        Args:
            room_id: the room (e.g. "room-3").
            date: the day, YYYY-MM-DD.
            slot: "HH:00" for one hour, or "HH:00-HH:00" for several.
            organizer: who books it.
            title: what the meeting is about.
        """
        args = {
            "room_id": room_id,
            "date": date,
            "slot": slot,
            "organizer": organizer,
            "title": title,
        }
        start, end = parse_slot(slot)
        body = {"date": date, "start": start, "end": end, "organizer": organizer, "title": title}
        return await self._effect(
            "book_room",
            f"/rooms/{segment(room_id)}/bookings",
            body,
            args,
            key_fields=("booking_id",),
            defaults=ROOM_DEFAULTS,
        )

    async def cancel_room_booking(self, booking_id: str) -> Observation:
        """Cancel a meeting-room booking and free its hours.

        Args:
            booking_id: the room booking to cancel (RB-...).
        """
        args = {"booking_id": booking_id}
        path = f"/room-bookings/{segment(booking_id)}/cancel"
        return await self._effect("cancel_room_booking", path, {}, args, key_fields=("booking_id",))

    # --- shop ---------------------------------------------------------------------------

    async def create_order(self, customer: str, items: list[OrderItem]) -> Observation:
        """Order products for a customer (takes stock); pay it with pay(order_id, amount_cny).

        Args:
            customer: who orders.
            items: the lines, each {"sku": "SKU-1001", "quantity": 2}.
        """
        args = {"customer": customer, "items": items}
        body = {
            "customer": customer,
            "items": [{"sku": i["sku"], "quantity": i["quantity"]} for i in items],
        }
        return await self._effect("create_order", "/orders", body, args, key_fields=("order_id",))

    async def cancel_order(self, order_id: str) -> Observation:
        """Cancel an unshipped order; restocks it and refunds its payments.

        Args:
            order_id: the order to cancel (ORD-...).
        """
        args = {"order_id": order_id}
        path = f"/orders/{segment(order_id)}/cancel"
        return await self._effect("cancel_order", path, {}, args, key_fields=("order",))


def _settle(name: str, observation: Observation) -> Observation:
    """Return a 2xx answer; raise what tells the ledger whether the effect happened."""
    if observation.status in (
        ObservationStatus.OK,
        ObservationStatus.PARTIAL,
        ObservationStatus.EMPTY,
    ):
        return observation
    if observation.status is ObservationStatus.RATE_LIMITED:
        wait = observation.retry_after_s
        after = f"; retry after {wait:g} s" if wait is not None else ""
        raise ActionError(f"{name} was not run: the service is rate limiting{after}")
    status = http_status(observation)
    if status is not None and status < 500:
        raise ToolError(observation.meaning)
    if observation.status is ObservationStatus.ERROR and (observation.error or "").startswith(
        "ConnectError"
    ):
        raise ActionError(f"{name} was not sent: {observation.error}")
    raise ReconciliationRequiredError(
        f"{name}: {observation.meaning}; the effect may or may not have happened"
    )
