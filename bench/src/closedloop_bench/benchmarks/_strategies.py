"""The strategies the faults benchmark compares, behind one small interface.

Every strategy gets the same task, the same tool functions (one ``WorldTools`` per
episode), the same model and the same limits; only the control differs:

* ``open_loop``: a plain while loop (the usual first version): the model proposes, code
  executes, the answer goes back as text; no validation beyond parsing, no retries.
* ``fixed_retries``: the same loop with tenacity around every model and tool call:
  3 attempts, exponential backoff, on exceptions and HTTP-level failures.
* ``langgraph``: a LangGraph ``StateGraph`` built as its users build one (agent node,
  tools node, conditional edge) with ``RetryPolicy(max_attempts=3)`` and a recursion limit.
* ``closedloop_pid``: ``closedloop.agent`` with per-step-type PID control, protocols off.
* ``closedloop_adrc``: the same with the ESO and its protocols (dual verification,
  dimension reduction, manual handover).
* ``closedloop_frozen``: ``closedloop_pid``'s loop (same planner, same retry budget and
  predicate) with every actuator frozen at u = 0.5 and protocols off: the frozen
  counterpart every control claim of ``closedloop_pid`` and ``closedloop_adrc`` is read
  against, whichever planner the run uses.
* ``closedloop_model_pid`` / ``closedloop_model_fixed``: the loop with the model deciding
  every step (the ``react`` planner, whatever the model) and protocols off, with the PID
  on, or with every actuator frozen at one setting: what the controller alone buys.

A strategy is anything with ``name``, ``label`` and ``async run(episode) -> Outcome``;
:func:`get_strategy` builds the built-in ones by name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from closedloop._exceptions import ConfigurationError
from closedloop._validation import require_int_at_least, require_non_negative
from closedloop.agent import RunResult, TraceSink
from closedloop.agent._tools import tools_by_name
from closedloop.feedback import MemoryStore
from closedloop.models import Model
from closedloop.perception import Observation, ObservationStatus, sanitize_json

from ..reference import ANSWER_FIELD, Answer, ReferenceTask, WorldTools

__all__ = [
    "STRATEGY_NAMES",
    "BenchStrategy",
    "Episode",
    "Limits",
    "Outcome",
    "Reply",
    "get_strategy",
    "parse_reply",
    "render_observation",
    "retryable",
    "system_prompt",
    "transient",
]

STRATEGY_NAMES = (
    "open_loop",
    "fixed_retries",
    "langgraph",
    "closedloop_pid",
    "closedloop_adrc",
    "closedloop_frozen",
    "closedloop_model_pid",
    "closedloop_model_fixed",
    "closedloop_model_gate",
    "closedloop_budget",
    "closedloop_acting",
    "closedloop_ignoring",
)
"""The built-in strategies, in the order reports list them."""

_HTTP = re.compile(r"^HTTP (\d{3})\b")

LABELS = {
    "open_loop": "open loop",
    "fixed_retries": "fixed retries (tenacity)",
    "langgraph": "LangGraph RetryPolicy",
    "closedloop_pid": "closedloop PID",
    "closedloop_adrc": "closedloop PID+ADRC",
    "closedloop_frozen": "closedloop, controller frozen at u = 0.5, protocols off",
    "closedloop_model_pid": "closedloop, model every step, PID",
    "closedloop_model_fixed": "closedloop, model every step, controller off",
    "closedloop_model_gate": "closedloop, rules first past a confidence gate, PID",
    "closedloop_budget": "closedloop, the budget by the controller (retries from u, breaker, gate)",
    "closedloop_acting": "closedloop, the budget row acting on its estimates (storm wait, "
    "breaker, early handover)",
    "closedloop_ignoring": "closedloop, the budget row with the same estimates, not acted on",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """What every strategy is allowed: steps, attempts per call, tokens and sampling.

    ``attempts`` is the retry budget of every strategy that retries (the oracle bound uses
    the same); ``backoff_s`` is the first backoff of the baselines (then doubling).
    """

    max_steps: int = 8
    attempts: int = 3
    backoff_s: float = 0.5
    max_tokens: int = 384
    temperature: float = 0.0
    seed: int = 0
    deadline_s: float = 3600.0
    no_progress: int = 4
    observation_chars: int = 1500

    def __post_init__(self) -> None:
        require_int_at_least("max_steps", self.max_steps, 1)
        require_int_at_least("attempts", self.attempts, 1)
        require_non_negative("backoff_s", self.backoff_s)
        require_int_at_least("max_tokens", self.max_tokens, 16)
        require_int_at_least("no_progress", self.no_progress, 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class Episode:
    """One task, one seed, one world: what a strategy runs on.

    ``store`` is the episode's state store (``tools`` take their idempotency keys from
    its ledger). ``sleep`` is every backoff's sleep (inject a fake one in tests);
    ``trace`` receives closedloop's step records when given. ``test_model`` is True when
    ``model`` is the deterministic test model (it can only plan its task's trajectory).
    """

    task: ReferenceTask
    tools: WorldTools
    model: Model
    limits: Limits
    store: MemoryStore
    sleep: Callable[[float], Awaitable[None]]
    trace: TraceSink | None = None
    test_model: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Outcome:
    """How an episode ended, from the strategy's side (the checker judges the answer)."""

    answer: Answer
    halt: str
    steps: int
    handed_over: bool = False
    protocols: tuple[str, ...] = ()
    error: str | None = None
    run: RunResult | None = field(default=None, repr=False)
    planner: str = "model"

    @property
    def warned_early(self) -> bool:
        """True when the ESO left ``normal`` before the last step (ADRC runs only)."""
        return any(p != "normal" for p in self.protocols[:-1])


@runtime_checkable
class BenchStrategy(Protocol):
    """A way of running an agent: the benchmark only calls ``run``."""

    @property
    def name(self) -> str: ...

    @property
    def label(self) -> str: ...

    async def run(self, episode: Episode) -> Outcome: ...


def get_strategy(name: str, *, planner: str = "auto") -> BenchStrategy:
    """A built-in strategy by name (see :data:`STRATEGY_NAMES`); ``planner`` is the closed
    loop's (``auto``, ``react`` or ``reference``)."""
    if name == "open_loop":
        from ._baselines import OpenLoop

        return OpenLoop()
    if name == "fixed_retries":
        from ._baselines import FixedRetries

        return FixedRetries()
    if name == "langgraph":
        from ._langgraph import LangGraphAgent

        return LangGraphAgent()
    if name in ("closedloop_pid", "closedloop_adrc"):
        from ._closed import ClosedLoopAgent

        return ClosedLoopAgent(adrc=name == "closedloop_adrc", planner=planner)
    if name == "closedloop_frozen":
        from ._closed import ClosedLoopAgent

        # closedloop_pid with the feedback taken out: the same planner, every actuator
        # schedule answering as at u = 0.5 (``fixed_config``), protocols off.
        return ClosedLoopAgent(adrc=False, planner=planner, fixed=True, name=name)
    if name in ("closedloop_model_pid", "closedloop_model_fixed", "closedloop_model_gate"):
        from ._closed import ClosedLoopAgent

        # The model decides every step (no rule shortcuts); the first two differ only in
        # the controller: PID-scheduled actuators, or the same actuators frozen
        # (``FIXED_U``). The gate row is the PID row with one change: a known cause's rule
        # makes the next call itself when its confidence clears the gate.
        return ClosedLoopAgent(
            adrc=False,
            planner="react",
            fixed=name.endswith("fixed"),
            gate=name.endswith("gate"),
            name=name,
        )
    if name == "closedloop_budget":
        from ._closed import ClosedLoopAgent

        # The model every step, as the rows above; the controller decides where the
        # attempt budget goes: retries scheduled from u (none while calm, the whole
        # budget when the error is high), no calls into a tool its breaker takes as down,
        # and a known cause's rule making the repeat without the model.
        return ClosedLoopAgent(adrc=False, planner="react", budget=True, gate=True, name=name)
    if name in ("closedloop_acting", "closedloop_ignoring"):
        from ._closed import ClosedLoopAgent

        # The budget row, with one change between the two: the actions on the estimate
        # (wait out a 429 storm, no call into an open breaker, an early handover) on, or
        # off with the same estimates computed and recorded.
        acting = name == "closedloop_acting"
        return ClosedLoopAgent(
            adrc=False, planner="react", budget=True, gate=True, acting=acting, name=name
        )
    raise ConfigurationError("strategy", name, f"known: {', '.join(STRATEGY_NAMES)}")


# --- what the plain loops share ------------------------------------------------------------


def _signature(name: str, parameters: Mapping[str, Any]) -> str:
    properties = parameters.get("properties") or {}
    required = set(parameters.get("required") or ())
    parts = []
    for arg, spec in properties.items():
        kind = spec.get("type", "any") if isinstance(spec, Mapping) else "any"
        if isinstance(kind, list):
            kind = "|".join(str(k) for k in kind)
        parts.append(f"{arg}{'' if arg in required else '?'}: {kind}")
    return f"{name}({', '.join(parts)})"


def system_prompt(task: ReferenceTask, tools: WorldTools) -> str:
    """The baselines' system prompt, as a user writes one: a line per tool (its signature
    and the summary closedloop shows too), the reply format, and the answer's fields."""
    lines = ["You complete the user's task by calling tools, one call per reply.", "Tools:"]
    for tool in tools_by_name(tools.tools(task.domain)).values():
        lines.append(f"- {_signature(tool.name, tool.parameters)}: {tool.description}")
    lines.append(
        'Reply with exactly one JSON object: {"tool": "<tool name>", "arguments": {...}} to '
        'call a tool, or {"final": "<answer>", "fields": {"' + ANSWER_FIELD + '": {...}}} '
        "when the task is complete."
    )
    lines.append(f"The {ANSWER_FIELD} field is {task.answer_description()}.")
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Reply:
    """A parsed reply: a tool call (``tool`` set) or a final answer."""

    tool: str | None = None
    arguments: Mapping[str, Any] = field(default_factory=dict)
    answer: Answer | None = None


def parse_reply(text: str) -> Reply | None:
    """Read a reply as ``{"tool", "arguments"}`` or ``{"final", "fields"}``; None otherwise."""
    result = sanitize_json(text)
    data = result.data if result.ok else None
    if not isinstance(data, Mapping):
        return None
    if isinstance(data.get("tool"), str):
        arguments = data.get("arguments")
        if arguments is None:
            arguments = {k: v for k, v in data.items() if k != "tool"}
        return Reply(tool=data["tool"], arguments=arguments if isinstance(arguments, dict) else {})
    for key in ("final", "answer", "final_answer"):
        if key in data:
            fields = data.get("fields")
            inner = fields.get(ANSWER_FIELD) if isinstance(fields, Mapping) else None
            text_answer = data[key] if isinstance(data[key], str) else json.dumps(data[key])
            values = dict(inner) if isinstance(inner, Mapping) else {}
            return Reply(answer=Answer(text=text_answer, fields=values))
    return None


def render_observation(result: Any, max_chars: int) -> str:
    """What the plain loops show the model of a tool's answer: its JSON, cut to a length."""
    if isinstance(result, Observation):
        shown: dict[str, Any] = {"status": result.status.value, "value": result.value}
        if result.error:
            shown["error"] = result.error
        text = json.dumps(shown, ensure_ascii=False, default=str)
    else:
        text = str(result)
    return text if len(text) <= max_chars else text[:max_chars] + "…"


def transient(observation: Observation) -> bool:
    """An HTTP-level failure worth another attempt: 5xx, 429, timeout, no connection.

    What a user checks without any sensing of the answer itself (an empty list or a
    drifted field is a 200 and passes). A 5xx served with a cached earlier answer
    (``stale``) is still a 5xx.
    """
    status = observation.status
    if status in (ObservationStatus.TIMEOUT, ObservationStatus.RATE_LIMITED):
        return True
    if status not in (ObservationStatus.ERROR, ObservationStatus.STALE):
        return False
    code = _HTTP.match(observation.error or "")
    if code is not None:
        return int(code.group(1)) >= 500
    return status is ObservationStatus.ERROR and "could not be reached" in observation.meaning


def retryable(observation: Observation) -> bool:
    """The one retry predicate of every retrying strategy and of the oracle bound.

    A transient HTTP-level failure (:func:`transient`), an answer that lost key fields
    (schema drift: ``partial``), or an empty answer (a fault can fake "no match"): each is
    asked again within the same attempt budget. closedloop's loop asks a subset of these
    (an empty one only when its error signal doubts it), never more.
    """
    return transient(observation) or observation.status in (
        ObservationStatus.PARTIAL,
        ObservationStatus.EMPTY,
    )
