"""The checker: does an answer's calls (and, for stateful tasks, the final state) solve a task?

Calls are matched to expected calls one to one. For ``order: "any"`` (parallel calls) the
matching is a maximum bipartite matching, so the order of the answer's calls never
matters; for ``order: "sequence"`` the matched calls must also come in the listed order.
A call that matches no expected call is *wrong* when it names a function an unmatched
expected call names (right function, wrong arguments) and *extra* otherwise. Read-only
calls of a stateful environment are neither: looking before acting is allowed.

On an irrelevance task the right answer is an answer with no call: words, a no-call
reason, even prose that is not JSON (as in BFCL's irrelevance category). A run that
halted with no answer and no call (a step limit, a stop for no progress, a model error)
made no call too, but it answered nothing: it fails, and the report counts it apart
(``halted_no_answer``), so a loop that gives up is not scored as one that declined.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._envs import ENVIRONMENTS, CallResult, states_match
from ._format import ArgRule, ExpectedCall, ToolTask

__all__ = ["Call", "TaskScore", "arguments_match", "replay", "rule_matches", "score"]


@dataclass(frozen=True, slots=True)
class Call:
    """One function call an answer makes: a name and its decoded arguments."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": dict(self.arguments)}


@dataclass(frozen=True, slots=True)
class TaskScore:
    """The checker's verdict on one answer.

    ``matched[i]`` is the index of the answer's call that matched expected call ``i`` (None
    when it is missing); ``wrong``, ``extra`` and ``missing`` hold indices into the answer's
    calls (wrong, extra) and the expected calls (missing); ``state_diff`` names the parts of
    the final state that differ from the task's check.
    """

    task_id: str
    success: bool
    reason: str
    matched: tuple[int | None, ...] = ()
    wrong: tuple[int, ...] = ()
    missing: tuple[int, ...] = ()
    extra: tuple[int, ...] = ()
    state_diff: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "success": self.success,
            "reason": self.reason,
            "matched": list(self.matched),
            "wrong": list(self.wrong),
            "missing": list(self.missing),
            "extra": list(self.extra),
            "state_diff": list(self.state_diff),
        }


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _json_equal(a: Any, b: Any) -> bool:
    if _is_number(a) and _is_number(b):
        return math.isclose(float(a), float(b), rel_tol=0.0, abs_tol=1e-9)
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


def rule_matches(rule: ArgRule, value: Any) -> bool:
    """Whether ``value`` satisfies ``rule``."""
    kind = rule.kind
    if kind == "any":
        return True
    if kind == "exact":
        return _json_equal(rule.exact, value)
    if kind == "one_of":
        return any(_json_equal(option, value) for option in rule.one_of or ())
    if kind == "number":
        assert rule.number is not None
        return _is_number(value) and abs(float(value) - rule.number) <= rule.tol + 1e-12
    assert rule.text is not None
    return isinstance(value, str) and value.strip().casefold() == rule.text.strip().casefold()


def arguments_match(expected: ExpectedCall, call: Call) -> bool:
    """Whether ``call`` is ``expected``: same function, every rule met, nothing unlisted."""
    if call.name != expected.name:
        return False
    args = call.arguments
    if set(args) - set(expected.arguments):
        return False
    for name, rule in expected.arguments.items():
        if name not in args:
            if not rule.optional:
                return False
            continue
        if not rule_matches(rule, args[name]):
            return False
    return True


def _match_any_order(expected: Sequence[ExpectedCall], calls: Sequence[Call]) -> list[int | None]:
    fits = [[j for j, c in enumerate(calls) if arguments_match(e, c)] for e in expected]
    owner: dict[int, int] = {}  # call index -> expected index

    def augment(i: int, seen: set[int]) -> bool:
        for j in fits[i]:
            if j in seen:
                continue
            seen.add(j)
            if j not in owner or augment(owner[j], seen):
                owner[j] = i
                return True
        return False

    for i in range(len(expected)):
        augment(i, set())
    matched: list[int | None] = [None] * len(expected)
    for j, i in owner.items():
        matched[i] = j
    return matched


