"""Multi-turn scenarios against the toy APIs: a starting state and a few requests in words.

Each scenario draws a starting state, then two to four operations that are valid in the
state they meet (each is run on the environment as it is drawn, so a scenario never asks
for the impossible). Some scenarios chain on purpose: money moved before a bill that
needs it, an item added before it is completed. The requests come as one user message or
as a message and a follow-up.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._envs import ENVIRONMENTS, Environment
from ._score import Call

__all__ = ["ENV_DOMAINS", "Scenario", "draw_scenario"]

ENV_DOMAINS = {
    "todo": "productivity",
    "ledger": "banking",
    "calendar": "calendar",
    "inventory": "retail",
    "files": "files",
}
"""The domain each environment's tasks are filed under."""


@dataclass(frozen=True, slots=True)
class Scenario:
    """One drawn scenario: where the environment starts, what is asked, the ideal calls."""

    env: str
    initial_state: dict[str, Any]
    turns: tuple[str, ...]
    calls: tuple[Call, ...]
    final_state: dict[str, Any]


_Op = tuple[str, Call]
_Drawer = Callable[[random.Random, Environment], "_Op | list[_Op] | None"]

_TODOS = (
    "buy milk",
    "renew passport",
    "email the landlord",
    "fix the bike",
    "book dentist",
    "pay rent",
    "call grandma",
    "return library books",
    "clean the gutters",
)


def _todo_state(rng: random.Random) -> dict[str, Any]:
    titles = rng.sample(_TODOS, rng.randint(2, 4))
    items = [
        {"title": t, "done": rng.random() < 0.3, "priority": rng.choice(["low", "normal", "high"])}
        for t in titles
    ]
    return {"todos": items}


def _todo_op(rng: random.Random, env: Environment) -> _Op | None:
    todos = env.state()["todos"]
    present = [t["title"] for t in todos]
    open_items = [t["title"] for t in todos if not t["done"]]
    kind = rng.choice(["add", "add", "complete", "delete", "priority"])
    if kind == "add":
        free = [t for t in _TODOS if t not in present]
        title = rng.choice(free)
        if rng.random() < 0.5:
            p = rng.choice(["low", "high"])
            return f'add "{title}" with {p} priority', Call(
                "add_todo", {"title": title, "priority": p}
            )
        return f'add "{title}" to my list', Call("add_todo", {"title": title})
    if kind == "complete" and open_items:
        title = rng.choice(open_items)
        return f'mark "{title}" as done', Call("complete_todo", {"title": title})
    if kind == "delete" and present:
        title = rng.choice(present)
        return f'remove "{title}" from the list', Call("delete_todo", {"title": title})
    if kind == "priority" and present:
        title = rng.choice(present)
        p = rng.choice(["low", "normal", "high"])
        return f'set "{title}" to {p} priority', Call(
            "set_priority", {"title": title, "priority": p}
        )
    return None


_PAYEES = ("City Power", "AquaWater", "FiberNet", "Dr. Lee", "Green Gym")
_ACCOUNTS = ("checking", "savings", "travel")


def _ledger_state(rng: random.Random) -> dict[str, Any]:
    return {
        "accounts": {
            "checking": float(rng.randrange(50, 400, 5)),
            "savings": float(rng.randrange(500, 3000, 50)),
            "travel": float(rng.randrange(0, 300, 10)),
        },
        "payments": [],
    }


def _money(rng: random.Random) -> float:
    return round(rng.choice([5, 10, 20, 25, 40, 60, 75, 120, 150]) * rng.choice([1, 1.1, 1.5]), 2)


