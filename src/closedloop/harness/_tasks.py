"""What a refinement task is: a prompt for the generator and individual checks for the evaluator.

A check is one deterministic test. Its ``test`` is a Python expression that must be
true (``cache.get(2) == -1``) or, for checks that need a loop, a block of statements
that must run without raising. ``setup`` runs first in the same namespace. When the
test is a single ``left == right`` comparison the evaluator reports ``left``'s value
as *got* and ``right``'s as *expected*, which is what precise feedback is made of.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from .._exceptions import ConfigurationError

__all__ = ["Check", "CodeTask"]


def _parses(name: str, source: str, *, allow_statements: bool) -> None:
    try:
        ast.parse(source, mode="eval")
        return
    except SyntaxError as exc:
        if not allow_statements:
            raise ConfigurationError(
                name, source, f"is not a Python expression: {exc.msg}"
            ) from None
    try:
        ast.parse(source, mode="exec")
    except SyntaxError as exc:
        raise ConfigurationError(name, source, f"is not valid Python: {exc.msg}") from None


@dataclass(frozen=True, slots=True)
class Check:
    """One test of a task: ``setup`` statements, then ``test`` (an expression or statements)."""

    name: str
    test: str
    setup: str = ""

    def __post_init__(self) -> None:
        if not self.name or not self.name.strip():
            raise ConfigurationError("name", self.name, "a check needs a name")
        if not self.test.strip():
            raise ConfigurationError("test", self.test, "a check needs a test")
        _parses("test", self.test, allow_statements=True)
        if self.setup.strip():
            _parses("setup", self.setup, allow_statements=True)

    @property
    def call(self) -> str:
        """What the check does, in one line: the setup, then the value it inspects."""
        try:
            tree = ast.parse(self.test, mode="eval").body
        except SyntaxError:
            inspected = self.test.strip()
        else:
            is_eq = (
                isinstance(tree, ast.Compare)
                and len(tree.ops) == 1
                and isinstance(tree.ops[0], ast.Eq)
            )
            inspected = (
                ast.unparse(tree.left)
                if isinstance(tree, ast.Compare) and is_eq
                else (ast.unparse(tree))
            )
        # Imports say nothing about what was called; leave them out of the one-liner.
        steps = [
            line.strip()
            for line in self.setup.strip().splitlines()
            if line.strip() and not line.startswith(("import ", "from "))
        ]
        return "; ".join([*steps, inspected])


@dataclass(frozen=True, slots=True)
class CodeTask:
    """A code-writing task.

    Args:
        name: a short identifier (``"lru_cache"``, ``"HumanEval/12"``).
        prompt: what the generator is asked to write.
        entry_point: the function or class the checks exercise; checks may also call it
            ``candidate`` (HumanEval's convention).
        checks: the individual tests; a round's score is the share that pass.
        preamble: code run before the candidate's code (given classes, imports).
        support: code run after it, for helpers the checks use (list converters, fake clocks).
        related: ``(name, hint)`` pairs: when a failing check exercises ``name``, the hint
            names a related code path likely to share the bug (a preventive hint).
    """

    name: str
    prompt: str
    entry_point: str
    checks: tuple[Check, ...]
    preamble: str = ""
    support: str = ""
    related: tuple[tuple[str, str], ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.name.strip():
            raise ConfigurationError("name", self.name, "a task needs a name")
        if not self.entry_point.isidentifier():
            raise ConfigurationError("entry_point", self.entry_point, "must be an identifier")
        checks = tuple(self.checks)
        if not checks:
            raise ConfigurationError("checks", self.checks, "a task needs at least one check")
        names = [c.name for c in checks]
        if len(set(names)) != len(names):
            raise ConfigurationError("checks", names, "check names must be unique")
        object.__setattr__(self, "checks", checks)
        object.__setattr__(self, "related", tuple((str(k), str(v)) for k, v in self.related))
        for label, source in (("preamble", self.preamble), ("support", self.support)):
            if source.strip():
                _parses(label, source, allow_statements=True)

    def check(self, name: str) -> Check:
        """The check called ``name``."""
        for check in self.checks:
            if check.name == name:
                return check
        raise ConfigurationError("name", name, f"task {self.name!r} has no such check")
