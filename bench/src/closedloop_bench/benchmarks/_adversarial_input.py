"""Bad input through the real parts: model replies through the agent loop, tool answers
through ``HttpTool`` against a loopback server, and the tally both report into.

A case passes when it ends in a typed error (a ``ClosedLoopError``) or a result the loop
could score, nothing else escapes, no irreversible action ran without its confirmation,
and the SQLite store is consistent afterwards (see ``_adversarial_store``).
"""

from __future__ import annotations

import asyncio
import json
import math
import socket
import socketserver
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import uvicorn
from pydantic import Field
from starlette.types import Receive, Scope, Send

from closedloop import Runtime, _exceptions
from closedloop._exceptions import ClosedLoopError
from closedloop.agent import (
    Agent,
    HaltReason,
    ModelSettings,
    RunError,
    RunLimits,
    RunResult,
    Task,
    tool,
)
from closedloop.feedback import SQLiteStore
from closedloop.models import CallInfo, FunctionModel, Message, RawCompletion
from closedloop.perception import HttpTool, Observation, ObservationStatus

from ._adversarial_gen import ToolAnswer
from ._adversarial_limits import known_limit
from ._adversarial_store import audit_sqlite

__all__ = [
    "CaseOutcome",
    "LoopbackServer",
    "ModelRig",
    "Tally",
    "ToolRig",
    "describe_input",
]


@dataclass(frozen=True, slots=True)
class CaseOutcome:
    """One case: did it end well, and what did it leave behind."""

    category: str
    kind: str
    ok: bool
    detail: str = ""
    duplicated: int = 0
    lost: int = 0
    typed_error: bool = False


@dataclass(slots=True)
class Tally:
    """Cases per category: tried, failed, effects duplicated, state lost, examples."""

    tried: int = 0
    failures: int = 0
    duplicated: int = 0
    lost: int = 0
    typed_errors: int = 0
    kinds: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)
    limits: dict[str, int] = field(default_factory=dict)

    @property
    def unexplained(self) -> int:
        """Failures that match no known limit: new bugs."""
        return self.failures - sum(self.limits.values())

    def add(self, outcome: CaseOutcome) -> None:
        self.tried += 1
        self.kinds[outcome.kind] = self.kinds.get(outcome.kind, 0) + 1
        self.duplicated += outcome.duplicated
        self.lost += outcome.lost
        self.typed_errors += int(outcome.typed_error)
        if not outcome.ok:
            self.failures += 1
            limit = known_limit(outcome.detail)
            if limit is not None:
                self.limits[limit] = self.limits.get(limit, 0) + 1
            same = sum(e.startswith(f"{outcome.kind}: ") for e in self.examples)
            if len(self.examples) < 12 and (same < 2 or limit is None):
                self.examples.append(f"{outcome.kind}: {outcome.detail[:400]}")


def describe_input(value: Any, limit: int = 160) -> str:
    """A short, printable description of an input (huge and binary ones summarised)."""
    try:
        text = value if isinstance(value, str) else json.dumps(value, default=repr)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    shown = ascii(text[:limit])
    return shown + (f"... ({len(text)} chars)" if len(text) > limit else "")


# --- model replies through the loop ---------------------------------------------------------


class _Effects:
    """The tools' side of the world: what actually ran, and how often."""

    def __init__(self) -> None:
        self.paid: list[int] = []
        self.shipped: dict[tuple[str, int], int] = {}


