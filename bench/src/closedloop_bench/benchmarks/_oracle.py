"""The oracle bound: the best success any policy could reach with the same retry budget.

Faults are a pure function of (fault seed, endpoint, request index), so the bound needs
no server: an ideal policy makes a task's ideal calls in order, and retries a call whose
request was faulted, up to ``attempts`` requests per call. A task is oracle-solvable when
every ideal call gets one unfaulted request within its budget. Latency alone is not a
fault (an ideal policy waits); every injected outcome is (an error, a 429, an outage, an
empty answer, schema drift, an effect whose answer was lost).

On a profile with regimes the bound plays the regime chain too: a service's regime moves
with its own request count (requests to any of its endpoints), so the ideal policy's
requests are counted per service and each is planned at its service index. A ``down`` or
``storm`` spell then fails every request it covers, and a call whose attempts all fall
inside one is not solvable within the budget: waiting does not help, as the chain runs
on requests, not time.

A handover is *justified* when the task is impossible (nothing could satisfy it; a
handover or a refusal is its correct end) or its episode was not oracle-solvable: no
policy could have finished it within the budget, so asking a human was the right call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from closedloop._exceptions import ConfigurationError
from closedloop._validation import require_int_at_least

from ..reference import ReferenceTask
from ..world import SERVICES, FaultPlanner, WorldFaultEvent, WorldFaultKind

__all__ = [
    "TOOL_ENDPOINTS",
    "FaultTable",
    "OracleVerdict",
    "fault_summary",
    "faults_from_log",
    "handover_justified",
    "oracle_verdict",
    "planner_faults",
]

FaultTable = Callable[[str, int], bool]
"""``faulted(endpoint, index)``: whether request ``index`` to ``endpoint`` was faulted."""

_NOT_FAULTS = frozenset({WorldFaultKind.LATENCY, WorldFaultKind.SLOW})

TOOL_ENDPOINTS: Mapping[str, str] = {
    "list_cities": "cities",
    "get_weather": "weather",
    "search_flights": "flights",
    "book_flight": "bookings_create",
    "get_booking": "bookings_get",
    "cancel_booking": "bookings_cancel",
    "pay": "payments_create",
    "get_payment": "payments_get",
    "refund_payment": "payments_refund",
    "list_rooms": "rooms",
    "get_room_slots": "room_slots",
    "book_room": "room_bookings_create",
    "cancel_room_booking": "room_bookings_cancel",
    "list_products": "products",
    "create_order": "orders_create",
    "get_order": "orders_get",
    "cancel_order": "orders_cancel",
    "search_documents": "documents",
    "get_document": "documents_get",
}
"""The endpoint each tool's essential request goes to."""


@dataclass(frozen=True, slots=True)
class OracleVerdict:
    """Whether an ideal policy could finish the task, and what it had to absorb.

    ``faulted_requests`` counts the faulted requests the ideal policy met on its way;
    ``failed_call`` is the index of the first ideal call that stayed faulted on every
    attempt (None when solvable).
    """

    solvable: bool
    requests: int
    faulted_requests: int
    failed_call: int | None = None


def planner_faults(planner: FaultPlanner, elapsed_s: float = 0.0) -> FaultTable:
    """The fault table a world's planner implies (``elapsed_s`` for time-based windows;
    request-indexed windows need none). Regimes need each request's service index, which
    a table of (endpoint, index) cannot hold: :func:`oracle_verdict` given the planner
    itself plays them."""

    def faulted(endpoint: str, index: int) -> bool:
        return planner.plan(endpoint, index, elapsed_s).outcome is not None

    return faulted


def _by_table(table: FaultTable) -> Callable[[str, int, int], bool]:
    def faulted(endpoint: str, index: int, _service_index: int) -> bool:
        return table(endpoint, index)

    return faulted


def _regime_faults(planner: FaultPlanner) -> Callable[[str, int, int], bool]:
    def faulted(endpoint: str, index: int, service_index: int) -> bool:
        plan = planner.plan(endpoint, index, 0.0, service_index=service_index)
        return plan.outcome is not None

    return faulted


def faults_from_log(events: Iterable[WorldFaultEvent]) -> FaultTable:
    """The fault table of a fault log: the requests it names with a fault other than
    latency. Requests the log never saw count as unfaulted."""
    hit = {(e.endpoint, e.index) for e in events if e.kind not in _NOT_FAULTS}

    def faulted(endpoint: str, index: int) -> bool:
        return (endpoint, index) in hit

    return faulted


def oracle_verdict(
    task: ReferenceTask, faults: FaultPlanner | FaultTable, attempts: int
) -> OracleVerdict:
    """Play ``task``'s ideal calls against ``faults`` with ``attempts`` requests per call.

    ``faults`` is a world's ``FaultPlanner`` (the ground truth for any request, made or
    not; its regimes played per service, see the module) or a fault table such as
    :func:`faults_from_log` builds.
    """
    require_int_at_least("attempts", attempts, 1)
    played = _regime_faults(faults) if isinstance(faults, FaultPlanner) else _by_table(faults)
    indices: dict[str, int] = {}
    services: dict[str, int] = {}
    requests = faulted_requests = 0
    for position, call in enumerate(task.ideal_trajectory):
        endpoint = TOOL_ENDPOINTS.get(call.tool)
        if endpoint is None:
            raise ConfigurationError("task", task.id, f"tool {call.tool!r} has no known endpoint")
        for _ in range(attempts):
            index = indices.get(endpoint, 0)
            indices[endpoint] = index + 1
            service = SERVICES[endpoint]
            service_index = services.get(service, 0)
            services[service] = service_index + 1
            requests += 1
            if not played(endpoint, index, service_index):
                break
            faulted_requests += 1
        else:
            return OracleVerdict(False, requests, faulted_requests, position)
    return OracleVerdict(True, requests, faulted_requests)


def fault_summary(events: Iterable[WorldFaultEvent]) -> dict[str, int]:
    """Injected faults by kind (latency-only entries are left out: every request has one)."""
    counts: dict[str, int] = {}
    for event in events:
        if event.kind in _NOT_FAULTS:
            continue
        counts[event.kind.value] = counts.get(event.kind.value, 0) + 1
    return dict(sorted(counts.items()))


def handover_justified(*, handed_over: bool, impossible: bool, solvable: bool) -> bool | None:
    """Whether a handover was the right call (see the module docstring); None without one."""
    if not handed_over:
        return None
    return impossible or not solvable
