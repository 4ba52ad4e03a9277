"""Chaos: a real multi-worker deployment on Redis, runs with irreversible effects, workers
killed with SIGKILL while they run, and a count of what the world received.

The deployment is ``closedloop serve --workers N`` on a redis-server the caller provides;
runs are dispatched through the run queue, so a killed worker's runs are taken over by a
live one. The world is a file: each effect appends one line naming its customer, so after
the chaos every customer whose run completed must have exactly one line (a second line is
a duplicated effect; none is a lost one). Some runs repeat an earlier run's customer and
``Idempotency-Key``: they share its task id, so their effect is replayed from the ledger,
never applied again. A killer sends SIGKILL to a worker executing a run at the scheduled
times; uvicorn's supervisor starts a fresh worker in its place.

:func:`run_chaos` reports runs submitted, completed and taken over, the time from a kill
to the takeover of each run the killed worker held (p50 / p95), duplicated and lost
effects, and lost runs (submitted, never completed).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from closedloop import Runtime
from closedloop.agent import (
    Agent,
    RequiredField,
    RunLimits,
    Task,
    as_tool,
    stop_on_no_progress,
    stop_on_repeats,
)
from closedloop.execution import AtomicAction, EffectClass, Reconciliation
from closedloop.models import CallInfo, FunctionModel, Message
from closedloop.server import AgentContext, AgentRegistry, ApiKeys, open_store

__all__ = ["ChaosPlan", "chaos_row", "percentile", "register", "run_chaos", "world_orders"]

WORKER_HEADER = "X-Closedloop-Worker"
AGENT = "chaos-orderer"


# --- the agent the workers run -------------------------------------------------------------


def world_orders(world: Path) -> list[dict[str, Any]]:
    """Every order the world file holds, in the order they were applied."""
    if not world.exists():
        return []
    return [json.loads(line) for line in world.read_text().splitlines() if line.strip()]


def _chaos_orderer(ctx: AgentContext) -> Agent:
    world = Path(str(ctx.params["world"]))
    customer = str(ctx.params["customer"])
    delay_s = float(ctx.params.get("delay_s", 0.5))

    async def place_order(customer: str) -> dict[str, Any]:
        """Place one order for ``customer`` (irreversible); the world takes ``delay_s``."""
        order = {"customer": customer, "order_id": f"ORD-{customer}", "pid": os.getpid()}
        with world.open("a") as out:
            out.write(json.dumps(order) + "\n")
        await asyncio.sleep(delay_s)  # the world's latency: a kill may land here
        return order

    async def reconcile(args: Mapping[str, Any], _record: Any) -> Reconciliation:
        found = [o for o in world_orders(world) if o["customer"] == args["customer"]]
        return Reconciliation.was_applied(found[0]) if found else Reconciliation.not_applied()

    def reply(messages: tuple[Message, ...], info: CallInfo) -> dict[str, Any]:
        text = "\n".join(m.content for m in messages[1:])
        found = re.search(r"(ORD-[A-Za-z0-9\-]+)", text)
        if found:
            return {"final": f"ordered as {found.group(1)}"}
        return {"tool": "place_order", "arguments": {"customer": customer}}

    action = AtomicAction(
        name="place_order", fn=place_order, effect=EffectClass.IRREVERSIBLE, reconciler=reconcile
    )
    return Agent(
        FunctionModel(reply, name="chaos"),
        [as_tool(action, fills={"order_id": "order_id"})],
        limits=RunLimits(max_steps=4, stop=stop_on_no_progress(3) | stop_on_repeats(1)),
        runtime=Runtime(store=ctx.store),
    )


def _order_task(text: str, ctx: AgentContext) -> Task:
    return Task(text, required_fields=[RequiredField(name="order_id", source="place_order")])


def register(registry: AgentRegistry) -> None:
    """Register ``chaos-orderer`` (``--agents closedloop_bench.benchmarks._chaos:register``)."""
    registry.register(AGENT, _chaos_orderer, task=_order_task, replace=True)


# --- the deployment ------------------------------------------------------------------------


@dataclass
class _Deployment:
    url: str
    token: str
    process: subprocess.Popen[str]

    def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.token}", **kwargs.pop("headers", {})}
        return httpx.request(method, self.url + path, headers=headers, timeout=30.0, **kwargs)

    def workers(self) -> list[int]:
        """The pids of the worker processes uvicorn's supervisor runs now."""
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        pids = [int(p) for p in children.read_text().split()] if children.exists() else []
        found = []
        for pid in pids:
            with contextlib.suppress(OSError):
                if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(pid)
        return found


def _token(store_url: str) -> str:
    async def create() -> str:
        store = open_store(store_url)
        try:
            return (await ApiKeys(store).create("chaos")).token
        finally:
            await store.close()

    return asyncio.run(create())


