"""Model spec strings: every valid form, clear errors for the rest, no crash on garbage."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from closedloop import ConfigurationError, InvalidModelSpecError, ModelNotAvailableError
from closedloop.models import (
    FREE,
    LocalLlama,
    ModelRequest,
    ModelSpec,
    OpenAICompatible,
    load_model,
    parse_model_spec,
    price_for,
)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("local:qwen2.5-coder-0.5b", ModelSpec("local", "qwen2.5-coder-0.5b")),
        ("local:smollm2-135m", ModelSpec("local", "smollm2-135m")),
        ("  local:smollm2-135m ", ModelSpec("local", "smollm2-135m")),
        ("local:/path/to/any.gguf", ModelSpec("local", "any", path=Path("/path/to/any.gguf"))),
        ("local:rel/m.GGUF", ModelSpec("local", "m", path=Path("rel/m.GGUF"))),
        ("openai:gpt-4o-mini", ModelSpec("openai", "gpt-4o-mini")),
        ("openai:ft:gpt-4o-mini:org::abc", ModelSpec("openai", "ft:gpt-4o-mini:org::abc")),
        (
            "openai-compatible:http://127.0.0.1:8080/v1#model-name",
            ModelSpec("openai-compatible", "model-name", base_url="http://127.0.0.1:8080/v1"),
        ),
        (
            "openai-compatible:https://host.example/v1/#org/llama-3.1:8b",
            ModelSpec("openai-compatible", "org/llama-3.1:8b", base_url="https://host.example/v1"),
        ),
        ("test:oracle", ModelSpec("test", "oracle")),
    ],
)
def test_valid_specs_parse(spec: str, expected: ModelSpec) -> None:
    assert parse_model_spec(spec) == expected


@pytest.mark.parametrize(
    "spec",
    [
        "local:smollm2-135m",
        "local:/m/x.gguf",
        "openai:gpt-4o",
        "openai-compatible:http://127.0.0.1:8080/v1#m",
        "test:oracle",
    ],
)
def test_specs_round_trip_through_str(spec: str) -> None:
    assert str(parse_model_spec(spec)) == spec
    assert parse_model_spec(str(parse_model_spec(spec))) == parse_model_spec(spec)


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ("", "KIND:VALUE"),
        ("gpt-4o", "KIND:VALUE"),
        ("local:", "KIND:VALUE"),
        ("local:qwen7b", "neither a built-in"),
        ("local:/x/model.bin", "neither a built-in"),
        ("anthropic:claude", "unknown kind"),
        ("test:nope", "not a test model"),
        ("openai: gpt", "not a model name"),
        ("openai-compatible:http://127.0.0.1:8080/v1", "URL#MODEL"),
        ("openai-compatible:http://127.0.0.1:8080/v1#", "not a model name"),
        ("openai-compatible:ftp://h/v1#m", "http(s)"),
        ("openai-compatible:http://h:99999/v1#m", "bad server URL"),
        ("openai-compatible:http://[::1/v1#m", "bad server URL"),
        ("openai-compatible:http:///v1#m", "http(s)"),
        ("openai-compatible:http://h/v1?x=1#m", "query"),
    ],
)
def test_invalid_specs_list_the_valid_forms(spec: str, fragment: str) -> None:
    with pytest.raises(InvalidModelSpecError) as info:
        parse_model_spec(spec)
    message = str(info.value)
    assert fragment in message
    assert "local:qwen2.5-coder-0.5b" in message and "openai-compatible:" in message
    assert isinstance(info.value, ConfigurationError)
    assert info.value.argument == "spec"


def test_non_string_spec_is_invalid() -> None:
    with pytest.raises(InvalidModelSpecError):
        parse_model_spec(42)  # type: ignore[arg-type]


@given(st.text())
def test_garbage_never_raises_anything_but_invalid_spec(text: str) -> None:
    try:
        spec = parse_model_spec(text)
    except InvalidModelSpecError:
        return
    assert spec.kind in ("local", "openai", "openai-compatible")
    assert parse_model_spec(str(spec)) == spec


@given(
    st.sampled_from(["local:", "openai:", "openai-compatible:", "openai-compatible:http://"]),
    st.text(),
)
def test_garbage_after_a_known_kind_is_handled(prefix: str, rest: str) -> None:
    try:
        parse_model_spec(prefix + rest)
    except InvalidModelSpecError as exc:
        assert "Valid forms" in str(exc)


def test_load_local_path_builds_a_lazy_local_model(tmp_path: Path) -> None:
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"not loaded until the first call")
    model = load_model(f"local:{gguf}", n_ctx=256, n_threads=1, seed=7)
    assert isinstance(model, LocalLlama)
    assert (model.path, model.n_ctx, model.n_threads, model.seed) == (gguf, 256, 1, 7)
    assert model.name == f"local:{gguf}"
    assert model.price == FREE


def test_load_missing_local_file_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(ModelNotAvailableError, match="no model file"):
        load_model(f"local:{tmp_path / 'absent.gguf'}")


def test_load_builtin_that_is_not_pulled_names_the_pull_command(closedloop_home: Path) -> None:
    with pytest.raises(ModelNotAvailableError, match="closedloop models pull smollm2-135m"):
        load_model("local:smollm2-135m")


def test_unknown_options_are_a_configuration_error(tmp_path: Path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"x")
    with pytest.raises(ConfigurationError, match="n_gpu"):
        load_model(f"local:{gguf}", n_gpu=3)


def test_openai_spec_needs_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        load_model("openai:gpt-4o-mini")


def test_openai_spec_reads_key_and_base_url_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    model = load_model("openai:gpt-4o-mini-2024-07-18", timeout=5.0)
    assert isinstance(model, OpenAICompatible)
    assert model.base_url == "http://127.0.0.1:9/v1"
    assert model.model == "gpt-4o-mini-2024-07-18"
    assert model.price == price_for("gpt-4o-mini")
    assert model.timeout == 5.0


def test_openai_compatible_spec_builds_an_unpriced_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    model = load_model("openai-compatible:http://127.0.0.1:8080/v1#smol")
    assert isinstance(model, OpenAICompatible)
    assert (model.base_url, model.model, model.price) == ("http://127.0.0.1:8080/v1", "smol", None)
    assert model.name == "openai-compatible:http://127.0.0.1:8080/v1#smol"


async def test_the_test_spec_loads_an_offline_model_that_names_no_action() -> None:
    # Wherever load_model is used (the Agent, a ladder, the service), test:oracle resolves.
    model = load_model("test:oracle")
    assert model.name == "test:oracle"
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    completion = await model.complete(
        [{"role": "user", "content": "Which city?"}], ModelRequest(response_schema=schema)
    )
    assert completion.parsed is None and completion.text
    with pytest.raises(ConfigurationError, match="test models take no options"):
        load_model("test:oracle", n_threads=1)


def test_an_agent_named_by_the_test_spec_runs_offline_to_a_named_halt() -> None:
    from closedloop import Agent

    result = Agent("test:oracle").run_sync("What is 2 + 3?")
    assert result.halt_reason in {"no_progress", "repeated_action", "step_limit", "handover"}
    assert not result.success
