"""Toy stateful APIs for the multi-turn tasks: pure Python, deterministic, JSON state.

Each environment holds its whole state as one JSON value and offers a few functions with
OpenAI-style schemas. ``env.call(name, arguments)`` checks the arguments against the
function's schema and runs it; a bad call (a schema violation, an unknown item, too
little money) changes nothing and returns an error the caller can show the model, as a
real API would. Functions marked read-only never change the state, so a checker may let
a model look before it acts.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import jsonschema

__all__ = [
    "ENVIRONMENTS",
    "CallResult",
    "Environment",
    "states_match",
]

_DAYS = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
_TEXT = {"type": "string", "minLength": 1, "maxLength": 80}
_AMOUNT = {"type": "number", "exclusiveMinimum": 0, "maximum": 100000}
_COUNT = {"type": "integer", "minimum": 1, "maximum": 10000}


@dataclass(frozen=True, slots=True)
class CallResult:
    """What one call returned: ``ok`` and a JSON value, or ``ok=False`` and an error."""

    ok: bool
    value: Any = None
    error: str | None = None

    def as_text(self) -> str:
        """The result as a tool message's content."""
        if self.ok:
            return json.dumps({"ok": True, "result": self.value}, ensure_ascii=False)
        return json.dumps({"ok": False, "error": self.error}, ensure_ascii=False)


class _Refused(Exception):
    """A call the API refuses: the state stays as it was."""


def _fn(description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "description": description,
        "parameters": {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        },
    }


class Environment:
    """The base of every toy API: state handling, schema checks, dispatch."""

    name: ClassVar[str] = ""
    functions: ClassVar[dict[str, dict[str, Any]]] = {}
    read_only: ClassVar[frozenset[str]] = frozenset()
    default_state: ClassVar[dict[str, Any]] = {}

    def __init__(self, state: Mapping[str, Any] | None = None) -> None:
        base = copy.deepcopy(self.default_state)
        if state is not None:
            if not isinstance(state, Mapping):
                raise ValueError(f"the {self.name} state must be a JSON object")
            unknown = sorted(set(state) - set(base))
            if unknown:
                raise ValueError(
                    f"the {self.name} state has no part {', '.join(unknown)} "
                    f"(parts: {', '.join(base)})"
                )
            base.update(copy.deepcopy(dict(state)))
        self._state = base

    @classmethod
    def function_names(cls) -> tuple[str, ...]:
        return tuple(cls.functions)

    @classmethod
    def tool(cls, name: str) -> dict[str, Any]:
        """The OpenAI-style tool dict of one function."""
        spec = cls.functions[name]
        return {"type": "function", "function": {"name": name, **copy.deepcopy(spec)}}

    def state(self) -> dict[str, Any]:
        """A copy of the whole state."""
        return copy.deepcopy(self._state)

    def call(self, name: str, arguments: object) -> CallResult:
        """Run one call; a refused call leaves the state untouched."""
        if name not in self.functions:
            return CallResult(False, error=f"unknown function {name!r}")
        if not isinstance(arguments, Mapping):
            return CallResult(False, error="arguments must be a JSON object")
        schema = self.functions[name]["parameters"]
        error = next(
            iter(jsonschema.Draft202012Validator(schema).iter_errors(dict(arguments))), None
        )
        if error is not None:
            return CallResult(False, error=f"bad arguments for {name}: {error.message}")
        handler: Callable[..., Any] = getattr(self, f"_do_{name}")
        before = copy.deepcopy(self._state)
        try:
            return CallResult(True, value=handler(**dict(arguments)))
        except _Refused as exc:
            self._state = before
            return CallResult(False, error=str(exc))


def _key(text: str) -> str:
    return text.strip().casefold()


def _find(items: list[dict[str, Any]], field: str, value: str, what: str) -> dict[str, Any]:
    for item in items:
        if _key(str(item[field])) == _key(value):
            return item
    raise _Refused(f"no {what} {value!r}")


class TodoList(Environment):
    """A to-do list: titles, a done flag and a priority."""

    name = "todo"
    _PRIORITY: ClassVar[dict[str, Any]] = {"type": "string", "enum": ["low", "normal", "high"]}
    functions: ClassVar[dict[str, dict[str, Any]]] = {
        "add_todo": _fn(
            "Add an item to the to-do list.",
            {"title": _TEXT, "priority": _PRIORITY},
            ["title"],
        ),
        "complete_todo": _fn("Mark an item done.", {"title": _TEXT}, ["title"]),
        "delete_todo": _fn("Remove an item from the list.", {"title": _TEXT}, ["title"]),
        "set_priority": _fn(
            "Change the priority of an item.",
            {"title": _TEXT, "priority": _PRIORITY},
            ["title", "priority"],
        ),
        "list_todos": _fn("List every item with its state.", {}, []),
    }
    read_only = frozenset({"list_todos"})
    default_state: ClassVar[dict[str, Any]] = {"todos": []}

    def _do_add_todo(self, title: str, priority: str = "normal") -> str:
        if any(_key(t["title"]) == _key(title) for t in self._state["todos"]):
            raise _Refused(f"{title!r} is already on the list")
        self._state["todos"].append({"title": title, "done": False, "priority": priority})
        return "added"

    def _do_complete_todo(self, title: str) -> str:
        _find(self._state["todos"], "title", title, "item")["done"] = True
        return "done"

    def _do_delete_todo(self, title: str) -> str:
        item = _find(self._state["todos"], "title", title, "item")
        self._state["todos"].remove(item)
        return "deleted"

    def _do_set_priority(self, title: str, priority: str) -> str:
        _find(self._state["todos"], "title", title, "item")["priority"] = priority
        return "updated"

    def _do_list_todos(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self._state["todos"])