@contextlib.contextmanager
def _serve(
    store_url: str, runs_dir: Path, workers: int, takeover_after_s: float, bound_s: float
) -> Iterator[_Deployment]:
    token = _token(store_url)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "closedloop", "serve", "--workers", str(workers)]
    command += ["--port", "0", "--store", store_url, "--runs-dir", str(runs_dir)]
    command += ["--agents", "closedloop_bench.benchmarks._chaos:register"]
    command += ["--takeover-after", str(takeover_after_s), "--log-level", "warning"]
    command += ["--model", "openai-compatible:http://127.0.0.1:9/v1#unused"]
    log = (runs_dir.parent / "serve.log").open("w")
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True
    )
    try:
        assert process.stdout is not None
        found = None
        for line in process.stdout:
            found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
            if found is not None:
                break
        if found is None:
            raise RuntimeError(f"the service did not start; see {log.name}")
        deployment = _Deployment(f"http://127.0.0.1:{found.group(1)}", token, process)
        deadline = time.monotonic() + bound_s
        while len(deployment.workers()) < workers and time.monotonic() < deadline:
            time.sleep(0.05)
        yield deployment
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


# --- the driver ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChaosPlan:
    """What the chaos does.

    ``runs``: how many runs to submit (None: as many as ``duration_s`` allows, one each
    ``submit_every_s``); ``kills_at_s``: seconds after the start at which a worker that
    executes a run is killed; ``repeat_share``: the share of runs that repeat an earlier
    completed run's customer and idempotency key; ``delay_s``: how long the world takes
    per effect (what makes a kill land mid-run); ``concurrent_repeats``: a repeat may come
    while the run it repeats still executes (two live claims on one idempotency key).
    """

    duration_s: float
    kills_at_s: Sequence[float]
    runs: int | None = None
    workers: int = 2
    submit_every_s: float = 0.5
    repeat_share: float = 0.2
    delay_s: float = 0.5
    takeover_after_s: float = 3.0
    bound_s: float = 120.0
    seed: int = 0
    concurrent_repeats: bool = False


@dataclass
class _Submitted:
    session: str
    run: str
    customer: str
    repeat: bool
    submitted_at: float


@dataclass
class _Tally:
    submitted: list[_Submitted] = field(default_factory=list)
    kills: list[tuple[float, int]] = field(default_factory=list)  # (wall time, pid)
    workers_after: int = 0


def percentile(values: Sequence[float], share: float) -> float | None:
    """The ``share`` quantile of ``values`` (nearest rank); None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(share * (len(ordered) - 1))))
    return round(ordered[rank], 3)


def _submit(
    deployment: _Deployment,
    world: Path,
    customer: str,
    plan: ChaosPlan,
    session: str | None,
) -> _Submitted | None:
    """One run: in a session of its own, or for a repeat in the session of the run it
    repeats (an idempotency key is per session). A POST that a dying worker took is looked
    up in the session's runs before it is sent again."""
    params = {"world": str(world), "customer": customer, "delay_s": plan.delay_s}
    body = {"agent": AGENT, "task": "order", "params": params}
    key = {"Idempotency-Key": f"order-{customer}"}
    repeat = session is not None
    known: int | None = None
    deadline = time.monotonic() + plan.bound_s
    while time.monotonic() < deadline:
        try:
            if session is None:
                session = str(deployment.call("POST", "/v1/sessions").json()["id"])
            listed = deployment.call("GET", f"/v1/sessions/{session}/runs").json()["runs"]
            if known is None:
                known = len(listed)
            if len(listed) > known:
                run = str(listed[-1]["id"])
            else:
                started = deployment.call(
                    "POST", f"/v1/sessions/{session}/runs", json=body, headers=key
                )
                # 202: a new run; 200: a repeated key, answered with the run it started.
                if started.status_code not in (200, 202):
                    raise RuntimeError(f"run refused: {started.status_code} {started.text}")
                run = str(started.json()["id"])
            return _Submitted(session, run, customer, repeat, time.time())
        except httpx.TransportError:
            continue  # the worker that took the request was killed: ask again
    return None


def _kill_one(deployment: _Deployment, tally: _Tally, rng: random.Random) -> None:
    """SIGKILL a worker that executes a run now (waits a little for one; else any)."""
    busy: set[int] = set()
    alive: set[int] = set()
    deadline = time.monotonic() + 10.0
    while not busy & alive and time.monotonic() < deadline:
        for sub in tally.submitted[-8:]:
            with contextlib.suppress(httpx.HTTPError, ValueError):
                path = f"/v1/sessions/{sub.session}/runs/{sub.run}"
                record = deployment.call("GET", path).json()
                if record.get("status") == "running" and record.get("worker"):
                    busy.add(int(record["worker"]))
        alive = set(deployment.workers())
    choices = sorted(busy & alive) or sorted(alive)
    if not choices:
        return
    victim = rng.choice(choices)
    with contextlib.suppress(ProcessLookupError):
        os.kill(victim, signal.SIGKILL)
        tally.kills.append((time.time(), victim))


def _final(deployment: _Deployment, sub: _Submitted, bound_s: float) -> dict[str, Any]:
    path = f"/v1/sessions/{sub.session}/runs/{sub.run}"
    deadline = time.monotonic() + bound_s
    record: dict[str, Any] = {}
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.TransportError, ValueError):
            record = deployment.call("GET", path).json()
            if record.get("status") not in ("running", None):
                return record
        time.sleep(0.1)
    return record


