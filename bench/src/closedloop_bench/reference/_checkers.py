"""Checkers: code predicates that decide whether a run solved its task.

Each reads the run's ``Answer`` and the world after the run (its bookings, payments and
effect log). Read-only tasks fail if the world was changed; booking tasks fail unless
exactly the right effects happened once; impossible tasks succeed only when the run says
so or hands over, and fail whenever it answers with made-up values or acts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from closedloop._exceptions import ConfigurationError

from ..world import World
from ._judge import (
    VALUE_TOLERANCE,
    answered_problem,
    bool_of,
    by_company,
    city_of,
    company_of,
    effects_of,
    fail,
    first_problem,
    number_problem,
    ok,
    quarter_of,
    read_only_problem,
    says_impossible,
    slot_of,
    status_of,
    text_problem,
    to_float,
    value_fields,
    values_problem,
    verdict,
    world_of,
)
from ._tasks import Answer, CheckerVerdict, ReferenceTask

__all__ = ["CHECKERS", "Checker", "check"]

Checker = Callable[[ReferenceTask, Answer, World | None], CheckerVerdict]


# --- checkers -----------------------------------------------------------------------------------


def check_impossible(task: ReferenceTask, answer: Answer, world: World | None) -> CheckerVerdict:
    """No answer exists: success only for a stated impossibility or a handover, no effects."""
    done = effects_of(world)
    if done:
        return fail(f"acted on a task that cannot be done: {', '.join(done[:3])}")
    if status_of(answer) == "answered" or (status_of(answer) is None and value_fields(answer)):
        return fail(f"invented an answer ({task.ground_truth.get('why')}): {value_fields(answer)}")
    if says_impossible(answer):
        how = "handed over" if answer.handed_over else "stated that it cannot be done"
        return ok(f"{how} ({task.ground_truth.get('why')})")
    return fail("neither stated the impossibility nor handed over")


def check_weather_report(
    task: ReferenceTask, answer: Answer, world: World | None
) -> CheckerVerdict:
    t = task.ground_truth
    city = answer.fields.get("city")
    date = answer.fields.get("date")
    return verdict(
        first_problem(
            answered_problem(answer),
            read_only_problem(world),
            number_problem(answer, "temperature_c", t["temperature_c"], 0.05, "temperature"),
            text_problem(answer, "condition", (t["condition"], t["condition_zh"]), "condition"),
            None if city is None or city_of(task, city) == t["city"] else f"city: {city!r}",
            None if date is None or str(date) == t["date"] else f"date: {date!r}",
        ),
        "the weather matches the service's",
    )


def check_weather_extreme(
    task: ReferenceTask, answer: Answer, world: World | None
) -> CheckerVerdict:
    t = task.ground_truth
    city = answer.fields.get("city")
    city_problem = (
        None
        if (city is not None and city_of(task, city) == t["city"])
        or (not answer.fields and (t["city"] in answer.text or t["city_en"] in answer.text))
        else f"city: {city!r} is not {t['city']}"
    )
    return verdict(
        first_problem(
            answered_problem(answer),
            read_only_problem(world),
            city_problem,
            number_problem(answer, "temperature_c", t["temperature_c"], 0.05, "temperature"),
        ),
        f"{t['city']} is the right city",
    )


def check_weather_warmest_day(
    task: ReferenceTask, answer: Answer, world: World | None
) -> CheckerVerdict:
    t = task.ground_truth
    return verdict(
        first_problem(
            answered_problem(answer),
            read_only_problem(world),
            text_problem(answer, "date", (t["date"],), "date"),
            number_problem(answer, "temperature_c", t["temperature_c"], 0.05, "temperature"),
        ),
        f"{t['date']} is the warmest day",
    )


def check_weather_rainy_days(
    task: ReferenceTask, answer: Answer, world: World | None
) -> CheckerVerdict:
    t = task.ground_truth
    return verdict(
        first_problem(
            answered_problem(answer),
            read_only_problem(world),
            number_problem(answer, "rainy_days", t["rainy_days"], 0.0, "rainy days"),
        ),
        f"{t['rainy_days']} rainy days",
    )


def _flight_named(answer: Answer, t: Mapping[str, Any]) -> str | None:
    ids = {*t["flight_ids"], *t["flight_nos"]}
    if answer.fields:
        got = str(answer.fields.get("flight_id") or answer.fields.get("flight_no") or "")
        return None if got.strip() in ids else f"flight: {got!r} is not one of {sorted(ids)}"
    return None if any(i in answer.text for i in ids) else "the answer names no right flight"


def check_flight_cheapest(
    task: ReferenceTask, answer: Answer, world: World | None
) -> CheckerVerdict:
    t = task.ground_truth
    date = t.get("date")
    return verdict(
        first_problem(
            answered_problem(answer),
            read_only_problem(world),
            _flight_named(answer, t),
            number_problem(answer, "price_cny", t["price_cny"], 0.0, "price"),
            None if date is None else text_problem(answer, "date", (date,), "date"),
        ),
        "the cheapest fitting flight",
    )


def check_flight_booked(task: ReferenceTask, answer: Answer, world: World | None) -> CheckerVerdict:
    """Exactly one live, paid booking of a right flight for the passenger; one payment."""
    t = task.ground_truth
    if world is None:
        return fail("a booking task needs the world to check its effects")
    date = t.get("date")
    problem = first_problem(
        answered_problem(answer),
        _flight_named(answer, t),
        number_problem(answer, "price_cny", t["price_cny"], 0.0, "price"),
        None if date is None else text_problem(answer, "date", (date,), "date"),
    )
    if problem:
        return fail(problem)
    live = [b for b in world.bookings.values() if b.status != "cancelled"]
    if len(live) != 1:
        return fail(f"{len(live)} live bookings, not exactly one")
    booking = live[0]
    if booking.flight_id not in t["flight_ids"]:
        return fail(f"booked {booking.flight_id}, not one of {t['flight_ids']}")
    named = answer.fields.get("flight_id")
    if named is not None and named != booking.flight_id and named not in t["flight_nos"]:
        return fail(f"the answer names {named}, but {booking.flight_id} was booked")
    if booking.passenger.strip().casefold() != str(t["passenger"]).strip().casefold():
        return fail(f"booked for {booking.passenger!r}, not {t['passenger']!r}")
    charges = [*world.effects("payments_create"), *world.effects("orders_pay")]
    if len(charges) != 1:
        return fail(f"{len(charges)} payments reached the world, not exactly one")
    paid = [
        p
        for p in world.payments.values()
        if p.order_id == booking.order_id and p.status == "succeeded"
    ]
    if len(paid) != 1 or booking.status != "confirmed":
        return fail(f"booking {booking.booking_id} is {booking.status}, not paid once")
    return ok(f"{booking.flight_id} booked and paid once")


def check_room_available(
    task: ReferenceTask, answer: Answer, world: World | None
) -> CheckerVerdict:
    expected = bool(task.ground_truth["available"])
    got = bool_of(answer, "available")
    return verdict(
        first_problem(
            answered_problem(answer),
            read_only_problem(world),
            None if got is expected else f"available: {got!r}, expected {expected}",
        ),
        f"available={expected}",
    )


def check_weather_and_room(
    task: ReferenceTask, answer: Answer, world: World | None
) -> CheckerVerdict:
    t = task.ground_truth
    got = answer.fields.get("free_slots")
    slots = {slot_of(s) for s in got} if isinstance(got, list) else None
    slot_problem = (
        None
        if slots == set(t["free_slots"])
        else f"free slots: {got!r}, expected {t['free_slots']}"
    )
    return verdict(
        first_problem(
            answered_problem(answer),
            read_only_problem(world),
            number_problem(answer, "temperature_c", t["temperature_c"], 0.05, "temperature"),
            text_problem(answer, "condition", (t["condition"], t["condition_zh"]), "condition"),
            slot_problem,
        ),
        "weather and free slots match",
    )


def check_room_days(task: ReferenceTask, answer: Answer, world: World | None) -> CheckerVerdict:
    want = set(task.ground_truth["free_dates"])
    got = answer.fields.get("free_dates")
    dates = {str(x).strip() for x in got} if isinstance(got, list) else None
    return verdict(
        first_problem(
            answered_problem(answer),
            read_only_problem(world),
            None if dates == want else f"free dates: {got!r}, expected {sorted(want)}",
        ),
        f"free on {len(want)} day(s)",
    )


def _room_booking(world: World, t: Mapping[str, Any]) -> str | None:
    live = [b for b in world.room_bookings.values() if b.status == "confirmed"]
    made = world.effects("room_bookings_create")
    if len(live) != 1 or len(made) != 1:
        return f"{len(live)} live room bookings from {len(made)} booking effects, not one"
    b = live[0]
    hour = int(t["slot"][:2])
    if b.room_id not in t["room_ids"] or b.date.isoformat() != t["date"] or b.hours != (hour,):
        return f"booked {b.room_id} on {b.date} at {b.hours}, not {t['room_ids']} {t['date']} {t['slot']}"
    others = [e for e in effects_of(world) if not e.startswith("room_bookings_create")]
    return f"other effects too: {others[:3]}" if others else None


def check_room_booked(task: ReferenceTask, answer: Answer, world: World | None) -> CheckerVerdict:
    t = task.ground_truth
    if world is None:
        return fail("a booking task needs the world to check its effects")
    booked = [b.room_id for b in world.room_bookings.values() if b.status == "confirmed"]
    room = answer.fields.get("room_id")
    mentioned = any(r in answer.text for r in booked)
    named = (
        None
        if room in booked or (room is None and mentioned)
        else f"the answer names room {room!r}, but {booked} is booked"
    )
    slot = answer.fields.get("slot")
    return verdict(
        first_problem(
            answered_problem(answer),
            _room_booking(world, t),
            named,
            text_problem(answer, "date", (t["date"],), "date") if answer.fields else None,
            None
            if slot is None or slot_of(slot) == t["slot"]
            else f"slot: {slot!r}, expected {t['slot']}",
        ),
        "the room is booked once",
    )


def check_weather_conditional_room(
    task: ReferenceTask, answer: Answer, world: World | None
) -> CheckerVerdict:
    t = task.ground_truth
    got = bool_of(answer, "booked")
    problem = first_problem(
        answered_problem(answer),
        text_problem(answer, "condition", (t["condition"], t["condition_zh"]), "condition"),
        None
        if got is None or got is bool(t["booked"])
        else f"booked: {got}, expected {t['booked']}",
    )
    if problem:
        return fail(problem)
    if t["booked"]:
        if world is None:
            return fail("a booking task needs the world to check its effects")
        return verdict(_room_booking(world, t), "rain, and the room is booked once")
    return verdict(read_only_problem(world), "no rain, nothing booked")


def check_report_figure(task: ReferenceTask, answer: Answer, world: World | None) -> CheckerVerdict:
    t = task.ground_truth
    return verdict(
        first_problem(
            answered_problem(answer),
            read_only_problem(world),
            number_problem(answer, "value", t["value"], VALUE_TOLERANCE, t["metric"]),
        ),
        f"{t['metric']} = {t['value']}",
    )


def check_report_compare(
    task: ReferenceTask, answer: Answer, world: World | None
) -> CheckerVerdict:
    t = task.ground_truth
    winner = company_of(task, answer.fields.get("company", ""))
    return verdict(
        first_problem(
            answered_problem(answer),
            read_only_problem(world),
            None if winner == t["company_id"] else f"company: {answer.fields.get('company')!r}",
            values_problem(
                by_company(task, answer.fields.get("values")), t["values"], VALUE_TOLERANCE
            ),
        ),
        f"{t['company_id']} is higher",
    )


def check_report_trend(task: ReferenceTask, answer: Answer, world: World | None) -> CheckerVerdict:
    t = task.ground_truth
    raw = answer.fields.get("revenues")
    revenues = (
        {q: v for k, v in raw.items() if (q := quarter_of(k)) is not None}
        if isinstance(raw, Mapping)
        else None
    )
    numbers = None if revenues is None else {k: to_float(v) or 0.0 for k, v in revenues.items()}
    outline = answer.fields.get("outline")
    outline_ok = (
        isinstance(outline, list)
        and sum(isinstance(x, str) and bool(x.strip()) for x in outline) >= 3
    )
    return verdict(
        first_problem(
            answered_problem(answer),
            read_only_problem(world),
            values_problem(numbers, t["revenues"], VALUE_TOLERANCE),
            None
            if quarter_of(answer.fields.get("best_quarter", "")) == t["best_quarter"]
            else f"best quarter: {answer.fields.get('best_quarter')!r}",
            None if outline_ok else "the outline needs at least three points",
        ),
        f"revenues right, best quarter {t['best_quarter']}",
    )


def check_report_multi(task: ReferenceTask, answer: Answer, world: World | None) -> CheckerVerdict:
    t = task.ground_truth
    leader = company_of(task, answer.fields.get("leader", ""))
    tol = VALUE_TOLERANCE * len(t["quarters"]) + 0.05
    return verdict(
        first_problem(
            answered_problem(answer),
            read_only_problem(world),
            None if leader == t["company_id"] else f"leader: {answer.fields.get('leader')!r}",
            values_problem(by_company(task, answer.fields.get("totals")), t["totals"], tol),
        ),
        f"{t['company_id']} leads",
    )


CHECKERS: Mapping[str, Checker] = {
    "impossible": check_impossible,
    "weather_report": check_weather_report,
    "weather_extreme": check_weather_extreme,
    "weather_warmest_day": check_weather_warmest_day,
    "weather_rainy_days": check_weather_rainy_days,
    "flight_cheapest": check_flight_cheapest,
    "flight_booked": check_flight_booked,
    "room_available": check_room_available,
    "weather_and_room": check_weather_and_room,
    "room_booked": check_room_booked,
    "room_days": check_room_days,
    "weather_conditional_room": check_weather_conditional_room,
    "report_figure": check_report_figure,
    "report_compare": check_report_compare,
    "report_trend": check_report_trend,
    "report_multi": check_report_multi,
}
"""Every checker by the name tasks refer to."""


def check(task: ReferenceTask, answer: Any, world_handle: Any = None) -> CheckerVerdict:
    """Judge one run of ``task``: its ``answer`` (an Answer, a ``RunResult``, fields or text)
    and ``world_handle`` (the ``WorldHandle`` or ``World`` the run acted on, after the run
    and before any reset; ``None`` only for tasks that change nothing)."""
    checker = CHECKERS.get(task.checker)
    if checker is None:
        raise ConfigurationError("task.checker", task.checker, f"known: {', '.join(CHECKERS)}")
    return checker(task, Answer.of(answer), world_of(world_handle))
