"""Keys: missing, wrong, revoked and other keys' tokens; rate limits; secrets kept out."""

from __future__ import annotations

import hashlib
import hmac
import logging
from pathlib import Path

import pytest

from closedloop._redaction import REDACTED, redact
from closedloop.feedback import MemoryStore
from closedloop.server import KEY_NAMESPACE, ApiKeys, RateLimit

from .conftest import Harness, HarnessFactory, new_session, start_run

PROTECTED = [
    ("GET", "/v1/me"),
    ("GET", "/v1/agents"),
    ("GET", "/v1/sessions"),
    ("POST", "/v1/sessions"),
    ("GET", "/v1/runs"),
    ("GET", "/v1/handovers"),
    ("GET", "/v1/handovers/ho_x"),
    ("POST", "/v1/handovers/ho_x/approve"),
]


@pytest.mark.parametrize(("method", "path"), PROTECTED)
async def test_no_key_is_401(harness: Harness, method: str, path: str) -> None:
    response = await harness.client("anonymous").request(method, path)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert response.json() == {
        "error": "unauthorized",
        "detail": "missing API key: send Authorization: Bearer <key>",
    }


@pytest.mark.parametrize(
    "header",
    [
        "Bearer sk-cl-000000000000-" + "0" * 48,  # well formed, unknown id
        "Bearer nonsense",
        "Basic dXNlcjpwYXNz",
        "Bearer ",
    ],
)
async def test_a_wrong_key_is_401(harness: Harness, header: str) -> None:
    response = await harness.client("anonymous").get("/v1/me", headers={"Authorization": header})
    assert response.status_code == 401
    assert response.json() == {"error": "unauthorized", "detail": "invalid API key"}


async def test_a_key_with_the_right_id_and_a_wrong_secret_is_401(harness: Harness) -> None:
    token = harness.keys["alice"]
    forged = token[:-4] + ("0000" if not token.endswith("0000") else "1111")
    response = await harness.client("anonymous").get(
        "/v1/me", headers={"Authorization": f"Bearer {forged}"}
    )
    assert response.status_code == 401


async def test_another_keys_session_is_invisible_with_the_same_body_as_an_unknown_one(
    harness: Harness,
) -> None:
    alice, bob = harness.client("alice"), harness.client("bob")
    sid = await new_session(alice)
    rid = await start_run(alice, sid, "calc", "Add 1 and 1.")
    await harness.settle()
    unknown_sid = "ses_" + ("0" if sid[4] != "0" else "1") + sid[5:]
    paths = ["", "/runs", f"/runs/{rid}", f"/runs/{rid}/result", f"/runs/{rid}/trace",
             f"/runs/{rid}/events"]  # fmt: skip
    for suffix in paths:
        theirs = await bob.get(f"/v1/sessions/{sid}{suffix}")
        unknown = await alice.get(f"/v1/sessions/{unknown_sid}{suffix}")
        assert theirs.status_code == unknown.status_code == 404, suffix
        assert theirs.content == unknown.content, suffix
    assert (await bob.delete(f"/v1/sessions/{sid}")).status_code == 404
    posted = await bob.post(f"/v1/sessions/{sid}/runs", json={"agent": "calc", "task": "x"})
    assert posted.status_code == 404
    assert (await bob.post(f"/v1/sessions/{sid}/runs/{rid}/cancel")).status_code == 404
    assert (await bob.get("/v1/sessions")).json()["sessions"] == []
    assert (await bob.get("/v1/runs")).json()["runs"] == []
    # Alice still has it all.
    assert (await alice.get(f"/v1/sessions/{sid}/runs/{rid}")).json()["answer"] == "2"


async def test_a_revoked_key_is_refused_at_once(harness: Harness) -> None:
    alice = harness.client("alice")
    assert (await alice.get("/v1/me")).status_code == 200
    principal = await harness.service.keys.verify(harness.keys["alice"])
    assert principal is not None
    info = await harness.service.keys.revoke(principal.key_id)
    assert not info.active
    response = await alice.get("/v1/me")
    assert response.status_code == 401 and response.json()["detail"] == "invalid API key"
    assert (await harness.service.keys.revoke(principal.key_id)).revoked_at == info.revoked_at


