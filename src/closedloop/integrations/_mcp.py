"""Tools from Model Context Protocol servers: ``Agent(model, tools=[mcp_server(...), f])``.

``mcp_server("python my_server.py")`` starts a server as a subprocess and speaks MCP over
its stdin and stdout; ``mcp_server("http://127.0.0.1:8808/mcp")`` reaches a running one
over streamable HTTP. In a tool list the server expands into one tool per MCP tool, whose
JSON schema is the MCP tool's ``inputSchema``. The listing is read once, when the agent is
built (a server that cannot start fails there, naming its spec).

Every call of such a tool goes through the server's own guards, from the outside in:

* the loop's contract (the effect ledger for ``once``/``irreversible`` tools, the
  actuator's timeout unless the server has a fixed ``timeout_s``);
* the server's retry policy (:mod:`closedloop.policy`; by default one reconnect when the
  connection broke or could not be had). A call that may have reached the server is never
  repeated for a tool whose effect needs the ledger;
* the server's circuit breaker (Nygard's pattern, :class:`~closedloop.feedback.CircuitBreaker`):
  after repeated transport faults, calls are refused without trying until it probes again.

What the server does is observed, never raised into the run: an answer becomes an
observation (``_mcp_results.py``), a server that died or answered garbage is a failed
observation, and the next call starts it again. For a tool whose effect needs the ledger,
a call that may have happened (the connection broke, or the answer was unreadable) raises
a ``ToolError`` the ledger takes as uncertain: the effect stays pending until it is reconciled.

The connection lives only while runs use it: each run holds it from its first step to its
end, and the last run out closes it (and stops the subprocess), see ``_mcp_link.py``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import re
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._exceptions import (
    ActionTimeoutError,
    CircuitOpenError,
    ConfigurationError,
    ToolError,
)
from .._extras import require_extra
from .._validation import require_positive
from ..execution import AtomicAction, EffectClass
from ..execution._retry_log import report_tool_retry
from ..feedback import CircuitBreaker
from ..perception import Observation
from ..policy import (
    PolicyDecision,
    PolicyState,
    RetryPolicy,
    retry_async,
    retry_if_exception_type,
    stop_after_attempt,
)
from ._mcp_link import Link, Links, McpConnectionLostError, McpUnavailableError
from ._mcp_results import effect_of, result_observation
from ._mcp_spec import ServerSpec, StdioSpec, parse_spec

if TYPE_CHECKING:
    from ..agent import Tool

__all__ = ["DEFAULT_RETRY", "McpServer", "mcp_server"]

_NAME_RE = re.compile(r"[^A-Za-z0-9_\-]")
_CONNECTION_CLOSED = -32000  # JSON-RPC code the SDK gives a request whose connection closed

DEFAULT_RETRY = RetryPolicy(
    stop=stop_after_attempt(2),
    retry=retry_if_exception_type(McpUnavailableError, McpConnectionLostError),
)
"""One reconnect: a server that died is started again once, then the fault is observed."""


class _Malformed(ToolError):
    """The server answered something that is not a valid result."""


class McpServer:
    """An MCP server as a toolset: it expands into one :class:`~closedloop.agent.Tool` per
    MCP tool. Build it with :func:`mcp_server`; the arguments are described there."""

    def __init__(
        self,
        spec: ServerSpec,
        *,
        name: str | None = None,
        effects: Mapping[str, EffectClass | str] | None = None,
        default_effect: EffectClass | str = EffectClass.IRREVERSIBLE,
        include: Iterable[str] | None = None,
        prefix: str = "",
        timeout_s: float | None = None,
        connect_timeout_s: float = 30.0,
        retry: RetryPolicy | None = None,
        breaker: CircuitBreaker | None = None,
        sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
        clock: Callable[[], float] = time.time,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.spec = spec
        self.name = name or _server_name(spec)
        self.effects = {
            str(tool): _effect(f"effects[{tool!r}]", value)
            for tool, value in (effects or {}).items()
        }
        self.default_effect = _effect("default_effect", default_effect)
        self.include = None if include is None else frozenset(_names("include", include))
        if not isinstance(prefix, str):
            raise ConfigurationError("prefix", prefix, "must be a string")
        self.prefix = prefix
        self.timeout_s = None if timeout_s is None else require_positive("timeout_s", timeout_s)
        self.connect_timeout_s = require_positive("connect_timeout_s", connect_timeout_s)
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise ConfigurationError("retry", retry, "must be a closedloop.policy.RetryPolicy")
        self.retry = DEFAULT_RETRY if retry is None else retry
        if breaker is not None and not isinstance(breaker, CircuitBreaker):
            raise ConfigurationError("breaker", breaker, "must be a CircuitBreaker")
        self.breaker = (
            breaker
            if breaker is not None
            else CircuitBreaker(
                f"mcp:{self.name}",
                failure_threshold=5,
                recovery_timeout_s=30.0,
                failure_types=(
                    McpUnavailableError,
                    McpConnectionLostError,
                    _Malformed,
                    TimeoutError,
                ),
            )
        )
        self._sleep = sleep
        self._clock = clock
        self._timer = timer
        self._links = Links(spec, self.connect_timeout_s)
        self._listing: tuple[Tool, ...] | None = None
        self._listing_lock = threading.Lock()
        self._schemas: dict[str, Mapping[str, Any] | None] = {}

    def __repr__(self) -> str:
        return f"McpServer({self.spec.label!r}, name={self.name!r})"

    # --- the toolset --------------------------------------------------------------------

    def __closedloop_tools__(self) -> tuple[Tool, ...]:
        return self.tools()

    def tools(self) -> tuple[Tool, ...]:
        """The server's tools as loop tools (listed once, then kept; blocks while listing).

        Safe to call with an event loop running: the listing runs on its own thread.
        """
        with self._listing_lock:
            if self._listing is None:
                with concurrent.futures.ThreadPoolExecutor(1, "mcp-list") as pool:
                    self._listing = pool.submit(asyncio.run, self.list_tools()).result()
            return self._listing

    async def list_tools(self) -> tuple[Tool, ...]:
        """List the server's tools now, in the running loop (and keep the listing)."""
        link = self._links.here()
        async with link.lease():
            connection = await link.connection()
            listed: list[Any] = []
            cursor: str | None = None
            while True:  # pagination, not a retry: each page names the next
                params = None
                if cursor is not None:
                    types = require_extra("mcp.types", "mcp", "an MCP tool listing")
                    params = types.PaginatedRequestParams(cursor=cursor)
                page = await connection.session.list_tools(params=params)
                listed.extend(page.tools)
                cursor = page.next_cursor
                if not cursor:
                    break
        built = self._build(listed)
        self._listing = built
        return built

    def _build(self, listed: Sequence[Any]) -> tuple[Tool, ...]:
        names = {t.name for t in listed}
        for option, wanted in (("effects", set(self.effects)), ("include", self.include or set())):
            unknown = sorted(wanted - names)
            if unknown:
                raise ConfigurationError(
                    option,
                    unknown,
                    f"{self.spec.label!r} has no such tool (it has {sorted(names)})",
                )
        out: list[Tool] = []
        for mcp_tool in listed:
            if self.include is not None and mcp_tool.name not in self.include:
                continue
            out.append(self._tool(mcp_tool))
        return tuple(out)

    def _tool(self, mcp_tool: Any) -> Tool:
        # The agent package loads here, when a server is listed, not with this package:
        # the middleware and the decorator of closedloop.integrations do not need it.
        from ..agent import Tool

        remote = str(mcp_tool.name)
        local = self.prefix + _NAME_RE.sub("_", remote)
        if not local[:1].isalpha():
            local = f"t_{local}"
        effect = effect_of(remote, mcp_tool.annotations, self.effects, self.default_effect)
        self._schemas[remote] = mcp_tool.output_schema
        schema = dict(mcp_tool.input_schema or {})
        schema.setdefault("type", "object")
        schema.setdefault("properties", {})
        title = getattr(mcp_tool, "title", None) or getattr(mcp_tool.annotations, "title", None)
        description = mcp_tool.description or title or remote
        action = AtomicAction(
            name=local,
            fn=self._runner(remote, local, effect),
            effect=effect,
            uncertain_errors=(McpConnectionLostError,),
            description=str(description),
        )
        return Tool(
            name=local,
            description=str(description),
            parameters=schema,
            action=action,
            fixed_timeout=self.timeout_s is not None,
            scope=self,
        )

    # --- the run's scope ------------------------------------------------------------------

    def run_scope(self) -> contextlib.AbstractAsyncContextManager[object]:
        """Hold this server's connection (in the running loop) while a run lasts."""
        return self._scope()

    @contextlib.asynccontextmanager
    async def _scope(self) -> AsyncIterator[object]:
        async with self._links.here().lease() as link:
            yield link

    def connections(self) -> Mapping[str, int]:
        """Leases held and connections opened so far, over the event loops still open."""
        return self._links.snapshot()

    # --- calls ------------------------------------------------------------------------------

    def _runner(self, remote: str, local: str, effect: EffectClass) -> Callable[..., Any]:
        ledgered = effect.needs_ledger

        async def call(**arguments: Any) -> Observation:
            return await self._observe(remote, local, arguments, ledgered=ledgered)

        call.__name__ = local
        return call

    async def call(self, tool: str, arguments: Mapping[str, Any] | None = None) -> Observation:
        """Call MCP tool ``tool`` (its name on the server) and observe the answer.

        Never raises for what the server does (it is treated as a read-only tool). Outside
        a run each call opens and closes its own connection; hold ``run_scope()`` to keep
        one open over several calls.
        """
        return await self._observe(tool, tool, dict(arguments or {}), ledgered=False)

    async def _observe(
        self, remote: str, local: str, arguments: dict[str, Any], *, ledgered: bool
    ) -> Observation:
        policy = self.retry
        if ledgered:
            # Only a call that surely never reached the server may be made again.
            policy = RetryPolicy(
                stop=policy.stop,
                wait=policy.wait,
                retry=policy.retry & retry_if_exception_type(McpUnavailableError),
            )
        started = self._timer()

        async def attempt(_: int) -> Any:
            async with self.breaker:
                return await self._once(remote, arguments)

        again: list[dict[str, Any]] = []

        def note(state: PolicyState, decision: PolicyDecision) -> None:
            # The loop's record of the step shows the call ran more than once.
            entry = _retry_entry(len(again) + 1, state.error, decision.delay_s)
            again.append(entry)
            report_tool_retry(entry)

        retried = await retry_async(attempt, policy, sleep=self._sleep, before_sleep=note)
        latency = max(0.0, self._timer() - started)
        now = self._clock()
        error = retried.error
        if error is None:
            observation = result_observation(
                retried.value,
                source=local,
                output_schema=self._schemas.get(remote),
                timestamp=now,
                latency_s=latency,
            )
            if again:  # the model reads that this answer came after a reconnect
                meaning = f"{observation.meaning}{_retried_note(len(again))}"
                observation = observation.model_copy(update={"meaning": meaning})
            if ledgered and observation.error is not None:
                # The tool says it did not do it: the ledger marks the effect failed, so a
                # corrected call may be made; the model still reads the tool's own words.
                raise ToolError(f"{local}: {observation.error}")
            return observation
        if ledgered:
            if again and type(error) in (McpUnavailableError, McpConnectionLostError):
                # Only a call that never reached the server was asked again; say so.
                error = type(error)(f"{error}{_retried_note(len(again))}")
            if isinstance(error, TimeoutError):
                raise ActionTimeoutError(f"{local}: {error}") from error
            if isinstance(error, _Malformed):
                raise McpConnectionLostError(str(error)) from error
            raise error
        if isinstance(error, TimeoutError):
            limit = self.timeout_s if self.timeout_s is not None else latency
            return Observation.timeout(
                source=local, timeout_s=limit, timestamp=now, latency_s=latency
            )
        what = "refused by its circuit breaker" if isinstance(error, CircuitOpenError) else ""
        text = (str(error) or type(error).__name__) + _retried_note(len(again))
        return Observation.failed(
            text,
            source=local,
            timestamp=now,
            latency_s=latency,
            meaning=f"{local} gave no usable answer ({what or 'a fault of the MCP server'}): "
            f"{text}",
        )

    async def _once(self, remote: str, arguments: dict[str, Any]) -> Any:
        """One call on the live connection; a broken connection is dropped for the next."""
        link: Link = self._links.here()
        async with link.lease():
            connection = await link.connection()
            limit = self.timeout_s
            try:
                async with asyncio.timeout(limit):  # None: the loop's own timeout applies
                    return await connection.session.call_tool(remote, arguments)
            except TimeoutError as exc:
                if limit is None:  # not ours: whatever timed out inside the transport
                    return await self._fault(link, connection, remote, exc)
                raise TimeoutError(
                    f"{self.spec.label!r} did not answer {remote} within {limit:g} s"
                ) from None
            except Exception as exc:
                return await self._fault(link, connection, remote, exc)

    async def _fault(self, link: Link, connection: Any, remote: str, exc: Exception) -> Any:
        """What a failed call means: a protocol error answer, garbage, or a dead link."""
        errors = require_extra("mcp.shared.exceptions", "mcp", "an MCP call")
        types = require_extra("mcp.types", "mcp", "an MCP call")
        pydantic = require_extra("pydantic", "mcp", "an MCP call")
        if isinstance(exc, errors.MCPError) and exc.code != _CONNECTION_CLOSED:
            # The server answered with a protocol error (no such tool, bad arguments): the
            # call failed, the server is fine.
            return types.CallToolResult(
                content=[types.TextContent(text=f"MCP error {exc.code}: {exc.message}")],
                is_error=True,
            )
        if isinstance(exc, pydantic.ValidationError | RuntimeError) and not connection.broken:
            raise _Malformed(
                f"{self.spec.label!r} answered {remote} with a malformed result: {_first_line(exc)}"
            ) from None
        await link.drop(connection)
        raise McpConnectionLostError(
            f"the connection to {self.spec.label!r} broke during {remote} "
            f"({_first_line(exc)}); the server may have died"
        ) from None


