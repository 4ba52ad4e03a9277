"""An agent under the service: sessions and runs over HTTP, with an API key.

Run it with ``python examples/service_agent.py``. It does in one process what these
commands do on a machine (``--agents`` names a module that registers your agents)::

    closedloop keys create me --store sqlite:///state.db
    closedloop serve --store sqlite:///state.db --agents my_agents --model local:qwen2.5-coder-0.5b

then, as a client: create a session, post a run to it, follow its steps as server-sent
events and read its result. The model is a deterministic stand-in, so it runs offline in
a few seconds.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from closedloop import Agent, Runtime
from closedloop.feedback import SQLiteStore
from closedloop.models import CallInfo, FunctionModel, Message
from closedloop.server import AgentContext, AgentRegistry, ApiKeys, ServerSettings, create_app


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def reply(messages: tuple[Message, ...], info: CallInfo) -> dict[str, Any]:
    # Stands in for a real model: adds the numbers of "Add A and B", then answers.
    text = messages[-1].content
    seen = re.search(r"^value: (-?\d+)$", text, re.MULTILINE)
    if seen:
        return {"final": seen.group(1)}
    a, b = re.findall(r"-?\d+", text.split("Task:", 1)[1])[:2]
    return {"tool": "add", "arguments": {"a": int(a), "b": int(b)}}


def calc_agent(ctx: AgentContext) -> Agent:
    # The service hands each run its model and the calling key's own store.
    return Agent(ctx.model, [add], runtime=Runtime(store=ctx.store))


async def create_key(store_url: str) -> str:
    store = SQLiteStore(store_url.removeprefix("sqlite://"))
    try:
        return (await ApiKeys(store).create("me")).token
    finally:
        await store.close()


def serve(settings: ServerSettings) -> tuple[uvicorn.Server, threading.Thread, str]:
    """The service on a free loopback port, in a thread; returns once it is listening."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(settings), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the service did not start")
        thread.join(timeout=0.05)
    return server, thread, f"http://127.0.0.1:{port}"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store_url = f"sqlite://{Path(tmp) / 'state.db'}"
        token = asyncio.run(create_key(store_url))
        registry = AgentRegistry()
        registry.register("calc", calc_agent, description="adds two numbers")
        settings = ServerSettings(
            store=store_url,
            model=FunctionModel(reply, name="stand-in"),
            registry=registry,
            runs_dir=Path(tmp) / "runs",
        )
        server, thread, base_url = serve(settings)
        try:
            headers = {"Authorization": f"Bearer {token}"}
            with httpx.Client(base_url=base_url, headers=headers, timeout=30) as client:
                session = client.post("/v1/sessions", json={"metadata": {"team": "ops"}})
                session.raise_for_status()
                sid = session.json()["id"]
                print(f"session: {sid}")
                posted = client.post(
                    f"/v1/sessions/{sid}/runs", json={"agent": "calc", "task": "Add 17 and 25."}
                )
                posted.raise_for_status()
                rid = posted.json()["id"]
                print(f"run: {rid} ({posted.json()['status']})")
                # The events stream sends each step as it happens and ends with the run.
                with client.stream("GET", f"/v1/sessions/{sid}/runs/{rid}/events") as events:
                    event = ""
                    for line in events.iter_lines():
                        if line.startswith("event: "):
                            event = line.removeprefix("event: ")
                        elif line.startswith("data: ") and event in ("step", "end"):
                            data = json.loads(line.removeprefix("data: "))
                            if event == "end":
                                print(f"end: {data['status']}")
                                break
                            print(f"step {data['step']}: {data.get('tool') or 'answer'}")
                result = client.get(f"/v1/sessions/{sid}/runs/{rid}/result").json()
                print(f"halt: {result['halt_reason']}")
                print(f"answer: {result['answer']}")
        finally:
            server.should_exit = True
            thread.join(timeout=15)


if __name__ == "__main__":
    main()
