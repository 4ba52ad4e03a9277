"""Server-sent events: each step's control signals, live, per run.

While a run executes in this process its steps are published to a :class:`RunChannel`
and subscribers are woken at once. Otherwise (the run froze for a human, finished, or
runs in another worker) a subscriber follows the run's JSONL trace and its status in
the store, polling. Both paths number events by step index, so a client switching
between them, or reconnecting with ``Last-Event-ID``, sees every step once.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from .._redaction import redact
from ..agent import StepRecord

__all__ = ["RunChannel", "RunHub", "TraceTail", "sse_event", "step_event", "stream_run"]

TERMINAL = frozenset({"done", "error", "cancelled"})
WAITING = frozenset({"handover"})
"""Statuses of a run stopped until a person decides: its stream ends with ``waiting``."""
_STATUS_KEYS = ("status", "halt_reason", "success", "handover_id", "steps")


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def step_event(record: StepRecord) -> dict[str, Any]:
    """The control signals of one step, as the dashboard plots them (redacted)."""
    event = {
        "step": record.step,
        "t_s": record.t_s,
        "step_type": record.step_type,
        "phase": record.phase,
        "tool": None if record.action is None else record.action.tool,
        "e": record.error,
        "u": _finite(record.control),
        "f_est": record.f_est,
        "quality": record.quality,
        "protocol": record.protocol,
        "actuators": dict(record.actuators),
        "pid": list(record.pid_components),
        "halt": None if record.halt is None else record.halt.value,
    }
    redacted: dict[str, Any] = redact(event)
    return redacted


def sse_event(event: str, data: Mapping[str, Any], event_id: int | None = None) -> str:
    """One SSE message (data is one line of JSON, so no field needs escaping)."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    body = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return f"{head}event: {event}\ndata: {body}\n\n"


class RunChannel:
    """The steps of a run executing in this process, and a way to wait for the next one."""

    def __init__(self, records: list[dict[str, Any]] | None = None) -> None:
        self.records: list[dict[str, Any]] = list(records or [])
        self._changed = asyncio.Event()

    def publish(self, event: dict[str, Any]) -> None:
        """Add a step event and wake every subscriber."""
        self.records.append(event)
        self.wake()

    def wake(self) -> None:
        """Wake subscribers (each waits on the event it saw; a fresh one replaces it)."""
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    @property
    def changed(self) -> asyncio.Event:
        """Set at the next publish or close."""
        return self._changed


class RunHub:
    """The channels of the runs executing in this process, by run key."""

    def __init__(self) -> None:
        self._channels: dict[str, RunChannel] = {}

    def __len__(self) -> int:
        return len(self._channels)

    def open(self, key: str, records: list[dict[str, Any]] | None = None) -> RunChannel:
        """The channel of ``key``, created (seeded with ``records``) if absent."""
        channel = self._channels.get(key)
        if channel is None:
            channel = self._channels[key] = RunChannel(records)
        return channel

    def get(self, key: str) -> RunChannel | None:
        """The live channel of ``key``, if the run executes here."""
        return self._channels.get(key)

    def close(self, key: str) -> None:
        """Forget the channel (the run stopped executing here); wake its subscribers."""
        channel = self._channels.pop(key, None)
        if channel is not None:
            channel.wake()


class TraceTail:
    """Step events from a JSONL trace file, read incrementally (complete lines only)."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = None if path is None else Path(path)
        self._offset = 0
        self.events: list[dict[str, Any]] = []

    def _read(self) -> None:
        if self.path is None:
            return
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except OSError:
            return
        end = chunk.rfind(b"\n")
        if end < 0:
            return
        self._offset += end + 1
        for line in chunk[: end + 1].splitlines():
            if not line.strip():
                continue
            try:
                record = StepRecord.model_validate_json(line)
            except ValueError:
                continue  # a line of another shape is not a step; the trace stays usable
            self.events.append(step_event(record))

    async def poll(self) -> list[dict[str, Any]]:
        """Every step event read so far (reading what was appended since the last poll)."""
        await asyncio.to_thread(self._read)
        return self.events


async def stream_run(
    hub: RunHub,
    key: str,
    load_status: Callable[[], Awaitable[dict[str, Any] | None]],
    trace_path: str | None,
    *,
    poll_s: float,
    keepalive_s: float,
    start_after: int = -1,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> AsyncIterator[str]:
    """SSE messages for one run: ``step`` per step, ``status`` on each change, then
    ``end`` when the run has ended, or ``waiting`` when it stopped for a person's decision
    on its handover (subscribe again, with ``Last-Event-ID``, once it is decided)."""
    tail = TraceTail(trace_path)
    sent = start_after + 1
    last: dict[str, Any] | None = None
    yield f"retry: {int(poll_s * 4000)}\n\n"
    idle = 0.0
    while True:
        channel = hub.get(key)
        waiter = channel.changed if channel is not None else None
        status = await load_status()
        if channel is not None:
            records = channel.records
        else:
            records = await tail.poll()
        for index in range(sent, len(records)):
            yield sse_event("step", records[index], event_id=index)
        sent = max(sent, len(records))
        if status is None:
            yield sse_event("end", {"status": "deleted"})
            return
        summary = {k: status.get(k) for k in _STATUS_KEYS}
        if summary != last:
            last = summary
            yield sse_event("status", summary)
        stopped = status.get("status")
        if (stopped in TERMINAL or stopped in WAITING) and hub.get(key) is None:
            if channel is not None:
                continue  # the channel closed under us: read the finished trace once more
            if stopped in WAITING:
                # Nothing happens until a person decides: say so and close, rather than
                # hold the connection open; the client subscribes again after the decision.
                yield sse_event("waiting", {**summary, "waiting_for": "handover_decision"})
                return
            yield sse_event("end", summary)
            return
        if waiter is not None:
            try:
                await asyncio.wait_for(waiter.wait(), timeout=keepalive_s)
                continue
            except TimeoutError:
                yield ": keep-alive\n\n"
                continue
        await sleep(poll_s)
        idle += poll_s
        if idle >= keepalive_s:
            idle = 0.0
            yield ": keep-alive\n\n"