class Ledger(Environment):
    """Bank accounts with balances in dollars, and the bills paid from them."""

    name = "ledger"
    _ACCOUNT: ClassVar[dict[str, Any]] = {
        "type": "string",
        "enum": ["checking", "savings", "travel"],
    }
    functions: ClassVar[dict[str, dict[str, Any]]] = {
        "get_balance": _fn("The balance of an account.", {"account": _ACCOUNT}, ["account"]),
        "deposit": _fn(
            "Deposit money into an account.",
            {"account": _ACCOUNT, "amount": _AMOUNT},
            ["account", "amount"],
        ),
        "transfer": _fn(
            "Move money between two accounts.",
            {"from_account": _ACCOUNT, "to_account": _ACCOUNT, "amount": _AMOUNT},
            ["from_account", "to_account", "amount"],
        ),
        "pay_bill": _fn(
            "Pay a bill to a payee from an account.",
            {"account": _ACCOUNT, "payee": _TEXT, "amount": _AMOUNT},
            ["account", "payee", "amount"],
        ),
    }
    read_only = frozenset({"get_balance"})
    default_state: ClassVar[dict[str, Any]] = {
        "accounts": {"checking": 0.0, "savings": 0.0, "travel": 0.0},
        "payments": [],
    }

    def _take(self, account: str, amount: float) -> None:
        balance = self._state["accounts"][account]
        if balance + 1e-9 < amount:
            raise _Refused(f"insufficient funds in {account}: {balance:.2f} < {amount:.2f}")
        self._state["accounts"][account] = round(balance - amount, 2)

    def _give(self, account: str, amount: float) -> None:
        self._state["accounts"][account] = round(self._state["accounts"][account] + amount, 2)

    def _do_get_balance(self, account: str) -> float:
        return float(self._state["accounts"][account])

    def _do_deposit(self, account: str, amount: float) -> str:
        self._give(account, amount)
        return "deposited"

    def _do_transfer(self, from_account: str, to_account: str, amount: float) -> str:
        if from_account == to_account:
            raise _Refused("from_account and to_account are the same account")
        self._take(from_account, amount)
        self._give(to_account, amount)
        return "transferred"

    def _do_pay_bill(self, account: str, payee: str, amount: float) -> str:
        self._take(account, amount)
        self._state["payments"].append({"payee": payee, "amount": round(amount, 2)})
        return "paid"


class Calendar(Environment):
    """A week's calendar: events with a day, a start time and a length."""

    name = "calendar"
    _DAY: ClassVar[dict[str, Any]] = {"type": "string", "enum": _DAYS}
    _TIME: ClassVar[dict[str, Any]] = {
        "type": "string",
        "pattern": "^([01][0-9]|2[0-3]):[0-5][0-9]$",
    }
    functions: ClassVar[dict[str, dict[str, Any]]] = {
        "create_event": _fn(
            "Create an event.",
            {
                "title": _TEXT,
                "day": _DAY,
                "start": _TIME,
                "duration_min": {"type": "integer", "minimum": 5, "maximum": 600},
            },
            ["title", "day", "start"],
        ),
        "move_event": _fn(
            "Move an event to another day and start time.",
            {"title": _TEXT, "day": _DAY, "start": _TIME},
            ["title", "day", "start"],
        ),
        "cancel_event": _fn("Cancel an event.", {"title": _TEXT}, ["title"]),
        "list_events": _fn("The events of one day.", {"day": _DAY}, ["day"]),
    }
    read_only = frozenset({"list_events"})
    default_state: ClassVar[dict[str, Any]] = {"events": []}

    def _do_create_event(self, title: str, day: str, start: str, duration_min: int = 60) -> str:
        if any(_key(e["title"]) == _key(title) for e in self._state["events"]):
            raise _Refused(f"an event {title!r} exists already")
        event = {"title": title, "day": day, "start": start, "duration_min": duration_min}
        self._state["events"].append(event)
        return "created"

    def _do_move_event(self, title: str, day: str, start: str) -> str:
        event = _find(self._state["events"], "title", title, "event")
        event["day"], event["start"] = day, start
        return "moved"

    def _do_cancel_event(self, title: str) -> str:
        self._state["events"].remove(_find(self._state["events"], "title", title, "event"))
        return "cancelled"

    def _do_list_events(self, day: str) -> list[dict[str, Any]]:
        return [copy.deepcopy(e) for e in self._state["events"] if e["day"] == day]


