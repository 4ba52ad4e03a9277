"""Strategies replayed from a sample bank: the decision each would make, and what it cost.

A bank holds, per task and model, k samples of the constrained single call drawn in order
(the first greedy, the rest at a temperature), each with its parsed call's key, its
decision-token log-probabilities and its cost. A strategy whose decisions depend only on
those samples is replayed exactly: it sees the samples in draw order, stops where it would
have stopped, and is charged the seconds, tokens and model calls of the samples it drew.
Its success is the *current* checker's verdict on the call it chose (each sample is
re-scored on loading, so a corrected checker needs no new samples).

The strategies:

- :class:`Votes`: the plurality of the first k samples (self-consistency, Wang et al.
  2023); k = 1 is the constrained single call. ``weighted=True`` weighs each vote by its
  sample's confidence (confidence-weighted self-consistency, Taubenfeld et al. 2025);
- :class:`AdaptiveVotes`: samples drawn until a stop rule says the vote is settled (a Beta
  posterior on the top two counts, Aggarwal et al. 2023; a window that agrees, Li et al.
  2024; one confident sample);
- :class:`ConfidentSingle`: the first sample when its confidence reaches a threshold, a
  vote of more samples otherwise;
- :class:`Cascade`: the weak model first; escalate to the strong one, before anything
  executes, when the weak model's signal is below a threshold (the consistency cascade of
  Yue et al. 2024); its cost is both rungs' samples;
- :class:`Abstaining`: another strategy, except that a first sample whose confidence is
  below a floor gets an answer with no call (selective prediction: abstain rather than
  act when unsure, Geifman and El-Yaniv 2017), judged by the checker like any answer.

The confidence of a sample is ``exp(logprob_low)``, the low quantile of its decision-token
log-probabilities (Gupta et al. 2024 found token quantiles beat sequence probability);
``sensor="agreement"`` uses instead the share of the samples drawn so far that make the
same call.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from closedloop import ConfigurationError
from closedloop.control import StopRule as AgentStopRule
from closedloop.control import plurality, weighted_vote

from ._format import ToolTask
from ._score import Call, score

__all__ = [
    "ABSTAIN_ANSWER",
    "Abstaining",
    "AdaptiveVotes",
    "Cascade",
    "ConfidentSingle",
    "Outcome",
    "Record",
    "Sample",
    "StopRule",
    "Votes",
    "records_from_bank",
    "winner",
]

Sensor = Literal["p_low", "agreement"]


@dataclass(frozen=True, slots=True)
class Sample:
    """One recorded model call: its call's key (None when the reply did not parse), the
    re-scored verdict, its confidences as probabilities and its cost."""

    index: int
    key: str | None
    ok: bool
    p_low: float | None
    p_min: float | None
    p_mean: float | None
    tokens: int
    seconds: float


@dataclass(frozen=True, slots=True)
class Record:
    """One task on one model: its samples in draw order."""

    task_id: str
    family: str
    model: str
    samples: tuple[Sample, ...]
    abstain_ok: bool = False  # the checker's verdict on an answer with no call


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a strategy did on one task. ``success`` is an accepted right call (an
    abstention, ``accepted=False``, is never a success); cost is what it drew."""

    task_id: str
    family: str
    success: bool
    accepted: bool
    seconds: float
    tokens: int
    calls: int
    escalated: bool = False


class StopRule(Protocol):
    """When an adaptive vote may stop, from the keys (and confidences) drawn so far."""

    def should_stop(
        self, keys: Sequence[str | None], confidences: Sequence[float | None] | None = None
    ) -> bool: ...


class Strategy(Protocol):
    """A replayable strategy: ``rungs`` models (1, or 2 for weak then strong)."""

    @property
    def name(self) -> str: ...

    @property
    def rungs(self) -> int: ...

    def replay(self, records: Sequence[Record]) -> Outcome: ...


def _prob(value: Any) -> float | None:
    return None if value is None else math.exp(float(value))


def _verdict(task: ToolTask, sample: Mapping[str, Any]) -> bool:
    if sample.get("error") is not None or sample.get("key") is None:
        return False
    calls = [Call(c["name"], dict(c.get("arguments") or {})) for c in sample.get("calls", [])]
    return score(task, calls, str(sample.get("answer") or "")).success


ABSTAIN_ANSWER = "None of the offered tools fits this request, so I make no call."
"""The answer an abstaining strategy gives in place of a call."""


