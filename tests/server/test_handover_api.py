"""The handover queue over HTTP: a decision resumes or ends the task where it froze."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from .conftest import Harness, new_session, start_run
from .test_api import sse_messages


async def _frozen(harness: Harness, who: str = "alice") -> tuple[str, str, str]:
    client = harness.client(who)
    sid = await new_session(client)
    rid = await start_run(client, sid, "sensor", "Read the sensor samples 0 to 7, then report.")
    await harness.settle()
    run = (await client.get(f"/v1/sessions/{sid}/runs/{rid}")).json()
    assert run["status"] == "handover", run
    assert run["halt_reason"] == "handover" and run["success"] is False
    return sid, rid, run["handover_id"]


async def _run(client: httpx.AsyncClient, sid: str, rid: str) -> dict[str, Any]:
    data: dict[str, Any] = (await client.get(f"/v1/sessions/{sid}/runs/{rid}")).json()
    return data


async def test_the_queue_lists_and_shows_the_audit(harness: Harness) -> None:
    alice = harness.client("alice")
    sid, rid, hid = await _frozen(harness)
    listed = (await alice.get("/v1/handovers")).json()["handovers"]
    assert [h["id"] for h in listed] == [hid]
    item = listed[0]
    assert item["run_id"] == rid and item["session_id"] == sid and item["status"] == "pending"
    assert "manual-handover level" in item["reason"]
    assert item["pending_action"]["tool"] == "probe"
    assert item["pending_action"]["arguments"] == {"sample": 6}

    shown = (await alice.get(f"/v1/handovers/{hid}")).json()
    observed = shown["audit"]["observed"]
    assert [o["step"] for o in observed] == list(range(6))
    assert observed[-1]["observation"]["confidence"] < 0.5
    assert shown["audit"]["control"]["f_est"] >= 0.5  # the fixture's handover threshold
    assert isinstance(shown["failed_checks"], list)
    assert "probe" in shown["suggested_fix"]  # drawn from this key's earlier successes
    assert len(shown["observations"]) == 6 and shown["observations"][0]["tool"] == "probe"
    assert "frozen_state" not in shown
    assert (await alice.get("/v1/handovers", params={"status": "approved"})).json() == {
        "handovers": []
    }


async def test_approve_resumes_the_task_where_it_froze(harness: Harness) -> None:
    alice = harness.client("alice")
    sid, rid, hid = await _frozen(harness)
    decided = await alice.post(f"/v1/handovers/{hid}/approve", json={"note": "sensor replaced"})
    assert decided.status_code == 200
    body = decided.json()
    assert body["handover"]["status"] == "approved" and body["handover"]["decided_by"] == "alice"
    assert body["run"]["status"] in ("running", "done")
    await harness.settle()
    run = await _run(alice, sid, rid)
    assert run["status"] == "done" and run["halt_reason"] == "final" and run["success"] is True
    assert run["answer"] == "eight samples read" and run["steps"] == 9
    trace = (await alice.get(f"/v1/sessions/{sid}/runs/{rid}/trace")).json()["steps"]
    assert [s["step"] for s in trace] == list(range(9))
    resumed = trace[7]
    assert resumed["action"] == {"tool": "probe", "arguments": {"sample": 6}}
    assert "as decided" in " ".join(resumed["notes"])
    events = sse_messages((await alice.get(f"/v1/sessions/{sid}/runs/{rid}/events")).text)
    assert [d["step"] for e, d, _ in events if e == "step"] == list(range(9))
    assert (await alice.get("/v1/handovers")).json()["handovers"] == []
    metrics = (await harness.client("anonymous").get("/metrics")).text
    assert 'closedloop_handovers_total{event="created"} 1.0' in metrics
    assert 'closedloop_handovers_total{event="approved"} 1.0' in metrics
    assert 'closedloop_runs_started_total{agent="sensor",kind="resume"} 1.0' in metrics


async def test_edit_then_approve_runs_the_changed_action(harness: Harness) -> None:
    alice = harness.client("alice")
    sid, rid, hid = await _frozen(harness)
    decided = await alice.post(
        f"/v1/handovers/{hid}/edit",
        json={"edits": {"arguments": {"sample": 7}}, "note": "skip to the last sample"},
    )
    assert decided.status_code == 200, decided.text
    assert decided.json()["handover"]["edits"] == {"arguments": {"sample": 7}}
    await harness.settle()
    run = await _run(alice, sid, rid)
    assert run["status"] == "done" and run["success"] is True
    trace = (await alice.get(f"/v1/sessions/{sid}/runs/{rid}/trace")).json()["steps"]
    assert trace[7]["action"]["arguments"] == {"sample": 7}
    assert trace[7]["observation"]["value"] == {"sample": 7, "reading": 17}


async def test_reject_ends_the_task_without_success(harness: Harness) -> None:
    alice = harness.client("alice")
    sid, rid, hid = await _frozen(harness)
    decided = await alice.post(f"/v1/handovers/{hid}/reject", json={"note": "sensor is broken"})
    assert decided.status_code == 200
    await harness.settle()
    run = await _run(alice, sid, rid)
    assert run["status"] == "done" and run["halt_reason"] == "handover"
    assert run["success"] is False and "sensor is broken" in run["message"]
    assert run["steps"] == 7  # nothing ran after the freeze
    metrics = (await harness.client("anonymous").get("/metrics")).text
    assert 'closedloop_handovers_total{event="rejected"} 1.0' in metrics


async def test_a_handover_is_decided_once(harness: Harness) -> None:
    alice = harness.client("alice")
    _, _, hid = await _frozen(harness)
    assert (await alice.post(f"/v1/handovers/{hid}/approve")).status_code == 200
    for action, body in (("approve", None), ("reject", {"note": "late"}),
                         ("edit", {"edits": {"arguments": {"sample": 1}}})):  # fmt: skip
        again = await alice.post(f"/v1/handovers/{hid}/{action}", json=body)
        assert again.status_code == 409 and again.json()["error"] == "already_decided"
    await harness.settle()


async def test_bad_edits_are_a_readable_422_and_leave_the_item_pending(harness: Harness) -> None:
    alice = harness.client("alice")
    _, _, hid = await _frozen(harness)
    unknown = await alice.post(f"/v1/handovers/{hid}/edit", json={"edits": {"colour": "red"}})
    assert unknown.status_code == 422 and "unknown edit" in unknown.json()["detail"]
    wrong = await alice.post(f"/v1/handovers/{hid}/edit", json={"edits": {"step": "many"}})
    assert wrong.status_code == 422 and wrong.json()["detail"].startswith("edits.step")
    empty = await alice.post(f"/v1/handovers/{hid}/edit", json={"edits": {}})
    assert empty.status_code == 422 and "body.edits" in empty.json()["detail"]
    missing = await alice.post(f"/v1/handovers/{hid}/edit", json={"note": "x"})
    assert missing.status_code == 422 and "body.edits: is required" in missing.json()["detail"]
    long_note = await alice.post(f"/v1/handovers/{hid}/approve", json={"note": "x" * 3000})
    assert long_note.status_code == 422
    assert (await alice.get(f"/v1/handovers/{hid}")).json()["status"] == "pending"


async def test_another_key_cannot_see_or_decide_a_handover(harness: Harness) -> None:
    alice, bob = harness.client("alice"), harness.client("bob")
    _, _, hid = await _frozen(harness)
    assert (await bob.get("/v1/handovers")).json()["handovers"] == []
    unknown = await alice.get("/v1/handovers/ho_doesnotexist")
    for method, suffix in (("GET", ""), ("POST", "/approve"), ("POST", "/reject")):
        theirs = await bob.request(method, f"/v1/handovers/{hid}{suffix}")
        assert theirs.status_code == 404 and theirs.content == unknown.content
    assert (await alice.get(f"/v1/handovers/{hid}")).json()["status"] == "pending"


async def test_suggested_fixes_come_only_from_the_same_keys_runs(harness: Harness) -> None:
    alice, bob = harness.client("alice"), harness.client("bob")
    a_sid, a_rid, _ = await _frozen(harness, "alice")
    b_sid, b_rid, b_hid = await _frozen(harness, "bob")
    alice_run = (await _run(alice, a_sid, a_rid))["agent_run_id"]
    bob_run = (await _run(bob, b_sid, b_rid))["agent_run_id"]
    detail = (await bob.get(f"/v1/handovers/{b_hid}")).json()["audit"]["suggested_fix_detail"]
    assert detail["run_id"] == bob_run != alice_run


async def test_a_run_waiting_on_a_person_ends_its_stream_with_waiting(harness: Harness) -> None:
    alice = harness.client("alice")
    sid, rid, hid = await _frozen(harness)
    # A stream left open would never finish this request: bounded, it fails instead.
    answer = await asyncio.wait_for(alice.get(f"/v1/sessions/{sid}/runs/{rid}/events"), 30)
    events = sse_messages(answer.text)
    kind, data, _ = events[-1]  # the response ended: the stream was closed, not left open
    assert kind == "waiting" and data["status"] == "handover" and data["handover_id"] == hid
    assert data["waiting_for"] == "handover_decision"
    assert "end" not in [e for e, _, _ in events]
    # After the decision, the same subscription resumes where it stopped and ends.
    last_step = max(int(i) for e, _, i in events if e == "step" and i is not None)
    await alice.post(f"/v1/handovers/{hid}/approve", json={})
    await harness.settle()
    after = (
        await alice.get(
            f"/v1/sessions/{sid}/runs/{rid}/events", headers={"Last-Event-ID": str(last_step)}
        )
    ).text
    resumed = sse_messages(after)
    assert resumed[-1][0] == "end" and resumed[-1][1]["status"] == "done"
    assert next(d["step"] for e, d, _ in resumed if e == "step") == last_step + 1
