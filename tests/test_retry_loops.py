"""The core has one retry loop: the drivers of ``closedloop.policy`` (``_retrying.py``).

A hand-written retry loop elsewhere drifts from the policy algebra (its own stop, its own
wait, its own bookkeeping), so this scans the source of ``closedloop`` for the shapes such
a loop takes and fails on any that is not on the allow-list below, each with its reason.
A new retry goes on ``retry_async`` / ``retry_sync`` (or ``retry_on_conflict`` for a
compare-and-set) instead.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator
from pathlib import Path

import closedloop

CORE = Path(closedloop.__file__).parent

DRIVER = "_retrying.py"
"""The one retry loop: its two drivers are the loops everything else runs on."""

ALLOWED: dict[tuple[str, str], str] = {
    ("execution/_admission.py", "_admit"): (
        "not a retry: waits for a permit (a Retry-After cooldown, then a free slot under the "
        "limit); nothing failed and nothing is repeated"
    ),
    ("execution/_admission.py", "_admit_shared"): (
        "not a retry: waits for a permit of a limit shared through the store (a Retry-After "
        "cooldown, then a free slot); nothing failed and nothing is repeated"
    ),
    ("harness/_generator.py", "tidy_code"): (
        "not a retry: cuts the code a line at a time until it parses"
    ),
    ("server/_app.py", "_gc_loop"): "not a retry: the periodic garbage collection of sessions",
    ("server/_sse.py", "stream_run"): "not a retry: the event stream polls a run until it ends",
    ("server/_takeover.py", "_consume"): (
        "not a retry: a worker reads the run queue for as long as it serves"
    ),
    ("server/_takeover.py", "_maintain"): (
        "not a retry: the heartbeat that keeps this worker's queue entries its own"
    ),
}
"""Loops of a retry's shape that are something else: (module, function) -> why."""


def _local(node: ast.AST) -> Iterator[ast.AST]:
    """The loop's own nodes, not those of the functions or classes defined inside it."""
    stack = list(ast.iter_child_nodes(node))
    while stack:
        child = stack.pop()
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            continue
        yield child
        stack.extend(ast.iter_child_nodes(child))


def _sleeps(loop: ast.AST) -> bool:
    for node in _local(loop):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if "sleep" in name.lower():
                return True
    return False


def _swallows(loop: ast.AST) -> bool:
    """An ``except`` that goes round again: ``continue``, or falling through to the next
    pass of a loop whose ``try`` returns on success."""
    for node in _local(loop):
        if not isinstance(node, ast.Try):
            continue
        returns = any(isinstance(n, ast.Return) for s in node.body for n in ast.walk(s))
        for handler in node.handlers:
            if isinstance(handler.body[-1], ast.Continue):
                return True
            leaves = any(isinstance(s, ast.Raise | ast.Return | ast.Break) for s in handler.body)
            if returns and not leaves:
                return True
    return False


def _is_retry_shape(loop: ast.stmt) -> bool:
    return (
        isinstance(loop, ast.While)
        and isinstance(loop.test, ast.Constant)
        and loop.test.value is True
    )


def _is_range_loop(loop: ast.stmt) -> bool:
    return (
        isinstance(loop, ast.For | ast.AsyncFor)
        and isinstance(loop.iter, ast.Call)
        and isinstance(loop.iter.func, ast.Name)
        and loop.iter.func.id == "range"
    )