def records_from_bank(
    header: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], tasks: Mapping[str, ToolTask]
) -> list[Record]:
    """The bank's task lines as records, every sample re-scored against ``tasks`` (by id)."""
    model = str(header.get("model", "?"))
    out: list[Record] = []
    for row in rows:
        task = tasks.get(str(row.get("task_id")))
        if task is None:
            raise ConfigurationError(
                "bank", row.get("task_id"), f"model {model}: no such task in the task file"
            )
        samples = sorted(row["samples"], key=lambda s: int(s["index"]))
        out.append(
            Record(
                task.id,
                task.family,
                model,
                tuple(
                    Sample(
                        index=int(s["index"]),
                        key=s.get("key"),
                        ok=_verdict(task, s),
                        p_low=_prob(s.get("logprob_low")),
                        p_min=_prob(s.get("logprob_min")),
                        p_mean=_prob(s.get("logprob_mean")),
                        tokens=int(s.get("prompt_tokens", 0)) + int(s.get("completion_tokens", 0)),
                        seconds=float(s.get("seconds", 0.0)),
                    )
                    for s in samples
                ),
                abstain_ok=score(task, [], ABSTAIN_ANSWER).success,
            )
        )
    return out


def winner(keys: Sequence[str | None], weights: Sequence[float] | None = None) -> tuple[int, float]:
    """The index of the first sample of the winning key and the winner's share, as the
    live vote decides: the plurality's share is of all samples drawn (unparsed ones count
    against every call), the weighted vote's of all the weight; a weighted vote with no
    weight on any parsed sample falls back to the plurality. ``(0, 0.0)`` when no sample
    parsed (the first, unparsed, is the answer: a failure)."""
    if weights is not None:
        key, share = weighted_vote(keys, weights)
    else:
        key, share = plurality(keys)
    return (0 if key is None else list(keys).index(key)), share


def _confidence(sample: Sample) -> float:
    # An unread confidence is no confidence: it never clears a threshold.
    return 0.0 if sample.p_low is None else sample.p_low


def _need(record: Record, k: int, name: str) -> None:
    if len(record.samples) < k:
        raise ConfigurationError(
            "bank",
            record.task_id,
            f"{name} needs {k} samples, {record.model} has {len(record.samples)}",
        )


def _outcome(
    record: Record, chosen: int, drawn: int, *, escalated: bool = False, extra: int = 0
) -> Outcome:
    taken = record.samples[:drawn]
    return Outcome(
        record.task_id,
        record.family,
        success=record.samples[chosen].ok,
        accepted=True,
        seconds=sum(s.seconds for s in taken),
        tokens=sum(s.tokens for s in taken),
        calls=drawn + extra,
        escalated=escalated,
    )


def _vote(record: Record, k: int, weighted: bool) -> tuple[int, float]:
    samples = record.samples[:k]
    weights = [_confidence(s) for s in samples] if weighted else None
    return winner([s.key for s in samples], weights)


def _count(name: str, value: int, most: int = 1000) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise ConfigurationError(name, value, f"must be a whole number in [1, {most}]")
    return value


def _unit(name: str, value: float) -> float:
    if not 0.0 <= value <= 1.0:
        raise ConfigurationError(name, value, "must lie in [0, 1]")
    return value


@dataclass(frozen=True, slots=True)
class Votes:
    """The plurality (or confidence-weighted vote) of the first ``k`` samples."""

    k: int = 1
    weighted: bool = False
    rungs: int = 1

    def __post_init__(self) -> None:
        _count("k", self.k)

    @property
    def name(self) -> str:
        if self.k == 1:
            return "single"
        return f"{'weighted' if self.weighted else 'votes'}@{self.k}"

    def replay(self, records: Sequence[Record]) -> Outcome:
        record = records[-1]
        _need(record, self.k, self.name)
        chosen, _ = _vote(record, self.k, self.weighted)
        return _outcome(record, chosen, self.k)


