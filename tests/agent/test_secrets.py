"""Secret references end to end: the tool gets the value, nothing the run wrote holds it.

A run on a real SQLite file with three secrets: one typed into the task's text (a detector
finds it), one the model writes out in clear in a tool argument, one declared as a
``Secret`` that no detector would recognise. Every file under the run's folder (the
database with its -wal and -shm while the store is open, again after it closed; the trace
and the result) is searched for each value's bytes, and so is every answer of the
service's ``GET run``, through the real ASGI app.
"""

from __future__ import annotations

import re
import secrets
from pathlib import Path
from typing import Any

import httpx
import pytest

from closedloop import HaltReason, Secret, SecretUnavailableError
from closedloop.agent import Agent, Runtime, tool
from closedloop.execution import EnvResolver
from closedloop.feedback import SQLiteStore
from closedloop.models import CallInfo, FunctionModel, Message
from closedloop.server import AgentContext, AgentRegistry, ApiKeys, ServerSettings, create_app

_DETECTED = re.compile(r"\{\{secret:detected_\d+\}\}")


class World:
    """Fresh secret values per test, the calls the tool received, what the model read."""

    def __init__(self) -> None:
        self.typed = "sk-" + secrets.token_hex(16)  # in the task's text
        self.written = "ghp_" + secrets.token_hex(18)  # the model writes it in clear
        self.declared = "vault-" + secrets.token_hex(16)  # resolved from the "environment"
        self.received: list[dict[str, str]] = []
        self.read: list[str] = []

    @property
    def values(self) -> dict[str, str]:
        return {"typed": self.typed, "written": self.written, "declared": self.declared}

    def agent(self, store: Any, trace_dir: Path, **options: Any) -> Agent:
        @tool
        def call_api(token: str, key: str, extra: str) -> dict[str, Any]:
            """Call the API with its token and the user's key."""
            self.received.append({"token": token, "key": key, "extra": extra})
            # A tool that echoes a credential: its answer must be scrubbed too.
            return {"ok": True, "echo": f"used {token}"}

        def reply(messages: tuple[Message, ...], info: CallInfo) -> dict[str, Any]:
            self.read.extend(m.content for m in messages)
            last = messages[-1].content
            if '"ok": true' in last:
                return {"final": "called"}
            typed = _DETECTED.search(last)
            assert typed is not None, "the task's secret reached the model in clear"
            arguments = {"token": "{{secret:API_TOKEN}}", "key": typed.group(0)}
            return {"tool": "call_api", "arguments": {**arguments, "extra": self.written}}

        environ = {"API_TOKEN": self.declared}
        return Agent(
            FunctionModel(reply),
            [call_api],
            runtime=Runtime(
                trace_dir=trace_dir,
                store=store,
                secrets=[Secret("API_TOKEN", resolver=EnvResolver(environ=environ))],
            ),
            **options,
        )

    def task(self) -> str:
        return f"Call the API. My key is {self.typed}, keep it safe."

    def check_the_tool_got_every_value(self) -> None:
        assert self.received == [{"token": self.declared, "key": self.typed, "extra": self.written}]

    def leaks(self, root: Path) -> list[str]:
        """``file: which`` for every value found in a file under ``root``."""
        out = []
        for path in sorted(root.rglob("*")):
            if path.is_file():
                data = path.read_bytes()
                out += [f"{path.name}: {k}" for k, v in self.values.items() if v.encode() in data]
        return out


async def test_no_file_the_run_wrote_holds_a_secret_and_the_tool_got_each(tmp_path: Path) -> None:
    world = World()
    store = SQLiteStore(tmp_path / "state.db")
    try:
        result = await world.agent(store, tmp_path / "runs").run(world.task())
        assert result.halt_reason is HaltReason.FINAL, result.message
        world.check_the_tool_got_every_value()
        written = {p.name for p in tmp_path.rglob("*") if p.is_file()}
        assert {"state.db", "state.db-wal", "state.db-shm", "trace.jsonl"} <= written
        assert world.leaks(tmp_path) == []  # while the WAL still holds the latest pages
        state = (await store.get(result.task_id)).to_dict()
        assert "{{secret:detected_1}}" in state["prompt"]  # the reference, not a redaction
    finally:
        await store.close()
    assert world.leaks(tmp_path) == []
    seen = "\n".join(world.read)
    assert "{{secret:API_TOKEN}}" in seen  # the model is told which secrets it may name
    assert all(v not in seen for k, v in world.values.items() if k != "written")


