"""The action contract: what must hold before and after an action touches the world."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from .._exceptions import (
    ActionTimeoutError,
    ConfigurationError,
    PostconditionFailedError,
    PreconditionFailedError,
)
from .._policy import RetryPolicy
from .._validation import require_positive
from ._effect import EffectClass, EffectRecord
from ._secret import substitute

__all__ = [
    "AtomicAction",
    "CheckFn",
    "Compensation",
    "Condition",
    "Confirmation",
    "Reconciler",
    "Reconciliation",
]

ConditionResult: TypeAlias = bool | str
CheckFn: TypeAlias = Callable[
    [Any, Mapping[str, Any]], ConditionResult | Awaitable[ConditionResult]
]
"""A condition check. Preconditions get ``(args, state)``, postconditions ``(result, args)``.
``True`` passes; ``False`` or a reason string fails."""

Compensation: TypeAlias = Callable[[Mapping[str, Any], Any], Any]
"""Undoes an effect; receives the arguments and the result. May be async."""


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """A reconciler's answer about a pending effect: did it reach the world?"""

    applied: bool
    result: Any = None

    @classmethod
    def was_applied(cls, result: Any = None) -> Reconciliation:
        """The effect reached the world; ``result`` is recorded as its result."""
        return cls(True, result)

    @classmethod
    def not_applied(cls) -> Reconciliation:
        """The effect never happened; it may be run again."""
        return cls(False)


Reconciler: TypeAlias = Callable[
    [Mapping[str, Any], EffectRecord], Reconciliation | Awaitable[Reconciliation]
]
"""Asks the outside world whether a pending effect happened; receives the stored arguments
and the ledger record (whose ``key`` is the idempotency key)."""


@dataclass(frozen=True, slots=True)
class Confirmation:
    """A human's approval for an action that requires one.

    ``action`` binds the approval to one action name; ``None`` approves whatever it is
    passed with.
    """

    approved_by: str
    action: str | None = None
    note: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.approved_by, str) or not self.approved_by.strip():
            raise ConfigurationError("approved_by", self.approved_by, "must name who approved")

    def covers(self, action: str) -> bool:
        """Whether this confirmation approves ``action`` (one that names no action approves any)."""
        return self.action is None or self.action == action


@dataclass(frozen=True, slots=True)
class Condition:
    """A named check. Any exception inside ``check`` counts as a failure (fail closed)."""

    name: str
    check: CheckFn

    async def failure(self, first: Any, second: Mapping[str, Any]) -> str | None:
        """The reason this condition fails, or ``None`` when it holds."""
        try:
            verdict = self.check(first, second)
            if inspect.isawaitable(verdict):
                verdict = await verdict
        except Exception as exc:
            return f"{self.name}: raised {type(exc).__name__}: {exc}"
        if verdict is True:
            return None
        if verdict is False:
            return f"{self.name}: is false"
        if isinstance(verdict, str):
            return f"{self.name}: {verdict}"
        raise ConfigurationError(
            self.name, verdict, "a condition must return a bool or a reason string"
        )


def _conditions(kind: str, items: Sequence[Condition | CheckFn]) -> tuple[Condition, ...]:
    out: list[Condition] = []
    for index, item in enumerate(items):
        if isinstance(item, Condition):
            out.append(item)
        elif callable(item):
            name = getattr(item, "__name__", "")
            if not name or name == "<lambda>":
                name = f"{kind}[{index}]"
            out.append(Condition(name, item))
        else:
            raise ConfigurationError(f"{kind}s[{index}]", item, "must be a Condition or callable")
    return tuple(out)


def _is_async_callable(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - callable objects with async __call__
    )


