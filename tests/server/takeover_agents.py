"""Agents for tests/server/test_takeover.py and bench/chaos.py, imported by every
``closedloop serve`` worker (``--agents takeover_agents:register``).

The world is a file: ``place_order`` appends one line per order to ``params["world"]``,
so counting the lines counts the effects however many processes applied them. With
``params["hold"]`` (a directory), the call writes ``<hold>/started`` (its worker's pid)
after the effect and then waits until ``<hold>/release`` exists: a test kills the worker
there, after the effect and before the ledger commit, deterministically.

``held-orderer`` reconciles by reading the world file; ``blind-orderer`` has no
reconciler, so a takeover finds an effect that only a person can settle.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from closedloop.agent import (
    Agent,
    RequiredField,
    RunLimits,
    Task,
    as_tool,
    stop_on_no_progress,
    stop_on_repeats,
)
from closedloop.execution import AtomicAction, EffectClass, Reconciliation
from closedloop.models import CallInfo, FunctionModel, Message
from closedloop.server import AgentContext, AgentRegistry

HOLD_LIMIT_S = 120.0


def orders_in(world: Path, customer: str) -> list[dict[str, Any]]:
    """The orders of ``customer`` in the world file."""
    if not world.exists():
        return []
    lines = world.read_text().splitlines()
    found = [json.loads(line) for line in lines if line.strip()]
    return [order for order in found if order["customer"] == customer]


def orderer(ctx: AgentContext, *, reconciles: bool) -> Agent:
    world = Path(str(ctx.params["world"]))
    hold = ctx.params.get("hold")
    customer = str(ctx.params["customer"])

    async def place_order(customer: str) -> dict[str, Any]:
        """Place one order for ``customer`` (irreversible)."""
        order = {"customer": customer, "order_id": f"ORD-{customer}", "pid": os.getpid()}
        with world.open("a") as out:
            out.write(json.dumps(order) + "\n")
        if hold:
            directory = Path(str(hold))
            (directory / "started").write_text(str(os.getpid()))
            deadline = time.monotonic() + HOLD_LIMIT_S
            while not (directory / "release").exists() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)  # the worker is killed here by the test
        return order

    async def reconcile(args: Mapping[str, Any], _record: Any) -> Reconciliation:
        orders = orders_in(world, str(args["customer"]))
        return Reconciliation.was_applied(orders[0]) if orders else Reconciliation.not_applied()

    def reply(messages: tuple[Message, ...], info: CallInfo) -> dict[str, Any]:
        text = "\n".join(m.content for m in messages[1:])
        found = re.search(r"(ORD-[A-Za-z0-9\-]+)", text)
        if found:
            return {"final": f"ordered as {found.group(1)}"}
        return {"tool": "place_order", "arguments": {"customer": customer}}

    action = AtomicAction(
        name="place_order",
        fn=place_order,
        effect=EffectClass.IRREVERSIBLE,
        reconciler=reconcile if reconciles else None,
    )
    return Agent(
        FunctionModel(reply, name="orderer"),
        [as_tool(action, fills={"order_id": "order_id"})],
        store=ctx.store,
        stop=stop_on_no_progress(3) | stop_on_repeats(1),
        limits=RunLimits(max_steps=4),
    )


def order_task(text: str, ctx: AgentContext) -> Task:
    return Task(text, required_fields=[RequiredField(name="order_id", source="place_order")])


def register(registry: AgentRegistry) -> None:
    registry.register(
        "held-orderer", lambda ctx: orderer(ctx, reconciles=True), task=order_task, replace=True
    )
    registry.register(
        "blind-orderer", lambda ctx: orderer(ctx, reconciles=False), task=order_task, replace=True
    )
