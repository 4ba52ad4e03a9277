"""Meeting-room tasks with weather: an empty slot list is "no room", never
"any room"; booking is an effect that must happen once, and only when it may.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from ..world import Room
from ._taskgen import LIST_CITIES, PASSENGERS, Ctx, Lang, impossible_answer, make_task
from ._tasks import ReferenceTask, TrajectoryCall
from ._truth import OPEN_HOURS, RAIN

__all__ = ["MEETING_QUOTAS"]

_EQUIPMENT_ZH = {
    "projector": "投影仪",
    "video": "视频会议设备",
    "whiteboard": "白板",
    "microphone": "麦克风",
    "tv": "电视",
    "3d_printer": "3D打印机",
}
_BOOKING_FIELDS: dict[str, dict[str, Any]] = {
    "room_id": {"type": "string", "description": "the room booked, e.g. room-3"},
    "date": {"type": "string", "description": "YYYY-MM-DD"},
    "slot": {"type": "string", "description": "the hour booked, HH:00"},
}


def _hour_phrase(hour: int, lang: Lang) -> str:
    if lang == "en":
        return f"{hour:02d}:00"
    if hour < 12:
        return f"上午{hour}点"
    return "中午12点" if hour == 12 else f"下午{hour - 12}点"


def _room_phrase(room: Room, lang: Lang) -> str:
    return room.name if lang == "zh" else f"{room.name_en} ({room.room_id})"


def _slots(ctx: Ctx, room: Room, day: dt.date) -> TrajectoryCall:
    return TrajectoryCall(
        tool="get_room_slots", arguments={"room_id": room.room_id, "date": day.isoformat()}
    )


def _book(room: Room, day: dt.date, hour: int, organizer: str) -> TrajectoryCall:
    return TrajectoryCall(
        tool="book_room",
        arguments={
            "room_id": room.room_id,
            "date": day.isoformat(),
            "slot": f"{hour:02d}:00",
            "organizer": organizer,
        },
    )


def room_available(ctx: Ctx) -> ReferenceTask:
    rng, truth = ctx.rng, ctx.truth
    room = rng.choice(ctx.data.rooms)
    day = rng.choice(truth.schedule_days())
    hour = rng.randrange(*OPEN_HOURS)
    lang = ctx.lang()
    free = truth.free_hours(room.room_id, day)
    available = free is not None and hour in free
    when = ctx.day_phrase(day, lang)
    prompt = (
        f"{_room_phrase(room, lang)}{when}{_hour_phrase(hour, lang)}有空吗？"
        if lang == "zh"
        else f"Is {_room_phrase(room, lang)} free {when} at {_hour_phrase(hour, lang)}?"
    )
    text = {
        ("zh", True): "有空。",
        ("zh", False): "没空（已被占用或当天不开放）。",
        ("en", True): "Yes, it is free.",
        ("en", False): "No, it is taken or closed then.",
    }[(lang, available)]
    return make_task(
        ctx,
        domain="meeting",
        template="room_available",
        lang=lang,
        prompt=prompt,
        fields={"available": {"type": "boolean", "description": "is the room free then"}},
        truth={"available": available, "closed": free is None},
        checker="room_available",
        trajectory=[_slots(ctx, room, day)],
        answer_text=text,
        answer_fields={"available": available},
        tags=["closed"] if free is None else [],
    )


def weather_and_room(ctx: Ctx) -> ReferenceTask:
    rng, truth = ctx.rng, ctx.truth
    room = rng.choice(ctx.data.rooms)
    day = rng.choice(truth.schedule_days())
    city = rng.choice(ctx.data.cities)
    lang = ctx.lang()
    phrase, lookup = ctx.city_phrase(city, lang, ctx.city_form((6, 1, 2, 1)))
    w = truth.weather(city.name, day)
    assert w is not None
    free = truth.free_hours(room.room_id, day) or []
    slots = [f"{h:02d}:00" for h in free]
    when = ctx.day_phrase(day, lang)
    prompt = (
        f"查一下{when}{phrase}的天气，顺便看看{_room_phrase(room, lang)}空不空，列出空闲时段。"
        if lang == "zh"
        else f"Check {phrase}'s weather {when}, and whether {_room_phrase(room, lang)} is free "
        "that day: list its free slots."
    )
    free_text = ("、".join(slots) if lang == "zh" else ", ".join(slots)) or (
        "没有空闲时段" if lang == "zh" else "no free slot"
    )
    text = (
        f"{city.name}{w.condition_zh}，{w.temperature_c}°C；{room.name}空闲：{free_text}。"
        if lang == "zh"
        else f"{city.name_en}: {w.condition}, {w.temperature_c} °C; {room.name_en} free: {free_text}."
    )
    calls = [LIST_CITIES] if lookup else []
    calls += [
        TrajectoryCall(tool="get_weather", arguments={"city": city.name, "date": day.isoformat()}),
        _slots(ctx, room, day),
    ]
    return make_task(
        ctx,
        domain="meeting",
        template="weather_and_room",
        lang=lang,
        prompt=prompt,
        fields={
            "temperature_c": {"type": "number", "description": "temperature in °C"},
            "condition": {"type": "string", "description": "the condition code, e.g. sunny"},
            "free_slots": {
                "type": "array",
                "items": {"type": "string"},
                "description": "the room's free hours as HH:00; [] when none",
            },
        },
        truth={
            "temperature_c": w.temperature_c,
            "condition": w.condition,
            "condition_zh": w.condition_zh,
            "free_slots": slots,
        },
        checker="weather_and_room",
        trajectory=calls,
        answer_text=text,
        answer_fields={
            "temperature_c": w.temperature_c,
            "condition": w.condition,
            "free_slots": slots,
        },
        tags=(["typo"] if lookup else []) + (["no_free_slot"] if not slots else []),
    )


def room_book(ctx: Ctx) -> ReferenceTask:
    rng, truth = ctx.rng, ctx.truth
    room = rng.choice(ctx.data.rooms)
    day = rng.choice(truth.schedule_days())
    hour = rng.randrange(*OPEN_HOURS)
    organizer = rng.choice(PASSENGERS)
    lang = ctx.lang()
    free = truth.free_hours(room.room_id, day)
    when = ctx.day_phrase(day, lang)
    prompt = (
        f"以{organizer}的名义订{_room_phrase(room, lang)}，{when}{_hour_phrase(hour, lang)}开一小时会。"
        if lang == "zh"
        else f"Book {_room_phrase(room, lang)} {when} at {_hour_phrase(hour, lang)} for one hour, "
        f"organizer {organizer}."
    )
    fields = _BOOKING_FIELDS
    if free is None or hour not in free:
        why = "closed" if free is None else "taken"
        text, extra = impossible_answer(
            lang,
            f"{room.name}在{day.isoformat()} {hour:02d}:00"
            + ("不开放" if free is None else "已被占用"),
            f"{room.name_en} is {'closed' if free is None else 'taken'} on {day.isoformat()} at {hour:02d}:00",
        )
        return make_task(
            ctx,
            domain="meeting",
            template="room_book",
            lang=lang,
            prompt=prompt,
            fields=fields,
            truth={"why": why},
            checker="impossible",
            trajectory=[_slots(ctx, room, day)],
            answer_text=text,
            answer_fields=extra,
            impossible=True,
            tags=[why, "effect"],
        )
    slot = f"{hour:02d}:00"
    return make_task(
        ctx,
        domain="meeting",
        template="room_book",
        lang=lang,
        prompt=prompt,
        fields=fields,
        truth={"room_ids": [room.room_id], "date": day.isoformat(), "slot": slot},
        checker="room_booked",
        trajectory=[_slots(ctx, room, day), _book(room, day, hour, organizer)],
        answer_text=(
            f"已订{room.name}，{day.isoformat()} {slot}。"
            if lang == "zh"
            else f"Booked {room.name_en} on {day.isoformat()} at {slot}."
        ),
        answer_fields={"room_id": room.room_id, "date": day.isoformat(), "slot": slot},
        tags=["effect"],
    )


def room_find_book(ctx: Ctx) -> ReferenceTask | None:
    rng, truth = ctx.rng, ctx.truth
    day = rng.choice(truth.schedule_days())
    hour = rng.randrange(*OPEN_HOURS)
    capacity = rng.choice((3, 4, 6, 8, 10, 12, 16, 20, 40, 100))
    equipment = rng.choice(
        (None, None, "projector", "video", "whiteboard", "microphone", "3d_printer")
    )
    organizer = rng.choice(PASSENGERS)
    lang = ctx.lang()
    candidates = truth.rooms(day, capacity, equipment)
    fits = [r for r in candidates if hour in (truth.free_hours(r.room_id, day) or [])]
    calls = [
        TrajectoryCall(
            tool="list_rooms",
            arguments={
                "date": day.isoformat(),
                "capacity": capacity,
                **({"equipment": equipment} if equipment else {}),
            },
        )
    ]
    if fits:
        first = candidates.index(fits[0])
        calls += [_slots(ctx, r, day) for r in candidates[: first + 1]]
        calls.append(_book(fits[0], day, hour, organizer))
    else:
        calls += [_slots(ctx, r, day) for r in candidates]
    if len(calls) > 10:
        return None
    when = ctx.day_phrase(day, lang)
    need_zh = f"，要有{_EQUIPMENT_ZH[equipment]}" if equipment else ""
    need_en = f" with a {equipment.replace('_', ' ')}" if equipment else ""
    prompt = (
        f"{when}{_hour_phrase(hour, lang)}要开{capacity}个人的会{need_zh}。帮{organizer}找一间合适的会议室订一小时。"
        if lang == "zh"
        else f"{organizer} needs a room for {capacity} people{need_en} {when} at "
        f"{_hour_phrase(hour, lang)} for one hour. Find one and book it."
    )
    slot = f"{hour:02d}:00"
    if not fits:
        why = "no_room" if not candidates else "all_taken"
        text, extra = impossible_answer(
            lang,
            f"{day.isoformat()} {slot}没有满足要求的空闲会议室",
            f"no room that fits is free on {day.isoformat()} at {slot}",
        )
        return make_task(
            ctx,
            domain="meeting",
            template="room_find_book",
            lang=lang,
            prompt=prompt,
            fields=_BOOKING_FIELDS,
            truth={"why": why},
            checker="impossible",
            trajectory=calls,
            answer_text=text,
            answer_fields=extra,
            impossible=True,
            tags=[why, "effect"],
        )
    room = fits[0]
    return make_task(
        ctx,
        domain="meeting",
        template="room_find_book",
        lang=lang,
        prompt=prompt,
        fields=_BOOKING_FIELDS,
        truth={"room_ids": [r.room_id for r in fits], "date": day.isoformat(), "slot": slot},
        checker="room_booked",
        trajectory=calls,
        answer_text=(
            f"已订{room.name}（{room.room_id}），{day.isoformat()} {slot}。"
            if lang == "zh"
            else f"Booked {room.name_en} ({room.room_id}) on {day.isoformat()} at {slot}."
        ),
        answer_fields={"room_id": room.room_id, "date": day.isoformat(), "slot": slot},
        tags=["effect"],
    )


def weather_conditional_room(ctx: Ctx) -> ReferenceTask | None:
    rng, truth = ctx.rng, ctx.truth
    day = rng.choice([d for d in truth.schedule_days() if d.weekday() < 5])
    room = rng.choice(ctx.data.rooms)
    free = truth.free_hours(room.room_id, day) or []
    if not free:
        return None
    hour = rng.choice(free)
    city = rng.choice(ctx.data.cities)
    w = truth.weather(city.name, day)
    assert w is not None
    rainy = w.condition in RAIN
    organizer = rng.choice(PASSENGERS)
    lang = ctx.lang()
    phrase = ctx.city_phrase(city, lang, "canonical")[0]
    when = ctx.day_phrase(day, lang)
    prompt = (
        f"如果{when}{phrase}下雨（小雨、中雨、雷阵雨都算），就以{organizer}的名义订{_room_phrase(room, lang)}"
        f"{_hour_phrase(hour, lang)}开一小时室内会；不下雨就不用订，告诉我天气。"
        if lang == "zh"
        else f"If it rains in {phrase} {when} (light rain, rain or thunderstorms), book "
        f"{_room_phrase(room, lang)} at {_hour_phrase(hour, lang)} for one hour for {organizer}; "
        "otherwise book nothing and tell me the weather."
    )
    calls = [
        TrajectoryCall(tool="get_weather", arguments={"city": city.name, "date": day.isoformat()})
    ]
    if rainy:
        calls += [_slots(ctx, room, day), _book(room, day, hour, organizer)]
    text = (
        (
            f"{w.condition_zh}，已订{room.name}。"
            if rainy
            else f"{w.condition_zh}，不下雨，未订会议室。"
        )
        if lang == "zh"
        else (
            f"{w.condition}: booked {room.name_en}."
            if rainy
            else f"{w.condition}: no rain, nothing booked."
        )
    )
    return make_task(
        ctx,
        domain="meeting",
        template="weather_conditional_room",
        lang=lang,
        prompt=prompt,
        fields={
            "condition": {"type": "string", "description": "the condition code, e.g. rain"},
            "booked": {"type": "boolean", "description": "whether a room was booked"},
        },
        truth={
            "condition": w.condition,
            "condition_zh": w.condition_zh,
            "booked": rainy,
            "room_ids": [room.room_id],
            "date": day.isoformat(),
            "slot": f"{hour:02d}:00",
        },
        checker="weather_conditional_room",
        trajectory=calls,
        answer_text=text,
        answer_fields={"condition": w.condition, "booked": rainy},
        tags=["effect"] if rainy else [],
    )


def room_days(ctx: Ctx) -> ReferenceTask | None:
    """Which days of a window a room is free at an hour; or book the first such day."""
    rng, truth = ctx.rng, ctx.truth
    room = rng.choice(ctx.data.rooms)
    hour = rng.randrange(*OPEN_HOURS)
    book = rng.random() < 0.45
    n = rng.randint(3, 10)
    days_all = truth.schedule_days()
    start = rng.randrange(len(days_all) - n + 1)
    days = days_all[start : start + n]
    free = [x for x in days if hour in (truth.free_hours(room.room_id, x) or [])]
    lang = ctx.lang()
    first, last = ctx.span_phrase(days[0], days[-1], lang)
    at, where = _hour_phrase(hour, lang), _room_phrase(room, lang)
    organizer = rng.choice(PASSENGERS)
    slot = f"{hour:02d}:00"
    if not book:
        dates = [x.isoformat() for x in free]
        prompt = (
            f"{where}从{first}到{last}，每天{at}有空的是哪几天？"
            if lang == "zh"
            else f"On which days from {first} to {last} is {where} free at {at}?"
        )
        return make_task(
            ctx,
            domain="meeting",
            template="room_days",
            lang=lang,
            prompt=prompt,
            fields={
                "free_dates": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "the days (YYYY-MM-DD) the room is free then; [] when none",
                }
            },
            truth={"free_dates": dates},
            checker="room_days",
            trajectory=[_slots(ctx, room, x) for x in days],
            answer_text=("、".join(dates) or "都没空")
            if lang == "zh"
            else (", ".join(dates) or "none"),
            answer_fields={"free_dates": dates},
            tags=[] if dates else ["no_free_slot"],
        )
    prompt = (
        f"以{organizer}的名义，在{first}到{last}之间{where}{at}第一个有空的日子订一小时。"
        if lang == "zh"
        else f"Book {where} at {at} for one hour for {organizer}, on the first day from {first} "
        f"to {last} that it is free."
    )
    if not free:
        text, extra = impossible_answer(
            lang,
            f"{room.name}在{days[0].isoformat()}到{days[-1].isoformat()}的{slot}都没空",
            f"{room.name_en} is not free at {slot} on any day from {days[0]} to {days[-1]}",
        )
        return make_task(
            ctx,
            domain="meeting",
            template="room_days_book",
            lang=lang,
            prompt=prompt,
            fields=_BOOKING_FIELDS,
            truth={"why": "all_taken"},
            checker="impossible",
            trajectory=[_slots(ctx, room, x) for x in days],
            answer_text=text,
            answer_fields=extra,
            impossible=True,
            tags=["all_taken", "effect"],
        )
    day = free[0]
    checked = days[: days.index(day) + 1]
    return make_task(
        ctx,
        domain="meeting",
        template="room_days_book",
        lang=lang,
        prompt=prompt,
        fields=_BOOKING_FIELDS,
        truth={"room_ids": [room.room_id], "date": day.isoformat(), "slot": slot},
        checker="room_booked",
        trajectory=[*(_slots(ctx, room, x) for x in checked), _book(room, day, hour, organizer)],
        answer_text=f"{room.room_id} {day.isoformat()} {slot}",
        answer_fields={"room_id": room.room_id, "date": day.isoformat(), "slot": slot},
        tags=["effect"],
    )


MEETING_QUOTAS = (
    (room_available, 10),
    (weather_and_room, 16),
    (room_book, 16),
    (room_find_book, 20),
    (room_days, 24),
    (weather_conditional_room, 12),
)
"""(template, tasks per split)."""
