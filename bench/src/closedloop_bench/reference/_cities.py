"""City names as rules, before any model (rules first, the model past a gate).

``CityNormaliser`` is built from the world's own ``/cities`` answer, never from a table
of known misspellings: exact names, English names and codes, the one-character
abbreviations the service publishes, a ``市`` suffix, and a conservative edit distance.
It refuses to guess: two equally close candidates are ``ambiguous``, nothing close is
``unknown``. Homophone typos (背景 for 北京) are two edits away and stay unresolved on
purpose; telling those apart is what a model is for.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from closedloop._exceptions import ConfigurationError
from closedloop.perception import Observation, ObservationStatus, levenshtein

__all__ = ["CityMatch", "CityNormaliser", "CityRule"]

CityRule = Literal[
    "exact", "english", "code", "abbreviation", "suffix", "edit_distance", "ambiguous", "unknown"
]
_RESOLVED = frozenset({"exact", "english", "code", "abbreviation", "suffix", "edit_distance"})
_SUFFIXES = ("市", " city", " City")


def _is_cjk(text: str) -> bool:
    return any(unicodedata.category(ch) == "Lo" for ch in text)


def _latin_key(text: str) -> str:
    # "Xi'an", "xian" and "XI AN" are one spelling to a reader: keep letters and digits.
    return re.sub(r"[^0-9a-z]", "", text.casefold())


@dataclass(frozen=True, slots=True)
class CityMatch:
    """What the rules made of one city name.

    ``city`` is the name the world uses (its Chinese name) when resolved, else None;
    ``rule`` says which rule decided; ``candidates`` lists the tied names when
    ``ambiguous``.
    """

    query: str
    city: str | None
    code: str | None
    rule: CityRule
    distance: int = 0
    candidates: tuple[str, ...] = ()

    @property
    def resolved(self) -> bool:
        """True when the rules found exactly one city."""
        return self.rule in _RESOLVED

    @property
    def corrected(self) -> bool:
        """True when the resolved name differs from what was asked (a typo, an alias)."""
        return self.resolved and self.city != self.query.strip()


@dataclass(frozen=True, slots=True)
class _City:
    name: str
    name_en: str
    code: str
    abbreviation: str | None


class CityNormaliser:
    """Resolve user-typed city names against the cities a world serves.

    Build it from ``/cities`` (``CityNormaliser.from_observation(await tools.list_cities())``)
    or from any iterable of ``{"name", "name_en", "code", "abbreviation"}`` mappings.
    ``max_latin_distance`` bounds the edits allowed in romanised names (scaled down for
    short names); Chinese names allow one substituted character, never fewer characters.
    """

    def __init__(self, cities: Iterable[Mapping[str, Any]], *, max_latin_distance: int = 2):
        rows: list[_City] = []
        for i, c in enumerate(cities):
            if not isinstance(c, Mapping) or not isinstance(c.get("name"), str):
                raise ConfigurationError(f"cities[{i}]", c, "needs at least a 'name' string")
            rows.append(
                _City(
                    name=c["name"],
                    name_en=str(c.get("name_en") or ""),
                    code=str(c.get("code") or ""),
                    abbreviation=c.get("abbreviation") or None,
                )
            )
        if not rows:
            raise ConfigurationError("cities", [], "must name at least one city")
        if isinstance(max_latin_distance, bool) or not isinstance(max_latin_distance, int):
            raise ConfigurationError("max_latin_distance", max_latin_distance, "must be an int")
        if max_latin_distance < 0:
            raise ConfigurationError("max_latin_distance", max_latin_distance, "must be >= 0")
        self._cities = tuple(rows)
        self._max_latin = max_latin_distance
        self._by_name = {c.name: c for c in rows}
        self._by_latin = {_latin_key(c.name_en): c for c in rows if c.name_en}
        self._by_code = {c.code.casefold(): c for c in rows if c.code}
        abbreviations: dict[str, list[_City]] = {}
        for row in rows:
            if row.abbreviation:
                abbreviations.setdefault(row.abbreviation, []).append(row)
        self._by_abbreviation = abbreviations

    @classmethod
    def from_observation(cls, observation: Observation) -> CityNormaliser:
        """From a ``list_cities`` observation; it must be a usable, non-empty answer."""
        value = observation.value
        cities = value.get("cities") if isinstance(value, Mapping) else value
        if (
            observation.status not in (ObservationStatus.OK, ObservationStatus.STALE)
            or not isinstance(cities, list)
            or not cities
        ):
            raise ConfigurationError(
                "observation", observation.status, f"no usable city list ({observation.meaning})"
            )
        return cls(cities)

    @property
    def names(self) -> tuple[str, ...]:
        """The canonical names, in the world's order."""
        return tuple(c.name for c in self._cities)

    def resolve(self, query: str) -> CityMatch:
        """The one city ``query`` names, or why there is none (``unknown``, ``ambiguous``)."""
        if not isinstance(query, str):
            raise ConfigurationError("query", query, "must be a str")
        q = unicodedata.normalize("NFKC", query).strip()
        found = self._direct(q, query)
        if found is not None:
            return found
        for suffix in _SUFFIXES:
            if q.endswith(suffix) and len(q) > len(suffix):
                inner = self._direct(q[: -len(suffix)].strip(), query)
                if inner is not None:
                    return CityMatch(query, inner.city, inner.code, "suffix")
        return self._nearest(q, query)

    def mentions(self, text: str) -> list[CityMatch]:
        """Cities named exactly (Chinese or English name) in free text, in order of first use.

        Only exact names: single-character abbreviations and fuzzy matches inside free
        text would fire on ordinary words (深夜, 天气), so they are left to slot values.
        """
        hits: list[tuple[int, _City]] = []
        folded = text.casefold()
        for c in self._cities:
            positions = [text.find(c.name)]
            if c.name_en:
                positions.append(folded.find(c.name_en.casefold()))
            seen = [p for p in positions if p >= 0]
            if seen:
                hits.append((min(seen), c))
        hits.sort(key=lambda h: h[0])
        return [CityMatch(c.name, c.name, c.code, "exact") for _, c in hits]

    # --- rules ------------------------------------------------------------------------

    def _direct(self, q: str, query: str) -> CityMatch | None:
        if not q:
            return None
        city = self._by_name.get(q)
        if city is not None:
            return CityMatch(query, city.name, city.code, "exact")
        latin = _latin_key(q)
        if latin and not _is_cjk(q):
            city = self._by_code.get(q.casefold()) if len(q) == 3 else None
            if city is not None:
                return CityMatch(query, city.name, city.code, "code")
            city = self._by_latin.get(latin)
            if city is not None:
                return CityMatch(query, city.name, city.code, "english")
        tied = self._by_abbreviation.get(q, [])
        if len(tied) == 1:
            return CityMatch(query, tied[0].name, tied[0].code, "abbreviation")
        if len(tied) > 1:
            return CityMatch(query, None, None, "ambiguous", candidates=tuple(c.name for c in tied))
        return None

    def _nearest(self, q: str, query: str) -> CityMatch:
        scored: list[tuple[int, _City]] = []
        if _is_cjk(q):
            # One wrong character in a two- or three-character name (北就, 上嗨); a shorter
            # query is not a typo of a longer name but a different word.
            if len(q) >= 2:
                for c in self._cities:
                    if len(c.name) == len(q):
                        d = levenshtein(q, c.name)
                        if d <= 1:
                            scored.append((d, c))
        else:
            key = _latin_key(q)
            # Short names allow fewer edits: "Lhasa" must not become "Xi'an".
            limit = min(self._max_latin, len(key) // 4)
            for c in self._cities:
                target = _latin_key(c.name_en)
                if target and limit > 0:
                    d = levenshtein(key, target)
                    if d <= limit:
                        scored.append((d, c))
        if not scored:
            return CityMatch(query, None, None, "unknown")
        best = min(d for d, _ in scored)
        tied = [c for d, c in scored if d == best]
        if len(tied) > 1:
            return CityMatch(
                query, None, None, "ambiguous", best, candidates=tuple(c.name for c in tied)
            )
        return CityMatch(query, tied[0].name, tied[0].code, "edit_distance", best)
