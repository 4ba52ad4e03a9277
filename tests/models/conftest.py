"""Fixtures for the models area: real model files, a fake OpenAI server, a llama.cpp server."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from closedloop.models import builtin_model_path

WEATHER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "tool": {"type": "string", "enum": ["get_weather", "get_time", "search_flights"]},
        "city": {"type": "string"},
    },
    "required": ["tool", "city"],
    "additionalProperties": False,
}
ROUTER_SYSTEM = (
    "You route a user's question to one tool. Tools: get_weather(city), get_time(city), "
    'search_flights(city). Reply with JSON {"tool": ..., "city": ...}.'
)
WEATHER_QUESTION = "上海今天天气怎么样？"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _model_file(name: str) -> Path:
    path = builtin_model_path(name)
    if not path.is_file():
        pytest.fail(f"{path} is missing: run `closedloop models pull {name}` (make models)")
    return path


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    return _model_file("smollm2-135m")


@pytest.fixture(scope="session")
def qwen_path() -> Path:
    return _model_file("qwen2.5-coder-0.5b")


# --- a fake OpenAI-compatible server: real HTTP on loopback, scripted by model name ---


@dataclass
class FakeOpenAI:
    base_url: str
    requests: list[dict[str, Any]] = field(default_factory=list)


def _completion(body: dict[str, Any], content: str | None, **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    message.update(extra)
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": body.get("model", "x"),
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }


def _error(status: int, message: str, code: str | None = None, **headers: str) -> JSONResponse:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


def _fake_app(log: list[dict[str, Any]]) -> Starlette:
    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        body["_auth"] = request.headers.get("authorization")
        log.append(body)
        model = body["model"]
        fmt = (body.get("response_format") or {}).get("type")
        if model == "auth401":
            return _error(401, "Incorrect API key provided")
        if model == "forbidden403":
            return _error(403, "not allowed")
        if model == "ratelimit429":
            return _error(429, "slow down", "rate_limit_exceeded", **{"retry-after": "7"})
        if model == "ratelimit429ms":
            return _error(429, "slow down", None, **{"retry-after-ms": "1500"})
        if model == "overflow400":
            return _error(
                400, "This model's maximum context length is 8 tokens", "context_length_exceeded"
            )
        if model == "notfound404":
            return _error(404, "The model does not exist", "model_not_found")
        if model == "boom500":
            return _error(503, "overloaded")
        if model == "bad400":
            return _error(400, "temperature is odd")
        if model == "slow":
            await asyncio.sleep(1.5)
        if model == "noschema" and fmt == "json_schema":
            detail = [{"loc": ["body", "response_format", "type"], "msg": "unsupported"}]
            return JSONResponse({"detail": detail}, status_code=422)
        if model == "nojson" and fmt is not None:
            return _error(400, "response_format is not supported by this server")
        if model == "tools":
            call = {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "上海"}'},
            }
            return JSONResponse(_completion(body, None, tool_calls=[call]))
        if model == "nologprobs" and "logprobs" in body:
            return _error(400, "logprobs are not supported with this model")
        if model == "logprobs" and body.get("logprobs"):
            pieces = [
                ('{"', -0.01),
                ("tool", -0.02),
                ('":"', -0.01),
                ("get", -0.9),
                ("_weather", -0.3),
                ('"}', -0.05),
            ]
            content = [
                {"token": t, "logprob": lp, "bytes": None, "top_logprobs": []} for t, lp in pieces
            ]
            reply = _completion(body, "".join(t for t, _ in pieces))
            reply["choices"][0]["logprobs"] = {"content": content}
            return JSONResponse(reply)
        if model == "empty":
            return JSONResponse({**_completion(body, "x"), "choices": []})
        answer = json.dumps({"tool": "get_weather", "city": "上海"}, ensure_ascii=False)
        if fmt is None and body.get("messages", [{}])[0].get("role") == "system":
            answer = f"Sure:\n```json\n{answer}\n```"
        return JSONResponse(_completion(body, answer))

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


@pytest.fixture(scope="module")
def fake_openai() -> Iterator[FakeOpenAI]:
    log: list[dict[str, Any]] = []
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(_fake_app(log), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:  # bounded readiness poll
        if time.monotonic() > deadline or not thread.is_alive():
            pytest.fail("the fake OpenAI server did not start")
        time.sleep(0.01)
    try:
        yield FakeOpenAI(f"http://127.0.0.1:{port}/v1", log)
    finally:
        server.should_exit = True
        thread.join(timeout=10)


# --- a real llama-cpp-python server serving SmolLM2 ---


@dataclass(frozen=True)
class LlamaServer:
    base_url: str
    api_key: str | None
    process: subprocess.Popen[bytes]


def start_llama_server(
    model: Path,
    api_key: str | None = None,
    *,
    n_ctx: int = 2048,
    n_threads: int = 1,
    chat_format: str | None = None,
    ready_s: float = 60.0,
) -> LlamaServer:
    """``python -m llama_cpp.server`` on a free loopback port, ready to answer; a server
    that exits or is not ready within ``ready_s`` fails the test with its stderr. One
    thread by default: on cores shared with other work, llama.cpp threads spin-waiting on a
    descheduled partner stall every call."""
    port = free_port()
    cmd = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(model), "--host", "127.0.0.1", "--port", str(port),
        "--n_ctx", str(n_ctx), "--n_threads", str(n_threads),
        "--verbose", "False",
    ]  # fmt: skip
    if api_key:
        cmd += ["--api_key", api_key]
    if chat_format:
        cmd += ["--chat_format", chat_format]
    # stderr goes to a file: a pipe nobody reads could fill up and stall the server.
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
        try:
            return _wait_ready(proc, f"http://127.0.0.1:{port}", api_key, ready_s)
        except BaseException as exc:
            stop_llama_server(proc)
            log.seek(0)
            tail = log.read().decode(errors="replace")[-3000:]
            if isinstance(exc, pytest.fail.Exception):
                pytest.fail(f"{exc}\n--- the server's stderr ---\n{tail}")
            sys.stderr.write(tail)
            raise


def _wait_ready(
    proc: subprocess.Popen[bytes], base: str, api_key: str | None, ready_s: float
) -> LlamaServer:
    deadline = time.monotonic() + ready_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"llama_cpp.server exited with status {proc.returncode}")
        try:
            if httpx.get(f"{base}/v1/models", timeout=1.0, headers=_bearer(api_key)).status_code:
                return LlamaServer(f"{base}/v1", api_key, proc)
        except httpx.TransportError:
            time.sleep(0.1)  # bounded readiness poll, not a timed assertion
    pytest.fail(f"llama_cpp.server did not become ready within {ready_s:g} s")


def _bearer(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def stop_llama_server(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def llama_server(smollm2_path: Path) -> Iterator[LlamaServer]:
    server = start_llama_server(smollm2_path, api_key="s3cret")
    try:
        yield server
    finally:
        stop_llama_server(server.process)
