"""JSONL traces: written line by line, read back whole, tolerant of a crash mid-write."""

from __future__ import annotations

import asyncio
import json
import math
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from closedloop import ConfigurationError, StoreUnavailableError
from closedloop.agent._records import (
    ActionCall,
    HaltReason,
    RunResult,
    RunUsageSummary,
    StepRecord,
)
from closedloop.agent._trace import JsonlTrace, MemoryTrace, MultiSink, TraceSink
from closedloop.agent._trace_files import (
    RESULT_FILE,
    TRACE_FILE,
    RunPaths,
    read_trace,
    resolve_run,
    run_dir,
)

SECRET = "sk-proj-Zx81kLmN0pQrStUvWxYz123456"


def make_record(step: int, run_id: str = "run-1", **overrides: Any) -> StepRecord:
    fields: dict[str, Any] = {
        "run_id": run_id,
        "task_id": "task-1",
        "step": step,
        "t_s": 0.5 * (step + 1),
        "phase": "search",
        "mode": "react",
        "step_type": "search_flights",
        "action": ActionCall(tool="search_flights", arguments={"origin": "PEK", "day": step}),
        "observation": {"status": "ok", "confidence": 0.9, "value": [1, 2], "meaning": "found"},
        "error": min(1.0, 0.1 * step),
        "control": 0.05 * step,
        "pid_components": (0.1, 0.2, 0.0),
        "quality": max(0.0, 1.0 - 0.1 * step),
        "f_est": min(1.0, 0.2 * step),
        "protocol": "normal",
        "actuators": {"strictness": "loose", "timeout_s": 2.0},
        "notes": [],
        "usage": RunUsageSummary(model_calls=1, prompt_tokens=100, completion_tokens=20),
    }
    fields.update(overrides)
    return StepRecord(**fields)


def make_result(records: list[StepRecord], **overrides: Any) -> RunResult:
    fields: dict[str, Any] = {
        "run_id": records[0].run_id if records else "run-1",
        "task_id": "task-1",
        "halt_reason": HaltReason.FINAL,
        "success": True,
        "answer": {"flight": "CA123"},
        "steps": records,
        "usage": RunUsageSummary(model_calls=len(records), prompt_tokens=300),
    }
    fields.update(overrides)
    return RunResult(**fields)


async def write_run(path: Path, records: list[StepRecord], *, close: bool = True) -> JsonlTrace:
    trace = JsonlTrace(path)
    for record in records:
        await trace.write(record)
    if close:
        await trace.close(make_result(records))
    return trace


async def test_each_record_is_one_flushed_line_and_the_result_lands_beside_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runs" / "run-1" / TRACE_FILE
    records = [make_record(i) for i in range(3)]
    trace = JsonlTrace(path)
    for i, record in enumerate(records, start=1):
        await trace.write(record)
        # Flushed as written: a reader sees the line before the run ends.
        assert len(path.read_text().splitlines()) == i
    assert not (path.parent / RESULT_FILE).exists()
    await trace.close(make_result(records))

    lines = path.read_text().splitlines()
    assert [StepRecord.model_validate_json(line) for line in lines] == records
    result = RunResult.model_validate_json((path.parent / RESULT_FILE).read_text())
    assert result.trace_path == str(path)  # filled in when the loop left it empty
    assert result.steps == records and result.halt_reason is HaltReason.FINAL
    assert sorted(p.name for p in path.parent.iterdir()) == [RESULT_FILE, TRACE_FILE]
    assert trace.records_written == 3 and isinstance(trace, TraceSink)


async def test_read_trace_from_the_directory_or_the_file(tmp_path: Path) -> None:
    records = [make_record(i) for i in range(4)]
    await write_run(tmp_path / TRACE_FILE, records)
    for target in (tmp_path, tmp_path / TRACE_FILE, str(tmp_path)):
        got, result = read_trace(target)
        assert got == records
        assert result is not None and result.answer == {"flight": "CA123"}


async def test_a_resumed_run_appends_and_its_last_result_wins(tmp_path: Path) -> None:
    path = tmp_path / TRACE_FILE
    trace = JsonlTrace(path)
    await trace.write(make_record(0))
    await trace.close(make_result([make_record(0)], halt_reason="handover", success=False))
    await trace.write(make_record(1))  # the human approved: the same run goes on
    await trace.close(make_result([make_record(0), make_record(1)]))
    records, result = read_trace(tmp_path)
    assert [r.step for r in records] == [0, 1]
    assert result is not None and result.halt_reason is HaltReason.FINAL


async def test_a_run_without_steps_still_leaves_a_trace_and_a_result(tmp_path: Path) -> None:
    trace = JsonlTrace(tmp_path / "r" / TRACE_FILE)
    await trace.close(make_result([], halt_reason="deadline", success=False))
    records, result = read_trace(tmp_path / "r")
    assert records == [] and result is not None and result.halt_reason is HaltReason.DEADLINE


