"""The connection to one MCP server: opened when first needed, closed when the last run ends.

The SDK's transports and ``ClientSession`` live in task groups that must be left by the
task that entered them, but a run's steps may each be a different task (``iter_sync``
drives one step per task). So each connection is owned by one background task: it opens
the transport and the session, answers readiness, waits to be told to stop, and closes
everything itself. Calls are made from any task of the same event loop.

Each event loop gets its own connection (:class:`Links`), shared by the runs leased on it;
the lease count going back to zero closes it, and with a stdio server the subprocess.
A connection that broke (the server died) is dropped and the next call opens a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
import threading
import weakref
from collections.abc import AsyncIterator, Mapping
from typing import IO, Any

from .._exceptions import ToolError
from .._extras import require_extra
from ._mcp_spec import ServerSpec, open_transport

__all__ = ["Connection", "Link", "Links", "McpConnectionLostError", "McpUnavailableError"]

_log = logging.getLogger("closedloop.integrations.mcp")
_STDERR_TAIL = 1500


class McpUnavailableError(ToolError):
    """No connection to the server could be had; no request was sent."""


class McpConnectionLostError(ToolError):
    """The connection broke while a request was in flight: it may or may not have run."""


def _leaf(exc: BaseException) -> BaseException:
    """The first real error inside the task groups' exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _describe(exc: BaseException) -> str:
    exc = _leaf(exc)
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Connection:
    """One live MCP session, owned by a background task of the loop that opened it."""

    def __init__(self, spec: ServerSpec, connect_timeout_s: float) -> None:
        self.spec = spec
        self.connect_timeout_s = connect_timeout_s
        self.session: Any = None
        self.broken = False
        self._stop = asyncio.Event()
        self._ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        # Closed by ``close`` once the owner task has ended (a ``with`` cannot span that).
        self._errlog: IO[str] = tempfile.TemporaryFile(  # noqa: SIM115
            "w+", encoding="utf-8", errors="replace"
        )
        self._task: asyncio.Task[None] | None = None

    def _stderr_tail(self) -> str:
        try:
            self._errlog.flush()
            self._errlog.seek(0)
            text = self._errlog.read()
        except (OSError, ValueError):
            return ""
        return text[-_STDERR_TAIL:].strip()

    async def open(self) -> Any:
        """Start the owner task and wait until the session is initialised."""
        self._task = asyncio.create_task(self._own(), name=f"mcp: {self.spec.label}")
        try:
            self.session = await asyncio.shield(self._ready)
        except asyncio.CancelledError:
            await self.close()
            raise
        except Exception as exc:
            tail = self._stderr_tail()
            await self.close()
            said = f"; its stderr ends with:\n{tail}" if tail else ""
            raise McpUnavailableError(
                f"MCP server {self.spec.label!r} could not be started or reached: "
                f"{_describe(exc)}{said}"
            ) from None
        return self.session

    async def _own(self) -> None:
        anyio = require_extra("anyio", "mcp", "an MCP connection")
        client = require_extra("mcp", "mcp", "an MCP connection")
        try:
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(
                    open_transport(self.spec, self._errlog)
                )
                session = await stack.enter_async_context(client.ClientSession(read, write))
                try:
                    with anyio.fail_after(self.connect_timeout_s):
                        await session.initialize()
                except TimeoutError:
                    raise TimeoutError(
                        f"no answer to the handshake within {self.connect_timeout_s:g} s"
                    ) from None
                self._ready.set_result(session)
                await self._stop.wait()
        except Exception as exc:
            if not self._ready.done():
                self._ready.set_exception(exc)
            else:  # a connection that was up broke; its calls have seen it already
                _log.debug("MCP connection %s ended: %s", self.spec.label, _describe(exc))
        finally:
            self.broken = True
            if not self._ready.done():
                self._ready.set_exception(McpUnavailableError("the connection was closed"))

    async def close(self) -> None:
        """Tell the owner to close the session and the transport, and wait until it has."""
        self.broken = True
        self._stop.set()
        task = self._task
        if task is None or task.done():
            self._close_errlog()
            return
        if not self._ready.done():
            task.cancel()  # still in the handshake: it would not see the stop until it ends
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done():
                return  # the owner itself was cancelled in its handshake
            raise  # the caller is being cancelled: the owner goes on closing by itself
        except Exception as exc:  # the owner logs its own end; a close never raises
            _log.debug("closing MCP connection %s: %s", self.spec.label, _describe(exc))
        self._close_errlog()

    def _close_errlog(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._errlog.close()


class Link:
    """The connection of one event loop, and the leases (runs, calls) holding it open."""

    def __init__(self, spec: ServerSpec, connect_timeout_s: float) -> None:
        self._spec = spec
        self._connect_timeout_s = connect_timeout_s
        self._lock = asyncio.Lock()
        self._connection: Connection | None = None
        self.leases = 0
        self.opened = 0  # connections opened over this link's life (a restart counts)

    async def connection(self) -> Connection:
        """The live connection, opened (again) if there is none or it broke."""
        async with self._lock:
            current = self._connection
            if current is not None and not current.broken:
                return current
            self._connection = None
            if current is not None:
                await current.close()
            fresh = Connection(self._spec, self._connect_timeout_s)
            await fresh.open()
            self._connection = fresh
            self.opened += 1
            return fresh

    async def drop(self, connection: Connection) -> None:
        """Close a connection that broke; the next call opens a new one."""
        if self._connection is connection:
            self._connection = None
        await connection.close()

    @contextlib.asynccontextmanager
    async def lease(self) -> AsyncIterator[Link]:
        """Hold the connection open while inside; the last lease out closes it."""
        self.leases += 1
        try:
            yield self
        finally:
            self.leases -= 1
            if self.leases == 0 and self._connection is not None:
                connection, self._connection = self._connection, None
                await connection.close()


class Links:
    """One :class:`Link` per event loop, for one server spec (thread-safe)."""

    def __init__(self, spec: ServerSpec, connect_timeout_s: float) -> None:
        self._spec = spec
        self._connect_timeout_s = connect_timeout_s
        self._guard = threading.Lock()
        self._links: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Link] = (
            weakref.WeakKeyDictionary()
        )

    def here(self) -> Link:
        """The link of the running event loop."""
        loop = asyncio.get_running_loop()
        with self._guard:
            link = self._links.get(loop)
            if link is None:
                link = Link(self._spec, self._connect_timeout_s)
                self._links[loop] = link
            return link

    def snapshot(self) -> Mapping[str, int]:
        """Leases held and connections opened, over the event loops still open."""
        with self._guard:
            links = [link for loop, link in self._links.items() if not loop.is_closed()]
        return {
            "leases": sum(link.leases for link in links),
            "opened": sum(link.opened for link in links),
        }
