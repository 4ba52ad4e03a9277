"""A user's task file: the example loads and its references hold; each bad line is one
error naming the line and the field; references are checked in the sandbox."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from closedloop import ConfigurationError
from closedloop.harness import (
    HumanEvalProblem,
    Sandbox,
    TaskFileError,
    describe_tasks,
    empty_candidate,
    load_task_file,
    load_verified_tasks,
    verify_references,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "refine_tasks.jsonl"

GOOD: dict[str, Any] = {
    "task_id": "t/1",
    "prompt": 'def inc(x: int) -> int:\n    """x + 1."""\n',
    "entry_point": "inc",
    "canonical_solution": "    return x + 1\n",
    "test": "def check(candidate):\n    assert candidate(1) == 2\n",
}


def write(path: Path, *records: object) -> Path:
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_the_example_file_loads_with_the_split_a_person_expects() -> None:
    problems = load_task_file(EXAMPLE)
    assert len(problems) == 10
    tasks = {p.task_id: p.task() for p in problems}
    lru = tasks["example/lru_cache"]
    assert [c.test for c in lru.checks][:2] == ["c.get(1) == 1", "c.get(2) == -1"]
    assert lru.checks[0].setup == "c = candidate(2)\nc.put(1, 1)"
    port = tasks["example/parse_port"]
    assert port.checks[2].test.startswith("try:\n    candidate('0')")
    # A prose prompt is shown as it is; a Python one as code to complete.
    assert lru.prompt.startswith("Write a class LRUCache") and "```python" not in lru.prompt
    assert "```python\nfrom typing import List" in tasks["example/running_max"].prompt
    text = describe_tasks(list(tasks.values()))
    assert "example/lru_cache: 4 check(s), entry point LRUCache" in text
    assert "    setup | c = candidate(2)" in text and "    test | c.get(1) == 1" in text


@pytest.mark.integration
async def test_the_example_references_pass_and_empty_candidates_fail() -> None:
    problems = await load_verified_tasks(EXAMPLE)
    assert len(problems) == 10
    box = Sandbox()
    for problem in problems:
        if problem.has_reference:
            ev = await box.run(problem.task(), problem.canonical_program)
            assert ev.passed == ev.total, problem.task_id


BAD_LINES: list[tuple[object, str, str]] = [
    ("{not json", "(json)", "not JSON"),
    ("[1, 2]", "(task)", "JSON object"),
    ({k: v for k, v in GOOD.items() if k != "test"}, "test", "missing"),
    ({k: v for k, v in GOOD.items() if k != "entry_point"}, "entry_point", "missing"),
    ({**GOOD, "prompt": 3}, "prompt", "must be a string, not int"),
    ({**GOOD, "canonical_solution": ["x"]}, "canonical_solution", "must be a string"),
    ({**GOOD, "task_id": " "}, "task_id", "must not be empty"),
    ({**GOOD, "entrypoint": "inc"}, "entrypoint", "unknown field"),
    ({**GOOD, "entry_point": "in c"}, "entry_point", "not a Python name"),
    ({**GOOD, "entry_point": "dec"}, "entry_point", "not defined by the prompt"),
    ({**GOOD, "reference": "def inc(x):\n    return x + 1\n"}, "reference", "not both"),
    (
        {**{k: v for k, v in GOOD.items() if k != "canonical_solution"}, "reference": "x = 1"},
        "entry_point",
        "not defined by the prompt and the reference",
    ),
    ({**GOOD, "canonical_solution": "  return (\n"}, "canonical_solution", "not valid Python"),
    ({**GOOD, "test": "assert inc(1) == 2\n"}, "test", "defines no check"),
    ({**GOOD, "test": "def check(candidate):\n    assert True\n"}, "test", "no assert"),
]


@pytest.mark.parametrize(("record", "field", "reason"), BAD_LINES)
def test_a_bad_line_names_its_line_and_field(
    tmp_path: Path, record: object, field: str, reason: str
) -> None:
    path = write(tmp_path / "t.jsonl", GOOD, "", record)
    with pytest.raises(TaskFileError) as caught:
        load_task_file(path)
    error = caught.value
    assert (error.line, error.field) == (3, field)
    assert f"line 3, field {field}: " in str(error) and reason in str(error)
    assert isinstance(error, ConfigurationError)


def test_a_prose_prompt_without_a_reference_needs_no_definition(tmp_path: Path) -> None:
    prose = {k: v for k, v in GOOD.items() if k != "canonical_solution"}
    (problem,) = load_task_file(write(tmp_path / "t.jsonl", {**prose, "prompt": "Write inc(x)."}))
    assert not problem.has_reference and problem.task().prompt.startswith("Write inc(x).")
    with pytest.raises(TaskFileError, match="field entry_point"):
        load_task_file(write(tmp_path / "u.jsonl", {**prose, "entry_point": "dec"}))


def test_a_repeated_task_id_names_both_lines(tmp_path: Path) -> None:
    path = write(tmp_path / "t.jsonl", GOOD, {**GOOD, "task_id": "t/2"}, GOOD)
    with pytest.raises(TaskFileError, match=r"line 3, field task_id: 't/1' repeats line 1"):
        load_task_file(path)


def test_a_missing_or_empty_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="is not a task file"):
        load_task_file(tmp_path / "nope.jsonl")
    with pytest.raises(ConfigurationError, match="holds no tasks"):
        load_task_file(write(tmp_path / "blank.jsonl", "", "  "))


def test_an_empty_candidate_keeps_the_signatures_and_does_nothing(tmp_path: Path) -> None:
    (problem,) = load_task_file(write(tmp_path / "t.jsonl", GOOD))
    code = empty_candidate(problem)
    namespace: dict[str, Any] = {}
    exec(code, namespace)
    assert namespace["inc"](1) is None
    lru = next(p for p in load_task_file(EXAMPLE) if p.task_id == "example/lru_cache")
    namespace = {}
    exec(empty_candidate(lru), namespace)
    cache = namespace["LRUCache"](2)
    assert cache.put(1, 1) is None and cache.get(1) is None
    prose = HumanEvalProblem("p", "Write f.", "", "def check(candidate):\n    assert 1\n", "f")
    assert empty_candidate(prose).startswith("def f(*args, **kwargs):")


@pytest.mark.integration
async def test_a_wrong_reference_names_the_task_and_the_check(tmp_path: Path) -> None:
    wrong = {**GOOD, "task_id": "t/wrong", "canonical_solution": "    return x + 2\n"}
    problems = load_task_file(write(tmp_path / "t.jsonl", GOOD, wrong))
    with pytest.raises(TaskFileError) as caught:
        await verify_references(problems, source="t.jsonl", lines=[1, 2])
    message = str(caught.value)
    assert message.startswith("t.jsonl line 2, field canonical_solution: task t/wrong")
    assert "fails check A1 (candidate(1) == 2)" in message and "got 3, expected 2" in message


@pytest.mark.integration
async def test_checks_an_empty_candidate_passes_are_refused(tmp_path: Path) -> None:
    vacuous = {**GOOD, "test": "def check(candidate):\n    assert candidate(5) is None or True\n"}
    path = write(tmp_path / "t.jsonl", vacuous)
    with pytest.raises(TaskFileError, match=r"line 1, field test: task t/1: an empty inc"):
        await load_verified_tasks(path)
    # Without a reference the empty candidate is still run.
    no_ref = {k: v for k, v in vacuous.items() if k != "canonical_solution"}
    with pytest.raises(TaskFileError, match="they test nothing"):
        await load_verified_tasks(write(tmp_path / "n.jsonl", no_ref))
