"""The success–cost plane: the frontier of fixed settings and the verdict against it."""

from __future__ import annotations

import pytest

from closedloop import ConfigurationError
from closedloop_bench.benchmarks import BudgetPoint, budget_frontier, run_budget_sweep
from closedloop_bench.benchmarks._budget import _verdict

from .conftest import FakeSleep, tiny


def point(name: str, success: float, requests: float, latency: float = 1.0) -> BudgetPoint:
    return BudgetPoint(name, 3, 0.5, 20, success, success - 0.1, success + 0.1, requests,
                       latency, 5.0)  # fmt: skip


def test_the_frontier_keeps_only_undominated_points_sorted_by_cost() -> None:
    a, b, c, d = (
        point("a", 0.5, 2.0),
        point("b", 0.8, 3.0),
        point("c", 0.7, 4.0),
        point("d", 0.8, 5.0),
    )
    assert budget_frontier([d, c, b, a]) == [a, b]


def test_the_verdict_reads_the_loop_against_the_best_fixed_setting() -> None:
    fixed = [point("fixed", 0.6, 2.0, 1.0), point("fixed", 0.9, 10.0, 5.0)]
    cheap = _verdict(point("loop", 0.9, 6.0, 3.0), fixed)
    assert cheap["target_met"] and cheap["how"].startswith("best success")
    assert cheap["requests_share_of_best"] == pytest.approx(0.6)
    dear = _verdict(point("loop", 0.6, 9.0, 4.0), fixed)
    assert not dear["target_met"] and dear["how"] == "neither"
    better = _verdict(point("loop", 0.75, 2.0, 1.0), fixed)  # interval from 0.65 > 0.6
    assert better["target_met"] and better["how"].startswith("more success")
    short_of_the_jump = _verdict(point("loop", 0.7, 9.6, 1.0), fixed)  # 10.0 is within 5 %
    assert not short_of_the_jump["target_met"]


async def test_a_sweep_runs_every_fixed_point_and_each_adaptive_row(sleep: FakeSleep) -> None:
    lines: list[str] = []
    sweep = await run_budget_sweep(
        tiny(steps=(1,), episodes=1),
        attempts=(1, 2),
        backoffs=(0.1,),
        adaptive=("closedloop_pid",),
        sleep=sleep,
        progress=lines.append,
    )
    # A line per point as it is done: a long sweep is never silent.
    assert [line.split(":")[0] for line in lines] == ["sweep 1/3", "sweep 2/3", "sweep 3/3"]
    assert [(p["attempts"], p["backoff_s"]) for p in sweep["fixed"]] == [(1, 0.1), (2, 0.1)]
    assert [p["strategy"] for p in sweep["adaptive"]] == ["closedloop_pid"]
    assert sweep["adaptive"][0]["attempts"] == 2  # the largest budget of the sweep
    assert sweep["frontier"] and sweep["verdicts"][0]["strategy"] == "closedloop_pid"


@pytest.mark.parametrize(("attempts", "backoffs"), [((0,), (0.1,)), ((1,), (-1.0,)), ((), (1.0,))])
async def test_a_sweep_that_cannot_hold_is_refused_before_any_episode(
    attempts: tuple[int, ...], backoffs: tuple[float, ...]
) -> None:
    with pytest.raises(ConfigurationError):
        await run_budget_sweep(tiny(), attempts=attempts, backoffs=backoffs)
