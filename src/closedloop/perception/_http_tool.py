"""An HTTP endpoint as a sensor: every call ends in a scored ``Observation``.

The scores are ``ConfidencePolicy``'s (a confidence per outcome). The timeout comes from
the ``LatencyTracker`` unless one is fixed, and every call's latency, failures
included, is recorded in it. Nothing here raises for what the world does.
"""

from __future__ import annotations

import asyncio
import json
import string
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from .._exceptions import ConfigurationError, ToolError
from .._faults import RateLimited
from .._validation import require_int_at_least, require_positive
from ..control import LatencyTracker
from ._events import EventListener, check_listeners, emit
from ._observation import Observation, ObservationStatus
from ._paths import check_paths
from ._scoring import ConfidencePolicy, LastGoodCache, ResponseScorer

__all__ = ["HttpTool"]

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_SCALARS = (str, int, float, bool)


class HttpTool:
    """Call an HTTP endpoint and score the answer as an ``Observation``.

    ``url`` is a template (``"https://api.example/weather/{city}"``); a call's arguments
    fill its fields (URL-quoted) and the rest go as query parameters (GET, DELETE, ...)
    or as the JSON body (POST, PUT, PATCH). ``response_schema`` (a pydantic model)
    checks the body; ``key_fields`` are dotted paths that must be present and not None;
    ``result_field`` names the collection whose emptiness means "no match" (default: the
    whole body). ``await tool(...)`` never raises for anything the world does: bad
    arguments, bad bodies, status codes and network faults all become observations.

    Inject ``client`` (an ``httpx.AsyncClient`` you close) or ``transport`` (the tool
    owns its client; close it with ``aclose()`` or ``async with``), ``clock`` (epoch
    seconds, for timestamps and cache ages) and ``timer`` (monotonic, for latency).
    ``on_event`` receives a ``RateLimited`` event on every 429. Which status and
    confidence each answer gets is tabled in ``ConfidencePolicy``.
    """

    def __init__(
        self,
        name: str,
        method: str,
        url: str,
        *,
        response_schema: type[BaseModel] | None = None,
        key_fields: Sequence[str] = (),
        result_field: str | None = None,
        client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Callable[[], float] = time.time,
        timer: Callable[[], float] = time.perf_counter,
        latency_tracker: LatencyTracker | None = None,
        timeout_s: float | None = None,
        on_event: EventListener | Sequence[EventListener] | None = None,
        headers: Mapping[str, str] | None = None,
        confidence: ConfidencePolicy | None = None,
        cache_size: int = 128,
        cache_max_age_s: float | None = None,
        max_body_bytes: int = 8_000_000,
        max_chars: int = 100_000,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ConfigurationError("name", name, "must be a non-empty str")
        if not isinstance(method, str) or not method.isalpha():
            raise ConfigurationError("method", method, "must be an HTTP method such as 'GET'")
        if response_schema is not None and not (
            isinstance(response_schema, type) and issubclass(response_schema, BaseModel)
        ):
            raise ConfigurationError(
                "response_schema", response_schema, "must be a pydantic model class"
            )
        if client is not None and transport is not None:
            raise ConfigurationError("transport", transport, "give either client or transport")
        if client is not None and not isinstance(client, httpx.AsyncClient):
            raise ConfigurationError("client", client, "must be an httpx.AsyncClient")
        self.name = name
        self.method = method.upper()
        self.url = url
        self._template = self._parse_template(url)
        if result_field is not None:
            check_paths("result_field", [result_field])
        self._scorer = ResponseScorer(
            name,
            response_schema=response_schema,
            key_fields=check_paths("key_fields", key_fields),
            result_field=result_field,
            confidence=confidence if confidence is not None else ConfidencePolicy(),
            cache=LastGoodCache(cache_size, cache_max_age_s),
        )
        self._client = client
        self._owns_client = client is None
        self._transport = transport
        self._clock = clock
        self._timer = timer
        self.latency_tracker = latency_tracker if latency_tracker is not None else LatencyTracker()
        self.timeout_s = timeout_s
        self._listeners = check_listeners(on_event)
        self._headers = dict(headers or {})
        self._max_body_bytes = require_int_at_least("max_body_bytes", max_body_bytes, 1)
        self._max_chars = require_int_at_least("max_chars", max_chars, 64)

    # --- configuration -------------------------------------------------------------

    @staticmethod
    def _parse_template(url: str) -> list[tuple[str, str | None]]:
        if not isinstance(url, str) or not url:
            raise ConfigurationError("url", url, "must be a non-empty URL template")
        try:
            parts = list(string.Formatter().parse(url))
        except ValueError as exc:
            raise ConfigurationError("url", url, f"bad template: {exc}") from None
        out: list[tuple[str, str | None]] = []
        for literal, field, spec, conversion in parts:
            if field is not None and (not field.isidentifier() or spec or conversion):
                raise ConfigurationError(
                    "url", url, f"template field {{{field}}} must be a plain name"
                )
            out.append((literal, field))
        try:
            httpx.URL("".join(lit + ("x" if f else "") for lit, f in out))
        except httpx.InvalidURL as exc:
            raise ConfigurationError("url", url, f"not a valid URL: {exc}") from None
        return out

    @property
    def response_schema(self) -> type[BaseModel] | None:
        return self._scorer.response_schema

    @property
    def key_fields(self) -> tuple[str, ...]:
        return self._scorer.key_fields

    @property
    def result_field(self) -> str | None:
        return self._scorer.result_field

    @property
    def confidence(self) -> ConfidencePolicy:
        return self._scorer.confidence

    @property
    def timeout_s(self) -> float | None:
        """A fixed timeout in seconds, or None to use the tracker's dynamic timeout."""
        return self._timeout_s

    @timeout_s.setter
    def timeout_s(self, value: float | None) -> None:
        self._timeout_s = None if value is None else require_positive("timeout_s", value)

    def current_timeout(self) -> float:
        """The timeout the next call will use."""
        if self._timeout_s is not None:
            return self._timeout_s
        return self.latency_tracker.dynamic_timeout()

    def add_listener(self, listener: EventListener) -> None:
        """Subscribe one more callback to this tool's events."""
        self._listeners.extend(check_listeners(listener))

    def clear_cache(self) -> None:
        """Forget every last good answer."""
        self._scorer.cache.clear()

    # --- client lifecycle ----------------------------------------------------------

    def _get_client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(transport=self._transport)
        return self._client

    async def aclose(self) -> None:
        """Close the client if this tool created it; an injected client is left open."""
        if self._owns_client and self._client is not None:
            await self._client.aclose()
            self._client = None

    async def __aenter__(self) -> HttpTool:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # --- building the request ------------------------------------------------------

    def _build(self, args: Mapping[Any, Any]) -> tuple[str, dict[str, Any], Any, str]:
        rest = dict(args)
        bad_keys = [k for k in rest if not isinstance(k, str)]
        if bad_keys:
            raise ToolError(f"argument names must be str, got {bad_keys!r}")
        url_parts: list[str] = []
        for literal, field in self._template:
            url_parts.append(literal)
            if field is None:
                continue
            if field not in rest:
                raise ToolError(f"missing argument {field!r} for the URL")
            value = rest.pop(field)
            if not isinstance(value, _SCALARS):
                raise ToolError(f"argument {field!r}={value!r} cannot go into a URL")
            url_parts.append(quote(str(value), safe=""))
        url = "".join(url_parts)
        params: dict[str, Any] = {}
        body: Any = None
        if self.method in _BODY_METHODS:
            try:
                body_text = json.dumps(rest, sort_keys=True, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise ToolError(f"arguments cannot be sent as JSON: {exc}") from None
            body = rest if rest else None
        else:
            for key, value in rest.items():
                items = value if isinstance(value, list | tuple) else [value]
                if not all(v is None or isinstance(v, _SCALARS) for v in items):
                    raise ToolError(f"argument {key!r}={value!r} cannot be a query parameter")
                params[key] = value
            body_text = ""
        cache_key = json.dumps(
            [self.method, url, sorted((k, repr(v)) for k, v in params.items()), body_text]
        )
        return url, params, body, cache_key

    # --- the call ------------------------------------------------------------------

    async def __call__(
        self, arguments: Mapping[str, Any] | None = None, /, **kwargs: Any
    ) -> Observation:
        """Call the endpoint with ``arguments`` (and/or keyword arguments); never raises."""
        return await self._call(self._get_client(), arguments, kwargs)

    def call_sync(
        self, arguments: Mapping[str, Any] | None = None, /, **kwargs: Any
    ) -> Observation:
        """Blocking variant for scripts: runs one call on a fresh client and event loop.

        Not for tools built with an injected ``client`` (it belongs to another loop).
        """
        if not self._owns_client:
            raise ConfigurationError(
                "client", self._client, "call_sync needs a tool-owned client (pass transport)"
            )

        async def once() -> Observation:
            async with httpx.AsyncClient(transport=self._transport) as client:
                return await self._call(client, arguments, kwargs)

        return asyncio.run(once())

    async def _call(
        self, client: httpx.AsyncClient, arguments: Any, kwargs: dict[str, Any]
    ) -> Observation:
        # Arguments often come from a model's proposal: a wrong shape is an observation.
        if arguments is not None and not isinstance(arguments, Mapping):
            error = f"arguments must be a mapping, got {type(arguments).__name__}"
            return self._scorer.not_called(error, self._clock())
        observation = await self._observe(client, {**(arguments or {}), **kwargs})
        return observation.compacted(self._max_chars)

    async def _observe(self, client: httpx.AsyncClient, args: dict[str, Any]) -> Observation:
        scorer = self._scorer
        try:
            url, params, body, key = self._build(args)
        except ToolError as exc:
            return scorer.not_called(str(exc), self._clock())
        timeout = self.current_timeout()
        started = self._timer()
        try:
            async with asyncio.timeout(timeout):
                async with client.stream(
                    self.method,
                    url,
                    params=params or None,
                    json=body,
                    headers=self._headers or None,
                    timeout=timeout,
                ) as response:
                    content, cut = await self._read(response)
        except (httpx.TimeoutException, TimeoutError):
            latency = self._elapsed(started)
            return scorer.timed_out(key, timeout, latency, self._clock())
        except httpx.DecodingError as exc:
            latency = self._elapsed(started)
            error = f"body could not be decoded: {exc}"
            return scorer.fallback(key, error, None, latency, self._clock())
        except httpx.InvalidURL as exc:
            return scorer.not_called(f"the arguments made an invalid URL ({exc})", self._clock())
        except (httpx.HTTPError, OSError) as exc:
            latency = self._elapsed(started)
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            return scorer.unreachable(error, latency, self._clock())
        latency = self._elapsed(started)
        now = self._clock()
        observation = scorer.score_response(
            key,
            status=response.status_code,
            headers=response.headers,
            content=content,
            charset=response.charset_encoding or "utf-8",
            latency=latency,
            now=now,
            oversized_note=(
                f"body larger than {self._max_body_bytes} bytes; reading stopped" if cut else None
            ),
        )
        if observation.status is ObservationStatus.RATE_LIMITED:
            event = RateLimited(source=self.name, retry_after_s=observation.retry_after_s, at=now)
            await emit(self._listeners, event)
        return observation

    def _elapsed(self, started: float) -> float:
        latency = max(0.0, self._timer() - started)
        self.latency_tracker.record(latency)
        return latency

    async def _read(self, response: httpx.Response) -> tuple[bytes, bool]:
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            chunks.append(chunk)
            size += len(chunk)
            if size > self._max_body_bytes:
                return b"".join(chunks)[: self._max_body_bytes], True
        return b"".join(chunks), False

    def __repr__(self) -> str:
        return f"HttpTool(name={self.name!r}, method={self.method!r}, url={self.url!r})"
