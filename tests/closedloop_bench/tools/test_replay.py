"""Strategies replayed from a sample bank: decisions and costs checked by hand on a
five-task synthetic bank (see ``conftest.SYNTHETIC_STRONG`` / ``SYNTHETIC_WEAK``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from closedloop import ConfigurationError
from closedloop.control import ConfidenceStop, ConformalPID, WindowStop
from closedloop_bench.tools._generate import DATA_DIR
from closedloop_bench.tools._replay import (
    Abstaining,
    AdaptiveVotes,
    Cascade,
    ConfidentSingle,
    Outcome,
    Record,
    Sample,
    Votes,
    winner,
)
from closedloop_bench.tools._replay_command import bank_readings, dev_choices, load_records
from closedloop_bench.tools._stream import (
    FixedThreshold,
    StreamItem,
    choose_gains,
    choose_threshold,
    rolling_error,
    run_stream,
    shifted_stream,
    stream_report,
    summarise_steps,
)

TASKS = DATA_DIR / "eval.jsonl"


@pytest.fixture
def banks(synthetic_banks: tuple[Path, Path]) -> tuple[list[Record], list[Record]]:
    strong = load_records(synthetic_banks[0], TASKS)[1]
    weak = load_records(synthetic_banks[1], TASKS)[1]
    return strong, weak


def _run(strategy: object, *records: list[Record]) -> list[Outcome]:
    return [strategy.replay(list(group)) for group in zip(*records, strict=True)]  # type: ignore[attr-defined]


def test_samples_are_rescored_not_read_from_the_bank(banks: tuple[list[Record], ...]) -> None:
    strong, weak = banks
    # The bank says success False everywhere; the checker says otherwise.
    assert [[s.ok for s in r.samples] for r in strong] == [
        [True] * 5,
        [False, True, True, False, True],
        [True, False, False, True, False],
        [False, False, True, True, False],
        [True, False, False, False, False],
    ]
    assert strong[3].samples[0].key is None and strong[3].samples[0].p_low is None
    assert strong[0].samples[0].p_low == pytest.approx(0.9)
    assert strong[0].samples[0].tokens == 110 and strong[0].samples[1].tokens == 15
    assert [r.family for r in weak] == ["single", "choose", "parallel", "irrelevance", "multi_turn"]


def test_single_and_fixed_votes(banks: tuple[list[Record], ...]) -> None:
    strong, _ = banks
    single = _run(Votes(1), strong)
    assert [o.success for o in single] == [True, False, True, False, True]
    assert {(o.seconds, o.tokens, o.calls) for o in single} == {(2.0, 110, 1)}
    votes3 = _run(Votes(3), strong)
    # t3: one unparsed, then W and R tie: the key drawn first (W) wins.
    assert [o.success for o in votes3] == [True, True, False, False, False]
    assert {o.calls for o in votes3} == {3}
    assert votes3[0].seconds == pytest.approx(3.1) and votes3[0].tokens == 140
    votes5 = _run(Votes(5), strong)
    assert [o.success for o in votes5] == [True, True, False, False, False]
    assert votes5[0].seconds == pytest.approx(4.6) and votes5[0].tokens == 170


def test_weighted_votes_follow_the_confidence(banks: tuple[list[Record], ...]) -> None:
    strong, _ = banks
    # t2: R at 0.4 beats two W at 0.1; t4: two V at 0.5 beat R at 0.95.
    assert [o.success for o in _run(Votes(3, weighted=True), strong)] == [
        True,
        True,
        True,
        False,
        False,
    ]


def test_adaptive_votes_stop_where_the_rule_says(banks: tuple[list[Record], ...]) -> None:
    strong, _ = banks
    window = AdaptiveVotes(WindowStop(window=2, max_samples=5), "window 2")
    assert [window.drawn(r) for r in strong] == [2, 3, 3, 4, 3]
    out = _run(window, strong)
    # t3 stops at X, W, R, R: R leads 2 to 1.
    assert [o.success for o in out] == [True, True, False, True, False]
    assert [round(o.seconds, 6) for o in out] == [2.5, 3.1, 3.1, 3.8, 3.1]
    confident = AdaptiveVotes(ConfidenceStop(threshold=0.9, max_samples=5), "p_low≥0.9")
    assert [confident.drawn(r) for r in strong] == [1, 5, 5, 5, 1]
    assert [o.success for o in _run(confident, strong)] == [True, True, False, False, True]


def test_confident_single_falls_back_to_a_vote(banks: tuple[list[Record], ...]) -> None:
    strong, _ = banks
    out = _run(ConfidentSingle(0.5, fallback_k=3), strong)
    assert [o.success for o in out] == [True, True, False, False, True]
    assert [o.calls for o in out] == [1, 3, 3, 3, 1]
    assert [round(o.seconds, 6) for o in out] == [2.0, 3.1, 3.1, 3.1, 2.0]


def test_cascade_escalates_before_using_a_doubtful_weak_call(
    banks: tuple[list[Record], ...],
) -> None:
    strong, weak = banks
    out = _run(Cascade(0.5, "p_low", 1, 1), weak, strong)
    # Weak p_low: 0.8 0.9 0.2 0.7 0.1; t1 is confidently wrong and is accepted.
    assert [o.escalated for o in out] == [False, False, True, False, True]
    assert [o.success for o in out] == [True, False, True, True, True]
    assert [o.seconds for o in out] == [1.0, 1.0, 3.0, 1.0, 3.0]
    assert [o.calls for o in out] == [1, 1, 2, 1, 2]
    assert out[2].tokens == 220
    agree = _run(Cascade(0.9, "agreement", 3, 3), weak, strong)
    assert [o.escalated for o in agree] == [False, False, True, True, True]
    assert [o.success for o in agree] == [True, False, False, False, False]
    assert agree[2].seconds == pytest.approx(1.4 + 3.1) and agree[2].calls == 6
    with pytest.raises(ConfigurationError, match="weak and strong"):
        Cascade(0.5).replay([strong[0]])


def test_winner_and_bad_settings() -> None:
    assert winner([None, "a", "b", "b"]) == (2, 0.5)
    assert winner([None, None]) == (0, 0.0)
    assert winner(["a", "b"], [0.2, 0.6]) == (1, pytest.approx(0.75))
    with pytest.raises(ConfigurationError, match="tau"):
        ConfidentSingle(1.5)
    with pytest.raises(ConfigurationError, match="k"):
        Votes(0)


def test_a_strategy_needs_enough_samples(banks: tuple[list[Record], ...]) -> None:
    strong, _ = banks
    with pytest.raises(ConfigurationError, match="needs 7 samples"):
        Votes(7).replay([strong[0]])


def test_a_fixed_threshold_accepts_what_reaches_it(banks: tuple[list[Record], ...]) -> None:
    strong, _ = banks
    steps = run_stream([StreamItem(r, "all") for r in strong], FixedThreshold(0.5))
    assert [s.accepted for s in steps] == [True, False, False, False, True]
    summary = summarise_steps(steps, alpha=0.1)["overall"]
    assert summary["coverage"] == pytest.approx(0.4)
    assert summary["accepted_error"] == 0.0 and summary["gap_to_alpha"] == pytest.approx(-0.1)


def test_the_risk_controller_moves_after_each_accepted_verdict(
    banks: tuple[list[Record], ...],
) -> None:
    _, weak = banks
    pid = ConformalPID(0.2, 0.0, 0.1, 0.0, start=0.5)
    steps = run_stream([StreamItem(r, "all") for r in weak], pid)
    # Accept ok (-0.02), accept wrong (+0.08), reject, accept ok (-0.02), reject.
    assert [round(s.threshold, 6) for s in steps] == [0.5, 0.48, 0.56, 0.56, 0.54]
    assert [s.accepted for s in steps] == [True, True, False, True, False]
    assert [s.wrong for s in steps] == [False, True, False, False, False]
    assert summarise_steps(steps, 0.2)["overall"]["accepted_error"] == pytest.approx(1 / 3)
    assert rolling_error(steps, 2) == [0.0, 0.5, 0.5, 0.5, 0.5]


def test_the_shifted_stream_and_the_tuned_threshold(banks: tuple[list[Record], ...]) -> None:
    strong, weak = banks
    items, description = shifted_stream(strong, weak)
    # Strong first-sample accuracy is 1 on single, parallel and multi_turn: the two first
    # by name among the ties are the easy families; one task leads (5 // 3).
    assert description["easy_families"] == ["multi_turn", "parallel"]
    assert [i.record.task_id.split("-")[1] for i in items] == [
        "parallel",
        "single",
        "choose",
        "irrelevance",
        "multi_turn",
    ]
    assert [i.record.model for i in items] == ["qwen2.5-coder-0.5b"] * 3 + ["smollm2-135m"] * 2
    assert description["model_switch_at"] == 3
    plain = [StreamItem(r, "all") for r in strong]
    assert choose_threshold(plain, 0.0, [0.0, 0.5, 0.95]) == 0.5
    assert choose_threshold(plain, 0.5, [0.0, 0.5, 0.95]) == 0.0


def test_calibration_readings_from_the_bank(banks: tuple[list[Record], ...]) -> None:
    strong, _ = banks
    readings = bank_readings(strong)
    assert [r.success for r in readings] == [True, False, True, False, True]
    assert readings[1].sensors["agreement@3"] == pytest.approx(1 / 3)
    assert readings[3].sensors["agreement@5"] == 0.0  # an unparsed first sample
    assert readings[0].sensors["p_low_x_agreement@5"] == pytest.approx(0.9)
    assert readings[3].sensors["p_low"] is None


def _one_sample(i: int, family: str, p: float, ok: bool, model: str = "strong") -> Record:
    sample = Sample(0, "k", ok, p, p, p, 10, 1.0)
    return Record(f"t{i}-{family}", family, model, (sample,))


def _two_level_stream(n: int) -> list[Record]:
    # Calls at 0.9 are wrong, calls at 1.0 right: only a threshold above 0.9 holds a low error.
    return [_one_sample(i, "single", 1.0 if i % 2 else 0.9, bool(i % 2)) for i in range(n)]


def test_gains_are_chosen_where_the_error_comes_closest_to_alpha() -> None:
    items = [StreamItem(r, "all") for r in _two_level_stream(60)]
    # A near-still integrator stays at 0.5 and accepts every wrong call (error 0.5); a fast
    # one climbs past 0.9 within a few errors.
    assert choose_gains(items, 0.1, 0.5, [(0.0, 1e-4), (0.0, 0.2)]) == (0.0, 0.2)
    with pytest.raises(ConfigurationError, match="grid"):
        choose_gains(items, 0.1, 0.5, [])


def test_the_stream_is_tuned_on_the_development_stream_when_one_is_given() -> None:
    eval_records = _two_level_stream(40)
    dev_records = _two_level_stream(30)
    report = stream_report(eval_records, None, 0.1, 10, dev=(dev_records, None))
    fixed = [k for k, r in report["runs"].items() if r["kind"] == "fixed"]
    # The development stream says 0.9 is wrong: the lowest grid threshold above it.
    assert fixed == ["fixed τ=0.95 (chosen on the development stream)"]
    assert report["runs"][fixed[0]]["overall"]["accepted_error"] == 0.0
    tuned = [k for k in report["runs"] if "gains chosen on the development stream" in k]
    # One tuned controller per form: on the threshold itself and on the level.
    assert len(tuned) == 2 and sum("on the level" in k for k in tuned) == 1
    assert report["development_stream"]["n"] == 30
    without = stream_report(eval_records, None, 0.1, 10)
    assert without["development_stream"] is None
    assert any("tuned on the first 25%" in k for k in without["runs"])


def test_abstaining_answers_with_no_call_below_its_floor(banks: tuple[list[Record], ...]) -> None:
    strong, _ = banks
    # Only the irrelevance task is right with no call.
    assert [r.abstain_ok for r in strong] == [False, False, False, True, False]
    single = _run(Votes(1), strong)
    abstaining = _run(Abstaining(Votes(1), 0.35), strong)
    # The unparsed irrelevance reply (no confidence) abstains and is right; the choose
    # task (0.3) abstains and stays wrong; the rest run their first sample.
    assert [o.success for o in single] == [True, False, True, False, True]
    assert [o.success for o in abstaining] == [True, False, True, True, True]
    assert [o.calls for o in abstaining] == [1] * 5
    # A floor above a right call's confidence costs that task.
    assert [o.success for o in _run(Abstaining(Votes(1), 0.5), strong)][2] is False
    assert Abstaining(Votes(1), 0.35).name == "single+abstain<0.35"
    with pytest.raises(ConfigurationError, match="below"):
        Abstaining(Votes(1), 1.5)


def test_the_development_bank_picks_the_settings(banks: tuple[list[Record], ...]) -> None:
    strong, _ = banks
    chosen = dev_choices(strong)
    assert set(chosen) == {"confident", "abstain"}
    # Floors 0.1 to 0.4 solve four tasks at one call each: the first of them is kept.
    assert chosen["abstain"] == "single+abstain<0.1"
    assert chosen["confident"].startswith("confident[")


def test_the_lead_table_replays_the_banks_it_finds(synthetic_banks: tuple[Path, Path]) -> None:
    from closedloop_bench.tools._lead import FALLBACK, lead_report

    lead = lead_report(synthetic_banks[0].parent)
    # No development bank beside the eval bank: the fixed defaults, said as such.
    assert lead["settings"] == FALLBACK and "no development bank" in lead["settings_source"]
    names = [r["name"] for r in lead["rows"]]
    assert names == ["single", "votes@5", FALLBACK["confident"], FALLBACK["abstain"]]
    assert lead["n"] == 5 and lead["rows"][0]["success"] == 3
    with pytest.raises(ConfigurationError, match="not found"):
        lead_report(synthetic_banks[0].parent / "nowhere")
