"""Bad HTTP requests against the service, in process (the ASGI app on a real SQLite file).

Every answer must be a non-5xx status with the service's one error shape; a request for
another key's resource must never succeed; the store must stay consistent after each.
"""

from __future__ import annotations

import json
import secrets
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from fastapi import FastAPI

from closedloop import Runtime
from closedloop.agent import Agent, RunLimits
from closedloop.feedback import SQLiteStore
from closedloop.models import CallInfo, FunctionModel, Message
from closedloop.server import (
    AgentContext,
    AgentRegistry,
    ApiKeys,
    RateLimit,
    ServerSettings,
    create_app,
)

from ._adversarial_gen import ApiRequest
from ._adversarial_input import CaseOutcome, describe_input
from ._adversarial_store import audit_sqlite

__all__ = ["ApiRig", "echo_registry"]


def _final(messages: tuple[Message, ...], info: CallInfo) -> dict[str, Any]:
    return {"final": "ok"}


def echo_registry() -> AgentRegistry:
    """One agent, ``echo``, that answers at once (the service is under test, not the model)."""
    registry = AgentRegistry()

    def echo(ctx: AgentContext) -> Agent:
        return Agent(ctx.model, [], limits=RunLimits(max_steps=2), runtime=Runtime(store=ctx.store))

    registry.register("echo", echo, description="answers ok")
    return registry


class ApiRig:
    """The service on a SQLite file with two keys (``alice`` calls, ``bob`` owns the rest)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.path = root / "service.db"
        self.store = SQLiteStore(self.path, synchronous="NORMAL")
        settings = ServerSettings(
            store=self.store,
            model=FunctionModel(_final, name="echo-model"),
            registry=echo_registry(),
            runs_dir=root / "runs",
            gc_interval_s=None,
            sse_poll_s=0.05,
            # Bad bodies, not request rates, are under test here (hostile clients and their
            # rate limit have their own row): the fuzz must not drain alice's key.
            rate_limit=RateLimit(rate_per_s=100_000.0, burst=100_000),
        )
        self.app: FastAPI = create_app(settings)
        self._lifespan: AbstractAsyncContextManager[Any] | None = None
        self.tokens: dict[str, str] = {}
        self.ids: dict[str, dict[str, str]] = {}
        self.client: httpx.AsyncClient | None = None
        self._versions: dict[str, int] = {}
        self._committed: dict[str, int] = {}

    async def __aenter__(self) -> ApiRig:
        self._lifespan = self.app.router.lifespan_context(self.app)
        await self._lifespan.__aenter__()
        keys = ApiKeys(self.store)
        for who in ("alice", "bob"):
            self.tokens[who] = (await keys.create(who)).token
        self.client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.app), base_url="http://service.test"
        )
        for who in ("alice", "bob"):
            self.ids[who] = await self._own(who)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.app.state.service.runs.wait_idle()
        if self.client is not None:
            await self.client.aclose()
        if self._lifespan is not None:
            await self._lifespan.__aexit__(None, None, None)
        await self.store.close()

    def headers(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    async def _own(self, who: str) -> dict[str, str]:
        assert self.client is not None
        made = await self.client.post("/v1/sessions", json={}, headers=self.headers(who))
        if made.status_code != 201:
            raise RuntimeError(f"{who}'s session was refused: {made.status_code} {made.text}")
        sid = str(made.json()["id"])
        run = await self.client.post(
            f"/v1/sessions/{sid}/runs",
            json={"agent": "echo", "task": "hi"},
            headers=self.headers(who),
        )
        rid = str(run.json()["id"])
        await self.app.state.service.runs.wait_idle()
        return {"sid": sid, "rid": rid, "hid": "hov_" + secrets.token_hex(8)}

    def _fill(self, path: str, target: str) -> str:
        if target == "own":
            ids = self.ids["alice"]
        elif target == "other":
            ids = self.ids["bob"]
        else:
            ids = {"sid": "ses_" + secrets.token_hex(8), "rid": "run_" + secrets.token_hex(8)}
            ids["hid"] = "hov_" + secrets.token_hex(8)
        for name, value in ids.items():
            path = path.replace("{" + name + "}", value)
        return path

    async def run(self, kind: str, request: ApiRequest) -> CaseOutcome:
        """Send one request as alice; judge the answer and audit the store."""
        assert self.client is not None
        path = self._fill(request.path, request.target)
        url = quote(path.encode("utf-8", "surrogatepass"), safe="/")
        if request.query:
            url += "?" + quote(request.query, safe="=&")
        headers = self.headers("alice")
        if request.content_type is not None:
            headers["Content-Type"] = request.content_type
        problem = ""
        try:
            response = await self.client.request(
                request.method, url, content=request.body, headers=headers
            )
        except Exception as exc:  # the ASGI transport re-raises what the app let escape
            problem = f"{type(exc).__name__} escaped the service: {str(exc)[:160]}"
        else:
            problem = _answer_problem(response, request)
            if request.method == "DELETE" and response.status_code == 204:
                self.ids["alice"] = await self._own("alice")
            if request.target == "other" and "{" in request.path and response.is_success:
                problem = f"alice got {response.status_code} on bob's resource {path}"
        await self.app.state.service.runs.wait_idle()
        audit = audit_sqlite(self.path)
        # Sessions may be deleted through the API; what remains must not go back.
        for session_id, version in audit.versions.items():
            before = self._versions.get(session_id)
            if before is not None and version < before:
                audit.problems.append(f"session {session_id!r} went back to v{version}")
        lost = [k for k in self._committed if k not in audit.committed]
        self._versions, self._committed = audit.versions, audit.committed
        if audit.problems:
            problem = "; ".join(audit.problems[:2]) + (f"; {problem}" if problem else "")
        if problem:
            what = f"{request.method} {describe_input(url, 80)} body {describe_input(request.body, 80)}"
            return CaseOutcome("api", kind, False, f"{problem} [{what}]", lost=len(lost))
        return CaseOutcome("api", kind, True)


def _answer_problem(response: httpx.Response, request: ApiRequest) -> str:
    status = response.status_code
    if status >= 500:
        return f"answered {status}: {response.text[:160]}"
    if status >= 400 and status != 405:
        try:
            body = response.json()
        except (ValueError, UnicodeDecodeError):
            return f"{status} without a JSON error body: {response.text[:80]!r}"
        if not isinstance(body, dict) or "error" not in body:
            return f"{status} without the error shape: {json.dumps(body)[:120]}"
    return ""
