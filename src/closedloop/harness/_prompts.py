"""The words of PID feedback: what a small code model is told at each intensity.

Measured with Qwen2.5-Coder-0.5B (bench/refine.py): a small model shown its own code
mostly hands it back unchanged, whatever the feedback says, and it ignores a hint buried
under a list of facts. So the wording here is short, concrete and ordered by importance:

- light: the best code so far, the failing checks as ``call returned X, expected Y``, and
  "change only what these failures need";
- medium: the same facts, but the faulty function is to be rewritten, not patched;
- heavy: the task again, the failing checks as examples the new code must satisfy, and a
  request for a fresh implementation; the old code is left out, so it cannot be copied.

The facts come from the evaluator's structured results (:func:`diagnose`); nothing here
asks a model for its opinion. The control signal itself is kept in the round's record,
not in the prompt: a number means nothing to the model.
"""

from __future__ import annotations

import ast
import difflib
import re
from collections.abc import Mapping, Sequence

from ..control import FeedbackIntensity
from ..models import Message
from ._diagnosis import Diagnosis
from ._evaluation import CheckResult, Evaluation, EvaluationStatus
from ._tasks import CodeTask

__all__ = [
    "ANSWER",
    "PRECISE_ANSWER",
    "SYSTEM_PROMPT",
    "continue_messages",
    "describe_failure",
    "failure_lines",
    "focused_lines",
    "fresh_messages",
    "initial_messages",
    "level_action",
    "missing_entry_point",
    "same_code",
    "skeleton",
]

# Round 1's prompt: every strategy shares it, and cached benchmark generations depend on
# it byte for byte, so changing it invalidates every stored round 1.
SYSTEM_PROMPT = (
    "You are an expert Python programmer. Write correct, complete, self-contained Python "
    "code. Answer with a single ```python code block."
)
"""The generator's system prompt, shared by every strategy's round 1."""
ANSWER = "Answer with the complete corrected code in a single ```python block."
# Small models pad answers with demo prints until the token limit cuts them off.
PRECISE_ANSWER = (
    "Answer with the complete corrected code in a single ```python block, without tests or prints."
)

_ACTIONS: Mapping[FeedbackIntensity, str] = {
    FeedbackIntensity.LIGHT: (
        "Most of the code is right: fix only the specific bugs behind these failures and "
        "keep everything else. Check related code for the same mistake."
    ),
    FeedbackIntensity.MEDIUM: (
        "The code has structural problems: rewrite the faulty function(s) so that every "
        "call above gives the expected value; keep the logic that already works."
    ),
    FeedbackIntensity.HEAVY: (
        "Write a new implementation from scratch, with a different approach if needed. Read "
        "the task again: every call above must return the expected value."
    ),
}
_WRONG_RESULT = "returns a wrong result"
_MAX_CALL = 160
_MAX_VALUE = 120
# HumanEval's checks call the function under test ``candidate``; the model only knows
# it by its real name.
_CANDIDATE = re.compile(r"\bcandidate\b")


def initial_messages(task: CodeTask) -> tuple[Message, ...]:
    """Round 1 (and every round of blind retry): the system prompt and the task."""
    return (
        Message(role="system", content=SYSTEM_PROMPT),
        Message(role="user", content=task.prompt),
    )


def fresh_messages(task: CodeTask, feedback: str) -> tuple[Message, ...]:
    """The task with feedback under it and no earlier code (heavy intensity)."""
    return (
        Message(role="system", content=SYSTEM_PROMPT),
        Message(role="user", content=f"{task.prompt}\n\n{feedback}"),
    )


def continue_messages(task: CodeTask, code: str, feedback: str) -> tuple[Message, ...]:
    """The task, ``code`` as the model's earlier answer, then the feedback."""
    return (
        *initial_messages(task),
        Message(role="assistant", content=f"```python\n{code.rstrip()}\n```"),
        Message(role="user", content=feedback),
    )


def level_action(level: FeedbackIntensity) -> str:
    """What the model is asked to do at ``level``."""
    return _ACTIONS[level]


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split()) if "\n" not in text.strip() else text.strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe_failure(check: CheckResult, task: CodeTask) -> str:
    """One failing check in plain words: ``f(3) returned 2, expected 6``."""
    call = _cut(_CANDIDATE.sub(task.entry_point, check.call), _MAX_CALL)
    if "\n" in call:
        call = "`" + "; ".join(line.strip() for line in call.splitlines() if line.strip()) + "`"
    error = check.error
    if check.got is not None and check.expected is not None:
        text = (
            f"{call} returned {_cut(check.got, _MAX_VALUE)}, "
            f"expected {_cut(check.expected, _MAX_VALUE)}"
        )
    elif error is not None and error.startswith("raised "):
        text = f"{call} {_cut(error, _MAX_VALUE + 60)}"
    elif error is not None:
        text = f"{call}: {_cut(error, _MAX_VALUE + 60)}"
    elif check.got is not None:
        text = f"{call} returned {_cut(check.got, _MAX_VALUE)}, which is wrong"
    else:
        text = f"{call} failed"
    return f"{check.name}: {text}"


def _canonical(code: str) -> str:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return " ".join(code.split())
    # A copy often drops or adds an import line or reflows a docstring; the logic is what
    # tells a copy from a change.
    tree.body = [n for n in tree.body if not isinstance(n, ast.Import | ast.ImportFrom)]
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


def same_code(a: str, b: str) -> bool:
    """Whether two answers are the same program (comments, layout, imports and docstrings
    aside)."""
    return _canonical(a) == _canonical(b)


