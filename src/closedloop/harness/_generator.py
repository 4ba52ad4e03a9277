"""The plant of the refinement loop: a model that turns messages into code.

``ModelGenerator`` adapts any ``closedloop.models.Model``: it sends the messages, takes
the code out of the answer's fenced block, and reports tokens and latency. Completions
can be cached by the exact request (messages and sampling parameters): with temperature
0, or with a fixed seed on a backend that honours it (the local models do), the same
request gives the same answer, so a cache changes cost, never results.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from .._exceptions import ConfigurationError, ModelError
from .._validation import require_int_at_least, require_positive, require_temperature
from ..models import Message, Model, ModelRequest

__all__ = [
    "CACHE_MISS",
    "Generation",
    "Generator",
    "ModelGenerator",
    "extract_code",
    "tidy_code",
]

CACHE_MISS = "not in the generation cache"
"""Part of the message of a cache-only generator's error for a request it does not hold."""

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_PY_TAGS = frozenset({"", "python", "py", "python3"})


def extract_code(text: str, entry_point: str | None = None) -> str:
    """The code in a model's answer.

    Fenced blocks tagged Python (or untagged) win; among them, the one that defines
    ``entry_point``, else the longest. An unterminated fence (the answer was cut off) still
    counts. With no fence at all, the whole text is taken as code: if it is prose, the
    evaluator reports a syntax error, which is the honest outcome.
    """
    blocks: list[str] = [
        str(m.group(2)) for m in _FENCE.finditer(text) if m.group(1).lower() in _PY_TAGS
    ]
    if not blocks:
        return tidy_code(text.strip() + "\n", entry_point) if text.strip() else ""
    if entry_point:
        pattern = re.compile(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(entry_point)}\b", re.M)
        defining = [body for body in blocks if pattern.search(body)]
        if defining:
            return tidy_code(max(defining, key=len).strip() + "\n", entry_point)
    return tidy_code(max(blocks, key=len).strip() + "\n", entry_point)


def _defines(tree: ast.Module, entry_point: str | None) -> bool:
    names = {
        n.name
        for n in tree.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    }
    return bool(names) if entry_point is None else entry_point in names


def _is_demo(node: ast.stmt, defined: set[str]) -> bool:
    """A top-level statement that only tries the code out: a print, an assert, a call of a
    function the answer defines, an ``if __name__ == "__main__":`` block."""
    if isinstance(node, ast.Assert):
        return True
    if isinstance(node, ast.Expr):
        if isinstance(node.value, ast.Call):
            func = node.value.func
            return isinstance(func, ast.Name) and (func.id == "print" or func.id in defined)
        # A bare name or value (a demo cut off after ``print``) does nothing but may raise.
        return not isinstance(node.value, ast.Constant)
    if isinstance(node, ast.If):
        test = ast.unparse(node.test).replace("'", '"')
        return test in ('__name__ == "__main__"', '"__main__" == __name__')
    return False


def tidy_code(code: str, entry_point: str | None = None) -> str:
    """Drop what only demonstrates the code, and a tail cut off by the token limit.

    Small models often append usage examples (prints, asserts, a ``__main__`` block) and,
    at the token limit, stop in the middle of one: a syntax error, or a demo that raises
    while the module loads, would fail a correct function. Like the stop sequences of the
    usual HumanEval harnesses, this keeps the definitions. The code is cut by lines, never
    rewritten, so line numbers in later error messages still match the answer. Code that
    defines nothing (or not ``entry_point``) is returned as it is: its failure is honest.
    """
    lines = code.splitlines(keepends=True)
    tree: ast.Module | None = None
    for end in range(len(lines), 0, -1):
        try:
            tree = ast.parse("".join(lines[:end]))
        except SyntaxError:
            continue
        if not _defines(tree, entry_point):
            return code
        lines = lines[:end]
        break
    if tree is None:
        return code
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    drop: set[int] = set()
    for node in tree.body:
        if _is_demo(node, defined) and node.end_lineno is not None:
            drop.update(range(node.lineno - 1, node.end_lineno))
    kept = "".join(line for i, line in enumerate(lines) if i not in drop)
    return kept.rstrip() + "\n"


