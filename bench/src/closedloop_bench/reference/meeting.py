"""The meeting-room agent, with the weather check: an empty answer guards.

Control design:

* **The empty-result guard.** An empty list of rooms or of free slots means "no match",
  never "no constraint": ``book_room`` depends on ``get_room_slots`` (the loop refuses it
  unless the latest availability answer is non-empty) and has a precondition that the
  slot to book is among the free slots observed for that very room and day. No room list,
  or no free slot, is an answer the agent states; it never books "any room".
* **Required fields.** The task is done only when the ``answer`` field is filled, valid
  against the task's schema, and grounded: a booking answer must name a booking the world
  confirmed in this run (a code predicate on the state, not the model's word).
* **The weather check for the date.** Conditional bookings read the weather of the city
  on the meeting's date first and book only on rain (小雨, 中雨, 雷阵雨).
* **Rules read the request**: the room (its id, or its name from the room directory),
  the day or days, the hour, the size and equipment, the organiser, and the city.
  Bookings go through the effect ledger once (idempotency keys); reads retry in the
  executor with the PID's settings; a read that keeps failing is handed over.

Steps that use the model: only a Chinese city name no rule can place (``Rules.places``).

    async with build_meeting_agent(None, base_url=world.base_url) as agent:
        result = await agent.run("如果明天上海下雨，就以王芳的名义订三号会议室下午2点开一小时会；"
                                 "不下雨就不用订，告诉我天气。")
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from closedloop.agent import ControlConfig, as_tool
from closedloop.feedback import StateStore
from closedloop.models import Model

from ._agents_common import (
    Move,
    ReferenceAgent,
    Rules,
    RunContext,
    Seen,
    Turn,
    ask_human,
    call,
    chunks,
    date_range,
    final,
    find_dates,
    find_hours,
    impossible,
    pick,
    task_runner,
    valid_date,
    words,
)
from ._tasks import ReferenceTask

__all__ = ["MeetingRules", "build_meeting_agent", "run_meeting", "slot_seen_free"]

_LEXICON = words(
    "查一下 的天气 天气 顺便看看 空不空 列出空闲时段 有空吗 以 的名义 订 开一小时会 开一小时室内会 要开 个人的会 "
    "要有 帮 找一间合适的会议室订一小时 如果 下雨 小雨 中雨 雷阵雨 都算 就 不下雨就不用订 告诉我天气 从 到 每天 "
    "有空的是哪几天 在 之间 第一个有空的日子订一小时 的 和"
)
_EQUIPMENT = {
    "投影仪": "projector", "视频会议设备": "video", "白板": "whiteboard", "麦克风": "microphone",
    "电视": "tv", "3D打印机": "3d_printer", "projector": "projector", "video": "video",
    "whiteboard": "whiteboard", "microphone": "microphone", "tv": "tv", "3d printer": "3d_printer",
}  # fmt: skip
_ORGANIZER = re.compile(
    r"以(?P<a>.{1,12}?)的名义|帮(?P<b>.{1,12}?)找|organizer (?P<c>[^.,;]+)"
    r"|^(?P<d>[A-Z][\w'-]*(?: [A-Z][\w'-]*)?|[\u4e00-\u9fff]{2,4}) needs a room"
    r"|\bfor (?P<e>[A-Z][\w'-]*(?: [A-Z][\w'-]*)*|[\u4e00-\u9fff]{2,4})(?=[,.;]|$| on)"
)
_CAPACITY = re.compile(r"(\d+)\s*个人|for (\d+) (?:people|persons)")
_RAINY = ("rain", "thunder", "drizzle", "shower")


def _complete(seen: Seen) -> bool:
    return pick(seen.value, "temperature_c") is not None and bool(pick(seen.value, "condition"))


def slot_seen_free(args: Mapping[str, Any], state: Mapping[str, Any]) -> bool | str:
    """Precondition of ``book_room``: the slot is free in the latest, non-empty availability
    answer for that room and day (an empty answer licenses nothing)."""
    latest = (state.get("latest") or {}).get("get_room_slots") or {}
    if latest.get("status") != "ok":
        return "no non-empty availability answer: an empty one means no match, not no constraint"
    value = latest.get("value") or {}
    if value.get("room_id") != args.get("room_id") or str(value.get("date")) != args.get("date"):
        return "the latest availability answer is for another room or day"
    free = {str(s.get("start")) for s in pick(value, "free_slots") or [] if isinstance(s, Mapping)}
    if args.get("slot") not in free:
        return f"{args.get('slot')} is not among the observed free slots {sorted(free)}"
    return True


def _kind(task: ReferenceTask | None, prompt: str) -> str:
    props = set(task.required_fields.get("properties", {})) if task else set()
    if "available" in props or re.search(r"有空吗|^Is .* free", prompt):
        return "available"
    if "free_slots" in props or re.search(r"空闲时段|free slots", prompt):
        return "weather_and_room"
    if "free_dates" in props or re.search(r"哪几天|On which days", prompt):
        return "room_days"
    if "booked" in props or re.search(r"^如果|^If it rains", prompt):
        return "conditional"
    return "book"


class MeetingRules(Rules):
    """The meeting agent's decisions for one task (see the module docstring)."""

    tools = ("list_cities", "get_weather", "list_rooms", "get_room_slots")

    def __init__(self, ctx: RunContext) -> None:
        super().__init__(ctx)
        self.facts: Turn | None = None

    def extra_tools(self) -> list[Any]:
        action = self.ctx.reads.patient(self.ctx.world.actions["book_room"])
        guarded = dataclasses.replace(action, preconditions=(*action.preconditions, slot_seen_free))
        return [as_tool(guarded, depends_on=("get_room_slots",))]

    def answer_check(self, value: Any) -> bool | str:
        """Grounding: an answered booking names a booking the world confirmed in this run."""
        if not isinstance(value, Mapping) or value.get("status") != "answered":
            return True
        if "room_id" not in value and not value.get("booked"):
            return True
        turn = self.facts
        booked = [] if turn is None else [e for e in turn.facts.all("book_room") if e.ok]
        if not any(e.arguments.get("room_id") == value.get("room_id") or "room_id" not in value
                   for e in booked):  # fmt: skip
            return "the answer names a booking no book_room answer confirmed"
        return True

    # --- the request -------------------------------------------------------------------------

    def _room(self, turn: Turn, prompt: str) -> tuple[str | None, tuple[int, int] | None] | Move:
        found = re.search(r"room-\d+", prompt)
        if found:
            return found.group(0), found.span()
        rooms = self.directory(turn, "rooms", "list_rooms", "rooms")
        if isinstance(rooms, Move):
            return rooms
        for room in sorted(rooms, key=lambda r: -len(str(r.get("name", "")))):
            for name in (room.get("name"), pick(room, "name_en")):
                at = prompt.find(str(name)) if name else -1
                if at >= 0:
                    return str(room["room_id"]), (at, at + len(str(name)))
        return None, None

    async def _intent(self, turn: Turn) -> dict[str, Any] | Move:
        prompt, lang = self.ctx.prompt, self.ctx.lang
        kind = _kind(self.ctx.task, prompt)
        dates = find_dates(prompt, self.ctx.today)
        hours = find_hours(prompt)
        masked = [(d.start, d.end) for d in dates] + [(h.start, h.end) for h in hours]
        room: Any = (None, None)
        if kind != "book" or not _CAPACITY.search(prompt):
            room = self._room(turn, prompt)
            if isinstance(room, Move):
                return room
            if room[0] is None:
                return ask_human("which room is meant?")
            masked.append(room[1])
        who = _ORGANIZER.search(prompt)
        organizer = next((g for g in who.groups() if g), None) if who else None
        if who:
            masked.append(who.span())
        days = [d.value for d in dates] or [self.ctx.today.isoformat()]
        for day in days:
            if not valid_date(day):
                return impossible(lang, f"日历上没有{day}这一天", f"there is no such date as {day}")
        size = _CAPACITY.search(prompt)
        gear = [v for k, v in _EQUIPMENT.items() if k.casefold() in prompt.casefold()]
        intent: dict[str, Any] = {
            "kind": kind,
            "room": room[0],
            "days": date_range(days[0], days[1]) if len(days) > 1 else days[:1],
            "slot": hours[0].value if hours else None,
            "organizer": organizer.strip() if organizer else None,
            "capacity": int(size.group(1) or size.group(2)) if size else None,
            "equipment": gear[0] if gear else None,
            "city": None,
        }
        if kind in ("weather_and_room", "conditional"):
            cities = self.directory(turn, "cities", "list_cities", "cities")
            if isinstance(cities, Move):
                return cities
            pieces = [p.value for p in chunks(prompt, masked, _LEXICON)]
            placed = await self.places(turn, pieces, cities, "get_weather")
            if isinstance(placed, Move):
                return placed
            if not placed:
                return ask_human("which city's weather is meant?")
            intent["city"] = placed[0][0]
        return intent

    # --- observations ------------------------------------------------------------------------

    def _free(self, turn: Turn, room: str, day: str) -> list[str] | Move:
        """The free hours of ``room`` on ``day`` ([] when closed or fully booked)."""
        seen = turn.facts.seen("get_room_slots", room_id=room, date=day)
        if seen is None:
            return call("get_room_slots", room_id=room, date=day)
        if seen.problem is not None:
            detail = str(seen.problem.get("detail", seen.problem["error"]))
            return impossible(self.ctx.lang, f"会议室服务拒绝了查询：{detail}", detail)
        slots = seen.get("free_slots")
        if seen.empty:
            return []  # asked twice: no free hour (closed or fully booked)
        if seen.failed or not isinstance(slots, list):
            return ask_human(
                f"get_room_slots has no usable answer for {room} on {day}: {seen.meaning}"
            )
        return [str(s.get("start")) for s in slots if isinstance(s, Mapping)]

    def _weather(self, turn: Turn, city: dict[str, Any], day: str) -> dict[str, Any] | Move:
        seen = self.first_answer(turn, "get_weather", self.city_forms(city, date=day), _complete)
        if isinstance(seen, Move):
            return seen
        if seen.ok and _complete(seen) and isinstance(seen.value, dict):
            return seen.value
        if seen.problem is not None:
            detail = str(seen.problem.get("detail", seen.problem["error"]))
            return impossible(self.ctx.lang, f"天气服务拒绝了查询：{detail}", detail)
        return ask_human(f"get_weather failed for {city['name']} on {day}: {seen.meaning}")

    def _book(self, turn: Turn, intent: dict[str, Any], room: str, day: str) -> Move | None:
        """The booking move, or None once ``book_room`` answered."""
        args = {"room_id": room, "date": day, "slot": intent["slot"]}
        organizer = intent["organizer"] or "closedloop"
        seen = turn.facts.seen("book_room", organizer=organizer, **args)
        if seen is None:
            return call("book_room", organizer=organizer, **args)
        if not seen.ok:
            return ask_human(f"book_room {room} {day} {intent['slot']} failed: {seen.meaning}")
        return None

    # --- deciding ------------------------------------------------------------------------------

    async def decide(self, turn: Turn) -> Move:
        self.facts = turn
        intent = await self._intent(turn)
        if isinstance(intent, Move):
            return intent
        kind, lang, slot = intent["kind"], self.ctx.lang, intent["slot"]
        days, room = intent["days"], intent["room"]
        zh = lang == "zh"
        if kind in ("weather_and_room", "conditional"):
            weather = self._weather(turn, intent["city"], days[0])
            if isinstance(weather, Move):
                return weather
            condition = str(pick(weather, "condition"))
            said = str(weather.get("condition_zh", condition)) if zh else condition
            if kind == "conditional" and not any(r in condition for r in _RAINY):
                text = (
                    f"{said}，不下雨，未订会议室。" if zh else f"{said}: no rain, nothing booked."
                )
                return final(text, condition=condition, booked=False)
        if kind == "room_days" or (kind == "book" and room and len(days) > 1):
            free_days = []
            for day in days:
                free = self._free(turn, room, day)
                if isinstance(free, Move):
                    return free
                if slot in free:
                    free_days.append(day)
                    if kind == "book":
                        break
            if kind == "room_days":
                text = self.say("、".join(free_days) or "都没空", ", ".join(free_days) or "none")
                return final(text, free_dates=free_days)
            if not free_days:
                span = f"{days[0]}至{days[-1]}"
                return impossible(
                    lang, f"{room}在{span}的{slot}都没空", f"{room} is not free at {slot} on {span}"
                )
            return self._booked(turn, intent, room, free_days[0])
        if kind == "book" and room is None:
            return self._find_and_book(turn, intent)
        free = self._free(turn, room, days[0])
        if isinstance(free, Move):
            return free
        if kind == "available":
            text = (
                self.say("有空。", "Yes, it is free.")
                if slot in free
                else self.say("没空。", "No.")
            )
            return final(text, available=slot in free)
        if kind == "weather_and_room":
            temp = pick(weather, "temperature_c")
            text = (
                f"{said}，{temp}°C；空闲：{'、'.join(free) or '无'}"
                if zh
                else f"{said}, {temp} °C; free: {', '.join(free) or 'none'}"
            )
            return final(text, temperature_c=temp, condition=condition, free_slots=free)
        if slot not in free:
            if kind == "conditional":
                text = self.say(
                    f"{said}，但{slot}已被占用，未订。", f"{said}, but {slot} is taken."
                )
                return final(text, condition=condition, booked=False)
            return impossible(
                lang, f"{room}在{days[0]} {slot}没空", f"{room} is not free on {days[0]} at {slot}"
            )
        if kind == "conditional":
            move = self._book(turn, intent, room, days[0])
            if move is not None:
                return move
            text = self.say(f"{said}，已订{room} {slot}。", f"{said}: booked {room} at {slot}.")
            return final(text, condition=condition, booked=True)
        return self._booked(turn, intent, room, days[0])

    def _booked(self, turn: Turn, intent: dict[str, Any], room: str, day: str) -> Move:
        move = self._book(turn, intent, room, day)
        if move is not None:
            return move
        slot = intent["slot"]
        text = (
            f"已订{room}，{day} {slot}。"
            if self.ctx.lang == "zh"
            else f"Booked {room} on {day} at {slot}."
        )
        return final(text, room_id=room, date=day, slot=slot)

    def _find_and_book(self, turn: Turn, intent: dict[str, Any]) -> Move:
        day, slot, lang = intent["days"][0], intent["slot"], self.ctx.lang
        query = {"date": day, "capacity": intent["capacity"], "equipment": intent["equipment"]}
        listed = turn.facts.seen("list_rooms", **query)
        if listed is None:
            return call("list_rooms", **query)
        if listed.failed or listed.problem is not None:
            return ask_human(f"list_rooms failed: {listed.meaning}")
        rooms = [str(r["room_id"]) for r in listed.get("rooms") or [] if isinstance(r, Mapping)]
        for room in rooms:  # smallest first, as the service lists them
            free = self._free(turn, room, day)
            if isinstance(free, Move):
                return free
            if slot in free:
                return self._booked(turn, intent, room, day)
        why = "没有满足要求的会议室" if not rooms else "满足要求的会议室都已被占用"
        return impossible(
            lang, f"{day} {slot}{why}", f"no room that fits is free on {day} at {slot}"
        )


def build_meeting_agent(
    model: Model | str | None,
    *,
    base_url: str,
    control: ControlConfig | None = None,
    store: StateStore | None = None,
    **options: Any,
) -> ReferenceAgent:
    """The meeting agent on the world at ``base_url`` (``options``: see ``ReferenceAgent``)."""
    return ReferenceAgent(
        MeetingRules, model, base_url=base_url, domain="meeting", control=control, store=store,
        **options,
    )  # fmt: skip


run_meeting = task_runner(build_meeting_agent, "meeting")
