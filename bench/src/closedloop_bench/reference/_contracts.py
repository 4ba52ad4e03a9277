"""The effects' contracts: preconditions, postconditions, compensations and reconcilers.

Preconditions read the world before an irreversible step, so a model that asks to pay an
order twice on two different steps (two different ledger keys) is stopped all the same;
they fail closed, so when the world cannot be asked the effect waits for the next step.
Reconcilers answer "did a pending effect reach the world?" from ``GET /orders``,
``/bookings/{id}``, ``/payments/{id}`` and the room slots; compensations undo a committed
effect and treat "already cancelled/refunded" as done, so a saga may run them twice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from closedloop._exceptions import ReconciliationRequiredError, ToolError
from closedloop.execution import AtomicAction, EffectClass, EffectRecord, Reconciliation
from closedloop.perception import Observation

from ._effects import ROOM_DEFAULTS, EffectClient, field_of, parse_slot, segment

__all__ = ["EffectTools"]

_UNCERTAIN = (ReconciliationRequiredError,)


class EffectTools(EffectClient):
    """Effect tools with their contracts (mixed into ``WorldTools``)."""

    # --- preconditions: the world says whether the effect already happened ---------------

    async def _not_booked_yet(self, args: Mapping[str, Any], _state: Mapping[str, Any]) -> Any:
        found = await self._flight_order(str(args["flight_id"]), str(args["passenger"]))
        if found is not None:
            return (
                f"{args['passenger']} already holds a booking on {args['flight_id']} "
                f"(order {found['order_id']}, {found['status']}); do not book it again"
            )
        return True

    async def _not_paid_yet(self, args: Mapping[str, Any], _state: Mapping[str, Any]) -> Any:
        order_id = await self._order_id(str(args["order_id"]))
        order = await self._get("get_order", {"order_id": order_id})
        if order.get("status") == "cancelled":
            return f"order {order_id} is cancelled"
        if int(order.get("paid_cny") or 0) >= int(order.get("total_cny") or 0) > 0:
            return f"order {order_id} is already paid ({order['paid_cny']} CNY); do not pay again"
        return True

    async def _flight_order(self, flight_id: str, passenger: str) -> dict[str, Any] | None:
        listed = await self._get("list_orders", {"customer": passenger.strip()})
        for order in listed.get("orders", []):
            lines = order.get("lines") or []
            if (
                order.get("kind") == "flight"
                and order.get("status") != "cancelled"
                and lines
                and lines[0].get("sku") == flight_id
            ):
                return dict(order)
        return None

    # --- reconcilers: did a pending effect reach the world? -------------------------------

    async def _reconcile_booking(
        self, args: Mapping[str, Any], _record: EffectRecord
    ) -> Reconciliation:
        order = await self._flight_order(str(args["flight_id"]), str(args["passenger"]))
        if order is None:
            return Reconciliation.not_applied()
        value = {
            "order_id": order["order_id"],
            "flight_id": args["flight_id"],
            "passenger": args["passenger"],
            "status": "confirmed" if order.get("status") == "paid" else "held",
            "amount_due_cny": order.get("total_cny"),
        }
        return self._applied("book_flight", args, value)

    async def _reconcile_payment(
        self, args: Mapping[str, Any], _record: EffectRecord
    ) -> Reconciliation:
        order_id = await self._order_id(str(args["order_id"]))
        order = await self._get("get_order", {"order_id": order_id})
        if int(order.get("paid_cny") or 0) < int(order.get("total_cny") or 0):
            return Reconciliation.not_applied()
        value = {"order_id": order_id, "amount_cny": order.get("paid_cny"), "status": "succeeded"}
        return self._applied("pay", args, value)

    async def _reconcile_status(
        self, name: str, read: str, arg: str, done: str, args: Mapping[str, Any]
    ) -> Reconciliation:
        value = await self._get(read, {arg: args[arg]})
        status = value.get("status") or (value.get("booking") or {}).get("status")
        if status != done:
            return Reconciliation.not_applied()
        return self._applied(name, args, value)

    async def _reconcile_room(
        self, args: Mapping[str, Any], _record: EffectRecord
    ) -> Reconciliation:
        start, end = parse_slot(str(args["slot"]))
        slots = await self._get(
            "get_room_slots", {"room_id": args["room_id"], "date": args["date"]}
        )
        free = {s.get("start") for s in slots.get("free_slots", [])}
        wanted = {f"{h:02d}:00" for h in range(int(start[:2]), int(end[:2]))}
        if wanted <= free:
            return Reconciliation.not_applied()
        # The hours are taken. Re-sending under the same key replays our booking if it was
        # ours; if someone else took them the world answers slot_taken and nothing changes.
        try:
            replayed = await self.book_room(**{**ROOM_DEFAULTS, **dict(args)})
        except ToolError:
            return Reconciliation.not_applied()
        return Reconciliation.was_applied(replayed)

    async def _reconcile_room_cancel(
        self, args: Mapping[str, Any], _record: EffectRecord
    ) -> Reconciliation:
        # No GET for room bookings: a cancel repeats harmlessly (replay or already_cancelled).
        key = await self.idempotency_key("cancel_room_booking", args, {})
        path = f"/room-bookings/{segment(str(args['booking_id']))}/cancel"
        return Reconciliation.was_applied(await self._compensate("cancel_room_booking", path, key))

    async def _reconcile_order(
        self, args: Mapping[str, Any], _record: EffectRecord
    ) -> Reconciliation:
        customer = str(args["customer"]).strip()
        listed = await self._get("list_orders", {"customer": customer})
        wanted = sorted((str(i["sku"]), int(i["quantity"])) for i in args["items"])
        for order in listed.get("orders", []):
            lines = sorted((ln["sku"], ln["quantity"]) for ln in order.get("lines", []))
            if (
                order.get("kind") == "goods"
                and order.get("status") == "created"
                and lines == wanted
            ):
                return self._applied("create_order", args, dict(order))
        return Reconciliation.not_applied()

    def _applied(self, name: str, args: Mapping[str, Any], value: Any) -> Reconciliation:
        """The effect happened: record what the world showed, in the journal too (the
        lost answer's error is the journal's last word on this call otherwise)."""
        observation = Observation.ok(
            value,
            source=name,
            timestamp=self._clock(),
            meaning=f"{name}: the answer was lost, but the world shows the effect happened",
        )
        self._note(name, args, observation)
        return Reconciliation.was_applied(observation)

    # --- compensations: undo a committed effect -----------------------------------------

    async def _undo_booking(self, args: Mapping[str, Any], result: Any) -> None:
        booking_id, order_id = field_of(result, "booking_id"), field_of(result, "order_id")
        key = f"{self.session}/undo/book_flight/{booking_id or order_id}"
        if booking_id:
            await self._compensate("cancel_booking", f"/bookings/{segment(booking_id)}/cancel", key)
        elif order_id:
            await self._compensate("cancel_order", f"/orders/{segment(order_id)}/cancel", key)
        else:
            raise ToolError(f"book_flight {dict(args)}: the result names no booking to cancel")

    async def _undo_payment(self, args: Mapping[str, Any], result: Any) -> None:
        payment_id = field_of(result, "payment_id")
        if payment_id:
            path = f"/payments/{segment(payment_id)}/refund"
            await self._compensate("refund_payment", path, f"{self.session}/undo/{payment_id}")
            return
        order_id = field_of(result, "order_id") or await self._order_id(str(args["order_id"]))
        path = f"/orders/{segment(order_id)}/cancel"
        await self._compensate("cancel_order", path, f"{self.session}/undo/pay/{order_id}")

    async def _undo_room(self, args: Mapping[str, Any], result: Any) -> None:
        booking_id = field_of(result, "booking_id")
        if not booking_id:
            raise ToolError(f"book_room {dict(args)}: the result names no booking to cancel")
        path = f"/room-bookings/{segment(booking_id)}/cancel"
        await self._compensate("cancel_room_booking", path, f"{self.session}/undo/{booking_id}")

    async def _undo_order(self, args: Mapping[str, Any], result: Any) -> None:
        order_id = field_of(result, "order_id")
        if not order_id:
            raise ToolError(f"create_order {dict(args)}: the result names no order to cancel")
        path = f"/orders/{segment(order_id)}/cancel"
        await self._compensate("cancel_order", path, f"{self.session}/undo/{order_id}")

    # --- the contracts --------------------------------------------------------------------

    def build_actions(self) -> dict[str, AtomicAction]:
        """Every effect as an ``AtomicAction`` with its class, checks, undo and reconciler."""

        def status(name: str, read: str, arg: str, done: str) -> Any:
            async def reconcile(args: Mapping[str, Any], _r: EffectRecord) -> Reconciliation:
                return await self._reconcile_status(name, read, arg, done, args)

            return reconcile

        def guard(check: Callable[..., Awaitable[Any]]) -> tuple[Any, ...]:
            return (check,) if self.guard_duplicates else ()

        once, irreversible = EffectClass.ONCE, EffectClass.IRREVERSIBLE
        specs: list[AtomicAction] = [
            AtomicAction(
                name="book_flight",
                fn=self.book_flight,
                effect=once,
                preconditions=guard(self._not_booked_yet),
                postconditions=(_same("flight_id"),),
                compensation=self._undo_booking,
                reconciler=self._reconcile_booking,
                uncertain_errors=_UNCERTAIN,
            ),
            AtomicAction(
                name="pay",
                fn=self.pay,
                effect=irreversible,
                preconditions=guard(self._not_paid_yet),
                postconditions=(_paid,),
                compensation=self._undo_payment,
                reconciler=self._reconcile_payment,
                uncertain_errors=_UNCERTAIN,
            ),
            AtomicAction(
                name="cancel_booking",
                fn=self.cancel_booking,
                effect=once,
                reconciler=status("cancel_booking", "get_booking", "booking_id", "cancelled"),
                uncertain_errors=_UNCERTAIN,
            ),
            AtomicAction(
                name="refund_payment",
                fn=self.refund_payment,
                effect=once,
                reconciler=status("refund_payment", "get_payment", "payment_id", "refunded"),
                uncertain_errors=_UNCERTAIN,
            ),
            AtomicAction(
                name="book_room",
                fn=self.book_room,
                effect=once,
                postconditions=(_same("room_id"), _same("date")),
                compensation=self._undo_room,
                reconciler=self._reconcile_room,
                uncertain_errors=_UNCERTAIN,
            ),
            AtomicAction(
                name="cancel_room_booking",
                fn=self.cancel_room_booking,
                effect=once,
                reconciler=self._reconcile_room_cancel,
                uncertain_errors=_UNCERTAIN,
            ),
            AtomicAction(
                name="create_order",
                fn=self.create_order,
                effect=once,
                compensation=self._undo_order,
                reconciler=self._reconcile_order,
                uncertain_errors=_UNCERTAIN,
            ),
            AtomicAction(
                name="cancel_order",
                fn=self.cancel_order,
                effect=once,
                reconciler=status("cancel_order", "get_order", "order_id", "cancelled"),
                uncertain_errors=_UNCERTAIN,
            ),
        ]
        return {a.name: a for a in specs}


def _same(name: str) -> Callable[[Any, Mapping[str, Any]], bool | str]:
    def check(result: Any, args: Mapping[str, Any]) -> bool | str:
        got = field_of(result, name)
        if got is None or str(got) == str(args.get(name)):
            return True  # a partial answer without the field cannot contradict the request
        return f"the world booked {name}={got!r}, not {args.get(name)!r}"

    check.__name__ = f"same_{name}"
    return check


def _paid(result: Any, args: Mapping[str, Any]) -> bool | str:
    state = field_of(result, "status")
    if state not in (None, "succeeded"):
        return f"the payment is {state!r}, not succeeded"
    amount = field_of(result, "amount_cny")
    if amount is not None and int(amount) != int(args["amount_cny"]):
        return f"{amount} CNY were charged, not {args['amount_cny']}"
    return True
