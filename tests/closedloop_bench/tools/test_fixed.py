"""The strict vote: the constrained call sampled k times, the first greedy, and a
majority of the calls that parse; no majority leaves the greedy call."""

from __future__ import annotations

from collections.abc import Sequence

from closedloop.models import FunctionModel, Message, RawCompletion
from closedloop.models._protocol import CallInfo
from closedloop_bench.tools._fixed import StrictVotes
from closedloop_bench.tools._format import load_tool_tasks
from closedloop_bench.tools._generate import DATA_DIR
from closedloop_bench.tools._oracle import ideal_reply
from closedloop_bench.tools._score import score

TASK = load_tool_tasks(DATA_DIR / "dev.jsonl")[0]
WRONG = '{"no_call": "nothing fits"}'


def _model(texts: Sequence[str], seen: list[CallInfo]) -> FunctionModel:
    def answer(_messages: Sequence[Message], call: CallInfo) -> RawCompletion:
        seen.append(call)
        return RawCompletion(text=texts[len(seen) - 1])

    return FunctionModel(answer)


async def test_the_majority_of_parsed_samples_wins_over_the_greedy_one() -> None:
    seen: list[CallInfo] = []
    right = ideal_reply(TASK)
    attempt = await StrictVotes(3).solve(TASK, _model([WRONG, right, right], seen))
    assert score(TASK, attempt.calls, attempt.final_text).success
    assert attempt.model_calls == 3 and attempt.extra["votes"] == 2
    assert [c.request.temperature for c in seen] == [0.0, 0.7, 0.7]
    assert all(c.request.response_schema is not None for c in seen)


async def test_with_no_majority_the_greedy_call_stands_and_junk_votes_for_nothing() -> None:
    right = ideal_reply(TASK)
    attempt = await StrictVotes(3).solve(TASK, _model([right, "not json", WRONG], []))
    assert score(TASK, attempt.calls, attempt.final_text).success
    assert attempt.extra["votes"] == 1


def test_a_vote_of_no_samples_is_refused_under_its_own_name() -> None:
    import pytest

    from closedloop import ConfigurationError

    with pytest.raises(ConfigurationError, match="svotes@0"):
        StrictVotes(0)