async def test_keys_are_stored_as_salted_hmacs_never_as_keys() -> None:
    store = MemoryStore()
    keys = ApiKeys(store, clock=lambda: 5.0)
    first, second = await keys.create("ci"), await keys.create("ci")
    assert first.token != second.token
    for created in (first, second):
        record = await store.record_get(KEY_NAMESPACE, created.info.key_id)
        assert record is not None
        value = record.to_dict()
        secret = created.token.rsplit("-", 1)[1]
        assert set(value) == {"key_id", "name", "created_at", "revoked_at", "salt", "hash"}
        assert secret not in str(value) and created.token not in str(value)
        expected = hmac.new(bytes.fromhex(value["salt"]), secret.encode(), hashlib.sha256)
        assert value["hash"] == expected.hexdigest()
    salts = {
        (await store.record_get(KEY_NAMESPACE, c.info.key_id)).value["salt"]
        for c in (first, second)
    }  # type: ignore[union-attr]
    assert len(salts) == 2  # a salt per key
    assert [i.key_id for i in await keys.list()] == sorted(
        [first.info.key_id, second.info.key_id],
        key=lambda k: (5.0, k),
    )
    with pytest.raises(ValueError, match="name="):
        await keys.create("")


def test_every_key_is_caught_by_the_shared_redaction() -> None:
    import asyncio

    async def make() -> list[str]:
        keys = ApiKeys(MemoryStore())
        return [(await keys.create("x")).token for _ in range(50)]

    for token in asyncio.run(make()):
        assert redact(f"my key is {token} ok") == f"my key is {REDACTED} ok"
        assert redact({"note": token}) == {"note": REDACTED}


async def test_the_rate_limit_answers_429_with_retry_after_and_refills(
    make_harness: HarnessFactory,
) -> None:
    harness = await make_harness(rate_limit=RateLimit(rate_per_s=0.5, burst=3))
    alice, bob = harness.client("alice"), harness.client("bob")
    for _ in range(3):
        assert (await alice.get("/v1/me")).status_code == 200
    limited = await alice.get("/v1/me")
    assert limited.status_code == 429
    assert limited.headers["retry-after"] == "2"  # one token at 0.5/s
    assert limited.json()["error"] == "rate_limited"
    assert (await bob.get("/v1/me")).status_code == 200  # per key
    harness.clock.advance(1.0)
    assert (await alice.get("/v1/me")).status_code == 429
    harness.clock.advance(1.0)
    assert (await alice.get("/v1/me")).status_code == 200
    metrics = (await harness.client("anonymous").get("/metrics")).text
    assert "closedloop_rate_limited_total 2.0" in metrics


async def test_secrets_in_a_task_stay_out_of_records_traces_and_logs(
    harness: Harness, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    alice = harness.client("alice")
    leaked = harness.keys["bob"]
    sid = await new_session(alice)
    caplog.set_level(logging.DEBUG)
    task = f"Add 2 and 2. My token is {leaked} and Bearer abcdefgh12345678"
    rid = await start_run(alice, sid, "calc", task)
    await harness.settle()
    run = (await alice.get(f"/v1/sessions/{sid}/runs/{rid}")).json()
    assert run["answer"] == "4"
    assert leaked not in run["task"] and REDACTED in run["task"]
    trace = (await alice.get(f"/v1/sessions/{sid}/runs/{rid}/trace")).text
    events = (await alice.get(f"/v1/sessions/{sid}/runs/{rid}/events")).text
    for artefact in [trace, events, *(p.read_text() for p in (tmp_path / "runs").rglob("*.*"))]:
        assert leaked not in artefact and "abcdefgh12345678" not in artefact
    logging.getLogger("closedloop.server").warning("request with Authorization: Bearer %s", leaked)
    for record in caplog.records:
        assert leaked not in record.getMessage()
    assert any(REDACTED in r.getMessage() for r in caplog.records)