def _match_sequence(expected: Sequence[ExpectedCall], calls: Sequence[Call]) -> list[int | None]:
    # A longest common subsequence under the matching relation: the most expected calls
    # found in order, so one misplaced call does not hide the ones after it.
    n, m = len(expected), len(calls)
    best = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            if arguments_match(expected[i], calls[j]):
                best[i][j] = 1 + best[i + 1][j + 1]
            else:
                best[i][j] = max(best[i + 1][j], best[i][j + 1])
    matched: list[int | None] = [None] * n
    i = j = 0
    while i < n and j < m:
        if arguments_match(expected[i], calls[j]) and best[i][j] == 1 + best[i + 1][j + 1]:
            matched[i] = j
            i, j = i + 1, j + 1
        elif best[i + 1][j] >= best[i][j + 1]:
            i += 1
        else:
            j += 1
    return matched


def replay(task: ToolTask, calls: Sequence[Call]) -> tuple[dict[str, Any] | None, list[CallResult]]:
    """Run ``calls`` in order against a fresh copy of the task's environment: its final
    state and each call's result (``None`` and no results for a stateless task)."""
    if task.env is None:
        return None, []
    env = ENVIRONMENTS[task.env](task.initial_state)
    results = [env.call(c.name, c.arguments) for c in calls]
    return env.state(), results


def score(
    task: ToolTask,
    calls: Sequence[Call],
    final_text: str = "",
    env_state: Mapping[str, Any] | None = None,
    *,
    answered: bool = True,
) -> TaskScore:
    """Check one answer: its ``calls``, its ``final_text`` (kept for checkers of answers in
    words; the built-in families judge calls and state only) and, for a stateful task, the
    environment's state after the calls (replayed from ``calls`` when None). ``answered``
    is False when the strategy ended with no answer at all (see the module docstring)."""
    del final_text  # No built-in family grades the words of an answer.
    if task.expected.no_call:
        if not calls and not answered:
            return TaskScore(task.id, False, "halted with no answer (no call, but no answer)")
        if not calls:
            return TaskScore(task.id, True, "no call, as expected")
        names = ", ".join(c.name for c in calls)
        return TaskScore(
            task.id,
            False,
            f"called {names} where no offered function fits",
            extra=tuple(range(len(calls))),
        )
    expected = task.expected.calls
    read_only = ENVIRONMENTS[task.env].read_only if task.env is not None else frozenset()
    considered = [j for j, c in enumerate(calls) if c.name not in read_only]
    acting = [calls[j] for j in considered]
    if task.expected.order == "sequence":
        local = _match_sequence(expected, acting)
    else:
        local = _match_any_order(expected, acting)
    matched = tuple(None if j is None else considered[j] for j in local)
    used = {j for j in matched if j is not None}
    missing = tuple(i for i, j in enumerate(matched) if j is None)
    missing_names = {expected[i].name for i in missing}
    wrong = tuple(j for j in considered if j not in used and calls[j].name in missing_names)
    extra = tuple(j for j in considered if j not in used and j not in wrong)
    state_diff: tuple[str, ...] = ()
    if task.env is not None and task.final_state is not None:
        state = env_state if env_state is not None else replay(task, calls)[0]
        assert state is not None
        state_diff = tuple(states_match(task.final_state, state))
    problems: list[str] = []
    if wrong:
        problems.append("wrong arguments: " + ", ".join(_show(calls[j]) for j in wrong))
    if missing and not wrong:
        problems.append("missing: " + ", ".join(expected[i].name for i in missing))
    elif len(missing) > len(wrong):
        problems.append(f"{len(missing) - len(wrong)} expected call(s) missing")
    if extra:
        problems.append("extra: " + ", ".join(_show(calls[j]) for j in extra))
    if state_diff:
        problems.append("final state differs in: " + ", ".join(state_diff))
    if not calls:
        problems = ["no call where one was expected", *problems[1:]]
    success = not problems
    reason = "all expected calls made" if success else "; ".join(problems)
    return TaskScore(task.id, success, reason, matched, wrong, missing, extra, state_diff)


def _show(call: Call) -> str:
    args = ", ".join(f"{k}={v!r}" for k, v in call.arguments.items())
    text = f"{call.name}({args})"
    return text if len(text) <= 120 else text[:117] + "..."
