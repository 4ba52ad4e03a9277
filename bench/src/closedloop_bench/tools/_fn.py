"""The shape of a catalog function: its arguments, their value pools, how a user asks.

Each function carries its OpenAI-style schema, value pools for its arguments and a few
ways a user asks for it (templates over the argument names).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Fn", "Param", "enum_param", "int_param", "number_param", "string_param"]


@dataclass(frozen=True, slots=True)
class Param:
    """One argument: its JSON type, the values a task may use, how a value is said."""

    name: str
    type: str
    description: str
    values: tuple[Any, ...]
    enum: bool = False
    required: bool = True
    say: Mapping[Any, str] = field(default_factory=dict)

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "description": self.description}
        if self.enum:
            out["enum"] = list(self.values)
        return out

    def spoken(self, value: Any) -> str:
        if value in self.say:
            return self.say[value]
        if isinstance(value, float):
            return f"{value:g}"
        return str(value)


@dataclass(frozen=True, slots=True)
class Fn:
    """One catalog function and the ways a user asks for it."""

    domain: str
    name: str
    description: str
    params: tuple[Param, ...]
    asks: tuple[str, ...]

    def tool(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": {
                    "type": "object",
                    "properties": {p.name: p.schema() for p in self.params},
                    "required": [p.name for p in self.params if p.required],
                },
            },
        }


def string_param(name: str, description: str, *values: Any, required: bool = True) -> Param:
    """A free-text string argument."""
    return Param(name, "string", description, values, required=required)


def enum_param(
    name: str, description: str, *values: Any, required: bool = True, **say: str
) -> Param:
    """A string argument limited to ``values``; ``say`` maps a value to how it is said."""
    return Param(name, "string", description, values, enum=True, required=required, say=say)


def int_param(name: str, description: str, *values: int, required: bool = True) -> Param:
    """An integer argument."""
    return Param(name, "integer", description, values, required=required)


def number_param(name: str, description: str, *values: float, required: bool = True) -> Param:
    """A number argument."""
    return Param(name, "number", description, values, required=required)
