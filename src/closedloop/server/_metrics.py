"""Prometheus metrics of the service: runs, steps, halts, protocols, handovers, models, control.

Every app has its own ``CollectorRegistry``, so two apps in one process (tests, a
benchmark beside a server) never share or clash over counters. Label values are
bounded sets (agent names, halt reasons, protocol levels, model names, route templates),
never ids or user text.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from ..agent import StepRecord

__all__ = [
    "ServiceMetrics",
]

_UNIT_BUCKETS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
_LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_PROTOCOL_LEVEL = {
    "normal": 0,
    "dual_verification": 1,
    "dimension_reduction": 2,
    "manual_handover": 3,
}


class ServiceMetrics:
    """The service's counters, gauges and histograms, in one registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry

        # Labels as one space-separated string: a Prometheus label name has no spaces.
        def counter(name: str, doc: str, labels: str = "") -> Counter:
            return Counter(f"closedloop_{name}", doc, labels.split(), registry=r)

        def histogram(
            name: str, doc: str, buckets: tuple[float, ...], labels: str = ""
        ) -> Histogram:
            return Histogram(f"closedloop_{name}", doc, labels.split(), buckets=buckets, registry=r)

        unit = _UNIT_BUCKETS
        latency = _LATENCY_BUCKETS
        self.runs_active = Gauge(
            "closedloop_runs_active", "Runs executing in this process.", registry=r
        )
        self.runs_started = counter("runs_started", "Runs started (or resumed).", "agent kind")
        self.runs_finished = counter(
            "runs_finished",
            "Runs that reached a halt, by halt reason.",
            "agent halt_reason success",
        )
        self.steps = counter("steps", "Loop steps, by the protocol in force.", "agent protocol")
        self.protocol_level = histogram(
            "protocol_level",
            "Protocol level of each step (0 normal, 1 dual verification, 2 dimension "
            "reduction, 3 manual handover).",
            (0, 1, 2, 3),
        )
        self.error = histogram("control_error", "e(t) of each step.", unit)
        self.control = histogram("control_signal", "u(t), the PID output of each step.", unit)
        self.f_est = histogram("f_est", "The ESO's total-disturbance estimate of each step.", unit)
        self.quality = histogram("step_quality", "q of each step (1 is perfect).", unit)
        self.handovers = counter(
            "handovers", "Handover events: created, approved, edited, rejected.", "event"
        )
        self.model_calls = counter("model_calls", "Model calls, by outcome.", "model outcome")
        self.model_latency = histogram(
            "model_latency_seconds", "Latency of successful model calls.", latency, "model"
        )
        self.model_tokens = counter("model_tokens", "Tokens, by model and kind.", "model kind")
        self.http_requests = counter(
            "http_requests",
            "HTTP requests, by route template and status.",
            "method route status",
        )
        self.http_latency = histogram(
            "http_request_seconds", "HTTP handling time by route template.", latency, "route"
        )
        self.auth_failures = counter("auth_failures", "Requests refused for their key.", "reason")
        self.rate_limited = counter("rate_limited", "Requests refused by the per-key rate limit.")

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(f"closedloop_provider_{name}", doc, ["provider"], registry=r)

        self.provider_gauges = {
            "limit": gauge("limit", "The adaptive concurrency limit on calls to the provider."),
            "inflight": gauge("inflight", "Calls to the provider holding a permit (all workers)."),
            "rejected": gauge("rejected", "429s and 503s the provider answered (all workers)."),
            "retry_tokens": gauge("retry_tokens", "Retries left in the provider's retry budget."),
            "breaker": gauge("breaker", "The provider's circuit: 0 closed, 1 half-open, 2 open."),
            "times_opened": gauge("breaker_opened", "Times the provider's circuit opened."),
            "cooldown_s": gauge("cooldown_seconds", "Seconds left of the latest Retry-After."),
            "delay_ratio": gauge("delay_ratio", "Queueing delay over the uncongested latency."),
            "capacity_deficit": gauge(
                "capacity_deficit", "The observer's estimate of the capacity deficit, 0 to 1."
            ),
        }

    def step(self, agent: str, record: StepRecord) -> None:
        """Count one step and its control signals."""
        self.steps.labels(agent, record.protocol).inc()
        self.protocol_level.observe(_PROTOCOL_LEVEL.get(record.protocol, 0))
        self.error.observe(record.error)
        self.control.observe(min(1.0, max(0.0, record.control)))
        self.f_est.observe(record.f_est)
        self.quality.observe(record.quality)

    def model_call(
        self, model: str, latency_s: float, prompt_tokens: int, completion_tokens: int
    ) -> None:
        """A model call that answered."""
        self.model_calls.labels(model, "ok").inc()
        self.model_latency.labels(model).observe(latency_s)
        self.model_tokens.labels(model, "prompt").inc(prompt_tokens)
        self.model_tokens.labels(model, "completion").inc(completion_tokens)

    def model_error(self, model: str) -> None:
        """A model call that raised."""
        self.model_calls.labels(model, "error").inc()

    def provider(self, snapshot: dict[str, Any]) -> None:
        """Set the provider gauges from a ``ProviderLimits.snapshot()``."""
        breaker = {"closed": 0, "half_open": 1, "open": 2}
        for key, gauge in self.provider_gauges.items():
            value = snapshot[key]
            number = breaker.get(value, 0) if key == "breaker" else float(value)
            gauge.labels(snapshot["provider"]).set(number)  # "model" or "tools"

    def render(self) -> bytes:
        """The text exposition format, for ``/metrics``."""
        return generate_latest(self.registry)
