"""Distributed control: the coordinator's per-sub-agent decisions, re-planning, and the report team."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from closedloop import ConfigurationError
from closedloop.agent import Coordinator, CoordinatorDecision, SubAgentReport
from closedloop_bench.benchmarks import IdealReference
from closedloop_bench.reference import ReferenceTask, WorldTools, load_tasks
from closedloop_bench.reference.report_team import run_report_team
from closedloop_bench.world import (
    EndpointFaults,
    Outage,
    World,
    WorldFaultProfile,
    create_world_app,
    load_world,
)


def feed(c: Coordinator, name: str, qualities: list[float], u: float = 0.0) -> CoordinatorDecision:
    # No effort (u = 0): the estimate is the weighted shortfall 1 − q alone.
    decision = CoordinatorDecision.NORMAL
    for q in qualities:
        decision = c.observe(SubAgentReport(name, u, q))
    return decision


def test_a_failing_sub_agent_escalates_alone() -> None:
    c = Coordinator(["gatherer", "extractor"], hysteresis=0.0)
    assert feed(c, "extractor", [1.0, 1.0, 1.0]) is CoordinatorDecision.NORMAL
    assert feed(c, "gatherer", [0.1, 0.0, 0.0]) is CoordinatorDecision.HANDOVER
    assert c.decision("extractor") is CoordinatorDecision.NORMAL
    assert c.f_est("gatherer") > 0.8 and c.f_est("extractor") == pytest.approx(0.0)
    assert c.history[-1] == ("gatherer", c.f_est("gatherer"), CoordinatorDecision.HANDOVER)


def test_the_levels_follow_the_estimate() -> None:
    # quality q with no effort: the estimate is the shortfall 1 − q, so q picks the level
    for q, want in [
        (0.7, CoordinatorDecision.NORMAL),
        (0.5, CoordinatorDecision.DUAL_VERIFICATION),
        (0.3, CoordinatorDecision.REDUCED_SCOPE),
        (0.1, CoordinatorDecision.HANDOVER),
    ]:
        c = Coordinator(["a"], hysteresis=0.0)
        assert feed(c, "a", [q, q, q]) is want, q


def test_replan_moves_work_to_the_healthiest_normal_sub_agent() -> None:
    c = Coordinator(["gatherer", "extractor", "writer"], hysteresis=0.0)
    feed(c, "gatherer", [0.0, 0.0])
    feed(c, "extractor", [0.7, 0.7])
    feed(c, "writer", [1.0, 1.0])
    roles = {"gathering": "gatherer", "extraction": "extractor", "writing": "writer"}
    assert c.replan(roles) == {
        "gathering": "writer",
        "extraction": "extractor",
        "writing": "writer",
    }
    c.reset("gatherer")
    assert c.decision("gatherer") is CoordinatorDecision.NORMAL and c.f_est(
        "gatherer"
    ) == pytest.approx(0.0)


def test_nobody_healthy_means_a_person() -> None:
    c = Coordinator(["a", "b"], hysteresis=0.0)
    feed(c, "a", [0.0, 0.0])
    feed(c, "b", [0.0, 0.0])
    assert c.replan({"r": "a"}) == {"r": None}


def test_bad_names_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="names"):
        Coordinator(["a", "a"])
    with pytest.raises(ConfigurationError, match="name"):
        Coordinator(["a"]).observe(SubAgentReport("b", 0.0, 1.0))


# --- the report team on a real (in-process) world ------------------------------------------


def report_task(template: str) -> ReferenceTask:
    return next(t for t in load_tasks("eval", 0) if t.template == template)


@pytest.fixture
async def reference() -> IdealReference:
    return IdealReference()


async def tools_on(profile: WorldFaultProfile | str) -> AsyncIterator[WorldTools]:
    world = World(data=load_world(0), profile=profile, latency_scale=0.0, fault_seed=1)
    transport = httpx.ASGITransport(app=create_world_app(world))
    async with WorldTools("http://world.invalid", transport=transport, timeout_s=60.0) as tools:
        yield tools


async def no_sleep(_seconds: float) -> None:
    return None


@pytest.mark.parametrize("mode", ["single", "team", "coordinated"])
async def test_every_mode_answers_a_clean_world(mode: str, reference: IdealReference) -> None:
    task = report_task("report_compare")
    expected = await reference.expected(task)
    async for tools in tools_on("none"):
        out = await run_report_team(task, tools, expected=expected, mode=mode, sleep=no_sleep)
    assert out.answer.fields == dict(task.ideal_answer.fields)
    assert out.calls == len(task.ideal_trajectory) and out.replans == []


async def test_the_coordinator_reduces_scope_when_discovery_is_down(
    reference: IdealReference,
) -> None:
    task = report_task("report_compare")
    expected = await reference.expected(task)
    down = WorldFaultProfile(
        name="search-down",
        endpoints={
            "documents": EndpointFaults(outages=(Outage(unit="requests", start=0, end=99),))
        },
    )
    answers = {}
    for mode in ("team", "coordinated"):
        async for tools in tools_on(down):
            answers[mode] = await run_report_team(
                task, tools, expected=expected, mode=mode, sleep=no_sleep
            )
    assert answers["team"].answer.fields["status"] == "impossible"
    coordinated = answers["coordinated"]
    assert coordinated.answer.fields == dict(task.ideal_answer.fields)
    assert any("reduced scope" in r for r in coordinated.replans)
    assert coordinated.replans[0].startswith("gathering: gatherer -> ")  # re-planned first


async def test_a_bad_mode_is_refused(reference: IdealReference) -> None:
    task = report_task("report_figure")
    with pytest.raises(ConfigurationError, match="mode"):
        async for tools in tools_on("none"):
            await run_report_team(task, tools, expected=await reference.expected(task), mode="x")
