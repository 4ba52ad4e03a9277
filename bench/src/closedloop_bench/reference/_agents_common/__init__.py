"""What the four reference agents share (private): the rule policy in the loop, controlled
reads, request parsing.

A reference agent is a :class:`closedloop.agent.Agent` whose proposer is a ``Policy``:
domain rules read the task state (a snapshot from the store, never the chat history) and
propose one action per step; a language model is asked only where the rules need language
understanding, and what it says is checked by rules before anything acts on it. The loop
keeps everything else: validation, the effect ledger, PID per step type, the ESO protocols,
the handover queue and the trace.
"""

from __future__ import annotations

from ._agent import Policy, ReferenceAgent, Rules, RunContext, TaskRunner, task_runner
from ._reads import ControlledReads, reference_control, reference_schedule
from ._state import (
    ASK_HUMAN,
    ASK_HUMAN_ACTION,
    Facts,
    Language,
    Move,
    Seen,
    Turn,
    ask_human,
    call,
    final,
    impossible,
    pick,
)
from ._text import (
    Lang,
    Span,
    chunks,
    date_range,
    find_dates,
    find_hours,
    lang_of,
    valid_date,
    words,
)

__all__ = [
    "ASK_HUMAN",
    "ASK_HUMAN_ACTION",
    "ControlledReads",
    "Facts",
    "Lang",
    "Language",
    "Move",
    "Policy",
    "ReferenceAgent",
    "Rules",
    "RunContext",
    "Seen",
    "Span",
    "TaskRunner",
    "Turn",
    "ask_human",
    "call",
    "chunks",
    "date_range",
    "final",
    "find_dates",
    "find_hours",
    "impossible",
    "lang_of",
    "pick",
    "reference_control",
    "reference_schedule",
    "task_runner",
    "valid_date",
    "words",
]
