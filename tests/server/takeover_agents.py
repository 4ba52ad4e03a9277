"""Agents for tests/server/test_takeover.py and bench/chaos.py, imported by every
``closedloop serve`` worker (``--agents takeover_agents:register``).

The world is a file: ``place_order`` appends one line per order to ``params["world"]``,
so counting the lines counts the effects however many processes applied them. With
``params["hold"]`` (a directory), the call writes ``<hold>/started`` (its worker's pid)
after the effect and then waits until ``<hold>/release`` exists: a test kills the worker
there, after the effect and before the ledger commit, deterministically. ``params["hold_at"]``
moves that point: ``before_claim`` (the first model call, before any effect is claimed),
``before_effect`` (inside the tool: claimed in the ledger, not yet applied),
``after_effect`` (the default) or ``after_commit`` (the model call after the committed
effect).

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

from closedloop import Runtime
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

    hold_at = str(ctx.params.get("hold_at") or "after_effect")

    def held(at: str) -> Path | None:
        """The hold directory when this point holds and has not held yet."""
        if not hold or at != hold_at or (Path(str(hold)) / "started").exists():
            return None
        directory = Path(str(hold))
        (directory / "started").write_text(str(os.getpid()))
        return directory

    async def wait(directory: Path | None) -> None:
        deadline = time.monotonic() + HOLD_LIMIT_S
        while directory and not (directory / "release").exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)  # the worker is killed here by the test

    async def place_order(customer: str) -> dict[str, Any]:
        """Place one order for ``customer`` (irreversible)."""
        await wait(held("before_effect"))
        order = {"customer": customer, "order_id": f"ORD-{customer}", "pid": os.getpid()}
        with world.open("a") as out:
            out.write(json.dumps(order) + "\n")
        await wait(held("after_effect"))
        return order

    async def reconcile(args: Mapping[str, Any], _record: Any) -> Reconciliation:
        orders = orders_in(world, str(args["customer"]))
        return Reconciliation.was_applied(orders[0]) if orders else Reconciliation.not_applied()

    async def reply(messages: tuple[Message, ...], info: CallInfo) -> dict[str, Any]:
        text = "\n".join(m.content for m in messages[1:])
        found = re.search(r"(ORD-[A-Za-z0-9\-]+)", text)
        await wait(held("after_commit" if found else "before_claim"))
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
        limits=RunLimits(max_steps=4, stop=stop_on_no_progress(3) | stop_on_repeats(1)),
        runtime=Runtime(store=ctx.store),
    )


def order_task(text: str, ctx: AgentContext) -> Task:
    if ctx.params.get("hold_at") == "after_commit":
        return Task(text)  # the model is asked again after the order, and holds there
    return Task(text, required_fields=[RequiredField(name="order_id", source="place_order")])


def register(registry: AgentRegistry) -> None:
    registry.register(
        "held-orderer", lambda ctx: orderer(ctx, reconciles=True), task=order_task, replace=True
    )
    registry.register(
        "blind-orderer", lambda ctx: orderer(ctx, reconciles=False), task=order_task, replace=True
    )
