"""A batch under one total: budgets, the allocation policies, replay from a cache."""

from __future__ import annotations

import random
import re
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from closedloop import ConfigurationError, ModelError
from closedloop.harness import (
    BatchBudget,
    CodeTask,
    Generation,
    ModelGenerator,
    ProblemView,
    RefinementRound,
    Refiner,
    blind_retry,
    error_driven,
    resample_until_pass,
    run_budgeted,
    spread_evenly,
    stop_after_rounds,
)
from closedloop.harness._generator import CACHE_MISS
from closedloop.models import CallInfo, FunctionModel, Message

from .conftest import ScriptedEvaluator, fenced, score_task, scripted_evaluation


def tasks(n: int, checks: int = 4) -> list[CodeTask]:
    return [
        CodeTask(
            name=f"p{i}",
            prompt=f"Write f() for problem {i}.",
            entry_point="f",
            checks=score_task(checks).checks,
        )
        for i in range(n)
    ]


def table_model(passes: Callable[[int, int | None, float | None, int], int]) -> FunctionModel:
    """A model whose answer passes ``passes(problem, seed, temperature, call)`` checks."""
    count = {"k": 0}

    def fn(messages: tuple[Message, ...], call: CallInfo) -> str:
        found = re.search(r"problem (\d+)\.", messages[1].content)
        assert found is not None
        problem = int(found.group(1))
        count["k"] += 1
        n = passes(problem, call.request.seed, call.request.temperature, count["k"])
        return fenced(f"# passes {n}\ndef f():\n    return {count['k']}\n")

    return FunctionModel(fn)


def never(problem: int, seed: int | None, t: float | None, k: int) -> int:
    return 1


POLICIES = [
    spread_evenly(blind_retry()),
    resample_until_pass(),
    resample_until_pass(0.6),
    error_driven(),
    error_driven(("resample", "focused")),
]


def test_a_budget_names_a_total() -> None:
    with pytest.raises(ConfigurationError, match="generations, tokens or both"):
        BatchBudget()
    with pytest.raises(ConfigurationError, match="tokens"):
        BatchBudget(tokens=0)
    assert BatchBudget(generations=3).spent(3, 0) and not BatchBudget(generations=3).spent(2, 10**9)
    assert BatchBudget(generations=9, tokens=100).spent(1, 100)


async def test_a_generation_budget_must_cover_round_one() -> None:
    gen = ModelGenerator(table_model(never))
    with pytest.raises(ConfigurationError, match="round 1 of all 3 tasks"):
        await run_budgeted(tasks(3), gen, resample_until_pass(), BatchBudget(generations=2))


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p.name)
async def test_every_policy_spends_the_generation_total_exactly(policy: object) -> None:
    evaluator = ScriptedEvaluator()
    gen = ModelGenerator(table_model(never), temperature=0.2)
    run = await run_budgeted(
        tasks(5),
        gen,
        policy,
        BatchBudget(generations=17),
        evaluator=evaluator,  # type: ignore[arg-type]
    )
    # Nothing is ever solved, so every policy has a use for every generation.
    assert run.generations == 17 == len(run.allocations) == len(evaluator.calls)
    assert [a.generations for a in run.allocations] == list(range(1, 18))
    assert sum(len(r.rounds) for r in run.results) == 17
    assert run.tokens == sum(a.prompt_tokens + a.completion_tokens for a in run.allocations)


async def test_an_even_share_is_equal_and_the_remainder_goes_first() -> None:
    gen = ModelGenerator(table_model(never))
    run = await run_budgeted(
        tasks(4),
        gen,
        spread_evenly(blind_retry()),
        BatchBudget(generations=10),
        evaluator=ScriptedEvaluator(),
    )
    assert [len(r.rounds) for r in run.results] == [3, 3, 2, 2]


async def test_a_token_budget_stops_once_reached_and_overshoots_by_one_generation_at_most() -> None:
    gen = ModelGenerator(table_model(never))
    run = await run_budgeted(
        tasks(3), gen, resample_until_pass(), BatchBudget(tokens=400), evaluator=ScriptedEvaluator()
    )
    last = run.allocations[-1]
    assert run.tokens >= 400 > run.tokens - (last.prompt_tokens + last.completion_tokens)
    assert run.allocations[-2].tokens < 400


