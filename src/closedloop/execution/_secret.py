"""Secrets: credentials a tool needs, seen as a reference by everything but the tool.

A :class:`Secret` is a name and a resolver, never a value: the value is looked up when a
tool call that refers to it runs, and handed to the tool only. The model sees and writes
the reference, ``{{secret:API_TOKEN}}``; the executor, the effect ledger, the state store,
traces, logs and the service's answers see the same reference, because the value is
substituted into the arguments inside :meth:`AtomicAction.invoke`, just before ``fn``
runs. Every resolved value is also remembered by this process (``closedloop/_redaction.py``)
so that, should it come back in a tool's answer or an error, it is scrubbed from
everything persisted or exported.

:class:`RunSecrets` is one run's table: the secrets declared for it, and the secrets the
detectors found in its free text (the task, the model's arguments, the tools' answers),
each given a reference (``detected_1``, ...) so the run can still use it while nothing
persisted holds it.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

from .._exceptions import ConfigurationError, SecretUnavailableError
from .._redaction import (
    MIN_KNOWN_LENGTH,
    REFERENCE,
    detected_secrets,
    redact,
    reference,
    remember_secret,
    self_evident,
    valid_name,
)

__all__ = ["EnvResolver", "RunSecrets", "Secret", "SecretResolver", "substitute"]


@runtime_checkable
class SecretResolver(Protocol):
    """Where secret values come from: ``resolve(name)`` returns the value (or an awaitable
    of it) and raises when there is none. Called at the moment of each tool call, so a
    rotated credential is picked up by the next call."""

    def resolve(self, name: str) -> str | Awaitable[str]:
        """The value of secret ``name``, or an awaitable of it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EnvResolver:
    """Secrets from environment variables: ``variable`` if given, else ``prefix + name``.

    ``environ`` replaces ``os.environ`` (tests); it is read at call time, never copied.
    """

    prefix: str = ""
    variable: str | None = None
    environ: Mapping[str, str] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.prefix, str):
            raise ConfigurationError("prefix", self.prefix, "must be a string")
        if self.variable is not None and (not isinstance(self.variable, str) or not self.variable):
            raise ConfigurationError("variable", self.variable, "must be a non-empty string")

    def resolve(self, name: str) -> str:
        """The variable's value; ``LookupError`` naming the variable when it is unset or empty."""
        var = self.variable if self.variable is not None else self.prefix + name
        env = os.environ if self.environ is None else self.environ
        value = env.get(var)
        if not value:
            raise LookupError(f"environment variable {var!r} is not set")
        return value


ResolverLike = SecretResolver | Callable[[str], "str | Awaitable[str]"]
"""A :class:`SecretResolver`, or a plain function ``name -> value``."""


@dataclass(frozen=True, slots=True, init=False)
class Secret:
    """A named credential, resolved when a tool call uses it; never holds its value.

    ``Secret.env("API_TOKEN")`` reads ``$API_TOKEN`` at call time; ``Secret("db",
    resolver=vault)`` asks any :class:`SecretResolver` (or a function ``name -> value``).
    Its text form is its reference, ``{{secret:NAME}}``: what the model writes into a tool
    argument and what every store, trace and answer shows. A ``Secret`` refuses to be
    pickled (its resolver may hold credentials) and is not JSON; pydantic dumps it as its
    reference.
    """

    name: str
    resolver: ResolverLike

    def __init__(self, name: str, *, resolver: ResolverLike | None = None) -> None:
        if not valid_name(name):
            raise ConfigurationError(
                "name",
                name,
                "must start with a letter or '_' and hold only letters, digits and _ . / - "
                "(at most 128 characters)",
            )
        resolver = EnvResolver() if resolver is None else resolver
        if not (isinstance(resolver, SecretResolver) or callable(resolver)):
            raise ConfigurationError(
                "resolver", type(resolver).__name__, "must be a SecretResolver or a callable"
            )
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "resolver", resolver)

    @classmethod
    def env(cls, name: str, *, variable: str | None = None) -> Secret:
        """The secret in the environment variable ``variable`` (default: ``name``)."""
        return cls(name, resolver=EnvResolver(variable=variable))

    @property
    def reference(self) -> str:
        """``{{secret:NAME}}``: how the model, the stores and the traces name this secret."""
        return reference(self.name)

    def __str__(self) -> str:
        return self.reference

    def __repr__(self) -> str:
        return f"Secret({self.name!r}, resolver={type(self.resolver).__name__})"

    def __reduce_ex__(self, protocol: object) -> Any:
        raise TypeError(
            f"Secret {self.name!r} cannot be pickled (its resolver may hold credentials): "
            "declare it again where it is used"
        )

    def __copy__(self) -> Secret:
        return self

    def __deepcopy__(self, memo: object) -> Secret:
        return self

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        # In a pydantic model a Secret stays a Secret and dumps as its reference.
        return core_schema.is_instance_schema(
            cls,
            serialization=core_schema.plain_serializer_function_ser_schema(
                lambda s: s.reference, when_used="always"
            ),
        )

    async def resolve(self) -> str:
        """The value, from the resolver, now; :class:`SecretUnavailableError` naming the
        secret (never a value) when the resolver fails or returns no text."""
        resolver = self.resolver
        call = resolver.resolve if isinstance(resolver, SecretResolver) else resolver
        try:
            value = call(self.name)
            if inspect.isawaitable(value):
                value = await value
        except SecretUnavailableError:
            raise
        except Exception as exc:
            why = redact(f"{type(exc).__name__}: {exc}")
            raise SecretUnavailableError(self.name, f"its resolver failed ({why})") from None
        if not isinstance(value, str) or not value:
            raise SecretUnavailableError(
                self.name, f"its resolver returned {type(value).__name__}, not a non-empty string"
            )
        remember_secret(value, self.name)
        return value


