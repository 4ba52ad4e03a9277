"""Request bodies of the HTTP API (pydantic v2, strict about unknown fields)."""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

__all__ = ["DecisionBody", "EditBody", "RunCreate", "RunFeedback", "SessionCreate"]

_Scalar = str | int | float | bool | None
_Text = Annotated[str, StringConstraints(max_length=2000)]


def _strict_json(value: Any) -> Any:
    # Python's JSON reader takes NaN and Infinity; the store (and every JSON client) does not.
    try:
        json.dumps(value, allow_nan=False)
    except ValueError:
        raise ValueError("must hold only finite numbers (no NaN or Infinity)") from None
    return value


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SessionCreate(_Body):
    """``POST /v1/sessions``: optional labels and a lifetime."""

    metadata: dict[Annotated[str, StringConstraints(max_length=64)], _Scalar] = Field(
        default_factory=dict, max_length=32, description="labels of your own (scalars)"
    )
    ttl_s: float | None = Field(
        default=None, gt=0, le=30 * 86_400, description="seconds until the session expires"
    )

    @field_validator("metadata")
    @classmethod
    def _finite(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _strict_json(value)  # type: ignore[no-any-return]


class SessionUpdate(_Body):
    """``PATCH /v1/sessions/{id}``: labels to set (merged into the session's metadata)."""

    metadata: dict[Annotated[str, StringConstraints(max_length=64)], _Scalar] = Field(
        default_factory=dict, max_length=32, description="labels to set or replace (scalars)"
    )

    @field_validator("metadata")
    @classmethod
    def _finite(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _strict_json(value)  # type: ignore[no-any-return]


class RunFeedback(_Body):
    """``POST /v1/sessions/{id}/runs/{run_id}/feedback``: whether the run's answer was right."""

    ok: bool = Field(description="true: the run's answer was right; false: it was wrong")


class RunCreate(_Body):
    """``POST /v1/sessions/{id}/runs``: which agent, the task, and the agent's params."""

    agent: Annotated[str, StringConstraints(min_length=1, max_length=64)]
    task: Annotated[str, StringConstraints(min_length=1, max_length=20_000, strip_whitespace=True)]
    params: dict[str, Any] = Field(
        default_factory=dict, description="JSON passed to the agent's factory as ctx.params"
    )

    @field_validator("params")
    @classmethod
    def _finite(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _strict_json(value)  # type: ignore[no-any-return]


class DecisionBody(_Body):
    """``POST /v1/handovers/{id}/approve`` or ``/reject``: an optional note."""

    note: _Text = ""


class ChoiceBody(_Body):
    """``POST /v1/handovers/{id}/choose``: the choice on a pending effect, a note, and for
    ``mark_applied`` the result the effect had in the world (if known)."""

    choice: Annotated[str, StringConstraints(max_length=64)]
    note: _Text = ""
    result: Any = None


class EditBody(_Body):
    """``POST /v1/handovers/{id}/edit``: the changes, then the task resumes.

    ``arguments`` patches the frozen tool call, ``fields`` sets required fields, ``note``
    is shown to the model; other keys replace task-state fields.
    """

    edits: dict[str, Any] = Field(min_length=1)
    note: _Text = ""

    @field_validator("edits")
    @classmethod
    def _finite(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _strict_json(value)  # type: ignore[no-any-return]
