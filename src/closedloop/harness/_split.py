"""Splitting a HumanEval-style ``check(candidate)`` into checks the way a person reads it.

A person reading a test function sees scenarios: "build a cache of two, put a key, get it
back" is one, "an empty input raises ValueError" is another. The split follows the data:

- a *check statement* is a top-level statement that asserts something: an ``assert``, a
  compound statement (``for``, ``with``, ``try``, ``if``) with an ``assert`` or a
  ``raise`` inside, a ``with pytest.raises(...)`` (or unittest's ``assertRaises``)
  block, or a call of a local helper whose body asserts;
- every other statement is *setup*; a check gets, as its setup, exactly the earlier
  statements whose names it uses, followed back through what those statements use in
  turn (def-use chains over reaching definitions, Aho, Lam, Sethi and Ullman 2006), so
  statements that build an instance stay with the asserts that use it and a setup
  statement can serve several checks;
- a statement that may change a name in place (``c.put(1, 1)``, ``xs[0] = 1``, ``f(xs)``
  for a function not known to leave its arguments alone) counts as a definition of that
  name and of every name that may share an object with it (``alias = c``; ``limiter =
  candidate(2, lambda: now[0])`` with ``now``); a closure reads its names when it runs,
  so rebinding one of them changes whatever holds the closure;
- an earlier check that changes what a later check reads is replayed in the later one's
  setup with its asserts turned into plain expressions: its side effects happen (an LRU
  ``get`` refreshes a key), its verdict belongs to its own check;
- a check whose chain never reaches the candidate (``assert True``) is dropped: it would
  pass whatever the code did. Module-level statements of the test source take part the
  same way, so helpers the checks call come along and unused metadata does not.

The rule reads names only; it does not run anything.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .._exceptions import ConfigurationError
from ._tasks import Check

__all__ = ["split_check", "split_statements"]

# Builtins that never change their arguments: passing a value to them is a read.
_PURE_CALLS = frozenset(
    {
        "abs", "all", "any", "ascii", "bin", "bool", "bytes", "callable", "chr", "complex",
        "dict", "divmod", "enumerate", "filter", "float", "format", "frozenset", "getattr",
        "hasattr", "hash", "hex", "id", "int", "isinstance", "issubclass", "iter", "len",
        "list", "map", "max", "min", "oct", "ord", "pow", "print", "range", "repr",
        "reversed", "round", "set", "slice", "sorted", "str", "sum", "tuple", "type", "zip",
    }
)  # fmt: skip
# Standard modules whose functions do not change their arguments or hidden state.
_PURE_MODULES = frozenset(
    {
        "cmath", "copy", "decimal", "fractions", "functools", "hashlib", "itertools", "json",
        "math", "numbers", "operator", "re", "statistics", "string", "typing",
    }
)  # fmt: skip
# Context managers that fail their block unless it raises or warns (pytest, unittest).
_ASSERTING_CONTEXTS = frozenset(
    {"raises", "warns", "assertRaises", "assertRaisesRegex", "assertWarns", "assertWarnsRegex"}
)


def _base(node: ast.AST) -> str | None:
    """The name at the root of ``a.b[0].c``; None when the root is not a name."""
    while isinstance(node, ast.Attribute | ast.Subscript | ast.Starred):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _bound_inside(node: ast.AST) -> set[str]:
    """Names a nested scope binds for itself (parameters, comprehension targets, locals)."""
    names: set[str] = set()
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
        args = node.args
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if arg is not None:
                names.add(arg.arg)
    for child in ast.walk(node):
        if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store):
            names.add(child.id)
    return names


@dataclass(slots=True)
class _Facts:
    """What one top-level statement reads, binds and may change in place."""

    reads: set[str]
    binds: set[str]
    changes: set[str]
    calls: set[str]
    asserts: bool
    # Names read by a def or lambda body: read when it is called, under their value then.
    late: set[str] = field(default_factory=set)
    # Names assigned into (``x.a = 1``, ``x[0] = 1``, ``del x[0]``): a change even of the
    # code under test, which calls and being passed around are not.
    stored: set[str] = field(default_factory=set)


class _Scan(ast.NodeVisitor):
    def __init__(self) -> None:
        self.facts = _Facts(set(), set(), set(), set(), asserts=False)
        self.depth = 0  # > 0 inside a nested def, lambda, class or comprehension

    def _nested(self, node: ast.AST, binds_name: str | None = None) -> None:
        inner = _Scan()
        inner.depth = self.depth + 1
        for child in ast.iter_child_nodes(node):
            inner.visit(child)
        local = _bound_inside(node)
        self.facts.reads |= inner.facts.reads - local
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            # A body runs when called: what it changes is the caller's doing (see _Sharing).
            self.facts.late |= inner.facts.reads - local
        else:
            self.facts.changes |= inner.facts.changes - local
            self.facts.calls |= inner.facts.calls - local
        self.facts.late |= inner.facts.late - local
        if binds_name is not None and self.depth == 0:
            self.facts.binds.add(binds_name)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        for deco in node.decorator_list:
            self.visit(deco)
        self._nested(node, node.name)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        for deco in node.decorator_list:
            self.visit(deco)
        self._nested(node, node.name)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._nested(node, node.name)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._nested(node)

    def _comprehension(self, node: ast.AST) -> None:
        self._nested(node)

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Load):
            self.facts.reads.add(node.id)
        elif self.depth == 0:
            self.facts.binds.add(node.id)
        if isinstance(node.ctx, ast.Del):
            self.facts.changes.add(node.id)

    def _alias(self, alias: ast.alias) -> None:
        if self.depth == 0:
            name = alias.asname or alias.name.split(".")[0]
            if name != "*":
                self.facts.binds.add(name)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._alias(alias)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            self._alias(alias)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name and self.depth == 0:
            self.facts.binds.add(node.name)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        name = _base(node.target)
        if name is not None:
            self.facts.reads.add(name)
            self.facts.changes.add(name)
        self.generic_visit(node)

    def _store_into(self, node: ast.Attribute | ast.Subscript) -> None:
        if isinstance(node.ctx, ast.Store | ast.Del):
            name = _base(node)
            if name is not None:
                self.facts.reads.add(name)
                self.facts.changes.add(name)
                if self.depth == 0:
                    self.facts.stored.add(name)
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self._store_into(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        self._store_into(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        pure = False
        if isinstance(func, ast.Name):
            self.facts.calls.add(func.id)
            pure = func.id in _PURE_CALLS
        elif isinstance(func, ast.Attribute):
            owner = _base(func.value)
            pure = isinstance(func.value, ast.Name) and func.value.id in _PURE_MODULES
            if owner is not None and not pure:
                self.facts.changes.add(owner)  # a method may change its object
        if not pure:
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                name = _base(arg)
                if name is not None:
                    self.facts.changes.add(name)
        self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> None:
        if self.depth == 0:
            self.facts.asserts = True
        self.generic_visit(node)

    def visit_Raise(self, node: ast.Raise) -> None:
        if self.depth == 0:
            self.facts.asserts = True
        self.generic_visit(node)

    def visit_With(self, node: ast.With) -> None:
        # ``with pytest.raises(E):`` / ``with self.assertRaises(E):`` assert by themselves.
        for item in node.items:
            call = item.context_expr
            func = call.func if isinstance(call, ast.Call) else None
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if self.depth == 0 and name in _ASSERTING_CONTEXTS:
                self.facts.asserts = True
        self.generic_visit(node)


def _facts(stmt: ast.stmt) -> _Facts:
    scan = _Scan()
    scan.visit(stmt)
    return scan.facts


def _asserts_inside(stmt: ast.stmt) -> bool:
    return any(isinstance(n, ast.Assert | ast.Raise) for n in ast.walk(stmt))


class _AssertsAsExpressions(ast.NodeTransformer):
    """``assert x, msg`` -> ``x`` and ``raise AssertionError(...)`` -> ``pass``, outside
    nested defs: an earlier check's effects without its verdict."""

    def visit_Assert(self, node: ast.Assert) -> ast.AST:
        return ast.copy_location(ast.Expr(value=node.test), node)

    def visit_Raise(self, node: ast.Raise) -> ast.AST:
        exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        if isinstance(exc, ast.Name) and exc.id == "AssertionError":
            return ast.copy_location(ast.Pass(), node)
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        return node

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> ast.AST:
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        return node


