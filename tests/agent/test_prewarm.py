"""Pre-warmed f_est, disturbance fingerprints with a TTL, and notes in the trace."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from closedloop.agent import ControlConfig, FingerprintCache, MemoryTrace, Runtime, prewarm
from closedloop.agent._control import ControllerBank, TaskControl
from closedloop.agent._prewarm import query_features, query_key, seed_history, trace_with_notes
from closedloop.control import Protocol
from closedloop.feedback import MemoryStore, SQLiteStore

from .conftest import FakeClock, add, call, final, make_agent, scripted


async def test_a_fingerprint_lives_in_the_store_until_its_ttl(tmp_path: Path) -> None:
    clock = FakeClock()
    store = SQLiteStore(tmp_path / "state.db")
    try:
        cache = FingerprintCache(store, ttl_s=60.0, clock=clock)
        assert await cache.recall("k") is None
        await cache.remember("k", 0.6, 0.2)
        await cache.remember("k", 0.2, 0.4)
        found = await cache.recall("k")
        assert found is not None and found.runs == 2
        assert found.f_est == pytest.approx(0.4) and found.first_error == pytest.approx(0.3)
        # a second cache on the same file (a later process) reuses it
        again = FingerprintCache(SQLiteStore(tmp_path / "state.db"), ttl_s=60.0, clock=clock)
        assert (await again.recall("k")) == found
        await again.store.close()
        clock.advance(61.0)
        assert await cache.recall("k") is None
    finally:
        await store.close()


async def test_a_damaged_fingerprint_is_no_fingerprint() -> None:
    store = MemoryStore()
    await store.record_put("fingerprints", "k", {"f_est": "high"})
    assert await FingerprintCache(store).recall("k") is None


async def test_the_query_fingerprint_wins_over_the_family() -> None:
    clock = FakeClock()
    cache = FingerprintCache(MemoryStore(), clock=clock)
    assert (await prewarm(cache, query="q", family="flight", tools=[])).f_est is None
    await cache.remember("family:flight", 0.3, 0.1)
    family = await prewarm(cache, query="q", family="flight", tools=[])
    assert family.f_est == pytest.approx(0.3) and "family" in family.source
    await cache.remember(query_key("q"), 0.7, 0.1)
    own = await prewarm(cache, query="  Q ", family="flight", tools=[])
    assert own.f_est == pytest.approx(0.7) and "query" in own.source
    assert "0.70" in own.note()


async def test_tool_history_blends_in_and_seeds_the_run_pids() -> None:
    cache = FingerprintCache(MemoryStore())
    history = MemoryStore()
    await history.record_put("control", "search_flights", {"errors": [0.5, 0.9, "x", 0.7]})
    await cache.remember("family:flight", 0.3, 0.0)
    warm = await prewarm(
        cache, query="q", family="flight", tools=["search_flights", "book"], history=history
    )
    assert warm.tool_errors == {"search_flights": (0.5, 0.9, 0.7)}
    assert warm.f_est == pytest.approx(0.5 * 0.3 + 0.5 * 0.7)
    run_store = MemoryStore()
    assert await warm.seed(run_store) == 1
    assert await seed_history(MemoryStore(), warm, window=2) == 1
    bank = ControllerBank(ControlConfig(), run_store)
    assert await bank.output("search_flights") > 0.0 and bank.warm["search_flights"] == 3


def test_a_prior_sets_the_first_protocol_until_the_eso_estimates() -> None:
    config = ControlConfig(prior_f_est=0.45, eso_min_samples=2, eso_window=4, hysteresis=0.0)
    ctl = TaskControl(config, 1.0)
    assert ctl.protocol is Protocol.DUAL_VERIFICATION and ctl.f_est == 0.45
    first = ctl.observe(0.0, 1.0, None)
    assert first.f_est == 0.45 and first.protocol is Protocol.DUAL_VERIFICATION
    second = ctl.observe(0.0, 1.0, None)  # the ESO has its own estimate now: a good run
    assert second.f_est < 0.4 and second.protocol is Protocol.NORMAL
    cold = TaskControl(ControlConfig(), 1.0)
    assert cold.protocol is Protocol.NORMAL and cold.f_est == 0.0


def test_a_human_decision_clears_the_prior() -> None:
    ctl = TaskControl(ControlConfig(prior_f_est=0.9), 1.0)
    assert ctl.protocol is Protocol.MANUAL_HANDOVER
    ctl.reset_protocol()
    assert ctl.f_est == 0.0 and ctl.protocol is Protocol.NORMAL


async def test_the_first_step_of_a_prewarmed_run_is_double_checked() -> None:
    model = scripted(call("add", a=1, b=2), final("3"), cycle=True)
    agent, _ = make_agent(model, [add], control=ControlConfig(prior_f_est=0.5))
    result = await agent.run("add 1 and 2")
    assert result.steps[0].protocol == "dual_verification"
    assert result.steps[0].usage.model_calls == 2
    cold_model = scripted(call("add", a=1, b=2), final("3"))
    cold, _ = make_agent(cold_model, [add])
    cold_result = await cold.run("add 1 and 2")
    assert cold_result.steps[0].protocol == "normal"
    assert cold_result.steps[0].usage.model_calls == 1


async def test_notes_reach_the_first_record_of_the_trace() -> None:
    inner = MemoryTrace()
    config = ControlConfig(gains=Path("/nonexistent/gains.json"), gain_key="x")
    assert config.gain_warning is not None
    sink = trace_with_notes(inner, [config.gain_warning, ""])
    agent, _ = make_agent(
        scripted(call("add", a=1, b=1), final("2")), [add], runtime=Runtime(trace=sink)
    )
    result = await agent.run("sum")
    assert inner.records[0].notes[0] == config.gain_warning
    assert all(config.gain_warning not in r.notes for r in inner.records[1:])
    assert inner.result is not None and inner.result.run_id == result.run_id


@given(st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=60))
def test_the_query_key_ignores_case_and_spacing(text: str) -> None:
    assert query_key(text) == query_key(f"  {text.upper()}  ".replace(" ", "  "))
    assert query_key(text) != query_key(text + " x")


@given(st.text(max_size=300), st.sampled_from(["flight", "report", "other"]))
def test_query_features_are_unit_values_with_a_one_hot_domain(text: str, domain: str) -> None:
    features = query_features(text, domain, ["flight", "report"])
    assert len(features) == 6 and all(0.0 <= f <= 1.0 for f in features)
    assert sum(features[:2]) == (0.0 if domain == "other" else 1.0)


async def test_an_agent_whose_gain_table_fell_back_says_so_in_its_trace() -> None:
    config = ControlConfig(gains=Path("/nonexistent/gains.json"), gain_key="x")
    agent, trace = make_agent(scripted(call("add", a=1, b=1), final("2")), [add], control=config)
    await agent.run("sum")
    assert config.gain_warning is not None
    assert trace.records[0].notes[0] == config.gain_warning


async def test_an_agent_with_a_good_gain_table_adds_no_note() -> None:
    agent, trace = make_agent(scripted(call("add", a=1, b=1), final("2")), [add])
    await agent.run("sum")
    assert all(not note.startswith("gain") for note in trace.records[0].notes)


async def test_a_finished_run_prewarms_the_next_by_query_and_by_family() -> None:
    cache = FingerprintCache(MemoryStore())
    agent, _ = make_agent(scripted(call("add", a=1, b=2), final("3")), [add])
    result = await agent.run("add 1 and 2")
    await cache.remember_run(result, query="add 1 and 2", family="math")
    same = await prewarm(cache, query=" ADD 1 and 2", family="other", tools=[])
    assert same.f_est is not None and "query fingerprint (1 runs)" in same.source
    sibling = await prewarm(cache, query="add 5 and 6", family="math", tools=[])
    assert sibling.f_est == same.f_est and "family 'math'" in sibling.source
    stranger = await prewarm(cache, query="add 5 and 6", family="other", tools=[])
    assert stranger.f_est is None
