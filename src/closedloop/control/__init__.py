"""The control kernel: controllers, observers, monitors and schedules.

Pure numerics: every function takes explicit state and ``dt`` (or an injected
``time_fn``); nothing here reads the wall clock, sleeps or does I/O, and nothing here
imports another part of closedloop except the shared argument checks and exceptions.
"""

from __future__ import annotations

# --- plants (lead) ---
from ._plants import FirstOrderPlant, FOPDTPlant, SecondOrderPlant, StepMetrics, step_metrics

# --- pid (helper: pid) ---

# --- observers, monitors, schedules (helper: observers) ---

__all__ = [
    "FOPDTPlant",
    "FirstOrderPlant",
    "SecondOrderPlant",
    "StepMetrics",
    "step_metrics",
]
