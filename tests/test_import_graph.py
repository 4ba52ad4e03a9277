"""The import graph and the layering rules of docs/architecture.md.

No cycle among the core's private modules; control/ stands alone; every package imports
only what the page's table allows; the library never imports the benchmark distribution,
by statement or by importlib.

The graph is read from the source with ``ast`` (nothing is imported), counting every
import: at module level, inside functions and under ``TYPE_CHECKING``, because a cycle
hidden behind ``TYPE_CHECKING`` is still two modules that cannot be read apart. Importing
a package counts as importing every module its ``__init__`` imports.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = "closedloop"
CORE = ("control", "perception", "decision", "execution", "feedback", "agent", "models")

# Cycles another change is breaking; each entry names both ends. Keep this empty.
KNOWN_CYCLES: frozenset[frozenset[str]] = frozenset()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@functools.cache
def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in (SRC / ROOT).rglob("*.py")}


def _is_package(name: str, modules: dict[str, Path]) -> bool:
    return name in modules and modules[name].name == "__init__.py"


def _imported(name: str, path: Path, modules: dict[str, Path]) -> Iterator[str]:
    """Every closedloop module ``name`` imports, resolved to module names."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            # ``from ._x import Name`` imports the module ``_x``, ``from . import _x`` the
            # module ``_x`` alone (its package is loaded first whoever imports it).
            named = [f"{base}.{alias.name}" for alias in node.names]
            if node.module is None:
                targets = [t if t in modules else base for t in named]
            else:
                targets = [base, *named]
        else:
            continue
        for target in targets:
            if target in modules and (target == ROOT or target.startswith(ROOT + ".")):
                yield target


@functools.cache
def _direct() -> dict[str, set[str]]:
    modules = _modules()
    return {name: set(_imported(name, path, modules)) for name, path in modules.items()}


@functools.cache
def _graph() -> dict[str, set[str]]:
    modules = _modules()
    direct = _direct()

    def expand(target: str, seen: set[str]) -> set[str]:
        # A package stands for what its __init__ imports, transitively through __init__s.
        if not _is_package(target, modules) or target in seen:
            return {target}
        seen.add(target)
        out: set[str] = set()
        for inner in direct[target]:
            out |= expand(inner, seen)
        return out

    return {
        name: {m for t in targets for m in expand(t, set()) if m != name}
        for name, targets in direct.items()
        if not _is_package(name, modules)
    }


def _is_core_private(name: str) -> bool:
    parts = name.split(".")
    in_core = len(parts) >= 3 and parts[1] in CORE
    top_level = len(parts) == 2  # closedloop._exceptions, closedloop._validation
    return (in_core or top_level) and parts[-1].startswith("_")


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component: list[str] = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _core_graph() -> dict[str, set[str]]:
    graph = _graph()
    return {
        name: {t for t in targets if _is_core_private(t)}
        for name, targets in graph.items()
        if _is_core_private(name)
    }


def test_the_graph_sees_the_imports_it_should() -> None:
    # A reader that resolves nothing finds no cycle either: pin a few known edges.
    graph = _graph()
    assert "closedloop.execution._effect" in graph["closedloop.execution._ledger"]
    assert "closedloop.decision._context" in graph["closedloop.decision._rules"]
    # ``from ..perception import Observation`` reaches the module that defines it.
    assert "closedloop.perception._observation" in graph["closedloop.decision._context"]
    # ``from . import _policy`` reaches the module, not the package above it.
    assert "closedloop._policy" in _direct()["closedloop.policy"]
    assert ROOT not in _direct()["closedloop.policy"]


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_among_the_cores_private_modules() -> None:
    cycles = [c for c in _cycles(_core_graph()) if frozenset(c) not in KNOWN_CYCLES]
    assert cycles == [], "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


