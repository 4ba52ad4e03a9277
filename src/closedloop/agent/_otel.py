"""OpenTelemetry spans for runs: one span per run, a child span per step.

Names and attributes follow the OpenTelemetry GenAI semantic conventions where they fit
(``invoke_agent`` for the run, ``execute_tool`` / ``chat`` for a step, ``gen_ai.*``
usage and tool attributes); the control signals go in ``closedloop.*`` attributes.
OpenTelemetry is optional (the ``otel`` extra): it is imported when a sink is built.
Prompt and tool-call content stays out of spans unless ``capture_content=True``, and is
redacted even then.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._exceptions import ConfigurationError
from .._redaction import redact
from ..control import Protocol
from ._records import HaltReason, RunResult, StepRecord

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer
    from opentelemetry.util.types import AttributeValue

__all__ = ["OtelSink"]

_FAILED_OBSERVATIONS = frozenset({"error", "timeout"})
_NS = 1_000_000_000


@dataclass(slots=True)
class _Run:
    span: Span
    context: Context
    start_ns: int
    last_t_s: float = 0.0
    steps: int = 0


def _scalar(value: Any) -> AttributeValue | None:
    if isinstance(value, bool | int | float | str):
        return redact(value) if isinstance(value, str) else value
    return None


class OtelSink:
    """A trace sink that emits OpenTelemetry spans (a ``TraceSink``).

    ``tracer`` defaults to the global tracer provider's ``closedloop`` tracer, so spans
    go wherever the application configured its exporter (nowhere, with the API alone).
    Steps arrive after they ran: a step's span is rebuilt to cover the time between the
    previous record's ``t_s`` and its own, on a run clock anchored when the first record
    arrives (``time_ns`` is injectable). ``model`` names ``gen_ai.request.model`` unless a
    step's ``actuators["model"]`` does. Several runs may share one sink (keyed by run id).

    Raises ``ConfigurationError`` when OpenTelemetry is not installed.
    """

    def __init__(
        self,
        tracer: Tracer | None = None,
        *,
        model: str | None = None,
        agent_name: str = "closedloop",
        capture_content: bool = False,
        time_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        try:
            from opentelemetry import trace
        except ImportError:
            raise ConfigurationError(
                "tracer",
                tracer,
                "OpenTelemetry is not installed; install the `otel` extra "
                "(pip install 'closedloop[otel]')",
            ) from None
        self._trace = trace
        self.tracer: Tracer = tracer if tracer is not None else trace.get_tracer("closedloop")
        self.model = model
        self.agent_name = agent_name
        self.capture_content = capture_content
        self._time_ns = time_ns
        self._runs: dict[str, _Run] = {}

    def __repr__(self) -> str:
        return f"OtelSink(agent_name={self.agent_name!r}, open_runs={len(self._runs)})"

    def _start_run(self, run_id: str, task_id: str, mode: str | None, t_s: float) -> _Run:
        start_ns = self._time_ns() - int(t_s * _NS)
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": self.agent_name,
            "closedloop.run_id": run_id,
            "closedloop.task_id": task_id,
        }
        if mode is not None:
            attributes["closedloop.mode"] = mode
        if self.model is not None:
            attributes["gen_ai.request.model"] = self.model
        span = self.tracer.start_span(
            f"invoke_agent {self.agent_name}", attributes=attributes, start_time=start_ns
        )
        run = _Run(span, self._trace.set_span_in_context(span), start_ns)
        self._runs[run_id] = run
        return run

    def _model_of(self, record: StepRecord) -> str | None:
        named = record.actuators.get("model")
        return named if isinstance(named, str) and named else self.model

    def _step_attributes(self, record: StepRecord) -> dict[str, AttributeValue]:
        usage = record.usage
        attrs: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "execute_tool" if record.action else "chat",
            "gen_ai.usage.input_tokens": usage.prompt_tokens,
            "gen_ai.usage.output_tokens": usage.completion_tokens,
            "closedloop.step": record.step,
            "closedloop.t_s": record.t_s,
            "closedloop.phase": record.phase,
            "closedloop.step_type": record.step_type,
            "closedloop.e": record.error,
            "closedloop.u": record.control,
            "closedloop.pid.components": list(record.pid_components),
            "closedloop.quality": record.quality,
            "closedloop.f_est": record.f_est,
            "closedloop.protocol": record.protocol,
            "closedloop.repeat_count": record.repeat_count,
            "closedloop.model_calls": usage.model_calls,
            "closedloop.cost": usage.cost,
        }
        model = self._model_of(record)
        if model is not None:
            attrs["gen_ai.request.model"] = model
        if record.action is not None:
            attrs["gen_ai.tool.name"] = record.action.tool
            if self.capture_content:
                attrs["gen_ai.tool.call.arguments"] = json.dumps(
                    redact(record.action.arguments), ensure_ascii=False, default=repr
                )
        if self.capture_content and record.final_answer is not None:
            attrs["closedloop.final_answer"] = redact(record.final_answer)
        # A protocol this version does not know keeps its name only.
        with contextlib.suppress(ValueError):
            attrs["closedloop.protocol.level"] = Protocol(record.protocol).level
        for name, value in (("v", record.lyapunov_v), ("dv", record.lyapunov_dv)):
            if value is not None:
                attrs[f"closedloop.lyapunov.{name}"] = value
        self._add_observation(attrs, record.observation)
        for key, value in record.actuators.items():
            scalar = _scalar(value)
            if scalar is not None:
                attrs[f"closedloop.actuator.{key}"] = scalar
        if record.validation_errors:
            attrs["closedloop.validation_errors"] = [redact(e) for e in record.validation_errors]
        if record.notes:
            attrs["closedloop.notes"] = [redact(n) for n in record.notes]
        if record.halt is not None:
            attrs["closedloop.halt"] = record.halt.value
        return attrs

    @staticmethod
    def _add_observation(
        attrs: dict[str, AttributeValue], observation: Mapping[str, Any] | None
    ) -> None:
        if observation is None:
            return
        for key in ("status", "confidence", "source", "latency_s"):
            scalar = _scalar(observation.get(key))
            if scalar is not None:
                attrs[f"closedloop.observation.{key}"] = scalar
        if observation.get("status") in _FAILED_OBSERVATIONS:
            attrs["error.type"] = str(observation["status"])

    async def write(self, record: StepRecord) -> None:
        """Emit the step's span under its run's span (started by the first record)."""
        run = self._runs.get(record.run_id) or self._start_run(
            record.run_id, record.task_id, record.mode, record.t_s
        )
        start = run.start_ns + int(run.last_t_s * _NS)
        end = max(start, run.start_ns + int(record.t_s * _NS))
        attrs = self._step_attributes(record)
        if record.action is not None:
            name = f"execute_tool {record.action.tool}"
        else:
            model = self._model_of(record)
            name = f"chat {model}" if model else "chat"
        span = self.tracer.start_span(name, context=run.context, attributes=attrs, start_time=start)
        observation_failure = attrs.get("error.type")
        if record.validation_errors or observation_failure is not None:
            why = "; ".join(record.validation_errors) or f"observation {observation_failure!s}"
            span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, redact(why)))
        span.end(end_time=end)
        run.last_t_s = max(run.last_t_s, record.t_s)
        run.steps += 1

    async def close(self, result: RunResult) -> None:
        """End the run's span with the halt reason, success and the run's usage."""
        run = self._runs.get(result.run_id)
        if run is None:
            # Nothing was written through this sink: replay the steps the result carries.
            for record in result.steps:
                await self.write(record)
            run = self._runs.get(result.run_id) or self._start_run(
                result.run_id, result.task_id, None, 0.0
            )
        del self._runs[result.run_id]
        usage = result.usage
        attrs: dict[str, AttributeValue] = {
            "closedloop.halt_reason": result.halt_reason.value,
            "closedloop.success": result.success,
            "closedloop.steps": run.steps,
            "closedloop.model_calls": usage.model_calls,
            "closedloop.cost": usage.cost,
            "gen_ai.usage.input_tokens": usage.prompt_tokens,
            "gen_ai.usage.output_tokens": usage.completion_tokens,
        }
        if result.handover_id is not None:
            attrs["closedloop.handover_id"] = result.handover_id
        if result.trace_path is not None:
            attrs["closedloop.trace_path"] = result.trace_path
        run.span.set_attributes(attrs)
        if result.success:
            run.span.set_status(self._trace.Status(self._trace.StatusCode.OK))
        else:
            run.span.set_attribute("error.type", result.halt_reason.value)
            why = f"halted: {result.halt_reason.value}"
            if result.message:
                why += f": {redact(result.message)}"
            if result.halt_reason is HaltReason.FINAL:
                why += " (final answer without a complete state)"
            run.span.set_status(self._trace.Status(self._trace.StatusCode.ERROR, why))
        run.span.end(end_time=max(self._time_ns(), run.start_ns + int(run.last_t_s * _NS)))