def _as_setup(stmt: ast.stmt) -> str:
    copy = ast.parse(ast.unparse(stmt)).body[0]
    return ast.unparse(ast.fix_missing_locations(_AssertsAsExpressions().visit(copy)))


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)


class _Sharing:
    """Which names may hold the same objects: a name shares with the names it was built from.

    Sharing is symmetric (``x = c`` then ``x.put()`` changes ``c``; ``limiter`` built with
    ``lambda: now[0]`` sees ``now[0] = 1.5``) and followed transitively. Imported modules
    and definitions outside the statements are not values and share with nothing.
    """

    def __init__(self) -> None:
        self.links: dict[str, set[str]] = {}

    def bind(self, name: str, built_from: set[str]) -> None:
        old = self.links.pop(name, set())
        for other in old:
            self.links.get(other, set()).discard(name)
        mine = built_from - {name}
        if name in built_from:  # ``x = x`` or ``x = f(x)``: maybe still the old object
            mine |= old
        self.links[name] = set(mine)
        for other in mine:
            self.links.setdefault(other, set()).add(name)

    def group(self, names: Iterable[str]) -> set[str]:
        seen = set(names)
        todo = list(seen)
        while todo:
            for other in self.links.get(todo.pop(), ()):
                if other not in seen:
                    seen.add(other)
                    todo.append(other)
        return seen


