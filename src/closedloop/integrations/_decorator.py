"""``@controlled``: sensing, a PID and scheduled retries around any callable, unchanged.

::

    @controlled(key_fields=["city", "temperature"])
    async def ask_weather(city: str, *, control: ControlContext | None = None) -> str:
        system = control.prompt() if control else ""
        ...

Each call runs the attempt loop of ``_engine``: the function's result is scored by the
metric, the function's PID (or the PID of the key its arguments map to) turns the error
into actuator settings, and a failed attempt is retried after the scheduled delay while
the settings allow it. A function that declares the context parameter (``control`` by
default) receives the :class:`ControlContext` of each attempt and can tighten its prompt
as the rigour rises. ``wrapped.controller`` is the :class:`ControlLoop`; its ``history``
holds e, u and the settings of every attempt.

Sync functions stay sync (their retries sleep through ``sleep``, default ``time.sleep``);
async functions stay async (``sleep`` default ``asyncio.sleep``, which may also be given
as a sync function). Only async attempts can be cut off at the scheduled timeout
(``enforce_timeout=True``): a sync call cannot be interrupted safely, so it gets the
timeout in its context to apply to its own I/O.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Sequence
from typing import (
    Any,
    Generic,
    ParamSpec,
    Protocol,
    Self,
    TypedDict,
    TypeVar,
    Unpack,
    cast,
    overload,
)

from .._exceptions import ConfigurationError
from ..control import ActuatorSchedule
from ._engine import (
    Attempts,
    RetryOn,
    RetryPlan,
    awaitable_sleep,
    run_async,
    run_sync,
    to_retry_predicate,
)
from ._loop import DEFAULT_GAINS, ControlContext, ControlLoop
from ._metrics import Invocation, Metric, as_sensor, json_metric

__all__ = ["Controlled", "controlled"]

P = ParamSpec("P")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)
P_inner = ParamSpec("P_inner")

KeyFn = Callable[..., str]


class Controlled(Protocol, Generic[P, R_co]):
    """A callable wrapped by :func:`controlled`: same signature, plus its controller.

    On a class, ``Client.method`` is the wrapper itself (with ``controller``) and
    ``Client().method`` is the bound method.
    """

    controller: ControlLoop
    control_key: str | KeyFn
    __name__: str
    __qualname__: str
    __wrapped__: Callable[..., Any]

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R_co: ...

    @overload
    def __get__(self, instance: None, owner: type[Any] | None = None) -> Self: ...

    @overload
    def __get__(self, instance: object, owner: type[Any] | None = None) -> Callable[..., R_co]: ...


def is_async(fn: Callable[..., Any]) -> bool:
    """Whether calling ``fn`` gives a coroutine (an async function or async ``__call__``)."""
    if inspect.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - an instance with async __call__
    return call is not None and inspect.iscoroutinefunction(call)


def accepts(fn: Callable[..., Any], name: str | None) -> bool:
    """Whether ``fn`` takes a keyword argument ``name`` (the attempt's context)."""
    if name is None:
        return False
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    param = params.get(name)
    return param is not None and param.kind in (
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
        inspect.Parameter.KEYWORD_ONLY,
    )


def build_loop(
    controller: ControlLoop | None,
    gains: tuple[float, float, float] | None,
    tolerance: float | None,
    schedule: ActuatorSchedule | None,
) -> ControlLoop:
    """The shared ``controller``, or a new loop from ``gains``, ``tolerance``, ``schedule``."""
    if controller is None:
        return ControlLoop(
            gains=DEFAULT_GAINS if gains is None else gains,
            tolerance=0.1 if tolerance is None else tolerance,
            schedule=schedule,
        )
    if not isinstance(controller, ControlLoop):
        raise ConfigurationError("controller", controller, "must be a ControlLoop")
    for name, value in (("gains", gains), ("tolerance", tolerance), ("schedule", schedule)):
        if value is not None:
            raise ConfigurationError(
                name, value, "configure the shared controller instead (controller= given)"
            )
    return controller


def checked_metric(
    metric: Metric | None, key_fields: Sequence[str] | None, schema: Any, *, name: str = "metric"
) -> Metric | None:
    """``metric``, or the :func:`json_metric` of ``key_fields``/``schema``; not both."""
    if key_fields is None and schema is None:
        return metric
    if metric is not None:
        raise ConfigurationError(name, metric, f"give either {name} or key_fields/schema, not both")
    return json_metric(() if key_fields is None else key_fields, schema)


class ControlOptions(TypedDict, total=False):
    """The options every controlled wrapper takes; each is described at :func:`controlled`.

    The decorator, the graph node and the runnable take them as keywords
    (``**options: Unpack[ControlOptions]``), so the three can never disagree on a name,
    a type or a default.
    """

    metric: Metric | None
    key_fields: Sequence[str] | None
    schema: Any
    controller: ControlLoop | None
    gains: tuple[float, float, float] | None
    tolerance: float | None
    schedule: ActuatorSchedule | None
    retry_on: RetryOn | None
    retry_above: float
    max_attempts: int
    clock: Callable[[], float] | None
    enforce_timeout: bool


def build_plan(options: ControlOptions, *, caller: str) -> RetryPlan:
    """Validate the shared options; defaults: retries above 0.5, at most 10 attempts."""
    unknown = sorted(set(options) - ControlOptions.__optional_keys__)
    if unknown:  # the TypeError Python raises for a keyword the signature lacks
        raise TypeError(f"{caller}() got an unexpected keyword argument {unknown[0]!r}")
    loop = build_loop(
        options.get("controller"),
        options.get("gains"),
        options.get("tolerance"),
        options.get("schedule"),
    )
    metric = checked_metric(options.get("metric"), options.get("key_fields"), options.get("schema"))
    clock = options.get("clock")
    return RetryPlan(
        loop=loop,
        sensor=as_sensor(metric),
        retry_if=to_retry_predicate(options.get("retry_on")),
        retry_above=options.get("retry_above", 0.5),
        max_attempts=options.get("max_attempts", 10),
        clock=time.monotonic if clock is None else clock,
        enforce_timeout=options.get("enforce_timeout", False),
    )


def key_resolver(key: str | KeyFn | None, fn: Callable[..., Any]) -> Callable[..., str]:
    """``key`` as a function of the call's arguments; default: the function's name."""
    if key is None:
        qualname = getattr(fn, "__qualname__", None) or type(fn).__qualname__
        name = f"{getattr(fn, '__module__', None) or type(fn).__module__}.{qualname}"
        return lambda *args, **kwargs: name
    if isinstance(key, str):
        fixed = key
        return lambda *args, **kwargs: fixed
    if callable(key):
        return key
    raise ConfigurationError("key", key, "must be a str or a function of the call's arguments")


Prepare = Callable[[tuple[Any, ...], dict[str, Any]], tuple[str, Invocation]]
CallKwargs = Callable[[dict[str, Any], ControlContext], dict[str, Any]]
Finish = Callable[[str, Attempts[Any]], Any]


def attempt_wrapper(
    fn: Callable[..., Any],
    *,
    plan: RetryPlan,
    sleep: Callable[[float], Any] | None,
    prepare: Prepare,
    call_kwargs: CallKwargs,
    finish: Finish,
) -> Callable[..., Any]:
    """``fn`` (sync or async, it stays so) with every call run by the attempt loop.

    ``prepare`` names the call's key and what the metric sees, ``call_kwargs`` adds the
    attempt's context to the arguments, ``finish`` turns the attempts into the return value.
    """
    if is_async(fn):
        wait = awaitable_sleep(sleep)

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            key, invocation = prepare(args, kwargs)
            outcome = await run_async(
                plan, key, invocation, lambda ctx: fn(*args, **call_kwargs(kwargs, ctx)), wait
            )
            return finish(key, outcome)

        return async_wrapper
    pause = sleep if sleep is not None else time.sleep

    @functools.wraps(fn)
    def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
        key, invocation = prepare(args, kwargs)
        outcome = run_sync(
            plan, key, invocation, lambda ctx: fn(*args, **call_kwargs(kwargs, ctx)), pause
        )
        return finish(key, outcome)

    return sync_wrapper


def _wrap(
    fn: Callable[P, R],
    *,
    plan: RetryPlan,
    key: str | KeyFn | None,
    context_param: str | None,
    sleep: Callable[[float], Any] | None,
) -> Controlled[P, R]:
    if not callable(fn):
        raise ConfigurationError("fn", fn, "must be callable")
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise ConfigurationError("fn", fn, "a generator cannot be retried; wrap its consumer")
    if sleep is not None and not callable(sleep):
        raise ConfigurationError("sleep", sleep, "must be callable with seconds")
    if context_param is not None and not (
        isinstance(context_param, str) and context_param.isidentifier()
    ):
        raise ConfigurationError("context_param", context_param, "must be a parameter name")
    resolve_key = key_resolver(key, fn)
    inject = accepts(fn, context_param)
    if not is_async(fn) and sleep is not None and inspect.iscoroutinefunction(sleep):
        raise ConfigurationError("sleep", sleep, "must be a sync function for a sync callable")

    def prepare(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, Invocation]:
        if inject and context_param in kwargs:
            raise ConfigurationError(
                context_param, kwargs[context_param], "is supplied by @controlled; do not pass it"
            )
        k = resolve_key(*args, **kwargs)
        if not isinstance(k, str):
            raise ConfigurationError("key", k, "the key function must return a str")
        return k, Invocation(args, dict(kwargs))

    def with_context(kwargs: dict[str, Any], ctx: ControlContext) -> dict[str, Any]:
        if not inject:
            return kwargs
        assert context_param is not None
        return {**kwargs, context_param: ctx}

    wrapper = attempt_wrapper(
        fn,
        plan=plan,
        sleep=sleep,
        prepare=prepare,
        call_kwargs=with_context,
        finish=lambda _key, outcome: outcome.result,
    )
    controlled_fn = cast(Any, wrapper)
    controlled_fn.controller = plan.loop
    controlled_fn.control_key = key if key is not None else resolve_key()
    return cast(Controlled[P, R], controlled_fn)


@overload
def controlled(fn: Callable[P, R], /) -> Controlled[P, R]: ...


@overload
def controlled(
    fn: None = None,
    /,
    *,
    key: str | KeyFn | None = None,
    sleep: Callable[[float], Any] | None = None,
    context_param: str | None = "control",
    **options: Unpack[ControlOptions],
) -> Callable[[Callable[P_inner, R]], Controlled[P_inner, R]]: ...


def controlled(
    fn: Callable[P, R] | None = None,
    /,
    *,
    key: str | KeyFn | None = None,
    sleep: Callable[[float], Any] | None = None,
    context_param: str | None = "control",
    **options: Unpack[ControlOptions],
) -> Controlled[P, R] | Callable[[Callable[P_inner, R]], Controlled[P_inner, R]]:
    """Put a callable (sync or async) under closed-loop control.

    Usable bare (``@controlled``) or with options (``@controlled(key_fields=[...])``).

    Args:
        metric: ``metric(result)`` or ``metric(result, invocation) -> e ∈ [0, 1]``; default
            :func:`default_metric` (empty answers score high). Values outside ``[0, 1]`` are
            clipped and noted in the record; NaN raises ``ConfigurationError``.
        key_fields, schema: instead of ``metric``, check structured answers with
            :func:`json_metric` (JSON recovered from text, schema, required fields).
        key: the PID's key: a str, or ``key(*args, **kwargs) -> str`` for one PID per
            kind of call; default the function's qualified name.
        controller: a shared :class:`ControlLoop` (then leave gains/tolerance/schedule
            unset); otherwise a new one with ``gains``, ``tolerance``, ``schedule``.
        retry_on: exception classes, a predicate on the exception, or a retry condition
            of :mod:`closedloop.policy` (``retry_if_exception_type(OSError)``); default
            every ``Exception`` but programming errors.
        retry_above: a result whose error exceeds this is a failed attempt.
        max_attempts: a hard cap on attempts per call, whatever the schedule says.
        sleep: how to wait before a retry (seconds); tests pass a recorder.
        clock: measures attempt latencies for the records (default ``time.monotonic``).
        enforce_timeout: cancel async attempts after the scheduled timeout.
        context_param: the parameter that receives the :class:`ControlContext`, if the
            function declares it; ``None`` never passes one.
    """
    plan = build_plan(options, caller="controlled")

    def decorate(target: Callable[P_inner, R]) -> Controlled[P_inner, R]:
        return _wrap(target, plan=plan, key=key, context_param=context_param, sleep=sleep)

    if fn is None:
        return decorate
    return _wrap(fn, plan=plan, key=key, context_param=context_param, sleep=sleep)
