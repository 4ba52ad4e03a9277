"""The fleet plant behind a real OpenAI-compatible endpoint on loopback HTTP.

``POST /v1/chat/completions`` goes through the same :class:`Provider` as the simulator:
token buckets (429 with ``Retry-After`` and ``retry-after-ms``), ``servers`` workers behind
a bounded FIFO queue (503 when full), a service time that grows with the batch, and work
done whether or not the client still waits. The plant's clock is real time multiplied by
``time_scale`` (10 means ten plant seconds a wall second), so a schedule of a minute runs
in six seconds; every time the client sees (latency, Retry-After) is in wall seconds.

The library's own HTTP client (``OpenAICompatible``) with its limiters (``GatedModel``
and an ``AdmissionGate``) is meant to run against it unchanged: ``serve_plant`` starts it
on 127.0.0.1 in a thread (uvicorn) and returns its URL and the server's log.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from ._plant import Job, Provider, ProviderConfig, Schedule

__all__ = ["PlantEndpoint", "ServedPlant", "serve_plant"]


@dataclass
class PlantEndpoint:
    """The plant and its log: (plant time, status) for every request that arrived."""

    config: ProviderConfig
    schedule: Schedule
    seed: int = 0
    time_scale: float = 10.0
    clock: Callable[[], float] = time.monotonic
    log: list[tuple[float, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.time_scale > 0:
            raise ValueError(f"time_scale must be > 0, got {self.time_scale!r}")
        self._ids = itertools.count()
        self.restart()

    def restart(self) -> None:
        """Plant time 0 now, buckets full, queue empty (``serve_plant`` calls it once the
        server answers, so its start-up does not eat into the schedule)."""
        self.provider = Provider(self.config, self.schedule, self.seed)
        self._t0 = self.clock()
        self._waiting: dict[int, asyncio.Future[None]] = {}
        self.log.clear()

    def now(self) -> float:
        """Plant time: wall seconds since the start times ``time_scale``."""
        return (self.clock() - self._t0) * self.time_scale

    def app(self) -> Starlette:
        """The ASGI app serving ``/v1/chat/completions``."""
        return Starlette(routes=[Route("/v1/chat/completions", self._chat, methods=["POST"])])

    async def _chat(self, request: Request) -> JSONResponse:
        body = await request.json()
        now = self.now()
        job = Job(next(self._ids), self.provider.draw_tokens(), now)
        status, retry_after = self.provider.arrive(now, job)
        self.log.append((now, status or 200))
        if status == 429:
            wall = retry_after / self.time_scale
            headers = {
                "retry-after-ms": str(max(1, round(wall * 1000))),
                "retry-after": str(math.ceil(wall)),
            }
            return _error(429, "rate_limit_exceeded", "requests or tokens per minute", headers)
        if status == 503:
            return _error(503, "server_overloaded", "the queue is full", {})
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[job.ident] = done
        self._start(now)
        await done  # the work goes on if the client leaves: a cancelled wait changes nothing
        return JSONResponse(_completion(body, job))

    def _start(self, now: float) -> None:
        loop = asyncio.get_running_loop()
        for t_done, job in self.provider.start_next(now):
            loop.call_later(max(0.0, t_done - now) / self.time_scale, self._finish, job)

    def _finish(self, job: Job) -> None:
        self.provider.finish()
        waiter = self._waiting.pop(job.ident, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        self._start(self.now())


def _error(status: int, code: str, message: str, headers: dict[str, str]) -> JSONResponse:
    body = {"error": {"message": message, "type": code, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


def _completion(body: dict[str, Any], job: Job) -> dict[str, Any]:
    prompt = sum(len(str(m.get("content", ""))) // 4 for m in body.get("messages", []))
    return {
        "id": f"chatcmpl-{job.ident}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": str(body.get("model", "fleet")),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "done"},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": job.tokens,
            "total_tokens": prompt + job.tokens,
        },
    }


@dataclass
class ServedPlant:
    """A running loopback server: its base URL (``/v1``) and how to stop it."""

    base_url: str
    endpoint: PlantEndpoint
    stop: Callable[[], None]


def serve_plant(endpoint: PlantEndpoint) -> ServedPlant:
    """Serve ``endpoint`` with uvicorn on a free 127.0.0.1 port, in a daemon thread."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(512)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(endpoint.app(), log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the plant's loopback server did not start")
        thread.join(timeout=0.02)
    endpoint.restart()

    def stop() -> None:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()

    return ServedPlant(f"http://127.0.0.1:{port}/v1", endpoint, stop)
