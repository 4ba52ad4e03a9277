"""closedloop.models: the plant of every loop, behind one async protocol.

``load_model("local:qwen2.5-coder-0.5b")`` (or ``local:smollm2-135m``, ``local:/x.gguf``,
``openai:gpt-4o-mini``, ``openai-compatible:http://127.0.0.1:8080/v1#name``) returns a
model whose ``await model.complete(messages, ModelRequest(response_schema=...))`` gives a
``Completion``; the ``ModelRequest`` holds every setting of the call and may be left out.
``FunctionModel`` and ``ScriptedModel`` stand in for real models in tests, where real calls
are blocked unless a test opts in. ``WrapperModel`` is the base of every model that stands in
front of another: ``FaultInjectingModel`` injects measured disturbances, ``MeteredModel``
counts and times calls, ``SyncModel`` offers blocking calls.
"""

from __future__ import annotations

import contextlib

from .._home import closedloop_home
from ._completion import Completion, Message, MessagesInput, ToolCall, Usage, normalize_messages
from ._confidence import Confidence, TokenLogprob
from ._faults import (
    DRIFT_KINDS,
    FAULT_PROFILES,
    FaultInjectingModel,
    FaultKind,
    FaultProfile,
    FaultRecord,
)
from ._gated import GatedModel
from ._guard import (
    allow_real_model_calls,
    block_real_model_calls,
    real_model_calls_allowed,
    set_real_model_calls_allowed,
)
from ._json import extract_json, parse_structured
from ._ladder import ModelLadder, Rung
from ._local import LocalLlama, clear_local_model_cache
from ._metered import MeteredModel
from ._openai import OpenAICompatible, StructuredOutput
from ._protocol import CallInfo, Model, ModelBase, RawCompletion
from ._registry import (
    BUILTIN_MODELS,
    DEFAULT_MODEL,
    BuiltinModel,
    ModelStatus,
    PullResult,
    WheelMember,
    builtin_model_path,
    list_models,
    models_dir,
    pip_downloader,
    pull_model,
)
from ._request import DEFAULT_REQUEST, ModelRequest
from ._spec import SPEC_FORMS, ModelSpec, load_model, parse_model_spec
from ._sync import SyncModel, complete_sync, run_sync
from ._testing import FunctionModel, ScriptedModel, estimate_tokens
from ._usage import (
    FREE,
    PRICES,
    ModelUsage,
    Price,
    RunUsage,
    UsageMeter,
    current_usage_meter,
    price_for,
    usage_scope,
)
from ._wrapper import WrapperModel

__all__ = [
    "BUILTIN_MODELS",
    "DEFAULT_MODEL",
    "DEFAULT_REQUEST",
    "DRIFT_KINDS",
    "FAULT_PROFILES",
    "FREE",
    "PRICES",
    "SPEC_FORMS",
    "BuiltinModel",
    "CallInfo",
    "Completion",
    "Confidence",
    "FaultInjectingModel",
    "FaultKind",
    "FaultProfile",
    "FaultRecord",
    "FunctionModel",
    "GatedModel",
    "LocalLlama",
    "Message",
    "MessagesInput",
    "MeteredModel",
    "Model",
    "ModelBase",
    "ModelLadder",
    "ModelRequest",
    "ModelSpec",
    "ModelStatus",
    "ModelUsage",
    "OpenAICompatible",
    "Price",
    "PullResult",
    "RawCompletion",
    "RunUsage",
    "Rung",
    "ScriptedModel",
    "StructuredOutput",
    "SyncModel",
    "TokenLogprob",
    "ToolCall",
    "Usage",
    "UsageMeter",
    "WheelMember",
    "WrapperModel",
    "allow_real_model_calls",
    "block_real_model_calls",
    "builtin_model_path",
    "clear_local_model_cache",
    "closedloop_home",
    "complete_sync",
    "current_usage_meter",
    "estimate_tokens",
    "extract_json",
    "list_models",
    "load_model",
    "models_dir",
    "normalize_messages",
    "parse_model_spec",
    "parse_structured",
    "pip_downloader",
    "price_for",
    "pull_model",
    "real_model_calls_allowed",
    "run_sync",
    "set_real_model_calls_allowed",
    "usage_scope",
]

for _name in __all__:
    # Reprs and docs show the public home of each name, as httpx does.
    with contextlib.suppress(AttributeError, TypeError):
        if isinstance(globals()[_name], type):
            globals()[_name].__module__ = __name__