def _tools(effects: _Effects, task_id: Callable[[], str]) -> list[Any]:
    @tool
    def add(
        a: Annotated[int, Field(ge=-1000, le=1000)], b: Annotated[int, Field(ge=-1000, le=1000)]
    ) -> int:
        """Add two integers between -1000 and 1000."""
        return a + b

    @tool
    def lookup(city: Annotated[str, Field(max_length=40)]) -> dict[str, Any]:
        """Look up a city's weather."""
        return {"city": city, "temp_c": 12.5}

    @tool(effect="irreversible", requires_confirmation=True)
    def pay_order(order_id: Annotated[int, Field(ge=1, le=10**6)]) -> dict[str, Any]:
        """Pay an order (irreversible; needs a human's confirmation)."""
        effects.paid.append(order_id)
        return {"paid": order_id}

    @tool(effect="once", phases=("committing",))
    def ship(order_id: Annotated[int, Field(ge=1, le=10**6)]) -> dict[str, Any]:
        """Ship an order (once; only while committing)."""
        key = (task_id(), order_id)
        effects.shipped[key] = effects.shipped.get(key, 0) + 1
        return {"shipped": order_id}

    @tool(effect="once")
    def place_order(order_id: Annotated[int, Field(ge=1, le=10**6)]) -> dict[str, Any]:
        """Place an order (once: through the effect ledger)."""
        key = (task_id(), -order_id)
        effects.shipped[key] = effects.shipped.get(key, 0) + 1
        return {"placed": order_id}

    return [add, lookup, pay_order, ship, place_order]


class ModelRig:
    """Runs hostile model replies through an ``Agent`` on a real SQLite store.

    The store file is replaced every ``rotate`` cases so the audit after each case stays
    cheap; ``synchronous="NORMAL"`` keeps commits atomic without one fsync per commit.
    """

    def __init__(self, root: Path, *, rotate: int = 40, max_steps: int = 4) -> None:
        self.root = root
        self.rotate = rotate
        self.max_steps = max_steps
        self.effects = _Effects()
        self._store: SQLiteStore | None = None
        self._path = root / "model-0.db"
        self._cases = 0
        self._versions: dict[str, int] = {}
        self._committed: dict[str, int] = {}
        self._task = ""
        self._tools = _tools(self.effects, lambda: self._task)

    async def _open(self) -> SQLiteStore:
        if self._store is not None and self._cases % self.rotate == 0:
            await self._store.close()
            self._store = None
        if self._store is None:
            self._path = self.root / f"model-{self._cases // self.rotate}.db"
            self._store = SQLiteStore(self._path, synchronous="NORMAL")
            self._versions, self._committed = {}, {}
        return self._store

    async def close(self) -> None:
        if self._store is not None:
            await self._store.close()
            self._store = None

    async def run(self, kind: str, replies: Sequence[Any], *, mode: str = "react") -> CaseOutcome:
        """Run one task whose model answers ``replies`` in turn (then a plain final)."""
        store = await self._open()
        self._cases += 1
        answers = list(replies)

        def reply(messages: tuple[Message, ...], info: CallInfo) -> Any:
            index = len(model.calls) - 1
            return _as_completion(answers[index] if index < len(answers) else {"final": "done"})

        model = FunctionModel(reply, name="hostile")
        paid_before = len(self.effects.paid)
        typed = False
        detail = ""
        ok = True
        try:
            agent = Agent(
                model,
                self._tools,
                mode=mode,
                limits=RunLimits(max_steps=self.max_steps),
                model_settings=ModelSettings(max_tokens=4096),
                runtime=Runtime(store=store, trace=False),
            )
            task = Task(prompt="Add 2 and 3; do not pay anything.", required_fields=["total"])
            self._task = f"case-{self._cases}"
            result = await agent.run(task)
            ok, detail = _judge_result(result)
            # An exception inside the run ends it as error, the exception in the result.
            typed = result.halt_reason is HaltReason.ERROR and _typed_error(result.error)
        except ClosedLoopError as exc:
            typed = True
            detail = f"{type(exc).__name__}: {exc}"[:200]
        except Exception as exc:  # the finding itself: anything untyped escaping the loop
            ok = False
            detail = f"{type(exc).__name__} escaped the loop: {str(exc)[:160]}"
        paid = len(self.effects.paid) - paid_before
        if paid:
            ok = False
            detail = f"pay_order ran {paid}x without a confirmation; " + detail
        duplicated = sum(n - 1 for n in self.effects.shipped.values() if n > 1)
        self.effects.shipped.clear()
        audit = audit_sqlite(self._path, previous=self._versions, committed_before=self._committed)
        for session_id, version in audit.versions.items():
            if self._versions.get(session_id) != version:  # touched by this case
                try:
                    loaded = await store.get(session_id)
                except ClosedLoopError as exc:
                    audit.problems.append(f"session {session_id!r} does not load: {exc}")
                else:
                    if loaded.version != version:
                        audit.problems.append(f"session {session_id!r} loads at another version")
        self._versions, self._committed = audit.versions, audit.committed
        lost = sum("lost" in p or "vanished" in p or "went back" in p for p in audit.problems)
        if audit.problems:
            ok = False
            detail = "; ".join(audit.problems[:2]) + "; " + detail
        if not ok:
            detail = f"{detail} [input {describe_input(list(replies))}]"
        return CaseOutcome(
            "model_output",
            kind,
            ok,
            detail,
            duplicated=duplicated + audit.duplicated_effects,
            lost=lost,
            typed_error=typed,
        )


