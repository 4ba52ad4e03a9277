"""Weather tasks: one city, several cities, several days, and bad input.

A name that is not the service's own (a typo, an abbreviation, an unknown place) costs
the ideal agent a ``list_cities`` first; the service itself answers for dates.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from ..world import City, WeatherDay
from ._taskgen import LIST_CITIES, Ctx, Lang, impossible_answer, join, make_task
from ._tasks import ReferenceTask, TrajectoryCall
from ._truth import RAIN

__all__ = ["WEATHER_QUOTAS"]

_WEATHER_FIELDS: dict[str, dict[str, Any]] = {
    "city": {"type": "string", "description": "the city, as the weather service names it"},
    "date": {"type": "string", "description": "YYYY-MM-DD"},
    "temperature_c": {"type": "number", "description": "temperature in °C"},
    "condition": {"type": "string", "description": "the condition code, e.g. sunny or light_rain"},
}


def _weather_text(w: WeatherDay, city: City, lang: Lang) -> str:
    if lang == "zh":
        return f"{city.name}{w.date.isoformat()}：{w.condition_zh}，气温{w.temperature_c}°C。"
    return f"{city.name_en} on {w.date.isoformat()}: {w.condition}, {w.temperature_c} °C."


def weather_single(ctx: Ctx) -> ReferenceTask:
    rng, truth = ctx.rng, ctx.truth
    city = rng.choice(ctx.data.cities)
    day = rng.choice(truth.weather_days())
    lang = ctx.lang()
    form = ctx.city_form()
    phrase, lookup = ctx.city_phrase(city, lang, form)
    w = truth.weather(city.name, day)
    assert w is not None
    when = ctx.day_phrase(day, lang)
    prompt = rng.choice(
        (
            f"{when}{phrase}的天气怎么样？请给出气温和天气状况。",
            f"查一下{phrase}{when}的天气。",
            f"{phrase}{when}多少度？什么天气？",
        )
        if lang == "zh"
        else (
            f"What is the weather in {phrase} {when}? Give the temperature and conditions.",
            f"Check the weather for {phrase} {when}.",
        )
    )
    calls = [LIST_CITIES] if lookup else []
    calls.append(
        TrajectoryCall(tool="get_weather", arguments={"city": city.name, "date": day.isoformat()})
    )
    return make_task(
        ctx,
        domain="weather",
        template="weather_single",
        lang=lang,
        prompt=prompt,
        fields=_WEATHER_FIELDS,
        truth={**w.model_dump(mode="json"), "city_en": city.name_en, "code": city.code},
        checker="weather_report",
        trajectory=calls,
        answer_text=_weather_text(w, city, lang),
        answer_fields={
            "city": city.name,
            "date": day.isoformat(),
            "temperature_c": w.temperature_c,
            "condition": w.condition,
        },
        tags=[form] if lookup else [],
    )


def weather_unknown_city(ctx: Ctx) -> ReferenceTask:
    rng = ctx.rng
    lang = ctx.lang()
    names = [n for n in ctx.data.unknown_cities if (n.isascii()) == (lang == "en")]
    place = rng.choice(names or list(ctx.data.unknown_cities))
    when = ctx.day_phrase(rng.choice(ctx.truth.weather_days()), lang)
    prompt = (
        f"{when}{place}的天气怎么样？" if lang == "zh" else f"How is the weather in {place} {when}?"
    )
    text, fields = impossible_answer(
        lang, f"天气服务不提供「{place}」的数据", f"the weather service does not cover {place}"
    )
    return make_task(
        ctx,
        domain="weather",
        template="weather_unknown_city",
        lang=lang,
        prompt=prompt,
        fields=_WEATHER_FIELDS,
        truth={"why": "unknown_city", "city": place},
        checker="impossible",
        trajectory=[LIST_CITIES],
        answer_text=text,
        answer_fields=fields,
        impossible=True,
        tags=["unknown_city"],
    )


def weather_bad_date(ctx: Ctx) -> ReferenceTask:
    rng, data = ctx.rng, ctx.data
    city = rng.choice(data.cities)
    lang = ctx.lang()
    phrase, _ = ctx.city_phrase(city, lang, "canonical")
    kind = rng.choice(("future", "past", "calendar"))
    if kind == "calendar":
        month, day_no = rng.choice(((6, 31), (2, 30), (4, 31), (9, 31)))
        iso = f"{data.today.year}-{month:02d}-{day_no:02d}"
        when = f"{month}月{day_no}日" if lang == "zh" else f"on {iso}"
    else:
        day = (
            data.weather_to + dt.timedelta(days=rng.randint(5, 60))
            if kind == "future"
            else data.weather_from - dt.timedelta(days=rng.randint(5, 60))
        )
        iso = day.isoformat()
        when = ctx.day_phrase(day, lang, relative=False)
    prompt = (
        f"{phrase}{when}的天气如何？"
        if lang == "zh"
        else f"What is the weather in {phrase} {when}?"
    )
    text, fields = impossible_answer(
        lang, f"没有{iso}这一天的天气数据", f"there is no weather data for {iso}"
    )
    return make_task(
        ctx,
        domain="weather",
        template="weather_bad_date",
        lang=lang,
        prompt=prompt,
        fields=_WEATHER_FIELDS,
        truth={"why": f"bad_date:{kind}", "date": iso},
        checker="impossible",
        trajectory=[TrajectoryCall(tool="get_weather", arguments={"city": city.name, "date": iso})],
        answer_text=text,
        answer_fields=fields,
        impossible=True,
        tags=["bad_date"],
    )


def weather_compare(ctx: Ctx) -> ReferenceTask | None:
    rng, truth = ctx.rng, ctx.truth
    k = rng.randint(2, 6)
    cities = rng.sample(list(ctx.data.cities), k)
    day = rng.choice(truth.weather_days())
    lang = ctx.lang()
    warmest = rng.random() < 0.6
    found = [truth.weather(c.name, day) for c in cities]
    ws = [w for w in found if w is not None]
    if len(ws) != k:
        return None
    sign = 1.0 if warmest else -1.0
    ranked = sorted(range(k), key=lambda i: -sign * ws[i].temperature_c)
    if abs(ws[ranked[0]].temperature_c - ws[ranked[1]].temperature_c) < 0.1:
        return None  # a tie has two right answers; draw again
    best, w = cities[ranked[0]], ws[ranked[0]]
    typo_at = rng.randrange(k) if rng.random() < 0.3 else None
    phrases = [
        ctx.city_phrase(c, lang, "typo" if i == typo_at else "canonical")[0]
        for i, c in enumerate(cities)
    ]
    when = ctx.day_phrase(day, lang)
    if lang == "zh":
        word = "最热" if warmest else "最冷"
        prompt = f"{when}{join(phrases, lang)}，哪个城市{word}？给出城市和气温。"
        text = f"{best.name}{word}，{w.temperature_c}°C。"
    else:
        word = "warmest" if warmest else "coldest"
        prompt = (
            f"Which is {word} {when}: {join(phrases, lang)}? Give the city and its temperature."
        )
        text = f"{best.name_en} is the {word}, at {w.temperature_c} °C."
    calls = [LIST_CITIES] if typo_at is not None else []
    calls += [
        TrajectoryCall(tool="get_weather", arguments={"city": c.name, "date": day.isoformat()})
        for c in cities
    ]
    return make_task(
        ctx,
        domain="weather",
        template="weather_compare",
        lang=lang,
        prompt=prompt,
        fields={k_: _WEATHER_FIELDS[k_] for k_ in ("city", "temperature_c")},
        truth={"city": best.name, "city_en": best.name_en, "temperature_c": w.temperature_c},
        checker="weather_extreme",
        trajectory=calls,
        answer_text=text,
        answer_fields={"city": best.name, "temperature_c": w.temperature_c},
        tags=["typo"] if typo_at is not None else [],
    )


def weather_range(ctx: Ctx) -> ReferenceTask | None:
    rng, truth = ctx.rng, ctx.truth
    n = rng.randint(2, 10)
    all_days = truth.weather_days()
    start = rng.randrange(len(all_days) - n + 1)
    days = all_days[start : start + n]
    city = rng.choice(ctx.data.cities)
    lang = ctx.lang()
    form = ctx.city_form((6, 1, 3, 1)) if n <= 9 else "canonical"
    phrase, lookup = ctx.city_phrase(city, lang, form)
    weather = [truth.weather(city.name, d) for d in days]
    if any(w is None for w in weather):
        return None
    ws = [w for w in weather if w is not None]
    first, last = ctx.span_phrase(days[0], days[-1], lang)
    calls = [LIST_CITIES] if lookup else []
    calls += [
        TrajectoryCall(tool="get_weather", arguments={"city": city.name, "date": d.isoformat()})
        for d in days
    ]
    if rng.random() < 0.5:
        temps = sorted((w.temperature_c for w in ws), reverse=True)
        if temps[0] - temps[1] < 0.1:
            return None
        top = max(ws, key=lambda w: w.temperature_c)
        prompt = (
            f"{phrase}从{first}到{last}这{n}天里，哪一天气温最高？给出日期和气温。"
            if lang == "zh"
            else f"In {phrase}, which day from {first} to {last} ({n} days) is the warmest? "
            "Give the date and the temperature."
        )
        text = (
            f"{top.date.isoformat()}最热，{top.temperature_c}°C。"
            if lang == "zh"
            else f"{top.date.isoformat()} is the warmest, at {top.temperature_c} °C."
        )
        fields = {k: _WEATHER_FIELDS[k] for k in ("date", "temperature_c")}
        truth_v: dict[str, Any] = {"date": top.date.isoformat(), "temperature_c": top.temperature_c}
        checker = "weather_warmest_day"
    else:
        rainy = sum(w.condition in RAIN for w in ws)
        prompt = (
            f"{phrase}从{first}到{last}这{n}天里，有几天下雨（小雨、中雨、雷阵雨都算）？"
            if lang == "zh"
            else f"How many of the {n} days from {first} to {last} are rainy in {phrase} "
            "(light rain, rain or thunderstorms)?"
        )
        text = f"共有{rainy}天下雨。" if lang == "zh" else f"{rainy} of those days are rainy."
        fields = {"rainy_days": {"type": "integer", "description": "the number of rainy days"}}
        truth_v = {"rainy_days": rainy, "days": [d.isoformat() for d in days]}
        checker = "weather_rainy_days"
    return make_task(
        ctx,
        domain="weather",
        template="weather_range",
        lang=lang,
        prompt=prompt,
        fields=fields,
        truth={**truth_v, "city": city.name},
        checker=checker,
        trajectory=calls,
        answer_text=text,
        answer_fields={k: v for k, v in truth_v.items() if k != "days"},
        tags=[form] if lookup else [],
    )


WEATHER_QUOTAS = (
    (weather_single, 20),
    (weather_unknown_city, 7),
    (weather_bad_date, 7),
    (weather_compare, 20),
    (weather_range, 30),
)
"""(template, tasks per split)."""