def run_chaos(store_url: str, workdir: Path, plan: ChaosPlan) -> dict[str, Any]:
    """Run the chaos on a Redis store (``redis://…``); returns the report."""
    rng = random.Random(plan.seed)
    world = workdir / "world.jsonl"
    runs_dir = workdir / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    tally = _Tally()
    started = time.monotonic()
    with _serve(store_url, runs_dir, plan.workers, plan.takeover_after_s, plan.bound_s) as dep:
        kills = sorted(plan.kills_at_s)
        done: dict[str, str] = {}  # customer -> session, of first runs that completed
        n = 0
        while time.monotonic() - started < plan.duration_s and (plan.runs is None or n < plan.runs):
            pool = done
            if plan.concurrent_repeats:
                pool = {s.customer: s.session for s in tally.submitted if not s.repeat}
            repeat = bool(pool) and rng.random() < plan.repeat_share
            customer = rng.choice(sorted(pool)) if repeat else f"c{plan.seed}-{n}"
            sub = _submit(dep, world, customer, plan, pool[customer] if repeat else None)
            if sub is not None:
                tally.submitted.append(sub)
            n += 1
            if kills and time.monotonic() - started >= kills[0]:
                kills.pop(0)
                _kill_one(dep, tally, rng)
            # A repeat follows a first run that ended (two at once is the ledger's
            # concurrency case, which the idempotency tests cover).
            for old in tally.submitted[:-2]:
                if not old.repeat and old.customer not in done:
                    with contextlib.suppress(httpx.TransportError, ValueError):
                        path = f"/v1/sessions/{old.session}/runs/{old.run}"
                        if dep.call("GET", path).json().get("status") == "done":
                            done[old.customer] = old.session
            time.sleep(plan.submit_every_s)
        finals = [_final(dep, sub, plan.bound_s) for sub in tally.submitted]
        deadline = time.monotonic() + plan.bound_s
        while len(dep.workers()) < plan.workers and time.monotonic() < deadline:
            time.sleep(0.1)  # the supervisor restarts a killed worker
        tally.workers_after = len(dep.workers())
    return _report(plan, tally, finals, world, time.monotonic() - started)


def _report(
    plan: ChaosPlan,
    tally: _Tally,
    finals: list[dict[str, Any]],
    world: Path,
    wall_s: float,
) -> dict[str, Any]:
    completed = [f for f in finals if f.get("status") == "done" and f.get("success")]
    taken = [f for f in finals if f.get("takeovers")]
    killed_at = dict((pid, at) for at, pid in tally.kills)
    to_takeover = [
        float(f["taken_over_at"]) - killed_at[int(f["taken_from"])]
        for f in taken
        if f.get("taken_from") is not None and int(f["taken_from"]) in killed_at
    ]
    orders = world_orders(world)
    per_customer: dict[str, int] = {}
    for order in orders:
        per_customer[order["customer"]] = per_customer.get(order["customer"], 0) + 1
    wanted = {
        sub.customer for sub, f in zip(tally.submitted, finals, strict=True) if f in completed
    }
    return {
        "plan": {
            "duration_s": plan.duration_s,
            "workers": plan.workers,
            "kills": len(tally.kills),
            "workers_after": tally.workers_after,
            "takeover_after_s": plan.takeover_after_s,
            "repeat_share": plan.repeat_share,
            "concurrent_repeats": plan.concurrent_repeats,
            "seed": plan.seed,
        },
        "runs_submitted": len(tally.submitted),
        "runs_completed": len(completed),
        "runs_taken_over": len(taken),
        "runs_repeating_a_key": sum(1 for s in tally.submitted if s.repeat),
        "time_to_takeover_s": {
            "p50": percentile(to_takeover, 0.5),
            "p95": percentile(to_takeover, 0.95),
            "n": len(to_takeover),
        },
        "effects": len(orders),
        "duplicated_effects": sum(n - 1 for n in per_customer.values() if n > 1),
        "lost_effects": sum(1 for c in wanted if per_customer.get(c, 0) == 0),
        "lost_runs": len(tally.submitted) - len(completed),
        "not_completed": [
            {"run": f.get("id"), "status": f.get("status"), "message": f.get("message")}
            for f in finals
            if f not in completed
        ],
        "wall_s": round(wall_s, 1),
    }


def chaos_row(report: Mapping[str, Any]) -> str:
    """The report as a row of the README's reliability table (``bench/adversarial.py``'s
    columns: category, cases, failed, effects duplicated, state lost)."""
    plan, took = report["plan"], report["time_to_takeover_s"]
    minutes = round(float(plan["duration_s"]) / 60.0, 1)
    return (
        f"| chaos: {plan['workers']} workers on Redis, {plan['kills']} SIGKILLs in {minutes:g} "
        f"min ({report['runs_completed']} done / {report['runs_taken_over']} taken over, "
        f"takeover p50 {took['p50']} s / p95 {took['p95']} s) | {report['runs_submitted']} | "
        f"{report['lost_runs']} (0) | {report['duplicated_effects']} | "
        f"{report['lost_effects']} |"
    )
