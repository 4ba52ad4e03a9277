"""Chaos on the embedded default: one ``closedloop serve`` on SQLite, SIGKILLed again and again.

Each cycle starts the service on the same store, checks that every run the previous kill
interrupted is finished (or handed over) by the service itself within the bound, posts new
runs with irreversible effects (some repeating an earlier run's Idempotency-Key), and kills
the process with SIGKILL after a random delay, so kills land in every phase: before the
effect is claimed, between the effect and the ledger's commit, after the commit. The world
is a file the effect appends to, so effects are counted by the world, never by the service.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from ._chaos import AGENT, _Deployment, _token, percentile, world_orders

__all__ = ["EmbeddedChaosPlan", "run_embedded_chaos"]


@dataclass(frozen=True, slots=True)
class EmbeddedChaosPlan:
    """``kills`` cycles of start, check, post ``runs_per_cycle`` runs, SIGKILL after a delay
    drawn from ``kill_after_s``; a run must be settled within ``bound_s`` of the restart."""

    kills: int = 50
    runs_per_cycle: int = 2
    repeat_share: float = 0.25
    delay_s: float = 0.4
    kill_after_s: tuple[float, float] = (0.05, 1.0)
    bound_s: float = 10.0
    settle_limit_s: float = 60.0
    seed: int = 0


@dataclass
class _Run:
    path: str
    customer: str
    key: str
    repeat_of: str | None = None
    interrupted_with_effect: list[bool] = field(default_factory=list)
    final: dict[str, Any] | None = None


@contextlib.contextmanager
def _serve(store: str, runs_dir: Path, token: str, log: Path) -> Iterator[_Deployment]:
    command = [sys.executable, "-m", "closedloop", "serve", "--port", "0", "--store", store]
    command += ["--runs-dir", str(runs_dir), "--log-level", "warning", "--queue", "none"]
    command += ["--agents", "closedloop_bench.benchmarks._chaos:register"]
    command += ["--model", "openai-compatible:http://127.0.0.1:9/v1#unused"]
    with log.open("a") as err:
        process = subprocess.Popen(
            command,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            start_new_session=True,
        )
    try:
        assert process.stdout is not None
        for line in process.stdout:
            found = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
            if found is not None:
                yield _Deployment(f"http://127.0.0.1:{found.group(1)}", token, process)
                break
        else:
            raise RuntimeError(f"the service did not start; see {log}")
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def _post(live: _Deployment, session: str, run: _Run, world: Path, delay_s: float) -> str:
    body = {
        "agent": AGENT,
        "task": f"order for {run.customer}",
        "params": {"world": str(world), "customer": run.customer, "delay_s": delay_s},
    }
    answer = live.call(
        "POST", f"/v1/sessions/{session}/runs", json=body, headers={"Idempotency-Key": run.key}
    )
    answer.raise_for_status()
    return f"/v1/sessions/{session}/runs/{answer.json()['id']}"


def _settle(live: _Deployment, runs: list[_Run], began: float, limit_s: float) -> list[float]:
    """Seconds from ``began`` until each run stopped running (polled), bounded."""
    took: list[float] = []
    for run in runs:
        while True:
            with contextlib.suppress(httpx.TransportError):
                record = live.call("GET", run.path).json()
                if record.get("status") != "running":
                    run.final = record
                    break
            if time.monotonic() - began > limit_s:
                run.final = {"status": "running", "stuck": True}
                break
            time.sleep(0.02)  # polling a real process
        took.append(time.monotonic() - began)
    return took


def run_embedded_chaos(
    workdir: Path, plan: EmbeddedChaosPlan, progress: Callable[[str], None] = print
) -> dict[str, Any]:
    """Run the plan in ``workdir`` (a scratch folder); returns the report."""
    rng = random.Random(plan.seed)
    workdir.mkdir(parents=True, exist_ok=True)
    store, world = f"sqlite://{workdir / 'state.db'}", workdir / "world.jsonl"
    token, log = _token(store), workdir / "serve.log"
    runs: list[_Run] = []
    interrupted: list[_Run] = []
    recovery_s: list[float] = []
    startup_s: list[float] = []  # from the restart until the service printed its address
    session = ""
    for cycle in range(plan.kills + 1):
        began = time.monotonic()  # the restart's clock starts before the process does
        with _serve(store, workdir / "runs", token, log) as live:
            startup_s.append(time.monotonic() - began)
            recovery_s += _settle(live, interrupted, began, plan.settle_limit_s)
            if cycle == plan.kills:
                break
            if not session:
                session = live.call("POST", "/v1/sessions", json={"ttl_s": 86400}).json()["id"]
            posted = _post_cycle(live, session, runs, world, plan, rng)
            time.sleep(rng.uniform(*plan.kill_after_s))  # lands the kill in a random phase
            applied = {o["customer"] for o in world_orders(world)}
            os.kill(live.process.pid, signal.SIGKILL)
            live.process.wait(timeout=30)
        interrupted = _interrupted(posted, applied)
        if cycle % 10 == 9:
            progress(f"chaos (embedded): {cycle + 1}/{plan.kills} kills, {len(runs)} runs")
    report = _report(plan, runs, recovery_s, world)
    report["service_started_s"] = {
        "n": len(startup_s),
        "p50": percentile(startup_s, 0.5),
        "p95": percentile(startup_s, 0.95),
        "max": max(startup_s, default=None),
    }
    return report


def _post_cycle(
    live: _Deployment, session: str, runs: list[_Run], world: Path, plan: EmbeddedChaosPlan,
    rng: random.Random,
) -> list[_Run]:  # fmt: skip
    posted: list[_Run] = []
    for _ in range(plan.runs_per_cycle):
        earlier = [r for r in runs if r.repeat_of is None]
        if earlier and rng.random() < plan.repeat_share:
            first = rng.choice(earlier)
            run = _Run("", first.customer, first.key, repeat_of=first.key)
        else:
            customer = f"c{uuid.UUID(int=rng.getrandbits(128)).hex[:10]}"
            run = _Run("", customer, f"order-{customer}")
        run.path = _post(live, session, run, world, plan.delay_s)
        runs.append(run)
        posted.append(run)
    return posted


def _interrupted(posted: list[_Run], applied: set[str]) -> list[_Run]:
    """The runs posted this cycle, each noted with whether its effect had reached the world
    when the kill landed; all are checked after the restart (a few had already ended)."""
    for run in posted:
        run.interrupted_with_effect.append(run.customer in applied)
    return posted


def _report(
    plan: EmbeddedChaosPlan, runs: list[_Run], recovery_s: list[float], world: Path
) -> dict[str, Any]:
    orders = world_orders(world)
    per_customer: dict[str, int] = {}
    for order in orders:
        per_customer[order["customer"]] = per_customer.get(order["customer"], 0) + 1
    firsts = [r for r in runs if r.repeat_of is None]
    finals = [r.final or {} for r in runs]
    done = sum(1 for f in finals if f.get("status") == "done" and f.get("success"))
    handed = sum(1 for f in finals if f.get("status") == "handover")
    duplicated = sum(max(0, n - 1) for n in per_customer.values())
    lost = sum(
        1 for r in firsts if (r.final or {}).get("success") and not per_customer.get(r.customer)
    )
    late = sum(1 for s in recovery_s if s > plan.bound_s)
    same_run = all(
        r.path == next(f.path for f in firsts if f.key == r.repeat_of)
        for r in runs
        if r.repeat_of is not None
    )
    return {
        "plan": asdict(plan),
        "kills": plan.kills,
        "runs_posted": len(runs),
        "runs_repeating_a_key": len(runs) - len(firsts),
        "repeats_answered_by_the_same_run": same_run,
        "runs_done": done,
        "runs_handed_over": handed,
        "runs_not_settled": len(runs) - done - handed,
        "interrupted_after_the_effect": sum(1 for r in firsts if any(r.interrupted_with_effect)),
        "effects": len(orders),
        "duplicated_effects": duplicated,
        "lost_effects": lost,
        "settled_after_restart_s": {
            "n": len(recovery_s),
            "p50": percentile(recovery_s, 0.5),
            "p95": percentile(recovery_s, 0.95),
            "max": max(recovery_s, default=None),
        },
        "settled_later_than_bound": late,
        "not_settled": [
            {k: (r.final or {}).get(k) for k in ("status", "halt_reason", "message", "takeovers")}
            | {"repeat": r.repeat_of is not None, "effect_at_kill": r.interrupted_with_effect}
            for r in runs
            if not (
                (r.final or {}).get("status") == "handover"
                or ((r.final or {}).get("status") == "done" and (r.final or {}).get("success"))
            )
        ],
    }
