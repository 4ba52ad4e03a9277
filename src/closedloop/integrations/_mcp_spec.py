"""Where an MCP server is: a command line to start (stdio) or a URL to reach (streamable HTTP).

A spec is read once, when ``mcp_server`` is called, so a bad one fails there and names
itself. Opening the transport imports the ``mcp`` SDK, and only then: the core and this
module import without the ``mcp`` extra.
"""

from __future__ import annotations

import contextlib
import os
import shlex
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

from .._exceptions import ConfigurationError
from .._extras import require_extra

__all__ = ["HttpSpec", "ServerSpec", "StdioSpec", "open_transport", "parse_spec"]


@dataclass(frozen=True, slots=True, kw_only=True)
class StdioSpec:
    """A server started as a subprocess, spoken to over its stdin and stdout."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None

    @property
    def label(self) -> str:
        return shlex.join(self.argv)


@dataclass(frozen=True, slots=True, kw_only=True)
class HttpSpec:
    """A running server reached over streamable HTTP at ``url``."""

    url: str
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.url


ServerSpec = StdioSpec | HttpSpec


def _str_map(name: str, value: Mapping[str, str] | None) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ConfigurationError(name, value, "must be a mapping of str to str")
    return dict(value)


def parse_spec(
    spec: str | Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    headers: Mapping[str, str] | None = None,
) -> ServerSpec:
    """Read ``spec``: an ``http(s)://`` URL, a command line, or an argv list."""
    if isinstance(spec, str) and spec.strip().lower().startswith(("http://", "https://")):
        url = spec.strip()
        parts = urlsplit(url)
        if not parts.hostname:
            raise ConfigurationError("spec", spec, "a server URL needs a host")
        try:
            parts.port  # noqa: B018  # a port out of range raises here, not at the first call
        except ValueError as exc:
            raise ConfigurationError("spec", spec, f"bad port in the URL: {exc}") from None
        if env or cwd is not None:
            raise ConfigurationError("env", env or cwd, "env and cwd are for stdio servers only")
        return HttpSpec(url=url, headers=_str_map("headers", headers))
    if isinstance(spec, str):
        try:
            argv = shlex.split(spec)
        except ValueError as exc:
            raise ConfigurationError("spec", spec, f"not a command line: {exc}") from None
    elif isinstance(spec, Sequence):
        argv = list(spec)
        if not all(isinstance(a, str | os.PathLike) for a in argv):
            raise ConfigurationError("spec", spec, "an argv list holds strings only")
        argv = [os.fspath(a) for a in argv]
    else:
        raise ConfigurationError(
            "spec", spec, "must be a command line, an argv list or an http(s):// URL"
        )
    if not argv or not argv[0].strip():
        raise ConfigurationError("spec", spec, "names no command to start")
    if headers:
        raise ConfigurationError("headers", headers, "headers are for HTTP servers only")
    where = None if cwd is None else os.fspath(cwd)
    if where is not None and not Path(where).is_dir():
        raise ConfigurationError("cwd", cwd, "is not a directory")
    return StdioSpec(argv=tuple(argv), env=_str_map("env", env), cwd=where)


@contextlib.asynccontextmanager
async def open_transport(spec: ServerSpec, errlog: IO[str]) -> AsyncIterator[tuple[Any, Any]]:
    """The read and write streams of a connection to ``spec`` (the SDK's transports).

    A stdio server's stderr goes to ``errlog``, so a server that fails to start can be
    quoted in the error.
    """
    if isinstance(spec, StdioSpec):
        stdio = require_extra("mcp.client.stdio", "mcp", "an MCP server over stdio")
        params = stdio.StdioServerParameters(
            command=spec.argv[0], args=list(spec.argv[1:]), env=dict(spec.env) or None, cwd=spec.cwd
        )
        async with stdio.stdio_client(params, errlog=errlog) as streams:
            yield streams[0], streams[1]
        return
    http = require_extra("mcp.client.streamable_http", "mcp", "an MCP server over HTTP")
    client = None
    if spec.headers:
        httpx2 = require_extra("httpx2", "mcp", "an MCP server over HTTP")
        client = httpx2.AsyncClient(
            headers=dict(spec.headers), timeout=httpx2.Timeout(30.0, read=300.0)
        )
    async with contextlib.AsyncExitStack() as stack:
        if client is not None:
            await stack.enter_async_context(client)
        streams = await stack.enter_async_context(
            http.streamable_http_client(spec.url, http_client=client)
        )
        yield streams[0], streams[1]
