"""An MCP server over stdio that breaks the protocol on purpose.

Written without the SDK, which would not let a server send these answers. It greets and
lists its tools properly, then answers each tool with a different fault:

* ``garbled``: a result that is no ``CallToolResult`` (``content`` is a number);
* ``drifted``: structured content that does not fit the tool's own output schema;
* ``silent``: never answers;
* ``empty``: a proper, empty structured result (not a fault: "no match");
* ``bye``: the process exits before answering.
"""

from __future__ import annotations

import json
import sys
from typing import Any

OBJECT: dict[str, Any] = {"type": "object", "properties": {}}
TOOLS = [
    {"name": "garbled", "inputSchema": OBJECT, "annotations": {"readOnlyHint": True}},
    {
        "name": "drifted",
        "inputSchema": OBJECT,
        "annotations": {"readOnlyHint": True},
        "outputSchema": {
            "type": "object",
            "properties": {"temp_c": {"type": "number"}},
            "required": ["temp_c"],
        },
    },
    {"name": "silent", "inputSchema": OBJECT, "annotations": {"readOnlyHint": True}},
    {"name": "empty", "inputSchema": OBJECT, "annotations": {"readOnlyHint": True}},
    {"name": "bye", "inputSchema": OBJECT},
]
ANSWERS: dict[str, Any] = {
    "garbled": {"content": 42},
    "drifted": {"content": [], "structuredContent": {"temp_c": "warm"}},
    "empty": {"content": [], "structuredContent": {}},
}


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def answer(request: dict[str, Any]) -> dict[str, Any] | None:
    method = request.get("method")
    if method == "initialize":
        return {
            "protocolVersion": request["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "broken", "version": "0"},
        }
    if method == "tools/list":
        return {"tools": TOOLS}
    if method == "ping":
        return {}
    if method == "tools/call":
        name = request["params"]["name"]
        if name == "bye":
            sys.exit(4)
        if name == "silent":
            return None
        return ANSWERS[name]
    return None


def main() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        if "id" not in request:
            continue  # a notification
        result = answer(request)
        if result is not None:
            send({"jsonrpc": "2.0", "id": request["id"], "result": result})


if __name__ == "__main__":
    main()
