"""Agents for tests/server/test_workers.py, imported by every ``closedloop serve`` worker
(``--agents worker_agents:register`` with this folder on PYTHONPATH).

``orderer`` places one order in the world through an irreversible action. It sends the
world no idempotency key on purpose: only the service's effect ledger (shared by the
workers through the store) stands between two runs and a second order. ``fragile-orderer``
has a reconciler, and with ``params["die_once"]`` (a file path) its worker kills itself
with SIGKILL right after the world applied the order, before the ledger commit.
"""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

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


def orderer(ctx: AgentContext, *, fragile: bool = False) -> Agent:
    world = ctx.world_url
    assert world is not None, "serve the workers with --world"
    die_once = ctx.params.get("die_once") if fragile else None

    async def place_order(customer: str, sku: str) -> dict[str, Any]:
        """Place an order for one unit of ``sku`` (irreversible: stock is taken)."""
        async with httpx.AsyncClient(base_url=world) as client:
            reply = await client.post(
                "/orders", json={"customer": customer, "items": [{"sku": sku, "quantity": 1}]}
            )
        reply.raise_for_status()
        if die_once and not Path(die_once).exists():
            Path(die_once).write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)  # after the effect, before the ledger commit
        order: dict[str, Any] = reply.json()
        return order

    async def reconcile(args: Mapping[str, Any], _record: Any) -> Reconciliation:
        async with httpx.AsyncClient(base_url=world) as client:
            reply = await client.get("/orders", params={"customer": args["customer"]})
        reply.raise_for_status()
        orders = reply.json()["orders"]
        return Reconciliation.was_applied(orders[0]) if orders else Reconciliation.not_applied()

    customer, sku = str(ctx.params["customer"]), str(ctx.params["sku"])

    def reply(messages: tuple[Message, ...], info: CallInfo) -> dict[str, Any]:
        text = "\n".join(m.content for m in messages[1:])
        found = re.search(r"(ORD-[A-Za-z0-9\-]+)", text)
        if found:
            return {"final": f"ordered as {found.group(1)}"}
        return {"tool": "place_order", "arguments": {"customer": customer, "sku": sku}}

    action = AtomicAction(
        name="place_order",
        fn=place_order,
        effect=EffectClass.IRREVERSIBLE,
        reconciler=reconcile if fragile else None,
    )
    return Agent(
        FunctionModel(reply, name="orderer"),
        [as_tool(action, fills={"order_id": "order_id"})],
        limits=RunLimits(max_steps=4, stop=stop_on_no_progress(3) | stop_on_repeats(1)),
        runtime=Runtime(store=ctx.store),
    )


def order_task(text: str, ctx: AgentContext) -> Task:
    return Task(text, required_fields=[RequiredField(name="order_id", source="place_order")])


def register(registry: AgentRegistry) -> None:
    registry.register("orderer", orderer, task=order_task, replace=True)
    registry.register(
        "fragile-orderer", lambda ctx: orderer(ctx, fragile=True), task=order_task, replace=True
    )
