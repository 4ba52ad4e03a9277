"""Prompt injection: the controller's rigour as text in the system prompt.

The lightest integration: no retries, no wrapper, only the control signal written where
the model reads it ("your current rigour is 0.65 ..."), followed by constraints that
grow with the schedule's levels: the feedback intensity (light, medium, heavy) adds
checking instructions, and the strict level demands schema-exact JSON.

:func:`inject_rigour` puts that text into the system message between ``<rigour>`` tags,
so injecting again replaces the block instead of stacking a second one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from .._exceptions import ConfigurationError
from .._validation import require_unit_interval
from ..control import ActuatorSchedule, ActuatorSettings, FeedbackIntensity, Strictness
from ._loop import ControlContext

__all__ = ["LANGUAGES", "RIGOUR_TAG", "inject_rigour", "rigour_prompt", "strip_rigour"]

RIGOUR_TAG = "rigour"
LANGUAGES = ("en", "zh")

_OPEN = f"<{RIGOUR_TAG}>"
_CLOSE = f"</{RIGOUR_TAG}>"
_SEPARATOR = "\n\n"
# The separator is removed with the block, so stripping restores the original text.
_BLOCK_RE = re.compile(
    rf"(?:{re.escape(_SEPARATOR)})?{re.escape(_OPEN)}.*?{re.escape(_CLOSE)}", re.DOTALL
)

_TEXT: dict[str, dict[str, str]] = {
    "en": {
        "head": (
            "Your current rigour is {u:.2f} (0 = relaxed, 1 = maximal). "
            "Adjust how carefully you answer accordingly."
        ),
        "light": "Answer directly and keep to the requested format.",
        "medium": (
            "Before answering, check names, numbers and dates against the input; "
            "correct obvious misspellings (such as a city name) and say that you did."
        ),
        "heavy": (
            "Verify every value against the input and the tool results. Never guess: "
            "if a required value is missing or uncertain, name it instead of inventing it."
        ),
        "strict": (
            "Reply with one JSON object that matches the required schema exactly, with no "
            'text before or after it. If the data is incomplete, reply {"error": '
            '"data_incomplete"}.'
        ),
    },
    "zh": {
        "head": "你当前的严谨度为{u:.2f}（0为宽松，1为最严格），请据此调整回答的细致程度。",
        "light": "直接回答，并遵守要求的输出格式。",
        "medium": "回答前先核对输入中的名称、数字和日期；如有明显的拼写错误（例如城市名），请纠正并说明。",
        "heavy": "逐项核对输入和工具返回的数据，不要猜测：缺失或不确定的值请明确指出，不要编造。",
        "strict": (
            '只输出一个严格符合所需 schema 的 JSON 对象，前后不要有任何其他文字；若数据不全，返回{"error": '
            '"data_incomplete"}。'
        ),
    },
}


def _settings(rigour: Any, schedule: ActuatorSchedule | None) -> ActuatorSettings:
    if isinstance(rigour, ControlContext):
        return rigour.settings
    if isinstance(rigour, ActuatorSettings):
        return rigour
    u = require_unit_interval("rigour", rigour)
    return (ActuatorSchedule() if schedule is None else schedule)(u)


def rigour_prompt(
    rigour: ActuatorSettings | ControlContext | float,
    *,
    language: str = "en",
    schedule: ActuatorSchedule | None = None,
) -> str:
    """The system-prompt text for a rigour level.

    ``rigour`` is the settings of the step, a :class:`ControlContext`, or the control
    signal ``u ∈ [0, 1]`` (turned into settings by ``schedule``, default
    ``ActuatorSchedule()``). ``language`` is ``"en"`` or ``"zh"``.
    """
    if language not in _TEXT:
        raise ConfigurationError("language", language, f"must be one of {LANGUAGES}")
    settings = _settings(rigour, schedule)
    text = _TEXT[language]
    lines = [text["head"].format(u=settings.u)]
    intensity = settings.feedback_intensity
    if intensity is FeedbackIntensity.LIGHT:
        lines.append(text["light"])
    else:
        lines.append(text["medium"])
        if intensity is FeedbackIntensity.HEAVY:
            lines.append(text["heavy"])
    if settings.strictness is Strictness.STRICT:
        lines.append(text["strict"])
    return "\n".join(lines)


def _role(item: Any, index: int) -> str:
    role = item.get("role") if isinstance(item, Mapping) else getattr(item, "role", None)
    if not isinstance(role, str):
        raise ConfigurationError(f"messages[{index}]", item, "must have a str 'role'")
    return role


def _content(item: Any, index: int) -> str:
    content = item.get("content") if isinstance(item, Mapping) else getattr(item, "content", None)
    if content is None:
        return ""
    if not isinstance(content, str):
        raise ConfigurationError(
            f"messages[{index}].content", content, "a system message must have text content"
        )
    return content


def _with_content(item: Any, content: str, index: int) -> Any:
    if isinstance(item, Mapping):
        return {**item, "content": content}
    copy = getattr(item, "model_copy", None)
    if copy is None:
        raise ConfigurationError(
            f"messages[{index}]", item, "must be a dict or a pydantic message (e.g. Message)"
        )
    return copy(update={"content": content})


def strip_rigour(text: str) -> str:
    """``text`` without any ``<rigour>`` block that :func:`inject_rigour` added."""
    return _BLOCK_RE.sub("", text)


def inject_rigour(
    messages: Sequence[Any],
    rigour: ActuatorSettings | ControlContext | float,
    *,
    language: str = "en",
    schedule: ActuatorSchedule | None = None,
) -> list[Any]:
    """A copy of ``messages`` whose system message states the current rigour.

    Messages are ``{"role", "content"}`` dicts or pydantic messages with ``role`` and
    ``content`` (``closedloop.models.Message``); each keeps its type. The block goes at
    the end of the first system message, replacing any earlier block in any system
    message; without a system message one is put first. Idempotent:
    ``inject_rigour(inject_rigour(m, a), b) == inject_rigour(m, b)``.
    """
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise ConfigurationError("messages", messages, "must be a list of messages")
    block = f"{_OPEN}\n{rigour_prompt(rigour, language=language, schedule=schedule)}\n{_CLOSE}"
    out: list[Any] = []
    first_system: int | None = None
    for index, item in enumerate(messages):
        if _role(item, index) != "system":
            out.append(dict(item) if isinstance(item, Mapping) else item)
            continue
        content = _content(item, index)
        stripped = strip_rigour(content)
        if first_system is None:
            first_system = index
            joined = f"{stripped}{_SEPARATOR}{block}" if stripped else block
            out.append(_with_content(item, joined, index))
        elif stripped != content:
            out.append(_with_content(item, stripped, index))
        else:
            out.append(dict(item) if isinstance(item, Mapping) else item)
    if first_system is None:
        template = next((m for m in messages if not isinstance(m, Mapping)), None)
        if template is not None and all(type(m) is type(template) for m in messages):
            out.insert(0, type(template)(role="system", content=block))
        else:
            out.insert(0, {"role": "system", "content": block})
    return out