async def test_get_run_and_every_file_of_the_service_hold_no_secret(tmp_path: Path) -> None:
    world = World()
    store = SQLiteStore(tmp_path / "state.db")
    registry = AgentRegistry()

    def build(ctx: AgentContext) -> Agent:
        return world.agent(ctx.store, tmp_path / "agent-runs")

    registry.register("vault", build)
    app = create_app(
        ServerSettings(
            store=store,
            model=FunctionModel(lambda m, i: {"final": "unused"}),
            registry=registry,
            runs_dir=tmp_path / "runs",
            gc_interval_s=None,
        )
    )
    token = (await ApiKeys(store).create("alice")).token
    answers: list[str] = []
    try:
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app),
                base_url="http://service.test",
                headers={"Authorization": f"Bearer {token}"},
            ) as client,
        ):
            session = (await client.post("/v1/sessions", json={})).json()["id"]
            started = await client.post(
                f"/v1/sessions/{session}/runs", json={"agent": "vault", "task": world.task()}
            )
            assert started.status_code == 202, started.text
            answers.append(started.text)
            run_id = started.json()["id"]
            await app.state.service.runs.wait_idle()
            got = await client.get(f"/v1/sessions/{session}/runs/{run_id}")
            assert got.status_code == 200 and got.json()["halt_reason"] == "final", got.text
            for path in ("", "/result", "/trace"):
                answer = await client.get(f"/v1/sessions/{session}/runs/{run_id}{path}")
                assert answer.status_code == 200, answer.text
                answers.append(answer.text)
            answers.append((await client.get("/v1/runs")).text)
            world.check_the_tool_got_every_value()
            assert [k for k, v in world.values.items() if any(v in a for a in answers)] == []
            assert world.leaks(tmp_path) == []
    finally:
        await store.close()
    assert world.leaks(tmp_path) == []


async def test_an_unknown_reference_ends_the_run_naming_the_secret(tmp_path: Path) -> None:
    @tool
    def call_api(token: str) -> str:
        """Call the API."""
        raise AssertionError("a tool must not run with an unresolved reference")

    agent = Agent(
        FunctionModel(lambda m, i: {"tool": "call_api", "arguments": {"token": "{{secret:NOPE}}"}}),
        [call_api],
        runtime=Runtime(trace_dir=tmp_path, secrets=[Secret.env("API_TOKEN")]),
    )
    result = await agent.run("Call the API.")
    assert result.halt_reason is HaltReason.SECRET_UNAVAILABLE
    assert result.error is not None and result.error.type == "SecretUnavailableError"
    assert "'NOPE'" in result.message and "API_TOKEN" in result.message
    assert "Traceback" not in result.message


async def test_a_failing_resolver_ends_the_run_naming_the_secret_not_a_value(
    tmp_path: Path,
) -> None:
    def vault(name: str) -> str:
        raise ConnectionError("vault.internal refused the connection")

    @tool
    def call_api(token: str) -> str:
        """Call the API."""
        raise AssertionError("a tool must not run without its secret")

    agent = Agent(
        FunctionModel(lambda m, i: {"tool": "call_api", "arguments": {"token": "{{secret:db}}"}}),
        [call_api],
        runtime=Runtime(trace_dir=tmp_path, secrets=[Secret("db", resolver=vault)]),
    )
    result = await agent.run("Call the API.")
    assert result.halt_reason is HaltReason.SECRET_UNAVAILABLE
    assert "secret 'db'" in result.message and "ConnectionError" in result.message


async def test_an_unset_variable_is_named_when_the_secret_resolves() -> None:
    secret = Secret("API_TOKEN", resolver=EnvResolver(environ={}))
    with pytest.raises(SecretUnavailableError, match="environment variable 'API_TOKEN'"):
        await secret.resolve()
    # Random values: a resolved value is scrubbed process-wide, so a fixed one could
    # change what another test's artefacts read.
    value = secrets.token_hex(8)
    prefixed = Secret("TOKEN", resolver=EnvResolver(prefix="APP_", environ={"APP_TOKEN": value}))
    assert await prefixed.resolve() == value
    assert Secret.env("x", variable="Y").resolver == EnvResolver(variable="Y")
