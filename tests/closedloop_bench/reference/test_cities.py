"""The city-name rules: built from /cities, resolving typos and aliases, never guessing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from closedloop import ConfigurationError
from closedloop.perception import Observation
from closedloop_bench.reference import CityNormaliser, WorldTools
from closedloop_bench.world import load_world

DATA = load_world(0)
ROWS = [c.model_dump(include={"name", "name_en", "code", "abbreviation"}) for c in DATA.cities]


@pytest.fixture(scope="module")
def rules() -> CityNormaliser:
    return CityNormaliser(ROWS)


async def test_built_from_the_real_cities_endpoint(tools: WorldTools) -> None:
    rules = CityNormaliser.from_observation(await tools.list_cities())
    assert rules.names == tuple(c.name for c in DATA.cities)
    assert rules.resolve("北就").city == "北京"


def test_a_failed_city_list_is_refused() -> None:
    broken = Observation.failed("HTTP 503", source="list_cities", timestamp=0.0)
    with pytest.raises(ConfigurationError, match="observation"):
        CityNormaliser.from_observation(broken)
    with pytest.raises(ConfigurationError, match="cities"):
        CityNormaliser([])


@pytest.mark.parametrize(
    ("query", "city", "rule"),
    [
        ("北京", "北京", "exact"),
        ("Shanghai", "上海", "english"),
        ("  shanghai ", "上海", "english"),
        ("Xian", "西安", "english"),
        ("CAN", "广州", "code"),
        ("京", "北京", "abbreviation"),
        ("沪", "上海", "abbreviation"),
        ("上海市", "上海", "suffix"),
        ("北就", "北京", "edit_distance"),
        ("Bejing", "北京", "edit_distance"),
        ("Tianjing", "天津", "edit_distance"),
    ],
)
def test_resolves_names_aliases_and_typos(
    rules: CityNormaliser, query: str, city: str, rule: str
) -> None:
    match = rules.resolve(query)
    assert (match.city, match.rule, match.resolved) == (city, rule, True)
    assert match.corrected == (query.strip() != city)


def test_every_one_edit_typo_the_world_ships_is_resolved_by_rule(rules: CityNormaliser) -> None:
    # The rules never saw these typos: they come from the world's data, not from a table.
    resolved = 0
    for city in DATA.cities:
        for typo in city.typos:
            match = rules.resolve(typo)
            assert match.city in (city.name, None), (typo, match)
            resolved += match.city == city.name
    homophones = [t for c in DATA.cities for t in c.typos if t == "背景"]
    total = sum(len(c.typos) for c in DATA.cities)
    assert resolved == total - len(homophones)


def test_homophones_unknown_places_and_ties_are_not_guessed(rules: CityNormaliser) -> None:
    assert rules.resolve("背景").rule == "unknown"  # two edits: a job for the model
    for place in DATA.unknown_cities:
        assert not rules.resolve(place).resolved, place
    tied = rules.resolve("东京")  # one edit from both 北京 and 南京
    assert tied.rule == "ambiguous" and set(tied.candidates) == {"北京", "南京"}
    assert rules.resolve("北").rule == "unknown"  # one character is not a typo of two


def test_works_on_any_city_list_not_only_this_world() -> None:
    other = CityNormaliser(
        [{"name": "长沙", "name_en": "Changsha", "code": "CSX", "abbreviation": "湘"}]
    )
    assert other.resolve("长抄").city == "长沙"
    assert other.resolve("Changsa").city == "长沙"
    assert other.resolve("湘").city == "长沙"
    assert not other.resolve("北京").resolved


def test_mentions_finds_exact_names_in_text_only(rules: CityNormaliser) -> None:
    found = rules.mentions("明天从上海飞Beijing，顺便看看深夜的天气")
    assert [m.city for m in found] == ["上海", "北京"]  # 深夜 and 天气 are words, not cities


@given(st.text(max_size=12))
def test_never_crashes_and_never_invents_a_city(query: str) -> None:
    rules = CityNormaliser(ROWS)
    match = rules.resolve(query)
    if match.resolved:
        assert match.city in rules.names
    else:
        assert match.city is None


@given(st.sampled_from(DATA.cities), st.sampled_from(["name", "name_en", "code"]))
def test_every_canonical_form_resolves_to_itself(city: object, form: str) -> None:
    rules = CityNormaliser(ROWS)
    assert rules.resolve(getattr(city, form)).city == city.name  # type: ignore[attr-defined]