async def test_solved_problems_release_their_share_to_the_rest() -> None:
    # Problem 0 passes at once; problem 1 only at its fifth sample.
    def passes(problem: int, seed: int | None, t: float | None, k: int) -> int:
        return 4 if problem == 0 or (seed or 0) >= 4 else 2

    gen = ModelGenerator(table_model(passes))
    budget = BatchBudget(generations=6)
    even = await run_budgeted(
        tasks(2), gen, spread_evenly(blind_retry()), budget, evaluator=ScriptedEvaluator()
    )
    until = await run_budgeted(
        tasks(2), gen, resample_until_pass(), budget, evaluator=ScriptedEvaluator()
    )
    assert (even.generations, even.solved) == (4, 1)  # problem 0's two unused rounds stay unspent
    assert (until.generations, until.solved) == (6, 2)
    assert [a.seed for a in until.allocations if a.problem == "p1"] == [0, 1, 2, 3, 4]


async def test_no_policy_ever_returns_a_program_worse_than_one_it_had() -> None:
    rng = random.Random(7)
    table = {
        (p, s, t): rng.randint(0, 4) for p in range(6) for s in range(40) for t in (0.2, 0.6, 0.8)
    }

    def passes(problem: int, seed: int | None, t: float | None, k: int) -> int:
        return table.get((problem, seed or 0, round(t or 0.2, 1)), rng.randint(0, 3))

    for policy in POLICIES:
        gen = ModelGenerator(table_model(passes), temperature=0.2)
        run = await run_budgeted(
            tasks(6),
            gen,
            policy,
            BatchBudget(generations=30),
            evaluator=ScriptedEvaluator(),  # type: ignore[arg-type]
        )
        assert run.returned_regressed == 0
        for r in run.results:
            assert r.best_score == max(x.score or 0.0 for x in r.rounds)


# --- the allocator on synthetic trajectories ------------------------------------------


TASK = tasks(1)[0]


def view(index: int, passed: list[int], actions: list[str] | None = None) -> ProblemView:
    rounds = tuple(
        RefinementRound(
            index=k + 1,
            code=f"# passes {n}\ndef f():\n    return {k}\n",
            evaluation=scripted_evaluation(TASK, n),
            score=n / 4,
        )
        for k, n in enumerate(passed)
    )
    names = actions or ["prompt", *["resample"] * (len(passed) - 1)]
    return ProblemView(index, TASK, rounds, tuple(names), 1.0, 100 * len(passed))


def test_the_lyapunov_reading_of_a_problem() -> None:
    v = view(0, [1, 3, 3])
    assert pytest.approx(0.5 * 0.25**2) == v.V
    assert v.dV == 0.0 and v.stalled == 1
    falling = view(0, [1, 3])
    assert falling.dV == pytest.approx(0.5 * 0.25**2 - 0.5 * 0.75**2)


def test_a_falling_error_goes_first_and_keeps_its_action() -> None:
    session = error_driven().start([TASK], BatchBudget(generations=10))
    views = [
        view(0, [2]),  # open, fresh
        view(1, [0, 2], ["prompt", "resample@0.6"]),  # V fell in its last round
        view(2, [4]),  # solved
    ]
    choice = session.choose(views)
    assert choice is not None and choice.index == 1
    assert choice.action == "resample@0.6" and choice.feedback.temperature == 0.6
    assert "V fell" in choice.reason


def test_stuck_problems_release_their_share_until_nothing_else_is_open() -> None:
    session = error_driven(patience=2).start([TASK], BatchBudget(generations=10))
    stuck = view(0, [1, 1, 1])
    fresh = view(1, [1, 1, 1, 1, 1][:2])  # one round without a fall: still open
    choice = session.choose([stuck, fresh])
    assert choice is not None and choice.index == 1 and "open" in choice.reason
    choice = session.choose([stuck, view(1, [4])])
    assert choice is not None and choice.index == 0 and "stuck" in choice.reason
    assert session.choose([view(0, [4]), view(1, [4])]) is None


def test_the_action_is_the_one_measured_to_lower_V_most_often() -> None:
    session = error_driven(("resample", "resample@0.6", "pid")).start(
        [TASK], BatchBudget(generations=9)
    )
    v = view(0, [1, 1])
    first = session.choose([v])
    assert first is not None and first.action == "resample"  # untried: the first listed
    for action, fell in [("resample", False), ("resample", False), ("resample@0.6", True)]:
        choice = session.choose([v])
        assert choice is not None
        after = view(0, [1, 1, 3 if fell else 1])
        session.observe(after, type(choice)(0, choice.feedback, action, ""))
    choice = session.choose([v])
    assert choice is not None and choice.action == "resample@0.6"
    assert "1/1 rounds lowered V" in choice.reason
    pid = error_driven(("pid",)).start([TASK], BatchBudget(generations=9)).choose([v])
    assert (
        pid is not None and pid.feedback.text is not None and "Failing tests" in pid.feedback.text
    )


