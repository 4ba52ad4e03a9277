"""The faults matrix's rows that need no world: a full disk, a dying model server, Redis down.

SIGKILL of the agent's process at each point of a step is tests/agent/test_crash_resume.py
(owned by the crash-resume area); the benchmark runs it as the matrix's sigkill row.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from closedloop import StoreUnavailableError
from closedloop.feedback import SQLiteStore
from closedloop.models import allow_real_model_calls
from closedloop_bench.benchmarks._adversarial_faults import (
    WORLD_FAULTS,
    disk_full_row,
    model_server_row,
    redis_row,
    world_rows,
)

pytestmark = pytest.mark.integration


async def test_a_full_disk_is_a_typed_error_and_loses_nothing_committed(tmp_path: Path) -> None:
    row = await disk_full_row(tmp_path, 6)
    assert row.completed == 3  # the tasks before the disk filled up
    assert row.typed_errors == 3 and row.failed == 3
    assert row.duplicated_effects == 0 and row.state_lost == 0


async def test_the_store_names_the_full_disk_and_keeps_what_it_had(tmp_path: Path) -> None:
    path = tmp_path / "full.db"
    store = SQLiteStore(path)
    await store.record_put("ledger", "kept", {"status": "committed"})

    def pin(conn: object) -> None:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]  # type: ignore[attr-defined]
        conn.execute(f"PRAGMA max_page_count={pages}")  # type: ignore[attr-defined]

    await store._call(pin, write=True)  # the writing connection: reads have their own
    with pytest.raises(StoreUnavailableError, match="full"):
        await store.record_put("ledger", "big", {"blob": "x" * 200_000})
    await store.close()
    reopened = SQLiteStore(path)
    kept = await reopened.record_get("ledger", "kept")
    assert kept is not None and kept.value["status"] == "committed"
    assert await reopened.record_get("ledger", "big") is None
    await reopened.close()


async def test_a_model_server_killed_mid_call_ends_the_run_without_losing_state(
    tmp_path: Path,
) -> None:
    with allow_real_model_calls(True):  # a loopback server of our own, not a real model
        row = await model_server_row(tmp_path, 1)
    assert row.tasks == 1 and row.completed == 0
    assert row.state_lost == 0 and row.duplicated_effects == 0


async def test_redis_killed_and_restarted_loses_no_committed_effect(tmp_path: Path) -> None:
    if shutil.which("redis-server") is None:  # a missing tool fails: a skip would pass unseen
        pytest.fail("redis-server is missing: run scripts/install_system_deps.sh")
    row = await redis_row(tmp_path, 6)
    assert row is not None
    assert row.typed_errors >= 1  # the tasks that ran while it was down
    assert row.completed >= 3
    assert row.duplicated_effects == 0 and row.state_lost == 0


async def test_a_5xx_burst_duplicates_no_effect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        "closedloop_bench.benchmarks._adversarial_faults.WORLD_FAULTS",
        {
            "5xx_burst": WORLD_FAULTS["5xx_burst"],
            "commit_then_fail": WORLD_FAULTS["commit_then_fail"],
        },
    )
    rows = await world_rows(tmp_path, 1)
    assert [r.fault for r in rows] == ["5xx_burst", "commit_then_fail"]
    for row in rows:
        assert row.tasks == 3 and row.errors == (), row.errors
        assert row.duplicated_effects == 0


def test_every_world_fault_of_the_issue_is_in_the_matrix() -> None:
    wanted = {
        "timeouts",
        "429_storm",
        "5xx_burst",
        "empty_results",
        "schema_drift",
        "outage_window",
    }
    assert wanted <= set(WORLD_FAULTS)
    assert asyncio.iscoroutinefunction(world_rows)
