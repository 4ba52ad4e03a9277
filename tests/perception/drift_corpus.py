"""A corpus of drifted model outputs, generated from drift modes plus hand-written cases.

The modes follow the fault injector's list (prose or code fences around the JSON, a
field renamed or dropped, truncation) and what models do in practice (two answers,
Python reprs, trailing commas, braces in prose and strings, Chinese values).
Deterministic: the same seed gives the same corpus.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

Kind = Literal["exact", "schema_fail", "truncated", "no_json", "unrepaired"]
"""exact: recovered and schema-valid; schema_fail: recovered, then refused by the schema;
truncated / no_json: must fail cleanly; unrepaired: the answer is there, but in a drift
the sanitizer deliberately does not guess at (it must fail cleanly, and counts as a miss)."""


class FlightQuote(BaseModel):
    """The schema the model was asked to follow."""

    flight_no: str
    airline: str
    price: float
    direct: bool
    meal: str | None
    note: str
    tags: list[str]


@dataclass(frozen=True)
class Case:
    mode: str
    text: str
    expected: Any  # the JSON value the model meant (None for truncated cases)
    kind: Kind


RECORDS: list[dict[str, Any]] = [
    {
        "flight_no": "CA1831",
        "airline": "中国国际航空",
        "price": 780.0,
        "direct": True,
        "meal": None,
        "note": "含 {行李} 额度",
        "tags": ["直飞", "早班"],
    },
    {
        "flight_no": "MU5101",
        "airline": "China Eastern",
        "price": 920.5,
        "direct": False,
        "meal": "snack",
        "note": 'he said "ok}" then left',
        "tags": [],
    },
    {
        "flight_no": "CZ3101",
        "airline": "China Southern",
        "price": 1000,
        "direct": True,
        "meal": None,
        "note": "path C:\\temp\\{x}",
        "tags": ["{", "}", "[", "]"],
    },
    {
        "flight_no": "HU7605",
        "airline": "海南航空",
        "price": 655.0,
        "direct": True,
        "meal": "正餐",
        "note": "emoji 😀 and [brackets] and 'quotes'",
        "tags": ["night"],
    },
    {
        "flight_no": "3U8881",
        "airline": "四川航空",
        "price": 712.25,
        "direct": False,
        "meal": None,
        "note": "",
        "tags": ["经停 {成都}"],
    },
    {
        "flight_no": "ZH9101",
        "airline": "深圳航空",
        "price": 599.0,
        "direct": True,
        "meal": "snack",
        "note": "ｆｕｌｌ-width ＡＢＣ and 日本語",
        "tags": ["a", "b", "c"],
    },
    {
        "flight_no": "FM9301",
        "airline": "上海航空",
        "price": 845.0,
        "direct": True,
        "meal": None,
        "note": "tab\there",
        "tags": [],
    },
    {
        "flight_no": "MF8101",
        "airline": "厦门航空",
        "price": 1200.0,
        "direct": False,
        "meal": "vegetarian",
        "note": 'price: {"min": 800}',
        "tags": ["json-in-string"],
    },
    {
        "flight_no": "SC4651",
        "airline": "山东航空",
        "price": 430.0,
        "direct": True,
        "meal": None,
        "note": "]]]}}} closing noise",
        "tags": ["noise"],
    },
    {
        "flight_no": "GS7575",
        "airline": "天津航空",
        "price": 505.5,
        "direct": True,
        "meal": None,
        "note": "backslash at end \\",
        "tags": ["edge"],
    },
    {
        "flight_no": "KN5977",
        "airline": "中国联合航空",
        "price": 388.0,
        "direct": False,
        "meal": None,
        "note": "“弯引号” and ‘single’",
        "tags": ["quotes"],
    },
    {
        "flight_no": "JD5195",
        "airline": "首都航空",
        "price": 699.99,
        "direct": True,
        "meal": "snack",
        "note": "a, b, c,",
        "tags": ["trailing-comma-like, ]"],
    },
]

PREFIXES = [
    "Sure! Here is the result:\n",
    "好的，以下是查询结果：",
    "I found a matching flight. ",
    "Here's the JSON you asked for (as requested):\n\n",
]
SUFFIXES = [
    "\nLet me know if you need anything else.",
    "\n希望对你有帮助！",
    " Prices may change.",
    "\n\nNote: fares are subject to availability {terms apply}.",
]


def _dump(record: Any, **kw: Any) -> str:
    kw.setdefault("ensure_ascii", False)
    return json.dumps(record, **kw)


Mode = Callable[[dict[str, Any], dict[str, Any], random.Random], Case]


def _m(name: str, kind: Kind = "exact") -> Callable[[Callable[..., tuple[str, Any]]], Mode]:
    def wrap(fn: Callable[..., tuple[str, Any]]) -> Mode:
        def mode(r: dict[str, Any], other: dict[str, Any], rng: random.Random) -> Case:
            text, expected = fn(r, other, rng)
            return Case(name, text, expected, kind)

        return mode

    return wrap


MODES: list[Mode] = [
    _m("clean")(lambda r, o, g: (_dump(r), r)),
    _m("ascii_escaped")(lambda r, o, g: (_dump(r, ensure_ascii=True), r)),
    _m("indented")(lambda r, o, g: (_dump(r, indent=2), r)),
    _m("crlf_tabs")(lambda r, o, g: (_dump(r, indent="\t").replace("\n", "\r\n"), r)),
    _m("prose_wrap")(lambda r, o, g: (g.choice(PREFIXES) + _dump(r) + g.choice(SUFFIXES), r)),
    _m("code_fence_json")(lambda r, o, g: (f"```json\n{_dump(r, indent=2)}\n```", r)),
    _m("code_fence_prose")(
        lambda r, o, g: (f"{g.choice(PREFIXES)}```\n{_dump(r)}\n```\n{g.choice(SUFFIXES)}", r)
    ),
    _m("trailing_braces")(lambda r, o, g: (_dump(r) + "\n\n(see {terms} and [rules])", r)),
    _m("two_objects")(lambda r, o, g: (_dump(r) + "\n" + _dump(o), r)),
    _m("draft_then_fix")(
        lambda r, o, g: ("Draft: " + _dump(r) + "\nActually, updated: " + _dump(o), r)
    ),
    _m("stray_brace_prose")(lambda r, o, g: ("Sorry :-{ my bad. Here it is: " + _dump(r), r)),
    _m("citation_before")(lambda r, o, g: ("According to [1] and [2]: " + _dump(r), r)),
    _m("markdown_bullets")(
        lambda r, o, g: ("- checked [date]\n- checked {price}\n\n" + _dump(r, indent=1), r)
    ),
    _m("think_block")(
        lambda r, o, g: ("<think>need {city} and [date]; budget {max: 800}</think>\n" + _dump(r), r)
    ),
    _m("trailing_commas")(lambda r, o, g: (_dump(r, indent=2)[:-2] + ",\n}", r)),
    _m("python_repr")(lambda r, o, g: (repr(r), r)),
    _m("python_literals")(
        lambda r, o, g: (
            _dump(r)
            .replace('"direct": true', '"direct": True')
            .replace('"direct": false', '"direct": False')
            .replace('"meal": null', '"meal": None'),
            r,
        )
    ),
    _m("raw_newline_in_string")(
        lambda r, o, g: (
            _dump({**r, "note": r["note"] + "<NL>second line"}).replace("<NL>", "\n"),
            {**r, "note": r["note"] + "\nsecond line"},
        )
    ),
    _m("extra_field")(
        lambda r, o, g: (_dump({**r, "confidence": 0.93}), {**r, "confidence": 0.93})
    ),
    _m("renamed_field", "schema_fail")(
        lambda r, o, g: (
            _dump({("fare" if k == "price" else k): v for k, v in r.items()}),
            {("fare" if k == "price" else k): v for k, v in r.items()},
        )
    ),
    _m("missing_field", "schema_fail")(
        lambda r, o, g: (
            "```json\n" + _dump({k: v for k, v in r.items() if k != "airline"}) + "\n```",
            {k: v for k, v in r.items() if k != "airline"},
        )
    ),
    _m("wrong_type", "schema_fail")(
        lambda r, o, g: (_dump({**r, "price": "about 800"}), {**r, "price": "about 800"})
    ),
    _m("truncated", "truncated")(
        lambda r, o, g: ((d := _dump(r))[: g.randrange(1, len(d) - 1)], None)
    ),
    _m("truncated_fenced", "truncated")(
        lambda r, o, g: (
            "```json\n" + (d := _dump(r, indent=2))[: g.randrange(1, len(d) - 1)],
            None,
        )
    ),
]

_R0 = RECORDS[0]
HAND_WRITTEN: list[Case] = [
    Case(
        "hand",
        '{"flight_no":"X1","airline":"A","price":1,"direct":true,"meal":null,"note":"}","tags":[]}',
        {**_R0, "flight_no": "X1", "airline": "A", "price": 1, "note": "}", "tags": []},
        "exact",
    ),
    Case("hand", "OK.\n\n```JSON\n" + _dump(_R0) + "\n```", _R0, "exact"),
    Case("hand", "~~~\n" + _dump(_R0) + "\n~~~", _R0, "exact"),
    Case("hand", "> " + _dump(_R0), _R0, "exact"),
    Case("hand", "**Result:** `" + _dump(_R0) + "`", _R0, "exact"),
    Case("hand", _dump(_R0) + "}", _R0, "exact"),
    Case("hand", _dump(_R0) + "]]]", _R0, "exact"),
    Case("hand", "{{template}} " + _dump(_R0), _R0, "exact"),
    Case("hand", "Use `{}`-style JSON: " + _dump(_R0), _R0, "exact"),  # {} fails the schema
    Case("hand", "[] " + _dump(_R0), _R0, "exact"),
    Case("hand", "\ufeff" + _dump(_R0), _R0, "exact"),
    Case("hand", "回答：\u3000" + _dump(_R0, indent=4) + "\u3000（完）", _R0, "exact"),
    Case("hand", _dump(_R0).replace(", ", " ,\n\n  "), _R0, "exact"),
    Case("hand", '{"flight_no": "X2"} {"broken": } ' + _dump(_R0), _R0, "exact"),
    Case("hand", '{"a": 1 ] ' + _dump(_R0), _R0, "exact"),
    Case("hand", "{“flight_no”: “CA1831”}", {"flight_no": "CA1831"}, "unrepaired"),
    Case(
        "hand",
        '{flight_no: "CA1831", price: 780}',
        {"flight_no": "CA1831", "price": 780},
        "unrepaired",
    ),
    Case(
        "hand",
        '{"flight_no": "CA1831", // the cheapest\n "price": 780}',
        {"flight_no": "CA1831", "price": 780},
        "unrepaired",
    ),
    Case(
        "hand",
        '{"flight_no": "CA1831", "tags": ["直飞", ...]}',
        {"flight_no": "CA1831", "tags": ["直飞"]},
        "unrepaired",
    ),
    Case(
        "hand",
        '{"flight_no": "CA1831", "price": NaN}',
        {"flight_no": "CA1831", "price": None},
        "unrepaired",
    ),
    Case(
        "hand",
        '{"flight_no": "CA1831" "price": 780}',
        {"flight_no": "CA1831", "price": 780},
        "unrepaired",
    ),
    Case("hand", "I cannot answer that.", None, "no_json"),
    Case("hand", "```json\n```", None, "no_json"),
    Case("hand", "", None, "no_json"),
    Case(
        "hand", '{"flight_no": "CA1831", "airline": "中国国际航空", "price": 7', None, "truncated"
    ),
    Case("hand", "Here: " + _dump(_R0)[:-1], None, "truncated"),
    Case("hand", "[" + _dump(_R0) + ", " + _dump(RECORDS[1])[:20], None, "truncated"),
]


def build_corpus(seed: int = 4) -> list[Case]:
    rng = random.Random(seed)
    cases = []
    for i, record in enumerate(RECORDS):
        other = RECORDS[(i + 1) % len(RECORDS)]
        for mode in MODES:
            cases.append(mode(record, other, rng))
    return cases + HAND_WRITTEN