def retry_loops(source: str) -> list[tuple[int, str, str]]:
    """``(line, enclosing function, why)`` for each loop of ``source`` shaped like a retry:
    a ``while True`` or ``for … in range(…)`` that sleeps or swallows an error and goes
    round, or a ``for … in range(…)`` that returns from inside and raises right after
    (the attempts ran out)."""
    found: list[tuple[int, str, str]] = []

    def visit(node: ast.AST, function: str) -> None:
        for name in ("body", "orelse", "finalbody", "handlers"):
            block = getattr(node, name, None)
            if not isinstance(block, list):
                continue
            for index, stmt in enumerate(block):
                inner = function
                if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
                    inner = stmt.name if function == "<module>" else function
                elif _is_retry_shape(stmt) or _is_range_loop(stmt):
                    why = []
                    if _sleeps(stmt):
                        why.append("sleeps")
                    if _swallows(stmt):
                        why.append("swallows an error and goes round")
                    after = block[index + 1 : index + 3]
                    if (
                        _is_range_loop(stmt)
                        and any(isinstance(n, ast.Return) for n in _local(stmt))
                        and any(isinstance(s, ast.Raise) for s in after)
                    ):
                        why.append("gives up with a raise after the attempts")
                    if why:
                        found.append((stmt.lineno, function, ", ".join(why)))
                visit(stmt, inner)

    visit(ast.parse(source), "<module>")
    return found


def _core_loops() -> list[tuple[str, int, str, str]]:
    loops = []
    for path in sorted(CORE.rglob("*.py")):
        module = path.relative_to(CORE).as_posix()
        if module == DRIVER:
            continue
        for line, function, why in retry_loops(path.read_text(encoding="utf-8")):
            loops.append((module, line, function, why))
    return loops


def test_the_core_has_no_hand_written_retry_loop() -> None:
    stray = [
        f"{module}:{line} in {function}: {why}"
        for module, line, function, why in _core_loops()
        if (module, function) not in ALLOWED
    ]
    assert stray == [], (
        "a retry loop outside closedloop/_retrying.py: run it on closedloop.policy's "
        "retry_async / retry_sync (or retry_on_conflict), or allow it here with a reason\n"
        + "\n".join(stray)
    )


def test_every_allowed_loop_is_still_there() -> None:
    present = {(module, function) for module, _, function, _ in _core_loops()}
    assert set(ALLOWED) <= present, sorted(set(ALLOWED) - present)
    assert all(reason.strip() for reason in ALLOWED.values())


def test_the_driver_is_the_loop_it_excludes() -> None:
    # The excluded module is the real driver: both drivers and the one plan they share
    # live there, and whatever loop the scan sees in it belongs to them.
    source = (CORE / DRIVER).read_text(encoding="utf-8")
    defined = {
        node.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    assert {"retry_sync", "retry_async", "_plan"} <= defined
    loops = retry_loops(source)
    assert {function for _, function, _ in loops} <= {"retry_sync", "retry_async", "_plan"}


def test_the_scan_finds_the_retry_shapes() -> None:
    # The shapes the core had before its loops went onto the driver.
    sleeping = """
        async def run(port):
            while True:
                answer = await port.ask()
                if answer.ok:
                    break
                await port.sleep(0.1)
    """
    compare_and_set = """
        async def update(store, key):
            last = None
            for attempt in range(16):
                record = await store.get(key)
                try:
                    return await store.put(key, record.version)
                except StaleStateError as exc:
                    last = exc
            raise last
    """
    skipping = """
        async def decide(store):
            for _ in range(4):
                try:
                    return await store.put()
                except StaleStateError:
                    continue
    """
    drawing = """
        async def create(store):
            for _ in range(8):
                key = draw()
                if await store.get(key) is None:
                    return key
            raise ConfigurationError("key_id", key, "no free key id")
    """
    found = {
        name: retry_loops(textwrap.dedent(source))
        for name, source in {
            "sleeping": sleeping,
            "compare_and_set": compare_and_set,
            "skipping": skipping,
            "drawing": drawing,
        }.items()
    }
    assert found["sleeping"] == [(3, "run", "sleeps")]
    assert found["compare_and_set"][0][1:] == (
        "update",
        "swallows an error and goes round, gives up with a raise after the attempts",
    )
    assert found["skipping"] == [(3, "decide", "swallows an error and goes round")]
    assert found["drawing"] == [(3, "create", "gives up with a raise after the attempts")]


def test_the_scan_leaves_plain_loops_alone() -> None:
    source = """
        def total(items):
            for i in range(len(items)):
                if items[i] is None:
                    continue
            while True:
                break
    """
    assert retry_loops(textwrap.dedent(source)) == []
