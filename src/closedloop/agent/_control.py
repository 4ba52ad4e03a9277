"""Control inside the loop: PID per step type (Åström & Hägglund), ESO per task (Han 2009).

Per step type, a PID on that step's error e ∈ [0, 1], warm-started from the recent errors
of the same key kept in the store, so the first call of a known step type does not start
cold. Its output u drives the actuators through an ``ActuatorSchedule``. Per task, a
``RegressionESO`` on (control effort, setpoint, step quality) estimates the total
disturbance f_est, a ``ProtocolSelector`` with hysteresis turns it into a defence
protocol, and two ``LyapunovMonitor``s watch task quality across steps and across replans.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._validation import (
    require_unit_interval,
)
from ..control import (
    PID,
    ActuatorSettings,
    FeedbackIntensity,
    LyapunovMonitor,
    LyapunovVerdict,
    Protocol,
    ProtocolSelector,
    RegressionESO,
    Strictness,
)
from ..feedback import StateStore
from ..feedback._json import checked_document
from ._control_config import ControlConfig

__all__ = [
    "ControllerBank",
    "TaskControl",
    "rigour_instruction",
]


def _output(pid: PID) -> float:
    p, i, d = pid.components
    return min(1.0, max(0.0, p + i + d))


class ControllerBank:
    """One PID per step type, warm-started from and persisted to the store.

    The per-key record holds the last ``history_window`` errors; a key seen for the first
    time in this process is rebuilt by replaying them, so its first output is the one the
    history earned, not zero.
    """

    def __init__(self, config: ControlConfig, store: StateStore) -> None:
        self.config = config
        self.store = store
        self._pids: dict[str, PID] = {}
        self._history: dict[str, list[float]] = {}
        self.warm: dict[str, int] = {}

    async def ensure(self, key: str) -> PID:
        pid = self._pids.get(key)
        if pid is not None:
            return pid
        pid = self.config.new_pid()
        history: list[float] = []
        if self.config.warm_start:
            record = await self.store.record_get(self.config.namespace, key)
            if record is not None:
                raw = record.value.get("errors", ())
                if isinstance(raw, list | tuple):
                    history = [
                        min(1.0, max(0.0, float(e)))
                        for e in raw
                        if isinstance(e, int | float) and not isinstance(e, bool)
                    ]
        history = history[-self.config.history_window :]
        for error in history:
            pid(1.0 - error, dt=1.0)
        self._pids[key] = pid
        self._history[key] = history
        self.warm[key] = len(history)
        return pid

    async def output(self, key: str) -> float:
        """The current control signal of ``key`` (its warm start before any update)."""
        return _output(await self.ensure(key))

    async def settings(self, key: str) -> ActuatorSettings:
        return self.config.schedule(await self.output(key))

    async def update(self, key: str, error: float) -> tuple[float, tuple[float, float, float]]:
        """Feed one step's error; returns the new u and the PID's (P, I, D) terms."""
        u, components, _ = await self.feed(key, error)
        return u, components

    async def feed(self, key: str, error: float) -> tuple[float, tuple[float, float, float], float]:
        """:meth:`update`, plus the output the next step acts on (what :meth:`output`
        answers from now on), so a caller can pass it forward instead of asking again."""
        pid = await self.ensure(key)
        e = min(1.0, max(0.0, float(error)))
        u = pid(1.0 - e, dt=1.0)
        history = self._history[key]
        history.append(e)
        del history[: -self.config.history_window]
        # A fresh dict: checked and encoded once, not copied again by the store.
        value = checked_document({"errors": list(history)}, "value")
        await self.store.record_put(self.config.namespace, key, value)
        return u, pid.components, _output(pid)


@dataclass(frozen=True, slots=True)
class ControlReading:
    """What the task-level control concluded after one step."""

    f_est: float
    protocol: Protocol
    quality: float
    task_quality: float
    verdict: LyapunovVerdict


class TaskControl:
    """The per-task observer chain: ESO → protocol selector, and the Lyapunov monitors."""

    def __init__(self, config: ControlConfig, setpoint: float) -> None:
        self.config = config
        self.setpoint = require_unit_interval("setpoint", setpoint)
        self.eso = RegressionESO(window=config.eso_window, min_samples=config.eso_min_samples)
        self.selector = ProtocolSelector(
            config.protocol_thresholds, config.hysteresis, min_dwell=config.protocol_dwell
        )
        self.steps = LyapunovMonitor(1.0, config.lyapunov_patience)
        self.replans = LyapunovMonitor(1.0, config.lyapunov_patience)
        self.quality_ema: float | None = None
        self._f_history: list[float] = []
        self._step_scores: list[float] = []
        self._replan_scores: list[float] = []
        self._prior_live = config.prior_f_est is not None
        if config.prior_f_est is not None:  # pre-warmed: the first step runs under it
            self.selector.start(config.prior_f_est)

    @property
    def protocol(self) -> Protocol:
        return self.selector.protocol if self.config.protocols else Protocol.NORMAL

    def _with_prior(self, f_est: float) -> float:
        # Until the ESO has its own estimate, a pre-warmed prior stands in for it.
        prior = self.config.prior_f_est
        if prior is None or not self._prior_live or self.eso.coefficients is not None:
            return f_est
        return max(f_est, prior)

    @property
    def f_est(self) -> float:
        return self._with_prior(self.eso.f_est)

    def observe(self, control: float, quality: float, completion: float | None) -> ControlReading:
        """One step: update the ESO, the protocol and the step monitor."""
        q = min(1.0, max(0.0, quality))
        f_est = self._with_prior(self.eso.update(control, self.setpoint, q))
        self._f_history.append(f_est)
        del self._f_history[:-64]
        protocol = self.selector.select(f_est) if self.config.protocols else Protocol.NORMAL
        alpha = self.config.quality_smoothing
        self.quality_ema = (
            q if self.quality_ema is None else alpha * q + (1 - alpha) * self.quality_ema
        )
        task_quality = self.task_quality(completion)
        verdict = self.steps.observe(task_quality)
        self._step_scores.append(task_quality)
        return ControlReading(f_est, protocol, q, task_quality, verdict)

    def task_quality(self, completion: float | None) -> float:
        """Task quality: the share of required fields complete, blended with step quality."""
        ema = 0.0 if self.quality_ema is None else self.quality_ema
        return ema if completion is None else 0.5 * completion + 0.5 * ema

    def observe_replan(self, completion: float | None) -> LyapunovVerdict:
        score = self.task_quality(completion)
        self._replan_scores.append(score)
        return self.replans.observe(score)

    def reset_protocol(self) -> None:
        """After a human decision: the disturbance was absorbed; estimate afresh."""
        self._prior_live = False
        self.eso.reset()
        self.selector.reset()
        self._f_history.clear()

    def state(self) -> dict[str, Any]:
        return {
            "eso": self.eso.state(),
            "f_history": list(self._f_history),
            "quality_ema": self.quality_ema,
            "step_scores": list(self._step_scores[-64:]),
            "replan_scores": list(self._replan_scores[-64:]),
        }

    @classmethod
    def from_state(
        cls, config: ControlConfig, setpoint: float, state: Mapping[str, Any]
    ) -> TaskControl:
        ctl = cls(config, setpoint)
        if not state:
            return ctl
        ctl.eso = RegressionESO.from_state(state["eso"])
        for f in state.get("f_history", ()):
            ctl.selector.select(float(f))
            ctl._f_history.append(float(f))
        ema = state.get("quality_ema")
        ctl.quality_ema = None if ema is None else float(ema)
        for s in state.get("step_scores", ()):
            ctl.steps.observe(float(s))
            ctl._step_scores.append(float(s))
        for s in state.get("replan_scores", ()):
            ctl.replans.observe(float(s))
            ctl._replan_scores.append(float(s))
        return ctl

    def snapshot(self) -> dict[str, Any]:
        """Everything the task-level control knows, as JSON for the task state.

        :meth:`state` plus the selector's exact level, so a task that continues in another
        process (:meth:`restore`) keeps its protocol even past the replayed history.
        """
        return {**self.state(), "selector": self.selector.state()}

    def restore(self, snapshot: Mapping[str, Any]) -> None:
        """Take over a :meth:`snapshot` (or a :meth:`state`) in place; empty leaves all as is."""
        if not snapshot:
            return
        other = TaskControl.from_state(self.config, self.setpoint, snapshot)
        selector = snapshot.get("selector")
        if isinstance(selector, Mapping):
            # A snapshot from before the dwell was a setting holds none: this config's applies.
            other.selector = ProtocolSelector.from_state(
                {"min_dwell": self.config.protocol_dwell, **selector}
            )
        self.eso, self.selector = other.eso, other.selector
        self.steps, self.replans = other.steps, other.replans
        self.quality_ema = other.quality_ema
        self._f_history = other._f_history
        self._step_scores = other._step_scores
        self._replan_scores = other._replan_scores


_RIGOUR = {
    FeedbackIntensity.LIGHT: "Act directly and follow the response format.",
    FeedbackIntensity.MEDIUM: (
        "Recent steps had errors: check every argument against the tool's schema "
        "and against the observations before you answer; copy values exactly."
    ),
    FeedbackIntensity.HEAVY: (
        "Recent steps failed repeatedly: use only values that appear in the task or "
        "in the observations, never guess; an empty observation means 'no match', not 'no "
        "constraint'. Read the loop's notes for why the last reply was refused, fix exactly "
        "that, and take the next step the task needs."
    ),
}


def rigour_instruction(settings: ActuatorSettings) -> str:
    """The prompt-injection actuator: the current rigour stated as text for the system prompt."""
    level = settings.feedback_intensity
    text = f"Current rigour: {settings.u:.2f} ({level.value}). {_RIGOUR[level]}"
    if settings.strictness is Strictness.STRICT:
        text += " Reply with exactly one JSON object that matches the schema, and nothing else."
    return text
