"""Reading requests by rule: dates, hours, and the pieces a request grammar leaves over."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "Lang",
    "Span",
    "chunks",
    "date_range",
    "find_dates",
    "find_hours",
    "lang_of",
    "valid_date",
    "words",
]

Lang = Literal["zh", "en"]


def lang_of(text: str) -> Lang:
    """``zh`` when the text has Chinese characters, else ``en``."""
    return "zh" if re.search(r"[\u4e00-\u9fff]", text) else "en"


@dataclass(frozen=True, slots=True)
class Span:
    """A piece of the request: where it is and what the rules read it as."""

    start: int
    end: int
    value: str


def words(text: str) -> tuple[str, ...]:
    """A lexicon written as one string."""
    return tuple(text.split())


_MONTHS = words(
    "january february march april may june july august september october november december"
)
_DATE = re.compile(
    r"(?P<iso>\d{4}-\d{1,2}-\d{1,2})"
    r"|(?:(?P<zy>\d{4})年)?(?P<zm>\d{1,2})月(?P<zd>\d{1,2})[日号]"
    rf"|\b(?P<em>{'|'.join(_MONTHS)})\s+(?P<ed>\d{{1,2}})(?:st|nd|rd|th)?(?:,?\s+(?P<ey>\d{{4}}))?"
    r"|(?P<rel>大后天|后天|今天|明天|昨天|前天|the day after tomorrow|today|tomorrow|yesterday"
    r"|in two days|in three days)",
    re.IGNORECASE,
)
_RELATIVE = {"大后天": 3, "后天": 2, "今天": 0, "明天": 1, "昨天": -1, "前天": -2}
_RELATIVE |= {"the day after tomorrow": 2, "today": 0, "tomorrow": 1, "yesterday": -1}
_RELATIVE |= {"in two days": 2, "in three days": 3}


def find_dates(text: str, today: dt.date) -> list[Span]:
    """Every date in ``text``, in order, as ``YYYY-MM-DD`` (kept even when the calendar has no
    such day, so the answer can say so)."""
    out = []
    for m in _DATE.finditer(text):
        if m["iso"]:
            y, mo, d = (int(x) for x in m["iso"].split("-"))
        elif m["zm"]:
            y, mo, d = int(m["zy"] or today.year), int(m["zm"]), int(m["zd"])
        elif m["em"]:
            y, mo, d = int(m["ey"] or today.year), _MONTHS.index(m["em"].lower()) + 1, int(m["ed"])
        else:
            day = today + dt.timedelta(days=_RELATIVE[m["rel"].lower()])
            y, mo, d = day.year, day.month, day.day
        out.append(Span(m.start(), m.end(), f"{y:04d}-{mo:02d}-{d:02d}"))
    return out


def valid_date(iso: str) -> bool:
    try:
        dt.date.fromisoformat(iso)
    except ValueError:
        return False
    return True


def date_range(first: str, last: str) -> list[str]:
    a, b = dt.date.fromisoformat(first), dt.date.fromisoformat(last)
    return [(a + dt.timedelta(days=i)).isoformat() for i in range((b - a).days + 1)]


_HOUR = re.compile(r"(?P<part>上午|中午|下午|晚上)?(?P<zh>\d{1,2})点|\b(?P<en>\d{1,2}):00\b")


def find_hours(text: str) -> list[Span]:
    """Whole hours: ``下午2点`` and ``14:00`` both read as ``14:00``."""
    out = []
    for m in _HOUR.finditer(text):
        hour = int(m["zh"] or m["en"])
        if m["part"] in ("下午", "晚上") and hour < 12:
            hour += 12
        out.append(Span(m.start(), m.end(), f"{hour:02d}:00"))
    return out


_EN_STOP = frozenset(
    words(
        "what which check how give in is if i book find take the on from to collect compare room "
        "auditorium cny rmb yes no please need needs and or for with at of by one it its"
    )
    + _MONTHS
)
_PIECE = re.compile(r"[\u4e00-\u9fff]+|[A-Za-z][A-Za-z'\-]*")


def chunks(text: str, masked: Iterable[tuple[int, int]], lexicon: Iterable[str]) -> list[Span]:
    """The pieces of ``text`` the request grammar does not explain: slot candidates.

    ``masked`` spans (dates, names, rooms) and every ``lexicon`` word (longest first) are
    cut out; what stays, split at punctuation and script changes, is a candidate. Latin
    words count only when capitalised and not a known function word.
    """
    keep = [True] * len(text)
    for a, b in masked:
        keep[a:b] = [False] * (b - a)
    for word in sorted(set(lexicon), key=len, reverse=True):
        for m in re.finditer(re.escape(word), text, re.IGNORECASE if word.isascii() else 0):
            if all(keep[m.start() : m.end()]):
                keep[m.start() : m.end()] = [False] * (m.end() - m.start())
    visible = "".join(ch if k else "\0" for ch, k in zip(text, keep, strict=True))
    out = []
    for m in _PIECE.finditer(visible):
        piece = re.sub(r"'s$", "", m.group(0))
        if piece.isascii() and (not piece[0].isupper() or piece.casefold() in _EN_STOP):
            continue
        out.append(Span(m.start(), m.start() + len(piece), piece))
    return out
