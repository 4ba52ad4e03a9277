"""The settings of the control inside the loop, in one value: ``ControlConfig``.

Every gain and threshold (PID, ESO, protocols, the strictness ladder, the confidence gate,
the sampling rules, how a faulty read is asked again), the error metric per step type and
the default actuator schedule. The controllers that read it are in ``_control.py``.
"""

from __future__ import annotations

import os
import time
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .._exceptions import ConfigurationError
from .._validation import (
    require_int_at_least,
    require_non_negative,
    require_unit_interval,
)
from ..control import (
    PID,
    ActuatorSchedule,
    GainPredictor,
    Gains,
    GainTable,
    ProtocolSelector,
    Strictness,
    choose_gains,
    schedule_linear,
    schedule_max_retries,
    schedule_retry_delay_ms,
    schedule_strictness,
)
from ..decision import RuleGate
from ..perception import Observation, ObservationStatus, error_edit_distance
from ._acting import EarlyHandover
from ._health import HealthSettings
from ._reads import ReadRetry
from ._records import ActionCall
from ._sampling import Sampling
from ._state import resolve_path

__all__ = [
    "EMPTY_ERROR",
    "ControlConfig",
    "ErrorMetric",
    "confidence_deficit",
    "default_schedule",
    "edit_distance_metric",
]


class ErrorMetric(typing.Protocol):
    """A step type's error signal: ``(action, observation) -> e`` in [0, 1], 0 is no error.

    Any function of that shape is one; ``action`` is None for a step that called no tool.
    """

    def __call__(self, action: ActionCall | None, observation: Observation, /) -> float: ...


EMPTY_ERROR = 0.5
"""The least error an empty answer counts for: well-formed, but it carried no information."""


def confidence_deficit(action: ActionCall | None, observation: Observation) -> float:
    """``1 − confidence``; an empty answer counts at least :data:`EMPTY_ERROR`.

    An empty result's confidence (0.9) is the trust that there really is no match; for
    the step that asked, it is still a step that learned nothing.
    """
    error = 1.0 - observation.confidence
    if observation.status is ObservationStatus.EMPTY:
        error = max(error, EMPTY_ERROR)
    return min(1.0, max(0.0, error))


def edit_distance_metric(argument: str, value_path: str) -> ErrorMetric:
    """e2: normalised edit distance (Levenshtein 1966) between an argument and the answer.

    ``edit_distance_metric("city", "city")`` compares what was asked for with what came
    back; a missing value or a failed observation is an error of 1.0.
    """

    def metric(action: ActionCall | None, observation: Observation) -> float:
        if action is None or not observation.usable:
            return 1.0
        asked = action.arguments.get(argument)
        found, got = resolve_path(observation.value, value_path)
        if asked is None or not found or got is None:
            return 1.0
        return error_edit_distance(str(asked), str(got))

    metric.__name__ = f"edit_distance({argument}, {value_path})"
    return metric


