"""The weather agent: rules first, PID on e2, the model only past the gate.

Control design:

* **Rules before the model.** The request is read by rules: dates (``明天``, ``6月5日``,
  ``June 5``, ISO), the question (one report, the warmest or coldest city, the warmest
  day, the rainy days) and the cities, which ``CityNormaliser`` resolves from the service's
  own list (exact names, English names, codes, abbreviations such as 京, typos such as 北就
  or Shangai). Calendar-impossible dates and Latin names no city is near are answered by
  rules too: the task has no answer, and the agent says so.
* **The model, past the gate.** Only a Chinese name the rules cannot place (背景, 拉萨) or a
  request in which they find no city at all goes to the language model, under a JSON
  schema whose enum is the served cities plus ``none``. Its answer is never taken on
  trust: ``none`` means the place is not served (a stated impossibility); a city is a
  correction no rule can verify, so the agent hands the question to a person
  (``ask_human``, a confirmation the loop freezes on) with the model's suggestion.
* **PID on e2.** Each ``get_weather`` step is scored with e2: the normalised
  edit distance between the city as the user wrote it and the city the service returned
  (the nearest of its names, code and abbreviation: 北就 → 0.5, 沪 → 0), raised by the
  share of attempts that failed. The loop's PID for ``get_weather`` (warm-started from
  the store's history) sets that tool's timeout, retry count and retry delay
  (``reference_schedule``), and its level sets the rigour of the model's prompt.
* **Faults.** 5xx, timeouts and 429s raise inside the read, so the executor retries with
  the PID's settings (429 backs off first); an answer that is still failed, empty or
  incomplete is asked again in an equivalent form (English name, then code), then handed
  over. The ESO's protocols apply as in every closedloop run.

Steps that use the model: resolving an unplaceable Chinese city name, and finding the
cities of a request the rules cannot read. Everything else is rules.

    async with serve_world_async("seed000") as world:
        async with build_weather_agent("local:qwen2.5-coder-0.5b", base_url=world.base_url) as a:
            result = await a.run("查一下北就明天的天气。")   # or a ReferenceTask from load_tasks()
            verdict = check(task, result, world)                # for a reference ReferenceTask
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from closedloop.agent import ControlConfig, ErrorMetric
from closedloop.feedback import StateStore
from closedloop.models import Model
from closedloop.perception import Observation, error_edit_distance

from ._agents_common import (
    Move,
    ReferenceAgent,
    Rules,
    RunContext,
    Seen,
    Turn,
    ask_human,
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
from ._tasks import ReferenceTask

__all__ = ["WeatherRules", "build_weather_agent", "run_weather"]

_LEXICON = words(
    "的天气怎么样 的天气如何 天气怎么样 天气如何 的天气 天气状况 天气 怎么样 如何 查一下 请给出 给出 "
    "气温 状况 多少度 什么 哪个城市 最热 最冷 城市 和 从 到 这 天里 哪一天 最高 日期 有几天 下雨 "
    "小雨 中雨 雷阵雨 都算 请问 帮我 一下 的 里"
)
_RAINY = ("rain", "thunder", "drizzle", "shower")


def _complete(seen: Seen) -> bool:
    """A weather answer to act on: it has the temperature and the condition."""
    return isinstance(pick(seen.value, "temperature_c"), int | float) and bool(
        pick(seen.value, "condition")
    )


@dataclass(frozen=True, slots=True)
class _Intent:
    kind: str  # single | warmest | coldest | warmest_day | coldest_day | rainy_days
    cities: tuple[dict[str, Any], ...]
    dates: tuple[str, ...]


def _kind(task: ReferenceTask | None, prompt: str) -> str:
    props = set(task.required_fields.get("properties", {})) if task else set()
    props -= {"status", "reason"}
    cold = re.search(r"最冷|coldest|coolest", prompt, re.IGNORECASE) is not None
    if props == {"rainy_days"} or re.search(r"几天.*下雨|有几天|how many", prompt, re.I):
        return "rainy_days"
    if props == {"date", "temperature_c"} or re.search(r"哪一天|which day", prompt, re.I):
        return "coldest_day" if cold else "warmest_day"
    if props == {"city", "temperature_c"} or re.search(r"最热|warmest|hottest", prompt, re.I):
        return "coldest" if cold else "warmest"
    return "coldest" if cold else "single"


class WeatherRules(Rules):
    """The weather agent's decisions for one task (see the module docstring)."""

    tools = ("list_cities", "get_weather")

    def __init__(self, ctx: RunContext) -> None:
        super().__init__(ctx)
        self.written: dict[str, str] = {}  # any form of a city sent to the service -> as written

    # --- e2 ----------------------------------------------------------------------------------

    def metrics(self) -> dict[str, ErrorMetric]:
        read = self.ctx.reads.metric()

        def e2(action: Any, observation: Observation) -> float:
            error = read(action, observation)
            asked = str(action.arguments.get("city", "")) if action is not None else ""
            if observation.usable and isinstance(observation.value, dict):
                written = self.written.get(asked, asked)
                returned = pick(observation.value, "city")
                row: dict[str, Any] = next(
                    (c for c in self.ctx.directory.get("cities", []) if c["name"] == returned), {}
                )
                names = [
                    returned,
                    observation.value.get("city_en"),
                    row.get("code"),
                    row.get("abbreviation"),
                ]
                found = [error_edit_distance(written, str(n)) for n in names if n]
                return max(error, min(found, default=1.0))
            problem = observation.value if isinstance(observation.value, dict) else {}
            return 1.0 if problem.get("error") == "unknown_city" else error

        return {"list_cities": read, "get_weather": e2}

    # --- reading the request -------------------------------------------------------------------

    async def _places(self, turn: Turn) -> list[str]:
        """Out of the rules' grammar: the model lists the places, each must be in the text."""
        answer = await self.ctx.language.ask(
            turn,
            "List the places this weather question is about, each exactly as written in it.",
            self.ctx.prompt,
            {
                "type": "object",
                "properties": {"places": {"type": "array", "items": {"type": "string"}}},
                "required": ["places"],
            },
        )
        places = [] if answer is None else answer.get("places") or []
        return [p for p in places if isinstance(p, str) and p.strip() and p in self.ctx.prompt]

    async def _intent(self, turn: Turn, cities: list[dict[str, Any]]) -> _Intent | Move:
        prompt, lang = self.ctx.prompt, self.ctx.lang
        dates = find_dates(prompt, self.ctx.today)
        pieces = [p.value for p in chunks(prompt, [(d.start, d.end) for d in dates], _LEXICON)]
        if not pieces:
            pieces = await self._places(turn)
        if not pieces:
            return ask_human("这个请求问的是哪座城市？" if lang == "zh" else "Which city is meant?")
        kind = _kind(self.ctx.task, prompt)
        needed = 1 if kind in ("single", "warmest_day", "coldest_day", "rainy_days") else 2
        placed = await self.places(turn, pieces, cities, "get_weather", needed)
        if isinstance(placed, Move):
            return placed
        found: list[dict[str, Any]] = []
        for row, phrase in placed:
            if row not in found:
                found.append(row)
            for form in (row["name"], pick(row, "name_en"), row.get("code")):
                self.written[str(form)] = phrase
        days = [d.value for d in dates]
        for day in days:
            if not valid_date(day):
                return impossible(lang, f"日历上没有{day}这一天", f"there is no such date as {day}")
        if kind.endswith("_day") or kind == "rainy_days":
            days = date_range(days[0], days[-1]) if days else []
        return _Intent(kind, tuple(found[: 1 if kind == "single" else 6]), tuple(days[:14]))

    # --- acting ----------------------------------------------------------------------------

    def _weather(self, turn: Turn, city: dict[str, Any], day: str | None) -> dict[str, Any] | Move:
        lang = self.ctx.lang
        seen = self.first_answer(turn, "get_weather", self.city_forms(city, date=day), _complete)
        if isinstance(seen, Move):
            return seen
        if seen.ok and _complete(seen) and isinstance(seen.value, dict):
            return seen.value
        problem = seen.problem or {}
        if problem.get("error") in ("no_data_for_date", "invalid_date"):
            span = f"（{problem.get('available_from')}至{problem.get('available_to')}）"
            span_en = f" ({problem.get('available_from')} to {problem.get('available_to')})"
            has_span = "available_from" in problem
            return impossible(
                lang,
                f"没有{day}这一天的天气数据" + (span if has_span else ""),
                f"there is no weather data for {day}" + (span_en if has_span else ""),
            )
        return ask_human(f"get_weather failed for {city['name']} on {day} in every form")

    async def decide(self, turn: Turn) -> Move:
        cities = self.directory(turn, "cities", "list_cities", "cities")
        if not isinstance(cities, list):
            return cities
        intent = await self._intent(turn, cities)
        if not isinstance(intent, _Intent):
            return intent
        days: tuple[str | None, ...] = intent.dates or (None,)
        if intent.kind in ("single", "warmest", "coldest"):
            days = days[:1]
        got: list[tuple[dict[str, Any], dict[str, Any]]] = []
        for city in intent.cities:
            for day in days:
                value = self._weather(turn, city, day)
                if isinstance(value, Move):
                    return value
                got.append((city, value))
        return self._answer(intent, got)

    def _answer(self, intent: _Intent, got: list[tuple[dict[str, Any], dict[str, Any]]]) -> Move:
        zh = self.ctx.lang == "zh"
        temps = [pick(v, "temperature_c") for _, v in got]
        if any(not isinstance(t, int | float) for t in temps):
            return ask_human("the weather answers lack a temperature (schema drift)")
        rows = [(c, v, float(t)) for (c, v), t in zip(got, temps, strict=True)]
        if intent.kind == "rainy_days":
            rainy = sum(any(r in str(pick(v, "condition")) for r in _RAINY) for _, v, _ in rows)
            return final(
                f"共有{rainy}天下雨。" if zh else f"{rainy} rainy day(s).", rainy_days=rainy
            )
        cold = intent.kind.startswith("coldest")
        city, value, temp = (min if cold else max)(rows, key=lambda r: r[2])
        name, day = str(pick(value, "city") or city["name"]), str(pick(value, "date"))
        if intent.kind.endswith("_day"):
            return final(
                f"{day}：{temp}°C" if zh else f"{day}: {temp} °C", date=day, temperature_c=temp
            )
        if intent.kind != "single":
            text = f"{name}，{temp}°C。" if zh else f"{pick(city, 'name_en')}: {temp} °C."
            return final(text, city=name, temperature_c=temp)
        condition = str(pick(value, "condition"))
        text = (
            f"{name}{day}：{value.get('condition_zh', condition)}，气温{temp}°C。"
            if zh
            else f"{pick(city, 'name_en')} on {day}: {condition}, {temp} °C."
        )
        return final(text, city=name, date=day, temperature_c=temp, condition=condition)


def build_weather_agent(
    model: Model | str | None,
    *,
    base_url: str,
    control: ControlConfig | None = None,
    store: StateStore | None = None,
    **options: Any,
) -> ReferenceAgent:
    """The weather agent on the world at ``base_url``; ``model`` is asked only past the gate
    (``None``: rules alone). ``options`` go to ``ReferenceAgent`` (``max_steps``, ``trace``,
    ``clock``, ``sleep``, ``today``, ...)."""
    return ReferenceAgent(
        WeatherRules, model, base_url=base_url, domain="weather", control=control, store=store,
        **options,
    )  # fmt: skip


run_weather = task_runner(build_weather_agent, "weather")
