"""Where the benchmark's models come from: ``test:`` models for tests, any other spec loaded once.

``test:oracle`` answers every task with its oracle's ideal reply, ``test:no-call`` always
declines, ``test:prose`` answers in words with no JSON: three deterministic plants that
bound the scores (all, only the irrelevance family, nothing). Asked by an agent (its
prompt asks for one ``{"tool": ...}`` action a reply), each answers in that form: the
oracle makes its calls one a reply and then gives a final answer, moving on only when the
prompt has changed (the same prompt gets the same reply, as a deterministic model gives).
``test:repeat`` is the oracle on the shared prompt, and on an agent's the one-call
pattern of small models: the oracle's first call, then the same call again at every step
(a final no-call answer where the oracle makes none). Any ``closedloop.models``
spec (``local:smollm2-135m``, ``openai-compatible:...``) is checked when the run is
planned and loaded once, at its first call.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from closedloop import ConfigurationError
from closedloop.models import CallInfo, FunctionModel, Message, Model, load_model, parse_model_spec

from ._format import ToolTask
from ._oracle import ideal_reply, oracle_calls

__all__ = ["TOOL_TEST_MODELS", "ModelProvider", "resolve_models"]

_NO_CALL = json.dumps({"no_call": "I cannot help with that"})
_PROSE = "Sure! I would call the right function for you with the details you gave."

_TEST_ANSWERS: dict[str, Callable[[ToolTask], str]] = {
    "test:oracle": ideal_reply,
    "test:no-call": lambda task: _NO_CALL,
    "test:prose": lambda task: _PROSE,
    "test:repeat": ideal_reply,
}

_STEP_FORM = '{"tool": "<tool name>"'
"""How a test model tells an agent's prompt (one action a reply) from the shared one."""

_STEP_FINALS: dict[str, str] = {
    "test:oracle": "done",
    "test:no-call": "I cannot help with that",
    "test:repeat": "I cannot help with that",
}


def _stepwise(spec: str, task: ToolTask) -> Callable[[Sequence[Message], CallInfo], str]:
    """The test model ``spec`` on ``task``: whole answers to the shared prompt, one action
    a reply to an agent's."""
    whole = _TEST_ANSWERS[spec](task)
    calls = oracle_calls(task) if spec in ("test:oracle", "test:repeat") else []
    if spec == "test:repeat":
        calls = calls[:1]  # the first call, proposed at every step: it never moves on
    steps = [
        json.dumps({"tool": c.name, "arguments": dict(c.arguments)}, ensure_ascii=False)
        for c in calls
    ]
    final = _STEP_FINALS.get(spec)
    if final is not None and not (spec == "test:repeat" and steps):
        steps.append(json.dumps({"final": final}))
    seen: list[str] = []

    def answer(messages: Sequence[Message], _call: CallInfo) -> str:
        system = messages[0].content if messages and messages[0].role == "system" else ""
        if _STEP_FORM not in system or not steps:
            return whole
        prompt = "\n".join(m.content for m in messages)
        if not seen or seen[-1] != prompt:
            seen.append(prompt)
        return steps[min(len(seen), len(steps)) - 1]

    return answer


TOOL_TEST_MODELS = tuple(_TEST_ANSWERS)
"""The deterministic model specs the tool-calling benchmark knows."""


@dataclass
class ModelProvider:
    """The model for each task under one spec."""

    spec: str
    shared: Model | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def deterministic(self) -> bool:
        return self.spec in _TEST_ANSWERS

    def for_task(self, task: ToolTask) -> Model:
        """The model that answers ``task``."""
        if self.spec in _TEST_ANSWERS:
            return FunctionModel(_stepwise(self.spec, task), name=self.spec)
        if self.shared is None:
            self.shared = load_model(self.spec, **dict(self.options))
        return self.shared


def resolve_models(
    specs: Sequence[str | Model], *, options: Mapping[str, Any] | None = None
) -> list[ModelProvider]:
    """A provider per spec (or ready model), each spec checked before any model is called;
    ``options`` go to ``load_model`` for the real specs."""
    if isinstance(specs, str) or not specs:
        raise ConfigurationError("models", specs, "must list at least one model spec")
    providers: list[ModelProvider] = []
    for spec in specs:
        if isinstance(spec, Model):
            providers.append(ModelProvider(spec.name, shared=spec))
            continue
        if not isinstance(spec, str) or not spec.strip():
            raise ConfigurationError("models", spec, "each model must be a spec string")
        spec = spec.strip()
        if spec.startswith("test:"):
            if spec not in _TEST_ANSWERS:
                raise ConfigurationError(
                    "models", spec, f"test models: {', '.join(TOOL_TEST_MODELS)}"
                )
        else:
            parse_model_spec(spec)
        providers.append(ModelProvider(spec, options=dict(options or {})))
    return providers
