"""The one model protocol: messages in, a ``Completion`` out; and the base every adapter shares.

``ModelBase.complete`` owns everything that must not differ between adapters: argument
checks, the real-call guard, call ids, latency measurement, JSON parsing and schema
validation of the answer, and usage accounting. An adapter implements ``_complete`` only.

A reply that does not parse or does not match the schema is not an exception here: the
``Completion`` carries ``parsed=None`` and a ``parse_error`` so perception can score it
(format drift is a disturbance of the world, not a broken contract).
"""

from __future__ import annotations

import abc
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .._exceptions import ConfigurationError
from .._validation import require_finite, require_int_at_least, require_positive
from ._guard import check_real_model_call
from ._json import check_schema, parse_structured
from ._usage import Price, UsageMeter, current_usage_meter

__all__ = [
    "CallInfo",
    "Completion",
    "Message",
    "MessagesInput",
    "Model",
    "ModelBase",
    "RawCompletion",
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
    given). ``cost_usd`` is None for a model whose price is unknown.
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


@dataclass(frozen=True, slots=True)
class CallInfo:
    """One call's checked arguments, as an adapter (or a ``FunctionModel`` fn) sees them."""

    call_id: str
    model: str
    messages: tuple[Message, ...]
    response_schema: Mapping[str, Any] | None = None
    max_tokens: int = 256
    temperature: float = 0.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    timeout: float | None = None
    tools: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class RawCompletion:
    """What an adapter returns; ``ModelBase`` turns it into a ``Completion``.

    ``lenient_json`` lets the parser dig JSON out of prose or code fences: used only where
    the server could not be asked for JSON-constrained output.
    """

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = "stop"
    model: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    lenient_json: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class Model(Protocol):
    """Anything that completes chat messages: real adapters, test models, wrappers."""

    @property
    def name(self) -> str:
        """A readable model name (the spec for adapters built by ``load_model``)."""
        ...

    async def complete(
        self,
        messages: MessagesInput,
        *,
        response_schema: Mapping[str, Any] | None = None,
        max_tokens: int = 256,
        temperature: float = 0.0,
        stop: str | Sequence[str] | None = None,
        seed: int | None = None,
        timeout: float | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        call_id: str | None = None,
    ) -> Completion:
        """Answer ``messages``; see ``ModelBase.complete`` for the meaning of each argument."""
        ...


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


def _normalize_stop(stop: str | Sequence[str] | None) -> tuple[str, ...]:
    if stop is None:
        return ()
    items = (stop,) if isinstance(stop, str) else stop
    if not isinstance(items, Sequence) or not all(isinstance(s, str) and s for s in items):
        raise ConfigurationError("stop", stop, "must be a non-empty string or a list of them")
    return tuple(items)


def _normalize_tools(tools: Sequence[Mapping[str, Any]] | None) -> tuple[Mapping[str, Any], ...]:
    if tools is None:
        return ()
    if isinstance(tools, Mapping) or not all(isinstance(t, Mapping) for t in tools):
        raise ConfigurationError("tools", tools, "must be a list of OpenAI-style tool dicts")
    return tuple(tools)


