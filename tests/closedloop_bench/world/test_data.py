"""The world's data: shipped files match the generator, seeds are deterministic, the
hazards are there, and OCR noise never destroys the right answer."""

from __future__ import annotations

import importlib.resources as resources
import random
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from closedloop import ConfigurationError
from closedloop_bench.world import (
    DEFAULT_SEED,
    LOOKALIKES,
    TODAY,
    World,
    add_ocr_noise,
    generate_world,
    load_world,
    world_from_files,
    world_to_files,
)
from closedloop_bench.world._data import DATA_FILES


def test_shipped_files_are_the_generator_output_for_the_default_seed() -> None:
    folder = resources.files("closedloop_bench.world").joinpath("data")
    shipped = {name: folder.joinpath(name).read_text(encoding="utf-8") for name in DATA_FILES}
    expected = world_to_files(generate_world(DEFAULT_SEED))
    stale = [name for name in DATA_FILES if shipped[name] != expected[name]]
    assert not stale, f"run scripts/gen_world_data.py; stale: {stale}"
    assert load_world() == generate_world(DEFAULT_SEED)
    total = sum(len(t.encode()) for t in shipped.values())
    assert total < 500_000  # "small shipped files"


def test_package_data_lists_every_file() -> None:
    names = {p.name for p in resources.files("closedloop_bench.world").joinpath("data").iterdir()}
    assert set(DATA_FILES) <= names


def test_files_round_trip() -> None:
    data = generate_world(7)
    assert world_from_files(world_to_files(data)) == data


def test_missing_file_is_named() -> None:
    files = world_to_files(generate_world(1))
    del files["flights.json"]
    with pytest.raises(ConfigurationError, match=r"flights\.json"):
        world_from_files(files)


def test_same_seed_same_data_other_seed_other_data() -> None:
    a, b, c = generate_world(3), generate_world(3), generate_world(4)
    assert a == b
    assert a.weather != c.weather
    assert [f.price_cny for f in a.flights] != [f.price_cny for f in c.flights]
    assert [d.text for d in a.documents] != [d.text for d in c.documents]
    assert a.cities == c.cities  # the map is fixed; only measurements vary by seed


@pytest.mark.parametrize("seed", [-1, 1.5, True, "0"])
def test_bad_seed_is_refused(seed: object) -> None:
    with pytest.raises(ConfigurationError, match="seed"):
        load_world(seed)  # type: ignore[arg-type]


def test_city_hazards_are_in_the_data() -> None:
    data = load_world()
    beijing = next(c for c in data.cities if c.name == "北京")
    shanghai = next(c for c in data.cities if c.name == "上海")
    assert beijing.abbreviation == "京" and "北就" in beijing.typos
    assert shanghai.abbreviation == "沪"
    names = {c.name for c in data.cities} | {c.name_en for c in data.cities}
    for city in data.cities:
        assert not set(city.typos) & names  # a typo is never also a real name
    assert not set(data.unknown_cities) & names


def test_calendar_and_coverage() -> None:
    data = load_world()
    assert data.today == TODAY == data.schedule_from
    days = {w.date for w in data.weather}
    assert min(days) == data.weather_from < data.today < data.weather_to == max(days)
    for city in data.cities:
        assert len([w for w in data.weather if w.city == city.name]) == len(days)
    for w in data.weather:
        assert w.temp_min_c <= w.temperature_c <= w.temp_max_c
    ids = [f.flight_id for f in data.flights]
    assert len(ids) == len(set(ids))
    for f in data.flights:
        assert data.schedule_from <= f.date <= data.schedule_to
        assert f.price_cny > 0 and f.price_cny % 10 == 0
    # Prices move with the date, so "try other dates" can fit a budget.
    route = [f for f in data.flights if (f.origin, f.destination) == ("BJS", "SHA")]
    assert len({f.price_cny for f in route}) > 10


def test_documents_truth_matches_clean_text_and_noise_is_recoverable() -> None:
    data = load_world()
    assert {d.noise for d in data.documents} == {"clean", "light", "heavy"}
    for doc in data.documents:
        t = doc.truth
        assert f"{t.revenue_mcny:,.1f}" in doc.clean_text
        assert f"{t.net_profit_mcny:,.1f}" in doc.clean_text
        assert f"{t.gross_margin_pct:.1f}%" in doc.clean_text
        assert (doc.text == doc.clean_text) == (doc.corruptions == 0)
        assert _denoise(doc.text) == _denoise(doc.clean_text)
    yoy = {(d.company_id, d.quarter): d.truth for d in data.documents}
    for (cid, quarter), truth in yoy.items():
        if quarter.startswith("2024"):
            prev = yoy[(cid, "2023" + quarter[4:])]
            expected = round((truth.revenue_mcny / prev.revenue_mcny - 1) * 100, 1)
            assert abs(truth.revenue_yoy_pct - expected) <= 0.15


_REVERSE = {v: k for k, v in LOOKALIKES.items()}


def _denoise(text: str) -> str:
    """Undo look-alikes and stray spaces in numbers (what a careful extractor does)."""
    text = re.sub(r"(?<=[\dOlSBZ,.]) (?=[\dOlSBZ,.%])", "", text)

    def fix(m: re.Match[str]) -> str:
        return "".join(_REVERSE.get(ch, ch) for ch in m.group(0))

    return re.sub(r"[\dOlSBZ][\dOlSBZ,.]*", fix, text)


@given(
    numbers=st.lists(st.floats(0, 1e6, allow_nan=False).map(lambda x: round(x, 1)), max_size=6),
    noise=st.sampled_from(["clean", "light", "heavy"]),
    seed=st.integers(0, 2**32),
)
def test_ocr_noise_only_swaps_lookalikes_and_adds_spaces(
    numbers: list[float], noise: str, seed: int
) -> None:
    clean = "".join(f"收入：{n:,.1f}；" for n in numbers)
    noisy, count = add_ocr_noise(clean, noise, random.Random(seed))  # type: ignore[arg-type]
    assert (noisy == clean) == (count == 0)
    if noise == "clean":
        assert noisy == clean
    assert len(noisy) - len(clean) <= count
    assert _denoise(noisy) == clean


def test_world_indexes_do_not_resolve_typos() -> None:
    world = World(latency_scale=0.0)
    assert world.city("北京") is world.city("beijing") is world.city("BJS")
    assert world.city("  Shanghai ") is not None
    for query in ("北就", "京", "沪", "Bejing", "拉萨", ""):
        assert world.city(query) is None
