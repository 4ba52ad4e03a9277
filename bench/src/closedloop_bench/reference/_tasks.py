"""Benchmark tasks: what to ask, what a right answer contains, and how to judge one.

A ``ReferenceTask`` is data (pydantic, frozen, JSON-serialisable): the prompt, the JSON schema of
the structured answer, the ground truth computed from the world's data files, the name
of its checker, the tool calls an ideal agent makes and the answer it gives. Judging
needs the run's answer *and* the world after the run: a booking task succeeds only if
exactly one payment reached the world for the right flight.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from closedloop._exceptions import ConfigurationError

if TYPE_CHECKING:
    from closedloop.agent import Task as AgentTask

__all__ = [
    "ANSWER_FIELD",
    "Answer",
    "CheckerVerdict",
    "Domain",
    "ReferenceTask",
    "Split",
    "TrajectoryCall",
    "answer_schema",
]

Domain = Literal["weather", "flight", "meeting", "report"]
Split = Literal["dev", "eval"]
ANSWER_FIELD = "answer"
"""The one required field an agent fills: the structured answer, checked by its schema."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TrajectoryCall(_Frozen):
    """One tool call. An argument ``"$tool.path"`` means: the value at ``path`` in the latest
    answer of ``tool`` (an id the world makes up at run time, such as an order id)."""

    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class Answer(_Frozen):
    """What a run answered: its text, its structured fields, and whether it handed over."""

    text: str = ""
    fields: dict[str, Any] = Field(default_factory=dict)
    handed_over: bool = False

    @classmethod
    def of(cls, value: Any) -> Answer:
        """Read an ``Answer`` from an Answer, a ``RunResult``, a mapping of fields or text.

        From a ``RunResult``: a handover halt counts as handing over; the structured
        answer is the ``answer`` required field (see ``ReferenceTask.agent_task``) or the fields.
        """
        if isinstance(value, Answer):
            return value
        if isinstance(value, str):
            return cls(text=value)
        if isinstance(value, Mapping):
            inner = value.get(ANSWER_FIELD)
            return cls(fields=dict(inner) if isinstance(inner, Mapping) else dict(value))
        halt = getattr(value, "halt_reason", None)
        if halt is not None:
            fields = getattr(value, "fields", None) or {}
            inner = fields.get(ANSWER_FIELD)
            text = getattr(value, "answer", None)
            return cls(
                text=text if isinstance(text, str) else "",
                fields=dict(inner) if isinstance(inner, Mapping) else dict(fields),
                handed_over=str(halt) == "handover",
            )
        raise ConfigurationError(
            "answer", value, "must be an Answer, a RunResult, a mapping of fields or a str"
        )


class CheckerVerdict(_Frozen):
    """A checker's verdict and the sentence that explains it."""

    success: bool
    reason: str

    def __bool__(self) -> bool:
        return self.success


def answer_schema(
    properties: Mapping[str, Mapping[str, Any]], *, descriptions: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The JSON schema of a structured answer with these value fields.

    ``status`` is always required: ``answered`` needs every value field, ``impossible``
    needs a ``reason``. Possible and impossible tasks of one kind share one schema, so
    the schema never gives away which a task is.
    """
    props: dict[str, Any] = {
        "status": {
            "enum": ["answered", "impossible"],
            "description": "answered, or impossible when the task has no answer",
        },
        "reason": {"type": "string", "description": "why the task has no answer"},
    }
    for name, schema in properties.items():
        entry = dict(schema)
        if descriptions and name in descriptions:
            entry["description"] = descriptions[name]
        props[name] = entry
    return {
        "type": "object",
        "properties": props,
        "required": ["status"],
        "allOf": [
            {
                "if": {"properties": {"status": {"const": "answered"}}},
                "then": {"required": list(properties)},
            },
            {
                "if": {"properties": {"status": {"const": "impossible"}}},
                "then": {"required": ["reason"]},
            },
        ],
    }


class ReferenceTask(_Frozen):
    """One generated task with its truth, its checker and its ideal trajectory.

    ``expected_steps`` is the number of tool calls an ideal agent makes (the length of
    ``ideal_trajectory``; the final answer is not a tool call). ``required_fields`` is the
    JSON schema of the structured answer. ``ground_truth`` is computed from the world's
    data; ``checker`` names the predicate in ``CHECKERS`` that judges a run. Prompts say
    "tomorrow" as users do: ``today`` is the world's date they mean (an agent learns it
    from ``WorldTools.today()``), never the host's.
    """

    id: str
    split: Split
    world_seed: int = Field(ge=0)
    domain: Domain
    template: str
    prompt: str = Field(min_length=1)
    language: Literal["zh", "en"]
    today: str = Field(description="the world's date (YYYY-MM-DD) that 今天/明天 refer to")
    expected_steps: int = Field(ge=1, le=10)
    required_fields: dict[str, Any]
    ground_truth: dict[str, Any]
    checker: str
    ideal_trajectory: tuple[TrajectoryCall, ...]
    ideal_answer: Answer
    impossible: bool = False
    tags: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.expected_steps != len(self.ideal_trajectory):
            raise ValueError(
                f"expected_steps={self.expected_steps} but the ideal trajectory has "
                f"{len(self.ideal_trajectory)} calls"
            )
        return self

    @property
    def tools(self) -> tuple[str, ...]:
        """The distinct tools the ideal trajectory uses, in first-use order."""
        return tuple(dict.fromkeys(c.tool for c in self.ideal_trajectory))

    def answer_description(self) -> str:
        """One line describing the structured answer's fields (for prompts and projections)."""
        props = self.required_fields.get("properties", {})
        parts = [
            f"{name}: {spec.get('description', '')}".rstrip(": ") for name, spec in props.items()
        ]
        return "a JSON object with " + "; ".join(parts)

    def agent_task(self, *, task_id: str | None = None) -> AgentTask:
        """This task for ``closedloop.agent``: one required field, ``answer``, validated by
        ``required_fields`` (so "answered" needs every value and "impossible" a reason)."""
        from closedloop.agent import RequiredField
        from closedloop.agent import Task as AgentTask

        return AgentTask(
            prompt=self.prompt,
            task_id=task_id,
            required_fields=(
                RequiredField(
                    name=ANSWER_FIELD,
                    description=self.answer_description(),
                    schema=self.required_fields,
                ),
            ),
        )
