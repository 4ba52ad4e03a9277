"""The flight-booking agent: a hybrid controller, effects through the ledger.

Control design:

* **Rules read the request**: the route (cities by ``CityNormaliser`` on the service's own
  list), the dates (one day, a window "day by day up to …", or "which day is cheapest"),
  the budget, the passenger, and whether to book and pay.
* **The hybrid controller decides on price**. Its error is the price gap,
  ``max(0, cheapest fare with seats − budget)``; inside the tolerance (no gap) it keeps the
  fare. Outside it, registered rules propose, best first: the next date of the user's
  window; past the window, a near miss (gap ≤ ``max(50, 0.1 × budget)``, the dynamic
  tolerance) widens to ±1–3 days to name an alternative; a far miss concludes. The budget
  stays a constraint: an alternative is reported, never booked, when the user fixed the day.
* **Faults**: 503 → retry (there is no other source; the same request is asked again in
  the equivalent form by city codes), 429 → back off with Retry-After, empty → widen the
  query (codes, then other dates). Retries run in the executor with the PID's attempts,
  delay and timeout.
* **Effects** (``book_flight``, ``pay``, ``cancel_booking``, ``cancel_order``) run through
  the loop's effect ledger: the world sees the ledger's idempotency key, a retry or a lost
  answer never books or charges twice (the reconciler asks the world what happened), and
  preconditions ask the world before repeating one (and retry their own reads). Book, then
  pay, then verify the order (``get_order``, a non-core step dimension reduction may
  skip). A payment that still fails after the executor's retries, or an order not paid
  after payment, is compensated (cancelling refunds what was paid) and handed to a person;
  if the ESO has already escalated to ``manual_handover``, the compensation is the frozen
  action the person approves.

Steps that use the model: only a Chinese city name no rule can place (see
``Rules.places``); every other step is rules.

    async with build_flight_agent(None, base_url=world.base_url, store=SQLiteStore("s.db")) as a:
        result = await a.run("帮张伟订一张明天从北京到上海最便宜的航班，并完成付款。")
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from closedloop.agent import ControlConfig
from closedloop.decision import (
    OUT_OF_TOLERANCE,
    DecisionContext,
    HybridController,
    Proposal,
    RuleRegistry,
    Trigger,
)
from closedloop.feedback import StateStore
from closedloop.models import Model
from closedloop.perception import Observation

from ._agents_common import (
    Move,
    ReferenceAgent,
    Rules,
    Seen,
    Turn,
    ask_human,
    call,
    chunks,
    date_range,
    final,
    find_dates,
    impossible,
    pick,
    task_runner,
    valid_date,
    words,
)

__all__ = ["FlightRules", "build_flight_agent", "price_tolerance", "run_flight"]

_LEXICON = words(
    "帮我查 最便宜的 最便宜 还有余票的 还有余票 有余票 余票 航班 是哪一班 多少钱 从 到 飞 之间 哪天 要有 "
    "给出 日期 票价 我要 出发 预算内 预算 元以内 以内 当天没有就往后一天一天地查 最晚 找到 最早那天 告诉我 "
    "订一张 一张 订下来并付款 下来并付款 并完成付款 订下那一班并付款 下那一班并付款 只看 当天 的 和 并 查 帮 订"
)
_PASSENGER = re.compile(
    r"帮(?!我)(?P<zh>[\u4e00-\u9fffA-Za-z ]{1,16}?)订"
    r"|\bfor (?P<en>[A-Z][\w'-]*(?: [A-Z][\w'-]*)*|[\u4e00-\u9fff]{2,4})"
)
_BUDGET = re.compile(r"预算\s*(\d+)\s*元|within\s+(\d+)\s*(?:CNY|RMB|yuan|元)", re.IGNORECASE)


def price_tolerance(budget: float) -> float:
    """A dynamic threshold: ``max(50, 0.1 × budget)``, so small price moves cause no retry."""
    return max(50.0, 0.1 * budget)


def _price_rules() -> RuleRegistry:
    registry = RuleRegistry()

    @registry.on(OUT_OF_TOLERANCE, name="next_date")
    def next_date(ctx: DecisionContext, _t: Trigger) -> Proposal | None:
        left = ctx.context["window_left"]
        if not left:
            return None
        return Proposal("search", 0.9, f"over budget by {ctx.error:g}; next day", {"date": left[0]})

    @registry.on(OUT_OF_TOLERANCE, name="widen_dates")
    def widen(ctx: DecisionContext, _t: Trigger) -> Proposal | None:
        tol, extra = price_tolerance(ctx.context["budget"]), ctx.context["extra_left"]
        if ctx.context["window_left"] or ctx.error > tol or not extra:
            return None
        why = f"a near miss ({ctx.error:g} <= {tol:g}): look ±1-3 days for an alternative"
        return Proposal("search", 0.8, why, {"date": extra[0], "alternative": True})

    @registry.on(OUT_OF_TOLERANCE, name="conclude")
    def conclude(ctx: DecisionContext, _t: Trigger) -> Proposal | None:
        return Proposal("conclude", 0.7, "no fare within budget in the window")

    return registry


class FlightRules(Rules):
    """The flight agent's decisions for one task (see the module docstring)."""

    tools = ("list_cities", "search_flights", "get_order")
    noncore = ("get_order",)
    effects = ("cancel_booking", "cancel_order")

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        self.controller = HybridController(
            _price_rules(), tolerance=0.0, error_fn=lambda _s, c: float(c["gap"])
        )

    def extra_tools(self) -> list[Any]:
        actions = self.ctx.world.actions
        return [
            self.ctx.reads.patient(actions["book_flight"]),
            self.ctx.reads.patient(actions["pay"]),
        ]

    # --- the request -------------------------------------------------------------------------

    async def _intent(self, turn: Turn, cities: list[dict[str, Any]]) -> dict[str, Any] | Move:
        prompt, lang = self.ctx.prompt, self.ctx.lang
        dates = find_dates(prompt, self.ctx.today)
        masked = [(d.start, d.end) for d in dates]
        passenger = _PASSENGER.search(prompt)
        if passenger:
            masked.append(passenger.span())
        pieces = [p.value for p in chunks(prompt, masked, _LEXICON)]
        placed = await self.places(turn, pieces, cities, "search_flights", needed=2)
        if isinstance(placed, Move):
            return placed
        route = list(dict.fromkeys(r["name"] for r, _ in placed))
        if len(route) != 2:
            return ask_human(f"the request names {len(route)} cities, not a route: {route}")
        days = [d.value for d in dates] or [self.ctx.today.isoformat()]
        for day in days:
            if not valid_date(day):
                return impossible(lang, f"日历上没有{day}这一天", f"there is no such date as {day}")
        found = _BUDGET.search(prompt)
        budget = int(found.group(1) or found.group(2)) if found else None
        ranged = len(days) > 1 and not re.search(r"只看|\bonly\b", prompt)
        window = date_range(days[0], days[1]) if ranged else days[:1]
        cheapest_day = re.search(r"哪天|which day", prompt, re.IGNORECASE) is not None
        rows = {r["name"]: r for r, _ in placed}
        who = passenger and (passenger["zh"] or passenger["en"])
        return {
            "route": (rows[route[0]], rows[route[1]]),
            "window": window,
            "budget": budget,
            "mode": "cheapest_day" if cheapest_day else "budget" if budget else "single",
            "book": re.search(r"付款|\bpay\b", prompt, re.IGNORECASE) is not None,
            "passenger": who.strip() if who else None,
        }

    # --- searching -----------------------------------------------------------------------------

    def _search(self, turn: Turn, route: Any, day: str) -> list[dict[str, Any]] | Move:
        """Flights with seats on ``day``; [] when the service says there are none."""
        origin, dest = route
        last: Seen | None = None
        for a, b in ((origin["name"], dest["name"]), (origin["code"], dest["code"])):
            last = turn.facts.seen("search_flights", from_city=a, to_city=b, date=day)
            if last is None:
                return call("search_flights", from_city=a, to_city=b, date=day)
            if last.ok:
                flights = pick(last.value, "flights") or []
                return [f for f in flights if int(pick(f, "seats_left") or 0) > 0]
            if last.problem is not None:
                detail = str(last.problem.get("detail", last.problem["error"]))
                return impossible(self.ctx.lang, f"航班服务拒绝了查询：{detail}", detail)
        if last is not None and last.empty:
            return []
        return ask_human(f"search_flights failed for {day} in every form")

    async def _choose(
        self, turn: Turn, intent: dict[str, Any]
    ) -> tuple[str, dict[str, Any]] | Move:
        """The day and the flight to take (the hybrid controller decides on price)."""
        route, window, mode = intent["route"], intent["window"], intent["mode"]
        cap = float(intent["budget"]) if intent["budget"] is not None else float("inf")
        first, last = dt.date.fromisoformat(window[0]), dt.date.fromisoformat(window[-1])
        extras = [
            d.isoformat()
            for k in (1, 2, 3)
            for d in (last + dt.timedelta(days=k), first - dt.timedelta(days=k))
            if d >= self.ctx.today
        ]
        best: dict[str, dict[str, Any]] = {}
        queue, i, alternative = list(window), 0, None
        while i < len(queue):
            day = queue[i]
            i += 1
            flights = self._search(turn, route, day)
            if isinstance(flights, Move):
                return flights
            fitting = sorted(
                (f for f in flights if float(pick(f, "price_cny") or 0) <= cap),
                key=lambda f: float(pick(f, "price_cny")),
            )
            if mode != "budget":
                if fitting:
                    best[day] = fitting[0]
                continue
            prices = [float(pick(f, "price_cny")) for f in flights if pick(f, "price_cny")]
            gap = max(0.0, min(prices) - cap) if prices else 1e9
            seen = Observation.ok({"day": day, "flights": len(flights)}, source="search_flights")
            decision = await self.controller.decide(
                [seen],
                {
                    "gap": gap,
                    "budget": cap,
                    "window_left": [d for d in window if d not in queue[:i]],
                    "extra_left": [d for d in extras if d not in queue],
                },
            )
            if decision.action == "maintain":  # no gap: a fare within the budget
                if day in window:
                    return day, fitting[0]
                alternative = (day, fitting[0])
                break
            if decision.action != "search":
                break
            if decision.params["date"] not in queue:
                queue.append(str(decision.params["date"]))
        if best:
            day = min(best, key=lambda d: (float(pick(best[d], "price_cny")), d))
            return day, best[day]
        lang = self.ctx.lang
        if mode != "budget":
            return impossible(
                lang, "这条航线在这些日期没有有余票的航班", "no flight with seats left"
            )
        budget = intent["budget"]
        span = f"{window[0]}至{window[-1]}" if len(window) > 1 else window[0]
        zh, en = f"{span}没有{budget}元以内的航班", f"no flight within {budget} CNY on {span}"
        if alternative is not None:
            day, f = alternative
            zh += f"；{day}有{pick(f, 'flight_no')}，{pick(f, 'price_cny')}元（未预订）"
            en += f"; {day} has {pick(f, 'flight_no')} at {pick(f, 'price_cny')} CNY (not booked)"
        return impossible(lang, zh, en)

    # --- booking -----------------------------------------------------------------------------

    def _book(self, turn: Turn, intent: dict[str, Any], flight: dict[str, Any]) -> Move | None:
        """The next booking move, or None once the flight is booked, paid and verified."""
        facts, passenger = turn.facts, intent["passenger"]
        flight_id = str(pick(flight, "flight_id"))
        booked = facts.seen("book_flight", flight_id=flight_id, passenger=passenger)
        if booked is None:
            return call("book_flight", flight_id=flight_id, passenger=passenger)
        if not booked.ok or not booked.get("order_id"):
            return ask_human(f"book_flight {flight_id} failed: {booked.meaning}")
        # A booking whose answer was lost is reconciled from the orders: no booking id then.
        booking, order = booked.get("booking_id"), str(booked.get("order_id"))
        amount = booked.get("amount_due_cny") or pick(flight, "price_cny")
        paid = facts.seen("pay", order_id=order, amount_cny=amount)
        if paid is None:
            return call("pay", order_id=order, amount_cny=amount)
        # The executor already retried it; an uncertain outcome is settled by reading the order.
        uncertain = not paid.ok and "may or may not have taken effect" in paid.meaning
        if not paid.ok and not uncertain:
            return self._compensate(turn, booking, order, f"payment failed: {paid.meaning}")
        verified = facts.seen("get_order", order_id=order)
        if verified is None and (uncertain or not facts.skipped("get_order")):
            return call("get_order", order_id=order)
        # An order that could not be read leaves the payment's own postcondition standing.
        complete = verified is not None and verified.status == "ok"
        if (complete and verified is not None and verified.get("status") != "paid") or (
            uncertain and not complete
        ):
            status = verified.get("status") if verified is not None else None
            why = f"order {order} is {status!r} after payment"
            return self._compensate(turn, booking, order, why)
        return None

    def _compensate(self, turn: Turn, booking: str | None, order: str, why: str) -> Move:
        """Undo the booking (cancelling refunds what was paid), then ask a person."""
        tool, args = ("cancel_order", {"order_id": order})
        if booking:
            tool, args = "cancel_booking", {"booking_id": booking}
        undone = turn.facts.seen(tool, **args)
        if undone is None:
            return call(tool, **args)
        state = "cancelled and refunded" if undone.ok else f"NOT cancelled ({undone.meaning})"
        return ask_human(f"{why}; the booking was {state}")

    async def decide(self, turn: Turn) -> Move:
        cities = self.directory(turn, "cities", "list_cities", "cities")
        if not isinstance(cities, list):
            return cities
        intent = await self._intent(turn, cities)
        if isinstance(intent, Move):
            return intent
        chosen = await self._choose(turn, intent)
        if isinstance(chosen, Move):
            return chosen
        day, flight = chosen
        if intent["book"]:
            if not intent["passenger"]:
                return ask_human("who is the passenger?")
            move = self._book(turn, intent, flight)
            if move is not None:
                return move
        flight_id, price = str(pick(flight, "flight_id")), int(pick(flight, "price_cny"))
        no = pick(flight, "flight_no") or flight_id
        zh = f"{day}：{no}（{flight_id}），{price}元" + (
            "，已订票并付款。" if intent["book"] else "。"
        )
        en = f"{day}: {no} ({flight_id}), {price} CNY" + (
            ", booked and paid." if intent["book"] else "."
        )
        fields: dict[str, Any] = {"flight_id": flight_id, "price_cny": price}
        props = (
            self.ctx.task.required_fields.get("properties", {}) if self.ctx.task else {"date": 1}
        )
        if "date" in props:
            fields["date"] = day
        return final(zh if self.ctx.lang == "zh" else en, **fields)


def build_flight_agent(
    model: Model | str | None,
    *,
    base_url: str,
    control: ControlConfig | None = None,
    store: StateStore | None = None,
    **options: Any,
) -> ReferenceAgent:
    """The flight agent on the world at ``base_url`` (``options``: see ``ReferenceAgent``)."""
    return ReferenceAgent(
        FlightRules, model, base_url=base_url, domain="flight", control=control, store=store,
        **options,
    )  # fmt: skip


run_flight = task_runner(build_flight_agent, "flight")
