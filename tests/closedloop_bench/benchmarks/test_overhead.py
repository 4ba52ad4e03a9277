"""The overhead benchmark's report (its speed targets are checked in bench/, not here)."""

from __future__ import annotations

import json

from closedloop_bench.benchmarks import OverheadReport, OverheadRow, median_run, run_overhead_bench
from closedloop_bench.benchmarks._overhead_loops import ZeroLatencyModel, langgraph_react_run
from closedloop_bench.benchmarks._overhead_profile import StepProfile


async def test_every_loop_is_measured_against_the_same_floor() -> None:
    report = await run_overhead_bench(steps=2, rounds=3, warmup=0, group_sessions=())
    loops = [r.loop for r in report.rows]
    assert loops[0] == "plain while loop" and "LangGraph StateGraph" in loops
    assert any(name.startswith("LangGraph StateGraph + its SQLite") for name in loops)
    assert any(name.startswith("LangGraph prebuilt ReAct agent") for name in loops)
    assert sum("closedloop" in name for name in loops) == 6
    assert report.floor_us > 0.0
    for r in report.rows:
        assert len(r.rounds) == 3 and r.per_step_us > 0.0 and r.overhead_us >= 0.0
        assert r.share_of_10ms_call == r.overhead_us / 10_000.0
    graph = next(r for r in report.rows if r.loop == "LangGraph StateGraph")
    assert graph.vs_langgraph == 1.0
    assert set(report.targets) == {
        "closedloop (memory store) CPU <= 0.5 x LangGraph's",
        "closedloop durable, read-only tool (SQLite FULL) CPU <= 1.0 x LangGraph + SQLite's",
        "closedloop durable, once effect (SQLite FULL) CPU <= 1.0 x LangGraph + SQLite's",
        "1 synced commit per read-only step",
        "2 synced commits per step with an irreversible effect",
    }
    assert report.group_commit == [] and report.load and report.cpus


async def test_the_report_counts_commits_and_says_where_the_time_goes() -> None:
    report = await run_overhead_bench(
        steps=2, rounds=3, warmup=1, profile_rounds=1, group_sessions=(1, 3), group_rounds=1
    )
    rows = {r.loop: r for r in report.rows}
    memory = rows["closedloop, memory store, no trace"]
    assert memory.commits_per_step is None  # nothing to commit in memory
    for name, row in rows.items():
        if "SQLite" in name:
            # every tool step saves its state durably: at least one commit per step
            assert row.commits_per_step is not None and row.commits_per_step >= 1.0
            assert row.cpu_vs_langgraph_sqlite is not None
        assert row.cpu_us is not None and row.cpu_us > 0.0
    assert rows["LangGraph StateGraph"].cpu_vs_langgraph == 1.0
    read_only = rows["closedloop, SQLite (synchronous=FULL, default), read-only tool, no trace"]
    once = rows["closedloop, SQLite (synchronous=FULL, default), once effect, no trace"]
    # a run: its session's creation, the tool steps' commits, the final step's
    assert read_only.commits_per_run == 1 + 2 + 1 and once.commits_per_run == 1 + 2 * 2 + 1
    assert report.targets["1 synced commit per read-only step"] is True
    assert report.targets["2 synced commits per step with an irreversible effect"] is True
    assert [(g.effect, g.sessions) for g in report.group_commit] == [
        ("recomputable", 1),
        ("recomputable", 3),
        ("once", 1),
        ("once", 3),
    ]
    assert all(g.steps == g.sessions * 3 and g.commits >= 1 for g in report.group_commit)
    profiled = [p.loop for p in report.profiles]
    assert profiled == [
        "LangGraph StateGraph",
        "LangGraph prebuilt ReAct agent (create_react_agent, ToolNode, a chat model)",
        "closedloop, memory store, no trace",
        "closedloop, memory store, read-only tool, no trace",
        "LangGraph StateGraph + its SQLite checkpointer (AsyncSqliteSaver, WAL)",
        "closedloop, SQLite (synchronous=FULL, default), read-only tool, no trace",
    ]
    for profile in report.profiles:
        assert profile.by_cumulative and profile.by_self and profile.calls_per_step > 0
        cumulative = [line.cumulative_us for line in profile.by_cumulative]
        assert cumulative == sorted(cumulative, reverse=True)
        # Each profile is of its own loop: closedloop's agent, or LangGraph's graph.
        own = "closedloop/agent/" if profile.loop.startswith("closedloop") else "langgraph/"
        assert any(own in line.function for line in profile.by_cumulative)
        assert not any("bench/_overhead" in line.function for line in profile.by_cumulative)
        _check_stages(profile)


