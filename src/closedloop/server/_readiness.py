"""Readiness: whether the service can do its work now, as a Kubernetes readiness probe asks.

Liveness (``/healthz``) says the process answers; readiness (``/readyz``) says a run
posted now can succeed: the store takes a write, the model's file is on disk or its
server answers, and its credentials are present. Two of those can be proven wrong before
the service starts (:func:`model_problem_at_start`: no file, no key), and ``closedloop
serve`` then refuses to start; an unreachable server may come back, so it only makes the
service not ready (:func:`model_check`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import httpx

from .._exceptions import ClosedLoopError, ConfigurationError
from ..feedback import StateStore
from ..models import DEFAULT_MODEL, Model, parse_model_spec

__all__ = ["Check", "model_check", "model_problem_at_start", "store_check"]

PROBE_TIMEOUT_S = 2.0
"""How long a readiness probe waits for the model's server (probes run often)."""


@dataclass(frozen=True)
class Check:
    """One readiness check: ``ok``, or a problem code and the fix a person applies."""

    ok: bool
    code: str = "ok"
    detail: str = ""

    def as_dict(self) -> dict[str, object]:
        return {"ok": self.ok, "code": self.code, "detail": self.detail}


OK = Check(True)


def _unavailable(detail: str) -> Check:
    return Check(False, "model_unavailable", detail)


def model_problem_at_start(spec: str | None) -> Check:
    """What is provably wrong with a model spec before anything is loaded or contacted:
    a local model whose file is not on disk, an ``openai:`` model without a key."""
    from ..models._registry import builtin_model_path

    chosen = spec if spec is not None else f"local:{DEFAULT_MODEL}"
    try:
        parsed = parse_model_spec(chosen)
    except ConfigurationError as exc:
        return _unavailable(f"--model {chosen!r}: {exc.reason}")
    if parsed.kind == "local":
        try:
            path = parsed.path or builtin_model_path(parsed.name)
        except ConfigurationError as exc:
            return _unavailable(f"--model {chosen!r}: {exc.reason}")
        if not path.is_file():
            pull = f"closedloop models pull {parsed.name}" if parsed.path is None else None
            fix = f"run `{pull}`" if pull else "give the path of an existing .gguf file"
            return _unavailable(f"the model file {path} is not on disk: {fix}")
    if parsed.kind == "openai" and not os.environ.get("OPENAI_API_KEY"):
        return _unavailable(
            "OPENAI_API_KEY is not set: export it where the service starts, "
            "or choose another --model"
        )
    return OK


async def model_check(model: Model | str | None) -> Check:
    """Readiness of the service's model: its file and key (:func:`model_problem_at_start`)
    and, for a model served over HTTP, an answer from its server within
    :data:`PROBE_TIMEOUT_S` (any HTTP status counts: the server is there)."""
    if isinstance(model, Model):
        base_url = getattr(model, "base_url", None)
        path = getattr(model, "path", None)
        if hasattr(path, "is_file") and not path.is_file():  # type: ignore[union-attr]
            return _unavailable(f"the model file {path} is not on disk")
    else:
        static = model_problem_at_start(model)
        if not static.ok:
            return static
        parsed = parse_model_spec(model) if model is not None else None
        base_url = None
        if parsed is not None and parsed.kind == "openai-compatible":
            base_url = parsed.base_url
        elif parsed is not None and parsed.kind == "openai":
            base_url = os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
    if not isinstance(base_url, str):
        return OK
    return await _reachable(base_url)


async def _reachable(base_url: str) -> Check:
    url = base_url.rstrip("/") + "/models"
    try:
        async with httpx.AsyncClient(timeout=PROBE_TIMEOUT_S) as client:
            await client.get(url)
    except httpx.HTTPError as exc:
        return Check(
            False,
            "model_unreachable",
            f"the model server at {base_url} does not answer ({type(exc).__name__}): "
            "start it, or point --model at one that runs",
        )
    return OK


async def store_check(store: StateStore) -> Check:
    """Whether the store takes a write (a record in the ``health`` namespace)."""
    try:
        await store.record_put("health", "ready", {"probe": True})
    except ClosedLoopError as exc:
        return Check(False, "store_unavailable", f"the store refused a write: {exc}")
    return OK
