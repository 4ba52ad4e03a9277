"""The generated task sets: size, spread, splits, determinism and self-consistency."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from collections import Counter

import jsonschema
import pytest

from closedloop import ConfigurationError
from closedloop_bench.reference import (
    CHECKERS,
    DOMAIN_TOOLS,
    SPLIT_SEEDS,
    Answer,
    ReferenceTask,
    answer_schema,
    load_tasks,
    task_counts,
)
from closedloop_bench.world import load_world

DEV = load_tasks("dev")
EVAL = load_tasks("eval")
DOMAINS = ("weather", "flight", "meeting", "report")


@pytest.mark.parametrize("tasks", [DEV, EVAL], ids=["dev", "eval"])
def test_each_split_has_300_tasks_over_four_domains_and_ten_step_counts(
    tasks: tuple[ReferenceTask, ...],
) -> None:
    assert len(tasks) >= 300
    counts = task_counts(tasks)
    assert set(counts["domain"]) == set(DOMAINS)
    assert min(counts["domain"].values()) >= 70
    assert set(counts["steps"]) == {str(n) for n in range(1, 11)}
    for domain in DOMAINS:
        steps = {t.expected_steps for t in tasks if t.domain == domain}
        assert min(steps) == 1 and max(steps) >= 9, (domain, sorted(steps))
    assert len({t.id for t in tasks}) == len(tasks)
    assert sum(t.language == "zh" for t in tasks) > len(tasks) / 2


def test_bad_inputs_of_issue_6_are_all_there() -> None:
    tags = Counter(tag for t in (*DEV, *EVAL) for tag in t.tags)
    for tag in ("unknown_city", "bad_date", "past", "over_budget", "no_route", "unknown_company"):
        assert tags[tag] >= 2, tag
    for domain in DOMAINS:
        assert any(t.impossible and t.domain == domain for t in DEV), domain
    # Budgets below any price: every fare with seats on every searched date is above it.
    data = load_world(0)
    codes = {c.name: c.code for c in data.cities}
    over = [t for t in DEV if "over_budget" in t.tags]
    assert over
    for t in over:
        for call in t.ideal_trajectory:
            a = call.arguments
            fares = [
                f.price_cny
                for f in data.flights
                if (f.origin, f.destination, f.date.isoformat())
                == (codes[a["from_city"]], codes[a["to_city"]], a["date"])
                and f.seats > 0
            ]
            assert all(p > t.ground_truth["budget"] for p in fares), t.id
    assert any(t.ground_truth["budget"] <= 100 for t in (*DEV, *EVAL) if "over_budget" in t.tags)


def test_dev_and_eval_come_from_different_seeds_and_share_no_prompt() -> None:
    assert SPLIT_SEEDS["dev"] != SPLIT_SEEDS["eval"]
    assert not {t.prompt for t in DEV} & {t.prompt for t in EVAL}
    assert {t.split for t in DEV} == {"dev"} and {t.split for t in EVAL} == {"eval"}


def test_another_world_seed_gives_other_tasks_with_its_own_truth() -> None:
    other = load_tasks("dev", seed=1)
    assert len(other) == len(DEV)
    assert [t.ground_truth for t in other] != [t.ground_truth for t in DEV]
    assert {t.world_seed for t in other} == {1}


def _digest(split: str) -> str:
    code = (
        "import hashlib, json; from closedloop_bench.reference import load_tasks; "
        f"ts = load_tasks({split!r}); "
        "print(hashlib.sha256(json.dumps([t.model_dump(mode='json') for t in ts], "
        "sort_keys=True).encode()).hexdigest())"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return done.stdout.strip()


def test_generation_is_deterministic_across_processes() -> None:
    here = hashlib.sha256(
        json.dumps([t.model_dump(mode="json") for t in DEV], sort_keys=True).encode()
    ).hexdigest()
    assert _digest("dev") == here == _digest("dev")


@pytest.mark.parametrize("task", [*DEV, *EVAL], ids=lambda t: t.id)
def test_every_task_is_consistent(task: ReferenceTask) -> None:
    assert task.expected_steps == len(task.ideal_trajectory)
    assert task.checker in CHECKERS
    assert set(task.tools) <= set(DOMAIN_TOOLS[task.domain])
    jsonschema.Draft202012Validator.check_schema(task.required_fields)
    jsonschema.validate(task.ideal_answer.fields, task.required_fields)
    status = task.ideal_answer.fields["status"]
    assert status == ("impossible" if task.impossible else "answered")
    assert (task.checker == "impossible") == task.impossible
    assert ReferenceTask.model_validate_json(task.model_dump_json()) == task


def test_the_answer_schema_needs_values_or_a_reason() -> None:
    schema = answer_schema({"temperature_c": {"type": "number"}})
    jsonschema.validate({"status": "answered", "temperature_c": 21.5}, schema)
    jsonschema.validate({"status": "impossible", "reason": "unknown city"}, schema)
    for bad in ({"status": "answered"}, {"status": "impossible"}, {"temperature_c": 1}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def test_possible_and_impossible_tasks_of_a_template_share_one_schema() -> None:
    # The schema must not give away that a task has no answer.
    by_template: dict[str, set[str]] = {}
    for t in (*DEV, *EVAL):
        by_template.setdefault(t.template, set()).add(json.dumps(t.required_fields, sort_keys=True))
    mixed = {t.template for t in DEV if t.impossible} & {
        t.template for t in DEV if not t.impossible
    }
    assert mixed, "some templates mix possible and impossible tasks"
    for template in mixed:
        assert len(by_template[template]) == 1, template


def test_truths_are_computed_from_the_world_data() -> None:
    data = load_world(0)
    weather = {(w.city, w.date.isoformat()): w for w in data.weather}
    singles = [t for t in DEV if t.template == "weather_single"]
    for t in singles:
        w = weather[(t.ground_truth["city"], t.ground_truth["date"])]
        assert t.ground_truth["temperature_c"] == w.temperature_c
    fares = {f.flight_id: f.price_cny for f in data.flights}
    for t in DEV:
        for flight_id in t.ground_truth.get("flight_ids", []):
            assert fares[flight_id] == t.ground_truth["price_cny"]


def test_the_agent_task_carries_the_schema_as_one_required_field() -> None:
    task = next(t for t in DEV if t.template == "flight_book")
    agent_task = task.agent_task(task_id="x1")
    (field,) = agent_task.required_fields
    assert field.name == "answer" and field.schema == task.required_fields
    assert field.problems(task.ideal_answer.fields) == []
    assert field.problems({"status": "answered"})  # values are required when answered
    assert "flight_id" in field.description and agent_task.prompt == task.prompt


def test_answers_are_read_from_every_form() -> None:
    assert Answer.of("无法完成").text == "无法完成"
    assert Answer.of({"answer": {"status": "impossible"}}).fields == {"status": "impossible"}
    assert Answer.of({"status": "answered", "value": 1}).fields["value"] == 1
    with pytest.raises(ConfigurationError, match="answer"):
        Answer.of(42)


def test_bad_split_or_seed_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="split"):
        load_tasks("test")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="seed"):
        load_tasks("dev", seed=-1)


def test_relative_dates_in_prompts_mean_the_worlds_today() -> None:
    data = load_world(0)
    assert {t.today for t in (*DEV, *EVAL)} == {data.today.isoformat()}
    tomorrow = [t for t in DEV if t.template == "weather_single" and "明天" in t.prompt]
    assert tomorrow and all(t.ground_truth["date"] == "2025-06-03" for t in tomorrow)
