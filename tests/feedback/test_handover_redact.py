"""Secret redaction, applied to audits, escalations, traces and spans."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from closedloop._redaction import REDACTED, is_secret_key, redact

_ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


@st.composite
def secrets_(draw: st.DrawFn) -> str:
    body = draw(st.text(_ALNUM, min_size=24, max_size=60)) + draw(st.sampled_from("0123456789"))
    kind = draw(st.sampled_from(["openai", "project", "bearer", "github", "jwt", "stripe"]))
    return {
        "openai": f"sk-{body}",
        "project": f"sk-proj-{body}",
        "bearer": f"Bearer {body}",
        "github": f"ghp_{body[:36].ljust(36, '0')}",
        "jwt": f"eyJ{body[:12]}.{body[12:]}.{body[::-1]}",
        "stripe": f"sk_live_{body}",
    }[kind]


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)


@given(before=st.text(max_size=40), secret=secrets_(), after=st.text(max_size=40))
def test_a_secret_inside_any_text_never_survives(before: str, secret: str, after: str) -> None:
    text = f"{before} {secret} {after}"
    out = redact(text)
    assert secret not in out
    assert REDACTED in out
    token = secret.split()[-1]
    assert token not in json.dumps(redact({"log": [text]}))


@given(json_values)
def test_redaction_is_idempotent_and_never_crashes(value: Any) -> None:
    once = redact(value)
    assert redact(once) == once


_SAFE_TEXT = st.text("acdefghijklmnopqrstuvwxyz .,:", max_size=30)  # no digits, no 'b'


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | _SAFE_TEXT,
        lambda children: (
            st.lists(children, max_size=3)
            | st.dictionaries(
                st.sampled_from(["step", "phase", "value", "prompt_tokens", "tool", "keys"]),
                children,
                max_size=3,
            )
        ),
        max_leaves=15,
    )
)
def test_values_without_secrets_come_back_unchanged(value: Any) -> None:
    assert redact(value) == json.loads(json.dumps(value))


@pytest.mark.parametrize(
    "key",
    [
        "api_key",
        "apiKey",
        "OPENAI_API_KEY",
        "x-api-key",
        "Authorization",
        "access_token",
        "refreshToken",
        "token",
        "client_secret",
        "password",
        "db.passwd",
        "Cookie",
        "private_key",
    ],
)
def test_credential_keys_are_recognised(key: str) -> None:
    assert is_secret_key(key)
    assert redact({key: "hunter2", "other": 1}) == {key: REDACTED, "other": 1}
    assert redact({key: {"nested": "x"}}) == {key: REDACTED}
    assert redact({key: None}) == {key: None}  # "not set" is not a secret


@pytest.mark.parametrize(
    "key",
    ["prompt_tokens", "completion_tokens", "input_tokens", "keys", "monkey", "tokenizer", "step"],
)
def test_ordinary_keys_are_left_alone(key: str) -> None:
    assert not is_secret_key(key)
    assert redact({key: 17}) == {key: 17}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("GET /v1?api_key=abc123&q=rome", f"GET /v1?api_key={REDACTED}&q=rome"),
        ("Authorization: Bearer abc.def-ghi_01234", f"Authorization: {REDACTED}"),
        ("the bearer of bad news", "the bearer of bad news"),
        (
            "see scikit-learn and sk-learn-pipeline-docs",
            "see scikit-learn and sk-learn-pipeline-docs",
        ),
        ("task-0123456789abcdefghijklmn", "task-0123456789abcdefghijklmn"),
        ("AKIAABCDEFGHIJKLMNOP leaked", f"{REDACTED} leaked"),
    ],
)
def test_text_patterns(text: str, expected: str) -> None:
    assert redact(text) == expected
