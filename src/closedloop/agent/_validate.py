"""Validation before anything runs: output layer (schema) and semantic layer (phase, dependencies).

Two guards: the output layer checks the proposed action against the tool's
JSON schema (types, enums, ranges, nested objects, arrays); the semantic layer checks the
action against the task state (does the phase allow it, did the answers it depends on
say something). Every failure is a sentence the model reads next step, never an exception.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import jsonschema
import jsonschema.validators

from ._records import ActionCall
from ._tools import Tool

__all__ = ["PHASE_ACTIONS", "Validator", "describe_schema_error", "schema_validator"]

PHASE_ACTIONS: Mapping[str, frozenset[str]] = {
    "collecting": frozenset({"tool", "final"}),
    "committing": frozenset({"tool", "final"}),
    "planning": frozenset({"plan"}),
    "executing": frozenset({"tool"}),
    "finishing": frozenset({"final"}),
}
"""Which kinds of action each phase of the task allows."""


def describe_schema_error(error: jsonschema.ValidationError, root: str = "arguments") -> str:
    """``arguments.unit: 'kelvinn' is not one of ['celsius', 'kelvin']``."""
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    return f"{root}{path}: {error.message}"


_VALIDATORS: dict[tuple[int | str, bool], tuple[Mapping[str, Any], Any]] = {}
_CACHE_SIZE = 512
_SORTED = json.JSONEncoder(sort_keys=True)
"""Built once: ``json.dumps`` with options builds a new encoder for every call."""


def schema_validator(schema: Mapping[str, Any], *, formats: bool = True) -> Any:
    """A checked jsonschema validator for ``schema``, built once per schema.

    Checking a schema against its metaschema costs milliseconds, far more than a whole
    step, and an agent built per run (a service's factory) derives equal schemas afresh
    each time: the cache keys on the schema's JSON text (its keys in their order, which
    orders the errors), else on the object's identity (holding it, so the id cannot be
    reused while cached). A schema mutated in place after first use is not seen again:
    schemas are set up once. ``formats`` adds the draft's format checker.
    """
    try:
        key: tuple[int | str, bool] = (json.dumps(schema, allow_nan=False), formats)
    except (TypeError, ValueError):
        key = (id(schema), formats)
    hit = _VALIDATORS.get(key)
    if hit is not None and (isinstance(key[0], str) or hit[0] is schema):
        return hit[1]
    plain = dict(schema)
    cls = jsonschema.validators.validator_for(plain)
    cls.check_schema(plain)
    validator = cls(plain, format_checker=cls.FORMAT_CHECKER if formats else None)
    if len(_VALIDATORS) >= _CACHE_SIZE:
        _VALIDATORS.clear()
    _VALIDATORS[key] = (schema, validator)
    return validator


class Validator:
    """Checks proposed actions against the tools' schemas and the task's phase and state."""

    def __init__(self, tools: Mapping[str, Tool]) -> None:
        self.tools = dict(tools)
        self._validators: dict[str, Any] = {}
        for name, tool in self.tools.items():
            self._validators[name] = schema_validator(tool.parameters)
        # The last call's verdict: a step checks the same call when it is proposed and
        # again before it runs, and a schema check costs more than the rest of both.
        self._last: tuple[Mapping[str, Any], str, list[str]] | None = None

    def phase_allows(self, phase: str, kind: str) -> bool:
        return kind in PHASE_ACTIONS.get(phase, frozenset({"tool", "final"}))

    def kind_errors(self, phase: str, kind: str) -> list[str]:
        if self.phase_allows(phase, kind):
            return []
        allowed = ", ".join(sorted(PHASE_ACTIONS.get(phase, ())))
        return [f"phase {phase!r} does not allow a {kind} action here; allowed: {allowed}"]

    def arguments_errors(self, call: ActionCall) -> list[str]:
        validator = self._validators.get(call.tool)
        if validator is None:
            return []
        try:
            # The text names the value exactly (1, 1.0 and true differ), unlike ==.
            text = f"{call.tool}\n" + _SORTED.encode(call.arguments)
        except (TypeError, ValueError):
            text = None
        last = self._last
        # The same arguments object (the same proposal), unchanged since: the same verdict.
        if text is not None and last is not None and last[0] is call.arguments and last[1] == text:
            return list(last[2])
        errors = sorted(validator.iter_errors(call.arguments), key=lambda e: list(map(str, e.path)))
        found = [describe_schema_error(e) for e in errors[:8]]
        if text is not None:
            self._last = (call.arguments, text, list(found))
        return found

    def call_errors(
        self,
        call: ActionCall,
        *,
        phase: str,
        latest: Mapping[str, Mapping[str, Any]],
        exclude: Sequence[str] = (),
    ) -> list[str]:
        """Every reason ``call`` may not run now (empty when it may)."""
        tool = self.tools.get(call.tool)
        if tool is None or call.tool in exclude:
            names = [n for n in self.tools if n not in exclude]
            wanted = call.tool.lower()
            close = [n for n in names if wanted and wanted in n.lower()][:1]
            close = close or difflib.get_close_matches(call.tool, names, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            return [f"unknown tool {call.tool!r}; available: {', '.join(names)}{hint}"]
        errors = self.kind_errors(phase, "tool")
        if tool.phases is not None and phase not in tool.phases:
            errors.append(
                f"tool {tool.name!r} may run only in phase(s) {', '.join(sorted(tool.phases))}; "
                f"the task is in phase {phase!r}"
            )
        errors.extend(self.arguments_errors(call))
        errors.extend(self.dependency_errors(tool, latest))
        return errors

    @staticmethod
    def dependency_errors(tool: Tool, latest: Mapping[str, Mapping[str, Any]]) -> list[str]:
        """The semantic guard: an empty answer never licenses the next action."""
        errors: list[str] = []
        for dependency in tool.depends_on:
            seen = latest.get(dependency)
            if seen is None:
                errors.append(
                    f"{tool.name} depends on {dependency}, which has not answered yet; "
                    f"call {dependency} first"
                )
            elif seen.get("status") != "ok":
                errors.append(
                    f"{tool.name} is blocked: it depends on {dependency}, whose latest answer "
                    f"is {seen.get('status')!r} ({seen.get('meaning', '')}). An empty answer "
                    "is not the absence of a constraint; get an explicit, non-empty answer "
                    f"from {dependency} first"
                )
        return errors

    def plan_errors(self, plan: Sequence[Mapping[str, Any]], max_steps: int) -> list[str]:
        """Every problem of a proposed plan, each naming its step."""
        if not plan:
            return ["the plan is empty"]
        errors: list[str] = []
        if len(plan) > max_steps:
            errors.append(f"the plan has {len(plan)} steps; at most {max_steps} are allowed")
        for index, step in enumerate(plan):
            name = step.get("tool")
            arguments = step.get("arguments", {})
            if not isinstance(name, str) or name not in self.tools:
                errors.append(f"plan[{index}]: unknown tool {name!r}")
                continue
            if not isinstance(arguments, Mapping):
                errors.append(f"plan[{index}]: arguments must be an object")
                continue
            tool = self.tools[name]
            if tool.phases is not None and "executing" not in tool.phases:
                errors.append(f"plan[{index}]: tool {name!r} may not run while executing a plan")
            call = ActionCall(tool=name, arguments=dict(arguments))
            errors.extend(f"plan[{index}].{e}" for e in self.arguments_errors(call))
        return errors
