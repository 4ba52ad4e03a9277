"""The agent's answer as a typed value: ``output_type`` checked by pydantic.

The loop's final answer is text. With ``output_type=str`` it is the output as it is; any
other type pydantic can validate (a model, a dataclass, ``int``, ``list[str]`` ...) is read
from the answer as JSON, else as a plain value, else from the task's required fields.
The check runs where the loop accepts the answer, so an answer that does not fit ends
the run as ``error`` with the validation error in the result (and in the trace).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Generic

from pydantic import TypeAdapter, ValidationError
from pydantic.errors import PydanticSchemaGenerationError, PydanticUserError

from .._exceptions import ConfigurationError, OutputValidationError
from ._halt_error import describe_error
from ._records import AgentResult, HaltReason, OutputT, RunResult

__all__ = [
    "OutputParser",
]

FormatAnswer = Callable[[str, Mapping[str, Any]], str]


class OutputParser(Generic[OutputT]):
    """Turns an accepted answer (and the task's fields) into an ``output_type`` value."""

    def __init__(self, output_type: type[OutputT]) -> None:
        self.output_type = output_type
        self._adapter: TypeAdapter[OutputT] | None = None
        if output_type is not str:
            try:
                self._adapter = TypeAdapter(output_type)
            except (PydanticSchemaGenerationError, PydanticUserError, TypeError) as exc:
                raise ConfigurationError(
                    "output_type", output_type, f"pydantic cannot validate it ({exc})"
                ) from None

    def parse(self, answer: Any, fields: Mapping[str, Any]) -> OutputT:
        """The answer as ``output_type``; :class:`OutputValidationError` if it does not fit."""
        if self._adapter is None:
            return answer  # type: ignore[no-any-return]  # output_type is str
        text = "" if answer is None else str(answer)
        first: ValidationError | None = None
        candidates: list[Callable[[], OutputT]] = []
        try:
            decoded = json.loads(text)
        except ValueError:
            pass
        else:
            candidates.append(lambda: self._adapter.validate_python(decoded))  # type: ignore[union-attr]
        candidates.append(lambda: self._adapter.validate_python(text))  # type: ignore[union-attr]
        if fields:
            candidates.append(lambda: self._adapter.validate_python(dict(fields)))  # type: ignore[union-attr]
        for candidate in candidates:
            try:
                return candidate()
            except ValidationError as exc:
                first = first or exc
        name = getattr(self.output_type, "__name__", repr(self.output_type))
        raise OutputValidationError(
            f"the final answer {text[:200]!r} does not validate as {name}: {first}"
        )

    def checked(self, fmt: FormatAnswer | None) -> FormatAnswer | None:
        """``fmt`` followed by the output check, for the loop to call on accepting an answer."""
        if self._adapter is None:
            return fmt

        def format_and_check(answer: str, fields: Mapping[str, Any]) -> str:
            text = answer if fmt is None else fmt(answer, fields)
            self.parse(text, fields)
            return text

        return format_and_check

    def result(
        self, plain: RunResult, result_type: type[AgentResult[OutputT]]
    ) -> AgentResult[OutputT]:
        """``plain`` as ``result_type``, with ``output`` parsed when the run succeeded."""
        if isinstance(plain, AgentResult):
            return plain  # already typed, by the agent that ran it
        data = dict(plain)
        output: Any = None
        if plain.success:
            try:
                output = self.parse(plain.answer, plain.fields)
            except OutputValidationError as exc:
                # Only where the loop skipped the check (dimension reduction skips the
                # answer's formatting, and with it the check): the answer is refused here.
                error = describe_error(exc)
                data.update(
                    halt_reason=HaltReason.ERROR,
                    success=False,
                    answer=None,
                    message=f"ended by an error: {error.summary()}",
                    error=error,
                )
        return result_type.model_construct(**data, output=output)
