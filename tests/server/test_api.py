"""Every endpoint through httpx's ASGI transport, on a real SQLite store."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from closedloop.agent import read_trace
from closedloop.models import CallInfo, FunctionModel, Message

from .conftest import Harness, HarnessFactory, new_session, start_run


def sse_messages(text: str) -> list[tuple[str, dict[str, Any], str | None]]:
    """(event, data, id) for each SSE message with data."""
    out = []
    for frame in text.split("\n\n"):
        event, data, event_id = "message", "", None
        for line in frame.split("\n"):
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                data += line[6:]
            elif line.startswith("id: "):
                event_id = line[4:]
        if data:
            out.append((event, json.loads(data), event_id))
    return out


async def test_a_session_holds_a_run_that_answers_its_own_task(harness: Harness) -> None:
    alice = harness.client("alice")
    created = await alice.post("/v1/sessions", json={"metadata": {"team": "ops"}, "ttl_s": 600})
    assert created.status_code == 201
    session = created.json()
    assert session["metadata"] == {"team": "ops"} and session["created_by"] == "alice"
    assert session["expires_at"] - session["created_at"] == pytest.approx(600)

    started = await alice.post(
        f"/v1/sessions/{session['id']}/runs", json={"agent": "calc", "task": "Add 17 and 25."}
    )
    assert started.status_code == 202
    run = started.json()
    assert run["status"] == "running" and run["agent"] == "calc" and "trace_path" not in run
    await harness.settle()

    status = (await alice.get(f"/v1/sessions/{session['id']}/runs/{run['id']}")).json()
    assert status["status"] == "done" and status["halt_reason"] == "final"
    assert status["success"] is True and status["answer"] == "42" and status["steps"] == 2
    assert status["timing"]["model_calls"] == 2 and status["timing"]["wall_s"] > 0

    result = (await alice.get(f"/v1/sessions/{session['id']}/runs/{run['id']}/result")).json()
    assert result["answer"] == "42" and result["halt_reason"] == "final"

    trace = (await alice.get(f"/v1/sessions/{session['id']}/runs/{run['id']}/trace")).json()
    assert [s["step_type"] for s in trace["steps"]] == ["add", "final"]
    assert trace["steps"][0]["action"] == {"tool": "add", "arguments": {"a": 17, "b": 25}}

    listed = (await alice.get(f"/v1/sessions/{session['id']}")).json()
    assert [r["id"] for r in listed["runs"]] == [run["id"]]
    assert [r["id"] for r in (await alice.get("/v1/runs")).json()["runs"]] == [run["id"]]
    in_session = (await alice.get(f"/v1/sessions/{session['id']}/runs")).json()["runs"]
    assert [r["answer"] for r in in_session] == ["42"]
    sessions = (await alice.get("/v1/sessions")).json()["sessions"]
    assert [s["id"] for s in sessions] == [session["id"]]


async def test_the_trace_is_written_where_the_cli_finds_it(
    harness: Harness, tmp_path: Path
) -> None:
    alice = harness.client("alice")
    sid = await new_session(alice)
    rid = await start_run(alice, sid, "calc", "Add 2 and 3.")
    await harness.settle()
    records, result = read_trace(tmp_path / "runs" / rid)
    assert [r.step_type for r in records] == ["add", "final"]
    assert result is not None and result.answer == "5"


async def test_events_replay_every_step_then_the_status_and_the_end(harness: Harness) -> None:
    alice = harness.client("alice")
    sid = await new_session(alice)
    rid = await start_run(alice, sid, "calc", "Add 1 and 2.")
    await harness.settle()
    response = await alice.get(f"/v1/sessions/{sid}/runs/{rid}/events")
    assert response.headers["content-type"].startswith("text/event-stream")
    messages = sse_messages(response.text)
    steps = [data for event, data, _ in messages if event == "step"]
    assert [s["step"] for s in steps] == [0, 1]
    assert {"e", "u", "f_est", "protocol", "actuators", "quality"} <= set(steps[0])
    assert steps[0]["tool"] == "add" and steps[1]["halt"] == "final"
    assert [i for e, _, i in messages if e == "step"] == ["0", "1"]
    assert messages[-1][0] == "end" and messages[-1][1]["status"] == "done"
    # A client reconnecting after step 0 gets only what it missed.
    again = await alice.get(f"/v1/sessions/{sid}/runs/{rid}/events", headers={"Last-Event-ID": "0"})
    assert [d["step"] for e, d, _ in sse_messages(again.text) if e == "step"] == [1]


async def test_result_is_refused_while_the_run_is_still_running(harness: Harness) -> None:
    alice = harness.client("alice")
    sid = await new_session(alice)
    rid = await start_run(alice, sid, "calc", "Add 4 and 4.")
    early = await alice.get(f"/v1/sessions/{sid}/runs/{rid}/result")
    assert early.status_code == 409 and early.json()["error"] == "not_finished"
    await harness.settle()
    assert (await alice.get(f"/v1/sessions/{sid}/runs/{rid}/result")).status_code == 200


async def test_cancel_stops_a_running_run(make_harness: HarnessFactory) -> None:
    # The model's answer waits until the run is cancelled, so the cancel surely meets a
    # running run (a zero-latency run could end first on a loaded machine).
    asked = asyncio.Event()

    async def stalled(messages: tuple[Message, ...], info: CallInfo) -> dict[str, Any]:
        asked.set()
        await asyncio.Event().wait()  # until cancelled
        raise AssertionError("the cancelled call went on")

    harness = await make_harness(model=FunctionModel(stalled, name="stalled"))
    alice = harness.client("alice")
    sid = await new_session(alice)
    rid = await start_run(alice, sid, "calc", "Add 9 and 9.")
    await asyncio.wait_for(asked.wait(), timeout=30.0)
    cancelled = await alice.post(f"/v1/sessions/{sid}/runs/{rid}/cancel")
    assert cancelled.status_code == 202
    await asyncio.wait_for(harness.settle(), timeout=30.0)  # a cancel that failed would hang
    status = (await alice.get(f"/v1/sessions/{sid}/runs/{rid}")).json()
    assert status["status"] == "cancelled" and status["halt_reason"] == "cancelled"
    assert status["success"] is False
    again = await alice.post(f"/v1/sessions/{sid}/runs/{rid}/cancel")
    assert again.status_code == 409 and "cancelled" in again.json()["detail"]


async def test_deleting_a_session_removes_its_runs_and_traces(
    harness: Harness, tmp_path: Path
) -> None:
    alice = harness.client("alice")
    sid = await new_session(alice)
    rid = await start_run(alice, sid, "calc", "Add 5 and 6.")
    await harness.settle()
    assert (tmp_path / "runs" / rid / "trace.jsonl").is_file()
    assert (await alice.delete(f"/v1/sessions/{sid}")).status_code == 204
    assert (await alice.get(f"/v1/sessions/{sid}")).status_code == 404
    assert (await alice.get(f"/v1/sessions/{sid}/runs/{rid}")).status_code == 404
    assert (await alice.get("/v1/runs")).json()["runs"] == []
    assert not (tmp_path / "runs" / rid).exists()
    scoped = harness.service.scoped(await harness.service.keys.verify(harness.keys["alice"]))  # type: ignore[arg-type]
    assert await scoped.record_list("runs") == [] and await scoped.record_list("ledger") == []
    assert (await alice.delete(f"/v1/sessions/{sid}")).status_code == 404


async def test_an_expired_session_is_gone(harness: Harness) -> None:
    alice = harness.client("alice")
    sid = await new_session(alice, ttl_s=5)
    service = harness.service
    real = service.settings.wall_clock
    object.__setattr__(service.settings, "wall_clock", lambda: real() + 10)
    try:
        assert (await alice.get(f"/v1/sessions/{sid}")).status_code == 404
        assert await service.collect_garbage() == 1
    finally:
        object.__setattr__(service.settings, "wall_clock", real)
    assert (await alice.get(f"/v1/sessions/{sid}")).status_code == 404


async def test_agents_me_health_and_metrics(harness: Harness) -> None:
    alice = harness.client("alice")
    agents = (await alice.get("/v1/agents")).json()["agents"]
    assert {a["name"] for a in agents} == {"calc", "sensor"}
    assert all(a["available"] and a["source"] == "user" for a in agents)
    me = (await alice.get("/v1/me")).json()
    assert me["name"] == "alice" and len(me["key_id"]) == 12
    anonymous = harness.client("anonymous")
    health = await anonymous.get("/healthz")
    assert health.status_code == 200 and health.json()["status"] == "ok"
    sid = await new_session(alice)
    await start_run(alice, sid, "calc", "Add 3 and 3.")
    await harness.settle()
    text = (await anonymous.get("/metrics")).text
    assert 'closedloop_runs_started_total{agent="calc",kind="start"} 1.0' in text
    assert (
        'closedloop_runs_finished_total{agent="calc",halt_reason="final",success="true"} 1.0'
        in text
    )
    assert 'closedloop_steps_total{agent="calc",protocol="normal"} 2.0' in text
    assert 'closedloop_model_calls_total{model="test-router",outcome="ok"} 2.0' in text
    assert "closedloop_model_latency_seconds_count" in text
    assert 'closedloop_model_tokens_total{kind="prompt",model="test-router"}' in text
    assert "closedloop_control_error_bucket" in text and "closedloop_f_est_bucket" in text
    assert "closedloop_protocol_level_bucket" in text
    assert 'route="/v1/sessions/{session_id}/runs"' in text  # templates, never raw ids
    assert sid not in text


async def test_made_up_methods_add_no_metric_series(harness: Harness) -> None:
    anonymous = harness.client("anonymous")
    for i in range(20):
        await anonymous.request(f"BREW{i}", "/v1/sessions")
    text = (await anonymous.get("/metrics")).text
    requests = [
        line for line in text.splitlines() if line.startswith("closedloop_http_requests_total{")
    ]
    assert not any("BREW" in line for line in requests)
    methods = {line.split('method="')[1].split('"')[0] for line in requests}
    assert "other" in methods and methods <= {"GET", "POST", "other"}


async def test_the_openapi_schema_lists_every_route_and_no_cdn_page_is_served(
    harness: Harness,
) -> None:
    anonymous = harness.client("anonymous")
    schema = (await anonymous.get("/openapi.json")).json()
    paths = set(schema["paths"])
    assert {
        "/v1/sessions",
        "/v1/sessions/{session_id}",
        "/v1/sessions/{session_id}/runs",
        "/v1/sessions/{session_id}/runs/{run_id}",
        "/v1/sessions/{session_id}/runs/{run_id}/result",
        "/v1/sessions/{session_id}/runs/{run_id}/trace",
        "/v1/sessions/{session_id}/runs/{run_id}/events",
        "/v1/sessions/{session_id}/runs/{run_id}/cancel",
        "/v1/runs",
        "/v1/handovers",
        "/v1/handovers/{handover_id}",
        "/v1/handovers/{handover_id}/approve",
        "/v1/handovers/{handover_id}/edit",
        "/v1/handovers/{handover_id}/reject",
        "/v1/agents",
        "/v1/me",
        "/healthz",
        "/metrics",
    } <= paths
    assert (await anonymous.get("/docs")).status_code == 404


async def test_a_failing_store_makes_healthz_say_so(harness: Harness) -> None:
    await harness.store.close()
    health = await harness.client("anonymous").get("/healthz")
    assert health.status_code == 503 and health.json()["status"] == "degraded"


async def test_the_dashboard_and_its_assets_are_served_without_a_cdn(harness: Harness) -> None:
    anonymous = harness.client("anonymous")
    page = await anonymous.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "/static/app.js" in page.text and "/static/chart.js" in page.text
    assert "http://" not in page.text and "https://" not in page.text
    for asset in ("app.js", "chart.js", "app.css"):
        served = await anonymous.get(f"/static/{asset}")
        assert served.status_code == 200
        assert "https://" not in served.text and "http://" not in served.text
    script = (await anonymous.get("/static/app.js")).text
    assert "sessionStorage" in script and "localStorage" not in script
    assert "?key=" not in script and "api_key=" not in script
    css = (await anonymous.get("/static/app.css")).text
    assert "prefers-color-scheme: dark" in css


# --- bad bodies and unknown ids ------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({}, "body.agent: is required"),
        ({"agent": "calc"}, "body.task: is required"),
        ({"agent": "calc", "task": ""}, "body.task: String should have at least 1 character"),
        ({"agent": "calc", "task": "x", "extra": 1}, "body.extra: is not a known field"),
        ({"agent": "calc", "task": "x", "params": []}, "body.params: Input should be a valid"),
        (
            {"agent": "nobody", "task": "x"},
            "agent='nobody': is not registered; known: calc, sensor",
        ),
    ],
)
async def test_bad_run_bodies_get_a_readable_422(
    harness: Harness, body: dict[str, Any], fragment: str
) -> None:
    alice = harness.client("alice")
    sid = await new_session(alice)
    response = await alice.post(f"/v1/sessions/{sid}/runs", json=body)
    assert response.status_code == 422
    assert response.json()["error"] == "invalid_request"
    assert fragment in response.json()["detail"]


async def test_invalid_json_is_a_readable_422_that_does_not_echo_the_input(
    harness: Harness,
) -> None:
    alice = harness.client("alice")
    response = await alice.post(
        "/v1/sessions",
        content=b'{"metadata": {"password": "hunter2-very-secret"',
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 422
    assert response.json()["detail"].startswith("body: is not valid JSON")
    assert "hunter2" not in response.text
    wrong_type = await alice.post("/v1/sessions", json={"ttl_s": "soon"})
    assert wrong_type.status_code == 422 and "body.ttl_s" in wrong_type.json()["detail"]
    assert "soon" not in wrong_type.text


async def test_oversized_bodies_are_refused_with_413(make_harness: HarnessFactory) -> None:
    harness = await make_harness(max_body_bytes=4096)
    alice = harness.client("alice")
    sid = await new_session(alice)
    big = {"agent": "calc", "task": "Add 1 and 2. " + "x" * 5000}
    response = await alice.post(f"/v1/sessions/{sid}/runs", json=big)
    assert response.status_code == 413 and response.json()["error"] == "too_large"

    async def chunks() -> Any:
        for _ in range(10):
            yield b"x" * 1000

    streamed = await alice.post(f"/v1/sessions/{sid}/runs", content=chunks())
    assert streamed.status_code == 413
    assert (await alice.get("/v1/runs")).json()["runs"] == []


@pytest.mark.parametrize(
    "path",
    [
        "/v1/sessions/ses_0000000000000000",
        "/v1/sessions/not-an-id",
        "/v1/sessions/ses_0000000000000000/runs",
        "/v1/sessions/ses_0000000000000000/runs/run_0000000000000000",
        "/v1/sessions/ses_0000000000000000/runs/run_0000000000000000/result",
        "/v1/sessions/ses_0000000000000000/runs/run_0000000000000000/trace",
        "/v1/sessions/ses_0000000000000000/runs/run_0000000000000000/events",
        "/v1/handovers/ho_unknown",
    ],
)
async def test_unknown_ids_are_404(harness: Harness, path: str) -> None:
    response = await harness.client("alice").get(path)
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"


@pytest.mark.parametrize("raw", [b"NaN", b"Infinity", b"-Infinity"])
async def test_non_finite_numbers_in_params_are_a_422_not_a_500(
    harness: Harness, raw: bytes
) -> None:
    alice = harness.client("alice")
    sid = await new_session(alice)
    body = b'{"agent": "calc", "task": "Add 1 and 2.", "params": {"x": ' + raw + b"}}"
    response = await alice.post(
        f"/v1/sessions/{sid}/runs", content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 422, response.text
    assert "body.params" in response.json()["detail"]
    metadata = b'{"metadata": {"x": ' + raw + b"}}"
    created = await alice.post(
        "/v1/sessions", content=metadata, headers={"Content-Type": "application/json"}
    )
    assert created.status_code == 422, created.text


async def test_an_unknown_run_in_a_real_session_is_404(harness: Harness) -> None:
    alice = harness.client("alice")
    sid = await new_session(alice)
    for suffix in ("", "/result", "/trace", "/events"):
        response = await alice.get(f"/v1/sessions/{sid}/runs/run_0123456789abcdef{suffix}")
        assert response.status_code == 404 and response.json()["detail"] == "run not found"
    posted = await alice.post(f"/v1/sessions/{sid}/runs/run_0123456789abcdef/cancel")
    assert posted.status_code == 404


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
))  # fmt: skip
async def test_no_json_body_crashes_the_run_endpoint(harness: Harness, body: Any) -> None:
    harness.clock.advance(60.0)  # refill the key's bucket: this test is about bodies
    alice = harness.client("alice")
    sid = await new_session(alice)
    response = await alice.post(f"/v1/sessions/{sid}/runs", json=body)
    valid = (
        isinstance(body, dict)
        and set(body) <= {"agent", "task", "params"}
        and body.get("agent") in ("calc", "sensor")
        and isinstance(body.get("task"), str)
        and body["task"].strip() != ""
        and isinstance(body.get("params", {}), dict)
    )
    assert response.status_code in ((202,) if valid else (422,)), response.text
    if response.status_code == 422:
        assert response.json()["detail"]
    await harness.settle()
