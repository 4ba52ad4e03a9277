"""``FaultInjectingModel``: wrap any model and inject the disturbances a control loop must reject.

Per call, in this order: latency drawn uniformly from a range (past the call's timeout it
becomes a ``ModelTimeoutError``), a transient error at a rate (``TransientModelError``),
then on the inner model's answer a hallucinated value (one top-level field replaced) and
format drift (JSON wrapped in prose or code fences, a field renamed or dropped, the text
truncated). Every injected fault is logged with the call id, so a benchmark knows the
ground truth. The same seed and the same sequence of calls give the same faults: each call
consumes a fixed number of draws from the seeded generator whatever happens in it.

Those faults are independent per call. Bursts add disturbances with memory: with
``burst_rate`` per call a burst starts and lasts a geometric number of calls with mean
``burst_length``; every call in it is slow (``burst_latency_s`` more), truncated or
malformed (JSON that no longer parses), one kind per burst. Bursts draw from a generator
of their own, so a profile without them meets exactly the faults it met before.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
import math
import random
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .._exceptions import ConfigurationError, ModelTimeoutError, TransientModelError
from .._validation import require_int_at_least
from ._completion import Completion, MessagesInput
from ._json import parse_structured
from ._protocol import Model
from ._request import DEFAULT_REQUEST, ModelRequest
from ._wrapper import WrapperModel

__all__ = [
    "DRIFT_KINDS",
    "FAULT_PROFILES",
    "FaultInjectingModel",
    "FaultKind",
    "FaultProfile",
    "FaultRecord",
]


class FaultKind(enum.StrEnum):
    """What was injected."""

    LATENCY = "latency"
    TIMEOUT = "timeout"
    TRANSIENT_ERROR = "transient_error"
    HALLUCINATION = "hallucination"
    PROSE_WRAP = "prose_wrap"
    CODE_FENCE = "code_fence"
    RENAME_FIELD = "rename_field"
    DROP_FIELD = "drop_field"
    TRUNCATE = "truncate"
    SLOW = "slow"
    MALFORMED = "malformed"


BURST_KINDS: tuple[FaultKind, ...] = (FaultKind.SLOW, FaultKind.TRUNCATE, FaultKind.MALFORMED)
"""What a burst can do to each of its calls."""

DRIFT_KINDS: tuple[FaultKind, ...] = (
    FaultKind.PROSE_WRAP,
    FaultKind.CODE_FENCE,
    FaultKind.RENAME_FIELD,
    FaultKind.DROP_FIELD,
    FaultKind.TRUNCATE,
)
"""The format-drift faults: prose around the JSON, a code fence, a renamed or dropped
field, truncation."""
_STRUCTURAL = frozenset({FaultKind.RENAME_FIELD, FaultKind.DROP_FIELD})
_DECOYS = ("北京", "广州", "London", "unknown", "N/A")


class FaultProfile(BaseModel):
    """Rates and ranges of injected faults. Rates are per call, in [0, 1]."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str = "custom"
    latency_s: tuple[float, float] = (0.0, 0.0)
    transient_error_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    format_drift_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    drift_kinds: tuple[FaultKind, ...] = DRIFT_KINDS
    hallucination_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    burst_rate: float = 0.0
    burst_length: float = 3.0
    burst_kinds: tuple[FaultKind, ...] = BURST_KINDS
    burst_latency_s: float = Field(default=2.0, ge=0.0, allow_inf_nan=False)

    @field_validator("burst_rate")
    @classmethod
    def _burst_rate(cls, value: float) -> float:
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"burst_rate (λ) must lie in [0, 1], got {value!r}")
        return value

    @field_validator("burst_length")
    @classmethod
    def _burst_length(cls, value: float) -> float:
        if not (value > 0.0 and value < float("inf")):
            raise ValueError(f"burst_length (mean calls per burst) must be > 0, got {value!r}")
        return value

    @field_validator("latency_s")
    @classmethod
    def _latency_range(cls, value: tuple[float, float]) -> tuple[float, float]:
        low, high = value
        if not (0.0 <= low <= high < float("inf")):
            raise ValueError("latency_s must be (low, high) with 0 <= low <= high, finite")
        return value

    @model_validator(mode="after")
    def _drift_kinds_valid(self) -> FaultProfile:
        if not self.drift_kinds or not set(self.drift_kinds) <= set(DRIFT_KINDS):
            raise ValueError(f"drift_kinds must be a non-empty subset of {list(DRIFT_KINDS)}")
        if not self.burst_kinds or not set(self.burst_kinds) <= set(BURST_KINDS):
            raise ValueError(f"burst_kinds must be a non-empty subset of {list(BURST_KINDS)}")
        return self

    @classmethod
    def named(cls, name: str) -> FaultProfile:
        """One of ``FAULT_PROFILES`` by name."""
        try:
            return FAULT_PROFILES[name]
        except KeyError:
            known = ", ".join(FAULT_PROFILES)
            raise ConfigurationError("profile", name, f"unknown profile; known: {known}") from None