def _method_as_function(code: str, name: str) -> str | None:
    """``def name(a, b) -> T:`` from a method ``name`` of some class in ``code``."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef):
            continue
        for node in cls.body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                args = node.args
                positional = [*args.posonlyargs, *args.args][1:]  # without self
                fn = ast.FunctionDef(
                    name=name,
                    args=ast.arguments(
                        posonlyargs=[],
                        args=positional,
                        vararg=args.vararg,
                        kwonlyargs=args.kwonlyargs,
                        kw_defaults=args.kw_defaults,
                        kwarg=args.kwarg,
                        defaults=args.defaults[-len(positional) :] if positional else [],
                    ),
                    body=[ast.Expr(ast.Constant(...))],
                    decorator_list=[],
                    returns=node.returns,
                )
                return ast.unparse(ast.fix_missing_locations(fn)).splitlines()[0]
    return None


def skeleton(task: CodeTask, code: str) -> str | None:
    """The shape the answer must have when it does not define the entry point at the top
    level: a small model copies a code block far more reliably than it follows a rule."""
    name = task.entry_point
    header = _method_as_function(code, name)
    if header is None:
        match = re.search(rf"\bdef {re.escape(name)}\([^)]*\)[^:\n]*:", task.prompt)
        header = match.group(0) if match is not None else None
    if header is None and (
        re.search(rf"\bclass {re.escape(name)}\b", task.prompt) or name[:1].isupper()
    ):
        header = f"class {name}:"
    if header is None:
        call = re.search(rf"`{re.escape(name)}\([^)`]*\)`", task.prompt)
        if call is None:
            return None
        header = f"def {call.group(0).strip('`')}:"
    return f"```python\n{header}\n    ...\n```"


def missing_entry_point(evaluation: Evaluation) -> bool:
    """Whether the code loaded without defining what the checks call."""
    return evaluation.status is EvaluationStatus.LOAD_ERROR and "does not define" in (
        evaluation.reason
    )


def failure_lines(
    evaluation: Evaluation,
    diagnosis: Diagnosis,
    task: CodeTask,
    *,
    shown: Sequence[str],
    heavy: bool,
    hints: int,
    code: str = "",
) -> list[str]:
    """The facts: what ran and failed, the diagnosis, a few hints (most important first)."""
    lines: list[str] = []
    ran = evaluation.status in (EvaluationStatus.PASSED, EvaluationStatus.FAILED)
    subject = "A previous attempt" if heavy else "Your code"
    if not ran:
        lines.append(f"{subject} did not run through the tests: {evaluation.reason}.")
    else:
        lines.append(f"{subject} passes {evaluation.passed} of {evaluation.total} tests.")
    # Structural problems (the entry point missing, a name undefined) come first: until
    # they are fixed no check can pass, and a small model reads the top lines best.
    code_hints = [h for h in diagnosis.hints if h.startswith("`")]
    lines += [f"Required: {h}." for h in code_hints]
    failures = [c for c in evaluation.failures if c.name in shown]
    if ran and failures:
        lines.append("Failing tests:")
        lines += [f"- {describe_failure(c, task)}" for c in failures]
        hidden = len(evaluation.failures) - len(failures)
        if hidden > 0:
            lines.append(f"- ... and {hidden} more like these")
    # "f() returns a wrong result: A2, A3" only repeats the list above; an exception and
    # its line, or a timeout, is news.
    diagnosis_lines = [
        line
        for line in diagnosis.lines()
        if not line.startswith("The code did") and _WRONG_RESULT not in line
    ]
    if diagnosis_lines and ran:
        lines.append("Diagnosis: " + " ".join(diagnosis_lines))
    rest = [
        h
        for h in diagnosis.hints
        if h not in code_hints and not (code_hints and h.startswith("the code must define"))
    ][:hints]
    if rest:
        lines.append("Also check: " + "; ".join(rest) + ".")
    return lines


_LINE = re.compile(r"\(line (\d+): (.*)\)\s*$")
_MAX_DIFF_LINES = 24


def _size(check: CheckResult) -> tuple[int, int]:
    # The smallest failing case is the easiest to trace by hand: the shortest call, then
    # the shortest expected value.
    return (len(check.call), len(check.expected or check.got or ""))


def focused_lines(
    evaluation: Evaluation, task: CodeTask, code: str, previous: str | None = None
) -> list[str]:
    """The focused feedback form: one failing check, the smallest, with its expected and
    actual value; the line it failed on, when it raised; and, when ``previous`` (the
    latest attempt) differs from ``code`` (the best so far), a diff between the two.

    One concrete case a small model can trace by hand, in place of a list of facts it does
    not revise from (Olausson et al., ICLR 2024: self-repair is bottlenecked by the
    quality of the feedback).
    """
    lines: list[str] = []
    ran = evaluation.status in (EvaluationStatus.PASSED, EvaluationStatus.FAILED)
    if not ran:
        lines.append(f"The code did not run through the tests: {evaluation.reason}.")
    failures = sorted(evaluation.failures, key=_size) if ran else []
    if failures:
        smallest = failures[0]
        lines.append(f"The smallest failing test ({evaluation.passed} of {evaluation.total} pass):")
        lines.append(f"- {describe_failure(smallest, task)}")
        match = _LINE.search(smallest.error or "")
        if match is not None:
            lines.append(f"It fails at line {match.group(1)}: `{match.group(2).strip()}`")
    if previous is not None and not same_code(previous, code):
        diff = list(
            difflib.unified_diff(
                code.splitlines(),
                previous.splitlines(),
                "best so far",
                "latest attempt (worse)",
                lineterm="",
            )
        )
        if diff:
            shown = diff[:_MAX_DIFF_LINES]
            more = len(diff) - len(shown)
            lines.append("Your latest attempt changed the best code like this and did worse:")
            lines.append("```diff\n" + "\n".join(shown) + ("\n..." if more else "") + "\n```")
    return lines
