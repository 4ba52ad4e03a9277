"""Generating the task sets: templates drawn with a seeded RNG over the world's data.

``load_tasks(split, seed)`` generates the split's tasks for the world of ``seed``: the
development and evaluation splits draw from different generator seeds, and the
evaluation split skips every prompt the development split already holds, so nothing is
tuned on the tasks it is judged on. Generation is pure and deterministic (string seeds
go through SHA-512 in ``random``), and takes well under a second.
"""

from __future__ import annotations

import datetime as dt
import random
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal

from closedloop._exceptions import ConfigurationError

from ..world import City, WorldData, load_world
from ._tasks import Answer, Domain, ReferenceTask, Split, TrajectoryCall, answer_schema
from ._truth import Truth

__all__ = [
    "LIST_CITIES",
    "PASSENGERS",
    "SPLIT_SEEDS",
    "Ctx",
    "Template",
    "impossible_answer",
    "join",
    "load_tasks",
    "make_task",
    "task_counts",
]

SPLIT_SEEDS: Mapping[str, int] = {"dev": 1_001, "eval": 2_002}
"""The generator seed of each split (the world's data seed is ``load_tasks``'s ``seed``)."""

PASSENGERS = (
    "张伟",
    "王芳",
    "李娜",
    "刘洋",
    "陈静",
    "杨帆",
    "赵磊",
    "孙悦",
    "Alice Chen",
    "Bob Li",
)
"""Names for passengers and meeting organisers."""
LIST_CITIES = TrajectoryCall(tool="list_cities")
Lang = Literal["zh", "en"]
CityForm = Literal["canonical", "english", "typo", "abbreviation"]

_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


@dataclass
class Ctx:
    """One draw of one template: the RNG, the world's truth and the phrasing helpers."""

    rng: random.Random
    truth: Truth
    split: Split

    @property
    def data(self) -> WorldData:
        return self.truth.data

    def lang(self) -> Lang:
        return "zh" if self.rng.random() < 0.7 else "en"

    def day_phrase(self, day: dt.date, lang: Lang, *, relative: bool = True) -> str:
        """``明天`` / ``6月5日`` / ``2025-06-05`` / ``tomorrow`` / ``June 5``."""
        offset = (day - self.truth.today).days
        if relative and 0 <= offset <= 2 and self.rng.random() < 0.5:
            return (
                ("今天", "明天", "后天") if lang == "zh" else ("today", "tomorrow", "in two days")
            )[offset]
        return self._absolute(day, lang, self.rng.random() < 0.3, on=True)

    def span_phrase(self, first: dt.date, last: dt.date, lang: Lang) -> tuple[str, str]:
        """Both ends of a date range in one format (no "on": the template says from/to)."""
        iso = self.rng.random() < 0.3
        return self._absolute(first, lang, iso, on=False), self._absolute(last, lang, iso, on=False)

    @staticmethod
    def _absolute(day: dt.date, lang: Lang, iso: bool, *, on: bool) -> str:
        text = day.isoformat() if iso else None
        if lang == "zh":
            return text or f"{day.month}月{day.day}日"
        text = text or f"{_MONTHS[day.month - 1]} {day.day}"
        return f"on {text}" if on else text

    def city_phrase(self, city: City, lang: Lang, form: CityForm) -> tuple[str, bool]:
        """How the prompt names ``city``; True when an agent must look the name up first."""
        if form == "abbreviation" and city.abbreviation:
            return city.abbreviation, True
        if form == "typo":
            typos = [t for t in city.typos if _is_latin(t) == (lang == "en")] or list(city.typos)
            if typos:
                return self.rng.choice(typos), True
        if form == "english" or lang == "en":
            return city.name_en, False
        return city.name, False

    def city_form(self, weights: Sequence[float] = (6, 2, 3, 1.5)) -> CityForm:
        forms: tuple[CityForm, ...] = ("canonical", "english", "typo", "abbreviation")
        return self.rng.choices(forms, weights)[0]


def _is_latin(text: str) -> bool:
    return all(ord(ch) < 128 for ch in text)


def join(items: Sequence[str], lang: Lang) -> str:
    """``A、B和C`` / ``A, B and C``."""
    if len(items) == 1:
        return items[0]
    if lang == "zh":
        return "、".join(items[:-1]) + "和" + items[-1]
    return ", ".join(items[:-1]) + " and " + items[-1]


def impossible_answer(lang: Lang, zh: str, en: str) -> tuple[str, dict[str, Any]]:
    """The ideal answer to a task without one: the text and the ``reason`` field."""
    text = f"无法完成：{zh}。" if lang == "zh" else f"This cannot be done: {en}."
    return text, {"reason": zh if lang == "zh" else en}