FAULT_PROFILES: Mapping[str, FaultProfile] = MappingProxyType(
    {
        "none": FaultProfile(name="none"),
        # The PID/ADRC article's test bench: 200-800 ms of latency, one call in ten failing.
        # It names format drift and hallucination without rates; 5 % and 3 % are our choice.
        "seed000": FaultProfile(
            name="seed000",
            latency_s=(0.2, 0.8),
            transient_error_rate=0.10,
            format_drift_rate=0.05,
            hallucination_rate=0.03,
        ),
        "harsh": FaultProfile(
            name="harsh",
            latency_s=(0.2, 2.5),
            transient_error_rate=0.25,
            format_drift_rate=0.25,
            hallucination_rate=0.10,
        ),
    }
)
"""The named fault profiles (``none``, ``seed000``, ``harsh`` ...), by name."""


@dataclass(frozen=True, slots=True)
class FaultRecord:
    """One injected fault: the call it hit, its kind and what exactly was done."""

    call_id: str
    call_index: int
    kind: FaultKind
    details: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def to_dict(self) -> dict[str, Any]:
        """The record as a JSON-ready dict."""
        return {
            "call_id": self.call_id,
            "call_index": self.call_index,
            "kind": str(self.kind),
            "details": dict(self.details),
        }


@dataclass(frozen=True, slots=True)
class _Draw:
    latency_s: float
    error: bool
    hallucinate: bool
    drift: FaultKind | None
    aux_seed: int


def _hallucinated(value: Any, rng: random.Random) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + rng.choice((-1, 1)) * rng.randint(1, 10)
    if isinstance(value, float):
        return round(value * rng.uniform(1.2, 1.8) + 1.0, 2)
    if isinstance(value, str):
        return rng.choice([d for d in _DECOYS if d != value])
    return "unknown"


def _renamed(key: str, rng: random.Random) -> str:
    options = [key.upper() if key.islower() else key.lower(), f"{key}_name", f"{key}Value"]
    return rng.choice([o for o in options if o != key] or [f"{key}_"])


