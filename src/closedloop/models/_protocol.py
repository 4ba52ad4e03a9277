"""The one model protocol: messages in, a ``Completion`` out; and the base every adapter shares.

``ModelBase.complete`` owns everything that must not differ between adapters: message
checks (the ``ModelRequest`` checked itself when it was built), the real-call guard, call ids, latency measurement, JSON parsing and schema
validation of the answer, and usage accounting. An adapter implements ``_complete`` only.

A reply that does not parse or does not match the schema is not an exception here: the
``Completion`` carries ``parsed=None`` and a ``parse_error`` so perception can score it
(format drift is a disturbance of the world, not a broken contract).
"""

from __future__ import annotations

import abc
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

from .._exceptions import ConfigurationError
from ._completion import Completion, Message, MessagesInput, ToolCall, Usage, normalize_messages
from ._confidence import logprob_confidence, mark_decisions
from ._guard import check_real_model_call
from ._json import parse_structured
from ._request import DEFAULT_REQUEST, ModelRequest
from ._usage import Price, UsageMeter, current_usage_meter

__all__ = ["CallInfo", "Model", "ModelBase", "RawCompletion"]


@dataclass(frozen=True, slots=True)
class CallInfo:
    """One call as an adapter (or a ``FunctionModel`` fn) sees it: its id, the model's
    name, the checked messages and the request; the request's fields read through too
    (``call.max_tokens`` is ``call.request.max_tokens``)."""

    call_id: str
    model: str
    messages: tuple[Message, ...]
    request: ModelRequest = DEFAULT_REQUEST

    @property
    def response_schema(self) -> Mapping[str, Any] | None:
        return self.request.response_schema

    @property
    def max_tokens(self) -> int:
        return self.request.max_tokens

    @property
    def temperature(self) -> float:
        return self.request.temperature

    @property
    def stop(self) -> tuple[str, ...]:
        return tuple(self.request.stop)

    @property
    def seed(self) -> int | None:
        return self.request.seed

    @property
    def timeout(self) -> float | None:
        return self.request.timeout

    @property
    def tools(self) -> tuple[Mapping[str, Any], ...]:
        return tuple(self.request.tools)


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
    logprobs: tuple[tuple[str, float], ...] = ()  # (token text, logprob) per generated token
    extra: Mapping[str, Any] = field(default_factory=dict)


@runtime_checkable
class Model(Protocol):
    """Anything that completes chat messages: real adapters, test models, wrappers.

    ``request`` may be left out: ``DEFAULT_REQUEST`` (256 tokens at temperature 0) is
    meant, so a quick call reads ``await model.complete("hi")``.
    """

    @property
    def name(self) -> str:
        """A readable model name (the spec for adapters built by ``load_model``)."""
        ...

    async def complete(
        self, messages: MessagesInput, request: ModelRequest = DEFAULT_REQUEST
    ) -> Completion:
        """Answer ``messages`` as ``request`` says (see ``ModelRequest``)."""
        ...


def check_request(request: object) -> ModelRequest:
    """``request`` itself when it is a ``ModelRequest``; a clear error otherwise."""
    if not isinstance(request, ModelRequest):
        raise ConfigurationError(
            "request", request, "must be a ModelRequest (the call's settings, one value)"
        )
    return request


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

    @property
    def supports_tool_calls(self) -> bool:
        """Whether the backend calls tools natively (``ModelRequest.tools``); False here."""
        return False

    @property
    def supports_logprobs(self) -> bool:
        """Whether ``ModelRequest(logprobs=True)`` gets the generated tokens' logprobs back
        (the confidence sensor); False here."""
        return False

    async def complete(
        self, messages: MessagesInput, request: ModelRequest = DEFAULT_REQUEST
    ) -> Completion:
        """Complete ``messages`` as ``request`` says (see ``ModelRequest`` for each field)."""
        call = CallInfo(
            call_id=check_request(request).call_id or uuid.uuid4().hex[:16],
            model=self._name,
            messages=normalize_messages(messages),
            request=request,
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
        tokens = mark_decisions(raw.logprobs)
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
            logprobs=tokens,
            confidence=logprob_confidence(tokens) if tokens else None,
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
