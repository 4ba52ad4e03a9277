"""Model spec strings, the one way the CLI, config files and the API name a model.

local:qwen2.5-coder-0.5b                      a built-in model (closedloop models list)
local:/path/to/any.gguf                       any GGUF file
openai:gpt-4o-mini                            OpenAI (OPENAI_API_KEY, OPENAI_BASE_URL)
openai-compatible:http://127.0.0.1:8080/v1#m  any OpenAI-compatible server, model m
test:oracle                                   the offline stand-in (no weights, no network)
"""

from __future__ import annotations

import inspect
import os
import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .._exceptions import ConfigurationError, InvalidModelSpecError
from ._protocol import ModelBase
from ._registry import BUILTIN_MODELS

__all__ = ["SPEC_FORMS", "ModelSpec", "load_model", "parse_model_spec"]

SpecKind = Literal["local", "openai", "openai-compatible", "test"]

# The test specs: deterministic models that ship in the package, so a service, a CLI
# command or a config file can name a model that runs offline, with nothing to pull.
_TEST_MODELS = ("oracle",)

SPEC_FORMS = (
    *(f"local:{name}" for name in sorted(BUILTIN_MODELS)),
    "local:/path/to/model.gguf",
    "openai:MODEL (e.g. openai:gpt-4o-mini; key from OPENAI_API_KEY)",
    "openai-compatible:http://HOST:PORT/v1#MODEL",
    *(f"test:{name}" for name in _TEST_MODELS),
)
"""Every form a model spec may take, as listed in the error of a bad spec."""

_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]*")
_OPENAI_URL = "https://api.openai.com/v1"


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A parsed spec. ``name`` is the built-in or remote model name; ``path`` the GGUF file
    for ``local:`` paths; ``base_url`` the server for ``openai-compatible:``."""

    kind: SpecKind
    name: str
    path: Path | None = None
    base_url: str | None = None

    @property
    def builtin(self) -> bool:
        return self.kind == "local" and self.path is None

    def __str__(self) -> str:
        if self.kind == "local":
            return f"local:{self.path if self.path is not None else self.name}"
        if self.kind in ("openai", "test"):
            return f"{self.kind}:{self.name}"
        return f"openai-compatible:{self.base_url}#{self.name}"


def _invalid(spec: object, reason: str) -> InvalidModelSpecError:
    forms = "; ".join(SPEC_FORMS)
    return InvalidModelSpecError("spec", spec, f"{reason}. Valid forms: {forms}")


def _model_name(spec: str, value: str, what: str) -> str:
    if not _MODEL_NAME.fullmatch(value):
        raise _invalid(spec, f"{what} {value!r} is not a model name")
    return value


def _parse_url(spec: str, url: str) -> str:
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port  # raises ValueError on a bad port
    except ValueError as exc:
        raise _invalid(spec, f"bad server URL {url!r}: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _invalid(spec, f"server URL {url!r} must be http(s)://HOST[:PORT]/...")
    if any(c.isspace() for c in url) or parts.query or parts.fragment:
        raise _invalid(spec, f"server URL {url!r} must have no spaces, query or fragment")
    del port
    return url.rstrip("/")


def parse_model_spec(spec: str) -> ModelSpec:
    """Parse a spec string; anything else raises ``InvalidModelSpecError`` listing the forms."""
    if not isinstance(spec, str):
        raise _invalid(spec, "a model spec must be a string")
    text = spec.strip()
    kind, sep, rest = text.partition(":")
    if not sep or not rest:
        raise _invalid(spec, "expected KIND:VALUE")
    if kind == "local":
        if rest in BUILTIN_MODELS:
            return ModelSpec("local", rest)
        if rest.lower().endswith(".gguf") and "\x00" not in rest and rest.strip() == rest:
            path = Path(rest).expanduser()
            return ModelSpec("local", path.stem, path=path)
        raise _invalid(spec, f"{rest!r} is neither a built-in model nor a path ending in .gguf")
    if kind == "openai":
        return ModelSpec("openai", _model_name(spec, rest, "OpenAI model"))
    if kind == "openai-compatible":
        url, hash_sign, model = rest.rpartition("#")
        if not hash_sign or not url:
            raise _invalid(spec, "openai-compatible needs URL#MODEL")
        return ModelSpec(
            "openai-compatible",
            _model_name(spec, model, "model"),
            base_url=_parse_url(spec, url),
        )
    if kind == "test":
        if rest in _TEST_MODELS:
            return ModelSpec("test", rest)
        raise _invalid(
            spec, f"{rest!r} is not a test model (test models: {', '.join(_TEST_MODELS)})"
        )
    raise _invalid(spec, f"unknown kind {kind!r}")


def _check_options(cls: type[ModelBase], options: dict[str, Any]) -> None:
    params = inspect.signature(cls).parameters
    unknown = sorted(set(options) - set(params))
    if unknown:
        raise ConfigurationError(
            "options", unknown, f"{cls.__name__} accepts {', '.join(p for p in params)}"
        )


def _test_model(name: str, options: dict[str, Any]) -> ModelBase:
    """``test:oracle`` outside a benchmark: it knows no task, so it defers every decision.

    Each call is answered with a reply that names no action (under a response schema it
    parses to nothing), so a rules-first agent (the reference agents behind the service)
    decides by its rules alone and a model-driven agent ends on its stop policy, offline
    and at once. The benchmarks replace it, episode by episode, with the task's own oracle
    (``closedloop_bench``), which plans the task's ideal trajectory.
    """
    from ._testing import FunctionModel

    if options:
        raise ConfigurationError("options", sorted(options), "test models take no options")
    return FunctionModel(lambda _messages, _call: _DEFER, name=name)


_DEFER = "No opinion: the test model defers to the agent's own rules."


def load_model(spec: str | ModelSpec, **options: Any) -> ModelBase:
    """Build the model a spec names; ``options`` go to its constructor (``n_ctx``,
    ``n_threads``, ``seed`` for local models; ``api_key``, ``timeout``, ``price`` ... for
    servers). Nothing is loaded or contacted until the first call."""
    parsed = spec if isinstance(spec, ModelSpec) else parse_model_spec(spec)
    name = options.pop("name", str(parsed))
    if parsed.kind == "test":
        return _test_model(name, options)
    if parsed.kind == "local":
        from ._local import LocalLlama

        _check_options(LocalLlama, options)
        if parsed.path is None:
            return LocalLlama.builtin(parsed.name, name=name, **options)
        return LocalLlama(parsed.path, name=name, **options)

    from ._openai import OpenAICompatible
    from ._usage import price_for

    if parsed.kind == "openai":
        api_key = options.pop("api_key", None) or os.environ.get("OPENAI_API_KEY")
        if not api_key:
            raise ConfigurationError(
                "OPENAI_API_KEY", None, "must be set (or pass api_key=) for openai: models"
            )
        base_url = options.pop("base_url", None) or os.environ.get("OPENAI_BASE_URL") or _OPENAI_URL
        options.setdefault("price", price_for(parsed.name))
        _check_options(OpenAICompatible, options)
        return OpenAICompatible(base_url, parsed.name, api_key=api_key, name=name, **options)
    # Local servers usually ignore the key; OPENAI_API_KEY is sent only if it is set.
    api_key = options.pop("api_key", None) or os.environ.get("OPENAI_API_KEY")
    _check_options(OpenAICompatible, options)
    if parsed.base_url is None:
        raise _invalid(str(parsed), "openai-compatible needs URL#MODEL")
    return OpenAICompatible(parsed.base_url, parsed.name, api_key=api_key, name=name, **options)
