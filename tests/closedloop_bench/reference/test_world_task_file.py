"""A user's world task file: the example loads and holds up on a fault-free world; a bad
line names its line and field; a task whose ideal run fails or whose checker accepts
an empty run is refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from closedloop import ConfigurationError
from closedloop.harness import TaskFileError
from closedloop_bench.reference import (
    describe_world_tasks,
    load_tasks,
    load_world_tasks,
    verify_world_tasks,
)

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "faults_tasks.jsonl"


def _lines() -> list[dict[str, Any]]:
    return [json.loads(line) for line in EXAMPLE.read_text(encoding="utf-8").splitlines()]


def _write(tmp_path: Path, records: list[Any]) -> Path:
    path = tmp_path / "tasks.jsonl"
    path.write_text(
        "".join(
            (r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in records
        ),
        encoding="utf-8",
    )
    return path


def test_the_example_is_generated_tasks_written_out() -> None:
    tasks = load_world_tasks(EXAMPLE)
    assert len(tasks) == 10
    generated = {t.id: t for t in load_tasks("dev")}
    assert all(generated[t.id] == t for t in tasks)
    assert {t.domain for t in tasks} == {"weather", "flight", "meeting", "report"}
    assert any(t.impossible for t in tasks) and any(t.checker == "flight_booked" for t in tasks)
    text = describe_world_tasks(tasks)
    assert "dev-s0-flight-flight_book-001: flight, 3 step(s), checker flight_booked" in text
    assert '  call: pay({"amount_cny": 1440, "order_id": "$book_flight.order_id"})' in text


async def test_the_example_holds_up_on_a_fault_free_world() -> None:
    await verify_world_tasks(EXAMPLE)


def _changed(**change: Any) -> list[Any]:
    records: list[Any] = _lines()[:3]
    record = dict(records[1])
    for key, value in change.items():
        if value is None:
            del record[key]
        else:
            record[key] = value
    records[1] = record
    return records


@pytest.mark.parametrize(
    ("records", "field", "words"),
    [
        (_changed(prompt=None), "prompt", "missing (required)"),
        (_changed(expected_steps="two"), "expected_steps", "valid integer"),
        (_changed(domain="space"), "domain", "'weather'"),
        (_changed(checker="vibes"), "checker", "unknown checker 'vibes'"),
        (_changed(world_seed=3), "world_seed", "not the benchmark's world seed (0)"),
        (_changed(colour="red"), "colour", "Extra inputs"),
        (
            _changed(ideal_trajectory=[{"tool": "pay", "arguments": {}}, {"tool": "get_weather"}]),
            "ideal_trajectory[0].tool",
            "'pay' is not a weather tool",
        ),
        (_changed(expected_steps=5), "(task)", "ideal trajectory has 2 calls"),
        ([*_lines()[:1], "{nope", *_lines()[2:3]], "(json)", "not JSON"),
        ([*_lines()[:1], "[]"], "(task)", "JSON object"),
        ([*_lines()[:1], _lines()[0]], "id", "repeats line 1"),
    ],
)
def test_a_bad_line_names_its_line_and_field(
    tmp_path: Path, records: list[Any], field: str, words: str
) -> None:
    with pytest.raises(TaskFileError) as caught:
        load_world_tasks(_write(tmp_path, records))
    assert (caught.value.line, caught.value.field) == (2, field), str(caught.value)
    assert words in str(caught.value)


def test_a_missing_or_empty_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="is not a task file"):
        load_world_tasks(tmp_path / "none.jsonl")
    with pytest.raises(ConfigurationError, match="holds no tasks"):
        load_world_tasks(_write(tmp_path, [""]))


async def test_a_wrong_ideal_answer_is_refused(tmp_path: Path) -> None:
    record = _lines()[0]
    record["ideal_answer"]["fields"]["temperature_c"] += 9
    path = _write(tmp_path, [_lines()[2], record])
    with pytest.raises(TaskFileError) as caught:
        await verify_world_tasks(path)
    assert (caught.value.line, caught.value.field) == (2, "ideal_answer")
    assert f"task {record['id']}: checker weather_report refuses the ideal run" in str(caught.value)


async def test_an_impossible_task_whose_ideal_run_answers_is_refused(tmp_path: Path) -> None:
    impossible = next(r for r in _lines() if r["impossible"])
    impossible["ideal_answer"] = {"text": "", "fields": {"status": "answered"}}
    with pytest.raises(TaskFileError, match="field ideal_answer"):
        await verify_world_tasks(_write(tmp_path, [impossible]))


async def test_a_trajectory_the_world_refuses_is_refused(tmp_path: Path) -> None:
    booking = next(r for r in _lines() if r["checker"] == "flight_booked")
    booking["ideal_trajectory"][2]["arguments"]["order_id"] = "$cancel_booking.order_id"
    with pytest.raises(TaskFileError, match=r"line 1, field ideal_trajectory: task .*refused"):
        await verify_world_tasks(_write(tmp_path, [booking]))


async def test_a_checker_that_accepts_an_empty_run_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from closedloop_bench.reference import CHECKERS, CheckerVerdict

    monkeypatch.setitem(
        CHECKERS, "weather_report", lambda *_: CheckerVerdict(success=True, reason="anything goes")
    )
    with pytest.raises(TaskFileError) as caught:
        await verify_world_tasks(_write(tmp_path, [_lines()[0]]))
    assert (caught.value.line, caught.value.field) == (1, "checker")
    assert "accepts an empty run (no call, no answer): anything goes" in str(caught.value)