def _affected(names: set[str], sharing: _Sharing, late: dict[str, set[str]]) -> set[str]:
    """``names`` and everything a change to them reaches: values sharing an object with
    them, and holders of closures that read them by name, transitively."""
    reached = sharing.group(names)
    while True:
        more = sharing.group({h for n in reached for h in late.get(n, ())}) - reached
        if not more:
            return reached
        reached |= more


def _module_names(stmt: ast.stmt) -> set[str]:
    if isinstance(stmt, ast.Import | ast.ImportFrom):
        return {a.asname or a.name.split(".")[0] for a in stmt.names}
    return set()


def split_statements(
    statements: Sequence[ast.stmt], targets: Iterable[str], *, check_from: int = 0
) -> list[tuple[str, str]]:
    """``(setup, test)`` per check among ``statements`` (see the module docstring).

    ``targets`` are the names of the code under test (``candidate``, the entry point);
    only ``statements[check_from:]`` may be checks, earlier ones are setup only (a test
    module's top level). A test that is one ``assert`` is given as its expression.
    """
    wanted = frozenset(targets)
    writers: dict[str, list[int]] = {}  # the statements that defined or changed each name
    sharing = _Sharing()
    modules: set[str] = set()
    late: dict[str, set[str]] = {}  # name -> the names holding a closure that reads it
    made_by_target: set[str] = set()  # values the code under test made (its instances)
    closures: list[set[int]] = []
    reaches: list[bool] = []
    asserting_helpers: set[str] = set()
    out: list[tuple[str, str]] = []
    for index, stmt in enumerate(statements):
        facts = _facts(stmt)
        closure: set[int] = set()
        for name in facts.reads | facts.changes:
            for writer in writers.get(name, ()):
                closure |= {writer, *closures[writer]}
        closures.append(closure)
        reaches.append(bool(facts.reads & wanted) or any(reaches[j] for j in closure))
        is_check = index >= check_from and (facts.asserts or bool(facts.calls & asserting_helpers))
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and _asserts_inside(stmt):
            asserting_helpers.add(stmt.name)
        # Calling a local function may change what it was built from (a list it appends
        # to); one built from no local value (a helper over the candidate) changes nothing.
        stateful = {n for n in facts.calls if n in writers and sharing.links.get(n)}
        changed = _affected(facts.changes | stateful, sharing, late)
        # The code under test is taken as given: calling it or passing it around does not
        # change it (``candidate.from_list(xs)`` is a constructor), assigning into it does.
        if facts.stored & wanted:  # a class attribute set: every instance may see it
            changed |= _affected(made_by_target, sharing, late)
        for name in changed - facts.binds - (wanted - facts.stored):
            writers.setdefault(name, []).append(index)
        values = {n for n in facts.reads if n in writers} - modules - wanted
        modules |= _module_names(stmt)
        for name in facts.binds:
            writers[name] = [index]
            sharing.bind(name, set() if name in modules else values)
            # A closure reads the name when it runs: rebinding it changes what holds one.
            for holder in _affected(late.get(name, set()), sharing, late) - wanted:
                writers.setdefault(holder, []).append(index)
        if facts.reads & wanted or values & made_by_target:
            made_by_target |= facts.binds - modules
        else:
            made_by_target -= facts.binds
        for name in facts.late - wanted:
            late.setdefault(name, set()).update((facts.binds | changed) - wanted)
        if is_check and reaches[index]:
            setup = "\n".join(_setup_source(statements[j]) for j in sorted(closure))
            out.append((setup, _test_source(stmt)))
    return out


