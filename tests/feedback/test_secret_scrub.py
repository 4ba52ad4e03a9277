"""The secret scrub at every store write, in the service's answers, and the Secret value.

Every backend's write path (create, put, record_put, record_put_many, put_with_records)
crosses ``BaseStore._check_document``, which replaces known secret values by their
references and detected secrets by ``[redacted]``; fields named like credentials keep
their value (a store's own records are named so).
"""

from __future__ import annotations

import copy
import json
import pickle
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict

from closedloop import Secret, SecretUnavailableError
from closedloop._redaction import REDACTED, might_hold_secret, redact, remember_secret, scrub
from closedloop.execution._secret import RunSecrets, references_in, substitute
from closedloop.feedback import MemoryStore, SQLiteStore
from closedloop.feedback._store import BaseStore


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BaseStore]:
    made: BaseStore = MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "s.db")
    yield made
    await made.close()


def _known(name: str) -> str:
    value = "pw-" + secrets.token_hex(8)  # no detector knows this form
    assert remember_secret(value, name)
    return value


async def test_every_write_path_scrubs_known_and_detected_secrets(store: BaseStore) -> None:
    value = _known("DB_PASSWORD")
    key = "sk-" + secrets.token_hex(16)
    doc = {"note": f"login with {value}", "nested": [{"k": key}], "hash": "ab" * 16}
    await store.create("s", doc)
    await store.record_put("ns", "a", doc)
    await store.record_put_many([("ns", "b", doc, None)])
    await store.put_with_records(
        "s", doc, expected_version=1, records=[("ns", "c", doc)], writes=[("ns", "d", doc, None)]
    )
    expected = {
        "note": "login with {{secret:DB_PASSWORD}}",
        "nested": [{"k": REDACTED}],
        "hash": "ab" * 16,
    }
    assert (await store.get("s")).to_dict() == expected
    for name in "abcd":
        record = await store.record_get("ns", name)
        assert record is not None and record.to_dict() == expected, name


async def test_a_document_without_secrets_is_stored_as_given(store: BaseStore) -> None:
    doc = {"token": "t1", "password_hash": "x" * 40, "text": "a = b, sort by key", "n": 3}
    await store.create("s", doc)
    assert (await store.get("s")).to_dict() == doc


async def test_the_sqlite_file_and_its_wal_never_hold_the_value(tmp_path: Path) -> None:
    value = _known("API")
    async with SQLiteStore(tmp_path / "s.db") as store:
        await store.create("s", {"v": value, "again": [value, {"deep": f"x{value}y"}]})
        assert (tmp_path / "s.db-wal").exists()
        for path in tmp_path.iterdir():
            assert value.encode() not in path.read_bytes(), path.name
    for path in tmp_path.iterdir():
        assert value.encode() not in path.read_bytes(), path.name


def test_redact_names_known_values_by_reference_and_keeps_references() -> None:
    value = _known("API_TOKEN")
    assert redact(f"use {value}") == "use {{secret:API_TOKEN}}"
    assert redact("token={{secret:API_TOKEN}}&x=1") == "token={{secret:API_TOKEN}}&x=1"
    assert redact({"authorization": "{{secret:X}}"}) == {"authorization": REDACTED}
    assert scrub({"authorization": "plain"}) == {"authorization": "plain"}
    assert scrub({f"k{value}": [value]}) == {"k{{secret:API_TOKEN}}": ["{{secret:API_TOKEN}}"]}


def test_short_values_are_not_scrubbed_everywhere() -> None:
    assert not remember_secret("1234", "PIN")
    assert scrub("order 1234") == "order 1234"


def test_the_services_answers_are_scrubbed() -> None:
    from closedloop.server._scrubbed import ScrubbedJSONResponse

    value = _known("SERVICE")
    body = bytes(ScrubbedJSONResponse({"answer": f"done with {value}", "n": 1}).body)
    assert json.loads(body) == {"answer": "done with {{secret:SERVICE}}", "n": 1}
    assert json.loads(bytes(ScrubbedJSONResponse({"a": "plain"}).body)) == {"a": "plain"}


