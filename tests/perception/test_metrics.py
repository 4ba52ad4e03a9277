"""Error metrics: known values, edge cases and properties."""

from __future__ import annotations

import sys
import types
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from closedloop import ConfigurationError
from closedloop.perception import (
    Embedder,
    NGramEmbedder,
    SentenceTransformerEmbedder,
    error_business,
    error_edit_distance,
    error_feedback,
    error_keyword_coverage,
    error_similarity,
    levenshtein,
)


def test_worked_examples() -> None:
    assert error_edit_distance("北就", "北京") == 0.5  # one substitution over two characters
    assert error_business({"city": "北京", "temperature": 25}, ["temperature"]) == 0.0
    assert error_business({"city": "北京"}, ["temperature"]) == 1.0


@pytest.mark.parametrize(
    ("a", "b", "distance"),
    [
        ("", "", 0),
        ("abc", "", 3),
        ("kitten", "sitting", 3),
        ("flaw", "lawn", 2),
        ("上海市", "上海", 1),
        ("ab", "ba", 2),
        ("intention", "execution", 5),
    ],
)
def test_levenshtein_known_values(a: str, b: str, distance: int) -> None:
    assert levenshtein(a, b) == levenshtein(b, a) == distance


def test_edit_distance_is_normalised_by_the_longer_string() -> None:
    assert error_edit_distance("", "") == 0.0
    assert error_edit_distance("kitten", "sitting") == pytest.approx(3 / 7)
    assert error_edit_distance("abc", "") == 1.0
    with pytest.raises(ConfigurationError):
        error_edit_distance("a", None)  # type: ignore[arg-type]


def test_business_error_counts_missing_none_and_blank_key_fields() -> None:
    data = {
        "city": "北京",
        "forecast": [{"temp": 21}, {"temp": None}],
        "alerts": [],
        "note": "  ",
        "a.b": 1,
    }
    assert error_business(data, ["city", "forecast.0.temp", "a.b"]) == 0.0
    assert error_business(data, ["forecast.1.temp", "forecast.5.temp", "x"]) == 1.0
    assert error_business(data, ["city", "alerts", "note", "forecast.0.temp"]) == 0.5
    assert error_business(data, ["alerts", "note"], blank_is_missing=False) == 0.0
    assert error_business(data, ["city", "city", "x"]) == 0.5  # duplicates count once
    assert error_business(data, []) == 0.0
    assert error_business(None, ["city"]) == 1.0
    assert error_business("not a mapping", ["city"]) == 1.0
    with pytest.raises(ConfigurationError):
        error_business(data, "city")


def test_keyword_coverage() -> None:
    text = "北京今日气温 25 度，Sunny with light WIND."
    assert error_keyword_coverage(text, ["北京", "气温", "sunny", "wind"]) == 0.0
    assert error_keyword_coverage(text, ["北京", "上海"]) == 0.5
    assert error_keyword_coverage(text, ["ＷＩＮＤ"]) == 0.0  # full-width folds to ASCII
    assert error_keyword_coverage(text, ["rain", "rain", " "]) == 1.0
    assert error_keyword_coverage(text, []) == 0.0
    with pytest.raises(ConfigurationError):
        error_keyword_coverage(text, "北京")


def test_similarity_orders_near_and_far_texts() -> None:
    near = error_similarity("北京今日气温25度", "北京今天气温25度")
    far = error_similarity("北京今日气温25度", "the stock market fell sharply")
    assert 0.0 < near < far <= 1.0
    assert far == pytest.approx(1.0, abs=0.05)
    assert error_similarity("Weather in Beijing", "weather in beijing") == pytest.approx(0.0)
    assert error_similarity("", "") == 0.0
    assert error_similarity("   ", "") == 0.0  # neither has content
    assert error_similarity("abc", "") == 1.0


def test_ngram_embedder_is_deterministic_normalised_and_corpus_aware() -> None:
    embedder = NGramEmbedder()
    first = embedder.embed(["北京天气", "上海天气", ""])
    again = embedder.embed(["北京天气", "上海天气", ""])
    assert np.array_equal(first, again)
    assert np.linalg.norm(first[0]) == pytest.approx(1.0)
    assert np.linalg.norm(first[2]) == 0.0
    # With a corpus where "天气" is everywhere it weighs little, so the cities dominate.
    corpus = [f"{city}天气" for city in ["广州", "深圳", "成都", "西安", "杭州"]]
    fitted = NGramEmbedder(corpus=corpus)
    assert error_similarity("北京天气", "上海天气", fitted) > error_similarity(
        "北京天气", "上海天气", NGramEmbedder(corpus=["北京", "上海"])
    )
    assert isinstance(embedder, Embedder)
    for bad in [{"ngram_range": (0, 2)}, {"ngram_range": (3, 2)}, {"corpus": "text"}]:
        with pytest.raises(ConfigurationError):
            NGramEmbedder(**bad)  # type: ignore[arg-type]


