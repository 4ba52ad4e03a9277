"""``closedloop bench refine --tasks FILE``: ``--explain`` prints the split without a model,
a bad file is one line naming the line and the field (exit 2), and a run on the example
file checks the references before the first model call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from closedloop import ConfigurationError
from closedloop.cli import main
from closedloop.harness import BenchConfig, TaskFileError, load_task_file, run_refine_bench
from closedloop.models import CallInfo, FunctionModel, Message
from closedloop_bench.cli import _bench as cli_bench

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "refine_tasks.jsonl"


def test_explain_prints_every_check_and_calls_no_model(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async def no_model(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("--explain must not run the bench")

    monkeypatch.setattr(cli_bench, "run_refine_bench", no_model)
    assert main(["bench", "refine", "--tasks", str(EXAMPLE), "--explain"]) == 0
    out = capsys.readouterr().out
    assert "example/lru_cache: 4 check(s), entry point LRUCache" in out
    assert "    setup | c = candidate(2)\n          | c.put(1, 1)\n    test | c.get(1) == 1" in out
    assert "    test | try:\n         |     candidate('0')" in out
    assert "10 task(s), 37 check(s)\nevery reference passes its checks" in out


def test_explain_on_the_built_in_sets(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "refine", "--tasks", "seed", "--explain", "--limit", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("merge_sorted_lists: 5 check(s)") and "1 task(s), 5 check(s)" in out


def _bad(tmp_path: Path, **change: object) -> Path:
    lines = EXAMPLE.read_text(encoding="utf-8").splitlines()
    record = json.loads(lines[1])
    record.update(change)
    for key in [k for k, v in change.items() if v is None]:
        del record[key]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join([lines[0], json.dumps(record), *lines[2:]]) + "\n")
    return path


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"test": None}, "line 2, field test: missing (required)"),
        ({"entry_point": 7}, "line 2, field entry_point: must be a string, not int"),
        ({"entry_point": "LFUCache"}, "line 2, field entry_point: 'LFUCache' is not defined"),
        ({"task_id": "example/running_max"}, "line 2, field task_id: 'example/running_max'"),
        ({"reference": "class LRUCache:\n    pass\n"}, "line 2, field reference: task"),
    ],
)
def test_a_bad_file_is_one_line_naming_the_line_and_the_field(
    tmp_path: Path, change: dict[str, object], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _bad(tmp_path, **change)
    for extra in (["--explain"], ["--model", "local:never-loaded"]):
        assert main(["bench", "refine", "--tasks", str(path), *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert words in err, err
        assert err.startswith("error: TaskFileError:") and len(err.splitlines()) == 1
        assert "Traceback" not in err


def test_explain_shows_the_split_next_to_a_failing_reference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _bad(tmp_path, reference="class LRUCache:\n    def __init__(self, n):\n        pass\n")
    assert main(["bench", "refine", "--tasks", str(path), "--explain"]) == 2
    captured = capsys.readouterr()
    assert (
        "example/lru_cache: 4 check(s)" in captured.out
        and "    test | c.get(1) == 1" in captured.out
    )
    assert "task example/lru_cache: the reference fails check A1 (c.get(1) == 1)" in captured.err


def test_invalid_json_and_a_missing_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text(EXAMPLE.read_text().splitlines()[0] + "\n{oops\n")
    assert main(["bench", "refine", "--tasks", str(path), "--explain"]) == 2
    assert "line 2, field (json): not JSON" in capsys.readouterr().err
    assert main(["bench", "refine", "--tasks", str(tmp_path / "none.jsonl")]) == 2
    assert "must be 'seed', 'humaneval' or a JSONL task file" in capsys.readouterr().err


def test_the_cli_hands_the_file_to_the_bench(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[BenchConfig] = []

    async def fake(config: BenchConfig, **kwargs: Any) -> None:
        seen.append(config)
        raise ConfigurationError("model", config.model, "not run in this test")

    monkeypatch.setattr(cli_bench, "run_refine_bench", fake)
    result = CliRunner().invoke(cli_bench.app, ["refine", "--tasks", str(EXAMPLE)])
    assert isinstance(result.exception, ConfigurationError)
    assert [c.tasks for c in seen] == [EXAMPLE]


def _reference_model() -> FunctionModel:
    references = {p.entry_point: p.canonical_program for p in load_task_file(EXAMPLE)}

    def answer(messages: tuple[Message, ...], call: CallInfo) -> str:
        entry = next(e for e in references if e in messages[-1].content)
        return f"```python\n{references[entry]}```"

    return FunctionModel(answer)


@pytest.mark.integration
async def test_a_run_on_the_example_file_uses_its_tasks(tmp_path: Path) -> None:
    model = _reference_model()
    config = BenchConfig(
        tasks=EXAMPLE, limit=3, rounds=1, strategies=("self_refine",), loopgain=False
    )
    report = await run_refine_bench(config, model=model)
    assert report.tasks == ["example/running_max", "example/lru_cache", "example/parse_port"]
    assert report.summary("self_refine")["solved"] == 3
    assert report.to_json()["config"]["tasks"] == str(EXAMPLE)


@pytest.mark.integration
async def test_a_broken_reference_stops_the_run_before_any_model_call(tmp_path: Path) -> None:
    path = _bad(tmp_path, reference="class LRUCache:\n    def __init__(self, n):\n        pass\n")
    calls: list[int] = []

    def answer(messages: tuple[Message, ...], call: CallInfo) -> str:
        calls.append(1)
        return "```python\npass\n```"

    config = BenchConfig(tasks=path, rounds=1, strategies=("self_refine",), loopgain=False)
    with pytest.raises(TaskFileError, match=r"line 2, field reference: task example/lru_cache"):
        await run_refine_bench(config, model=FunctionModel(answer))
    assert calls == []
