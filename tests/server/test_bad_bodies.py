"""Every body the service cannot read is answered in the one error shape: 422 with problems."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .conftest import Harness

_BODIES = {
    "not JSON": (b"{nope", "is not valid JSON"),
    "nested deeper than the reader allows": (b"[" * 5000 + b"]" * 5000, "nested too deeply"),
    "invalid UTF-8": (b'{"metadata": {"team": "\xff\xfe"}}', "not valid UTF-8"),
    "a 5,000-digit number": (b'{"ttl_s": ' + b"9" * 5000 + b"}", "too many digits"),
}


@pytest.mark.parametrize(("body", "problem"), list(_BODIES.values()), ids=list(_BODIES))
async def test_an_unreadable_body_is_a_422_with_problems(
    harness: Harness, body: bytes, problem: str
) -> None:
    alice = harness.client("alice")
    response = await alice.post(
        "/v1/sessions", content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 422, response.text
    answer = response.json()
    assert answer["error"] == "invalid_request"
    assert answer["problems"] and answer["problems"][0]["where"] == "body"
    assert problem in answer["problems"][0]["problem"]
    assert isinstance(answer["detail"], str) and answer["detail"]


async def test_a_model_not_on_disk_answers_503_with_the_pull_command(
    make_harness: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLOSEDLOOP_HOME", str(tmp_path / "empty-home"))
    harness: Harness = await make_harness(model="local:smollm2-135m")
    alice = harness.client("alice")
    sid = (await alice.post("/v1/sessions", json={})).json()["id"]
    response = await alice.post(f"/v1/sessions/{sid}/runs", json={"agent": "calc", "task": "1+1"})
    assert response.status_code == 503, response.text
    answer = response.json()
    assert answer["error"] == "model_unavailable"
    assert "closedloop models pull smollm2-135m" in answer["detail"]


async def test_a_body_that_is_not_json_answers_415(harness: Harness) -> None:
    alice = harness.client("alice")
    for content_type in ("application/x-www-form-urlencoded", "text/plain", None):
        headers = {} if content_type is None else {"Content-Type": content_type}
        answer = await alice.post("/v1/sessions", content=b"ttl_s=60", headers=headers)
        assert answer.status_code == 415, (content_type, answer.text)
        assert answer.json()["error"] == "unsupported_media_type"
        assert "application/json" in answer.json()["detail"]
    ok = await alice.post(
        "/v1/sessions", content=b"{}", headers={"Content-Type": "application/json; charset=utf-8"}
    )
    assert ok.status_code == 201, ok.text
    assert (await alice.post("/v1/sessions")).status_code == 201  # no body: nothing to type


async def test_an_unknown_agent_is_a_422_with_its_problem(harness: Harness) -> None:
    alice = harness.client("alice")
    sid = (await alice.post("/v1/sessions", json={})).json()["id"]
    answer = await alice.post(f"/v1/sessions/{sid}/runs", json={"agent": "nope", "task": "x"})
    assert answer.status_code == 422
    (problem,) = answer.json()["problems"]
    assert problem["where"] == "body.agent" and "not registered" in problem["problem"]
