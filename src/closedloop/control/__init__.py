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
from ._eso import LADRC, LinearESO
from ._han import TrackingDifferentiator, fal, fhan
from ._latency import LatencyTracker
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
    schedule_feedback_intensity,
    schedule_levels,
    schedule_linear,
    schedule_max_retries,
    schedule_retry_delay_ms,
    schedule_strictness,
    schedule_timeout_ms,
)

__all__ = [
    "LADRC",
    "PID",
    "ActuatorSchedule",
    "ActuatorSettings",
    "FOPDTPlant",
    "FeedbackIntensity",
    "FirstOrderPlant",
    "IncrementalPID",
    "LatencyTracker",
    "LinearESO",
    "LyapunovMonitor",
    "LyapunovVerdict",
    "Protocol",
    "ProtocolSelector",
    "RegressionESO",
    "ScheduleLevels",
    "ScheduleLinear",
    "SecondOrderPlant",
    "StepMetrics",
    "Strictness",
    "TrackingDifferentiator",
    "Trajectory",
    "fal",
    "fhan",
    "schedule_feedback_intensity",
    "schedule_levels",
    "schedule_linear",
    "schedule_max_retries",
    "schedule_retry_delay_ms",
    "schedule_strictness",
    "schedule_timeout_ms",
    "select_protocol",
    "step_metrics",
]
