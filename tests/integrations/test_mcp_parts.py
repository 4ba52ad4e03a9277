"""The parts of the MCP tools that need no server: specs, answers, effect classes, toolsets."""

from __future__ import annotations

import sys
from typing import Any

import jsonschema
import pytest
from mcp import types

from closedloop import Agent, ConfigurationError, Runtime
from closedloop._extras import MissingExtraError
from closedloop.agent import Tool, as_tool
from closedloop.agent._actions import action_schema
from closedloop.agent._tools import tools_by_name
from closedloop.execution import AtomicAction, EffectClass
from closedloop.integrations import McpServer, mcp_server
from closedloop.integrations._mcp_results import effect_of, result_observation
from closedloop.integrations._mcp_spec import HttpSpec, StdioSpec, parse_spec
from closedloop.models import ScriptedModel
from closedloop.perception import EMPTY_MEANING, ObservationStatus

# --- specs ---------------------------------------------------------------------------------


def test_a_command_line_is_split_like_a_shell_would() -> None:
    spec = parse_spec('python "my server.py" --port 3')
    assert spec == StdioSpec(argv=("python", "my server.py", "--port", "3"))
    assert parse_spec(["uvx", "mcp-server-fetch"], env={"A": "1"}) == StdioSpec(
        argv=("uvx", "mcp-server-fetch"), env={"A": "1"}
    )


def test_an_http_url_is_a_streamable_http_server() -> None:
    spec = parse_spec("http://127.0.0.1:8808/mcp", headers={"Authorization": "Bearer x"})
    assert spec == HttpSpec(url="http://127.0.0.1:8808/mcp", headers={"Authorization": "Bearer x"})
    assert isinstance(parse_spec("HTTPS://example.org/mcp"), HttpSpec)


@pytest.mark.parametrize(
    ("spec", "options", "words"),
    [
        ("", {}, "names no command"),
        ("   ", {}, "names no command"),
        ('python "unclosed', {}, "not a command line"),
        (42, {}, "must be a command line"),
        (["python", 3], {}, "strings only"),
        ([], {}, "names no command"),
        ("http://", {}, "needs a host"),
        ("http://localhost:99999/mcp", {}, "bad port"),
        ("python s.py", {"headers": {"a": "b"}}, "for HTTP servers only"),
        ("http://localhost/mcp", {"env": {"A": "1"}}, "stdio servers only"),
        ("python s.py", {"cwd": "/no/such/dir"}, "not a directory"),
        ("python s.py", {"env": {"A": 1}}, "str to str"),
    ],
)
def test_a_bad_spec_is_refused_naming_it(spec: Any, options: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigurationError, match=words) as caught:
        mcp_server(spec, **options)
    assert caught.value.argument in ("spec", "headers", "env", "cwd")


