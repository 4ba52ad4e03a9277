"""JSON extraction and validation helpers; the pinned public surface of closedloop.models."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

import closedloop.models as models
from closedloop.models import (
    FunctionModel,
    UsageMeter,
    complete_sync,
    extract_json,
    parse_structured,
    usage_scope,
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)
objects = st.dictionaries(st.text(max_size=8), json_values, max_size=4)


@given(json_values)
def test_strict_parse_round_trips_any_json_value(value: Any) -> None:
    parsed, error = parse_structured(json.dumps(value, ensure_ascii=False), {})
    assert error is None
    assert parsed == value


@given(objects, st.sampled_from(["", "Sure! ", "Here you go:\n"]), st.booleans())
def test_lenient_parse_digs_objects_out_of_prose_and_fences(
    obj: dict[str, Any], prefix: str, fenced: bool
) -> None:
    body = json.dumps(obj, ensure_ascii=False)
    text = f"{prefix}```json\n{body}\n```\nAnything else?" if fenced else f"{prefix}{body} Done."
    parsed, error = parse_structured(text, {"type": "object"}, lenient=True)
    assert error is None
    assert parsed == obj
    if prefix or fenced:
        assert parse_structured(text, {"type": "object"})[0] is None  # strict refuses


@given(st.text())
def test_parsing_never_crashes_on_garbage(text: str) -> None:
    for lenient in (False, True):
        parsed, error = parse_structured(text, {"type": "object"}, lenient=lenient)
        assert (parsed is None) == (error is not None)
        assert parsed is None or isinstance(parsed, dict)
    assert isinstance(extract_json(text), str)


def test_extract_json_skips_brace_noise_before_the_document() -> None:
    assert extract_json('use {braces} like {"a": [1, {"b": 2}]} ok') == '{"a": [1, {"b": 2}]}'
    assert extract_json("no json here") == "no json here"


def test_sync_calls_count_in_the_callers_usage_scope() -> None:
    with usage_scope(UsageMeter()) as meter:
        complete_sync(FunctionModel(lambda m, c: "ok"), "x")
    assert meter.total.calls == 1


EXPECTED_PUBLIC = {
    "BUILTIN_MODELS", "DEFAULT_MODEL", "DEFAULT_REQUEST", "DRIFT_KINDS", "FAULT_PROFILES",
    "FREE", "PRICES", "SPEC_FORMS", "BuiltinModel", "CallInfo", "Completion", "Confidence",
    "FaultInjectingModel", "FaultKind", "FaultProfile", "FaultRecord", "FunctionModel", "GatedModel",
    "LocalLlama", "Message", "MessagesInput", "MeteredModel", "Model", "ModelBase",
    "ModelLadder", "ModelRequest", "ModelSpec", "ModelStatus", "ModelUsage", "OpenAICompatible", "Price",
    "PullResult", "RawCompletion", "RunUsage", "Rung", "ScriptedModel", "StructuredOutput", "SyncModel",
    "TokenLogprob", "ToolCall", "Usage", "UsageMeter", "WheelMember", "WrapperModel", "allow_real_model_calls",
    "block_real_model_calls", "builtin_model_path", "clear_local_model_cache",
    "closedloop_home", "complete_sync", "current_usage_meter", "estimate_tokens",
    "extract_json", "list_models", "load_model", "models_dir", "normalize_messages",
    "parse_model_spec", "parse_structured", "pip_downloader", "price_for", "pull_model",
    "real_model_calls_allowed", "run_sync", "set_real_model_calls_allowed", "usage_scope",
}  # fmt: skip


def test_public_surface_is_pinned() -> None:
    assert set(models.__all__) == EXPECTED_PUBLIC
    assert len(models.__all__) == len(EXPECTED_PUBLIC)
    for name in models.__all__:
        obj = getattr(models, name)
        if isinstance(obj, type):
            assert obj.__module__ == "closedloop.models", name


def test_importing_models_loads_no_heavy_backend() -> None:
    import subprocess
    import sys

    code = (
        "import sys, closedloop.models; print('llama_cpp' in sys.modules, 'openai' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
