"""Where the benchmark's models come from: ``test:`` models for tests, any other spec loaded once.

``test:oracle`` answers every task with its oracle's ideal reply, ``test:no-call`` always
declines, ``test:prose`` answers in words with no JSON: three deterministic plants that
bound the scores (all, only the irrelevance family, nothing). Any ``closedloop.models``
spec (``local:smollm2-135m``, ``openai-compatible:...``) is checked when the run is
planned and loaded once, at its first call.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from closedloop import ConfigurationError
from closedloop.models import FunctionModel, Model, load_model, parse_model_spec

from ._format import Task
from ._oracle import ideal_reply

__all__ = ["TEST_MODELS", "ModelProvider", "resolve_models"]

_NO_CALL = json.dumps({"no_call": "I cannot help with that"})
_PROSE = "Sure! I would call the right function for you with the details you gave."

_TEST_ANSWERS: dict[str, Callable[[Task], str]] = {
    "test:oracle": ideal_reply,
    "test:no-call": lambda task: _NO_CALL,
    "test:prose": lambda task: _PROSE,
}

TEST_MODELS = tuple(_TEST_ANSWERS)
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

    def for_task(self, task: Task) -> Model:
        """The model that answers ``task``."""
        answer = _TEST_ANSWERS.get(self.spec)
        if answer is not None:
            text = answer(task)
            return FunctionModel(lambda _messages, _call: text, name=self.spec)
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
                raise ConfigurationError("models", spec, f"test models: {', '.join(TEST_MODELS)}")
        else:
            parse_model_spec(spec)
        providers.append(ModelProvider(spec, options=dict(options or {})))
    return providers
