"""Deterministic models for tests and examples: no network, no weights, no real calls.

``FunctionModel(fn)`` answers with whatever ``fn`` computes from the messages and the call;
``ScriptedModel([...])`` replays canned answers (text, JSON values, completions, or
exceptions to raise) in order. Both record every call they receive in ``.calls``.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeAlias

from .._exceptions import ConfigurationError, ModelResponseError
from ._completion import Completion, Message
from ._protocol import CallInfo, ModelBase, RawCompletion
from ._usage import FREE, Price, UsageMeter

__all__ = ["FunctionModel", "ScriptedModel", "estimate_tokens"]

Answer: TypeAlias = str | Completion | RawCompletion
ModelFunction: TypeAlias = Callable[
    [tuple[Message, ...], CallInfo], Answer | Mapping[str, Any] | Awaitable[Answer]
]


def estimate_tokens(text: str) -> int:
    """A rough token count (UTF-8 bytes / 4), for models that do not tokenize."""
    return (len(text.encode("utf-8", errors="surrogatepass")) + 3) // 4


def _prompt_tokens(messages: Sequence[Message]) -> int:
    return sum(estimate_tokens(m.content) + 4 for m in messages)


def _to_raw(answer: object, call: CallInfo, model: str) -> RawCompletion | Completion:
    if isinstance(answer, Completion | RawCompletion):
        return answer
    if isinstance(answer, Mapping | list):
        answer = json.dumps(answer, ensure_ascii=False)
    if not isinstance(answer, str):
        raise ModelResponseError(
            f"{model}: the test model produced {type(answer).__name__}; "
            "expected str, a JSON value (dict/list), Completion or RawCompletion"
        )
    text = answer
    completion_tokens = estimate_tokens(text)
    finish = "stop"
    if completion_tokens > call.max_tokens:
        # Behave like a real model that hit max_tokens, so truncation paths get exercised.
        text = text.encode("utf-8", errors="surrogatepass")[: call.max_tokens * 4].decode(
            "utf-8", errors="ignore"
        )
        completion_tokens, finish = call.max_tokens, "length"
    return RawCompletion(
        text=text,
        prompt_tokens=_prompt_tokens(call.messages),
        completion_tokens=completion_tokens,
        finish_reason=finish,
        model=model,
    )


class FunctionModel(ModelBase):
    """A model whose answers come from ``fn(messages, call)``, sync or async.

    ``fn`` may return text, a JSON value (dict/list, serialised), a ``RawCompletion`` or a
    ``Completion`` (passed through with this call's ``call_id``); an exception it raises
    propagates, so failures can be scripted too.
    """

    real = False

    def __init__(
        self,
        fn: ModelFunction,
        *,
        name: str = "function",
        price: Price | None = FREE,
        meter: UsageMeter | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if not callable(fn):
            raise ConfigurationError("fn", fn, "must be callable")
        if clock is None:
            super().__init__(name, price=price, meter=meter)
        else:
            super().__init__(name, price=price, meter=meter, clock=clock)
        self._fn = fn
        self.calls: list[CallInfo] = []

    async def _complete(self, call: CallInfo) -> RawCompletion | Completion:
        self.calls.append(call)
        result: Any = self._fn(call.messages, call)
        if inspect.isawaitable(result):
            result = await result
        return _to_raw(result, call, self.name)


class ScriptedModel(ModelBase):
    """Replays ``answers`` in order, one per call.

    Each item is text, a JSON value (dict/list), a ``Completion``/``RawCompletion``, or an
    exception instance to raise on that call. ``cycle=True`` starts over at the end;
    otherwise running out raises ``ModelResponseError``.
    """

    real = False

    def __init__(
        self,
        answers: Sequence[object],
        *,
        name: str = "scripted",
        cycle: bool = False,
        price: Price | None = FREE,
        meter: UsageMeter | None = None,
    ) -> None:
        if isinstance(answers, str | bytes) or not isinstance(answers, Sequence):
            raise ConfigurationError("answers", answers, "must be a list of answers")
        if cycle and not answers:
            raise ConfigurationError("answers", answers, "must not be empty with cycle=True")
        super().__init__(name, price=price, meter=meter)
        self._answers = list(answers)
        self._cycle = cycle
        self._next = 0
        self.calls: list[CallInfo] = []

    @property
    def remaining(self) -> int:
        """Answers not yet used (always the full count when cycling)."""
        return len(self._answers) if self._cycle else max(0, len(self._answers) - self._next)

    async def _complete(self, call: CallInfo) -> RawCompletion | Completion:
        self.calls.append(call)
        if self._next >= len(self._answers) and not self._cycle:
            raise ModelResponseError(
                f"{self.name}: script exhausted after {len(self._answers)} answers"
            )
        answer = self._answers[self._next % len(self._answers)]
        self._next += 1
        if isinstance(answer, BaseException):
            raise answer
        return _to_raw(answer, call, self.name)
