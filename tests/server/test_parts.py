"""The service's parts on their own: token buckets, scoped stores, the registry, log redaction."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from closedloop import ConfigurationError, Runtime, SessionNotFoundError, StaleStateError
from closedloop.agent import Agent, ContextSettings, Task
from closedloop.feedback import MemoryStore, SQLiteStore
from closedloop.models import FunctionModel
from closedloop.server import (
    AgentContext,
    AgentRegistry,
    RateLimit,
    RateLimiter,
    ScopedStore,
    TokenBucket,
    open_store,
)
from closedloop.server._http import RedactingFilter, install_log_redaction, readable_errors
from closedloop.server._ratelimit import retry_after_header
from closedloop.server._registry import reference_agents

from .conftest import ManualClock, add

# --- token buckets -------------------------------------------------------------------------


@given(
    capacity=st.integers(1, 50),
    rate=st.floats(0.01, 100.0),
    gaps=st.lists(st.floats(0.0, 10.0), min_size=1, max_size=60),
)
def test_a_bucket_never_lets_through_more_than_burst_plus_refill(
    capacity: int, rate: float, gaps: list[float]
) -> None:
    clock = ManualClock(0.0)
    bucket = TokenBucket(capacity, rate, clock=clock)
    allowed = 0
    for gap in gaps:
        clock.advance(gap)
        wait = bucket.take()
        assert wait >= 0.0
        if wait == 0.0:
            allowed += 1
        else:
            # The wait it names is enough: after it, exactly one more request fits.
            assert bucket.tokens < 1.0
    assert allowed <= capacity + rate * clock.now + 1e-9
    assert 0.0 <= bucket.tokens <= capacity


def test_a_refused_request_costs_nothing_and_the_wait_is_exact() -> None:
    clock = ManualClock(0.0)
    bucket = TokenBucket(2, 0.5, clock=clock)
    assert bucket.take() == 0.0 and bucket.take() == 0.0
    assert bucket.take() == pytest.approx(2.0)
    assert bucket.take() == pytest.approx(2.0)  # the refusal did not spend anything
    clock.advance(2.0)
    assert bucket.take() == 0.0
    clock.now = -100.0  # a clock stepping back neither mints tokens nor jams the bucket
    assert bucket.take() > 0.0
    clock.now = -98.0
    assert bucket.take() == 0.0


def test_the_limiter_keeps_a_bucket_per_key_and_forgets_the_oldest() -> None:
    clock = ManualClock(0.0)
    limiter = RateLimiter(RateLimit(rate_per_s=1.0, burst=1), clock=clock, max_keys=2)
    assert limiter.check("a") == 0.0 and limiter.check("b") == 0.0
    assert limiter.check("a") > 0.0
    assert limiter.check("c") == 0.0  # "b" is dropped (least recently used)
    assert limiter.check("b") == 0.0  # ... and starts full again
    assert retry_after_header(0.01) == "1" and retry_after_header(2.2) == "3"
    with pytest.raises(ConfigurationError, match="rate_per_s"):
        RateLimit(rate_per_s=0)
    with pytest.raises(ConfigurationError, match="burst"):
        RateLimit(burst=0)


# --- scoped stores -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_scoped_stores_cannot_see_each_other(kind: str, tmp_path: Path) -> None:
    shared = MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "s.db")
    a, b = ScopedStore(shared, "key_a"), ScopedStore(shared, "key_b")
    created = await a.create("sess", {"x": 1})
    assert created.session_id == "sess"
    with pytest.raises(SessionNotFoundError):
        await b.get("sess")
    await b.create("sess", {"x": 2})
    assert (await a.get("sess")).data["x"] == 1 and (await b.get("sess")).data["x"] == 2
    updated = await a.update("sess", lambda s: {"x": s.data["x"] + 10})
    assert updated.session_id == "sess" and updated.data["x"] == 11
    put = await a.put("sess", {"x": 12}, expected_version=updated.version)
    assert put.version == updated.version + 1
    record = await a.record_put("runs", "k1", {"v": 1})
    assert record.namespace == "runs"
    assert await b.record_get("runs", "k1") is None
    assert [r.key for r in await a.record_list("runs")] == ["k1"]
    assert await b.record_list("runs") == []
    assert await b.record_delete("runs", "k1") is False
    assert await a.record_delete("runs", "k1") is True
    assert await b.delete("sess") is True
    assert (await a.get("sess")).data["x"] == 12
    await a.close()  # does not close the shared store
    assert (await shared.get("key_a:sess")).data["x"] == 12
    await shared.close()
    with pytest.raises(ConfigurationError):
        ScopedStore(shared, "bad:scope")


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_a_scoped_save_with_records_is_the_shared_stores_one_write(
    kind: str, tmp_path: Path
) -> None:
    shared = MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "s.db")
    a = ScopedStore(shared, "key_a")
    await a.create("sess", {"x": 1})
    written = await a.record_put_many([("ledger", "e1", {"n": 1}, 0)])
    assert [(r.namespace, r.key, r.version) for r in written] == [("ledger", "e1", 1)]
    commits = shared.stats.commits
    saved = await a.put_with_records(
        "sess",
        {"x": 2},
        expected_version=1,
        records=[("hints", "h", {"n": 2})],
        writes=[("ledger", "e1", {"n": 3}, 1)],
    )
    assert saved.session_id == "sess" and saved.data["x"] == 2
    assert (await shared.get("key_a:sess")).data["x"] == 2
    hint = await shared.record_get("key_a:hints", "h")
    entry = await shared.record_get("key_a:ledger", "e1")
    assert hint is not None and hint.value["n"] == 2
    assert entry is not None and (entry.version, entry.value["n"]) == (2, 3)
    if kind == "sqlite":
        assert shared.stats.commits == commits + 1  # one transaction for all of it
    with pytest.raises(StaleStateError):  # a lost compare-and-set writes none of it
        await a.put_with_records(
            "sess", {"x": 9}, expected_version=1, records=[("hints", "lost", {})]
        )
    assert await shared.record_get("key_a:hints", "lost") is None
    await shared.close()


async def test_store_urls(tmp_path: Path) -> None:
    assert isinstance(open_store("memory://"), MemoryStore)
    store = open_store(f"sqlite://{tmp_path}/x.db")
    assert isinstance(store, SQLiteStore) and Path(store.path) == tmp_path / "x.db"
    assert store.synchronous == "FULL"
    fast = open_store(f"sqlite://{tmp_path}/y.db?synchronous=normal")
    assert isinstance(fast, SQLiteStore) and fast.synchronous == "NORMAL"
    assert store.inline_reads and fast.inline_reads
    worker = open_store(f"sqlite://{tmp_path}/w.db?inline_reads=false")
    assert isinstance(worker, SQLiteStore) and not worker.inline_reads
    await worker.close()
    with pytest.raises(ConfigurationError, match="inline_reads must be true or false"):
        open_store(f"sqlite://{tmp_path}/z.db?inline_reads=maybe")
    with pytest.raises(ConfigurationError, match="store="):
        open_store("postgres://nope")
    with pytest.raises(ConfigurationError, match="unknown options"):
        open_store(f"sqlite://{tmp_path}/z.db?cache=big")
    with pytest.raises(ConfigurationError, match="FULL or NORMAL"):
        open_store(f"sqlite://{tmp_path}/z.db?synchronous=OFF")
    await store.close()
    await fast.close()


# --- the registry --------------------------------------------------------------------------


def _ctx(store: Any = None, **kw: Any) -> AgentContext:
    return AgentContext(
        model=FunctionModel(lambda m, i: "{}"),
        store=store if store is not None else MemoryStore(),
        session_id="ses_0000000000000000",
        run_id="run_0000000000000000",
        **kw,
    )


async def test_the_registry_builds_agents_on_the_callers_store() -> None:
    registry = AgentRegistry()
    registry.register("calc", lambda ctx: Agent(ctx.model, [add], runtime=Runtime(store=ctx.store)))

    async def slow(ctx: AgentContext) -> Agent:
        return Agent(
            ctx.model,
            [add],
            context=ContextSettings(required_fields=["total"]),
            runtime=Runtime(store=ctx.store),
        )

    registry.register("slow", slow, description="async factory")
    assert [s.name for s in registry] == ["calc", "slow"] and "calc" in registry
    ctx = _ctx()
    agent = await registry.build("slow", ctx)
    assert isinstance(agent, Agent) and agent.store is ctx.store
    task = registry.task_for("slow", "Add 1 and 2.", ctx, agent)
    assert isinstance(task, Task) and task.task_id == ctx.run_id
    assert [f.name for f in task.required_fields] == ["total"]
    with pytest.raises(ConfigurationError, match="already registered"):
        registry.register("calc", lambda ctx: None)
    registry.register("calc", lambda ctx: Agent(ctx.model, [add]), replace=True)
    with pytest.raises(ConfigurationError, match="another store"):
        await registry.build("calc", ctx)
    registry.register("junk", lambda ctx: object())
    with pytest.raises(ConfigurationError, match="not an Agent or a runner"):
        await registry.build("junk", ctx)
    with pytest.raises(ConfigurationError, match="known: calc, junk, slow"):
        registry.get("nobody")
    with pytest.raises(ConfigurationError, match="name="):
        registry.register("Bad Name", lambda ctx: None)
    assert registry.unregister("junk") and not registry.unregister("junk")


def test_reference_agents_present_are_listed_and_need_the_world() -> None:
    specs = reference_agents()
    names = [s.name for s in specs]
    for name in names:
        assert name in ("weather", "flight", "meeting", "report")
    assert names == sorted(names)
    for spec in specs:
        assert spec.source == "reference" and spec.needs_world
    weather = Path(__file__).parents[2] / "bench/src/closedloop_bench/reference/weather.py"
    if weather.exists():
        assert "weather" in names


def _plugin(tmp_path: Path, entries: str, module: str, name: str) -> None:
    """An installed distribution on ``sys.path``: its metadata and one module."""
    info = tmp_path / "tidy_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tidy-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[closedloop.agents]\n{entries}\n")
    (tmp_path / f"{name}.py").write_text(module)


def test_the_registry_finds_agents_through_entry_points_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A distribution the library has never heard of: only its metadata names it.
    _plugin(
        tmp_path,
        "calc = tidy_plugin_agents:build_calc\n"
        "broken = tidy_plugin_agents_missing:build\n"
        "Bad Name = tidy_plugin_agents:build_calc",
        '''"""Adds numbers.\n\nMore text."""\n\ndef build_calc(model, *, store):\n    return (model, store)\n''',
        "tidy_plugin_agents",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    specs = {s.name: s for s in reference_agents()}
    assert "broken" not in specs and "Bad Name" not in specs
    calc = specs["calc"]
    assert (calc.description, calc.source, calc.needs_world) == (
        "Adds numbers.",
        "reference",
        False,
    )
    store = MemoryStore()
    ctx = AgentContext(
        model=FunctionModel(lambda m, o: ""), store=store, session_id="s", run_id="r"
    )
    assert calc.factory(ctx) == (ctx.model, store)
    assert "calc" in AgentRegistry.with_reference()


def test_an_entry_point_that_names_no_callable_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _plugin(tmp_path, "odd = tidy_plugin_values:VALUE", "VALUE = 3\n", "tidy_plugin_values")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigurationError, match=r"closedloop\.agents:odd"):
        reference_agents()


async def test_an_agent_that_needs_the_world_is_refused_without_one() -> None:
    registry = AgentRegistry.with_reference()
    for spec in registry:
        with pytest.raises(ConfigurationError, match="--world"):
            await registry.build(spec.name, _ctx())


# --- logs and errors -----------------------------------------------------------------------


def test_log_records_are_redacted_before_handlers_see_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    install_log_redaction()
    install_log_redaction()  # idempotent
    logger = logging.getLogger("closedloop.server")
    assert sum(isinstance(f, RedactingFilter) for f in logger.filters) == 1
    caplog.set_level(logging.INFO, logger="closedloop.server")
    logger.info("GET /x?api_key=%s with %s", "hunter2secret", "Bearer abcdefgh12345678")
    message = caplog.records[-1].getMessage()
    assert "hunter2secret" not in message and "abcdefgh12345678" not in message
    assert "[redacted]" in message


def test_validation_errors_never_carry_the_input() -> None:
    problems = readable_errors(
        [
            {"loc": ("body", "task"), "type": "missing", "msg": "Field required", "input": {}},
            {
                "loc": ("body", 7),
                "type": "json_invalid",
                "msg": "JSON decode error",
                "input": "s3cret",
            },
            {"loc": ("body", "x"), "type": "extra_forbidden", "msg": "Extra", "input": "s3cret"},
        ]
    )
    assert problems == [
        {"where": "body.task", "problem": "is required"},
        {"where": "body", "problem": "is not valid JSON (error near character 7)"},
        {"where": "body.x", "problem": "is not a known field"},
    ]


def test_a_local_world_without_a_provider_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import typer

    from closedloop.cli import _serve

    monkeypatch.setattr(_serve, "entry_points", lambda **_: [])
    with pytest.raises(typer.BadParameter, match="pip install closedloop-bench"):
        _serve._local_world()
