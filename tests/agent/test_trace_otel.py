"""OpenTelemetry spans through the real SDK's in-memory exporter."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from closedloop import ConfigurationError
from closedloop.agent._otel import OtelSink
from closedloop.agent._records import (
    ActionCall,
    HaltReason,
    RunResult,
    RunUsageSummary,
    StepRecord,
)
from closedloop.agent._trace import MultiSink, TraceSink

SECRET = "sk-proj-Zx81kLmN0pQrStUvWxYz123456"
T0 = 1_700_000_000 * 10**9


class FakeNs:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def record(step: int, t_s: float, **overrides: Any) -> StepRecord:
    fields: dict[str, Any] = {
        "run_id": "run-7",
        "task_id": "task-7",
        "step": step,
        "t_s": t_s,
        "phase": "search",
        "mode": "react",
        "step_type": "search_flights",
        "action": ActionCall(tool="search_flights", arguments={"api_key": SECRET, "to": "CDG"}),
        "observation": {"status": "ok", "confidence": 0.8, "source": "flights"},
        "error": 0.25,
        "control": 0.4,
        "pid_components": (0.2, 0.15, 0.05),
        "quality": 0.75,
        "f_est": 0.3,
        "protocol": "normal",
        "actuators": {"strictness": "strict", "timeout_s": 1.5, "schema": {"type": "object"}},
        "usage": RunUsageSummary(model_calls=1, prompt_tokens=120, completion_tokens=30),
    }
    fields.update(overrides)
    return StepRecord(**fields)


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


async def test_one_run_span_with_a_child_per_step(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    clock = FakeNs()
    sink = OtelSink(provider.get_tracer("test"), model="qwen2.5-coder-0.5b", time_ns=clock)
    assert isinstance(sink, TraceSink)
    steps = [
        record(0, 1.0),
        record(
            1,
            2.5,
            observation={"status": "timeout", "confidence": 0.0, "source": "flights"},
            f_est=0.65,
            protocol="dimension_reduction",
            notes=["fell back to cache"],
        ),
        record(
            2,
            3.0,
            action=None,
            final_answer="CA123",
            actuators={"model": "judge-model"},
            halt=HaltReason.FINAL,
        ),
    ]
    clock.now = T0 + 1 * 10**9  # the first record arrives one second into the run
    for r in steps:
        await sink.write(r)
    clock.now = T0 + 4 * 10**9
    await sink.close(
        RunResult(
            run_id="run-7",
            task_id="task-7",
            halt_reason=HaltReason.FINAL,
            success=True,
            steps=steps,
            usage=RunUsageSummary(model_calls=3, prompt_tokens=360, completion_tokens=90),
        )
    )

    spans = exporter.get_finished_spans()
    run = next(s for s in spans if s.parent is None)
    children = [s for s in spans if s.parent is not None]
    assert run.name == "invoke_agent closedloop"
    assert [c.name for c in children] == [
        "execute_tool search_flights",
        "execute_tool search_flights",
        "chat judge-model",
    ]
    assert {c.parent.span_id for c in children if c.parent} == {run.context.span_id}
    assert {c.context.trace_id for c in children} == {run.context.trace_id}

    # Times are rebuilt from t_s on the run clock: run started at T0.
    assert run.start_time == T0 and run.end_time == T0 + 4 * 10**9
    assert [(c.start_time, c.end_time) for c in children] == [
        (T0, T0 + 1 * 10**9),
        (T0 + 1 * 10**9, T0 + 25 * 10**8),
        (T0 + 25 * 10**8, T0 + 3 * 10**9),
    ]

    first = attrs(children[0])
    assert first["gen_ai.operation.name"] == "execute_tool"
    assert first["gen_ai.tool.name"] == "search_flights"
    assert first["gen_ai.request.model"] == "qwen2.5-coder-0.5b"
    assert (first["gen_ai.usage.input_tokens"], first["gen_ai.usage.output_tokens"]) == (120, 30)
    assert (first["closedloop.e"], first["closedloop.u"], first["closedloop.f_est"]) == (
        0.25,
        0.4,
        0.3,
    )
    assert first["closedloop.pid.components"] == (0.2, 0.15, 0.05)
    assert first["closedloop.protocol"] == "normal" and first["closedloop.protocol.level"] == 0
    assert first["closedloop.actuator.strictness"] == "strict"
    assert first["closedloop.actuator.timeout_s"] == 1.5
    assert "closedloop.actuator.schema" not in first  # not a scalar attribute
    assert first["closedloop.observation.status"] == "ok"
    assert "gen_ai.tool.call.arguments" not in first  # content stays out by default
    assert children[0].status.status_code is StatusCode.UNSET

    second = attrs(children[1])
    assert second["closedloop.protocol.level"] == 2
    assert second["closedloop.notes"] == ("fell back to cache",)
    assert second["error.type"] == "timeout"
    assert children[1].status.status_code is StatusCode.ERROR

    final = attrs(children[2])
    assert final["gen_ai.operation.name"] == "chat"
    assert final["closedloop.halt"] == "final"

    run_attrs = attrs(run)
    assert run_attrs["gen_ai.operation.name"] == "invoke_agent"
    assert run_attrs["closedloop.run_id"] == "run-7"
    assert run_attrs["closedloop.halt_reason"] == "final" and run_attrs["closedloop.success"]
    assert run_attrs["gen_ai.usage.input_tokens"] == 360
    assert run_attrs["closedloop.steps"] == 3
    assert run.status.status_code is StatusCode.OK


async def test_a_failed_run_is_an_error_span_with_its_halt_reason(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    sink = OtelSink(provider.get_tracer("test"), time_ns=FakeNs())
    await sink.write(record(0, 0.5))
    await sink.close(
        RunResult(
            run_id="run-7",
            task_id="task-7",
            halt_reason=HaltReason.HANDOVER,
            success=False,
            message=f"frozen; token {SECRET}",
            handover_id="ho_abc",
        )
    )
    run = next(s for s in exporter.get_finished_spans() if s.parent is None)
    assert run.status.status_code is StatusCode.ERROR
    assert run.status.description is not None
    assert run.status.description.startswith("halted: handover")
    assert SECRET not in run.status.description
    assert attrs(run)["error.type"] == "handover"
    assert attrs(run)["closedloop.handover_id"] == "ho_abc"


async def test_content_capture_is_opt_in_and_redacted(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    sink = OtelSink(provider.get_tracer("test"), capture_content=True, time_ns=FakeNs())
    await sink.write(record(0, 0.1))
    await sink.write(record(1, 0.2, action=None, final_answer=f"use {SECRET}"))
    tool, final = exporter.get_finished_spans()
    arguments = attrs(tool)["gen_ai.tool.call.arguments"]
    assert '"to": "CDG"' in arguments and SECRET not in arguments
    assert attrs(final)["closedloop.final_answer"] == "use [redacted]"


async def test_closing_without_writes_replays_the_result(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    sink = OtelSink(provider.get_tracer("test"), time_ns=FakeNs())
    steps = [record(0, 0.1), record(1, 0.2)]
    await MultiSink(sink).close(
        RunResult(
            run_id="run-7",
            task_id="task-7",
            halt_reason=HaltReason.STEP_LIMIT,
            success=False,
            steps=steps,
        )
    )
    spans = exporter.get_finished_spans()
    assert sorted(s.name for s in spans) == [
        "execute_tool search_flights",
        "execute_tool search_flights",
        "invoke_agent closedloop",
    ]
    # A run with no steps at all still gets its span.
    await sink.close(
        RunResult(run_id="empty", task_id="t", halt_reason=HaltReason.CANCELLED, success=False)
    )
    assert len(exporter.get_finished_spans()) == 4


async def test_runs_sharing_a_sink_keep_their_own_spans(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    sink = OtelSink(provider.get_tracer("test"), time_ns=FakeNs())
    await sink.write(record(0, 0.1, run_id="a"))
    await sink.write(record(0, 0.1, run_id="b"))
    for run_id in ("a", "b"):
        await sink.close(
            RunResult(run_id=run_id, task_id="t", halt_reason=HaltReason.FINAL, success=True)
        )
    spans = exporter.get_finished_spans()
    runs = {attrs(s)["closedloop.run_id"]: s for s in spans if s.parent is None}
    for span in (s for s in spans if s.parent is not None):
        assert span.parent is not None
        owner = runs["a"] if span.context.trace_id == runs["a"].context.trace_id else runs["b"]
        assert span.parent.span_id == owner.context.span_id
    assert runs["a"].context.trace_id != runs["b"].context.trace_id


def test_without_opentelemetry_the_error_says_which_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    with pytest.raises(ConfigurationError, match=r"install the `otel` extra"):
        OtelSink()


def test_default_tracer_comes_from_the_global_provider() -> None:
    sink = OtelSink()
    assert sink.tracer is not None and "OtelSink" in repr(sink)
