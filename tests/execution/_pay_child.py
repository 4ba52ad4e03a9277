"""Child process for the exactly-once test: pays once through the ledger on a SQLite file.

Usage: python _pay_child.py DB_PATH BASE_URL TASK_ID HALT_AT

``HALT_AT`` names an execution event (``started``, ``claimed``, ``called``, ``committed``)
or ``none``. At that event the child prints ``HALTED <event>`` and blocks on stdin, so the
parent can SIGKILL it at exactly that point; the fault injection lives in this test
script, not in the library. ``pay_action`` is imported by the parent as well, so both
sides use the same action name and key rules.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import Mapping
from typing import Any

import httpx

from closedloop.execution import (
    AtomicAction,
    EffectClass,
    EffectLedger,
    EffectRecord,
    ExecutionEvent,
    Executor,
    Reconciliation,
)
from closedloop.feedback import SQLiteStore

TASK_STEP = 3
ARGS = {"order": "o-42", "amount_cents": 1250}
# The payer's identity survives its restarts: a restarted payer resolves its own claims at
# once instead of waiting for the lease of the process that was killed.
OWNER = "payer"


def pay_action(base_url: str, *, with_reconciler: bool = False) -> AtomicAction:
    """The irreversible payment, optionally with a reconciler that asks the endpoint."""

    async def pay(**args: Any) -> dict[str, Any]:
        async with httpx.AsyncClient(base_url=base_url) as client:
            response = await client.post("/pay", json=args)
            response.raise_for_status()
            return dict(response.json())

    async def reconcile(args: Mapping[str, Any], record: EffectRecord) -> Reconciliation:
        async with httpx.AsyncClient(base_url=base_url) as client:
            response = await client.get("/count", params={"order": args["order"]})
            response.raise_for_status()
            body = response.json()
        if body["count"] > 0:
            return Reconciliation.was_applied(body["last"])
        return Reconciliation.not_applied()

    return AtomicAction(
        name="pay",
        fn=pay,
        effect=EffectClass.IRREVERSIBLE,
        timeout_s=30.0,
        reconciler=reconcile if with_reconciler else None,
    )


async def main(db_path: str, base_url: str, task_id: str, halt_at: str) -> None:
    def halt(event: ExecutionEvent) -> None:
        if event.name == halt_at:
            print(f"HALTED {event.name}", flush=True)
            sys.stdin.readline()  # the parent never writes: wait here for SIGKILL

    store = SQLiteStore(db_path)  # synchronous=FULL: a returned commit is on disk
    try:
        executor = Executor(EffectLedger(store, owner=OWNER), on_event=halt)
        # A fresh request id on every run: volatile, so it must not change the key.
        args = {**ARGS, "request_id": uuid.uuid4().hex}
        outcome = await executor.execute(
            pay_action(base_url), args, task_id=task_id, step=TASK_STEP
        )
        print("DONE " + json.dumps(outcome.summary()), flush=True)
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
