"""HTTP plumbing: one error shape, readable 422s, a body-size gate, request metrics, log redaction.

Every error the API returns is ``{"error": code, "detail": text}``. Validation errors
list each problem as ``where: what`` and never echo the value that was sent (it may be
a secret pasted in the wrong field).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .._redaction import redact
from ._metrics import ServiceMetrics

__all__ = [
    "ApiError",
    "BodyLimitMiddleware",
    "MetricsMiddleware",
    "RedactingFilter",
    "error_response",
    "http_exception_handler",
    "install_log_redaction",
    "method_label",
    "model_unavailable_handler",
    "readable_errors",
    "validation_response",
]

_log = logging.getLogger("closedloop.server")


class ApiError(Exception):
    """An error answered as ``{"error": code, "detail": detail}`` with ``status``, and
    ``problems`` (``[{"where", "problem"}]``) when given."""

    def __init__(
        self,
        status: int,
        code: str,
        detail: str,
        headers: Mapping[str, str] | None = None,
        problems: Sequence[Mapping[str, str]] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.headers = dict(headers or {})
        self.problems = None if problems is None else [dict(p) for p in problems]


def error_response(
    status: int,
    code: str,
    detail: str,
    headers: Mapping[str, str] | None = None,
    problems: Sequence[Mapping[str, str]] | None = None,
) -> JSONResponse:
    """The one error body."""
    body: dict[str, Any] = {"error": code, "detail": redact(detail)}
    if problems is not None:
        body["problems"] = redact([dict(p) for p in problems])
    return JSONResponse(body, status_code=status, headers=dict(headers or {}))


def readable_errors(errors: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """pydantic/FastAPI errors as ``{"where", "problem"}``, values left out."""
    out: list[dict[str, str]] = []
    for error in errors:
        loc = [str(part) for part in error.get("loc", ())]
        kind = str(error.get("type", ""))
        if kind == "json_invalid":
            where, problem = "body", "is not valid JSON"
            if len(loc) > 1:
                problem += f" (error near character {loc[1]})"
        else:
            where = ".".join(loc) or "body"
            problem = str(error.get("msg", "is invalid"))
            if kind == "missing":
                problem = "is required"
            elif kind == "extra_forbidden":
                problem = "is not a known field"
        out.append({"where": where, "problem": problem})
    return out


def validation_response(exc: RequestValidationError) -> JSONResponse:
    """422 with a one-line summary and the list of problems."""
    problems = readable_errors(exc.errors())
    summary = "; ".join(f"{p['where']}: {p['problem']}" for p in problems[:8])
    if len(problems) > 8:
        summary += f"; and {len(problems) - 8} more"
    return JSONResponse(
        {"error": "invalid_request", "detail": redact(summary), "problems": redact(problems)},
        status_code=422,
    )


# What the framework says when it cannot decode a body it was told is JSON; the decoder's
# own exception rides along as the cause.
_BODY_PARSE_FAILED = "There was an error parsing the body"


def unreadable_body_response(cause: BaseException | None) -> JSONResponse:
    """422 in the validation shape for a body that could not even be decoded."""
    if isinstance(cause, RecursionError):
        problem = "is nested too deeply to read"
    elif isinstance(cause, UnicodeDecodeError):
        problem = "is not valid UTF-8"
    elif isinstance(cause, ValueError) and "digits" in str(cause):
        problem = "holds a number with too many digits to read"
    else:
        problem = "could not be read as JSON"
    problems = [{"where": "body", "problem": problem}]
    return JSONResponse(
        {"error": "invalid_request", "detail": f"body: {problem}", "problems": problems},
        status_code=422,
    )


async def api_error_handler(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.code, exc.detail, exc.headers, exc.problems)


async def model_unavailable_handler(_: Request, exc: Exception) -> JSONResponse:
    """503: the service is fine but its model is not on disk; the message names the pull."""
    return error_response(503, "model_unavailable", str(exc))


async def validation_handler(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return validation_response(exc)


async def http_exception_handler(_: Request, exc: Exception) -> JSONResponse:
    """The framework's own errors (no such route, method not allowed) in the one error shape.

    Wire with ``app.add_exception_handler(starlette.exceptions.HTTPException, ...)``.
    """
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400 and exc.detail == _BODY_PARSE_FAILED:
        return unreadable_body_response(exc.__cause__)
    codes = {404: "not_found", 405: "method_not_allowed"}
    detail = exc.detail if isinstance(exc.detail, str) else "request refused"
    return error_response(
        exc.status_code, codes.get(exc.status_code, "http_error"), detail, exc.headers
    )


async def unexpected_handler(request: Request, exc: Exception) -> JSONResponse:
    _log.error(
        "unhandled %s on %s %s: %s",
        type(exc).__name__,
        request.method,
        request.url.path,
        redact(str(exc)),
    )
    return error_response(500, "internal", "internal error; see the server log")


class _TooLarge(BaseException):
    # A BaseException, so the framework's "error parsing the body" handler (which catches
    # Exception) lets it through to the middleware that can answer 413.
    pass


class BodyLimitMiddleware:
    """Refuse request bodies over ``max_bytes`` with 413, declared or streamed."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > self.max_bytes or declared < 0:
                    await self._refuse(scope, receive, send)
                    return
        seen = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _TooLarge:
            if not started:
                await self._refuse(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = error_response(
            413, "too_large", f"request body over the limit of {self.max_bytes} bytes"
        )
        await response(scope, receive, send)


_BODY_METHODS = frozenset({b"POST", b"PUT", b"PATCH"})


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


class JsonBodyMiddleware:
    """Refuse a request body that is not declared JSON with 415 Unsupported Media Type
    (RFC 9110): the API reads JSON only, and a form or text body is the caller's mistake
    of media type, not a malformed request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope.get("method", "").encode() in _BODY_METHODS:
            headers = dict(scope.get("headers", ()))
            declared = headers.get(b"content-type", b"").decode("latin-1")
            # A declared length with no type, or any type but JSON; a streamed body with
            # no type is left to the size limit and the JSON decoder.
            sized = headers.get(b"content-length", b"0") not in (b"0", b"")
            if (declared or sized) and not _is_json(declared):
                got = declared or "no Content-Type"
                response = error_response(
                    415,
                    "unsupported_media_type",
                    f"the body must be JSON: send Content-Type: application/json (got {got})",
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


# The method label comes from the client: anything outside this set would let a caller
# mint a new time series per request, so it is counted as "other".
_KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def method_label(method: str) -> str:
    """The request's method as a metric label: one of the standard methods, else ``other``."""
    return method if method in _KNOWN_METHODS else "other"


class MetricsMiddleware:
    """Count requests by route template (never by raw path: ids would explode labels).

    Both labels come from bounded sets: the method from the standard ones
    (:func:`method_label`) and the route from the app's templates (``(unmatched)`` else).
    """

    def __init__(
        self,
        app: ASGIApp,
        metrics: ServiceMetrics,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.app = app
        self.metrics = metrics
        self._clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        started = self._clock()

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            route = getattr(scope.get("route"), "path", None) or "(unmatched)"
            method = method_label(str(scope.get("method", "")))
            self.metrics.http_requests.labels(method, route, str(status)).inc()
            self.metrics.http_latency.labels(route).observe(max(0.0, self._clock() - started))


class RedactingFilter(logging.Filter):
    """Rewrites each record's message with secrets redacted, before any handler sees it."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string is the caller's bug; leave it be
            return True
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True


# A logger's filters see only records created on that logger, not its children's, so
# each logger the service writes through is named.
_LOGGERS = (
    "closedloop",
    "closedloop.server",
    "closedloop.handover",
    "uvicorn",
    "uvicorn.access",
    "uvicorn.error",
)


def install_log_redaction(
    names: Sequence[str] = _LOGGERS, handlers: Sequence[logging.Handler] = ()
) -> None:
    """Add one :class:`RedactingFilter` to each logger and handler (idempotent)."""
    targets: list[logging.Filterer] = [logging.getLogger(n) for n in names]
    targets.extend(handlers)
    for target in targets:
        if not any(isinstance(f, RedactingFilter) for f in target.filters):
            target.addFilter(RedactingFilter())
