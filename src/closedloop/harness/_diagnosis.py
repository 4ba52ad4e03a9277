"""From the evaluator's structured results to a diagnosis, and from a diagnosis to a strategy.

Everything here is deterministic: the diagnosis is read off the failing checks (what was
called, what came back, what was expected, what was raised), never off a model's opinion.
A model may add its own reading on top (``ModelDiagnoser``); the facts stay the tests'.
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from .._validation import require_unit_interval
from ..models import Model, ModelRequest
from ._evaluation import CheckResult, Evaluation, EvaluationStatus
from ._tasks import CodeTask

__all__ = [
    "Diagnosis",
    "ModelDiagnoser",
    "StrategyChoice",
    "choose_strategy",
    "diagnose",
    "should_use_pid",
]

_RAISED = re.compile(r"^raised (\w+)(?::.*?)?(?: \(line (\d+): (.*)\))?$", re.DOTALL)
_BUILTINS = frozenset(dir(builtins))
_HINTS: Mapping[str, str] = {
    "IndexError": "an index runs past the end of a sequence: check every index against the "
    "bounds, including for empty and one-element inputs",
    "KeyError": "a key is looked up that is not there: handle missing keys explicitly",
    "TypeError": "a value has the wrong type or a call has the wrong arguments: check the "
    "signature and what each branch returns",
    "AttributeError": "an attribute or method does not exist on that object: check names "
    "and that no branch returns None by accident",
    "NameError": "a name is not defined: add the missing import or definition",
    "ZeroDivisionError": "a division by zero: guard the zero case",
    "RecursionError": "the recursion does not reach its base case for some inputs",
    "ValueError": "a conversion or argument is invalid for some inputs",
    "UnboundLocalError": "a variable is read before every branch has assigned it",
    "MemoryError": "the code allocates without bound: look for a loop that never ends",
    "PermissionError": "the code does something the sandbox forbids (files outside its "
    "directory, network, processes): remove it",
    "timeout": "a loop does not terminate for some input: check every loop condition",
}


def _names_called(source: str) -> list[str]:
    """Functions and methods a check calls, in order, without builtins and helpers."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Attribute):
                names.append(node.func.attr)
            elif isinstance(node.func, ast.Name) and node.func.id not in _BUILTINS:
                names.append(node.func.id)
    return names


def _helpers(task: CodeTask) -> frozenset[str]:
    defined: set[str] = set()
    for source in (task.preamble, task.support):
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                defined.add(node.name)
            if isinstance(node, ast.ClassDef):
                defined.update(n.name for n in node.body if isinstance(n, ast.FunctionDef))
    return frozenset(defined - {task.entry_point})


def _inspected(check: CheckResult, task: CodeTask) -> tuple[str, ...]:
    """The task's own functions and methods whose result a failing check inspects."""
    helpers = _helpers(task)
    seen: list[str] = []
    for name in _names_called(task.check(check.name).test):
        name = task.entry_point if name == "candidate" else name
        if name not in helpers and name not in seen:
            seen.append(name)
    return tuple(seen)


def _signature(check: CheckResult, task: CodeTask) -> tuple[str, str | None]:
    """(a label naming the failure pattern, the exception kind for the hint table)."""
    error = check.error or ""
    if error.startswith(("not run", "stopped")):
        return "the whole run failed", None
    if error.startswith("timeout"):
        return "a check timed out", "timeout"
    match = _RAISED.match(error)
    if match:
        kind, line, text = match.group(1), match.group(2), match.group(3)
        where = f" at line {line} (`{text.strip()}`)" if line else ""
        return f"{kind}{where}", kind
    names = _inspected(check, task)
    return f"{names[0] if names else task.entry_point}() returns a wrong result", None


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """What the failing checks say, grouped into failure patterns.

    ``patterns`` maps a pattern ("get() returns a wrong result", "IndexError at line 7")
    to the checks that show it. ``hints`` are preventive: related code paths (from the
    task) and common causes (from the exception kinds), for bugs the checks do not show yet.
    """

    passed: int
    total: int
    status: EvaluationStatus
    reason: str
    patterns: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    hints: tuple[str, ...] = ()
    suspected: tuple[str, ...] = ()

    @property
    def distinct_bugs(self) -> int:
        """Failure patterns seen plus related code paths suspected to share a bug."""
        return len(self.patterns) + len(self.suspected)

    @property
    def correlated(self) -> bool:
        """Whether failures look linked: one pattern behind several checks, or a related path."""
        return bool(self.suspected) or any(len(v) > 1 for v in self.patterns.values())

    def lines(self) -> list[str]:
        """The diagnosis as short lines for a prompt."""
        if self.status not in (EvaluationStatus.PASSED, EvaluationStatus.FAILED):
            out = [f"The code did not run through the checks: {self.reason}."]
        else:
            out = []
        for pattern, names in self.patterns.items():
            if pattern != "the whole run failed":
                out.append(f"{pattern}: {', '.join(names)}.")
        return out


_UNDEFINED = re.compile(r"NameError: name '(\w+)' is not defined")


