"""The report agent against a real world server: the model reads OCR'd figures, a normaliser
and a grounding check keep only what the document says, and the ADRC protocols (dual
verification, dimension reduction, manual handover) react to a model that misreads."""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from closedloop.agent import HaltReason
from closedloop.feedback import HandoverQueue, MemoryStore
from closedloop.models import CallInfo, FunctionModel, Message
from closedloop_bench.reference import ReferenceTask, check, load_tasks
from closedloop_bench.reference._agents_common import reference_control
from closedloop_bench.reference.report import build_report_agent, grounded_numbers, read_number
from closedloop_bench.world import WorldHandle, add_ocr_noise, serve_world

REPORTS = [t for t in load_tasks("eval") if t.domain == "report"]
FIGURES = [t for t in REPORTS if t.template == "report_figure"]

# Where each figure is written in a report, Chinese and English.
_LABELS = {
    "revenue_yoy_pct": (r"同比((?:增长|下降)[^%]+)%", r"YoY ([^%]+)%"),
    "operating_cash_flow_mcny": (r"经营活动现金流量净额：(.+)", r"Operating cash flow: (.+)"),
    "net_profit_mcny": (r"净利润：(.+)", r"Net profit: (.+)"),
    "gross_margin_pct": (r"毛利率：(.+?)%", r"Gross margin: (.+?)%"),
    "revenue_mcny": (r"营业收入：([^，]+)", r"Revenue: ([^(]+)"),
}

Misread = Callable[[str, str, CallInfo], str | None]


def reader(misread: Misread | None = None) -> FunctionModel:
    """A competent extraction model: it copies each figure as written after its label
    (OCR noise and all); ``misread(text, figure, call)`` may replace what it copies."""

    def answer(messages: Sequence[Message], call: CallInfo) -> dict[str, Any]:
        text, wanted = messages[-1].content.split("Report:\n", 1)[1].rsplit("\nFigures: ", 1)
        out: dict[str, Any] = {}
        for name in re.findall(r"(\w+) \(", wanted):
            found = next((m for p in _LABELS[name] if (m := re.search(p, text))), None)
            copied = found.group(1).strip() if found else None
            out[name] = misread(text, copied or "", call) if misread else copied
        return out

    return FunctionModel(answer, name="reader")


def another_figure(p: float) -> Misread:
    """With probability ``p`` (drawn from the call's seed and temperature) copy another
    figure of the same report: grounded in the text, but the wrong one."""

    def misread(text: str, copied: str, call: CallInfo) -> str | None:
        rng = random.Random(f"{call.seed}:{call.temperature}:{copied}")
        if rng.random() >= p:
            return copied
        others = [v for v in grounded_numbers(text) if v != read_number(copied) and v > 0]
        return str(rng.choice(others)) if others else copied

    return misread


async def no_wait(seconds: float) -> None:
    """Retry delays pass at once; the loop's deadline watcher (a long sleep) never fires."""
    if seconds > 30:
        await asyncio.Event().wait()


@pytest.fixture(scope="module")
def faulty() -> Iterator[WorldHandle]:
    with serve_world("seed000", latency_scale=0.0) as handle:
        yield handle


async def _run_all(
    world: WorldHandle,
    tasks: Sequence[ReferenceTask],
    model: Any,
    injected: list[int] | None = None,
    **options: Any,
) -> float:
    """The share of ``tasks`` the checkers pass; ``injected`` collects the errors injected."""
    ok = 0
    async with build_report_agent(
        model, base_url=world.base_url, sleep=no_wait, **options
    ) as agent:
        for index, task in enumerate(tasks):
            world.reset(fault_seed=index)
            ok += check(task, await agent.run(task), world).success
            if injected is not None:
                injected.append(len(world.faults(kind="error")))
    return ok / len(tasks)


# --- the normaliser -------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.floats(-9_999.9, 99_999.9).map(lambda v: round(v, 1)), st.integers(0, 10**6))
def test_the_normaliser_reads_back_every_ocr_corrupted_figure(value: float, seed: int) -> None:
    noisy, _ = add_ocr_noise(f"{value:,.1f}", "heavy", random.Random(seed))
    assert read_number(noisy) == pytest.approx(value)
    line = f"营业收入：{noisy}，同比下降{abs(value) % 100:.1f}%"
    assert grounded_numbers(line)[0] == pytest.approx(value)
    assert grounded_numbers(line)[1] == pytest.approx(-(abs(value) % 100), abs=1e-9)