@dataclass(frozen=True, slots=True)
class AdaptiveVotes:
    """Samples drawn one at a time until ``rule`` stops (at most ``max_k``), then a vote."""

    rule: StopRule
    label: str
    max_k: int = 5
    weighted: bool = False
    rungs: int = 1

    def __post_init__(self) -> None:
        _count("max_k", self.max_k)

    @classmethod
    def as_agent(cls, rule: AgentStopRule, label: str) -> AdaptiveVotes:
        """The agent's own draw: samples until ``rule`` stops (at most its
        ``max_samples``), then a vote weighted by each sample's confidence, as the agent
        weighs them."""
        return cls(rule, label, max_k=rule.max_samples, weighted=True)

    @property
    def name(self) -> str:
        return f"adaptive[{self.label}]"

    def drawn(self, record: Record) -> int:
        """How many samples the rule draws on ``record``."""
        keys = [s.key for s in record.samples]
        confs: list[float | None] = [s.p_low for s in record.samples]
        n = 1
        while n < self.max_k and not self.rule.should_stop(keys[:n], confs[:n]):
            n += 1
        return n

    def replay(self, records: Sequence[Record]) -> Outcome:
        record = records[-1]
        _need(record, self.max_k, self.name)
        n = self.drawn(record)
        chosen, _ = _vote(record, n, self.weighted)
        return _outcome(record, chosen, n)


@dataclass(frozen=True, slots=True)
class ConfidentSingle:
    """The first sample when its confidence is at least ``tau``; else a vote of the first
    ``fallback_k`` samples (the first among them)."""

    tau: float
    fallback_k: int = 3
    rungs: int = 1

    def __post_init__(self) -> None:
        _unit("tau", self.tau)
        _count("fallback_k", self.fallback_k)

    @property
    def name(self) -> str:
        return f"confident[{self.tau:g}]@{self.fallback_k}"

    def replay(self, records: Sequence[Record]) -> Outcome:
        record = records[-1]
        _need(record, self.fallback_k, self.name)
        if _confidence(record.samples[0]) >= self.tau:
            return _outcome(record, 0, 1)
        chosen, _ = _vote(record, self.fallback_k, False)
        return _outcome(record, chosen, self.fallback_k)


@dataclass(frozen=True, slots=True)
class Cascade:
    """The weak model's vote of ``weak_k`` samples, accepted when its signal is at least
    ``tau``; otherwise the strong model's vote of ``strong_k`` (escalated before any call
    runs). The signal is the weak first sample's ``p_low`` or the weak vote's top share."""

    tau: float
    sensor: Sensor = "p_low"
    weak_k: int = 1
    strong_k: int = 1
    rungs: int = 2

    def __post_init__(self) -> None:
        _unit("tau", self.tau)
        _count("weak_k", self.weak_k)
        _count("strong_k", self.strong_k)
        if self.sensor not in ("p_low", "agreement"):
            raise ConfigurationError("sensor", self.sensor, "must be p_low or agreement")

    @property
    def name(self) -> str:
        return f"cascade[{self.sensor}≥{self.tau:g}] {self.weak_k}→{self.strong_k}"

    def replay(self, records: Sequence[Record]) -> Outcome:
        if len(records) != 2:
            raise ConfigurationError("records", len(records), "a cascade needs weak and strong")
        weak, strong = records
        _need(weak, self.weak_k, self.name)
        _need(strong, self.strong_k, self.name)
        chosen, share = _vote(weak, self.weak_k, False)
        signal = share if self.sensor == "agreement" else _confidence(weak.samples[0])
        if signal >= self.tau:
            return _outcome(weak, chosen, self.weak_k)
        first = _outcome(weak, chosen, self.weak_k)
        strong_chosen, _ = _vote(strong, self.strong_k, False)
        second = _outcome(strong, strong_chosen, self.strong_k)
        return Outcome(
            strong.task_id,
            strong.family,
            success=second.success,
            accepted=True,
            seconds=first.seconds + second.seconds,
            tokens=first.tokens + second.tokens,
            calls=first.calls + second.calls,
            escalated=True,
        )


@dataclass(frozen=True, slots=True)
class Abstaining:
    """``inner``, except that when the first sample's confidence is below ``below`` the
    task gets an answer with no call (:data:`ABSTAIN_ANSWER`), decided on that one
    sample before any more are drawn. The checker judges the answer as it would a
    model's: right where no offered tool fits, wrong where one does."""

    inner: Votes | AdaptiveVotes | ConfidentSingle
    below: float
    rungs: int = 1

    def __post_init__(self) -> None:
        _unit("below", self.below)

    @property
    def name(self) -> str:
        return f"{self.inner.name}+abstain<{self.below:g}"

    def replay(self, records: Sequence[Record]) -> Outcome:
        record = records[-1]
        first = record.samples[0]
        if _confidence(first) >= self.below:
            return self.inner.replay(records)
        return Outcome(
            record.task_id,
            record.family,
            success=record.abstain_ok,
            accepted=True,
            seconds=first.seconds,
            tokens=first.tokens,
            calls=1,
        )