def test_a_secret_shows_only_its_reference_and_refuses_pickling() -> None:
    secret = Secret("API_TOKEN", resolver=lambda name: secrets.token_hex(8))
    assert str(secret) == secret.reference == "{{secret:API_TOKEN}}"
    assert repr(secret) == "Secret('API_TOKEN', resolver=function)"
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(secret)
    with pytest.raises(TypeError):
        json.dumps(secret)
    assert copy.deepcopy(secret) is secret

    class Holder(BaseModel):
        model_config = ConfigDict(arbitrary_types_allowed=True)
        secret: Secret

    assert Holder(secret=secret).model_dump() == {"secret": "{{secret:API_TOKEN}}"}
    assert Holder(secret=secret).model_dump_json() == '{"secret":"{{secret:API_TOKEN}}"}'


@pytest.mark.parametrize("name", ["", "1abc", "a b", "x" * 200, None])
def test_a_secret_needs_a_name_a_reference_can_hold(name: object) -> None:
    with pytest.raises(ValueError, match="name"):
        Secret(name)  # type: ignore[arg-type]


async def test_a_resolver_that_returns_no_text_is_refused() -> None:
    def nothing(name: str) -> Any:
        return None

    with pytest.raises(SecretUnavailableError, match="returned NoneType"):
        await Secret("x", resolver=nothing).resolve()

    async def later(name: str) -> str:
        return f"{name}-{value}"

    value = secrets.token_hex(8)  # random: a resolved value is scrubbed process-wide
    assert await Secret("async_one", resolver=later).resolve() == f"async_one-{value}"


async def test_a_run_table_adopts_detected_secrets_and_fills_references() -> None:
    key = "sk-" + secrets.token_hex(16)
    api = "api-" + secrets.token_hex(8)
    table = RunSecrets([Secret("API", resolver=lambda name: api)])
    text = table.adopt_text(f"key {key} and {key}")
    assert text == "key {{secret:detected_1}} and {{secret:detected_1}}"
    args = table.adopt({"a": "{{secret:API}}", "b": [f"Bearer {key}"], "n": 3})
    assert args == {"a": "{{secret:API}}", "b": ["Bearer {{secret:detected_1}}"], "n": 3}
    names = references_in(args)
    assert names == ["API", "detected_1"]
    values = await table.resolve(names)
    assert substitute(args, values) == {"a": api, "b": [f"Bearer {key}"], "n": 3}
    plain = {"x": ["no secret"]}
    assert table.adopt(plain) is plain  # nothing to change: not copied
    with pytest.raises(SecretUnavailableError, match="'detected_2'"):
        await RunSecrets().resolve(["detected_2"])


_PIECES = [
    "Bearer ",
    "bearer\t",
    "BEARER\n",
    "sk-",
    "sk_live_",
    "ghp_",
    "xoxb-",
    "AKIA",
    "eyJ",
    ".",
    "token=",
    "API-KEY=",
    "password=",
    "\n",
    "\u00a0",
    '"',
    "\\",
    "é",
    " ",
    "=",
    "&",
]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(_PIECES),
            st.text(alphabet="abcXYZ0123456789-_", min_size=1, max_size=40),
        ),
        max_size=12,
    ).map("".join)
)
def test_the_quick_probe_never_misses_what_the_scrub_would_change(text: str) -> None:
    if scrub(text) != text:
        assert might_hold_secret(json.dumps({"k": [text]}, ensure_ascii=False)), text


async def test_stored_code_stays_runnable_and_query_credentials_do_not(store: BaseStore) -> None:
    code = "rows = sorted(rows, key=operator.itemgetter(1)); call(token=tok)"
    url = "GET https://api.test/v1?q=rome&api_key=abcdef123456&page=2"
    await store.create("s", {"code": code, "url": url})
    stored = (await store.get("s")).to_dict()
    assert stored["code"] == code
    assert stored["url"] == f"GET https://api.test/v1?q=rome&api_key={REDACTED}&page=2"
    assert redact(code) != code  # an export is read, not run: it stays strict