def _retry_entry(attempt: int, error: BaseException | None, delay_s: float) -> dict[str, Any]:
    return {
        "attempt": attempt,
        "status": "error",
        "error": None if error is None else _first_line(error),
        "delay_s": delay_s,
        "reason": "the MCP server's connection broke or could not be had: reconnected and "
        "asked again",
    }


def _retried_note(times: int) -> str:
    return f" (retried {times} time(s) after reconnecting to the server)" if times else ""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _effect(argument: str, value: Any) -> EffectClass:
    try:
        return EffectClass(value)
    except ValueError:
        raise ConfigurationError(
            argument, value, f"must be one of {[e.value for e in EffectClass]}"
        ) from None


def _names(argument: str, values: Iterable[str]) -> list[str]:
    if isinstance(values, str) or not all(isinstance(v, str) for v in values):
        raise ConfigurationError(argument, values, "must be a list of tool names")
    return list(values)


def _server_name(spec: ServerSpec) -> str:
    """A short name for traces: the script or package a command starts, or the URL."""
    if isinstance(spec, StdioSpec):
        words = [w for w in spec.argv[1:] if not w.startswith("-")]
        return os.path.basename((words or list(spec.argv))[0].rstrip("/")) or spec.label
    return spec.label


def mcp_server(
    spec: str | Sequence[str],
    *,
    name: str | None = None,
    effects: Mapping[str, EffectClass | str] | None = None,
    default_effect: EffectClass | str = EffectClass.IRREVERSIBLE,
    include: Iterable[str] | None = None,
    prefix: str = "",
    timeout_s: float | None = None,
    connect_timeout_s: float = 30.0,
    retry: RetryPolicy | None = None,
    breaker: CircuitBreaker | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    headers: Mapping[str, str] | None = None,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    clock: Callable[[], float] = time.time,
) -> McpServer:
    """An MCP server whose tools an :class:`~closedloop.agent.Agent` can use.

    ``spec`` is a command line (``"python my_server.py"``) or an argv list, started as a
    subprocess and spoken to over stdio (``env`` adds variables to the few the SDK passes
    on, ``cwd`` is its working directory), or an ``http(s)://`` URL of a streamable HTTP
    endpoint (``headers`` go with every request).

    ``effects`` declares a tool's effect class by its name on the server
    (``{"place_order": "irreversible"}``); an undeclared tool is ``recomputable`` only when
    the server annotates it ``readOnlyHint: true``, else ``default_effect``. ``include``
    keeps only the named tools; ``prefix`` goes before every tool's name (two servers with
    a tool of the same name). ``timeout_s`` fixes the time one call may take (default: the
    loop's scheduled timeout), ``connect_timeout_s`` the time to start and greet the server.
    ``retry`` is the server's :class:`~closedloop.policy.RetryPolicy` for transport faults
    (default: one reconnect), ``breaker`` its circuit breaker (default: open after 5
    transport faults in a row, probe after 30 s). ``sleep`` and ``clock`` are injectable.
    """
    parsed = parse_spec(spec, env=env, cwd=cwd, headers=headers)
    require_extra("mcp", "mcp", "tools from an MCP server")
    return McpServer(
        parsed,
        name=name,
        effects=effects,
        default_effect=default_effect,
        include=include,
        prefix=prefix,
        timeout_s=timeout_s,
        connect_timeout_s=connect_timeout_s,
        retry=retry,
        breaker=breaker,
        sleep=sleep,
        clock=clock,
    )