def _test_source(stmt: ast.stmt) -> str:
    if isinstance(stmt, ast.Assert):
        return ast.unparse(stmt.test)
    if isinstance(stmt, ast.Expr):
        # A call of an asserting helper: its value means nothing, it must only not raise.
        # A check whose test parses as an expression must be true, so end it as a statement.
        return ast.unparse(stmt) + ";"
    return ast.unparse(stmt)


def _setup_source(stmt: ast.stmt) -> str:
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return ast.unparse(stmt)
    if any(isinstance(n, ast.Assert | ast.Raise) for n in ast.walk(stmt)):
        return _as_setup(stmt)
    return ast.unparse(stmt)


def split_check(test: str, entry_point: str) -> tuple[Check, ...]:
    """Turn a HumanEval ``test`` source (``def check(candidate): ...``) into checks.

    Checks are named ``A1``, ``A2``, ... in source order. Raises ``ConfigurationError``
    when the source does not parse, defines no ``check`` function, or no assert in it
    reaches the candidate.
    """
    try:
        module = ast.parse(test)
    except SyntaxError as exc:
        raise ConfigurationError("test", test[:80], f"does not parse: {exc.msg}") from None
    check_def = next(
        (s for s in module.body if isinstance(s, ast.FunctionDef) and s.name == "check"), None
    )
    if check_def is None:
        raise ConfigurationError("test", test[:80], "defines no check(candidate) function")
    params = [a.arg for a in check_def.args.posonlyargs + check_def.args.args]
    if len(params) != 1:
        raise ConfigurationError(
            "test", test[:80], "check() must take exactly one argument, the candidate"
        )
    param = params[0]
    outer = [s for s in module.body if s is not check_def and not _is_docstring(s)]
    body = [s for s in check_def.body if not _is_docstring(s)]
    pairs = split_statements(
        [*outer, *body], {param, "candidate", entry_point}, check_from=len(outer)
    )
    if not pairs:
        raise ConfigurationError("test", test[:80], "has no assert on the candidate")
    # The sandbox binds the code under test as ``candidate``; a check(f) reads it as f.
    alias = "" if param == "candidate" else f"{param} = candidate"
    return tuple(
        Check(f"A{n}", test, setup="\n".join(s for s in (alias, setup) if s))
        for n, (setup, test) in enumerate(pairs, 1)
    )
