"""The keywords ``Agent`` took before its options were grouped, and where each went.

An old keyword still fails as Python fails on any unknown keyword (a ``TypeError``), but
the message says where the option lives now instead of only that it is unexpected.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["MOVED_KEYWORDS", "refuse_moved_keywords"]

_RUNTIME = ("clock", "wall_clock", "sleep", "trace_dir", "store", "trace", "secrets")
_MODEL = ("max_tokens", "temperature", "seed", "tool_calling", "verifier", "dual_temperature")
_CONTEXT = (
    "required_fields",
    "format_answer",
    "observation_chars",
    "keep_observations",
    "context_observations",
    "repeat_window",
)

MOVED_KEYWORDS: Mapping[str, str] = {
    **{name: f"runtime=Runtime({name}=...)" for name in _RUNTIME},
    **{name: f"model_settings=ModelSettings({name}=...)" for name in _MODEL},
    **{name: f"context=ContextSettings({name}=...)" for name in _CONTEXT},
    "max_steps": "limits=RunLimits(max_steps=...)",
    "deadline_s": "limits=RunLimits(deadline_s=...)",
    "stop": "limits=RunLimits(stop=...)",
    "no_progress": "limits=RunLimits(stop=stop_on_no_progress(n))",
    "max_repeats": "limits=RunLimits(stop=stop_on_repeats(n))",
    "read_retry": "control=ControlConfig(read_retry=...)",
    "max_replans": "mode=PlanExecute(max_replans=...)",
    "max_plan_steps": "mode=PlanExecute(max_plan_steps=...)",
    "reviewer": "mode=PlanReview(reviewer=...)",
    "max_sendbacks": "mode=PlanReview(max_sendbacks=...)",
}
"""Each old ``Agent(...)`` keyword and what to write instead (docs/migration.md)."""


def refuse_moved_keywords(given: Mapping[str, object]) -> None:
    """Raise a ``TypeError`` naming the first old keyword in ``given`` and its new place."""
    for name in given:
        if name in MOVED_KEYWORDS:
            raise TypeError(
                f"Agent() got the keyword {name!r}, which has moved: pass "
                f"{MOVED_KEYWORDS[name]} instead (see docs/migration.md)"
            )