async def test_secrets_never_reach_the_files(tmp_path: Path) -> None:
    record = make_record(
        0,
        action=ActionCall(tool="call_api", arguments={"api_key": SECRET, "q": "rome"}),
        observation={"status": "error", "error": f"401 for Authorization: Bearer {SECRET}"},
        notes=[f"retried with {SECRET}"],
        actuators={"headers": {"Authorization": "Basic dXNlcjpwYXNz"}},
    )
    await write_run(tmp_path / TRACE_FILE, [record])
    for name in (TRACE_FILE, RESULT_FILE):
        text = (tmp_path / name).read_text()
        assert SECRET not in text and "dXNlcjpwYXNz" not in text, name
        assert "[redacted]" in text
    (back,), _ = read_trace(tmp_path)
    assert back.action is not None and back.action.arguments == {
        "api_key": "[redacted]",
        "q": "rome",
    }
    assert back.usage.prompt_tokens == 100  # a usage counter is not a credential


async def test_non_finite_signals_are_strict_json_and_read_back(tmp_path: Path) -> None:
    record = make_record(0, control=math.inf, lyapunov_dv=-math.inf, lyapunov_v=math.nan)
    await write_run(tmp_path / TRACE_FILE, [record])

    def refuse(token: str) -> None:
        raise AssertionError(f"non-standard JSON constant {token}")

    line = (tmp_path / TRACE_FILE).read_text().splitlines()[0]
    json.loads(line, parse_constant=refuse)
    (back,), _ = read_trace(tmp_path)
    assert back.control == math.inf and back.lyapunov_dv == -math.inf
    assert back.lyapunov_v is not None and math.isnan(back.lyapunov_v)


async def test_concurrent_writes_all_land_whole(tmp_path: Path) -> None:
    trace = JsonlTrace(tmp_path / TRACE_FILE)
    big = "x" * 20_000  # several buffer flushes per line
    await asyncio.gather(*(trace.write(make_record(i, notes=[big])) for i in range(40)))
    await trace.close(make_result([]))
    records, _ = read_trace(tmp_path)
    assert sorted(r.step for r in records) == list(range(40))


async def test_a_truncated_last_line_is_skipped_with_a_warning(tmp_path: Path) -> None:
    await write_run(tmp_path / TRACE_FILE, [make_record(i) for i in range(3)], close=False)
    with (tmp_path / TRACE_FILE).open("a") as f:
        f.write(make_record(3).model_dump_json()[:57])  # the crash came mid-write
    with pytest.warns(RuntimeWarning, match=r"truncated last line \(line 4"):
        records, result = read_trace(tmp_path)
    assert [r.step for r in records] == [0, 1, 2] and result is None