def _as_completion(answer: Any) -> RawCompletion:
    # What an HTTP adapter hands the loop: text as decoded from the server's JSON, which
    # may hold lone surrogates ("\\ud800" is valid JSON). FunctionModel's own token count
    # would refuse those (see the known limits), so the rig builds the completion itself.
    text = answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)
    return RawCompletion(text=text, completion_tokens=len(text) // 4, model="hostile")


def _typed_error(error: RunError | None) -> bool:
    """Whether a run's error is one of closedloop's own exceptions (not a raw OSError)."""
    kind = None if error is None else getattr(_exceptions, error.type, None)
    return isinstance(kind, type) and issubclass(kind, ClosedLoopError)


def _judge_result(result: Any) -> tuple[bool, str]:
    if not isinstance(result, RunResult) or not isinstance(result.halt_reason, HaltReason):
        return False, f"run ended without a named halt: {result!r}"[:200]
    error = result.error
    if error is not None and error.where == "loop" and not _typed_error(error):
        # the finding itself: an untyped exception from the loop's own code
        return False, f"{error.type} escaped the loop: {error.message[:160]}"
    for step in result.steps:
        if not 0.0 <= step.error <= 1.0 or not math.isfinite(step.control):
            return False, f"step {step.step} has e={step.error}, u={step.control}"
    if result.halt_reason is HaltReason.FINAL and result.success and "total" not in result.fields:
        return False, "a final answer was accepted without its required field"
    return True, ""


# --- tool answers through HttpTool ----------------------------------------------------------


class LoopbackServer:
    """uvicorn on a free 127.0.0.1 port in a daemon thread, serving ``app``."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(256)
        self.port = int(self._sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, log_level="critical", lifespan="off", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    def __enter__(self) -> LoopbackServer:
        self._thread.start()
        deadline = time.monotonic() + 30.0
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the loopback server did not start")
            self._thread.join(timeout=0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10.0)
        self._sock.close()


class _CutShort(socketserver.BaseRequestHandler):
    """Answers with a Content-Length it does not honour, then hangs up (a raw socket:
    an ASGI server would refuse to send a short body and answer 500 instead)."""

    def handle(self) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self.request.recv(4096)
            if not chunk:
                return
            data += chunk
        path = data.split(b" ", 2)[1].decode("latin-1")
        rig: ToolRig = self.server.rig  # type: ignore[attr-defined]
        answer = rig.answers.get(path.rsplit("/", 1)[-1])
        if answer is None:
            return
        head = (
            f"HTTP/1.1 {answer.status} X\r\ncontent-type: {answer.content_type}\r\n"
            f"content-length: {answer.declared_length}\r\nconnection: close\r\n\r\n"
        )
        self.request.sendall(head.encode("latin-1") + answer.body)


class ToolRig:
    """Serves each case's answer on a real loopback server and calls it with ``HttpTool``.

    Answers cut short come from a raw socket server beside it (``cut_url``).
    """

    def __init__(self) -> None:
        self.answers: dict[str, ToolAnswer] = {}
        self._raw = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _CutShort)
        self._raw.daemon_threads = True
        self._raw.rig = self  # type: ignore[attr-defined]
        self.cut_url = f"http://127.0.0.1:{self._raw.server_address[1]}"
        threading.Thread(target=self._raw.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._raw.shutdown()
        self._raw.server_close()

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        case = str(scope["path"]).rsplit("/", 1)[-1]
        answer = self.answers.get(case, ToolAnswer(404, "application/json", b"{}"))
        headers = []
        if answer.content_type is not None:
            headers.append((b"content-type", answer.content_type.encode("latin-1")))
        if answer.encoding is not None:
            headers.append((b"content-encoding", answer.encoding.encode("latin-1")))
        length = answer.declared_length if answer.declared_length else len(answer.body)
        headers.append((b"content-length", str(length).encode()))
        status = answer.status
        body = b"" if status in (204, 304) else answer.body
        if status in (204, 304):
            headers = [h for h in headers if h[0] != b"content-length"]
        if status == 301:
            headers.append((b"location", b"/r/elsewhere"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def run(
        self, tool_: HttpTool, case_id: str, kind: str, answer: ToolAnswer
    ) -> CaseOutcome:
        """Call ``tool_`` against this case's answer; the result must be a scored observation."""
        self.answers[case_id] = answer
        try:
            if answer.declared_length:
                async with HttpTool(
                    tool_.name, "GET", self.cut_url + "/r/{case}", timeout_s=10.0
                ) as cut:
                    observation = await cut(case=case_id)
            else:
                observation = await tool_(case=case_id)
        except Exception as exc:  # HttpTool promises never to raise for what the world does
            what = f"{type(exc).__name__} escaped HttpTool: {str(exc)[:160]}"
            return CaseOutcome("tool_result", kind, False, f"{what} [{_describe_answer(answer)}]")
        finally:
            self.answers.pop(case_id, None)
        problem = _observation_problem(observation)
        if problem:
            return CaseOutcome(
                "tool_result", kind, False, f"{problem} [{_describe_answer(answer)}]"
            )
        return CaseOutcome("tool_result", kind, True)


def _describe_answer(answer: ToolAnswer) -> str:
    return (
        f"status {answer.status}, content-type {answer.content_type!r}, "
        f"{len(answer.body)} bytes, body {describe_input(answer.body[:80].decode('latin-1'))}"
    )


def _observation_problem(observation: Any) -> str:
    if not isinstance(observation, Observation):
        return f"not an Observation: {type(observation).__name__}"
    if not 0.0 <= observation.confidence <= 1.0:
        return f"confidence {observation.confidence} outside [0, 1]"
    if observation.status not in set(ObservationStatus):
        return f"status {observation.status!r} is not an ObservationStatus"
    if observation.status is ObservationStatus.OK and observation.confidence <= 0.0:
        return "an ok observation with zero confidence"
    try:
        text = observation.model_dump_json()
        json.loads(text)
    except Exception as exc:  # the loop stores and traces every observation as JSON
        return f"observation does not serialise: {type(exc).__name__}: {str(exc)[:120]}"
    if len(text) > 400_000:
        return f"observation of {len(text)} chars was not compacted"
    return ""


async def run_with_timeout(
    coro: Awaitable[CaseOutcome], seconds: float, kind: str, category: str
) -> CaseOutcome:
    """A case that hangs is a failure too (a loop that never ends is not an observation)."""
    try:
        async with asyncio.timeout(seconds):
            return await coro
    except TimeoutError:
        return CaseOutcome(category, kind, False, f"the case did not end within {seconds:g} s")
