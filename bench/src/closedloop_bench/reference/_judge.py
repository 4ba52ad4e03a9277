"""What the checkers read: an answer's fields or text, and the world after a run.

Structured fields come first; free text is read only when a run gave no fields at all.
Every helper returns the reason something is wrong (or None), so a checker is a list of
reasons and its verdict is the first one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any

from closedloop._exceptions import ConfigurationError

from ..world import World, load_world
from ._tasks import Answer, CheckerVerdict, ReferenceTask

__all__ = [
    "VALUE_TOLERANCE",
    "aliases",
    "answered_problem",
    "bool_of",
    "by_company",
    "city_of",
    "company_of",
    "effects_of",
    "fail",
    "first_problem",
    "number_problem",
    "numbers_in",
    "ok",
    "quarter_of",
    "read_only_problem",
    "says_impossible",
    "slot_of",
    "status_of",
    "text_problem",
    "to_float",
    "value_fields",
    "values_problem",
    "verdict",
    "world_of",
]

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_QUARTER = re.compile(r"(\d{4})\s*[-_ ]?\s*Q([1-4])|Q([1-4])\s*[-_ ]?\s*(\d{4})", re.IGNORECASE)
_IMPOSSIBLE_MARKERS = (
    "无法",
    "不能",
    "没有",
    "不存在",
    "未找到",
    "找不到",
    "查不到",
    "不提供",
    "不支持",
    "不认识",
    "超出",
    "不可能",
    "cannot",
    "can't",
    "unable",
    "impossible",
    "not available",
    "unavailable",
    "no such",
    "not found",
    "unknown",
    "does not",
    "doesn't",
    "no flight",
    "no data",
    "no report",
    "not covered",
)
VALUE_TOLERANCE = 0.051  # the world's figures have one decimal


def ok(reason: str) -> CheckerVerdict:
    return CheckerVerdict(success=True, reason=reason)


def fail(reason: str) -> CheckerVerdict:
    return CheckerVerdict(success=False, reason=reason)


def world_of(world: Any) -> World | None:
    if world is None or isinstance(world, World):
        return world
    inner = getattr(world, "world", None)
    if isinstance(inner, World):
        return inner
    raise ConfigurationError("world", world, "must be a WorldHandle, a World or None")


# --- reading answers ---------------------------------------------------------------------------


def status_of(answer: Answer) -> str | None:
    status = answer.fields.get("status")
    return status if status in ("answered", "impossible") else None


def numbers_in(text: str) -> list[float]:
    out = []
    for raw in _NUMBER.findall(text):
        try:
            out.append(float(raw.replace(",", "")))
        except ValueError:
            continue
    return out


def to_float(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        found = numbers_in(value)
        return found[0] if len(found) == 1 else None
    return None


def number_problem(
    answer: Answer, name: str, expected: float, tol: float, label: str
) -> str | None:
    """None when ``answer`` gives ``expected`` for ``name``; else what is wrong."""
    if answer.fields:
        got = to_float(answer.fields.get(name))
        if got is None:
            return f"{label}: no number in field {name!r}"
        return None if abs(got - expected) <= tol else f"{label}: {got} is not {expected}"
    if any(abs(n - expected) <= tol for n in numbers_in(answer.text)):
        return None
    return f"{label}: the answer does not state {expected}"


def text_problem(answer: Answer, name: str, options: Iterable[str], label: str) -> str | None:
    wanted = {o.casefold() for o in options if o}
    if answer.fields:
        got = answer.fields.get(name)
        if isinstance(got, str) and got.strip().casefold() in wanted:
            return None
        return f"{label}: {got!r} is not one of {sorted(wanted)}"
    text = answer.text.casefold()
    return None if any(w in text for w in wanted) else f"{label}: the answer does not name it"


def says_impossible(answer: Answer) -> bool:
    if answer.handed_over or status_of(answer) == "impossible":
        return True
    if status_of(answer) is None and not value_fields(answer):
        text = answer.text.casefold()
        return any(m in text for m in _IMPOSSIBLE_MARKERS)
    return False


def value_fields(answer: Answer) -> dict[str, Any]:
    return {
        k: v
        for k, v in answer.fields.items()
        if k not in ("status", "reason") and v not in (None, "", [], {})
    }


def quarter_of(text: str) -> str | None:
    match = _QUARTER.search(str(text))
    if match is None:
        return None
    year, q = (
        (match.group(1), match.group(2)) if match.group(1) else (match.group(4), match.group(3))
    )
    return f"{year}Q{q}"


def slot_of(text: Any) -> str | None:
    match = re.match(r"^\s*(\d{1,2})(?::\d{2})?", str(text))
    return f"{int(match.group(1)):02d}:00" if match else None


@cache
def aliases(seed: int) -> tuple[dict[str, str], dict[str, str]]:
    """casefolded names, English names, codes/tickers and ids → city name / company id."""
    data = load_world(seed)
    cities: dict[str, str] = {}
    for c in data.cities:
        for alias in (c.name, c.name_en, c.code):
            cities[alias.casefold()] = c.name
    companies: dict[str, str] = {}
    for co in data.companies:
        for alias in (co.company_id, co.name, co.name_en, co.ticker):
            companies[alias.casefold()] = co.company_id
    return cities, companies


def company_of(task: ReferenceTask, name: Any) -> str | None:
    return aliases(task.world_seed)[1].get(str(name).strip().casefold())


def city_of(task: ReferenceTask, name: Any) -> str | None:
    return aliases(task.world_seed)[0].get(str(name).strip().casefold())


# --- reading the world --------------------------------------------------------------------------


def effects_of(world: World | None) -> list[str]:
    return [] if world is None else [f"{e.endpoint}({e.target})" for e in world.effects()]


def first_problem(*problems: str | None) -> str | None:
    return next((p for p in problems if p), None)


def answered_problem(answer: Answer) -> str | None:
    if answer.handed_over:
        return "handed over a task that has an answer"
    if status_of(answer) == "impossible":
        return "declared the task impossible, but it has an answer"
    if not answer.fields and not answer.text.strip():
        return "no answer"
    return None


def read_only_problem(world: World | None) -> str | None:
    done = effects_of(world)
    return f"a read-only task changed the world: {', '.join(done[:3])}" if done else None


def verdict(problem: str | None, success: str) -> CheckerVerdict:
    return fail(problem) if problem else ok(success)


def bool_of(answer: Answer, name: str) -> bool | None:
    got = answer.fields.get(name)
    if isinstance(got, bool):
        return got
    if answer.fields:
        return None
    text = answer.text.casefold()
    if any(
        m in text
        for m in ("没空", "不空", "占用", "不开放", "没有空", "not free", "taken", "closed", "no,")
    ):
        return False
    if any(m in text for m in ("有空", "空闲", "is free", "yes", "available")):
        return True
    return None


def by_company(task: ReferenceTask, values: Any) -> dict[str, float] | None:
    if not isinstance(values, Mapping):
        return None
    out = {}
    for key, value in values.items():
        cid, number = company_of(task, key), to_float(value)
        if cid is not None and number is not None:
            out[cid] = number
    return out


def values_problem(
    got: Mapping[str, float] | None, want: Mapping[str, float], tol: float
) -> str | None:
    if got is None:
        return "no figures by company"
    for key, value in want.items():
        if key not in got or abs(got[key] - value) > tol:
            return f"{key}: {got.get(key)!r}, expected {value}"
    return None
