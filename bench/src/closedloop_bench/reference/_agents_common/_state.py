"""What the rules read and what they propose: the stored state as facts, moves, the model."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from closedloop.agent import TaskState
from closedloop.execution import AtomicAction, canonical_json, normalise
from closedloop.models import Model, ModelRequest

from ._text import Lang

__all__ = [
    "ASK_HUMAN",
    "ASK_HUMAN_ACTION",
    "Facts",
    "Language",
    "Move",
    "Seen",
    "Turn",
    "ask_human",
    "call",
    "final",
    "impossible",
    "pick",
]

ASK_HUMAN = "ask_human"


class Move(dict[str, Any]):
    """One proposal as the loop reads it: a tool call or a final answer (JSON)."""


# --- moves ---------------------------------------------------------------------------------


def call(tool: str, **arguments: Any) -> Move:
    """A tool call the loop validates and runs."""
    return Move(tool=tool, arguments={k: v for k, v in arguments.items() if v is not None})


def final(text: str, **fields: Any) -> Move:
    """A final answer: the ``answer`` required field (status ``answered``) and its text."""
    return Move(final=text, fields={"answer": {"status": "answered", **fields}})


def impossible(lang: Lang, zh: str, en: str) -> Move:
    """The honest answer to a task without one: status ``impossible`` and the reason."""
    reason = zh if lang == "zh" else en
    text = f"无法完成：{zh}。" if lang == "zh" else f"This cannot be done: {en}."
    return Move(final=text, fields={"answer": {"status": "impossible", "reason": reason}})


# --- reading the state ---------------------------------------------------------------------

_KEY: dict[str, tuple[str, ...]] = {
    "temperature_c": ("temp_c",),
    "price_cny": ("price",),
    "depart_time": ("departure",),
}
_KEY |= {"free_slots": ("slots",), "capacity": ("seats",), "quarter": ("period",)}
_KEY |= {"text": ("content",), "status": ("state", "order_status"), "name_en": ("english_name",)}


def pick(value: Any, name: str) -> Any:
    """``value[name]``, or the name schema drift renamed it to (perception marks those partial)."""
    if not isinstance(value, Mapping):
        return None
    for key in (name, *_KEY.get(name, ())):
        if key in value:
            return value[key]
    return None


def _same_args(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    def norm(x: Mapping[str, Any]) -> str:
        return canonical_json(normalise({k: v for k, v in x.items() if v is not None}))

    return norm(a) == norm(b)


@dataclass(frozen=True, slots=True)
class Seen:
    """One observation the loop recorded, as the rules read it."""

    tool: str
    arguments: Mapping[str, Any]
    status: str
    value: Any
    meaning: str
    error: str | None

    @property
    def ok(self) -> bool:
        """An answer to act on (complete, or degraded by drift or staleness)."""
        return self.status in ("ok", "partial", "stale")

    @property
    def empty(self) -> bool:
        return self.status == "empty"

    @property
    def problem(self) -> dict[str, Any] | None:
        """The world's definite refusal (``{"error": code, ...}``), if this was one."""
        if self.status != "error" or not isinstance(self.value, Mapping):
            return None
        code = self.value.get("error")
        return dict(self.value) if isinstance(code, str) else None

    @property
    def failed(self) -> bool:
        """Neither an answer nor a definite refusal: the call failed even after its retries."""
        return not self.ok and not self.empty and self.problem is None

    def get(self, name: str) -> Any:
        return pick(self.value, name)


class Facts:
    """The task state as the rules read it: the prompt and every recorded observation."""

    def __init__(self, state: TaskState) -> None:
        self.state = state
        self.entries = [
            Seen(
                e.tool,
                e.arguments,
                str(e.observation.get("status", "error")),
                e.observation.get("value"),
                str(e.observation.get("meaning", "")),
                e.observation.get("error"),
            )
            for e in state.observations
        ]

    def seen(self, tool: str, **arguments: Any) -> Seen | None:
        """The latest observation of exactly this call, or None if it was never made."""
        for entry in reversed(self.entries):
            if entry.tool == tool and _same_args(entry.arguments, arguments):
                return entry
        return None

    def all(self, tool: str) -> list[Seen]:
        return [e for e in self.entries if e.tool == tool]

    def skipped(self, tool: str) -> bool:
        """True when dimension reduction skipped ``tool`` last step (a non-core step)."""
        return any(f"{tool} is not a core step" in note for note in self.state.notes)

    def approved(self, about: str) -> Any:
        """What a person approved for a question that mentions ``about`` (None if nothing)."""
        for entry in reversed(self.all(ASK_HUMAN)):
            if entry.ok and about in str(entry.arguments.get("question", "")):
                return entry.arguments.get("suggestion") or True
        return None


# --- the language model behind the gate -----------------------------------------------------


@dataclass(slots=True)
class Turn:
    """One proposal: the facts, the sampling the loop asked for, and the model usage spent."""

    facts: Facts
    temperature: float
    seed: int
    model_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class Language:
    """The language model, asked only past the rules' gate; None means rules alone."""

    def __init__(self, model: Model | None, *, max_tokens: int = 256) -> None:
        self.model = model
        self.max_tokens = max_tokens

    async def ask(
        self,
        turn: Turn,
        system: str,
        user: str,
        schema: Mapping[str, Any],
        *,
        resample: int = 0,
    ) -> dict[str, Any] | None:
        """A JSON answer under ``schema`` (constrained decoding where the model allows), or
        None when there is no model or its answer is unusable. ``resample`` > 0 asks again
        at a higher temperature (a second reading must be free to differ)."""
        if self.model is None:
            return None
        completion = await self.model.complete(
            [{"role": "system", "content": system}, {"role": "user", "content": user}],
            ModelRequest(
                response_schema=schema,
                max_tokens=self.max_tokens,
                temperature=min(1.0, turn.temperature + 0.5 * resample),
                seed=turn.seed + resample,
            ),
        )
        turn.model_calls += 1
        turn.prompt_tokens += completion.usage.prompt_tokens
        turn.completion_tokens += completion.usage.completion_tokens
        parsed = completion.parsed
        return dict(parsed) if isinstance(parsed, Mapping) else None


def ask_human(question: str, suggestion: str = "") -> Move:
    """Hand the task to a person: an action that needs a confirmation freezes the task."""
    return call(ASK_HUMAN, question=question, suggestion=suggestion or None)


async def _asked(question: str, suggestion: str | None = None) -> dict[str, Any]:
    """Ask a person; runs only once they approved it (the answer is then theirs)."""
    return {"approved": True, "question": question, "suggestion": suggestion}


ASK_HUMAN_ACTION = AtomicAction(
    name=ASK_HUMAN, fn=_asked, requires_confirmation=True, description=_asked.__doc__ or ""
)