def _ledger_op(rng: random.Random, env: Environment) -> _Op | list[_Op] | None:
    accounts = env.state()["accounts"]
    kind = rng.choice(["deposit", "transfer", "pay", "pay_after_transfer"])
    if kind == "deposit":
        account, amount = rng.choice(_ACCOUNTS), _money(rng)
        return (
            f"deposit ${amount:g} into {account}",
            Call("deposit", {"account": account, "amount": amount}),
        )
    rich = [a for a in _ACCOUNTS if accounts[a] >= 30]
    if kind == "transfer" and rich:
        source = rng.choice(rich)
        target = rng.choice([a for a in _ACCOUNTS if a != source])
        amount = _money(rng)
        if amount > accounts[source]:
            return None
        return (
            f"move ${amount:g} from {source} to {target}",
            Call("transfer", {"from_account": source, "to_account": target, "amount": amount}),
        )
    if kind == "pay" and rich:
        account = rng.choice(rich)
        amount = _money(rng)
        if amount > accounts[account]:
            return None
        payee = rng.choice(_PAYEES)
        return (
            f"pay {payee} ${amount:g} from {account}",
            Call("pay_bill", {"account": account, "payee": payee, "amount": amount}),
        )
    if kind == "pay_after_transfer":
        # A bill checking can pay only once money from savings has landed: order matters.
        need = float(40 + rng.randrange(0, 60, 5))
        bill = round(accounts["checking"] + need, 2)
        if accounts["savings"] < need + 100:
            return None
        payee = rng.choice(_PAYEES)
        return [
            (
                f"move ${need:g} from savings to checking",
                Call(
                    "transfer",
                    {"from_account": "savings", "to_account": "checking", "amount": need},
                ),
            ),
            (
                f"pay {payee} ${bill:g} from checking",
                Call("pay_bill", {"account": "checking", "payee": payee, "amount": bill}),
            ),
        ]
    return None


_EVENTS = ("Standup", "Dentist", "Yoga", "Lunch with Sam", "Quarterly review", "Piano lesson")
_DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_DAY_NAMES = dict(
    zip(
        _DAYS,
        ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"),
        strict=True,
    )
)
_STARTS = ("08:00", "09:30", "12:00", "14:15", "17:45", "19:00")


def _calendar_state(rng: random.Random) -> dict[str, Any]:
    titles = rng.sample(_EVENTS, rng.randint(1, 3))
    return {
        "events": [
            {
                "title": t,
                "day": rng.choice(_DAYS),
                "start": rng.choice(_STARTS),
                "duration_min": rng.choice([30, 45, 60]),
            }
            for t in titles
        ]
    }


def _calendar_op(rng: random.Random, env: Environment) -> _Op | None:
    titles = [e["title"] for e in env.state()["events"]]
    kind = rng.choice(["create", "create", "move", "cancel"])
    day, start = rng.choice(_DAYS), rng.choice(_STARTS)
    if kind == "create":
        title = rng.choice([t for t in _EVENTS if t not in titles])
        minutes = rng.choice([30, 45, 90])
        return (
            f'create "{title}" on {_DAY_NAMES[day]} at {start} for {minutes} minutes',
            Call(
                "create_event",
                {"title": title, "day": day, "start": start, "duration_min": minutes},
            ),
        )
    if kind == "move" and titles:
        title = rng.choice(titles)
        return (
            f'move "{title}" to {_DAY_NAMES[day]} at {start}',
            Call("move_event", {"title": title, "day": day, "start": start}),
        )
    if kind == "cancel" and titles:
        title = rng.choice(titles)
        return f'cancel "{title}"', Call("cancel_event", {"title": title})
    return None


_SKUS = ("MUG-101", "TEE-204", "CAP-310", "BAG-422", "PEN-517")
_CUSTOMERS = ("Nadia Haddad", "Otto Lind", "Grace Mensah", "Ravi Iyer")


def _inventory_state(rng: random.Random) -> dict[str, Any]:
    skus = rng.sample(_SKUS, 3)
    return {"stock": {s: rng.randrange(4, 60) for s in skus}, "orders": []}