def _walk_text(value: Any, fn: Callable[[str], str]) -> Any:
    """``value`` (JSON-like) with ``fn`` applied to every string, keys included: the very
    same object where nothing changed (a tool's large answer is not copied for nothing),
    a copy of the changed parts otherwise."""
    if isinstance(value, str):
        out = fn(value)
        return value if out == value else out
    if isinstance(value, Mapping):
        items = [
            ((fn(k) if isinstance(k, str) else k), _walk_text(v, fn)) for k, v in value.items()
        ]
        if all(k is k0 or k == k0 for (k, _), k0 in zip(items, value, strict=True)) and all(
            v is v0 for (_, v), v0 in zip(items, value.values(), strict=True)
        ):
            return value
        return dict(items)
    if isinstance(value, list | tuple):
        walked = [_walk_text(v, fn) for v in value]
        if all(v is v0 for v, v0 in zip(walked, value, strict=True)):
            return value
        return walked
    return value


def references_in(value: Any) -> list[str]:
    """The secret names referred to anywhere in a JSON-like value, each once, in order."""
    names: list[str] = []

    def collect(text: str) -> str:
        names.extend(REFERENCE.findall(text))
        return text

    _walk_text(value, collect)
    return list(dict.fromkeys(names))


def substitute(value: Any, values: Mapping[str, str]) -> Any:
    """A copy of a JSON-like value with each ``{{secret:NAME}}`` replaced by
    ``values[NAME]``; references to names not in ``values`` stay as they are."""

    def fill(text: str) -> str:
        if "{{secret:" not in text:
            return text
        return REFERENCE.sub(lambda m: values.get(m.group(1), m.group(0)), text)

    return _walk_text(value, fill)


class RunSecrets:
    """One run's secrets: the declared ones by name, and those found in its free text.

    :meth:`adopt` replaces the secrets the detectors find (and the values this run has
    resolved) by references, remembering each found value under a fresh name
    (``detected_1``, ...); :meth:`resolve` gives the values of the names a call refers
    to. The found values live only in this object: a run recovered in another process
    cannot use them, and ends with ``secret_unavailable`` if it tries.
    """

    def __init__(self, declared: Iterable[Secret] = ()) -> None:
        self._declared: dict[str, Secret] = {}
        for secret in declared:
            if not isinstance(secret, Secret):
                raise ConfigurationError("secrets", secret, "must hold Secret values")
            if secret.name in self._declared:
                raise ConfigurationError("secrets", secret.name, "names a secret twice")
            self._declared[secret.name] = secret
        self._detected: dict[str, str] = {}  # name -> value
        self._names: dict[str, str] = {}  # value -> name, for every value this run holds

    @property
    def declared(self) -> tuple[Secret, ...]:
        return tuple(self._declared.values())

    def __repr__(self) -> str:
        return f"RunSecrets(declared={list(self._declared)}, detected={len(self._detected)})"

    def _name_for(self, value: str) -> str:
        name = self._names.get(value)
        if name is None:
            n = len(self._detected) + 1
            while f"detected_{n}" in self._declared or f"detected_{n}" in self._detected:
                n += 1
            name = f"detected_{n}"
            self._detected[name] = value
            self._names[value] = name
            # Remembered process-wide only where the detectors would miss it alone (the
            # value of a query's api_key=...); an API key's own form is caught anywhere as
            # it is, and every export then reads the same "[redacted]" whichever run saw it.
            if not self_evident(value):
                remember_secret(value, name)
        return name

    def adopt_text(self, text: str) -> str:
        """``text`` with this run's secret values and every detected secret as references."""
        for value in detected_secrets(text):
            if len(value) >= MIN_KNOWN_LENGTH:
                self._name_for(value)
        # Longest first, so a value that contains another is replaced whole.
        for value in sorted(self._names, key=len, reverse=True):
            if value in text:
                text = text.replace(value, reference(self._names[value]))
        return text

    def adopt(self, value: Any) -> Any:
        """:meth:`adopt_text` on every string of a JSON-like value (a copy)."""
        return _walk_text(value, self.adopt_text)

    async def resolve(self, names: Iterable[str]) -> dict[str, str]:
        """The value of each name; :class:`SecretUnavailableError` for the first that has
        none (an unknown name, a detected secret this run never saw, a failed resolver)."""
        values: dict[str, str] = {}
        for name in names:
            if name in self._detected:
                values[name] = self._detected[name]
                continue
            secret = self._declared.get(name)
            if secret is None:
                known = sorted(self._declared)
                raise SecretUnavailableError(
                    name,
                    "no secret of that name is declared for this run "
                    f"(declared: {known}; a secret found in a task's text is known only to "
                    "the run that read it)",
                )
            value = await secret.resolve()
            self._names.setdefault(value, name)
            values[name] = value
        return values

    def prompt_note(self) -> str:
        """What the model is told about the declared secrets (empty without any)."""
        if not self._declared:
            return ""
        refs = ", ".join(s.reference for s in self._declared.values())
        return (
            f"Secrets you may pass as tool arguments: {refs}. Write the reference exactly as "
            "shown; its value is filled in when the tool runs and is never shown to you."
        )