def make_task(
    ctx: Ctx,
    *,
    domain: Domain,
    template: str,
    lang: Lang,
    prompt: str,
    fields: Mapping[str, Mapping[str, Any]],
    truth: Mapping[str, Any],
    checker: str,
    trajectory: Iterable[TrajectoryCall | tuple[str, Mapping[str, Any]]],
    answer_text: str,
    answer_fields: Mapping[str, Any],
    impossible: bool = False,
    tags: Iterable[str] = (),
) -> ReferenceTask:
    """A task draft (its id is set when the split is assembled)."""
    calls = tuple(
        c if isinstance(c, TrajectoryCall) else TrajectoryCall(tool=c[0], arguments=dict(c[1]))
        for c in trajectory
    )
    status = "impossible" if impossible else "answered"
    return ReferenceTask(
        id="draft",
        split=ctx.split,
        world_seed=ctx.data.seed,
        domain=domain,
        template=template,
        prompt=prompt,
        language=lang,
        today=ctx.truth.today.isoformat(),
        expected_steps=len(calls),
        required_fields=answer_schema(fields),
        ground_truth=dict(truth),
        checker=checker,
        ideal_trajectory=calls,
        ideal_answer=Answer(text=answer_text, fields={"status": status, **answer_fields}),
        impossible=impossible,
        tags=tuple(dict.fromkeys([*tags, *(["impossible"] if impossible else [])])),
    )


Template = Callable[[Ctx], ReferenceTask | None]


@dataclass(frozen=True)
class _Quota:
    template: Template
    count: int
    name: str = field(default="")


def _quotas() -> list[_Quota]:
    from ._gen_flight import FLIGHT_QUOTAS
    from ._gen_meeting import MEETING_QUOTAS
    from ._gen_report import REPORT_QUOTAS
    from ._gen_weather import WEATHER_QUOTAS

    quotas = (*WEATHER_QUOTAS, *FLIGHT_QUOTAS, *MEETING_QUOTAS, *REPORT_QUOTAS)
    return [_Quota(t, n, t.__name__) for t, n in quotas]


def _generate(split: Split, seed: int, exclude: frozenset[str]) -> tuple[ReferenceTask, ...]:
    truth = Truth(load_world(seed))
    tasks: list[ReferenceTask] = []
    seen = set(exclude)
    for quota in _quotas():
        made = 0
        for attempt in range(quota.count * 60):
            if made == quota.count:
                break
            rng = random.Random(f"{SPLIT_SEEDS[split]}:{seed}:{quota.name}:{attempt}")
            task = quota.template(Ctx(rng, truth, split))
            if task is None or task.prompt in seen:
                continue
            seen.add(task.prompt)
            made += 1
            tasks.append(
                task.model_copy(
                    update={"id": f"{split}-s{seed}-{task.domain}-{quota.name}-{made:03d}"}
                )
            )
        if made < quota.count:  # pragma: no cover - a template that cannot fill its quota
            raise ConfigurationError(
                "seed", seed, f"template {quota.name} produced {made} of {quota.count} tasks"
            )
    return tuple(tasks)


@cache
def _split(split: Split, seed: int) -> tuple[ReferenceTask, ...]:
    exclude: frozenset[str] = frozenset()
    if split == "eval":
        exclude = frozenset(t.prompt for t in _split("dev", seed))
    return _generate(split, seed, exclude)


def load_tasks(split: Split = "dev", seed: int = 0) -> tuple[ReferenceTask, ...]:
    """The tasks of ``split`` (``"dev"`` or ``"eval"``) for the world of data seed ``seed``.

    Deterministic: the same arguments always give the same tasks, ids and truths. The
    evaluation split holds no prompt of the development split.
    """
    if split not in SPLIT_SEEDS:
        raise ConfigurationError("split", split, "must be 'dev' or 'eval'")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigurationError("seed", seed, "must be an int >= 0")
    return _split(split, seed)


def task_counts(tasks: Iterable[ReferenceTask]) -> dict[str, dict[str, int]]:
    """Counts by domain, by expected step count, by template and by (im)possibility."""
    items = list(tasks)
    return {
        "domain": dict(sorted(Counter(t.domain for t in items).items())),
        "steps": {str(k): v for k, v in sorted(Counter(t.expected_steps for t in items).items())},
        "template": dict(sorted(Counter(t.template for t in items).items())),
        "impossible": dict(Counter("impossible" if t.impossible else "possible" for t in items)),
    }