class FaultInjectingModel(WrapperModel):
    """Wraps ``inner`` and injects the faults of ``profile``, deterministically per ``seed``.

    ``sleep`` is awaited for injected latency (inject a fake in tests: nothing sleeps for
    real). ``Completion.latency_s`` includes the injected latency. ``fault_log`` lists every
    injected fault.
    """

    def __init__(
        self,
        inner: Model,
        profile: FaultProfile | str = "seed000",
        seed: int = 0,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        name: str | None = None,
    ) -> None:
        super().__init__(inner, name=name)
        self.profile = FaultProfile.named(profile) if isinstance(profile, str) else profile
        if name is None:
            self._own_name = f"faults[{self.profile.name}]({inner.name})"
        self.seed = require_int_at_least("seed", seed, 0)
        self._rng = random.Random(seed)
        self._ids = random.Random(f"call-ids-{seed}")
        self._sleep = sleep
        self._log: list[FaultRecord] = []
        self.calls = 0
        self._bursts = random.Random(f"bursts-{seed}")
        self._burst_left = 0
        self._burst_kind: FaultKind | None = None
        self.bursts = 0

    @property
    def fault_log(self) -> tuple[FaultRecord, ...]:
        return tuple(self._log)

    def faults_for(self, call_id: str) -> tuple[FaultRecord, ...]:
        """The faults injected into call ``call_id``, in order."""
        return tuple(r for r in self._log if r.call_id == call_id)

    def counts(self) -> Counter[FaultKind]:
        """How many faults of each kind were injected so far."""
        return Counter(r.kind for r in self._log)

    def _draw(self) -> _Draw:
        p, rng = self.profile, self._rng
        low, high = p.latency_s
        latency = low + (high - low) * rng.random()
        error = rng.random() < p.transient_error_rate
        hallucinate = rng.random() < p.hallucination_rate
        drift_hit = rng.random() < p.format_drift_rate
        kind = p.drift_kinds[rng.randrange(len(p.drift_kinds))]
        return _Draw(latency, error, hallucinate, kind if drift_hit else None, rng.getrandbits(64))

    def _burst(self) -> FaultKind | None:
        """This call's burst kind, if it is in a burst (three draws per call, always)."""
        p, rng = self.profile, self._bursts
        u_start, u_length, u_kind = rng.random(), rng.random(), rng.random()
        if p.burst_rate <= 0.0:
            return None
        if self._burst_left == 0 and u_start < p.burst_rate:
            stay = 1.0 - 1.0 / p.burst_length if p.burst_length > 1.0 else 0.0
            length = 1
            if stay > 0.0:
                length += int(math.log(1.0 - u_length) / math.log(stay))
            self._burst_left = length
            self._burst_kind = p.burst_kinds[int(u_kind * len(p.burst_kinds))]
            self.bursts += 1
        if self._burst_left == 0:
            return None
        self._burst_left -= 1
        return self._burst_kind

    def _record(self, call_id: str, index: int, kind: FaultKind, **details: Any) -> None:
        self._log.append(FaultRecord(call_id, index, kind, MappingProxyType(details)))

    async def complete(
        self, messages: MessagesInput, request: ModelRequest = DEFAULT_REQUEST
    ) -> Completion:
        """Complete through the inner model, with this call's faults injected."""
        draw = self._draw()
        burst = self._burst()
        index = self.calls
        self.calls += 1
        call_id = request.call_id or uuid.UUID(int=self._ids.getrandbits(128), version=4).hex[:16]
        if burst is FaultKind.SLOW:
            extra = self.profile.burst_latency_s
            self._record(call_id, index, FaultKind.SLOW, extra_s=extra, burst=self.bursts)
            draw = dataclasses.replace(draw, latency_s=draw.latency_s + extra)
        timeout = request.timeout
        if timeout is not None and draw.latency_s >= timeout:
            await self._sleep(timeout)
            self._record(
                call_id, index, FaultKind.TIMEOUT, latency_s=draw.latency_s, timeout_s=timeout
            )
            raise ModelTimeoutError(
                f"{self.name}: injected latency {draw.latency_s:.3f}s ran past the "
                f"{timeout}s timeout (call {call_id})"
            )
        if draw.latency_s > 0.0:
            await self._sleep(draw.latency_s)
            self._record(call_id, index, FaultKind.LATENCY, latency_s=draw.latency_s)
        if draw.error:
            self._record(call_id, index, FaultKind.TRANSIENT_ERROR)
            raise TransientModelError(f"{self.name}: injected transient fault (call {call_id})")
        inner_timeout = None if timeout is None else timeout - draw.latency_s
        completion = await self.inner.complete(
            messages, request.replace(call_id=call_id, timeout=inner_timeout)
        )
        if burst in (FaultKind.TRUNCATE, FaultKind.MALFORMED):
            completion = self._burst_reply(completion, burst, index)
        return self._disturb(completion, draw, index, request.response_schema)

    def _burst_reply(self, completion: Completion, kind: FaultKind, index: int) -> Completion:
        """A truncated reply (cut in half, ``finish_reason`` length) or a malformed one
        (its braces and quotes broken, so no JSON parser accepts it)."""
        text = completion.text
        if kind is FaultKind.TRUNCATE:
            keep = len(text) // 2
            self._record(
                completion.call_id,
                index,
                kind,
                kept_chars=keep,
                original_chars=len(text),
                burst=self.bursts,
            )
            return completion.model_copy(
                update={"text": text[:keep], "finish_reason": "length", "parsed": None}
            )
        broken = "{" + text.replace("{", "").replace("}", "").replace('"', "'") + ",,"
        self._record(completion.call_id, index, kind, burst=self.bursts)
        return completion.model_copy(update={"text": broken, "parsed": None})

    def _disturb(
        self,
        completion: Completion,
        draw: _Draw,
        index: int,
        schema: Mapping[str, Any] | None,
    ) -> Completion:
        rng = random.Random(draw.aux_seed)
        text, finish = completion.text, completion.finish_reason
        call_id = completion.call_id
        if draw.hallucinate:
            obj = _json_object(text)
            scalars = [k for k, v in (obj or {}).items() if not isinstance(v, dict | list)]
            if obj is not None and scalars:
                key = rng.choice(scalars)
                original, injected = obj[key], _hallucinated(obj[key], rng)
                obj[key] = injected
                text = json.dumps(obj, ensure_ascii=False)
                self._record(
                    call_id,
                    index,
                    FaultKind.HALLUCINATION,
                    field=key,
                    original=original,
                    injected=injected,
                )
        if draw.drift is not None:
            text, finish = self._drift(text, finish, draw.drift, rng, call_id, index)
        parsed, parse_error = completion.parsed, completion.parse_error
        if schema is not None:
            parsed, parse_error = parse_structured(text, schema)
        return completion.model_copy(
            update={
                "text": text,
                "finish_reason": finish,
                "parsed": parsed,
                "parse_error": parse_error,
                "latency_s": completion.latency_s + draw.latency_s,
            }
        )

    def _drift(
        self,
        text: str,
        finish: str,
        kind: FaultKind,
        rng: random.Random,
        call_id: str,
        index: int,
    ) -> tuple[str, str]:
        obj = _json_object(text)
        if kind in _STRUCTURAL and obj:
            key = rng.choice(sorted(obj))
            if kind is FaultKind.DROP_FIELD:
                del obj[key]
                self._record(call_id, index, kind, field=key)
            else:
                new = _renamed(key, rng)
                obj = {(new if k == key else k): v for k, v in obj.items()}
                self._record(call_id, index, kind, field=key, renamed_to=new)
            return json.dumps(obj, ensure_ascii=False), finish
        if kind is FaultKind.CODE_FENCE:
            self._record(call_id, index, kind)
            return f"```json\n{text}\n```", finish
        if kind is FaultKind.TRUNCATE:
            keep = max(0, min(len(text) - 1, int(len(text) * rng.uniform(0.3, 0.9))))
            self._record(call_id, index, kind, kept_chars=keep, original_chars=len(text))
            return text[:keep], "length"
        # Prose wrapping; also what a structural drift becomes when there is no object.
        self._record(call_id, index, FaultKind.PROSE_WRAP)
        return f"Sure! Here is the result:\n{text}\nLet me know if you need more.", finish


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
