"""Agents on tools from real MCP servers the tests start, over stdio and streamable HTTP.

The servers are small ones written for the tests (``mcp_servers/``): a shop built with
the SDK (one of its tools kills the process mid-call) and a hand-written one that breaks
the protocol. The model is scripted, so each test costs its server starts, not a model.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from typing import Any

import pytest

from closedloop import Agent, Runtime, ToolError
from closedloop.agent import HaltReason, RunLimits
from closedloop.feedback import CircuitBreaker, CircuitState
from closedloop.integrations import McpServer, mcp_server
from closedloop.models import FunctionModel, ScriptedModel
from closedloop.perception import EMPTY_MEANING
from closedloop.policy import RetryPolicy, retry_if_exception_type, stop_after_attempt, wait_fixed

from .conftest import BROKEN_SERVER, SHOP_SERVER, HttpServer, PidFile

# The shop server imports the SDK's server side: starting it takes seconds, so its tests are
# marked ``integration``. The hand-written broken server starts in a fraction of one.
slow = pytest.mark.integration


def call(tool: str, **arguments: Any) -> dict[str, Any]:
    return {"tool": tool, "arguments": arguments}


def final(answer: str) -> dict[str, Any]:
    return {"final": answer}


def shop(pidfile: PidFile, **options: Any) -> McpServer:
    return mcp_server([sys.executable, str(SHOP_SERVER), "--pidfile", str(pidfile.path)], **options)


@pytest.fixture(scope="module")
def shop_pids(tmp_path_factory: pytest.TempPathFactory) -> PidFile:
    return PidFile(tmp_path_factory.mktemp("mcp-shop") / "pids")


@pytest.fixture(scope="module")
def listed_shop(shop_pids: PidFile) -> McpServer:
    """One shop server whose listing is read once for the module (a start saved per test)."""
    server = shop(shop_pids)
    server.tools()
    return server


def agent_on(tools: list[Any], *answers: object) -> Agent:
    return Agent(ScriptedModel(list(answers)), tools=tools, limits=RunLimits(max_steps=len(answers) + 1, stop=None), runtime=Runtime(trace=False))  # fmt: skip


def observations(result: Any) -> list[dict[str, Any]]:
    return [r.observation for r in result.steps if r.observation is not None]


# --- the tools and their answers ---------------------------------------------------------


@slow
def test_a_stdio_server_becomes_tools_and_run_sync_reads_their_answers(
    listed_shop: McpServer, shop_pids: PidFile
) -> None:
    server = listed_shop
    started = len(shop_pids.pids())
    agent = agent_on(
        [server],
        call("lookup", city="Paris"),
        call("search", prefix="zz"),
        call("note", text="hello"),
        final("18.5 C in Paris"),
    )
    lookup = agent.tools["lookup"]
    # The MCP tool's input schema is the loop's schema for it.
    assert lookup.parameters["properties"]["city"]["type"] == "string"
    assert lookup.parameters["required"] == ["city"]
    assert lookup.description == "The weather in a city."
    result = agent.run_sync("What is the weather in Paris?")
    assert result.halt_reason is HaltReason.FINAL and result.success, result.message
    found, none, noted = observations(result)
    assert found["status"] == "ok" and found["confidence"] == 1.0
    assert found["value"] == {"city": "Paris", "temp_c": 18.5, "sky": "cloudy"}
    assert none["status"] == "empty" and none["value"] == [] and none["meaning"] == EMPTY_MEANING
    assert noted["status"] == "ok" and noted["value"] == "noted: hello"
    # The run is over: its connection is closed and the server it started has ended.
    assert len(shop_pids.pids()) == started + 1 and shop_pids.alive() == []
    assert server.connections()["leases"] == 0


@slow
def test_effect_classes_come_from_read_only_hints_or_the_users_declaration(
    pidfile: PidFile,
) -> None:
    server = shop(pidfile, effects={"note": "overwritable"}, prefix="shop_")
    effects = {t.name: t.effect.value for t in server.tools()}
    assert effects == {
        "shop_lookup": "recomputable",  # readOnlyHint
        "shop_search": "recomputable",
        "shop_place_order": "irreversible",  # no read-only hint, nothing declared: the default
        "shop_note": "overwritable",  # declared
        "shop_fail": "recomputable",
        "shop_slow": "recomputable",
        "shop_crash": "recomputable",
    }
    assert pidfile.alive() == []


@slow
async def test_an_irreversible_tool_goes_through_the_effect_ledger(
    listed_shop: McpServer,
) -> None:
    server = listed_shop
    agent = agent_on([server], call("place_order", item="apple", quantity=2), final("ordered"))
    result = await agent.run("Order two apples.")
    assert result.success, result.message
    (placed,) = observations(result)
    assert placed["value"] == {"order": 1, "item": "apple", "quantity": 2}
    ledger = await agent.store.record_list("ledger")
    assert [(r.value["action"], r.value["effect"], r.value["status"]) for r in ledger] == [
        ("place_order", "irreversible", "committed")
    ]


@slow
async def test_an_irreversible_tool_that_refuses_leaves_a_failed_effect(
    listed_shop: McpServer,
) -> None:
    agent = agent_on([listed_shop], call("place_order", item="apple", quantity=0), final("no"))
    result = await agent.run("Order no apples.")
    (refused,) = observations(result)
    assert refused["status"] == "error" and "quantity must be positive" in refused["error"]
    (record,) = await agent.store.record_list("ledger")
    # The tool said it did not do it: not pending, so a corrected call may be made.
    assert record.value["status"] == "failed"


@slow
async def test_an_error_result_is_a_failed_observation_the_model_reads(
    listed_shop: McpServer,
) -> None:
    server = listed_shop
    agent = agent_on([server], call("fail", reason="the shop is closed"), final("closed"))
    result = await agent.run("Is the shop open?")
    assert result.success
    (failed,) = observations(result)
    assert failed["status"] == "error" and failed["confidence"] == 0.0
    assert "the shop is closed" in failed["error"]
    # A failed call is the tool's answer, not a fault of the server.
    assert server.breaker.failures == 0


@slow
async def test_a_server_and_a_function_work_side_by_side_over_http(
    http_shop: HttpServer,
) -> None:
    def double(x: int) -> int:
        """Twice x."""
        return 2 * x

    server = mcp_server(http_shop.url, timeout_s=20)
    agent = agent_on(
        [server, double], call("lookup", city="paris"), call("double", x=4), final("ok")
    )
    assert set(agent.tools) >= {"lookup", "place_order", "double"}
    result = await agent.run("Weather and a sum.")
    assert result.success, result.message
    weather, doubled = observations(result)
    assert weather["value"]["temp_c"] == 18.5 and doubled["value"] == 8
    assert server.connections()["leases"] == 0


# --- faults: observed, never a crash ------------------------------------------------------


@slow
def test_a_server_that_dies_mid_call_is_an_observed_fault(
    listed_shop: McpServer, shop_pids: PidFile
) -> None:
    server = listed_shop
    started = len(shop_pids.pids())
    agent = agent_on([server], call("crash"), call("lookup", city="Paris"), final("recovered"))
    result = agent.run_sync("Crash it, then ask again.")
    assert result.halt_reason is HaltReason.FINAL and result.success, result.message
    crashed, after = observations(result)
    assert crashed["status"] == "error" and crashed["confidence"] == 0.0
    assert "broke during crash" in crashed["error"]
    # The next call started the server again and was answered.
    assert after["status"] == "ok" and after["value"]["city"] == "Paris"
    # the run's first server, the one reconnect its retry policy allows, the restart
    assert len(shop_pids.pids()) == started + 3 and shop_pids.alive() == []


@slow
def test_an_http_server_that_is_gone_is_an_observed_fault(tmp_path: Any) -> None:
    http = HttpServer(tmp_path / "server.log")
    http.wait_until_it_answers()
    try:
        server = mcp_server(http.url, connect_timeout_s=20)
        agent = agent_on([server], call("lookup", city="Paris"), call("crash"), final("gone"))
        server.tools()
        result = agent.run_sync("Use the server until it is gone.")
    finally:
        http.stop()
    assert result.success, result.message
    answered, died = observations(result)
    assert answered["status"] == "ok"
    assert died["status"] == "error" and "could not be started or reached" in died["error"]


def broken(**options: Any) -> McpServer:
    return mcp_server([sys.executable, str(BROKEN_SERVER)], **options)


async def test_malformed_answers_are_failed_observations_and_empty_is_no_match() -> None:
    server = broken()
    agent = agent_on([server], call("garbled"), call("drifted"), call("empty"), final("x"))
    result = await agent.run("Try every tool.")
    assert result.success, result.message
    garbled, drifted, empty = observations(result)
    assert garbled["status"] == "error" and "malformed result" in garbled["error"]
    assert drifted["status"] == "error" and "malformed result" in drifted["error"]
    assert empty["status"] == "empty" and empty["error"] is None


async def test_a_server_that_never_answers_times_out_at_the_servers_timeout() -> None:
    server = broken(timeout_s=0.5)
    agent = agent_on([server], call("silent"), final("x"))
    assert agent.tools["silent"].fixed_timeout  # the loop's scheduled timeout steps aside
    result = await agent.run("Wait for it.")
    (silent,) = observations(result)
    assert silent["status"] == "timeout" and "0.5 s" in silent["meaning"]


async def test_an_irreversible_call_that_may_have_happened_stays_pending() -> None:
    server = broken()  # ``bye`` has no annotations: irreversible by default
    agent = agent_on([server], call("bye"), final("unsure"))
    result = await agent.run("Say bye.")
    (bye,) = observations(result)
    assert bye["status"] == "error" and "may or may not have taken effect" in bye["meaning"]
    (record,) = await agent.store.record_list("ledger")
    assert record.value["status"] == "pending"
    assert record.value["attempts"] == 1  # never repeated: it might have run


async def test_the_servers_retry_policy_reconnects_and_waits_through_the_injected_sleep() -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    policy = RetryPolicy(
        stop=stop_after_attempt(3),
        wait=wait_fixed(5.0),
        retry=retry_if_exception_type(ToolError),
    )
    server = broken(retry=policy, sleep=sleep)
    server.tools()
    async with server.run_scope():
        died = await server.call("bye")  # the server exits on every try
        assert server.connections()["opened"] == 3  # each retry started it again
        after = await server.call("empty")
    assert died.status == "error" and "broke during bye" in (died.error or "")
    assert slept == [5.0, 5.0]
    assert after.status == "empty"


async def test_the_circuit_breaker_stops_calling_a_server_that_keeps_failing() -> None:
    breaker = CircuitBreaker("broken", failure_threshold=2, recovery_timeout_s=60)
    server = broken(breaker=breaker)
    server.tools()
    async with server.run_scope():  # one connection for all three calls
        first = await server.call("garbled")
        second = await server.call("garbled")
        assert breaker.state is CircuitState.OPEN
        third = await server.call("empty")  # would answer, but is not even tried
    assert "malformed" in (first.error or "") and "malformed" in (second.error or "")
    assert third.status == "error" and "circuit breaker" in third.meaning


# --- the connection's life: closed on every way out -----------------------------------------


@slow
def test_a_run_ending_in_error_closes_the_server(
    listed_shop: McpServer, shop_pids: PidFile
) -> None:
    started = len(shop_pids.pids())

    def model_fn(messages: Any, info: Any) -> Any:
        if len(model.calls) > 1:
            raise RuntimeError("the model broke")
        return call("lookup", city="Paris")

    model = FunctionModel(model_fn)
    agent = Agent(
        model, tools=[listed_shop], runtime=Runtime(trace=False), limits=RunLimits(stop=None)
    )
    result = agent.run_sync("Look, then break.")
    assert result.halt_reason is HaltReason.ERROR
    assert len(shop_pids.pids()) == started + 1 and shop_pids.alive() == []


@slow
async def test_a_cancelled_run_closes_the_server(
    listed_shop: McpServer, shop_pids: PidFile
) -> None:
    started = len(shop_pids.pids())
    cancel = asyncio.Event()

    def model_fn(messages: Any, info: Any) -> Any:
        if len(model.calls) > 1:
            cancel.set()  # the caller gives up while the run is under way
        return call("lookup", city="Paris")

    model = FunctionModel(model_fn)
    agent = Agent(
        model, tools=[listed_shop], runtime=Runtime(trace=False), limits=RunLimits(stop=None)
    )
    result = await agent.run("Look forever.", cancel=cancel)
    assert result.halt_reason is HaltReason.CANCELLED
    assert len(shop_pids.pids()) == started + 1 and shop_pids.alive() == []


@slow
def test_walking_away_from_iter_sync_closes_the_server(
    listed_shop: McpServer, shop_pids: PidFile
) -> None:
    server = listed_shop
    started = len(shop_pids.pids())
    agent = agent_on([server], call("lookup", city="Paris"), call("search", prefix="a"), final("x"))
    steps = agent.iter_sync("Step through it.")
    first = next(steps)  # each step is its own task: the connection must not care
    assert first.observation is not None and first.observation["status"] == "ok"
    second = next(steps)
    assert second.observation is not None and second.observation["value"] == ["apple", "apricot"]
    steps.close()
    assert len(shop_pids.pids()) == started + 1 and shop_pids.alive() == []
    assert server.connections()["leases"] == 0


@slow
async def test_concurrent_runs_in_one_loop_share_one_connection(
    listed_shop: McpServer, shop_pids: PidFile
) -> None:
    started = len(shop_pids.pids())
    agents = [
        agent_on(
            [listed_shop], call("lookup", city="Paris"), call("search", prefix="b"), final("x")
        )
        for _ in range(3)
    ]
    results = await asyncio.gather(*(a.run("Paris?") for a in agents))
    assert [r.success for r in results] == [True, True, True]
    assert [observations(r)[1]["value"] for r in results] == [["banana"]] * 3
    assert len(shop_pids.pids()) == started + 1 and shop_pids.alive() == []


@slow
def test_runs_in_threads_each_get_their_own_connection(
    listed_shop: McpServer, shop_pids: PidFile
) -> None:
    server = listed_shop
    started = len(shop_pids.pids())
    results: list[Any] = []

    def one() -> None:
        fresh = Agent(ScriptedModel([call("lookup", city="Paris"), final("x")]), tools=[server], runtime=Runtime(trace=False), limits=RunLimits(stop=None))  # fmt: skip
        results.append(fresh.run_sync("Paris?"))

    threads = [threading.Thread(target=one) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert [r.success for r in results] == [True, True]
    assert len(shop_pids.pids()) == started + 2 and shop_pids.alive() == []  # one per loop


# --- servers that cannot start ------------------------------------------------------------


def test_a_server_that_cannot_start_fails_naming_its_spec() -> None:
    dying = [sys.executable, "-c", "import sys; sys.stderr.write('no ' + 'config'); sys.exit(2)"]
    with pytest.raises(ToolError) as caught:
        Agent(ScriptedModel([]), tools=[mcp_server(dying)], runtime=Runtime(trace=False))
    assert "could not be started" in str(caught.value) and "-c" in str(caught.value)
    assert "no config" in str(caught.value)  # its stderr, quoted
    with pytest.raises(ToolError, match="no-such-mcp-command"):
        mcp_server("no-such-mcp-command --flag").tools()