def _check_stages(profile: StepProfile) -> None:
    """closedloop's step in its stages, in the driver's order; LangGraph's has none."""
    if not profile.loop.startswith("closedloop"):
        assert profile.stages == []
        return
    names = [stage.stage for stage in profile.stages]
    assert names == [
        "project",
        "propose",
        "decide",
        "act",
        "measure",
        "control",
        "fold",
        "record",
        "commit",
        "carried",
        "(the step itself)",
    ]
    assert all(stage.cumulative_us >= 0.0 and stage.share >= 0.0 for stage in profile.stages)
    # The stages and the step's own time make up the step: their shares add up to one.
    assert abs(sum(stage.share for stage in profile.stages) - 1.0) < 0.01


async def test_the_prebuilt_react_agent_does_the_same_steps() -> None:
    model = ZeroLatencyModel(3)
    result = await langgraph_react_run(model, 3)()
    tool_results = [m.content for m in result["messages"] if m.type == "tool"]
    # Each of the three calls ran the tool (n doubled), then the final answer ended it.
    assert [json.loads(text)["double"] for text in tool_results] == [0, 2, 4]
    assert result["messages"][-1].content == "done"


async def test_no_profile_when_no_profile_rounds() -> None:
    report = await run_overhead_bench(
        steps=1, rounds=3, warmup=0, profile_rounds=0, group_sessions=()
    )
    assert report.profiles == []


def _report(memory: float, sqlite: float) -> OverheadReport:
    rows = [
        OverheadRow(
            loop="LangGraph StateGraph",
            per_step_us=1.0,
            overhead_us=1.0,
            share_of_10ms_call=0.0,
            cpu_vs_langgraph=1.0,
        ),
        OverheadRow(
            loop="closedloop, memory store, no trace",
            per_step_us=1.0,
            overhead_us=1.0,
            share_of_10ms_call=0.0,
            cpu_vs_langgraph=memory,
        ),
        OverheadRow(
            loop="closedloop, SQLite",
            per_step_us=1.0,
            overhead_us=1.0,
            share_of_10ms_call=0.0,
            cpu_vs_langgraph=2.0,
            cpu_vs_langgraph_sqlite=sqlite,
        ),
    ]
    return OverheadReport(steps=1, rounds=1, floor_us=0.0, rows=rows, targets={}, notes=[])


def test_several_runs_keep_the_median_run_and_every_run_s_ratios() -> None:
    runs = [_report(1.9, 0.8), _report(1.5, 0.7), _report(1.7, 0.9)]
    kept = median_run(runs)
    assert kept.rows[1].cpu_vs_langgraph == 1.7  # the middle memory-store ratio
    assert [r["closedloop, memory store, no trace"] for r in kept.repeats] == [1.9, 1.5, 1.7]
    assert [r["closedloop, SQLite · sqlite"] for r in kept.repeats] == [0.8, 0.7, 0.9]
    assert median_run(runs[:1]).repeats == []  # one run: nothing to repeat
    # An even count keeps the lower middle run, never an average no run measured.
    assert median_run(runs[:2]).rows[1].cpu_vs_langgraph == 1.5
