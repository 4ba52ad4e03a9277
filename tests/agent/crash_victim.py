"""A worker process for tests/agent/test_crash_resume.py: runs (or recovers) one task that
places an order in a real world server, and kills itself with SIGKILL at a chosen point.

Usage: python crash_victim.py STORE_URL WORLD_URL TRACE MODE CRASH TASK_ID CUSTOMER SKU
MODE is ``run`` or ``recover``; CRASH is ``none``, ``before_claim`` (the ledger claim is
about to be written), ``after_claim`` (claimed, the world not called), ``after_effect``
(the world applied the order, the ledger not committed) or ``after_commit`` (the ledger
committed, the task state not saved). The result is printed as one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from collections.abc import Mapping
from typing import Any

import httpx

from closedloop import Runtime
from closedloop.agent import Agent, RequiredField, RunLimits, Task, as_tool
from closedloop.execution import AtomicAction, EffectClass, Reconciliation
from closedloop.models import CallInfo, FunctionModel, Message
from closedloop.server import open_store

LEDGER = "ledger"


def die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


class KillingStore:
    """The real store; the process dies at the chosen write (no production hook needed)."""

    def __init__(self, inner: Any, crash: str) -> None:
        self.inner = inner
        self.crash = crash
        self.committed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def record_put(
        self, namespace: str, key: str, value: Mapping[str, Any], **kwargs: Any
    ) -> Any:
        claim = namespace == LEDGER and kwargs.get("expected_version") == 0
        if self.crash == "before_claim" and claim:
            die()
        record = await self.inner.record_put(namespace, key, value, **kwargs)
        if namespace == LEDGER and value.get("status") == "committed":
            self.committed = True
        return record

    async def put(self, *args: Any, **kwargs: Any) -> Any:
        if self.crash == "after_commit" and self.committed:
            die()
        return await self.inner.put(*args, **kwargs)


def order_action(store: Any, world: str, crash: str) -> AtomicAction:
    async def ledger_key(args: Mapping[str, Any]) -> str:
        # The executor claimed task/step/action/digest just before calling us: the
        # world sees that key, so a reconciliation or a replay after a crash uses it too.
        for record in await store.record_list(LEDGER):
            value = record.value
            if value.get("status") == "pending" and dict(value.get("args", {})) == dict(args):
                return record.key
        raise AssertionError("no pending claim for this call")

    async def place_order(customer: str, sku: str, quantity: int) -> dict[str, Any]:
        """Place an order (irreversible: stock is taken)."""
        args = {"customer": customer, "sku": sku, "quantity": quantity}
        key = await ledger_key(args)
        if crash == "after_claim":
            die()
        async with httpx.AsyncClient(base_url=world) as client:
            response = await client.post(
                "/orders",
                json={"customer": customer, "items": [{"sku": sku, "quantity": quantity}]},
                headers={"Idempotency-Key": key},
            )
        response.raise_for_status()
        if crash == "after_effect":
            die()
        order: dict[str, Any] = response.json()
        return order

    async def reconcile(args: Mapping[str, Any], _record: Any) -> Reconciliation:
        async with httpx.AsyncClient(base_url=world) as client:
            response = await client.get("/orders", params={"customer": args["customer"]})
        response.raise_for_status()
        orders = response.json()["orders"]
        if not orders:
            return Reconciliation.not_applied()
        return Reconciliation.was_applied(orders[0])

    return AtomicAction(
        name="place_order",
        fn=place_order,
        effect=EffectClass.IRREVERSIBLE,
        reconciler=reconcile,
    )


def model(customer: str, sku: str) -> FunctionModel:
    def reply(messages: tuple[Message, ...], info: CallInfo) -> dict[str, Any]:
        text = "\n".join(m.content for m in messages[1:])
        found = re.search(r"(ORD-[A-Za-z0-9\-]+)", text)
        if found:
            return {"final": f"ordered as {found.group(1)}", "fields": {}}
        return {
            "tool": "place_order",
            "arguments": {"customer": customer, "sku": sku, "quantity": 1},
        }

    return FunctionModel(reply, name="orderer")


async def main(argv: list[str]) -> None:
    store_url, world, trace, mode, crash, task_id, customer, sku = argv
    inner = open_store(store_url)
    store = KillingStore(inner, crash)
    tool = as_tool(order_action(inner, world, crash), fills={"order_id": "order_id"})
    agent = Agent(
        model(customer, sku),
        [tool],
        limits=RunLimits(max_steps=6),
        runtime=Runtime(store=store, trace=trace),
    )
    task = Task(
        "place one order",
        task_id=task_id,
        required_fields=[RequiredField(name="order_id", source="place_order")],
    )
    try:
        if mode == "run":
            result = await agent.run(task)
        else:
            result = await agent.resume(task_id=task_id, task=task)
    finally:
        await inner.close()
    print(json.dumps({"pid": os.getpid(), "result": result.model_dump(mode="json")}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