async def call_maybe_async(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Await ``fn``'s result if it is awaitable; sync functions run inline."""
    result = fn(*args, **kwargs)
    if inspect.isawaitable(result):
        result = await result
    return result


@dataclass(frozen=True, slots=True, kw_only=True)
class AtomicAction:
    """One operation on the world, with its contract: checks, timeout, retries, compensation.

    ``fn`` is called as ``fn(**args)``; it may be sync (run in a worker thread so a timeout
    can stop waiting for it) or async (cancelled on timeout). ``preconditions`` are checked
    before anything runs; ``postconditions`` check the result, and a failure runs
    ``compensation(args, result)``. ``effect`` decides whether a retry may repeat the call:
    ``once`` and ``irreversible`` effects run only through an :class:`EffectLedger`.
    ``reconciler`` lets the ledger resolve a pending effect after a crash.

    When ``fn`` raises, a ledgered effect is taken as not applied, except for a timeout and
    the ``uncertain_errors`` (say, a connection dropped after the request was sent): those
    leave the effect pending until a reconciler or a human says what happened.
    """

    name: str
    fn: Callable[..., Any]
    effect: EffectClass = EffectClass.RECOMPUTABLE
    preconditions: Sequence[Condition | CheckFn] = ()
    postconditions: Sequence[Condition | CheckFn] = ()
    timeout_s: float | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    compensation: Compensation | None = None
    reconciler: Reconciler | None = None
    requires_confirmation: bool = False
    volatile_fields: frozenset[str] = frozenset()
    uncertain_errors: tuple[type[Exception], ...] = ()
    description: str = ""
    secret_fill: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = field(
        default=None, repr=False, compare=False
    )
    """Fills secret references into the arguments just before ``fn`` (and the
    compensation) runs: set per call by :meth:`with_secret_values`, never by hand."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or "/" in self.name:
            raise ConfigurationError("name", self.name, "must be a non-empty string without '/'")
        if not callable(self.fn):
            raise ConfigurationError("fn", self.fn, "must be callable")
        try:
            effect = EffectClass(self.effect)
        except ValueError:
            raise ConfigurationError(
                "effect", self.effect, f"must be one of {[e.value for e in EffectClass]}"
            ) from None
        object.__setattr__(self, "effect", effect)
        if self.timeout_s is not None:
            object.__setattr__(self, "timeout_s", require_positive("timeout_s", self.timeout_s))
        if not isinstance(self.retry, RetryPolicy):
            raise ConfigurationError("retry", self.retry, "must be a RetryPolicy")
        for name in ("compensation", "reconciler"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise ConfigurationError(name, value, "must be callable or None")
        object.__setattr__(self, "preconditions", _conditions("precondition", self.preconditions))
        object.__setattr__(
            self, "postconditions", _conditions("postcondition", self.postconditions)
        )
        object.__setattr__(self, "volatile_fields", frozenset(self.volatile_fields))
        errors = tuple(self.uncertain_errors)
        for kind in errors:
            if not (isinstance(kind, type) and issubclass(kind, Exception)):
                raise ConfigurationError("uncertain_errors", kind, "must be Exception classes")
        if ActionTimeoutError not in errors:
            errors = (ActionTimeoutError, *errors)
        object.__setattr__(self, "uncertain_errors", errors)

    def with_retry(self, policy: RetryPolicy) -> AtomicAction:
        """The same action with another retry policy (the controller's actuator)."""
        return dataclasses.replace(self, retry=policy)

    def with_timeout(self, timeout_s: float | None) -> AtomicAction:
        """The same action with another timeout."""
        if timeout_s is not None:
            timeout_s = require_positive("timeout_s", timeout_s)
        return self._copy_with(timeout_s=timeout_s)

    def _copy_with(self, **changes: Any) -> AtomicAction:
        """This action with ``changes``, already checked, and every other field as it is.

        Not ``dataclasses.replace``: that runs ``__post_init__`` again over fields checked
        and normalised when this action was made, and a tool call copies its action for
        its timeout on every step.
        """
        if type(self) is not AtomicAction:  # a subclass's __post_init__ may derive more
            return dataclasses.replace(self, **changes)
        copy = object.__new__(AtomicAction)
        for name in self.__dataclass_fields__:
            value = changes[name] if name in changes else getattr(self, name)
            object.__setattr__(copy, name, value)
        return copy

    def with_secret_values(self, values: Mapping[str, str]) -> AtomicAction:
        """The same action for one call whose ``{{secret:NAME}}`` references ``fn``, the
        compensation and the reconciler receive filled in from ``values``. Everything
        else (conditions, the ledger, the outcome) keeps seeing the references."""
        if not values:
            return self
        held = dict(values)

        def fill(args: Mapping[str, Any]) -> Mapping[str, Any]:
            filled: Mapping[str, Any] = substitute(args, held)
            return filled

        reconciler = self.reconciler
        if reconciler is not None:
            inner = reconciler

            def reconciler(args: Mapping[str, Any], record: EffectRecord) -> Any:
                return inner(fill(args), record)

        return dataclasses.replace(self, secret_fill=fill, reconciler=reconciler)

    @property
    def compensation_name(self) -> str | None:
        if self.compensation is None:
            return None
        return getattr(self.compensation, "__qualname__", None) or repr(self.compensation)

    async def check_preconditions(
        self, args: Mapping[str, Any], state: Mapping[str, Any] | None = None
    ) -> None:
        """Raise :class:`PreconditionFailedError` naming the first failing precondition."""
        for condition in self.preconditions:
            assert isinstance(condition, Condition)  # normalised in __post_init__
            reason = await condition.failure(args, state or {})
            if reason is not None:
                raise PreconditionFailedError(f"action {self.name!r}: precondition {reason}")

    async def postcondition_failure(self, result: Any, args: Mapping[str, Any]) -> str | None:
        """The first failing postcondition's reason, or ``None``."""
        for condition in self.postconditions:
            assert isinstance(condition, Condition)
            reason = await condition.failure(result, args)
            if reason is not None:
                return f"action {self.name!r}: postcondition {reason}"
        return None

    async def invoke(self, args: Mapping[str, Any]) -> Any:
        """Run ``fn(**args)`` once under the timeout; raise :class:`ActionTimeoutError`."""
        if self.secret_fill is not None:
            args = self.secret_fill(args)  # the values exist only inside this call
        if _is_async_callable(self.fn):
            call: Awaitable[Any] = self.fn(**args)
        else:
            call = _thread_call(self.fn, args)
        if self.timeout_s is None:
            return await call
        deadline = asyncio.timeout(self.timeout_s)
        try:
            async with deadline:
                return await call
        except TimeoutError as exc:
            if not deadline.expired():
                raise  # the action's own TimeoutError, not ours
            raise ActionTimeoutError(
                f"action {self.name!r} ran past its timeout of {self.timeout_s:g} s"
            ) from exc

    async def compensate(self, args: Mapping[str, Any], result: Any) -> None:
        """Run the compensation, if any."""
        if self.compensation is not None:
            if self.secret_fill is not None:
                args = self.secret_fill(args)
            await call_maybe_async(self.compensation, args, result)

    def postcondition_error(self, reason: str, compensated: bool | None) -> Exception:
        """The error a postcondition failure raises, saying what happened to compensation."""
        what = {
            True: "compensation ran",
            False: "compensation FAILED",
            None: "no compensation defined",
        }[compensated]
        return PostconditionFailedError(f"{reason} ({what})")


async def _thread_call(fn: Callable[..., Any], args: Mapping[str, Any]) -> Any:
    # A sync callable cannot be cancelled; a thread at least lets the timeout stop waiting.
    result = await asyncio.to_thread(lambda: fn(**args))
    if inspect.isawaitable(result):
        result = await result
    return result
