"""The run's checkpoint: a killed run started again scores only what it had not."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from closedloop import ConfigurationError
from closedloop.models import Model
from closedloop_bench.tools import (
    DATA_DIR,
    Attempt,
    ToolsConfig,
    ToolTask,
    load_tool_tasks,
    oracle_calls,
    run_tools_bench,
)

TASKS = load_tool_tasks(DATA_DIR / "dev.jsonl")[:5]


@dataclass
class _Counting:
    """The oracle's calls, counting the tasks it was asked to solve."""

    name: str = "counting"
    fixed: bool = True
    solved: list[str] = field(default_factory=list)

    async def solve(self, task: ToolTask, model: Model) -> Attempt:
        self.solved.append(task.id)
        return Attempt(calls=tuple(oracle_calls(task)))


def _config(strategy: _Counting, path: Path, **extra: object) -> ToolsConfig:
    return ToolsConfig(models=("test:oracle",), strategies=(strategy,), checkpoint=path, **extra)  # type: ignore[arg-type]


async def test_a_run_started_again_skips_what_its_checkpoint_holds(tmp_path: Path) -> None:
    path = tmp_path / "run.partial.jsonl"
    first = _Counting()
    whole = await run_tools_bench(TASKS, _config(first, path))
    assert first.solved == [t.id for t in TASKS]
    lines = path.read_text().splitlines()
    assert len(lines) == 1 + len(TASKS)  # the run's identity, then one line per result

    # A kill after two results, in the middle of writing the third.
    path.write_text("\n".join(lines[:3]) + "\n" + lines[3][:20])
    again = _Counting()
    resumed = await run_tools_bench(TASKS, _config(again, path))
    assert again.solved == [t.id for t in TASKS[2:]]
    assert resumed.meta["resumed_results"] == 2
    assert [(r.task_id, r.success, r.calls) for r in resumed.results] == [
        (r.task_id, r.success, r.calls) for r in whole.results
    ]
    assert len(path.read_text().splitlines()) == 1 + len(TASKS)
    assert all(json.loads(line) for line in path.read_text().splitlines())


async def test_a_checkpoint_of_another_run_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "run.partial.jsonl"
    await run_tools_bench(TASKS, _config(_Counting(), path))
    before = path.read_text()
    with pytest.raises(ConfigurationError, match="differs in tasks"):
        await run_tools_bench(TASKS[:3], _config(_Counting(), path))
    with pytest.raises(ConfigurationError, match="differs in model_options"):
        await run_tools_bench(TASKS, _config(_Counting(), path, model_options={"n_threads": 1}))
    assert path.read_text() == before  # nothing lost, nothing mixed in


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("{not json", "line 3 is not JSON"),
        ("[1, 2]", "line 3 is not a JSON object"),
        ('{"task_id": "x"}', "line 3 is not a task result"),
    ],
)
async def test_a_bad_line_inside_a_checkpoint_is_named_and_nothing_is_rerun(
    tmp_path: Path, line: str, why: str
) -> None:
    path = tmp_path / "run.partial.jsonl"
    await run_tools_bench(TASKS, _config(_Counting(), path))
    lines = path.read_text().splitlines()
    lines[2] = line  # not the last line: no kill cuts a line in the middle of the file
    path.write_text("\n".join(lines) + "\n")
    before, again = path.read_text(), _Counting()
    with pytest.raises(ConfigurationError, match=f"run.partial.jsonl:3.*{why}"):
        await run_tools_bench(TASKS, _config(again, path))
    assert again.solved == [] and path.read_text() == before


def test_the_command_resumes_from_its_checkpoint_and_removes_it_when_done(
    tmp_path: Path,
) -> None:
    from closedloop_bench.tools._command import ToolsCommand, run_tools_command

    options = ToolsCommand(
        split="dev",
        limit=4,
        models="test:oracle",
        strategies="strict",
        out=tmp_path / "r.json",
        plot=False,
        progress=False,
    )
    first: list[str] = []
    run_tools_command(options, say=first.append)
    assert not any(line.startswith("resuming") for line in first)
    assert not (tmp_path / "r.partial.jsonl").exists()  # the report holds every result

    # The same run, killed after one result: started again, it says it resumes.
    whole = json.loads((tmp_path / "r.json").read_text())["results"]
    head = {
        "kind": "closedloop-bench-tools-checkpoint/1",
        "source": "dev (first 4)",
        "tasks": [r["task_id"] for r in whole],
        "models": ["test:oracle"],
        "strategies": ["strict"],
        "model_options": {},
    }
    (tmp_path / "r.partial.jsonl").write_text(json.dumps(head) + "\n" + json.dumps(whole[0]) + "\n")
    again: list[str] = []
    report = run_tools_command(options, say=again.append)
    assert again[0] == f"resuming from {tmp_path / 'r.partial.jsonl'}"
    assert report is not None and report.meta["resumed_results"] == 1
    assert not (tmp_path / "r.partial.jsonl").exists()