def _code_hints(evaluation: Evaluation, task: CodeTask, code: str) -> list[str]:
    """Hints read off the code itself, for failures whose cause is visible there."""
    hints: list[str] = []
    texts = [evaluation.reason, *(c.error or "" for c in evaluation.failures)]
    for name in dict.fromkeys(m.group(1) for t in texts for m in _UNDEFINED.finditer(t)):
        hints.append(f"`{name}` is used but never defined: define it (or import it) in your code")
    if evaluation.status is EvaluationStatus.LOAD_ERROR and "does not define" in evaluation.reason:
        try:
            tree = ast.parse(code)
        except SyntaxError:
            return hints
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and any(
                isinstance(m, ast.FunctionDef) and m.name == task.entry_point for m in node.body
            ):
                hints.append(
                    f"`{task.entry_point}` is a method of class `{node.name}`; "
                    f"write `{task.entry_point}` as a top-level function instead"
                )
    return hints


def diagnose(evaluation: Evaluation, task: CodeTask, code: str = "") -> Diagnosis:
    """Group the failing checks of ``evaluation`` into patterns and collect hints.

    ``code``, when given, lets hints name what the code lacks (an undefined name, the
    entry point written as a method).
    """
    patterns: dict[str, list[str]] = {}
    kinds: list[str] = []
    implicated: list[str] = []
    for check in evaluation.failures:
        label, kind = _signature(check, task)
        patterns.setdefault(label, []).append(check.name)
        if kind is not None and kind not in kinds:
            kinds.append(kind)
        if check.error is None or not check.error.startswith(("not run", "stopped")):
            for name in _inspected(check, task):
                if name not in implicated:
                    implicated.append(name)
    whole = _RAISED.match(evaluation.reason)
    if whole is not None and whole.group(1) not in kinds:
        kinds.append(whole.group(1))  # the code raised while loading: the kind is the clue
    related = dict(task.related)
    suspected = tuple(related[name] for name in implicated if name in related)
    hints = _code_hints(evaluation, task, code) + list(suspected)
    hints += [_HINTS[k] for k in kinds if k in _HINTS]
    if evaluation.status is EvaluationStatus.SYNTAX_ERROR:
        hints.append("answer with the complete code in a single ```python block, no prose")
    elif evaluation.status is EvaluationStatus.LOAD_ERROR:
        hints.append(f"the code must define `{task.entry_point}` and load without errors")
    return Diagnosis(
        passed=evaluation.passed,
        total=evaluation.total,
        status=evaluation.status,
        reason=evaluation.reason,
        patterns={k: tuple(v) for k, v in patterns.items()},
        hints=tuple(dict.fromkeys(hints)),
        suspected=suspected,
    )


StrategyName = Literal["self_refine", "pid_feedback"]


@dataclass(frozen=True, slots=True)
class StrategyChoice:
    """The chooser's decision and the rule that made it."""

    strategy: StrategyName
    reason: str


def should_use_pid(
    first_round_pass_rate: float,
    distinct_bugs: int,
    correlated_bugs: bool,
    *,
    easy_above: float = 0.7,
) -> StrategyChoice:
    """The rule for when PID feedback pays off, as a decision with its reason.

    Above ``easy_above`` the task is easy and self-refine suffices ("more than 70 %"
    passing; a ``>= 0.7`` comparison would send the LRU example, 7/10, away from the
    PID mode that fixes it in one round, so the comparison here is strict). One
    bug: self-refine. Correlated bugs: PID. Otherwise either works; PID is chosen for its
    precise feedback.
    """
    rate = require_unit_interval("first_round_pass_rate", first_round_pass_rate)
    if rate > easy_above:
        return StrategyChoice("self_refine", f"first round passed {rate:.0%} > {easy_above:.0%}")
    if distinct_bugs <= 1:
        return StrategyChoice("self_refine", "a single bug needs no root-cause analysis")
    if correlated_bugs:
        return StrategyChoice("pid_feedback", "correlated bugs: precise feedback with hints")
    return StrategyChoice("pid_feedback", "several independent bugs: either works; PID chosen")


def choose_strategy(
    evaluation: Evaluation, task: CodeTask, *, easy_above: float = 0.7
) -> StrategyChoice:
    """Decide from the first round's pass rate and failure pattern (see :func:`should_use_pid`)."""
    d = diagnose(evaluation, task)
    return should_use_pid(
        evaluation.pass_rate, d.distinct_bugs, d.correlated, easy_above=easy_above
    )


class ModelDiagnoser:
    """Asks a model for a one-sentence root cause, given the code and the failing checks.

    Optional sharpening for :func:`~closedloop.harness.pid_feedback`: its answer is added
    to the feedback as the model's reading, beside the facts from the tests.
    """

    def __init__(self, model: Model, *, max_tokens: int = 96, temperature: float = 0.0) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self.temperature = temperature

    async def __call__(self, task: CodeTask, code: str, failures: Sequence[CheckResult]) -> str:
        listed = "\n".join(f"- {c.describe()}" for c in failures[:8])
        prompt = (
            f"This code fails some tests.\n\n```python\n{code}```\n\nFailing tests:\n{listed}\n\n"
            "In one or two sentences, what is the root cause? Do not write code."
        )
        completion = await self.model.complete(
            prompt, ModelRequest(max_tokens=self.max_tokens, temperature=self.temperature, seed=0)
        )
        return " ".join(completion.text.split())[:400]