@dataclass(frozen=True, slots=True)
class Generation:
    """One answer of the generator: the code, the raw text and what it cost.

    A cached answer keeps the latency of the call that made it: what a run would have
    paid on its own, which is what per-strategy costs in a benchmark should show.
    """

    code: str
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    finish_reason: str = "stop"
    cached: bool = False


@runtime_checkable
class Generator(Protocol):
    """Anything that writes code from chat messages."""

    async def __call__(
        self,
        messages: Sequence[Message],
        *,
        seed: int | None,
        entry_point: str | None,
        temperature: float | None = None,
    ) -> Generation:
        """Answer ``messages`` with code; model errors propagate (the refiner records them).

        ``temperature`` overrides the generator's own for this call (a strategy's
        exploration actuator); None keeps it.
        """
        ...


class ModelGenerator:
    """A :class:`Generator` on top of a ``closedloop.models`` model.

    Args:
        model: the model (``load_model("local:qwen2.5-coder-0.5b")``, ``FunctionModel``...).
        temperature, max_tokens, timeout: sampling parameters, the same for every call
            unless a call passes its own ``temperature``.
        cache: a mapping to keep completions in, keyed by the exact request; used only when
            the request is reproducible (temperature 0, or a seed given).
        cache_only: replay: a request not in ``cache`` raises ``ModelError`` (its message
            holds :data:`CACHE_MISS`) instead of calling the model; counted in ``misses``.
    """

    def __init__(
        self,
        model: Model,
        *,
        temperature: float = 0.0,
        max_tokens: int = 768,
        timeout: float | None = None,
        cache: MutableMapping[str, Generation] | None = None,
        cache_only: bool = False,
    ) -> None:
        if not isinstance(model, Model):
            raise ConfigurationError("model", model, "must implement closedloop.models.Model")
        self.model = model
        self.temperature = require_temperature("temperature", temperature)
        self.max_tokens = require_int_at_least("max_tokens", max_tokens, 16)
        self.timeout = None if timeout is None else require_positive("timeout", timeout)
        if cache_only and cache is None:
            raise ConfigurationError("cache_only", cache_only, "needs a cache to replay from")
        self.cache = cache
        self.cache_only = cache_only
        self.calls = 0
        self.cache_hits = 0
        self.misses = 0

    def __repr__(self) -> str:
        return (
            f"ModelGenerator({self.model.name!r}, temperature={self.temperature}, "
            f"max_tokens={self.max_tokens})"
        )

    def _key(self, messages: Sequence[Message], seed: int | None, temperature: float) -> str | None:
        if self.cache is None or (temperature > 0.0 and seed is None):
            return None
        blob = json.dumps(
            {
                "model": self.model.name,
                "messages": [m.to_dict() for m in messages],
                "temperature": temperature,
                "max_tokens": self.max_tokens,
                "seed": seed,
            },
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    async def __call__(
        self,
        messages: Sequence[Message],
        *,
        seed: int | None,
        entry_point: str | None,
        temperature: float | None = None,
    ) -> Generation:
        temperature = (
            self.temperature
            if temperature is None
            else require_temperature("temperature", temperature)
        )
        key = self._key(messages, seed, temperature)
        if key is not None and self.cache is not None and key in self.cache:
            self.cache_hits += 1
            hit = self.cache[key]
            return Generation(
                code=extract_code(hit.text, entry_point),
                text=hit.text,
                prompt_tokens=hit.prompt_tokens,
                completion_tokens=hit.completion_tokens,
                latency_s=hit.latency_s,
                finish_reason=hit.finish_reason,
                cached=True,
            )
        if self.cache_only:
            self.misses += 1
            raise ModelError(f"{CACHE_MISS} (cache-only replay; seed {seed}, T {temperature})")
        self.calls += 1
        completion = await self.model.complete(
            list(messages),
            ModelRequest(
                max_tokens=self.max_tokens, temperature=temperature, seed=seed, timeout=self.timeout
            ),
        )
        generation = Generation(
            code=extract_code(completion.text, entry_point),
            text=completion.text,
            prompt_tokens=completion.usage.prompt_tokens,
            completion_tokens=completion.usage.completion_tokens,
            latency_s=completion.latency_s,
            finish_reason=completion.finish_reason,
        )
        if key is not None and self.cache is not None:
            self.cache[key] = generation
        return generation