def test_the_normaliser_refuses_what_is_not_a_number() -> None:
    for raw in (None, "", "n/a", "Operating", "YoY", True, ["1"]):
        assert read_number(raw) is None
    assert read_number("2l0.1") == 210.1 and read_number("37 .0%") == 37.0
    assert read_number("-1 2.5") == -12.5 and read_number(42) == 42.0


# --- whole tasks ------------------------------------------------------------------------------


async def test_report_tasks_succeed_on_a_clean_world(world: WorldHandle) -> None:
    assert await _run_all(world, REPORTS[::2], reader()) >= 0.97  # measured 80/80


async def test_seed000_faults_are_absorbed(faulty: WorldHandle) -> None:
    injected: list[int] = []
    assert await _run_all(faulty, REPORTS[1::2], reader(), injected) >= 0.95  # measured 80/80
    assert sum(injected) >= 10


@pytest.mark.parametrize(
    "prompt",
    ["Acme Corp在2024Q2的净利润是多少？", "What was Huachen Technology's revenue in Q1 2021?"],
)
async def test_reports_the_archive_lacks_are_impossible_without_asking_the_model(
    world: WorldHandle, prompt: str
) -> None:
    model = reader()
    async with build_report_agent(model, base_url=world.base_url, sleep=no_wait) as agent:
        result = await agent.run(prompt)
    assert result.fields["answer"]["status"] == "impossible"
    assert model.calls == []


async def test_dual_verification_keeps_only_the_figures_two_readings_agree_on(
    world: WorldHandle,
) -> None:
    # A model that, three times in ten, copies another figure of the same report: the
    # grounding check cannot tell (the number is in the text); a second reading can.
    tasks = FIGURES[:12]
    plain = await _run_all(
        world, tasks, reader(another_figure(0.3)), control=reference_control(protocols=False)
    )
    dual = await _run_all(
        world,
        tasks,
        reader(another_figure(0.3)),
        control=reference_control(protocol_thresholds=(0.0, 0.98, 0.99)),
    )
    assert dual >= 0.9 and dual > plain  # measured: dual 12/12, single readings 10/12


async def test_dimension_reduction_skips_the_formatting_and_returns_plain_text(
    world: WorldHandle,
) -> None:
    task = next(t for t in REPORTS if t.template == "report_trend")
    first_misread: list[bool] = []

    def once(text: str, copied: str, call: CallInfo) -> str | None:
        first_misread.append(True)
        return "999999.9" if len(first_misread) == 1 else copied  # one bad reading

    normal = reference_control()
    reduced = reference_control(
        eso_min_samples=1, protocol_thresholds=(0.01, 0.02, 0.999), hysteresis=0.05
    )
    async with build_report_agent(reader(), base_url=world.base_url, control=normal) as agent:
        formatted = await agent.run(task)
    async with build_report_agent(
        reader(once), base_url=world.base_url, control=reduced, sleep=no_wait
    ) as agent:
        world.reset()
        plain = await agent.run(task)
    assert formatted.answer.startswith("# ") and "## outline" in formatted.answer
    assert plain.steps[-1].protocol == "dimension_reduction"
    assert not plain.answer.startswith("#") and "non-core formatting was skipped" in " ".join(
        plain.steps[-1].notes
    )
    assert check(task, plain, world).success  # the core answer is whole


async def test_a_model_that_keeps_misreading_is_handed_over_with_an_audit(
    world: WorldHandle,
) -> None:
    task = next(t for t in REPORTS if t.template == "report_trend" and len(t.ideal_trajectory) >= 5)
    store = MemoryStore()

    def garbage(text: str, copied: str, call: CallInfo) -> str | None:
        return f"{random.Random(call.seed).randint(1, 9)}{random.random():.3f}"

    async with build_report_agent(
        reader(garbage), base_url=world.base_url, store=store, sleep=no_wait
    ) as agent:
        result = await agent.run(task)
    assert result.halt_reason is HaltReason.HANDOVER and result.answer is None
    assert not check(task, result, world).success
    protocols = [s.protocol for s in result.steps]
    assert protocols[0] == "normal" and protocols[-1] != "normal"  # the ESO saw it coming
    assert result.handover_id is not None
    item = await HandoverQueue(store).get(result.handover_id)
    assert any("record_figures" in str(x) for x in item.audit.values())