def _inventory_op(rng: random.Random, env: Environment) -> _Op | None:
    stock = env.state()["stock"]
    kind = rng.choice(["add", "remove", "order", "order"])
    sku = rng.choice(sorted(stock))
    if kind == "add":
        sku = rng.choice(_SKUS)
        n = rng.randrange(5, 50)
        return f"receive {n} units of {sku}", Call("add_stock", {"sku": sku, "quantity": n})
    if stock[sku] < 2:
        return None
    n = rng.randrange(1, min(stock[sku], 12))
    if kind == "remove":
        return (
            f"write off {n} damaged units of {sku}",
            Call("remove_stock", {"sku": sku, "quantity": n}),
        )
    customer = rng.choice(_CUSTOMERS)
    return (
        f"sell {n} units of {sku} to {customer}",
        Call("create_order", {"sku": sku, "quantity": n, "customer": customer}),
    )


_PATHS = (
    "/notes/todo.txt",
    "/notes/ideas.txt",
    "/work/report.md",
    "/work/draft.md",
    "/home/budget.csv",
    "/home/shopping.txt",
)
_LINES = (
    "call the bank",
    "new logo colours",
    "Q3 numbers are in",
    "eggs and flour",
    "rent 950",
    "ship it on Friday",
)


def _files_state(rng: random.Random) -> dict[str, Any]:
    paths = rng.sample(_PATHS, 3)
    return {"files": {p: rng.choice(_LINES) for p in paths}}


def _files_op(rng: random.Random, env: Environment) -> _Op | None:
    files = env.state()["files"]
    present = sorted(files)
    kind = rng.choice(["write", "append", "move", "delete"])
    if kind == "write":
        path = rng.choice([p for p in _PATHS if p not in files] or present)
        line = rng.choice(_LINES)
        return (f'write "{line}" to {path}', Call("write_file", {"path": path, "content": line}))
    if not present:
        return None
    path = rng.choice(present)
    if kind == "append":
        line = rng.choice(_LINES)
        return (
            f'append the line "{line}" to {path}',
            Call("append_file", {"path": path, "content": line}),
        )
    if kind == "move":
        free = [p for p in ("/archive/a.txt", "/archive/b.md", "/old/c.txt") if p not in files]
        target = rng.choice(free)
        return f"move {path} to {target}", Call(
            "move_file", {"source": path, "destination": target}
        )
    return f"delete {path}", Call("delete_file", {"path": path})


_DRAWERS: dict[str, tuple[Callable[[random.Random], dict[str, Any]], _Drawer]] = {
    "todo": (_todo_state, _todo_op),
    "ledger": (_ledger_state, _ledger_op),
    "calendar": (_calendar_state, _calendar_op),
    "inventory": (_inventory_state, _inventory_op),
    "files": (_files_state, _files_op),
}

_INTROS = ("Please {0}.", "Could you {0}?", "I need you to {0}.")
_FOLLOW_UPS = ("One more thing: {0}.", "Also, {0}.", "And then {0}, please.")


def draw_scenario(rng: random.Random, env_name: str) -> Scenario:
    """One scenario on ``env_name`` (``todo``, ``ledger``, ``calendar``, ``inventory``, ``files``)."""
    state_of, op_of = _DRAWERS[env_name]
    initial = state_of(rng)
    env = ENVIRONMENTS[env_name](initial)
    steps: list[str] = []
    calls: list[Call] = []
    wanted = rng.randint(2, 4)
    for _ in range(40):
        if len(calls) >= wanted:
            break
        drawn = op_of(rng, env)
        if drawn is None:
            continue
        ops = drawn if isinstance(drawn, list) else [drawn]
        trial = ENVIRONMENTS[env_name](env.state())
        if not all(trial.call(call.name, call.arguments).ok for _, call in ops):
            continue
        env = trial
        steps.extend(text for text, _ in ops)
        calls.extend(call for _, call in ops)
    turns = _phrase(rng, steps)
    return Scenario(env_name, initial, turns, tuple(calls), env.state())


def _phrase(rng: random.Random, steps: list[str]) -> tuple[str, ...]:
    if len(steps) >= 3 and rng.random() < 0.4:
        head = ", then ".join(steps[:-1])
        return (rng.choice(_INTROS).format(head), rng.choice(_FOLLOW_UPS).format(steps[-1]))
    body = ", then ".join(steps[:-1]) + (", and finally " if len(steps) > 1 else "") + steps[-1]
    return (rng.choice(_INTROS).format(body),)
