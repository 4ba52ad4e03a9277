"""Argument normalisation: one logical call, one idempotency key."""

from __future__ import annotations

import dataclasses
import random
from enum import Enum

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from closedloop import ConfigurationError
from closedloop.execution import EffectLedger, canonical_json, effect_key, normalise
from closedloop.feedback import MemoryStore

scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=8)
json_values = st.recursive(
    scalars | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)
argument_dicts = st.dictionaries(st.text(min_size=1, max_size=8), json_values, max_size=6)


def shuffled(value: object, rng: random.Random) -> object:
    """The same data with every dict's insertion order shuffled."""
    if isinstance(value, dict):
        items = list(value.items())
        rng.shuffle(items)
        return {k: shuffled(v, rng) for k, v in items}
    if isinstance(value, list):
        return [shuffled(v, rng) for v in value]
    return value


@given(args=argument_dicts, seed=st.integers(0, 1000))
def test_key_is_stable_under_dict_order(args: dict[str, object], seed: int) -> None:
    again = shuffled(args, random.Random(seed))
    assert isinstance(again, dict)
    assert effect_key("t1", 3, "pay", args) == effect_key("t1", 3, "pay", again)


@given(args=argument_dicts, stamp=st.floats(0, 2e9), request_id=st.text(max_size=12))
def test_volatile_fields_do_not_change_the_key(
    args: dict[str, object], stamp: float, request_id: str
) -> None:
    base = {k: v for k, v in args.items() if k not in ("timestamp", "request_id")}
    noisy = {**base, "timestamp": stamp, "request_id": request_id, "meta": {"trace_id": "x"}}
    plain = {**base, "meta": {}}
    assert effect_key("t", 0, "pay", noisy) == effect_key("t", 0, "pay", plain)


@given(args=argument_dicts, key=st.text(min_size=1, max_size=8), a=scalars, b=scalars)
def test_different_arguments_give_different_keys(
    args: dict[str, object], key: str, a: object, b: object
) -> None:
    # 1 == True in Python, yet they are different JSON; only skip truly equal values.
    if (a == b and type(a) is type(b)) or key in (
        "timestamp",
        "request_id",
        "trace_id",
        "span_id",
        "sent_at",
    ):
        return
    left, right = {**args, key: a}, {**args, key: b}
    assert effect_key("t", 0, "pay", left) != effect_key("t", 0, "pay", right)


def test_task_step_and_action_are_part_of_the_key() -> None:
    args = {"amount": 10}
    keys = {
        effect_key("t1", 1, "pay", args),
        effect_key("t2", 1, "pay", args),
        effect_key("t1", 2, "pay", args),
        effect_key("t1", 1, "refund", args),
    }
    assert len(keys) == 4
    assert effect_key("t1", 1, "pay", args).startswith("t1/1/pay/")


class Currency(Enum):
    EUR = "EUR"


class Money(BaseModel):
    amount: float
    currency: Currency


@dataclasses.dataclass
class Line:
    sku: str
    qty: int


def test_rich_values_normalise_to_canonical_json() -> None:
    a = {
        "total": Money(amount=12.0, currency=Currency.EUR),
        "tags": {"b", "a"},
        "lines": (Line("x", 1),),
    }
    b = {
        "lines": [{"qty": 1.0, "sku": "x"}],
        "tags": frozenset({"a", "b"}),
        "total": {"currency": "EUR", "amount": 12},
    }
    assert canonical_json(normalise(a)) == canonical_json(normalise(b))
    assert normalise({"price": 100.0}) == {"price": 100}
    assert normalise({"price": 100.0}, coerce_integral=False) == {"price": 100.0}


def test_custom_volatile_fields() -> None:
    ledger = EffectLedger(MemoryStore(), volatile_fields={"nonce"})
    key = ledger.key_for("t", 0, "send", {"to": "a", "nonce": 1})
    assert key == ledger.key_for("t", 0, "send", {"to": "a", "nonce": 2})
    assert key != ledger.key_for("t", 0, "send", {"to": "a", "nonce": 2, "sent_at": 5})
    extra = ledger.key_for("t", 0, "send", {"to": "a", "sent_at": 5}, extra_volatile={"sent_at"})
    assert extra == key


@pytest.mark.parametrize(
    ("args", "argument"),
    [
        ({"x": float("nan")}, "args.x"),
        ({"x": {1: "non-string key"}}, "args.x.1"),
        ({"x": [object()]}, "args.x[0]"),
    ],
)
def test_unstorable_arguments_are_named(args: dict[str, object], argument: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        effect_key("t", 0, "pay", args)
    assert info.value.argument == argument


@pytest.mark.parametrize(
    ("task_id", "step", "action", "argument"),
    [
        ("", 0, "pay", "task_id"),
        ("a/b", 0, "pay", "task_id"),
        ("t", -1, "pay", "step"),
        ("t", True, "pay", "step"),
        ("t", 0, "", "action"),
    ],
)
def test_bad_key_parts_are_named(task_id: str, step: int, action: str, argument: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        effect_key(task_id, step, action, {})
    assert info.value.argument == argument
