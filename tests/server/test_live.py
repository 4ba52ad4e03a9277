"""A real uvicorn server on 127.0.0.1: the event stream is live; the CLI serves and keeps keys."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from closedloop.cli import main
from closedloop.feedback import SQLiteStore
from closedloop.models import CallInfo, FunctionModel, Message
from closedloop.server import ApiKeys, ServerSettings, create_app

from .conftest import LiveServer, calc_reply, make_registry, sensor_reply


class GatedModel(FunctionModel):
    """Answers only when the test opens the gate, one call per opening."""

    def __init__(self) -> None:
        self.gate = threading.Semaphore(0)

        async def reply(messages: tuple[Message, ...], info: CallInfo) -> dict[str, Any]:
            opened = await asyncio.to_thread(self.gate.acquire, True, 30)
            assert opened, "the test never opened the gate"
            if "- probe:" in messages[0].content:
                return sensor_reply(messages, info)
            return calc_reply(messages, info)

        super().__init__(reply, name="gated")


def make_key(db: Path, name: str = "live") -> str:
    async def create() -> str:
        store = SQLiteStore(db)
        try:
            return (await ApiKeys(store).create(name)).token
        finally:
            await store.close()

    return asyncio.run(create())


def events(lines: Iterator[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    event, data = "message", ""
    for line in lines:
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data += line[6:]
        elif line == "" and data:
            yield event, json.loads(data)
            event, data = "message", ""


@pytest.mark.integration
def test_the_event_stream_delivers_each_step_as_it_happens(
    tmp_path: Path, live_server_factory: Callable[[FastAPI], LiveServer]
) -> None:
    db = tmp_path / "state.db"
    key = make_key(db)
    model = GatedModel()
    app = create_app(
        ServerSettings(
            store=f"sqlite://{db}",
            model=model,
            registry=make_registry(),
            runs_dir=tmp_path / "runs",
            gc_interval_s=None,
        )
    )
    live = live_server_factory(app)
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=live.base_url, headers=headers, timeout=30) as client:
        sid = client.post("/v1/sessions", json={}).json()["id"]
        rid = client.post(
            f"/v1/sessions/{sid}/runs", json={"agent": "calc", "task": "Add 40 and 2."}
        ).json()["id"]
        with client.stream("GET", f"/v1/sessions/{sid}/runs/{rid}/events") as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            received = events(stream.iter_lines())
            event, data = next(received)
            assert event == "status" and data["status"] == "running"
            model.gate.release()  # step 0 may happen now, and not before
            event, data = next(received)
            assert event == "step" and data["step"] == 0 and data["tool"] == "add"
            assert client.get(f"/v1/sessions/{sid}/runs/{rid}").json()["status"] == "running"
            model.gate.release()
            event, data = next(received)
            assert event == "step" and data["step"] == 1 and data["halt"] == "final"
            rest = list(received)
        assert rest[-1][0] == "end" and rest[-1][1]["status"] == "done"
        assert client.get(f"/v1/sessions/{sid}/runs/{rid}").json()["answer"] == "42"


@pytest.mark.integration
def test_keys_cli_creates_lists_and_revokes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite://{tmp_path}/keys.db"
    assert main(["keys", "create", "--name", "ci bot", "--store", url]) == 0
    printed = capsys.readouterr().out.strip().splitlines()
    token = printed[-1]
    key_id = printed[0].split()[2]
    assert token.startswith(f"sk-cl-{key_id}-")
    assert main(["keys", "list", "--json", "--store", url]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(k["key_id"], k["name"], k["revoked_at"]) for k in listed] == [(key_id, "ci bot", None)]
    assert token not in json.dumps(listed)
    assert main(["keys", "list", "--store", url]) == 0
    assert key_id in capsys.readouterr().out
    assert main(["keys", "revoke", key_id, "--store", url]) == 0
    assert capsys.readouterr().out.strip() == f"revoked {key_id} (ci bot)"
    assert main(["keys", "list", "--json", "--store", url]) == 0
    assert json.loads(capsys.readouterr().out)[0]["revoked_at"] is not None
    assert main(["keys", "revoke", "000000000000", "--store", url]) == 2
    assert main(["keys", "create", "--name", "bad/name", "--store", url]) == 2
    # The name as an argument, the way the README writes it; two different names are refused.
    assert main(["keys", "create", "me", "--store", url]) == 0
    capsys.readouterr()
    assert main(["keys", "list", "--json", "--store", url]) == 0
    assert "me" in [k["name"] for k in json.loads(capsys.readouterr().out)]
    assert main(["keys", "create", "me", "--name", "you", "--store", url]) == 2
    assert "differ" in capsys.readouterr().err


@pytest.mark.integration
def test_closedloop_serve_in_a_subprocess(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    key = make_key(db, "cli")
    env_home = tmp_path / "home"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "closedloop",
            "serve",
            "--port",
            "0",
            "--store",
            f"sqlite://{db}",
            "--log-level",
            "warning",
            "--world",
            "local",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**__import__("os").environ, "CLOSEDLOOP_HOME": str(env_home)},
    )
    try:
        assert proc.stdout is not None
        world_line = proc.stdout.readline()
        assert world_line.startswith("world (none) on http://127.0.0.1:"), world_line
        first = proc.stdout.readline()
        assert first.startswith("closedloop service on http://127.0.0.1:"), first
        url = first.split()[3].rstrip("/")
        assert httpx.get(f"{url}/healthz", timeout=20).json()["status"] == "ok"
        me = httpx.get(f"{url}/v1/me", headers={"Authorization": f"Bearer {key}"}, timeout=10)
        assert me.json()["name"] == "cli"
        agents = httpx.get(
            f"{url}/v1/agents", headers={"Authorization": f"Bearer {key}"}, timeout=10
        ).json()["agents"]
        assert agents and all(a["source"] == "reference" and a["available"] for a in agents)
        assert "weather" in {a["name"] for a in agents}
        assert httpx.get(f"{url}/v1/me", timeout=10).status_code == 401
        page = httpx.get(f"{url}/", timeout=10)
        assert page.status_code == 200 and "closedloop" in page.text
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=30)
    assert proc.stderr is not None
    errors = proc.stderr.read()
    assert code == 0, errors
    assert "Traceback" not in errors and key not in errors


@pytest.mark.parametrize(
    ("args", "named", "reason"),
    [
        (["--model", "bogus:xyz"], "--model", "unknown kind 'bogus'"),
        (["--store", "postgres://db/x"], "--store", "must start with sqlite://"),
        (["--store", "redis://127.0.0.1:1/0"], "--store", "127.0.0.1:1"),
    ],
)
def test_serve_refuses_to_start_on_a_bad_model_or_store(
    args: list[str], named: str, reason: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Refused before anything listens: main returns the usage error code, naming the option.
    assert main(["serve", "--port", "0", *args]) == 2
    err = capsys.readouterr().err
    flat = " ".join(err.replace("│", " ").split())  # the error box wraps long lines
    assert named in flat and reason in flat and "Traceback" not in err