class Inventory(Environment):
    """A shop's stock per product code, and the orders taken from it."""

    name = "inventory"
    _SKU: ClassVar[dict[str, Any]] = {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"}
    functions: ClassVar[dict[str, dict[str, Any]]] = {
        "get_stock": _fn("Units in stock of a product.", {"sku": _SKU}, ["sku"]),
        "add_stock": _fn(
            "Receive units of a product.", {"sku": _SKU, "quantity": _COUNT}, ["sku", "quantity"]
        ),
        "remove_stock": _fn(
            "Write off damaged or lost units.",
            {"sku": _SKU, "quantity": _COUNT},
            ["sku", "quantity"],
        ),
        "create_order": _fn(
            "Sell units of a product to a customer.",
            {"sku": _SKU, "quantity": _COUNT, "customer": _TEXT},
            ["sku", "quantity", "customer"],
        ),
    }
    read_only = frozenset({"get_stock"})
    default_state: ClassVar[dict[str, Any]] = {"stock": {}, "orders": []}

    def _take(self, sku: str, quantity: int) -> None:
        have = self._state["stock"].get(sku)
        if have is None:
            raise _Refused(f"unknown product {sku!r}")
        if have < quantity:
            raise _Refused(f"only {have} units of {sku} in stock")
        self._state["stock"][sku] = have - quantity

    def _do_get_stock(self, sku: str) -> int:
        if sku not in self._state["stock"]:
            raise _Refused(f"unknown product {sku!r}")
        return int(self._state["stock"][sku])

    def _do_add_stock(self, sku: str, quantity: int) -> str:
        self._state["stock"][sku] = self._state["stock"].get(sku, 0) + quantity
        return "received"

    def _do_remove_stock(self, sku: str, quantity: int) -> str:
        self._take(sku, quantity)
        return "written off"

    def _do_create_order(self, sku: str, quantity: int, customer: str) -> str:
        self._take(sku, quantity)
        self._state["orders"].append({"sku": sku, "quantity": quantity, "customer": customer})
        return "ordered"


class FileSystem(Environment):
    """A flat file system: absolute paths to text contents."""

    name = "files"
    _PATH: ClassVar[dict[str, Any]] = {
        "type": "string",
        "pattern": "^/[A-Za-z0-9_./-]{1,60}$",
        "maxLength": 61,
    }
    functions: ClassVar[dict[str, dict[str, Any]]] = {
        "read_file": _fn("The contents of a file.", {"path": _PATH}, ["path"]),
        "list_dir": _fn("The files under a folder.", {"path": _PATH}, ["path"]),
        "write_file": _fn(
            "Create or overwrite a file.", {"path": _PATH, "content": _TEXT}, ["path", "content"]
        ),
        "append_file": _fn(
            "Append a line to a file.", {"path": _PATH, "content": _TEXT}, ["path", "content"]
        ),
        "move_file": _fn(
            "Move or rename a file.",
            {"source": _PATH, "destination": _PATH},
            ["source", "destination"],
        ),
        "delete_file": _fn("Delete a file.", {"path": _PATH}, ["path"]),
    }
    read_only = frozenset({"read_file", "list_dir"})
    default_state: ClassVar[dict[str, Any]] = {"files": {}}

    def _need(self, path: str) -> str:
        if path not in self._state["files"]:
            raise _Refused(f"no such file {path!r}")
        return str(self._state["files"][path])

    def _do_read_file(self, path: str) -> str:
        return self._need(path)

    def _do_list_dir(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        return sorted(p for p in self._state["files"] if p.startswith(prefix))

    def _do_write_file(self, path: str, content: str) -> str:
        self._state["files"][path] = content
        return "written"

    def _do_append_file(self, path: str, content: str) -> str:
        old = self._need(path)
        self._state["files"][path] = f"{old}\n{content}" if old else content
        return "appended"

    def _do_move_file(self, source: str, destination: str) -> str:
        content = self._need(source)
        if destination in self._state["files"]:
            raise _Refused(f"{destination!r} exists already")
        del self._state["files"][source]
        self._state["files"][destination] = content
        return "moved"

    def _do_delete_file(self, path: str) -> str:
        self._need(path)
        del self._state["files"][path]
        return "deleted"


ENVIRONMENTS: dict[str, type[Environment]] = {
    cls.name: cls for cls in (TodoList, Ledger, Calendar, Inventory, FileSystem)
}
"""Every toy API by name."""


def _normal(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return round(float(value), 6)
    if isinstance(value, str):
        return _key(value)
    if isinstance(value, Mapping):
        return {_key(str(k)): _normal(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normal(v) for v in value]
    return value


def states_match(expected: Mapping[str, Any], actual: Mapping[str, Any]) -> list[str]:
    """The parts of ``expected`` that ``actual`` does not hold (strings compared up to case
    and surrounding whitespace, numbers to 6 decimals); empty when the check passes."""
    return [
        key
        for key, value in expected.items()
        if key not in actual or _normal(value) != _normal(actual[key])
    ]
