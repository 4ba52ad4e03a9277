"""The overhead benchmark's report (its speed targets are checked in bench/, not here)."""

from __future__ import annotations

from closedloop_bench.benchmarks import run_overhead_bench


async def test_every_loop_is_measured_against_the_same_floor() -> None:
    report = await run_overhead_bench(steps=2, rounds=3, warmup=0)
    loops = [r.loop for r in report.rows]
    assert loops[0] == "plain while loop" and "LangGraph StateGraph" in loops
    assert sum("closedloop" in name for name in loops) == 3
    assert report.floor_us > 0.0
    for r in report.rows:
        assert len(r.rounds) == 3 and r.per_step_us > 0.0 and r.overhead_us >= 0.0
        assert r.share_of_10ms_call == r.overhead_us / 10_000.0
    graph = next(r for r in report.rows if r.loop == "LangGraph StateGraph")
    assert graph.vs_langgraph == 1.0
    assert set(report.targets) == {
        "closedloop (SQLite FULL + trace) <= 1/10 of LangGraph's overhead",
        "closedloop (SQLite FULL + trace) < 1 % of a 10 ms model call",
    }
