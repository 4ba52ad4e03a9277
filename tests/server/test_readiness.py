"""Readiness and model faults: ``/readyz`` says whether a run posted now can succeed;
``serve`` refuses a model it can prove unusable; a run whose model fails ends with the
model's own halt reason, and a model the service cannot build answers 503, never 422."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from closedloop import ModelAuthError, ModelNotAvailableError, ModelUnreachableError
from closedloop.agent import Agent, RunLimits
from closedloop.cli import main
from closedloop.models import CallInfo, FunctionModel, Message
from closedloop.server._readiness import model_problem_at_start

from .conftest import HarnessFactory, new_session


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again: nothing listens there


class _Models(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b'{"object": "list", "data": [{"id": "m", "object": "model"}]}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        return None


@pytest.fixture
def model_server() -> Iterator[str]:
    """A loopback OpenAI-compatible server that lists its models."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Models)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


async def _ready(make_harness: HarnessFactory, model: object) -> httpx.Response:
    harness = await make_harness(model=model)
    return await harness.client("anonymous").get("/readyz")


async def test_ready_with_a_test_model_and_a_writable_store(make_harness: HarnessFactory) -> None:
    harness = await make_harness()
    answer = await harness.client("anonymous").get("/readyz")
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "ready"
    assert set(answer.json()["checks"]) == {"store", "model"}


async def test_ready_when_the_model_server_answers(
    make_harness: HarnessFactory, model_server: str
) -> None:
    answer = await _ready(make_harness, f"openai-compatible:{model_server}#m")
    assert answer.status_code == 200, answer.text


async def test_not_ready_when_the_model_server_is_down(make_harness: HarnessFactory) -> None:
    url = f"http://127.0.0.1:{_dead_port()}/v1"
    answer = await _ready(make_harness, f"openai-compatible:{url}#m")
    assert answer.status_code == 503
    model = answer.json()["checks"]["model"]
    assert model["code"] == "model_unreachable" and url in model["detail"]
    # Liveness is not readiness: the process itself is fine.
    harness = await make_harness()
    assert (await harness.client("anonymous").get("/healthz")).status_code == 200


async def test_not_ready_without_the_model_file(
    make_harness: HarnessFactory, tmp_path: Path
) -> None:
    missing = tmp_path / "absent.gguf"
    answer = await _ready(make_harness, f"local:{missing}")
    assert answer.status_code == 503
    model = answer.json()["checks"]["model"]
    assert model["code"] == "model_unavailable" and str(missing) in model["detail"]


async def test_a_run_on_a_model_without_its_key_answers_503_naming_the_fix(
    make_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    harness = await make_harness(model="openai:gpt-4o-mini")
    client = harness.client("alice")
    ready = await harness.client("anonymous").get("/readyz")
    assert ready.status_code == 503 and "OPENAI_API_KEY" in ready.text
    session = await new_session(client)
    posted = await client.post(
        f"/v1/sessions/{session}/runs", json={"agent": "calc", "task": "2+3"}
    )
    assert posted.status_code == 503, posted.text
    problem = posted.json()
    assert problem["error"] == "model_unavailable"
    assert (
        "OPENAI_API_KEY is not set" in problem["detail"] and "[redacted]" not in problem["detail"]
    )


@pytest.mark.real_model  # a real client against a real (closed) port
async def test_a_run_on_an_unreachable_model_ends_model_unreachable(
    make_harness: HarnessFactory,
) -> None:
    url = f"http://127.0.0.1:{_dead_port()}/v1"
    harness = await make_harness(model=f"openai-compatible:{url}#m")
    client = harness.client("alice")
    session = await new_session(client)
    posted = await client.post(
        f"/v1/sessions/{session}/runs", json={"agent": "calc", "task": "2+3"}
    )
    assert posted.status_code == 202, posted.text
    await harness.settle()
    run = (await client.get(f"/v1/sessions/{session}/runs/{posted.json()['id']}")).json()
    assert run["halt_reason"] == "model_unreachable", run["message"]
    assert run["success"] is False and url in run["message"]


@pytest.mark.parametrize(
    ("model", "named"),
    [
        ("local:/nowhere/absent.gguf", "/nowhere/absent.gguf"),
        ("openai:gpt-4o-mini", "OPENAI_API_KEY"),
    ],
)
def test_serve_refuses_a_model_it_can_prove_unusable(
    model: str, named: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert main(["serve", "--port", "0", "--model", model]) == 2
    err = capsys.readouterr().err
    flat = " ".join(err.replace("│", " ").split())
    assert "--model" in flat and named in flat and "Traceback" not in err


def test_only_provable_problems_are_found_before_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert model_problem_at_start("openai:gpt-4o-mini").ok
    assert model_problem_at_start("test:oracle").ok
    # A server that may come back is not refused at start.
    assert model_problem_at_start(f"openai-compatible:http://127.0.0.1:{_dead_port()}/v1#m").ok
    unknown = model_problem_at_start("local:no-such-builtin")
    assert not unknown.ok and "no-such-builtin" in unknown.detail


@pytest.mark.parametrize(
    ("raised", "halt"),
    [
        (
            ModelNotAvailableError("no model file at /x.gguf; run `closedloop models pull x`"),
            "model_unavailable",
        ),
        (ModelAuthError("the server refused the key"), "model_unavailable"),
        (ModelUnreachableError("cannot reach http://h/v1: refused"), "model_unreachable"),
    ],
)
def test_a_model_fault_ends_the_run_with_its_own_halt_reason(raised: Exception, halt: str) -> None:
    def reply(messages: tuple[Message, ...], info: CallInfo) -> str:
        raise raised

    result = Agent(FunctionModel(reply), [], limits=RunLimits(max_steps=5)).run_sync("anything")
    assert result.halt_reason == halt and len(result.steps) <= 1
    assert result.error is not None and str(raised) in result.message