@pytest.mark.parametrize(
    ("options", "argument"),
    [
        ({"default_effect": "sometimes"}, "default_effect"),
        ({"effects": {"pay": "twice"}}, "effects['pay']"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"connect_timeout_s": -1}, "connect_timeout_s"),
        ({"retry": 3}, "retry"),
        ({"breaker": "open"}, "breaker"),
        ({"include": "lookup"}, "include"),
        ({"prefix": 1}, "prefix"),
    ],
)
def test_bad_options_are_refused_naming_them(options: dict[str, Any], argument: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        mcp_server("python server.py", **options)
    assert caught.value.argument == argument


def test_without_the_mcp_extra_the_error_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mcp", None)  # what an uninstalled package does
    with pytest.raises(MissingExtraError, match=r"pip install 'closedloop\[mcp\]'"):
        mcp_server("python server.py")


# --- effect classes --------------------------------------------------------------------


def hints(**values: Any) -> types.ToolAnnotations:
    return types.ToolAnnotations(**values)


@pytest.mark.parametrize(
    ("annotations", "declared", "expected"),
    [
        (hints(read_only_hint=True), {}, EffectClass.RECOMPUTABLE),
        (hints(read_only_hint=False), {}, EffectClass.IRREVERSIBLE),
        (None, {}, EffectClass.IRREVERSIBLE),
        # Hints that a write is safe to repeat come from the server: they do not count.
        (hints(idempotent_hint=True, destructive_hint=False), {}, EffectClass.IRREVERSIBLE),
        # The user's word beats the server's, both ways.
        (hints(read_only_hint=True), {"t": EffectClass.ONCE}, EffectClass.ONCE),
        (None, {"t": EffectClass.OVERWRITABLE}, EffectClass.OVERWRITABLE),
    ],
)
def test_read_only_only_when_the_server_says_so_else_the_declaration(
    annotations: Any, declared: dict[str, EffectClass], expected: EffectClass
) -> None:
    assert effect_of("t", annotations, declared, EffectClass.IRREVERSIBLE) is expected
    assert effect_of("other", None, declared, EffectClass.ONCE) is EffectClass.ONCE


# --- answers into observations -----------------------------------------------------------------


def observe(result: types.CallToolResult, schema: dict[str, Any] | None = None) -> Any:
    return result_observation(
        result, source="t", output_schema=schema, timestamp=5.0, latency_s=0.25
    )


def text(value: str) -> types.TextContent:
    return types.TextContent(text=value)


WRAPPED = {"type": "object", "properties": {"result": {"type": "array"}}, "required": ["result"]}


def test_structured_content_is_the_value_at_full_confidence() -> None:
    obs = observe(types.CallToolResult(content=[text("{}")], structured_content={"temp_c": 18}))
    assert (obs.status, obs.confidence, obs.value) == (ObservationStatus.OK, 1.0, {"temp_c": 18})
    assert obs.latency_s == 0.25 and obs.timestamp == 5.0 and obs.raw["isError"] is False


def test_an_empty_structured_result_is_no_match_not_an_error() -> None:
    for structured, schema in (({}, None), ({"result": []}, WRAPPED), ([], None)):
        obs = observe(types.CallToolResult(content=[], structured_content=structured), schema)
        assert obs.status is ObservationStatus.EMPTY, structured
        assert obs.meaning == EMPTY_MEANING and obs.error is None and obs.usable


def test_the_sdk_wrapper_of_a_list_is_taken_off_only_when_the_schema_has_it() -> None:
    result = types.CallToolResult(content=[], structured_content={"result": ["a"]})
    assert observe(result, WRAPPED).value == ["a"]
    assert observe(result, None).value == {"result": ["a"]}


def test_text_content_is_the_value_and_json_text_is_parsed() -> None:
    assert observe(types.CallToolResult(content=[text("noted"), text("twice")])).value == (
        "noted\ntwice"
    )
    assert observe(types.CallToolResult(content=[text(" [1, 2] ")])).value == [1, 2]
    blank = observe(types.CallToolResult(content=[text("  ")]))
    assert blank.status is ObservationStatus.EMPTY


def test_is_error_is_a_failed_observation_carrying_the_tools_words() -> None:
    obs = observe(types.CallToolResult(content=[text("out of stock")], is_error=True))
    assert (obs.status, obs.confidence) == (ObservationStatus.ERROR, 0.0)
    assert obs.error == "out of stock" and "out of stock" in obs.meaning
    silent = observe(types.CallToolResult(content=[], is_error=True))
    assert silent.status is ObservationStatus.ERROR and silent.error


def test_content_the_loop_cannot_read_is_partial() -> None:
    image = types.ImageContent(data="AAAA", mime_type="image/png")
    obs = observe(types.CallToolResult(content=[image]))
    assert obs.status is ObservationStatus.PARTIAL and obs.confidence == 0.5
    assert "image" in obs.meaning


# --- toolsets in a tool list -----------------------------------------------------------------


class FakeToolset:
    """Anything with ``__closedloop_tools__``: what a tool list expands."""

    def __init__(self, *names: str) -> None:
        self.names = names

    def __closedloop_tools__(self) -> list[Tool]:
        return [
            Tool(
                name=name,
                description=name,
                parameters={"type": "object", "properties": {}},
                action=AtomicAction(name=name, fn=lambda n=name: n),
            )
            for name in self.names
        ]


def clock_tool() -> str:
    """The time."""
    return "noon"


def test_a_toolset_expands_into_its_tools_beside_plain_functions() -> None:
    tools = tools_by_name([FakeToolset("a", "b"), clock_tool])
    assert list(tools) == ["a", "b", "clock_tool"]
    agent = Agent(
        ScriptedModel([]), tools=[FakeToolset("a"), clock_tool], runtime=Runtime(trace=False)
    )
    assert set(agent.tools) == {"a", "clock_tool"}


def test_a_toolset_cannot_be_named_or_made_one_tool() -> None:
    with pytest.raises(ConfigurationError, match="list it"):
        tools_by_name({"x": FakeToolset("a")})
    with pytest.raises(ConfigurationError, match="toolset"):
        as_tool(FakeToolset("a"))
    with pytest.raises(ConfigurationError, match="share this name"):
        tools_by_name([FakeToolset("a"), FakeToolset("a")])


def test_the_server_object_is_a_toolset_and_a_run_scope() -> None:
    server = mcp_server("python server.py")
    assert isinstance(server, McpServer) and server.name == "server.py"
    assert callable(server.__closedloop_tools__) and callable(server.run_scope)
    assert "python server.py" in repr(server)


def listed(name: str, **fields: Any) -> types.Tool:
    return types.Tool(name=name, input_schema={"type": "object"}, **fields)


def test_a_listing_becomes_tools_with_the_servers_schemas_and_names() -> None:
    server = mcp_server("python server.py", prefix="s_", include=["get.weather", "pay"])
    read_only = types.ToolAnnotations(read_only_hint=True)
    tools = server._build(
        [
            listed("get.weather", description="Weather.", annotations=read_only),
            listed("pay", title="Pay a bill"),
            listed("hidden"),
        ]
    )
    assert [t.name for t in tools] == ["s_get_weather", "s_pay"]  # a dot is no tool name
    weather, pay = tools
    assert weather.parameters == {"type": "object", "properties": {}}
    assert (weather.description, pay.description) == ("Weather.", "Pay a bill")
    assert (weather.effect, pay.effect) == (EffectClass.RECOMPUTABLE, EffectClass.IRREVERSIBLE)
    assert weather.scope is server and pay.scope is server
    assert not weather.fixed_timeout


def test_names_the_server_does_not_have_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="no such tool") as caught:
        mcp_server("python s.py", effects={"refund": "once"})._build([listed("pay")])
    assert caught.value.argument == "effects" and caught.value.value == ["refund"]
    with pytest.raises(ConfigurationError, match="no such tool"):
        mcp_server("python s.py", include=["nope"])._build([listed("pay")])


def test_a_fixed_timeout_replaces_the_loops_scheduled_one() -> None:
    (tool,) = mcp_server("python s.py", timeout_s=2.5)._build([listed("pay")])
    assert tool.fixed_timeout


def test_an_mcp_input_schema_fits_the_strict_action_grammar() -> None:
    # What SDK servers publish: generated titles, a nested model under $defs.
    schema = {
        "type": "object",
        "title": "orderArguments",
        "properties": {
            "item": {"type": "string", "title": "Item"},
            "address": {"$ref": "#/$defs/Address"},
        },
        "required": ["item", "address"],
        "$defs": {
            "Address": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            }
        },
    }
    (order,) = mcp_server("python s.py")._build([types.Tool(name="order", input_schema=schema)])
    strict = action_schema([order], strict=True)
    jsonschema.validate(
        {"tool": "order", "arguments": {"item": "pen", "address": {"city": "Oslo"}}}, strict
    )
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"tool": "order", "arguments": {"item": "pen"}}, strict)