class ConstantEmbedder:
    def __init__(self, vectors: list[list[float]]) -> None:
        self.vectors = vectors

    def embed(self, texts: Sequence[str]) -> Any:
        return np.array(self.vectors, dtype=np.float64)


def test_similarity_uses_a_pluggable_embedder_and_checks_its_output() -> None:
    assert error_similarity("a", "b", ConstantEmbedder([[1, 0], [0, 1]])) == 1.0
    assert error_similarity("a", "b", ConstantEmbedder([[1, 0], [-1, 0]])) == 1.0  # clipped
    assert error_similarity("a", "b", ConstantEmbedder([[3, 4], [3, 4]])) == pytest.approx(0.0)
    with pytest.raises(ConfigurationError):
        error_similarity("a", "b", ConstantEmbedder([[1, 0]]))
    with pytest.raises(ConfigurationError):
        error_similarity("a", "b", ConstantEmbedder([[float("nan"), 0], [1, 0]]))


def test_sentence_transformers_is_optional_and_lazy(monkeypatch: pytest.MonkeyPatch) -> None:
    embedder = SentenceTransformerEmbedder("all-MiniLM-L6-v2")  # no import yet
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # "not installed"
    with pytest.raises(ConfigurationError) as info:
        embedder.embed(["x"])
    assert "not installed" in str(info.value)

    loaded: dict[str, Any] = {}

    class FakeModel:
        def __init__(self, name: str, **kw: Any) -> None:
            loaded.update(name=name, **kw)

        def encode(self, texts: list[str], **kw: Any) -> Any:
            return np.array([[1.0, float(len(t))] for t in texts])

    fake = types.ModuleType("sentence_transformers")
    fake.SentenceTransformer = FakeModel  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sentence_transformers", fake)
    embedder = SentenceTransformerEmbedder("local-model")
    assert 0.0 < error_similarity("a", "abcd", embedder) < 1.0
    assert loaded == {"name": "local-model", "device": None, "local_files_only": True}


def test_feedback_error() -> None:
    assert error_feedback(9, 10) == pytest.approx(0.1)
    assert error_feedback(10, 10) == 0.0
    assert error_feedback(0, 10) == 1.0
    assert error_feedback(0, 0) == 0.0
    assert error_feedback(0, 0, if_none=0.5) == 0.5
    assert error_feedback(2.5, 5.0) == 0.5
    for args in [(11, 10), (-1, 10), (1, float("nan")), (1, float("inf"))]:
        with pytest.raises(ConfigurationError):
            error_feedback(*args)


TEXT = st.text(max_size=40)


@given(TEXT, TEXT)
def test_text_metrics_lie_in_the_unit_interval_and_identity_is_zero(a: str, b: str) -> None:
    for metric in (error_edit_distance, error_similarity):
        value = metric(a, b)
        assert isinstance(value, float) and 0.0 <= value <= 1.0
        assert metric(a, a) == 0.0
    assert error_edit_distance(a, b) == error_edit_distance(b, a)
    assert levenshtein(a, b) <= max(len(a), len(b))
    # The shortcut for equal texts hides nothing: the embedder itself sees them as one.
    twin = NGramEmbedder().embed([a, a])
    if np.linalg.norm(twin[0]) > 0:
        assert float(twin[0] @ twin[1]) == pytest.approx(1.0)


@given(TEXT, st.lists(TEXT, max_size=6))
def test_keyword_coverage_in_unit_interval_and_own_words_are_covered(
    text: str, keywords: list[str]
) -> None:
    assert 0.0 <= error_keyword_coverage(text, keywords) <= 1.0
    assert error_keyword_coverage(" ".join(keywords), keywords) == 0.0


JSON_DOCS = st.dictionaries(
    st.text(alphabet="abcxyz", min_size=1, max_size=3),
    st.none() | st.integers() | st.text(max_size=3) | st.lists(st.integers(), max_size=2),
    max_size=6,
)


@given(JSON_DOCS, st.lists(st.text(alphabet="abcxyz.0", min_size=1, max_size=5), max_size=6))
def test_business_error_in_unit_interval_and_present_fields_give_zero(
    data: dict[str, Any], fields: list[str]
) -> None:
    assert 0.0 <= error_business(data, fields) <= 1.0
    present = [k for k, v in data.items() if v not in (None, "", []) and str(v).strip()]
    assert error_business(data, present) == 0.0


@given(st.integers(0, 10**6), st.integers(0, 10**6))
def test_feedback_in_unit_interval_and_all_positive_is_zero(a: int, b: int) -> None:
    positive, total = min(a, b), max(a, b)
    assert 0.0 <= error_feedback(positive, total) <= 1.0
    assert error_feedback(total, total) == 0.0