def default_schedule() -> ActuatorSchedule:
    """The loop's actuator schedule: the strictness ladder loose → re-ask with the
    validator's error from u = 0.3 → strict decoding from u = 0.7; tool timeout
    10 s + 20 s·u; retry delay 100 + 500·u ms; one extra attempt from u = 0.5."""
    return ActuatorSchedule(
        strictness=schedule_strictness(0.7, reask=0.3),
        retry_delay_ms=schedule_retry_delay_ms(),
        timeout_ms=schedule_linear(10_000.0, 20_000.0),
        max_retries=schedule_max_retries(0.5, 0, 1),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ControlConfig:
    """Every gain and threshold of the control inside the loop, in one place.

    PID: ``kp``, ``ki``, ``kd`` (by default 0.8 / 0.05 / 0.3), one update per step
    (``dt = 1``), output in [0, 1]. ``warm_start`` replays the last ``history_window``
    errors of the same step type from the store namespace ``namespace``. ``metrics``
    maps step types (tool names) to their error metric; others use ``default_metric``.
    ESO: ``eso_window``, ``eso_min_samples``, ``setpoint`` (what the task demands, in
    [0, 1]; a task's ``complexity`` overrides it). Protocols: ``protocol_thresholds`` and
    ``hysteresis`` (a level is left only ``hysteresis`` below where it was entered);
    ``protocol_dwell`` selections a level is held before the next change, one level at a
    time (0: jump straight to the level the estimate names); ``protocols=False`` keeps the
    loop at ``normal``. Lyapunov:
    ``lyapunov_patience`` consecutive increases of V end a run across replans.

    Adaptive gains (gain scheduling): ``gains`` is a :class:`~closedloop.control.GainTable`, a
    :class:`~closedloop.control.GainPredictor` or the path of one's JSON; the table answers
    by ``gain_key`` (the domain), the predictor by ``gain_features``. The chosen row
    replaces ``kp``/``ki``/``kd``/``eso_window``/``eso_min_samples``; the given values stay
    in ``fixed_gains`` as the fallback when the source is missing, unreadable, out of range
    or older than ``gain_max_age_s`` (at ``gain_clock()``). ``gain_source`` says which
    row ran and ``gain_warning`` why not the table (the run's first trace record carries
    it). ``prior_f_est`` is a pre-warmed disturbance estimate that holds until the ESO has
    its own (:func:`closedloop.agent.prewarm`).

    The strictness ladder (loose → re-ask with the validator's error → the action grammar):
    ``strictness_prior`` is the least rung a run's first proposal starts on (None: what the
    key's warm start schedules); a model whose last ``loose_window`` loose proposals were
    refused at a rate of at least ``loose_failure_rate`` (at least two of them) is
    constrained from its first call. ``max_reasks`` is how often one step sends a refused
    reply back with the error text at the re-ask rung and above. Under the grammar a final
    answer holds at most ``max_answer_chars`` characters and a string argument without a
    bound of its own ``max_string_chars``. ``end_when_complete`` ends a run with an answer
    built from the required fields as soon as a tool's answer completes them;
    ``completion_predicate(call, observation)`` says the same for tasks without required
    fields (True: the run ends with that observation as its answer). ``end_on_repeat``
    ends a run without required fields when the model proposes again, with the same
    arguments, the call that last ran and succeeded: the run ends with that call's result
    instead of refusing the repeat and asking again (off by default: the repeat is
    refused and the stop policy counts it).

    The confidence gate (rules first, the model past it): with ``rule_gate``, a rule for a
    known cause of a failed read (back off on a 429, retry a 5xx later, widen a timeout,
    refresh a stale answer) whose confidence clears :meth:`RuleGate.threshold` of the
    tool's recent error makes the next call itself, without a model call. None: the rules'
    advice only reaches the model as a note. ``health`` keeps a circuit breaker and a p95
    latency per tool across the agent's runs (:class:`HealthSettings`): no call into a tool
    taken as down, and the tool's timeout from its measured latency. ``read_retry``
    (:class:`ReadRetry`) is how a read that answered with a passing fault is asked again.

    Acting on the estimate: ``early_handover`` (:class:`EarlyHandover`; None, the
    default: never) hands the task over before a tool call when f_est or the tool's open
    breaker says the task cannot finish within the steps and time the run has left.

    Spending only when unsure: ``sampling`` (:class:`Sampling`) names the stop rule that
    ends a vote early, the cascade's threshold and the risk controller that sets it.
    """

    kp: float = 0.8
    ki: float = 0.05
    kd: float = 0.3
    anti_windup: str = "clamp"
    warm_start: bool = True
    history_window: int = 10
    namespace: str = "control"
    schedule: ActuatorSchedule = field(default_factory=default_schedule)
    metrics: Mapping[str, ErrorMetric] = field(default_factory=dict)
    default_metric: ErrorMetric = confidence_deficit
    eso_window: int = 15
    eso_min_samples: int = 5
    setpoint: float = 1.0
    protocol_thresholds: tuple[float, float, float] = (0.4, 0.6, 0.8)
    hysteresis: float = 0.05
    protocol_dwell: int = 2
    protocols: bool = True
    lyapunov_patience: int = 3
    quality_smoothing: float = 0.5
    rigour_prompt: bool = True
    gains: GainTable | GainPredictor | str | os.PathLike[str] | None = None
    gain_key: str | None = None
    gain_features: tuple[float, ...] | None = None
    gain_max_age_s: float | None = None
    gain_clock: Callable[[], float] = time.time
    fixed_gains: Gains | None = None
    prior_f_est: float | None = None
    strictness_prior: Strictness | None = None
    loose_window: int = 5
    loose_failure_rate: float = 0.5
    max_reasks: int = 1
    max_answer_chars: int = 200
    max_string_chars: int = 200
    end_when_complete: bool = True
    completion_predicate: Callable[[ActionCall, Observation], bool] | None = None
    end_on_repeat: bool = False
    rule_gate: RuleGate | None = None
    health: HealthSettings | None = None
    early_handover: EarlyHandover | None = None
    sampling: Sampling = field(default_factory=Sampling)
    read_retry: ReadRetry = field(default_factory=ReadRetry)
    gain_source: str = field(init=False, default="fixed")
    gain_warning: str | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        for name in ("kp", "ki", "kd"):
            require_non_negative(name, getattr(self, name))
        require_int_at_least("history_window", self.history_window, 1)
        require_int_at_least("eso_min_samples", self.eso_min_samples, 1)
        require_int_at_least("eso_window", self.eso_window, self.eso_min_samples)
        require_unit_interval("setpoint", self.setpoint)
        require_unit_interval("hysteresis", self.hysteresis)
        require_int_at_least("lyapunov_patience", self.lyapunov_patience, 1)
        require_unit_interval("quality_smoothing", self.quality_smoothing)
        if not isinstance(self.namespace, str) or not self.namespace:
            raise ConfigurationError("namespace", self.namespace, "must be a non-empty string")
        if not isinstance(self.sampling, Sampling):
            raise ConfigurationError("sampling", self.sampling, "must be a Sampling")
        if not isinstance(self.read_retry, ReadRetry):
            raise ConfigurationError("read_retry", self.read_retry, "must be a ReadRetry")
        if not isinstance(self.schedule, ActuatorSchedule):
            raise ConfigurationError("schedule", self.schedule, "must be an ActuatorSchedule")
        # validates all three
        ProtocolSelector(self.protocol_thresholds, self.hysteresis, min_dwell=self.protocol_dwell)
        if self.strictness_prior is not None:
            try:
                object.__setattr__(self, "strictness_prior", Strictness(self.strictness_prior))
            except ValueError:
                raise ConfigurationError(
                    "strictness_prior",
                    self.strictness_prior,
                    f"must be one of {[s.value for s in Strictness]} or None",
                ) from None
        require_int_at_least("loose_window", self.loose_window, 1)
        require_unit_interval("loose_failure_rate", self.loose_failure_rate)
        require_int_at_least("max_reasks", self.max_reasks, 0)
        require_int_at_least("max_answer_chars", self.max_answer_chars, 1)
        require_int_at_least("max_string_chars", self.max_string_chars, 1)
        if self.completion_predicate is not None and not callable(self.completion_predicate):
            raise ConfigurationError(
                "completion_predicate", self.completion_predicate, "must be callable or None"
            )
        if self.rule_gate is not None and not isinstance(self.rule_gate, RuleGate):
            raise ConfigurationError("rule_gate", self.rule_gate, "must be a RuleGate or None")
        if self.health is not None and not isinstance(self.health, HealthSettings):
            raise ConfigurationError("health", self.health, "must be HealthSettings or None")
        if self.early_handover is not None and not isinstance(self.early_handover, EarlyHandover):
            raise ConfigurationError(
                "early_handover", self.early_handover, "must be an EarlyHandover or None"
            )
        object.__setattr__(self, "metrics", dict(self.metrics))
        if self.prior_f_est is not None:
            require_unit_interval("prior_f_est", self.prior_f_est)
        if self.gain_max_age_s is not None:
            require_non_negative("gain_max_age_s", self.gain_max_age_s)
        if self.gains is not None:
            self._adapt()

    def _adapt(self) -> None:
        fixed = self.fixed_gains
        if fixed is None:
            fixed = Gains(
                kp=self.kp,
                ki=self.ki,
                kd=self.kd,
                eso_window=self.eso_window,
                eso_min_samples=self.eso_min_samples,
            )
            object.__setattr__(self, "fixed_gains", fixed)
        source, warning = self.gains, None
        if isinstance(source, str | os.PathLike):
            source, warning = _read_gains(Path(source))
        choice = choose_gains(
            source if isinstance(source, GainTable | GainPredictor) else None,
            fixed,
            key=self.gain_key,
            features=self.gain_features,
            now=self.gain_clock(),
            max_age_s=self.gain_max_age_s,
        )
        for name, value in choice.gains.as_dict().items():
            object.__setattr__(self, name, value)
        object.__setattr__(self, "gain_source", choice.source)
        object.__setattr__(self, "gain_warning", warning or choice.warning)

    def metric_for(self, step_type: str) -> ErrorMetric:
        """The error metric of ``step_type``: its own from ``metrics``, else the default."""
        return self.metrics.get(step_type, self.default_metric)

    def new_pid(self) -> PID:
        """A fresh PID with this configuration's gains, output in [0, 1]."""
        # The PID regulates quality (1 − e) towards 1, so its error term is e itself and
        # u grows with the error; the derivative acts on the measurement (no kick).
        return PID(
            self.kp,
            self.ki,
            self.kd,
            setpoint=1.0,
            output_limits=(0.0, 1.0),
            anti_windup=self.anti_windup,
            time_fn=lambda: 0.0,
        )


def _read_gains(path: Path) -> tuple[GainTable | GainPredictor | None, str | None]:
    """A gain table or predictor from ``path``, or None and why (never raises)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        return None, f"gain file {path} unreadable ({type(exc).__name__}): fixed gains"
    try:
        if '"gain_predictor"' in text:
            return GainPredictor.from_json(text), None
        return GainTable.from_json(text), None
    except ConfigurationError as exc:
        return None, f"gain file {path} rejected ({exc}): fixed gains"
