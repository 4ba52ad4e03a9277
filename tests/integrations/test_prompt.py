"""Prompt injection: the rigour as text, written idempotently into the system message."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from closedloop import ConfigurationError
from closedloop.control import ActuatorSchedule, schedule_strictness
from closedloop.integrations import ControlLoop, inject_rigour, rigour_prompt, strip_rigour
from closedloop.models import Message

unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=60)


def test_the_seed_sentence_in_both_languages() -> None:
    assert rigour_prompt(0.65, language="zh").startswith("你当前的严谨度为0.65")
    assert rigour_prompt(0.65).startswith("Your current rigour is 0.65")


@pytest.mark.parametrize("language", ["en", "zh"])
def test_constraints_grow_with_the_level(language: str) -> None:
    light, medium, heavy, strict = (
        rigour_prompt(u, language=language) for u in (0.1, 0.45, 0.65, 0.9)
    )
    sizes = [len(p.splitlines()) for p in (light, medium, heavy, strict)]
    assert sizes == [2, 2, 3, 4]
    assert light.splitlines()[1] != medium.splitlines()[1]
    assert heavy.splitlines()[1:] == strict.splitlines()[1:3]
    assert "data_incomplete" in strict and "data_incomplete" not in heavy


def test_settings_contexts_and_schedules_are_accepted() -> None:
    loop = ControlLoop()
    loop.update("k", 1.0)
    ctx = loop.context("k")
    assert rigour_prompt(ctx) == rigour_prompt(ctx.settings) == rigour_prompt(ctx.rigour)
    early_strict = ActuatorSchedule(strictness=schedule_strictness(0.1))
    assert "JSON" in rigour_prompt(0.2, schedule=early_strict)
    assert "JSON" not in rigour_prompt(0.2)


@pytest.mark.parametrize(
    ("rigour", "language", "argument"),
    [(1.5, "en", "rigour"), (math.nan, "en", "rigour"), ("high", "en", "rigour"),
     (True, "en", "rigour"), (0.5, "fr", "language")],
)  # fmt: skip
def test_bad_rigour_or_language(rigour: Any, language: str, argument: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        rigour_prompt(rigour, language=language)
    assert info.value.argument == argument


def test_inject_appends_to_the_system_message_and_leaves_the_input_alone() -> None:
    original = [
        {"role": "system", "content": "You are a weather assistant."},
        {"role": "user", "content": "北就天气?"},
    ]
    out = inject_rigour(original, 0.8, language="zh")
    assert original[0]["content"] == "You are a weather assistant."
    assert out[0]["content"].startswith("You are a weather assistant.\n\n<rigour>\n你当前")
    assert out[0]["content"].endswith("</rigour>")
    assert out[1] == original[1] and out[1] is not original[1]
    assert strip_rigour(out[0]["content"]) == original[0]["content"]


def test_without_a_system_message_one_is_put_first() -> None:
    out = inject_rigour([{"role": "user", "content": "hi"}], 0.2)
    assert out[0]["role"] == "system" and out[0]["content"].startswith("<rigour>")
    assert inject_rigour([], 0.2)[0]["role"] == "system"


def test_message_objects_keep_their_type() -> None:
    messages = [Message(role="system", content="Be brief."), Message(role="user", content="hi")]
    out = inject_rigour(messages, 0.9)
    assert all(isinstance(m, Message) for m in out)
    assert "Be brief." in out[0].content and "rigour" in out[0].content
    created = inject_rigour([Message(role="user", content="hi")], 0.9)
    assert isinstance(created[0], Message) and created[0].role == "system"


@given(
    st.lists(st.tuples(st.sampled_from(["system", "user", "assistant"]), text), max_size=5),
    unit,
    unit,
    st.sampled_from(["en", "zh"]),
)
def test_injection_is_idempotent_and_replaces_the_old_block(
    pairs: list[tuple[str, str]], a: float, b: float, language: str
) -> None:
    messages = [{"role": role, "content": content} for role, content in pairs]
    once = inject_rigour(messages, b, language=language)
    assert inject_rigour(once, b, language=language) == once
    assert inject_rigour(inject_rigour(messages, a), b, language=language) == once
    systems = [m for m in once if m["role"] == "system"]
    assert sum(m["content"].count("<rigour>") for m in systems) == 1
    assert rigour_prompt(b, language=language) in systems[0]["content"]
    # Stripping every block gives the original conversation back (plus the added message).
    restored = [{**m, "content": strip_rigour(m["content"])} for m in once]
    if any(role == "system" for role, _ in pairs):
        assert restored == messages
    else:
        assert restored[1:] == messages and restored[0]["content"] == ""


def test_stale_blocks_in_later_system_messages_are_removed() -> None:
    stale = inject_rigour([{"role": "system", "content": "B"}], 0.9)[0]
    messages = [{"role": "system", "content": "A"}, {"role": "user", "content": "u"}, stale]
    out = inject_rigour(messages, 0.1)
    assert out[2]["content"] == "B"
    assert out[0]["content"].count("<rigour>") == 1


@pytest.mark.parametrize(
    ("messages", "argument"),
    [
        ("hello", "messages"),
        ([{"content": "no role"}], "messages[0]"),
        ([{"role": "user", "content": "x"}, 42], "messages[1]"),
        ([{"role": "system", "content": [{"type": "text"}]}], "messages[0].content"),
    ],
)
def test_bad_messages_are_named(messages: Any, argument: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        inject_rigour(messages, 0.5)
    assert info.value.argument == argument