@pytest.mark.parametrize("fragment_bytes", [57, 70_000])
async def test_resuming_after_a_crash_drops_the_fragment_instead_of_gluing_to_it(
    tmp_path: Path, fragment_bytes: int
) -> None:
    path = tmp_path / TRACE_FILE
    await write_run(path, [make_record(0), make_record(1)], close=False)
    with path.open("a") as f:  # longer than one read-back chunk in the second case
        f.write(make_record(2, notes=["n" * 80_000]).model_dump_json()[:fragment_bytes])
    resumed = JsonlTrace(path)
    with pytest.warns(RuntimeWarning, match="dropped a truncated last line"):
        await resumed.write(make_record(2))
    await resumed.close(make_result([]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the file is whole again: no warning on reading
        records, _ = read_trace(tmp_path)
    assert [r.step for r in records] == [0, 1, 2]


async def test_a_fragment_alone_in_the_file_is_dropped_whole(tmp_path: Path) -> None:
    path = tmp_path / TRACE_FILE
    path.write_text('{"run_id": "run-1", "ta')
    with pytest.warns(RuntimeWarning, match=r"\(23 bytes\)"):
        await JsonlTrace(path).write(make_record(0))
    assert read_trace(tmp_path)[0] == [make_record(0)]


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_crash_point_yields_the_complete_records_before_it(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    directory = tmp_path_factory.mktemp("crash")
    records = [make_record(i, notes=["ünïcödé ✓"] * (i % 3)) for i in range(5)]
    asyncio.run(write_run(directory / TRACE_FILE, records, close=False))
    full = (directory / TRACE_FILE).read_bytes()
    cut = data.draw(st.integers(0, len(full)), label="cut")
    (directory / TRACE_FILE).write_bytes(full[:cut])
    ends = [i for i, byte in enumerate(full) if byte == ord("\n")]  # where each line ends
    complete = sum(end <= cut for end in ends)  # the JSON of line k is whole once cut >= end
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        got, _ = read_trace(directory)
    assert got == records[:complete]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00binary", "is not a closedloop trace"),
        (b"hello world", "is not a closedloop trace"),
        (b'{"not": "a step"}\n', r"not a closedloop trace: line 1 .*run_id"),
        (b"{broken\n", "line 1 is not a step record"),
    ],
)
def test_garbage_files_are_one_clear_error(tmp_path: Path, content: bytes, message: str) -> None:
    (tmp_path / TRACE_FILE).write_bytes(content)
    with pytest.raises(ConfigurationError, match=message) as info:
        read_trace(tmp_path)
    assert "\n" not in str(info.value)


async def test_a_corrupt_line_in_the_middle_names_its_line(tmp_path: Path) -> None:
    await write_run(tmp_path / TRACE_FILE, [make_record(0)], close=False)
    with (tmp_path / TRACE_FILE).open("a") as f:
        f.write("{garbage}\n" + make_record(1).model_dump_json() + "\n")
    with pytest.raises(ConfigurationError, match="is corrupt: line 2"):
        read_trace(tmp_path)


async def test_a_garbage_result_is_an_error_and_a_foreign_one_is_ignored(tmp_path: Path) -> None:
    await write_run(tmp_path / TRACE_FILE, [make_record(0)])
    (tmp_path / RESULT_FILE).write_text("{oops")
    with pytest.raises(ConfigurationError, match="not a closedloop run result"):
        read_trace(tmp_path)
    other = make_result([make_record(0, run_id="other-run")])
    (tmp_path / RESULT_FILE).write_text(other.model_dump_json())
    with pytest.warns(RuntimeWarning, match="belongs to run 'other-run'"):
        records, result = read_trace(tmp_path / TRACE_FILE)
    assert len(records) == 1 and result is None


async def test_without_a_trace_the_records_come_from_the_result(tmp_path: Path) -> None:
    records = [make_record(i) for i in range(2)]
    (tmp_path / RESULT_FILE).write_text(make_result(records).model_dump_json())
    assert read_trace(tmp_path)[0] == records
    with pytest.raises(ConfigurationError, match="no such trace file"):
        read_trace(tmp_path.parent / "empty")
    (tmp_path.parent / "empty").mkdir()
    with pytest.raises(ConfigurationError, match="holds neither"):
        read_trace(tmp_path.parent / "empty")


async def test_resolve_run_by_id_directory_or_file(tmp_path: Path, closedloop_home: Path) -> None:
    trace = JsonlTrace.for_run("run-42")
    await trace.write(make_record(0, run_id="run-42"))
    expected_dir = closedloop_home / "runs" / "run-42"
    assert trace.path == expected_dir / TRACE_FILE
    by_id = resolve_run("run-42")
    assert by_id == RunPaths(expected_dir, expected_dir / TRACE_FILE, expected_dir / RESULT_FILE)
    assert resolve_run(expected_dir) == by_id
    assert resolve_run(str(expected_dir / TRACE_FILE)) == by_id

    loose = tmp_path / "elsewhere.jsonl"
    loose.write_text(make_record(0).model_dump_json() + "\n")
    assert resolve_run(loose) == RunPaths(tmp_path, loose, tmp_path / RESULT_FILE)


def test_an_unknown_run_names_it_and_where_it_looked(closedloop_home: Path) -> None:
    with pytest.raises(ConfigurationError) as info:
        resolve_run("no-such-run")
    message = str(info.value)
    assert message.startswith("RUN='no-such-run': no run found")
    assert str(closedloop_home / "runs" / "no-such-run") in message
    assert "\n" not in message
    with pytest.raises(ConfigurationError, match="RUN=''"):
        resolve_run("")


@pytest.mark.parametrize("bad", ["../etc", "a/b", "..", ".", "", "x" * 201])
def test_run_ids_cannot_escape_the_runs_directory(bad: str) -> None:
    with pytest.raises(ConfigurationError, match="run_id"):
        run_dir(bad)


def test_a_directory_is_not_a_trace_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="is a directory"):
        JsonlTrace(tmp_path)


async def test_disk_errors_name_the_trace(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    trace = JsonlTrace(blocker / TRACE_FILE)  # its parent is a file: cannot be created
    with pytest.raises(StoreUnavailableError, match="cannot write"):
        await trace.write(make_record(0))


async def test_memory_trace_and_multi_sink_fan_out(tmp_path: Path) -> None:
    memory, jsonl = MemoryTrace(), JsonlTrace(tmp_path / TRACE_FILE)
    sink = MultiSink(memory, jsonl)
    records = [make_record(i) for i in range(3)]
    for record in records:
        await sink.write(record)
    await sink.close(make_result(records))
    assert memory.records == records and memory.result is not None
    assert read_trace(tmp_path)[0] == records
    with pytest.raises(ConfigurationError, match=r"sinks\[1\]"):
        MultiSink(memory, object())  # type: ignore[arg-type]


async def test_one_failing_sink_does_not_starve_the_others() -> None:
    class Broken:
        async def write(self, record: StepRecord) -> None:
            raise StoreUnavailableError("disk full")

        async def close(self, result: RunResult) -> None:
            raise StoreUnavailableError("disk full")

    after = MemoryTrace()
    sink = MultiSink(Broken(), after)
    with pytest.raises(StoreUnavailableError, match="disk full"):
        await sink.write(make_record(0))
    with pytest.raises(StoreUnavailableError):
        await sink.close(make_result([]))
    assert len(after.records) == 1 and after.result is not None