async def test_allocations_are_recorded_with_their_reason() -> None:
    def passes(problem: int, seed: int | None, t: float | None, k: int) -> int:
        return min(4, 1 + (seed or 0)) if problem == 0 else 0

    gen = ModelGenerator(table_model(passes), temperature=0.2)
    run = await run_budgeted(
        tasks(3),
        gen,
        error_driven(("resample",)),
        BatchBudget(generations=9),
        evaluator=ScriptedEvaluator(),
    )
    first = [a for a in run.allocations if a.round == 1]
    assert [a.action for a in first] == ["prompt"] * 3
    later = run.allocations[3:]
    assert all(a.reason for a in later)
    # Problem 0's error falls every round: once it has fallen it is served first.
    p0 = [a for a in later if a.problem == "p0"]
    assert p0 and any("V fell" in a.reason for a in p0)
    assert run.results[0].best_score == 1.0


# --- seeds and replay -----------------------------------------------------------------


async def test_blind_retry_spread_evenly_makes_the_calls_of_a_per_round_run() -> None:
    cache: dict[str, Generation] = {}
    batch = tasks(3)
    for temperature in (None, 0.6):
        gen = ModelGenerator(table_model(never), temperature=0.2, cache=cache)
        for task in batch:
            refiner = Refiner(
                gen,
                ScriptedEvaluator(),
                blind_retry(temperature),
                stop=stop_after_rounds(3),
                max_rounds=3,
            )
            await refiner.run(task)
    replay = ModelGenerator(table_model(never), temperature=0.2, cache=cache, cache_only=True)
    for policy in (spread_evenly(blind_retry()), spread_evenly(blind_retry(0.6))):
        run = await run_budgeted(
            batch, replay, policy, BatchBudget(generations=9), evaluator=ScriptedEvaluator()
        )
        assert run.misses == 0 and all(a.cached for a in run.allocations)
    assert replay.calls == 0


async def test_a_cache_only_replay_records_misses_and_estimates_their_cost() -> None:
    cache: dict[str, Generation] = {}
    batch = tasks(2)
    warm = ModelGenerator(table_model(never), temperature=0.2, cache=cache)
    await run_budgeted(
        batch,
        warm,
        resample_until_pass(),
        BatchBudget(generations=4),
        evaluator=ScriptedEvaluator(),
    )
    replay = ModelGenerator(table_model(never), temperature=0.2, cache=cache, cache_only=True)
    run = await run_budgeted(
        batch,
        replay,
        resample_until_pass(),
        BatchBudget(generations=6),
        evaluator=ScriptedEvaluator(),
    )
    assert run.generations == 6 and run.misses == 2 == replay.misses
    missed = [a for a in run.allocations if a.miss]
    assert [a.round for a in missed] == [3, 3] and all(a.score == 0.0 for a in missed)
    first = {a.problem: a for a in run.allocations if a.round == 1}
    for a in missed:  # the same prompt as round 1: the same cost
        assert (a.prompt_tokens, a.completion_tokens) == (
            first[a.problem].prompt_tokens,
            first[a.problem].completion_tokens,
        )
    assert replay.calls == 0


async def test_cache_only_needs_a_cache_and_says_what_it_missed() -> None:
    with pytest.raises(ConfigurationError, match="needs a cache"):
        ModelGenerator(table_model(never), cache_only=True)
    gen = ModelGenerator(table_model(never), cache={}, cache_only=True)
    with pytest.raises(ModelError, match=CACHE_MISS):
        await gen([Message(role="user", content="hi")], seed=0, entry_point=None)


# --- properties over random batches -----------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(
    problems=st.integers(1, 5),
    extra=st.integers(0, 12),
    table_seed=st.integers(0, 10**6),
    which=st.integers(0, len(POLICIES) - 1),
)
async def test_any_batch_spends_at_most_its_total_and_returns_its_best(
    problems: int, extra: int, table_seed: int, which: int
) -> None:
    rng = random.Random(table_seed)
    table = {(p, s): rng.randint(0, 4) for p in range(problems) for s in range(64)}

    def passes(problem: int, seed: int | None, t: float | None, k: int) -> int:
        return table[(problem, (seed or 0) % 64)]

    gen = ModelGenerator(table_model(passes), temperature=0.2)
    total = problems + extra
    run = await run_budgeted(
        tasks(problems),
        gen,
        POLICIES[which],
        BatchBudget(generations=total),
        evaluator=ScriptedEvaluator(),
    )
    assert run.generations <= total
    unsolved = [r for r in run.results if r.best_score < 1.0]
    if unsolved and POLICIES[which].name.startswith(("resample", "allocator")):
        assert run.generations == total  # a policy that moves budget spends all of it
    assert run.returned_regressed == 0
    for r in run.results:
        assert r.best_score == max(x.score or 0.0 for x in r.rounds)
