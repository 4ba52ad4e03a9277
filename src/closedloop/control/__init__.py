"""The control kernel: controllers, observers, monitors and schedules.

Pure numerics: every function takes explicit state and ``dt`` (or an injected
``time_fn``); nothing here reads the wall clock, sleeps or does I/O, and nothing here
imports another part of closedloop except the shared argument checks and exceptions.
"""

from __future__ import annotations

# --- plants (lead) ---
from ._plants import FirstOrderPlant, FOPDTPlant, SecondOrderPlant, StepMetrics, step_metrics

# --- pid (helper: pid) ---
# isort: split
from ._incremental_pid import IncrementalPID
from ._pid import PID

# --- observers, monitors, schedules (helper: observers) ---
# isort: split
from ._deficit import DeficitConfig, DeficitObserver
from ._eso import LADRC, LinearESO
from ._han import TrackingDifferentiator, fal, fhan
from ._latency import LatencyTracker
from ._limiters import (
    AIMDConfig,
    AIMDLimiter,
    DelayPIDConfig,
    DelayPIDLimiter,
    GradientConfig,
    GradientLimiter,
    LimiterConfig,
)
from ._lyapunov import LyapunovMonitor, LyapunovVerdict, Trajectory
from ._protocol import Protocol, ProtocolSelector, select_protocol
from ._regression_eso import RegressionESO
from ._schedules import (
    ActuatorSchedule,
    ActuatorSettings,
    FeedbackIntensity,
    ScheduleLevels,
    ScheduleLinear,
    Strictness,
    schedule_context,
    schedule_feedback_intensity,
    schedule_levels,
    schedule_linear,
    schedule_max_retries,
    schedule_retry_delay_ms,
    schedule_rung,
    schedule_strictness,
    schedule_timeout_ms,
    schedule_votes,
)
from ._throttle import ClientThrottle, Cooldown, RetryBudget, RetryBudgetConfig, ThrottleConfig

# --- adaptive gains: gain scheduling by task family ---
# isort: split
from ._gains import (
    DEFAULT_GAIN_KEY,
    GAIN_LIMITS,
    GainChoice,
    GainPredictor,
    Gains,
    GainTable,
    choose_gains,
)
from ._tuning import DEFAULT_LEVELS, TuningResult, tune_gains

# --- spending only when unsure: adaptive votes and a risk controller on the threshold ---
# isort: split
from ._risk import AdaptiveThreshold, ConformalPID
from ._risk_quantile import QuantileThreshold
from ._votes import (
    BetaStop,
    ConfidenceStop,
    FixedVotes,
    StopRule,
    WindowStop,
    beta_superiority,
    plurality,
    top_two,
    weighted_vote,
)

__all__ = [
    "DEFAULT_GAIN_KEY",
    "DEFAULT_LEVELS",
    "GAIN_LIMITS",
    "LADRC",
    "PID",
    "AIMDConfig",
    "AIMDLimiter",
    "ActuatorSchedule",
    "ActuatorSettings",
    "AdaptiveThreshold",
    "BetaStop",
    "ClientThrottle",
    "ConfidenceStop",
    "ConformalPID",
    "Cooldown",
    "DeficitConfig",
    "DeficitObserver",
    "DelayPIDConfig",
    "DelayPIDLimiter",
    "FOPDTPlant",
    "FeedbackIntensity",
    "FirstOrderPlant",
    "FixedVotes",
    "GainChoice",
    "GainPredictor",
    "GainTable",
    "Gains",
    "GradientConfig",
    "GradientLimiter",
    "IncrementalPID",
    "LatencyTracker",
    "LimiterConfig",
    "LinearESO",
    "LyapunovMonitor",
    "LyapunovVerdict",
    "Protocol",
    "ProtocolSelector",
    "QuantileThreshold",
    "RegressionESO",
    "RetryBudget",
    "RetryBudgetConfig",
    "ScheduleLevels",
    "ScheduleLinear",
    "SecondOrderPlant",
    "StepMetrics",
    "StopRule",
    "Strictness",
    "ThrottleConfig",
    "TrackingDifferentiator",
    "Trajectory",
    "TuningResult",
    "WindowStop",
    "beta_superiority",
    "choose_gains",
    "fal",
    "fhan",
    "plurality",
    "schedule_context",
    "schedule_feedback_intensity",
    "schedule_levels",
    "schedule_linear",
    "schedule_max_retries",
    "schedule_retry_delay_ms",
    "schedule_rung",
    "schedule_strictness",
    "schedule_timeout_ms",
    "schedule_votes",
    "select_protocol",
    "step_metrics",
    "top_two",
    "tune_gains",
    "weighted_vote",
]
