"""``ClosedLoopMiddleware``: the control loop at the API gateway (ASGI middleware).

Pure ASGI, so it streams: the response passes through chunk by chunk and is never held
back. Per request it

1. picks the route's key (the route template where the app has a Starlette router);
2. hands the settings in force to the handler as ``scope["state"]["closedloop"]`` (read
   ``request.state.closedloop`` in FastAPI) and to the client as ``x-closedloop-*``
   response headers;
3. after the last body chunk, measures the error as the worst of three parts: the status
   (:func:`status_error`), the latency against a target (``latency_target_s``, or the
   route's dynamic timeout from its :class:`~closedloop.control.LatencyTracker`), and,
   when ``key_fields``/``schema``/``body_metric`` is given, the JSON body of a 2xx
   response (a copy of at most ``max_body_bytes`` is kept while the chunks go out);
4. updates the route's PID once, so the *next* request gets the new settings.

The headers carry the settings the handler saw, not the ones this response leads to: they
go out before the body has been measured, which is the price of streaming.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any, TypeAlias

from .._exceptions import ConfigurationError
from .._validation import require_int_at_least, require_positive
from ..control import ActuatorSchedule, LatencyTracker
from ._decorator import build_loop, checked_metric
from ._loop import ControlContext, ControlLoop, ControlRecord
from ._metrics import Invocation, Metric, as_sensor, check_error, status_error

__all__ = ["ASGIApp", "ClosedLoopMiddleware", "default_route_key"]

Scope: TypeAlias = MutableMapping[str, Any]
Message: TypeAlias = MutableMapping[str, Any]
Receive: TypeAlias = Callable[[], Awaitable[Message]]
Send: TypeAlias = Callable[[Message], Awaitable[None]]
ASGIApp: TypeAlias = Callable[[Scope, Receive, Send], Awaitable[None]]

_FULL_MATCH = 2  # starlette.routing.Match.FULL; compared by value to avoid the import
_PARTIAL_MATCH = 1
_NO_BODY_STATUSES = frozenset({204, 205, 304})


def default_route_key(scope: Scope) -> str:
    """``"GET /items/{item_id}"``: the method and the route template that will handle it.

    The template comes from the Starlette/FastAPI app in ``scope["app"]`` (one PID per
    route, not per URL). Without a router the raw path is used; a request that no route
    matches goes to ``"<METHOD> <unmatched>"`` so scanners cannot create keys at will.
    """
    method = str(scope.get("method", "GET"))
    routes = getattr(scope.get("app"), "routes", None)
    if routes is None:
        return f"{method} {scope.get('path', '')}"
    partial: str | None = None
    for route in routes:
        matches = getattr(route, "matches", None)
        if matches is None:
            continue
        try:
            match, _ = matches(scope)
        except Exception:  # a route that cannot judge this scope does not match it
            continue
        level = getattr(match, "value", match)
        path = getattr(route, "path", None)
        if not isinstance(path, str):
            continue
        if level == _FULL_MATCH:
            return f"{method} {path}"
        if level == _PARTIAL_MATCH and partial is None:
            partial = path
    return f"{method} {partial if partial is not None else '<unmatched>'}"


class ClosedLoopMiddleware:
    """ASGI middleware: a PID per route, fed by status, latency and body checks.

    Args:
        app: the ASGI app to wrap (``app.add_middleware(ClosedLoopMiddleware, ...)``).
        controller: a shared :class:`ControlLoop` to observe from outside; otherwise a new
            one from ``gains``, ``tolerance`` and ``schedule``.
        key_fields, schema: check the JSON body of 2xx responses (:func:`json_metric`).
        body_metric: or any metric over the body text (one or two arguments; the
            second is the :class:`Invocation` with the scope as its only argument).
        status_metric: status code → error (default :func:`status_error`).
        latency_target_s: the latency that counts as on time; the latency error is
            ``(latency − target) / target``, clipped. Default: the route's dynamic timeout.
        latency_tracker: builds the tracker of each route (default ``LatencyTracker()``).
        route_key: scope → key (default :func:`default_route_key`).
        include: scope → whether to control this request (default: every HTTP request).
        clock: seconds, for latencies (default ``time.monotonic``).
        header_prefix: prefix of the response headers.
        state_key: the key under ``scope["state"]`` that receives the context.
        max_body_bytes: the most body kept for the check; a larger body is not checked.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        controller: ControlLoop | None = None,
        gains: tuple[float, float, float] | None = None,
        tolerance: float | None = None,
        schedule: ActuatorSchedule | None = None,
        key_fields: Sequence[str] | None = None,
        schema: Any = None,
        body_metric: Metric | None = None,
        status_metric: Callable[[int], float] = status_error,
        latency_target_s: float | None = None,
        latency_tracker: Callable[[], LatencyTracker] = LatencyTracker,
        route_key: Callable[[Scope], str] = default_route_key,
        include: Callable[[Scope], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
        header_prefix: str = "x-closedloop-",
        state_key: str = "closedloop",
        max_body_bytes: int = 1 << 20,
    ) -> None:
        for name, fn in (
            ("app", app),
            ("status_metric", status_metric),
            ("latency_tracker", latency_tracker),
            ("route_key", route_key),
            ("clock", clock),
        ):
            if not callable(fn):
                raise ConfigurationError(name, fn, "must be callable")
        if include is not None and not callable(include):
            raise ConfigurationError("include", include, "must be callable")
        self.app = app
        self.controller = build_loop(controller, gains, tolerance, schedule)
        body_metric = checked_metric(body_metric, key_fields, schema, name="body_metric")
        self._body_sensor = None if body_metric is None else as_sensor(body_metric, "body_metric")
        self.status_metric = status_metric
        self.latency_target_s = (
            None
            if latency_target_s is None
            else require_positive("latency_target_s", latency_target_s)
        )
        self._new_tracker = latency_tracker
        self.route_key = route_key
        self.include = include
        self.clock = clock
        if not isinstance(header_prefix, str) or not header_prefix.isascii():
            raise ConfigurationError("header_prefix", header_prefix, "must be an ASCII str")
        self.header_prefix = header_prefix.lower()
        if not isinstance(state_key, str) or not state_key:
            raise ConfigurationError("state_key", state_key, "must be a non-empty str")
        self.state_key = state_key
        self.max_body_bytes = require_int_at_least("max_body_bytes", max_body_bytes, 0)
        self._trackers: OrderedDict[str, LatencyTracker] = OrderedDict()

    def latency(self, key: str) -> LatencyTracker:
        """The latency tracker of a route key (created on first use)."""
        tracker = self._trackers.get(key)
        if tracker is None:
            tracker = self._new_tracker()
            if not isinstance(tracker, LatencyTracker):
                raise ConfigurationError("latency_tracker", tracker, "must build a LatencyTracker")
            self._trackers[key] = tracker
            # Bounded like the controller's PIDs, for route keys over unbounded paths.
            while len(self._trackers) > self.controller.max_keys:
                self._trackers.popitem(last=False)
        else:
            self._trackers.move_to_end(key)
        return tracker

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http" or (self.include is not None and not self.include(scope)):
            await self.app(scope, receive, send)
            return
        key = self.route_key(scope)
        if not isinstance(key, str):
            raise ConfigurationError("route_key", key, "must return a str")
        tracker = self.latency(key)
        base = self.controller.context(key)
        ctx = ControlContext(
            key=key,
            settings=base.settings,
            last_error=base.last_error,
            dynamic_timeout_s=tracker.dynamic_timeout(),
        )
        scope.setdefault("state", {})[self.state_key] = ctx
        ours = [
            (name.encode("latin-1"), value.encode("latin-1"))
            for name, value in ctx.headers(self.header_prefix)
        ]
        our_names = {name for name, _ in ours}
        exchange = _Exchange(
            check_body=self._body_sensor is not None and scope.get("method") != "HEAD",
            limit=self.max_body_bytes,
        )
        start = self.clock()

        async def send_wrapper(message: Message) -> None:
            kind = message.get("type")
            if kind == "http.response.start":
                exchange.start(message)
                kept = [
                    h for h in message.get("headers", ()) if bytes(h[0]).lower() not in our_names
                ]
                message = {**message, "headers": [*kept, *ours]}
            elif kind == "http.response.body":
                exchange.body(message.get("body", b""))
                if not message.get("more_body", False):
                    exchange.end = self.clock()
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        except Exception as exc:
            exchange.exception = f"{type(exc).__name__}: {exc}"
            self._finish(key, scope, tracker, exchange, start)
            raise
        # A cancelled request (client gone, server shutting down) measures nothing about
        # the route, so BaseExceptions pass through without an update.
        self._finish(key, scope, tracker, exchange, start)

    def _finish(
        self, key: str, scope: Scope, tracker: LatencyTracker, exchange: _Exchange, start: float
    ) -> None:
        end = exchange.end if exchange.end is not None else self.clock()
        self._measure(key, scope, tracker, exchange, max(0.0, end - start))

    def _measure(
        self,
        key: str,
        scope: Scope,
        tracker: LatencyTracker,
        exchange: _Exchange,
        latency: float,
    ) -> ControlRecord:
        notes: list[str] = []
        parts: dict[str, float] = {}
        if exchange.exception is not None or exchange.status is None:
            parts["status"] = 1.0
            notes.append(exchange.exception or "no response was started")
        else:
            value, note = check_error(self.status_metric(exchange.status), "status_metric")
            parts["status"] = value
            if note:
                notes.append(note)
        target = (
            self.latency_target_s
            if self.latency_target_s is not None
            else tracker.dynamic_timeout()
        )
        parts["latency"] = min(1.0, max(0.0, (latency - target) / target)) if target > 0 else 0.0
        tracker.record(latency)
        status = exchange.status
        if (
            self._body_sensor is not None
            and exchange.exception is None
            and status is not None
            and 200 <= status < 300
            and status not in _NO_BODY_STATUSES
            and exchange.check_body
        ):
            if exchange.overflow:
                notes.append(f"body over max_body_bytes={self.max_body_bytes}; not checked")
            elif exchange.encoded:
                notes.append("content-encoded body; not checked")
            else:
                text = bytes(exchange.buffer).decode("utf-8", errors="replace")
                raw = self._body_sensor(text, Invocation((scope,)))
                value, note = check_error(raw, "body_metric")
                parts["body"] = value
                if note:
                    notes.append(note)
        error = max(parts.values())
        return self.controller.update(
            key,
            error,
            failed=error > 0.5,
            exception=exchange.exception,
            latency_s=latency,
            note="; ".join(notes) or None,
            parts=parts,
        )

    def __repr__(self) -> str:
        return f"ClosedLoopMiddleware(app={self.app!r}, controller={self.controller!r})"


class _Exchange:
    """What the middleware saw of one response."""

    __slots__ = (
        "buffer",
        "check_body",
        "encoded",
        "end",
        "exception",
        "limit",
        "overflow",
        "status",
    )

    def __init__(self, *, check_body: bool, limit: int) -> None:
        self.check_body = check_body
        self.limit = limit
        self.status: int | None = None
        self.encoded = False
        self.overflow = False
        self.buffer = bytearray()
        self.end: float | None = None
        self.exception: str | None = None

    def start(self, message: Message) -> None:
        self.status = int(message["status"])
        for name, value in message.get("headers", ()):
            if bytes(name).lower() == b"content-encoding" and bytes(value).lower() not in (
                b"identity",
                b"",
            ):
                self.encoded = True

    def body(self, chunk: bytes) -> None:
        if not self.check_body or self.overflow or self.encoded:
            return
        if len(self.buffer) + len(chunk) > self.limit:
            self.overflow = True
            self.buffer.clear()
            return
        self.buffer.extend(chunk)
