"""Normalised signatures: timestamps, ids and nonces do not make a repeated call look new."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from closedloop.agent._repeats import action_signature, looks_volatile, normalise_arguments


def test_volatile_values_are_recognised() -> None:
    assert looks_volatile("2024-05-01T10:11:12Z")
    assert looks_volatile("2024-05-01 10:11:12.123+08:00")
    assert looks_volatile(str(uuid.uuid4()))
    assert looks_volatile(uuid.uuid4().hex)
    assert looks_volatile(1_716_000_000)
    assert looks_volatile(1_716_000_000_123)
    assert looks_volatile(1_716_000_000.5)


def test_real_arguments_are_not_volatile() -> None:
    for value in ("2024-05-01", "Paris", "ABC-001", 42, 3.5, True, 1999, "deadbeef"):
        assert not looks_volatile(value), value


def test_volatile_keys_are_dropped_at_every_depth() -> None:
    args = {"city": "Paris", "timestamp": 1, "meta": {"request_id": "x", "page": 2}}
    assert normalise_arguments(args) == {"city": "paris", "meta": {"page": 2}}


def test_whitespace_case_and_integral_floats_do_not_matter() -> None:
    a = action_signature("search", {"q": "  Rooms  free ", "n": 3.0})
    b = action_signature("search", {"n": 3, "q": "rooms free"})
    assert a == b
    assert a != action_signature("search", {"n": 4, "q": "rooms free"})
    assert a != action_signature("find", {"n": 3, "q": "rooms free"})


@given(
    st.dictionaries(st.sampled_from(["city", "date", "room"]), st.sampled_from(["a", "b", "c"])),
    st.floats(1_000_000_000, 9_000_000_000),
    st.uuids(),
)
def test_fresh_clock_readings_and_ids_never_change_the_signature(
    args: dict[str, str], now: float, nonce: uuid.UUID
) -> None:
    base = action_signature("tool", args)
    assert action_signature("tool", {**args, "ts": now}) == base
    assert action_signature("tool", {**args, "nonce": str(nonce)}) == base
    assert action_signature("tool", {**args, "at": now}) == action_signature(
        "tool", {**args, "at": now + 1.0}
    )
