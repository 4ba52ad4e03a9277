"""The world's endpoints by name: what fault profiles key on and what counters count."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

__all__ = ["ENDPOINTS", "EndpointKind", "EndpointSpec"]


class EndpointKind(StrEnum):
    """``read`` changes nothing; ``effect`` changes the world; ``compensation`` undoes one."""

    READ = "read"
    EFFECT = "effect"
    COMPENSATION = "compensation"


@dataclass(frozen=True, slots=True)
class EndpointSpec:
    """One endpoint: its name (the key in fault profiles), method, path and kind.

    ``collection`` names the list field whose emptying is the ``empty`` fault; an
    endpoint without one answers only ``keep_on_empty`` fields when emptied.
    """

    name: str
    method: str
    path: str
    kind: EndpointKind
    collection: str | None = None
    keep_on_empty: tuple[str, ...] = ()

    @property
    def mutating(self) -> bool:
        return self.kind is not EndpointKind.READ


_R, _E, _C = EndpointKind.READ, EndpointKind.EFFECT, EndpointKind.COMPENSATION

_SPECS = (
    EndpointSpec("cities", "GET", "/cities", _R, collection="cities"),
    EndpointSpec("weather", "GET", "/weather", _R, keep_on_empty=("city", "date")),
    EndpointSpec("flights", "GET", "/flights", _R, collection="flights"),
    EndpointSpec("bookings_create", "POST", "/bookings", _E),
    EndpointSpec(
        "bookings_get", "GET", "/bookings/{booking_id}", _R, keep_on_empty=("booking_id",)
    ),
    EndpointSpec("bookings_cancel", "POST", "/bookings/{booking_id}/cancel", _C),
    EndpointSpec("payments_create", "POST", "/payments", _E),
    EndpointSpec(
        "payments_get", "GET", "/payments/{payment_id}", _R, keep_on_empty=("payment_id",)
    ),
    EndpointSpec("payments_refund", "POST", "/payments/{payment_id}/refund", _C),
    EndpointSpec("rooms", "GET", "/rooms", _R, collection="rooms"),
    EndpointSpec("room_slots", "GET", "/rooms/{room_id}/slots", _R, collection="free_slots"),
    EndpointSpec("room_bookings_create", "POST", "/rooms/{room_id}/bookings", _E),
    EndpointSpec("room_bookings_cancel", "POST", "/room-bookings/{booking_id}/cancel", _C),
    EndpointSpec("products", "GET", "/products", _R, collection="products"),
    EndpointSpec("orders_list", "GET", "/orders", _R, collection="orders"),
    EndpointSpec("orders_create", "POST", "/orders", _E),
    EndpointSpec("orders_get", "GET", "/orders/{order_id}", _R, keep_on_empty=("order_id",)),
    EndpointSpec("orders_pay", "POST", "/orders/{order_id}/pay", _E),
    EndpointSpec("orders_cancel", "POST", "/orders/{order_id}/cancel", _C),
    EndpointSpec("documents", "GET", "/documents", _R, collection="documents"),
    EndpointSpec("documents_get", "GET", "/documents/{doc_id}", _R, keep_on_empty=("doc_id",)),
)

ENDPOINTS: Mapping[str, EndpointSpec] = MappingProxyType({s.name: s for s in _SPECS})
