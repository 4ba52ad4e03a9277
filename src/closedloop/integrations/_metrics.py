"""Sensing for the integrations: from a call's result (or an HTTP status) to ``e ∈ [0, 1]``.

A metric is ``metric(result) -> float`` or ``metric(result, invocation) -> float`` (the
second form sees the call's arguments, for errors such as the edit distance
between the city asked for and the city answered). Exceptions never reach a metric:
a retryable exception is an error of 1.0.

Metric outputs are checked by :func:`check_error`. A finite value outside ``[0, 1]`` is
clipped and the clip is noted in the record, since a metric that returns 1.2 for "very
bad" still means something. NaN, infinities and non-numbers raise ``ConfigurationError``:
they say the metric itself is broken, and feeding them to a PID would poison its state.
"""

from __future__ import annotations

import inspect
import json
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from pydantic import BaseModel

from .._exceptions import ConfigurationError
from ..perception import Observation, ObservationStatus, error_business, sanitize_json

__all__ = [
    "EMPTY_ERROR",
    "EXCEPTION_ERROR",
    "Invocation",
    "Metric",
    "check_error",
    "default_metric",
    "json_metric",
    "status_error",
]

EXCEPTION_ERROR = 1.0
"""The error of an attempt that raised a retryable exception."""

EMPTY_ERROR = 0.8
"""The error of an empty answer (None, blank text, an empty container).

High, because a 200-and-empty answer is not a success, but below an exception:
an empty answer can be true ("no match found"), a traceback cannot.
"""


@dataclass(frozen=True, slots=True)
class Invocation:
    """The arguments of one call, as a two-argument metric or a key function sees them."""

    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


Metric: TypeAlias = Callable[..., Any]
"""``metric(result)`` or ``metric(result, invocation)``, returning a number in ``[0, 1]``."""

_Sensor: TypeAlias = Callable[[Any, Invocation], Any]


def _is_blank(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, str | bytes | bytearray):
        return not value.strip()
    if isinstance(value, Mapping | list | tuple | set | frozenset):
        return len(value) == 0
    return False


def default_metric(result: Any) -> float:
    """The error used when none is given.

    ``None`` and blank results (whitespace text, an empty container) score
    :data:`EMPTY_ERROR`. An :class:`~closedloop.perception.Observation` scores by its
    status: ``error``, ``timeout`` and ``rate_limited`` are 1.0, ``empty`` is at least
    :data:`EMPTY_ERROR`, the others ``1 − confidence``. Anything else is 0.0.
    """
    if isinstance(result, Observation):
        status = result.status
        if status in (
            ObservationStatus.ERROR,
            ObservationStatus.TIMEOUT,
            ObservationStatus.RATE_LIMITED,
        ):
            return 1.0
        deficit = 1.0 - result.confidence
        return max(EMPTY_ERROR, deficit) if status is ObservationStatus.EMPTY else deficit
    return EMPTY_ERROR if _is_blank(result) else 0.0


def json_metric(key_fields: Sequence[str] = (), schema: Any = None) -> Callable[[Any], float]:
    """A metric for structured answers: 1.0 unless JSON is there, else missing key fields.

    Text is read with :func:`~closedloop.perception.sanitize_json` (drifted model output
    is recovered first); dicts, lists and pydantic models are taken as they are. With a
    ``schema`` (JSON schema or pydantic model class) an answer that does not validate
    scores 1.0. Otherwise the error is the share of ``key_fields`` (dotted paths) that are
    missing or blank: e1, business success, where success means the key fields are there, not
    that the call returned.
    """
    if isinstance(key_fields, str):
        raise ConfigurationError("key_fields", key_fields, "must be a sequence of str, not a str")
    fields = tuple(key_fields)
    for i, name in enumerate(fields):
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"key_fields[{i}]", name, "must be a non-empty str")
    if schema is not None:
        # Fail on a bad schema now, not on the first call.
        sanitize_json("{}", schema)

    def metric(result: Any) -> float:
        data: Any = result.model_dump(mode="json") if isinstance(result, BaseModel) else result
        if isinstance(data, bytes | bytearray):
            data = bytes(data).decode("utf-8", errors="replace")
        if isinstance(data, str):
            found = sanitize_json(data, schema)
            if not found.ok:
                return 1.0
            data = found.data
        elif data is None:
            return 1.0
        elif schema is not None:
            try:
                text = json.dumps(data, default=str)
            except (TypeError, ValueError):
                return 1.0
            if not sanitize_json(text, schema).ok:
                return 1.0
        elif not isinstance(data, Mapping | list | tuple):
            return 1.0
        return error_business(data, fields) if fields else 0.0

    return metric


def status_error(status: int) -> float:
    """The error an HTTP status says about the service behind it.

    5xx, 408 (timeout) and 429 (throttled) are 1.0: the service failed or asked us to slow
    down. Other 4xx are 0.0: a malformed request says nothing about the service's health.
    1xx–3xx are 0.0.
    """
    if status >= 500 or status in (408, 429):
        return 1.0
    return 0.0


def check_error(value: Any, argument: str = "metric") -> tuple[float, str | None]:
    """Validate a metric's output: ``(error, note)``.

    Booleans count as 0/1. A finite number outside ``[0, 1]`` is clipped and ``note`` says
    so; NaN, infinities and non-numbers raise ``ConfigurationError`` naming ``argument``.
    """
    if isinstance(value, bool):
        return float(value), None
    if not isinstance(value, numbers.Real):
        raise ConfigurationError(argument, value, "must return a real number in [0, 1]")
    number = float(value)
    if not math.isfinite(number):
        raise ConfigurationError(argument, value, "returned a non-finite error (NaN or inf)")
    if number < 0.0:
        return 0.0, f"{argument} returned {number!r}; clipped to 0.0"
    if number > 1.0:
        return 1.0, f"{argument} returned {number!r}; clipped to 1.0"
    return number, None


def _arity(fn: Callable[..., Any]) -> int | None:
    """1 or 2 for the metric forms, 0 for neither, None when the signature is unknown."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    positional = [p for p in params if p.kind in kinds]
    required = sum(1 for p in positional if p.default is inspect.Parameter.empty)
    has_var = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)
    if required == 2:
        return 2
    if required <= 1 and (positional or has_var):
        return 1
    return 0


def as_sensor(metric: Metric | None, argument: str = "metric") -> _Sensor:
    """Normalise a one- or two-argument metric to ``sensor(result, invocation)``."""
    if metric is None:
        return lambda result, _invocation: default_metric(result)
    if not callable(metric):
        raise ConfigurationError(argument, metric, "must be callable")
    arity = _arity(metric)
    if arity is None or arity == 1:
        return lambda result, _invocation: metric(result)
    if arity == 2:
        return metric
    raise ConfigurationError(
        argument, metric, "must take (result) or (result, invocation) positionally"
    )
