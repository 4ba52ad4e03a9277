"""The hybrid controller: maintain, rules first, the model only past the gate, all logged."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from closedloop import ConfigurationError
from closedloop.decision import (
    OUT_OF_TOLERANCE,
    DecisionContext,
    HybridController,
    Proposal,
    RuleRegistry,
    StateVector,
    Trigger,
    cause_key,
    default_causes,
    default_rules,
)
from closedloop.perception import Observation

NOW = 1_000.0


class ScriptedModel:
    """An injected model policy that records what it was shown."""

    def __init__(self, proposal: Proposal | Exception) -> None:
        self.proposal = proposal
        self.seen: list[DecisionContext] = []

    async def __call__(self, ctx: DecisionContext) -> Proposal:
        self.seen.append(ctx)
        if isinstance(self.proposal, Exception):
            raise self.proposal
        return self.proposal


def ok(source: str, confidence: float = 1.0, at: float = NOW) -> Observation:
    return Observation.ok({"v": 1}, source=source, timestamp=at, confidence=confidence)


async def test_inside_tolerance_maintains_without_rules_or_model() -> None:
    model = ScriptedModel(Proposal("think", 0.9, "should not be asked"))
    ctl = HybridController(default_rules(), model=model, tolerance=0.2)
    decision = await ctl.decide([ok("flights", 0.9), ok("weather", 0.95)], now=NOW)
    assert decision.action == "maintain" and not decision.used_model and decision.rule is None
    assert decision.error == pytest.approx(0.075)
    assert model.seen == []
    assert "within tolerance" in decision.reason


async def test_503_switches_to_a_healthy_source() -> None:
    model = ScriptedModel(Proposal("think", 0.9, "unused"))
    ctl = HybridController(default_rules(), model=model)
    decision = await ctl.decide(
        [
            Observation.failed("HTTP 503 Service Unavailable", source="api.primary", timestamp=NOW),
            ok("api.backup", 0.9),
        ],
        now=NOW,
    )
    assert decision.action == "switch_source" and decision.rule == "switch_source"
    assert decision.params == {"from": "api.primary", "to": "api.backup"}
    assert not decision.used_model and model.seen == []
    assert "api.primary failed (http_503)" in decision.reason


async def test_rate_limit_backs_off_honouring_retry_after() -> None:
    ctl = HybridController(default_rules())
    decision = await ctl.decide(
        [Observation.rate_limited(source="api", retry_after_s=7.0, timestamp=NOW)], now=NOW
    )
    assert decision.action == "back_off" and decision.params["delay_s"] == 7.0
    assert decision.confidence == 0.95
    no_header = HybridController(default_rules())
    fallback = await no_header.decide(
        [Observation.rate_limited(source="api", timestamp=NOW)], {"backoff_s": 3.0}, now=NOW
    )
    assert fallback.params["delay_s"] == 3.0 and fallback.confidence == 0.8


async def test_empty_widens_then_asks() -> None:
    ctl = HybridController(default_rules())
    empty = Observation.empty(source="rooms", timestamp=NOW, confidence=0.5)
    first = await ctl.decide([empty], now=NOW)
    assert first.action == "widen_query"
    second = await ctl.decide([], {"query_widened": True}, now=NOW)
    assert second.action == "ask_user" and "not the absence of a constraint" in second.reason


async def test_timeout_and_stale_rules() -> None:
    ctl = HybridController(default_rules())
    timeout = await ctl.decide(
        [Observation.timeout(source="api", timeout_s=2.0, timestamp=NOW)], now=NOW
    )
    assert timeout.action == "widen_timeout" and timeout.params["factor"] == 1.5
    ctl = HybridController(default_rules())
    fresh_cache = Observation.stale(
        {"v": 1}, source="api", age_s=60.0, timestamp=NOW, confidence=0.5
    )
    accepted = await ctl.decide([fresh_cache], now=NOW)
    assert accepted.action == "accept_stale" and "outdated" in accepted.params["note"]
    # The same cached answer an hour later must be refreshed: age grows with the clock.
    later = await ctl.decide([], now=NOW + 3600.0)
    assert later.action == "refresh" and later.params["age_s"] == pytest.approx(3660.0)


async def test_model_only_when_the_best_rule_is_below_the_gate() -> None:
    rules = RuleRegistry()

    @rules.on("partial")
    def guess_missing(ctx: DecisionContext, trigger: Trigger) -> Proposal:
        return Proposal("fill_defaults", 0.2, "a weak guess")

    model = ScriptedModel(Proposal("refine_query", 0.6, "ask for the missing fields"))
    ctl = HybridController(rules, model=model, gate=0.3)
    partial = Observation.partial({"v": 1}, source="api", missing=["price"], timestamp=NOW)
    decision = await ctl.decide([partial], now=NOW)
    assert decision.used_model and decision.action == "refine_query" and decision.rule is None
    assert "best rule guess_missing has confidence 0.20 < gate 0.30" in decision.reason
    assert [name for name, _ in model.seen[0].proposals] == ["guess_missing"]
    # Lower the gate below the rule's confidence and the rule wins without the model.
    model.seen.clear()
    low_gate = HybridController(rules, model=model, gate=0.2)
    ruled = await low_gate.decide([partial], now=NOW)
    assert ruled.action == "fill_defaults" and not ruled.used_model and model.seen == []


async def test_rules_win_over_the_model_when_confident() -> None:
    model = ScriptedModel(Proposal("model_move", 1.0, "very sure"))
    ctl = HybridController(default_rules(), model=model)
    decision = await ctl.decide(
        [Observation.rate_limited(source="api", retry_after_s=1.0, timestamp=NOW)], now=NOW
    )
    assert decision.action == "back_off" and not decision.used_model and model.seen == []


async def test_unknown_cause_goes_to_the_model() -> None:
    model = ScriptedModel(Proposal("rephrase", 0.5, "ambiguous request"))
    ctl = HybridController(default_rules(), model=model)
    decision = await ctl.decide([ok("search", 0.3)], now=NOW)
    assert decision.used_model and decision.action == "rephrase"
    assert "no rule knows this cause" in decision.reason


async def test_without_model_a_weak_rule_beats_nothing_and_nothing_escalates() -> None:
    rules = RuleRegistry()
    rules.on("partial", name="weak")(lambda ctx, trig: Proposal("patch", 0.1, "weak"))
    ctl = HybridController(rules)
    partial = Observation.partial({"v": 1}, source="api", timestamp=NOW)
    weak = await ctl.decide([partial], now=NOW)
    assert weak.action == "patch" and weak.rule == "weak" and "no model configured" in weak.reason
    bare = HybridController(RuleRegistry())
    escalated = await bare.decide([ok("x", 0.1)], now=NOW)
    assert escalated.action == "escalate" and escalated.confidence == 0.0


async def test_model_failure_falls_back_and_is_logged() -> None:
    model = ScriptedModel(ConnectionError("model server down"))
    ctl = HybridController(RuleRegistry(), model=model)
    decision = await ctl.decide([ok("x", 0.1)], now=NOW)
    assert decision.action == "escalate" and "model failed (ConnectionError" in decision.reason


async def test_dynamic_tolerance_from_the_budget() -> None:
    """A price tolerance of max(50, 0.1 x budget), error in currency units."""

    def price_error(state: StateVector, context: Mapping[str, Any]) -> float:
        cheapest = state.sources["flights"]
        assert cheapest.confidence > 0
        return max(0.0, float(context["cheapest"]) - float(context["budget"]))

    rules = RuleRegistry()

    @rules.on(OUT_OF_TOLERANCE)
    def other_dates(ctx: DecisionContext, trigger: Trigger) -> Proposal:
        return Proposal("query_other_dates", 0.7, f"cheapest is {ctx.error:.0f} over budget")

    ctl = HybridController(
        rules,
        error_fn=price_error,
        tolerance=lambda ctx: max(50.0, 0.1 * float(ctx.context["budget"])),
    )
    flights = [ok("flights")]
    small = await ctl.decide(flights, {"budget": 800, "cheapest": 870}, now=NOW)
    assert small.action == "maintain" and small.tolerance == 80.0 and small.error == 70.0
    cheap_trip = await ctl.decide(flights, {"budget": 300, "cheapest": 370}, now=NOW)
    assert cheap_trip.action == "query_other_dates" and cheap_trip.tolerance == 50.0


async def test_dynamic_gate() -> None:
    rules = RuleRegistry()
    rules.on("partial", name="patch")(lambda ctx, trig: Proposal("patch", 0.5, "medium"))
    model = ScriptedModel(Proposal("think", 0.8, "model"))
    # A strict gate when much is at stake, a loose one otherwise.
    ctl = HybridController(
        rules, model=model, gate=lambda ctx: 0.9 if ctx.context.get("high_stakes") else 0.3
    )
    partial = Observation.partial({}, source="api", timestamp=NOW)
    assert (await ctl.decide([partial], now=NOW)).action == "patch"
    assert (await ctl.decide([], {"high_stakes": True}, now=NOW)).used_model


async def test_weights_decide_whether_a_failure_matters() -> None:
    observations = [ok("prices"), Observation.failed("HTTP 500", source="ads", timestamp=NOW)]
    equal = HybridController(default_rules(), tolerance=0.2)
    assert (await equal.decide(observations, now=NOW)).action != "maintain"
    weighted = HybridController(default_rules(), tolerance=0.2, weights={"ads": 0.1})
    decision = await weighted.decide(observations, now=NOW)
    assert decision.action == "maintain" and decision.error == pytest.approx(0.1 / 1.1)


async def test_best_rule_is_chosen_by_confidence_then_priority() -> None:
    rules = RuleRegistry()
    rules.on("error", name="low")(lambda c, t: Proposal("a", 0.5, "low"))
    rules.on("error", name="high")(lambda c, t: Proposal("b", 0.8, "high"))
    rules.on("error", name="tie", priority=5)(lambda c, t: Proposal("c", 0.8, "tie, preferred"))
    rules.on("error", name="not_me")(lambda c, t: None)
    ctl = HybridController(rules)
    decision = await ctl.decide([Observation.failed("x", source="s", timestamp=NOW)], now=NOW)
    assert decision.rule == "tie" and decision.action == "c"


async def test_latest_observation_per_source_wins() -> None:
    ctl = HybridController(default_rules())
    ctl.observe(Observation.failed("HTTP 503", source="api", timestamp=NOW - 5))
    ctl.observe(ok("api", at=NOW - 1))
    ctl.observe(Observation.failed("HTTP 503", source="api", timestamp=NOW - 10))  # older: ignored
    assert (await ctl.decide(now=NOW)).action == "maintain"
    vector = ctl.state_vector(now=NOW)
    assert vector.sources["api"].age_s == pytest.approx(1.0)


async def test_decision_log_records_every_decision_with_its_reason() -> None:
    ctl = HybridController(default_rules(), model=ScriptedModel(Proposal("m", 0.5, "model says")))
    await ctl.decide([ok("a")], now=NOW)
    await ctl.decide(
        [Observation.rate_limited(source="a", retry_after_s=2, timestamp=NOW)], now=NOW
    )
    await ctl.decide([ok("a", 0.2)], now=NOW)
    assert [d.action for d in ctl.log] == ["maintain", "back_off", "m"]
    assert [d.used_model for d in ctl.log] == [False, False, True]
    reasons = ctl.log.reasons()
    assert "within tolerance" in reasons[0]
    assert "rule back_off" in reasons[1] and "retry after 2 s" in reasons[1]
    assert "model: model says" in reasons[2]
    lines = [json.loads(line) for line in ctl.log.to_jsonl().splitlines()]
    assert [line["action"] for line in lines] == ["maintain", "back_off", "m"]
    with pytest.raises(ValidationError):  # frozen
        ctl.log.entries[0].action = "other"  # type: ignore[misc]


@given(
    confidences=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=6),
    weights=st.lists(st.floats(0.0, 10.0), min_size=6, max_size=6),
)
def test_weighted_error_lies_in_the_unit_interval(
    confidences: list[float], weights: list[float]
) -> None:
    ctl = HybridController(weights={f"s{i}": w for i, w in enumerate(weights)})
    ctl.observe(*(ok(f"s{i}", c) for i, c in enumerate(confidences)))
    vector = ctl.state_vector(now=NOW)
    error = vector.confidence_error()
    assert 0.0 <= error <= 1.0
    used = weights[: len(confidences)]
    if sum(used) > 0:
        expected = 1 - sum(w * c for w, c in zip(used, confidences, strict=True)) / sum(used)
        assert error == pytest.approx(expected, abs=1e-9)
    else:
        assert error == 1.0


def test_causes_and_keys() -> None:
    obs = Observation.failed("upstream said 503 then 502", source="s", timestamp=NOW)
    assert default_causes(obs) == ("http_503", "http_502", "error")
    assert cause_key(429) == "http_429" and cause_key("custom") == "custom"
    with pytest.raises(ConfigurationError):
        cause_key(42)


def test_registry_rejects_duplicates_and_controller_rejects_bad_settings() -> None:
    rules = RuleRegistry()
    rules.on("error", name="r")(lambda c, t: None)
    with pytest.raises(ConfigurationError):
        rules.on("error", name="r")(lambda c, t: None)
    with pytest.raises(ConfigurationError) as info:
        HybridController(gate=1.5)
    assert info.value.argument == "gate"
    with pytest.raises(ConfigurationError) as info:
        HybridController(weights={"a": -1.0})
    assert info.value.argument == "weights['a']"
    with pytest.raises(ConfigurationError):
        Proposal("", 0.5, "no action")
    with pytest.raises(ConfigurationError):
        Proposal("a", 1.5, "too sure")


async def test_rule_returning_garbage_is_a_programming_error() -> None:
    rules = RuleRegistry()
    rules.on("error", name="bad")(lambda c, t: "switch")  # type: ignore[arg-type,return-value]
    ctl = HybridController(rules)
    with pytest.raises(ConfigurationError):
        await ctl.decide([Observation.failed("x", source="s", timestamp=NOW)], now=NOW)