@pytest.mark.parametrize("name", sorted(n for n in _direct() if n.startswith("closedloop.control")))
def test_control_imports_no_other_closedloop_package(name: str) -> None:
    # Numbers only: the shared error type and argument checks, nothing of the loop.
    allowed = ("closedloop.control", "closedloop._exceptions", "closedloop._validation")
    outside = sorted(
        t for t in _direct()[name] if not any(t == a or t.startswith(a + ".") for a in allowed)
    )
    assert outside == [], f"{name} imports {outside}"


# --- the layering rules of docs/architecture.md ----------------------------------------------


def _package(name: str) -> str:
    """``closedloop.feedback._store`` -> ``feedback``; a top-level module is ``shared``."""
    parts = name.split(".")
    if len(parts) == 1:
        return "root"  # the curated surface re-exports from everywhere
    if name == "closedloop.__main__":
        return "cli"
    if len(parts) == 2 and not _is_package(name, _modules()):
        return "shared"  # closedloop._exceptions, closedloop._policy, closedloop.policy, ...
    return parts[1]


# What each package may import besides itself, as the table on the page states it. The
# shared top-level modules (the error type, argument checks, the stop / retry / wait
# algebra, conflicts, redaction, paths) are open to every package but control, which may
# use only the error type and the argument checks (checked above, module by module).
EDGES = ("integrations", "harness", "server", "cli")
MAY_IMPORT: dict[str, frozenset[str]] = {
    "control": frozenset({"shared"}),
    "perception": frozenset({"shared", "control"}),
    "decision": frozenset({"shared", "control", "perception"}),
    "execution": frozenset({"shared"}),
    "feedback": frozenset({"shared"}),
    "models": frozenset({"shared"}),
    "agent": frozenset({"shared", *CORE}),
    "shared": frozenset({"shared"}),
    **{edge: frozenset({"shared", *CORE, *EDGES}) for edge in EDGES},
}


def test_every_package_has_a_rule() -> None:
    packages = {_package(n) for n in _modules()} - {"root"}
    assert packages <= set(MAY_IMPORT), sorted(packages - set(MAY_IMPORT))


@pytest.mark.parametrize("package", sorted(MAY_IMPORT))
def test_a_package_imports_only_what_the_architecture_page_allows(package: str) -> None:
    allowed = MAY_IMPORT[package] | {package}
    broken = sorted(
        f"{name} -> {target}"
        for name, targets in _direct().items()
        if _package(name) == package
        for target in targets
        if _package(target) not in allowed
    )
    assert broken == [], f"{package} may import only {sorted(allowed)}: {broken}"


_IMPORTERS = {"import_module", "find_spec", "__import__", "import_string", "entry_point"}


def _named_strings(node: ast.AST) -> Iterator[str]:
    """The literal text of a string argument, f-strings included (their constant parts)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value
    elif isinstance(node, ast.JoinedStr):
        yield "".join(v.value for v in node.values if isinstance(v, ast.Constant))


def _bench_imports(tree: ast.AST) -> list[str]:
    """Every way ``tree`` imports the benchmark distribution: statements and importlib."""
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "closedloop_bench"]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            if (node.module or "").split(".")[0] == "closedloop_bench":
                found.append(node.module or "")
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in _IMPORTERS:
                found += [
                    text
                    for arg in [*node.args, *(k.value for k in node.keywords)]
                    for text in _named_strings(arg)
                    if "closedloop_bench" in text
                ]
    return found


def test_the_bench_import_finder_finds_every_spelling() -> None:
    source = """
import closedloop_bench.world
from closedloop_bench.reference import weather
importlib.import_module(f"closedloop_bench.reference.{name}")
util.find_spec("closedloop_bench")
"""
    assert len(_bench_imports(ast.parse(source))) == 4
    assert _bench_imports(ast.parse('"""closedloop_bench in a docstring"""')) == []


@pytest.mark.parametrize("name", sorted(_modules()))
def test_the_library_never_imports_the_benchmark_distribution(name: str) -> None:
    # The reference agents and the world are found through entry points instead.
    tree = ast.parse(_modules()[name].read_text(encoding="utf-8"))
    assert _bench_imports(tree) == [], f"{name} imports {_bench_imports(tree)}"
