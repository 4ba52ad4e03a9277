"""Flight tasks: the cheapest fare, other dates when over budget, booking
and paying once, and the bad inputs (no route, unknown city, past date, no budget fits).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from ..world import City
from ._taskgen import LIST_CITIES, PASSENGERS, Ctx, Lang, impossible_answer, make_task
from ._tasks import ReferenceTask, TrajectoryCall

__all__ = ["FLIGHT_QUOTAS"]

_FLIGHT_FIELDS: dict[str, dict[str, Any]] = {
    "flight_id": {"type": "string", "description": "the flight's id from search_flights"},
    "price_cny": {"type": "integer", "description": "the fare in CNY"},
}
_DATED_FIELDS: dict[str, dict[str, Any]] = {
    "date": {"type": "string", "description": "YYYY-MM-DD"},
    **_FLIGHT_FIELDS,
}


def _route(ctx: Ctx) -> tuple[City, City]:
    origin, dest = ctx.rng.choice(sorted(ctx.truth.routes))
    return ctx.truth.by_code[origin], ctx.truth.by_code[dest]


def _search(o: City, d: City, day: dt.date | str) -> TrajectoryCall:
    date = day if isinstance(day, str) else day.isoformat()
    return TrajectoryCall(
        tool="search_flights", arguments={"from_city": o.name, "to_city": d.name, "date": date}
    )


def _route_phrases(ctx: Ctx, o: City, d: City, lang: Lang) -> tuple[str, str, bool]:
    typo_side = ctx.rng.choice((0, 1)) if ctx.rng.random() < 0.25 else None
    a, la = ctx.city_phrase(o, lang, "typo" if typo_side == 0 else "canonical")
    b, lb = ctx.city_phrase(d, lang, "typo" if typo_side == 1 else "canonical")
    return a, b, la or lb


def flight_cheapest(ctx: Ctx) -> ReferenceTask | None:
    rng, truth = ctx.rng, ctx.truth
    o, d = _route(ctx)
    day = rng.choice(truth.schedule_days())
    best = truth.cheapest(truth.flights(o.code, d.code, day))
    if not best:
        return None
    lang = ctx.lang()
    a, b, lookup = _route_phrases(ctx, o, d, lang)
    when = ctx.day_phrase(day, lang)
    f = best[0]
    prompt = (
        f"{when}从{a}到{b}最便宜的、还有余票的航班是哪一班？多少钱？"
        if lang == "zh"
        else f"What is the cheapest flight with seats left from {a} to {b} {when}, and its fare?"
    )
    text = (
        f"最便宜的是{f.flight_no}（{f.flight_id}），{f.depart_time}起飞，{f.price_cny}元。"
        if lang == "zh"
        else f"The cheapest is {f.flight_no} ({f.flight_id}) at {f.depart_time}, {f.price_cny} CNY."
    )
    return make_task(
        ctx,
        domain="flight",
        template="flight_cheapest",
        lang=lang,
        prompt=prompt,
        fields=_FLIGHT_FIELDS,
        truth={
            "flight_ids": [x.flight_id for x in best],
            "flight_nos": [x.flight_no for x in best],
            "price_cny": f.price_cny,
        },
        checker="flight_cheapest",
        trajectory=[*([LIST_CITIES] if lookup else []), _search(o, d, day)],
        answer_text=text,
        answer_fields={"flight_id": f.flight_id, "price_cny": f.price_cny},
        tags=["typo"] if lookup else [],
    )


def flight_impossible(ctx: Ctx) -> ReferenceTask | None:
    """No route, an unknown city, a past date or a date beyond the schedule."""
    rng, truth, data = ctx.rng, ctx.truth, ctx.data
    lang = ctx.lang()
    kind = rng.choice(("no_route", "unknown_city", "past", "future"))
    o, d = _route(ctx)
    day: dt.date = rng.choice(truth.schedule_days())
    a, b = ctx.city_phrase(o, lang, "canonical")[0], ctx.city_phrase(d, lang, "canonical")[0]
    calls: list[TrajectoryCall]
    if kind == "no_route":
        o, d = rng.sample(list(data.cities), 2)
        if (o.code, d.code) in truth.routes:
            return None
        a, b = ctx.city_phrase(o, lang, "canonical")[0], ctx.city_phrase(d, lang, "canonical")[0]
        calls = [_search(o, d, day)]
        zh, en = (
            f"{o.name}和{d.name}之间没有航线",
            f"no flights connect {o.name_en} and {d.name_en}",
        )
    elif kind == "unknown_city":
        place = rng.choice([n for n in data.unknown_cities if n.isascii() == (lang == "en")])
        a, b = (place, b) if rng.random() < 0.5 else (a, place)
        calls = [LIST_CITIES]
        zh, en = f"航班服务不认识「{place}」", f"the flight service does not know {place}"
    else:
        day = (
            data.today - dt.timedelta(days=rng.randint(1, 20))
            if kind == "past"
            else data.schedule_to + dt.timedelta(days=rng.randint(3, 40))
        )
        calls = [_search(o, d, day)]
        zh = f"{day.isoformat()}" + ("已经过去" if kind == "past" else "还没有排班")
        en = f"{day.isoformat()} is " + ("in the past" if kind == "past" else "not scheduled yet")
    when = ctx.day_phrase(day, lang, relative=kind not in ("past", "future"))
    if kind == "past" and lang == "zh" and (data.today - day).days == 1:
        when = "昨天"
    prompt = (
        f"帮我查{when}从{a}飞{b}最便宜的航班。"
        if lang == "zh"
        else f"Find me the cheapest flight from {a} to {b} {when}."
    )
    text, fields = impossible_answer(lang, zh, en)
    return make_task(
        ctx,
        domain="flight",
        template="flight_impossible",
        lang=lang,
        prompt=prompt,
        fields=_FLIGHT_FIELDS,
        truth={"why": kind},
        checker="impossible",
        trajectory=calls,
        answer_text=text,
        answer_fields=fields,
        impossible=True,
        tags=[kind],
    )


def _window(
    ctx: Ctx, max_steps: int
) -> tuple[City, City, list[dt.date], int | None, int, dt.date | None] | None:
    """A route, a window of dates and a budget; the index of the first date within it."""
    rng, truth = ctx.rng, ctx.truth
    o, d = _route(ctx)
    days_all = truth.schedule_days()
    w = rng.randint(1, min(10, max_steps))
    start = rng.randrange(len(days_all) - w + 1)
    days = days_all[start : start + w]
    lows = [
        min((f.price_cny for f in truth.flights(o.code, d.code, x) if f.seats > 0), default=None)
        for x in days
    ]
    known = [p for p in lows if p is not None]
    if not known:
        return None
    if rng.random() < 0.3:  # nothing within budget: a budget below every fare in the window
        gap = rng.choice((30, 60, 120, 300, 10_000))
        budget = max(100, (min(known) - gap) // 10 * 10)
        if budget >= min(known):
            return None
        return o, d, days, None, budget, None
    candidates = []
    for j, p in enumerate(lows):
        before = [q for q in lows[:j] if q is not None]
        if p is not None and (not before or p < min(before)) and j + 1 <= max_steps:
            candidates.append((j, p, min(before) if before else p + 200))
    j, low, ceiling = rng.choice(candidates)
    budget = rng.randrange(low, max(low + 1, ceiling), 10) if ceiling > low else low
    return o, d, days, j, budget, days[j]


def flight_budget_window(ctx: Ctx, *, book: bool = False) -> ReferenceTask | None:
    drawn = _window(ctx, 8 if book else 10)
    if drawn is None:
        return None
    o, d, days, j, budget, found = drawn
    truth, lang = ctx.truth, ctx.lang()
    a, b = ctx.city_phrase(o, lang, "canonical")[0], ctx.city_phrase(d, lang, "canonical")[0]
    first, last = ctx.span_phrase(days[0], days[-1], lang)
    passenger = ctx.rng.choice(PASSENGERS)
    if lang == "zh":
        span = f"只看{first}当天" if len(days) == 1 else f"当天没有就往后一天一天地查，最晚{last}"
        ask = f"帮{passenger}订下来并付款" if book else "告诉我日期、航班和票价"
        prompt = f"我要从{a}飞{b}，{first}出发，预算{budget}元以内（要有余票）。{span}。找到预算内最早那天最便宜的航班，{ask}。"
    else:
        span = (
            f"only {first}"
            if len(days) == 1
            else f"from {first}, one day later at a time, up to {last}"
        )
        ask = (
            f"book it for {passenger} and pay" if book else "give the date, the flight and the fare"
        )
        prompt = (
            f"I need a flight from {a} to {b} within {budget} CNY (with seats left), {span}. "
            f"Take the earliest date with such a flight, its cheapest one, and {ask}."
        )
    template = "flight_book_budget" if book else "flight_budget_window"
    if j is None or found is None:
        text, fields = impossible_answer(
            lang,
            f"{days[0].isoformat()}到{days[-1].isoformat()}之间没有{budget}元以内的航班",
            f"no flight within {budget} CNY from {days[0].isoformat()} to {days[-1].isoformat()}",
        )
        return make_task(
            ctx,
            domain="flight",
            template=template,
            lang=lang,
            prompt=prompt,
            fields=_DATED_FIELDS,
            truth={"why": "over_budget", "budget": budget},
            checker="impossible",
            trajectory=[_search(o, d, x) for x in days],
            answer_text=text,
            answer_fields=fields,
            impossible=True,
            tags=["over_budget", *(["effect"] if book else [])],
        )
    best = truth.cheapest(truth.flights(o.code, d.code, found), budget)
    f = best[0]
    calls = [_search(o, d, x) for x in days[: j + 1]]
    if book:
        calls += _book_calls(f.flight_id, passenger, f.price_cny)
    text = (
        f"{found.isoformat()}有预算内航班：{f.flight_no}（{f.flight_id}），{f.price_cny}元"
        + ("，已订票并付款。" if book else "。")
        if lang == "zh"
        else f"On {found.isoformat()}: {f.flight_no} ({f.flight_id}) for {f.price_cny} CNY"
        + (", booked and paid." if book else ".")
    )
    return make_task(
        ctx,
        domain="flight",
        template=template,
        lang=lang,
        prompt=prompt,
        fields=_DATED_FIELDS,
        truth={
            "date": found.isoformat(),
            "flight_ids": [x.flight_id for x in best],
            "flight_nos": [x.flight_no for x in best],
            "price_cny": f.price_cny,
            "budget": budget,
            **({"passenger": passenger} if book else {}),
        },
        checker="flight_booked" if book else "flight_cheapest",
        trajectory=calls,
        answer_text=text,
        answer_fields={
            "date": found.isoformat(),
            "flight_id": f.flight_id,
            "price_cny": f.price_cny,
        },
        tags=["budget", *(["effect"] if book else [])],
    )


def flight_book_budget(ctx: Ctx) -> ReferenceTask | None:
    return flight_budget_window(ctx, book=True)


def _book_calls(flight_id: str, passenger: str, price: int) -> list[TrajectoryCall]:
    return [
        TrajectoryCall(
            tool="book_flight", arguments={"flight_id": flight_id, "passenger": passenger}
        ),
        TrajectoryCall(
            tool="pay", arguments={"order_id": "$book_flight.order_id", "amount_cny": price}
        ),
    ]


def flight_book(ctx: Ctx) -> ReferenceTask | None:
    rng, truth = ctx.rng, ctx.truth
    o, d = _route(ctx)
    day = rng.choice(truth.schedule_days())
    best = truth.cheapest(truth.flights(o.code, d.code, day))
    if not best:
        return None
    f = best[0]
    lang = ctx.lang()
    a, b, lookup = _route_phrases(ctx, o, d, lang)
    when = ctx.day_phrase(day, lang)
    passenger = rng.choice(PASSENGERS)
    prompt = (
        f"帮{passenger}订一张{when}从{a}到{b}最便宜的有余票航班，并完成付款。"
        if lang == "zh"
        else f"Book the cheapest flight with seats from {a} to {b} {when} for {passenger}, and pay."
    )
    text = (
        f"已为{passenger}订好{f.flight_no}（{f.flight_id}），{f.price_cny}元，已付款。"
        if lang == "zh"
        else f"Booked {f.flight_no} ({f.flight_id}) for {passenger}: {f.price_cny} CNY, paid."
    )
    return make_task(
        ctx,
        domain="flight",
        template="flight_book",
        lang=lang,
        prompt=prompt,
        fields=_FLIGHT_FIELDS,
        truth={
            "flight_ids": [x.flight_id for x in best],
            "flight_nos": [x.flight_no for x in best],
            "price_cny": f.price_cny,
            "passenger": passenger,
        },
        checker="flight_booked",
        trajectory=[
            *([LIST_CITIES] if lookup else []),
            _search(o, d, day),
            *_book_calls(f.flight_id, passenger, f.price_cny),
        ],
        answer_text=text,
        answer_fields={"flight_id": f.flight_id, "price_cny": f.price_cny},
        tags=["effect", *(["typo"] if lookup else [])],
    )


def flight_cheapest_day(ctx: Ctx, *, book: bool = False) -> ReferenceTask | None:
    """The cheapest day to fly within a window (every day searched), optionally booked."""
    rng, truth = ctx.rng, ctx.truth
    o, d = _route(ctx)
    n = rng.randint(2, 8 if book else 10)
    days_all = truth.schedule_days()
    start = rng.randrange(len(days_all) - n + 1)
    days = days_all[start : start + n]
    lows = {x: truth.cheapest(truth.flights(o.code, d.code, x)) for x in days}
    priced = sorted((fs[0].price_cny, x) for x, fs in lows.items() if fs)
    if not priced or (len(priced) > 1 and priced[0][0] == priced[1][0]):
        return None  # two days at one price: two right answers
    price, day = priced[0]
    best = lows[day]
    f = best[0]
    lang = ctx.lang()
    a, b = ctx.city_phrase(o, lang, "canonical")[0], ctx.city_phrase(d, lang, "canonical")[0]
    first, last = ctx.span_phrase(days[0], days[-1], lang)
    passenger = rng.choice(PASSENGERS)
    if lang == "zh":
        ask = f"帮{passenger}订下那一班并付款" if book else "给出日期、航班和票价"
        prompt = f"{first}到{last}之间，哪天从{a}飞{b}最便宜（要有余票）？{ask}。"
        text = f"{day.isoformat()}最便宜：{f.flight_no}（{f.flight_id}），{price}元" + (
            "，已订票付款。" if book else "。"
        )
    else:
        ask = (
            f"Book that flight for {passenger} and pay."
            if book
            else "Give the date, flight and fare."
        )
        prompt = (
            f"Which day from {first} to {last} has the cheapest flight with seats from {a} "
            f"to {b}? {ask}"
        )
        text = f"{day.isoformat()}: {f.flight_no} ({f.flight_id}), {price} CNY" + (
            ", booked and paid." if book else "."
        )
    calls = [_search(o, d, x) for x in days]
    if book:
        calls += _book_calls(f.flight_id, passenger, price)
    return make_task(
        ctx,
        domain="flight",
        template="flight_book_cheapest_day" if book else "flight_cheapest_day",
        lang=lang,
        prompt=prompt,
        fields=_DATED_FIELDS,
        truth={
            "date": day.isoformat(),
            "flight_ids": [x.flight_id for x in best],
            "flight_nos": [x.flight_no for x in best],
            "price_cny": price,
            **({"passenger": passenger} if book else {}),
        },
        checker="flight_booked" if book else "flight_cheapest",
        trajectory=calls,
        answer_text=text,
        answer_fields={"date": day.isoformat(), "flight_id": f.flight_id, "price_cny": price},
        tags=["effect"] if book else [],
    )


def flight_book_cheapest_day(ctx: Ctx) -> ReferenceTask | None:
    return flight_cheapest_day(ctx, book=True)


FLIGHT_QUOTAS = (
    (flight_cheapest, 12),
    (flight_impossible, 16),
    (flight_budget_window, 20),
    (flight_cheapest_day, 16),
    (flight_book, 14),
    (flight_book_budget, 10),
    (flight_book_cheapest_day, 12),
)
"""(template, tasks per split)."""
