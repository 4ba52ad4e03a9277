"""A tool's JSON schema from a Python signature: pydantic builds the arguments model, the
docstring (Google or Sphinx style) gives the summary and each parameter's description."""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.fields import FieldInfo

from .._exceptions import ConfigurationError

__all__ = ["schema_of", "signature_model"]


def _doc_parts(doc: str | None) -> tuple[str, dict[str, str]]:
    """The summary and per-parameter descriptions of a Google- or Sphinx-style docstring."""
    text = inspect.cleandoc(doc or "")
    params: dict[str, str] = {}
    summary_lines: list[str] = []
    in_args = False
    current: str | None = None
    for line in text.splitlines():
        stripped = line.strip()
        sphinx = re.match(r"^:param\s+(?:\S+\s+)?(\w+):\s*(.*)$", stripped)
        if sphinx:
            params[sphinx.group(1)] = sphinx.group(2)
            continue
        if stripped in ("Args:", "Arguments:", "Parameters:"):
            in_args = True
            continue
        if in_args:
            if stripped.endswith(":") and not line.startswith((" ", "\t")):
                in_args = False  # the next section (Returns:, Raises:)
                continue
            entry = re.match(r"^(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$", stripped)
            if entry and line.startswith((" ", "\t")) and len(line) - len(line.lstrip()) <= 8:
                current = entry.group(1)
                params[current] = entry.group(2)
            elif current and stripped:
                params[current] = f"{params[current]} {stripped}"
            continue
        if not in_args and not params:
            summary_lines.append(line)
    summary = "\n".join(summary_lines).strip().split("\n\n")[0].replace("\n", " ")
    return summary, params


def _strip_titles(schema: Any) -> Any:
    """Drop pydantic's generated ``title`` keywords; property names called "title" stay."""
    if isinstance(schema, list):
        return [_strip_titles(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in ("properties", "$defs", "definitions", "patternProperties") and isinstance(
            value, dict
        ):
            out[key] = {name: _strip_titles(sub) for name, sub in value.items()}
        else:
            out[key] = _strip_titles(value)
    return out


def signature_model(fn: Callable[..., Any], name: str) -> tuple[type[BaseModel], str]:
    """A pydantic model of ``fn``'s parameters and the summary line of its docstring."""
    try:
        signature = inspect.signature(fn)
        hints = typing.get_type_hints(fn, include_extras=True)
    except (TypeError, ValueError, NameError) as exc:
        raise ConfigurationError("tool", fn, f"cannot read its signature: {exc}") from None
    summary, param_docs = _doc_parts(inspect.getdoc(fn))
    fields: dict[str, Any] = {}
    for param in signature.parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param.kind is param.POSITIONAL_ONLY:
            raise ConfigurationError(
                "tool", fn, f"parameter {param.name!r} is positional-only; tools take keywords"
            )
        annotation = hints.get(param.name, Any)
        default = ... if param.default is param.empty else param.default
        described = param_docs.get(param.name)
        if isinstance(default, FieldInfo):  # ``x: int = Field(2, ge=0)``
            info = default
            if described and not info.description:
                info = FieldInfo.merge_field_infos(info, description=described)
            fields[param.name] = (annotation, info)
        else:
            fields[param.name] = (annotation, Field(default, description=described))
    model = create_model(f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
    return model, summary


def schema_of(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema of an arguments model, without generated titles."""
    schema: dict[str, Any] = _strip_titles(model.model_json_schema())
    schema.setdefault("properties", {})
    return schema
