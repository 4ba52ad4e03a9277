"""A worker killed with SIGKILL mid-step; another process recovers the task from the store.

The victim (tests/agent/crash_victim.py) is a real subprocess that places an order in a
real world server on loopback, with its task state and effect ledger in a real store
(a SQLite file, or Redis). It dies at one point of the step; a second process runs
``Agent.recover``. The world's counters say how many orders were really created.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from closedloop.agent import read_trace
from closedloop.execution import EffectLedger, EffectStatus
from closedloop.server import open_store
from closedloop_bench.world import WorldHandle, serve_world

VICTIM = Path(__file__).with_name("crash_victim.py")
TASK = "task_order"
CUSTOMER = "crash-test-customer"

# What the store and the world hold right after each kill: proof it died where we meant.
# And what the recovery's reconciler concludes about a pending claim (the world knows).
#               ledger entry    orders in the world   task state step   reconciled
AT_THE_KILL = {
    "before_claim": (None, 0, 0, "none pending"),
    "after_claim": (EffectStatus.PENDING, 0, 0, "place_order failed"),
    "after_effect": (EffectStatus.PENDING, 1, 0, "place_order committed"),
    "after_commit": (EffectStatus.COMMITTED, 1, 0, "none pending"),
}


@pytest.fixture
def world() -> Iterator[WorldHandle]:
    with serve_world("none", latency_scale=0.0) as handle:
        yield handle


@pytest.fixture(params=["sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'state.db'}"
    url: str = request.getfixturevalue("redis_url")
    return url


def sku_in_stock(world: WorldHandle) -> str:
    products = httpx.get(f"{world.base_url}/products").json()["products"]
    return next(p["sku"] for p in products if p["stock"] >= 5)


def victim(
    store_url: str, world: WorldHandle, trace: Path, mode: str, crash: str
) -> subprocess.CompletedProcess[str]:
    args = [store_url, world.base_url, str(trace), mode, crash, TASK, CUSTOMER, sku_in_stock(world)]
    return subprocess.run(
        [sys.executable, str(VICTIM), *args], capture_output=True, text=True, timeout=120
    )


def created_orders(world: WorldHandle) -> tuple[int, int]:
    counts = world.counters["orders_create"]
    return counts.effects, counts.duplicates


async def persisted(store_url: str) -> tuple[dict[str, Any], list[Any]]:
    store = open_store(store_url)
    try:
        state = (await store.get(TASK)).to_dict()
        ledger = await EffectLedger(store).records(TASK)
    finally:
        await store.close()
    return json.loads(json.dumps(state)), ledger


def customer_orders(world: WorldHandle) -> list[dict[str, Any]]:
    reply = httpx.get(f"{world.base_url}/orders", params={"customer": CUSTOMER})
    orders: list[dict[str, Any]] = reply.json()["orders"]
    return orders


@pytest.mark.parametrize("crash", sorted(AT_THE_KILL))
async def test_a_killed_worker_resumes_elsewhere_without_a_duplicate_effect(
    crash: str, store_url: str, world: WorldHandle, tmp_path: Path
) -> None:
    trace = tmp_path / "trace.jsonl"
    killed = victim(store_url, world, trace, "run", crash)
    assert killed.returncode == -9, killed.stderr[-2000:]

    entry, orders, step, reconciled = AT_THE_KILL[crash]
    state, ledger = await persisted(store_url)
    assert (state["status"], state["step"]) == ("running", step)
    assert [r.status for r in ledger] == ([] if entry is None else [entry])
    assert created_orders(world) == (orders, 0)

    resumed = victim(store_url, world, trace, "recover", "none")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    result = json.loads(resumed.stdout.strip().splitlines()[-1])["result"]

    # One order in the world, whatever the crash point; the task holds its id.
    assert created_orders(world) == (1, 0)
    placed = customer_orders(world)
    assert len(placed) == 1
    assert result["halt_reason"] == "final" and result["success"] is True
    assert result["fields"]["order_id"] == placed[0]["order_id"]

    # The ledger committed the one effect, with the world's order as its result.
    state, ledger = await persisted(store_url)
    assert [(r.status, r.result["order_id"]) for r in ledger] == [
        (EffectStatus.COMMITTED, placed[0]["order_id"])
    ]
    assert state["status"] == "done" and state["recoveries"] == 1
    assert state["effect_keys"] == [ledger[0].key]

    # The trace shows the resume, on the step the task was in when it died.
    records, _ = read_trace(trace)
    notes = [(r.step, n) for r in records for n in r.notes if n.startswith("resumed after")]
    assert len(notes) == 1 and notes[0][0] == step, notes
    assert "recovery 1" in notes[0][1]
    assert notes[0][1].endswith(f"ledger reconciled: {reconciled}")
    assert records[-1].halt is not None and records[-1].halt.value == "final"


async def test_an_uninterrupted_run_places_one_order_and_shows_no_resume(
    tmp_path: Path, world: WorldHandle
) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    done = victim(url, world, tmp_path / "trace.jsonl", "run", "none")
    assert done.returncode == 0, done.stderr[-2000:]
    assert created_orders(world) == (1, 0)
    records, _ = read_trace(tmp_path / "trace.jsonl")
    assert not any(n.startswith("resumed") for r in records for n in r.notes)
    # Recovering a finished task is refused: there is nothing to redo.
    again = victim(url, world, tmp_path / "trace.jsonl", "recover", "none")
    assert again.returncode != 0 and "already ended" in again.stderr
    assert created_orders(world) == (1, 0)


async def test_a_recovery_that_dies_too_is_recovered_again(
    tmp_path: Path, world: WorldHandle
) -> None:
    url = f"sqlite:///{tmp_path / 'state.db'}"
    trace = tmp_path / "trace.jsonl"
    assert victim(url, world, trace, "run", "after_claim").returncode == -9
    # The first recovery reconciles (not applied), redoes the call, and dies after it.
    assert victim(url, world, trace, "recover", "after_effect").returncode == -9
    assert created_orders(world) == (1, 0)
    last = victim(url, world, trace, "recover", "none")
    assert last.returncode == 0, last.stderr[-2000:]
    assert created_orders(world) == (1, 0)
    state, ledger = await persisted(url)
    assert state["status"] == "done" and state["recoveries"] == 2
    assert [r.status for r in ledger] == [EffectStatus.COMMITTED]
    records, _ = read_trace(trace)
    notes = [n for r in records for n in r.notes if n.startswith("resumed after")]
    # The first recovery died inside its first step, before that step's record: the trace
    # shows the recovery that finished the step, and the state counts both.
    assert len(notes) == 1 and "(recovery 2)" in notes[0], notes
    assert notes[0].endswith("ledger reconciled: place_order committed")
