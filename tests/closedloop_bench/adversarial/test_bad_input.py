"""Hostile model replies, tool answers and API requests: typed errors or scored observations."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from closedloop.perception import HttpTool, ObservationStatus
from closedloop_bench.benchmarks._adversarial_api import ApiRig
from closedloop_bench.benchmarks._adversarial_gen import (
    ApiRequest,
    ToolAnswer,
    api_requests,
    model_replies,
    tool_answers,
)
from closedloop_bench.benchmarks._adversarial_input import ModelRig, ToolRig
from closedloop_bench.benchmarks._adversarial_store import audit_sqlite

FAST = settings(
    max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck)
)


@FAST
@given(st.lists(model_replies(), min_size=1, max_size=3))
def test_hostile_model_replies_end_typed_and_leave_the_store_consistent(
    tmp_path_factory: pytest.TempPathFactory, replies: list[tuple[str, Any]]
) -> None:
    async def case() -> None:
        rig = ModelRig(tmp_path_factory.mktemp("m"))
        try:
            outcome = await rig.run(replies[0][0], [r for _, r in replies])
        finally:
            await rig.close()
        assert outcome.ok, outcome.detail
        assert outcome.duplicated == 0 and outcome.lost == 0
        assert rig.effects.paid == []

    asyncio.run(case())


@pytest.mark.parametrize(
    "reply",
    [
        "\ud800",
        {"tool": "add", "arguments": {"a": "\udfff", "b": 1}},
        {"tool": "pay_order", "arguments": {"order_id": 42, "confirmed": True}},
        {"tool": "ship", "arguments": {"order_id": 42}},  # the phase forbids it
        {"plan": [{"tool": "pay_order", "arguments": {"order_id": 42}}]},  # react: no plans
        {"tool": "nope", "arguments": {}},
        {"tool": "add", "arguments": {"a": 10**400, "b": float("1e308")}},
        {"final": {"not": "text"}, "fields": {"total": [1, 2]}},
        "[" * 400 + "]" * 400,
        "x" * 300_000,
    ],
)
async def test_named_hostile_replies(model_rig: ModelRig, reply: Any) -> None:
    outcome = await model_rig.run("named", [reply, reply])
    assert outcome.ok, outcome.detail
    assert model_rig.effects.paid == [] and model_rig.effects.shipped == {}


def test_a_reply_nested_deeper_than_the_json_reader_is_a_parse_error() -> None:
    # The loop reaches parse_structured when its strictness actuator asks the model for
    # schema-constrained output (after errors), so the hostile-reply rig meets it only then.
    from closedloop.models._json import parse_structured

    value, error = parse_structured('{"a":' * 50_000 + "1" + "}" * 50_000, {"type": "object"})
    assert value is None and error is not None


async def test_a_lone_surrogate_in_accepted_fields_is_a_typed_error(model_rig: ModelRig) -> None:
    outcome = await model_rig.run("final", [{"final": "", "fields": {"total": {"\ud800": 1}}}])
    assert outcome.ok, outcome.detail


@FAST
@given(tool_answers())
def test_hostile_tool_answers_become_scored_observations(
    tool_server: tuple[ToolRig, str], drawn: tuple[str, ToolAnswer]
) -> None:
    rig, url = tool_server

    async def case() -> None:
        async with HttpTool("probe", "GET", url + "/r/{case}", timeout_s=10.0) as probe:
            outcome = await rig.run(probe, "c", drawn[0], drawn[1])
        assert outcome.ok, outcome.detail

    asyncio.run(case())


async def test_a_truncated_body_is_an_error_observation(tool_server: tuple[ToolRig, str]) -> None:
    rig, _ = tool_server
    rig.answers["cut"] = ToolAnswer(200, "application/json", b'{"items": [1, 2', 400)
    async with HttpTool("probe", "GET", rig.cut_url + "/r/{case}", timeout_s=10.0) as probe:
        observation = await probe(case="cut")
    assert observation.status is ObservationStatus.ERROR
    assert observation.confidence < 0.5 and observation.value is None
    assert observation.error is not None and "expected 400" in observation.error


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_hostile_api_requests_never_500_and_never_reach_other_keys(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    requests = data.draw(st.lists(api_requests(), min_size=5, max_size=5))

    async def case() -> None:
        root = tmp_path_factory.mktemp("api")
        async with ApiRig(root) as rig:
            for kind, request in requests:
                outcome = await rig.run(kind, request)
                assert outcome.ok, outcome.detail

    asyncio.run(case())


async def test_a_request_for_another_keys_run_is_refused(tmp_path: Path) -> None:
    async with ApiRig(tmp_path) as rig:
        request = ApiRequest("GET", "/v1/sessions/{sid}/runs/{rid}/result", "", None, None, "other")
        outcome = await rig.run("api", request)
        assert outcome.ok, outcome.detail
        own = ApiRequest("GET", "/v1/sessions/{sid}/runs/{rid}", "", None, None, "own")
        assert (await rig.run("api", own)).ok


def test_the_store_audit_catches_a_duplicate_and_a_rollback(tmp_path: Path) -> None:
    import json
    import sqlite3

    from closedloop.feedback import SQLiteStore

    path = tmp_path / "s.db"

    async def fill() -> None:
        store = SQLiteStore(path)
        await store.create("s1", {"x": 1})
        effect = {"task_id": "t", "action": "pay", "args": {"id": 1}, "effect": "irreversible"}
        for key in ("k1", "k2"):
            await store.record_put("ledger", key, {**effect, "key": key, "status": "committed"})
        await store.close()

    asyncio.run(fill())
    audit = audit_sqlite(path, previous={"s1": 3})
    assert audit.duplicated_effects == 1
    assert any("went back" in p for p in audit.problems)
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM records WHERE key = 'k1'")
    conn.execute("UPDATE sessions SET data = ? WHERE session_id = 's1'", (json.dumps([1]),))
    conn.commit()
    conn.close()
    later = audit_sqlite(path, committed_before={"k1": 1, "k2": 1})
    assert any("k1 lost" in p for p in later.problems)
    assert any("not an object" in p for p in later.problems)
