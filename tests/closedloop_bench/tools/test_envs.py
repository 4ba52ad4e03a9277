"""The toy APIs: schema checks, refusals that change nothing, and the state comparison."""

from __future__ import annotations

import pytest

from closedloop_bench.tools import ENVIRONMENTS, states_match


def test_a_refused_call_changes_nothing() -> None:
    ledger = ENVIRONMENTS["ledger"]({"accounts": {"checking": 10.0, "savings": 0.0, "travel": 0.0}})
    before = ledger.state()
    result = ledger.call("pay_bill", {"account": "checking", "payee": "City Power", "amount": 50})
    assert not result.ok and "insufficient" in (result.error or "")
    assert ledger.state() == before
    assert (
        ledger.call(
            "transfer", {"from_account": "savings", "to_account": "savings", "amount": 1}
        ).ok
        is False
    )


@pytest.mark.parametrize(
    ("env", "name", "arguments"),
    [
        ("todo", "add_todo", {"title": "x", "priority": "urgent"}),
        ("calendar", "create_event", {"title": "x", "day": "mon", "start": "25:00"}),
        ("inventory", "add_stock", {"sku": "mug-101", "quantity": 1}),
        ("files", "write_file", {"path": "relative.txt", "content": "x"}),
        ("ledger", "deposit", {"account": "checking", "amount": -5}),
        ("todo", "no_such_function", {}),
        ("todo", "add_todo", {"title": "x", "colour": "red"}),
    ],
)
def test_bad_arguments_are_refused(env: str, name: str, arguments: dict[str, object]) -> None:
    api = ENVIRONMENTS[env]()
    before = api.state()
    assert not api.call(name, arguments).ok
    assert api.state() == before


def test_each_api_changes_its_state() -> None:
    todo = ENVIRONMENTS["todo"]()
    assert todo.call("add_todo", {"title": "Buy milk"}).ok
    assert todo.call("complete_todo", {"title": "buy milk"}).ok  # names match up to case
    assert todo.state() == {"todos": [{"title": "Buy milk", "done": True, "priority": "normal"}]}
    files = ENVIRONMENTS["files"]({"files": {"/a.txt": "one"}})
    assert files.call("append_file", {"path": "/a.txt", "content": "two"}).ok
    assert files.call("move_file", {"source": "/a.txt", "destination": "/b/a.txt"}).ok
    assert files.call("list_dir", {"path": "/b"}).value == ["/b/a.txt"]
    assert files.state() == {"files": {"/b/a.txt": "one\ntwo"}}


def test_unknown_state_parts_are_refused() -> None:
    with pytest.raises(ValueError, match="no part"):
        ENVIRONMENTS["todo"]({"items": []})


def test_states_match_up_to_case_and_rounding() -> None:
    assert states_match({"a": [{"t": "Milk", "n": 1.0}]}, {"a": [{"t": " milk", "n": 1}]}) == []
    assert states_match({"a": 1, "b": 2}, {"a": 1, "b": 3}) == ["b"]
    assert states_match({"a": 1}, {}) == ["a"]
