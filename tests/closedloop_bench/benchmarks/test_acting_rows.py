"""The acting and ignoring rows: the budget row with the actions on the estimate on or off,
nothing else different, and both run on the same world."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from closedloop.agent import ControlConfig, EarlyHandover, HealthSettings, ReadRetry, StormWait
from closedloop_bench.benchmarks import STRATEGY_NAMES, Limits, get_strategy, run_faults_bench
from closedloop_bench.benchmarks._closed import READ_RETRY, ClosedLoopAgent
from closedloop_bench.benchmarks._strategies import LABELS
from closedloop_bench.world import Regime, RegimeSpec, WorldFaultProfile

from .conftest import FakeSleep, tiny

ROWS = ("closedloop_acting", "closedloop_ignoring")


def settings(name: str, limits: Limits) -> tuple[ControlConfig, ReadRetry]:
    strategy = get_strategy(name)
    assert isinstance(strategy, ClosedLoopAgent)
    return strategy.settings(limits)


def comparable(config: ControlConfig) -> dict[str, Any]:
    """The configuration's fields; the schedule as what it answers over u (its functions
    are new closures on every build, so they compare by value)."""
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    schedule = fields.pop("schedule")
    grid = [i / 10 for i in range(11)]
    fields["schedule"] = [schedule(u) for u in grid]
    return fields


def test_both_rows_are_registered_with_labels() -> None:
    for name in ROWS:
        assert name in STRATEGY_NAMES and LABELS[name]
        assert get_strategy(name).name == name


def test_the_rows_differ_only_in_the_actions_on_the_estimate() -> None:
    limits = Limits(attempts=3)
    acting, acting_reads = settings("closedloop_acting", limits)
    ignoring, ignoring_reads = settings("closedloop_ignoring", limits)
    budget, budget_reads = settings("closedloop_budget", limits)
    # The actions: on in one row, off in the other.
    assert acting.early_handover == EarlyHandover() and ignoring.early_handover is None
    assert acting_reads.storm == StormWait() and ignoring_reads.storm is None
    assert acting.health == HealthSettings(refuse_open=True)
    assert ignoring.health == HealthSettings(refuse_open=False)
    # Everything else is the same, and the budget row's: the shared read-retry predicate,
    # the same attempts scheduled from u, the same estimator settings.
    assert dataclasses.replace(acting_reads, storm=None) == ignoring_reads == READ_RETRY
    assert budget_reads == READ_RETRY
    same = dataclasses.replace(acting, early_handover=None, health=ignoring.health)
    assert comparable(same) == comparable(ignoring)
    assert comparable(dataclasses.replace(ignoring, health=budget.health)) == comparable(budget)


def storms(folder: Path) -> str:
    """A profile where every service alternates one healthy request and one 429 with
    ``Retry-After`` (a healthy spell of mean 1 / λ = 1 request, storms of mean 1; on the
    test world, with no latency, the Retry-After is 0 s)."""
    spec = RegimeSpec(
        onset_rate=1.0,
        onset_mix={Regime.STORM: 1.0},
        dwell={Regime.STORM: 1.0},
        worsen=0.0,
        storm_retry_after_s=1.0,
    )
    path = folder / "storms.json"
    path.write_text(WorldFaultProfile(name="storms", regimes=spec).model_dump_json())
    return str(path)


async def test_on_a_storm_only_the_acting_row_waits_it_out(tmp_path: Path) -> None:
    sleep = FakeSleep()
    config = tiny(profiles=(storms(tmp_path),), steps=(1, 2, 3), strategies=ROWS)
    report = await run_faults_bench(config, sleep=sleep)
    rows = {name: [r for r in report.episodes if r.strategy == name] for name in ROWS}
    assert all(rows.values()) and len(rows["closedloop_acting"]) == len(rows["closedloop_ignoring"])
    acting, ignoring = rows["closedloop_acting"], rows["closedloop_ignoring"]
    # Same tasks and fault seeds on both sides: only the actions differ.
    key = [(r.task_id, r.fault_seed) for r in acting]
    assert key == [(r.task_id, r.fault_seed) for r in ignoring]
    # A 429 on a read is followed by a healthy request. The acting row waits it out
    # inside the step (the attempt not counted); the ignoring row, at u = 0 while calm,
    # spends its one attempt on the 429, and its rule gate repeats the call a step later.
    stormy = [(a, i) for a, i in zip(acting, ignoring, strict=True) if a.faults.get("rate_limit")]
    assert stormy
    assert all(a.success >= i.success for a, i in zip(acting, ignoring, strict=True))
    assert all(a.loop_steps <= i.loop_steps for a, i in stormy)
    assert sum(a.loop_steps for a, _ in stormy) < sum(i.loop_steps for _, i in stormy)
