"""A small MCP server for the tests, over stdio or streamable HTTP.

Tools: ``lookup`` (read-only, structured), ``search`` (read-only, an empty list when
nothing matches), ``place_order`` (irreversible: it counts orders), ``note`` (text only,
no annotations), ``fail`` (answers with ``isError``), ``slow`` (sleeps), ``crash`` (the
process exits mid-call; given ``once_marker``, only the first time).

``python shop_server.py [--pidfile PATH] [--http-fd FD]``: stdio by default; with
``--http-fd`` it serves streamable HTTP on an already listening socket the test passes in,
so the port is bound before the server starts and nobody races for it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

READ_ONLY = ToolAnnotations(read_only_hint=True)
CITIES = {"paris": {"city": "Paris", "temp_c": 18.5, "sky": "cloudy"}}
ORDERS: list[dict[str, object]] = []

server = MCPServer("shop", log_level="ERROR")


@server.tool(annotations=READ_ONLY)
def lookup(city: str) -> dict[str, object]:
    """The weather in a city."""
    found = CITIES.get(city.lower())
    if found is None:
        raise ToolError(f"unknown city {city!r}")
    return found


@server.tool(annotations=READ_ONLY)
def search(prefix: str) -> list[str]:
    """Product names that start with a prefix."""
    return [name for name in ("apple", "apricot", "banana") if name.startswith(prefix)]


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
def place_order(item: str, quantity: int) -> dict[str, object]:
    """Place an order."""
    if quantity < 1:
        raise ToolError(f"quantity must be positive, got {quantity}")
    ORDERS.append({"item": item, "quantity": quantity})
    return {"order": len(ORDERS), "item": item, "quantity": quantity}


@server.tool(structured_output=False)
def note(text: str) -> str:
    """Echo a note back as plain text."""
    return f"noted: {text}"


@server.tool(annotations=READ_ONLY)
def fail(reason: str) -> str:
    """Always fails with the given reason."""
    raise ToolError(reason)


@server.tool(annotations=READ_ONLY)
async def slow(seconds: float) -> str:
    """Answer after a while."""
    await asyncio.sleep(seconds)
    return "late"


@server.tool(annotations=READ_ONLY)
def crash(once_marker: str = "") -> str:
    """The server process dies while answering (only the first time, given a marker file)."""
    marker = Path(once_marker) if once_marker else None
    if marker is not None and marker.exists():
        return "answered by a server that did not die"
    if marker is not None:
        marker.write_text(f"{os.getpid()} died here\n", encoding="utf-8")
    os._exit(3)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pidfile")
    parser.add_argument("--http-fd", type=int)
    args = parser.parse_args()
    if args.pidfile:
        with Path(args.pidfile).open("a", encoding="utf-8") as out:
            out.write(f"{os.getpid()}\n")
    if args.http_fd is None:
        server.run()
        return
    import uvicorn

    sock = socket.socket(fileno=args.http_fd)
    app = server.streamable_http_app()
    config = uvicorn.Config(app, log_level="error", lifespan="on")
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