class ModelBase(abc.ABC):
    """Shared machinery for every model; subclasses implement ``_complete``.

    Every call is recorded into ``self.usage`` and into the meter of the enclosing
    ``usage_scope()`` (if any), so a run's usage and cost accumulate wherever it calls.
    """

    real: ClassVar[bool] = False
    """True for adapters that reach a real model; those obey the real-call guard."""

    def __init__(
        self,
        name: str,
        *,
        price: Price | None = None,
        meter: UsageMeter | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ConfigurationError("name", name, "must be a non-empty string")
        self._name = name
        self.price = price
        self.usage = meter if meter is not None else UsageMeter()
        self._clock = clock

    @property
    def name(self) -> str:
        return self._name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._name!r})"

    async def complete(
        self,
        messages: MessagesInput,
        *,
        response_schema: Mapping[str, Any] | None = None,
        max_tokens: int = 256,
        temperature: float = 0.0,
        stop: str | Sequence[str] | None = None,
        seed: int | None = None,
        timeout: float | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        call_id: str | None = None,
    ) -> Completion:
        """Complete ``messages``.

        ``response_schema`` (a JSON Schema) asks for JSON: adapters constrain decoding where
        they can, and the answer is parsed and validated into ``Completion.parsed``.
        ``timeout`` (seconds) bounds the whole call; running past it raises
        ``ModelTimeoutError``. ``seed`` makes sampling reproducible where the backend allows.
        ``tools`` (OpenAI tool dicts) are passed to backends that call tools natively.
        """
        call = self._check_call(
            messages, response_schema, max_tokens, temperature, stop, seed, timeout, tools, call_id
        )
        if self.real:
            check_real_model_call(self._name)
        started = self._clock()
        try:
            raw = await self._complete(call)
        except Exception:
            self._meters_error()
            raise
        latency = max(0.0, self._clock() - started)
        completion = self._build(call, raw, latency)
        self._meters_record(completion)
        return completion

    async def aclose(self) -> None:
        """Release connections or other resources (nothing to release by default)."""
        return None

    @abc.abstractmethod
    async def _complete(self, call: CallInfo) -> RawCompletion | Completion:
        """Run one call against the backend (a ready ``Completion`` passes through as is,
        with this call's ``call_id``)."""

    def _check_call(
        self,
        messages: MessagesInput,
        response_schema: Mapping[str, Any] | None,
        max_tokens: int,
        temperature: float,
        stop: str | Sequence[str] | None,
        seed: int | None,
        timeout: float | None,
        tools: Sequence[Mapping[str, Any]] | None,
        call_id: str | None,
    ) -> CallInfo:
        require_int_at_least("max_tokens", max_tokens, 1)
        temperature = require_finite("temperature", temperature)
        if not 0.0 <= temperature <= 2.0:
            raise ConfigurationError("temperature", temperature, "must lie in [0, 2]")
        if seed is not None:
            require_int_at_least("seed", seed, 0)
            if seed >= 2**32:
                raise ConfigurationError("seed", seed, "must be < 2**32")
        if timeout is not None:
            timeout = require_positive("timeout", timeout)
        if response_schema is not None:
            check_schema(response_schema)
        if call_id is not None and (not isinstance(call_id, str) or not call_id):
            raise ConfigurationError("call_id", call_id, "must be a non-empty string")
        return CallInfo(
            call_id=call_id or uuid.uuid4().hex[:16],
            model=self._name,
            messages=normalize_messages(messages),
            response_schema=response_schema,
            max_tokens=max_tokens,
            temperature=temperature,
            stop=_normalize_stop(stop),
            seed=seed,
            timeout=timeout,
            tools=_normalize_tools(tools),
        )

    def _build(self, call: CallInfo, raw: RawCompletion | Completion, latency: float) -> Completion:
        if isinstance(raw, Completion):
            return raw.model_copy(update={"call_id": call.call_id})
        parsed: Any = None
        parse_error: str | None = None
        if call.response_schema is not None:
            parsed, parse_error = parse_structured(
                raw.text, call.response_schema, lenient=raw.lenient_json
            )
        usage = Usage(prompt_tokens=raw.prompt_tokens, completion_tokens=raw.completion_tokens)
        return Completion(
            text=raw.text,
            parsed=parsed,
            parse_error=parse_error,
            usage=usage,
            latency_s=latency,
            model=raw.model or self._name,
            finish_reason=raw.finish_reason,
            call_id=call.call_id,
            tool_calls=raw.tool_calls,
            cost_usd=None if self.price is None else self.price.cost(usage),
        )

    def _meters(self) -> list[UsageMeter]:
        scoped = current_usage_meter()
        return [self.usage] if scoped is None or scoped is self.usage else [self.usage, scoped]

    def _meters_record(self, completion: Completion) -> None:
        for meter in self._meters():
            meter.record(completion)

    def _meters_error(self) -> None:
        for meter in self._meters():
            meter.record_error(self._name)
