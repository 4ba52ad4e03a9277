"""What crosses one model call: the chat messages going in and the ``Completion`` coming out.

These values sit below everything else in ``closedloop.models``: the protocol, the usage
meter and every adapter read them, and they import nothing from the rest of the package.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .._exceptions import ConfigurationError
from ._confidence import Confidence, TokenLogprob

__all__ = [
    "Completion",
    "Message",
    "MessagesInput",
    "ToolCall",
    "Usage",
    "normalize_messages",
]

Role = Literal["system", "user", "assistant", "tool"]
_FROZEN = ConfigDict(frozen=True, extra="forbid")


class Message(BaseModel):
    """One chat message. Plain ``{"role": ..., "content": ...}`` dicts are accepted too."""

    model_config = _FROZEN
    role: Role
    content: str
    name: str | None = None
    tool_call_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The OpenAI-style dict, without unset optional keys."""
        return self.model_dump(exclude_none=True)


MessagesInput = str | Sequence[Message | Mapping[str, Any]]
"""A list of messages, or one string taken as a single user message."""


class Usage(BaseModel):
    """Tokens one call consumed."""

    model_config = _FROZEN
    prompt_tokens: int = Field(default=0, ge=0)
    completion_tokens: int = Field(default=0, ge=0)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class ToolCall(BaseModel):
    """A native tool call proposed by the model; ``arguments`` is the raw JSON text."""

    model_config = _FROZEN
    id: str
    name: str
    arguments: str


class Completion(BaseModel):
    """One model answer.

    ``parsed`` holds the JSON value when a ``response_schema`` was given and the text parsed
    and validated; otherwise it is None and ``parse_error`` says why (when a schema was
    given). ``cost_usd`` is None for a model whose price is unknown. ``logprobs`` holds the
    generated tokens' log-probabilities when the request asked for them and the backend
    gives them; ``confidence`` their decision-token summaries (``_confidence.py``).
    """

    model_config = _FROZEN
    text: str
    parsed: Any = None
    parse_error: str | None = None
    usage: Usage = Usage()
    latency_s: float = Field(default=0.0, ge=0.0)
    model: str
    finish_reason: str = "stop"
    call_id: str
    tool_calls: tuple[ToolCall, ...] = ()
    cost_usd: float | None = 0.0
    logprobs: tuple[TokenLogprob, ...] = ()
    confidence: Confidence | None = None


def normalize_messages(messages: MessagesInput) -> tuple[Message, ...]:
    """Check and convert messages; a bad one raises ``ConfigurationError`` naming its index."""
    if isinstance(messages, str):
        return (Message(role="user", content=messages),)
    if isinstance(messages, Mapping | bytes) or not isinstance(messages, Sequence):
        raise ConfigurationError("messages", messages, "must be a list of messages or a string")
    if not messages:
        raise ConfigurationError("messages", messages, "must not be empty")
    out: list[Message] = []
    for index, item in enumerate(messages):
        if isinstance(item, Message):
            out.append(item)
            continue
        if not isinstance(item, Mapping):
            raise ConfigurationError(
                f"messages[{index}]", item, "must be a Message or a {'role', 'content'} dict"
            )
        try:
            out.append(Message.model_validate(dict(item)))
        except ValidationError as exc:
            reason = "; ".join(
                f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
            )
            raise ConfigurationError(f"messages[{index}]", item, reason) from None
    return tuple(out)
