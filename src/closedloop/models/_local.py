"""``LocalLlama``: a GGUF model run in-process by llama-cpp-python.

Loading is lazy and shared: one ``Llama`` per (path, n_ctx, n_threads) per process, with a
lock, since a llama.cpp context serves one generation at a time. Calls run in a worker
thread so the event loop stays free. A response schema becomes a GBNF grammar, so the
sampler can only produce schema-shaped JSON: the strict end of the strictness actuator.

Context policy: the prompt must fit the window whole (no silent truncation; else
``ContextOverflowError``); the completion stops at the window's end with
``finish_reason="length"``.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import contextlib
import ctypes
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._exceptions import (
    ConfigurationError,
    ContextOverflowError,
    ModelError,
    ModelLoadError,
    ModelNotAvailableError,
    ModelTimeoutError,
    SchemaCompileError,
)
from .._validation import require_int_at_least
from ._json import schema_text
from ._protocol import CallInfo, ModelBase, RawCompletion
from ._registry import builtin_model_path
from ._usage import FREE, Price, UsageMeter

__all__ = ["LocalLlama", "clear_local_model_cache"]

_OVERFLOW = re.compile(r"Requested tokens \((\d+)\) exceed context window of (\d+)")
_log_tail: collections.deque[str] = collections.deque(maxlen=32)
_import_lock = threading.Lock()
_cache_lock = threading.Lock()
_llama_module: Any = None
_atexit_registered = False
_log_callback: Any = None  # ctypes callbacks must outlive their registration


@dataclass(slots=True)
class _Loaded:
    llama: Any
    lock: threading.Lock


_cache: dict[tuple[str, int, int], _Loaded] = {}


def _llama_cpp() -> Any:
    """Import llama_cpp once and route llama.cpp's log lines away from stderr.

    The lines are kept (last 32) so load errors can quote what llama.cpp said.
    """
    global _llama_module, _log_callback
    with _import_lock:
        if _llama_module is not None:
            return _llama_module
        try:
            import llama_cpp
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ModelNotAvailableError(
                "llama-cpp-python is not installed; install closedloop[local]"
            ) from exc

        @llama_cpp.llama_log_callback  # type: ignore[untyped-decorator]
        def _on_log(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
            line = text.decode("utf-8", errors="replace").strip()
            if line:
                _log_tail.append(line)

        llama_cpp.llama_log_set(_on_log, ctypes.c_void_p(0))
        _log_callback = _on_log
        _llama_module = llama_cpp
        return llama_cpp


def clear_local_model_cache() -> None:
    """Drop every loaded model (frees memory; the next call loads again)."""
    with _cache_lock:
        for loaded in _cache.values():
            with loaded.lock:
                close = getattr(loaded.llama, "close", None)
                if callable(close):
                    close()
        _cache.clear()


@contextlib.contextmanager
def _captured_stderr() -> Iterator[list[str]]:
    """Capture what C code writes to fd 2 (llama.cpp's grammar parser prints there)."""
    captured: list[str] = []
    with tempfile.TemporaryFile() as sink:
        saved = os.dup(2)
        try:
            os.dup2(sink.fileno(), 2)
            yield captured
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            captured.append(sink.read().decode("utf-8", errors="replace"))


class _DeadlineExceededError(Exception):
    """Raised between two sampled tokens to stop a generation that ran out of time."""


class _TokenLogprobs:
    """Logprobs of the sampled tokens without the n_ctx x vocabulary logits buffer.

    llama-cpp-python returns logprobs only from a model built with ``logits_all=True``,
    which keeps every position's logits. Instead a logits processor, first in the sampler
    chain (so it sees the model's raw distribution, before the grammar), keeps the
    log-normaliser and the row of the position being sampled; the token the sampler then
    yields is looked up in that row. One vocabulary row at a time is held.
    """

    def __init__(self, llama: Any) -> None:
        import numpy as np

        self._np = np
        self._llama = llama
        self._row: Any = None
        self._norm = 0.0
        self.tokens: list[tuple[str, float]] = []
        self._pending = b""

    def __call__(self, _input_ids: Any, scores: Any) -> Any:
        np = self._np
        top = float(np.max(scores))
        self._norm = top + float(np.log(np.sum(np.exp(scores - top))))
        self._row = scores.copy()
        return scores

    def took(self, token: int) -> None:
        if self._row is None:
            return
        logprob = min(0.0, float(self._row[token]) - self._norm)
        self._row = None
        module = _llama_cpp()
        is_eog = getattr(module, "llama_vocab_is_eog", None) or module.llama_token_is_eog
        if is_eog(self._llama._model.vocab, token):
            return
        raw = self._pending + self._llama.detokenize([token])
        try:
            text, self._pending = raw.decode("utf-8"), b""
        except UnicodeDecodeError:  # a multi-byte character split over tokens
            self._pending = raw
            text = ""
        self.tokens.append((text, logprob))


@contextlib.contextmanager
def _watched(
    llama: Any,
    deadline: float | None,
    clock: Callable[[], float],
    on_token: Callable[[int], None] | None = None,
) -> Iterator[None]:
    """Make ``llama`` stop generating once ``clock()`` passes ``deadline``, and report each
    sampled token to ``on_token``.

    llama-cpp-python offers no cancellation, and exceptions raised in logits processors are
    swallowed by its ctypes callback; but its completion loop pulls tokens from the Python
    generator ``llama.generate``, so an instance-level wrapper can end the loop between
    tokens with an exception that propagates normally. Only used under the model's lock.
    """
    if deadline is None and on_token is None:
        yield
        return
    original = llama.generate

    def generate(*args: Any, **kwargs: Any) -> Iterator[Any]:
        inner = original(*args, **kwargs)
        try:
            for token in inner:
                if deadline is not None and clock() > deadline:
                    raise _DeadlineExceededError
                if on_token is not None:
                    on_token(int(token))
                yield token
        finally:
            inner.close()

    llama.generate = generate
    try:
        yield
    finally:
        del llama.generate  # the class method shows through again


class LocalLlama(ModelBase):
    """A GGUF model run in-process with llama-cpp-python.

    ``n_threads`` defaults to every core; ``seed`` (default 0) makes sampling reproducible
    unless a call passes its own. ``prompt_cache=True`` reuses the KV cache of a shared prompt
    prefix between calls: faster for long common system prompts, but the logits then differ
    in the last bits, so the same seed no longer guarantees the same text; off by default
    for reproducible runs. Missing file: ``ModelNotAvailableError``; a file llama.cpp
    cannot load: ``ModelLoadError`` (raised at the first call, when the model loads).
    """

    real = True

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        name: str | None = None,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        seed: int = 0,
        price: Price | None = FREE,
        meter: UsageMeter | None = None,
        clock: Callable[[], float] = time.perf_counter,
        deadline_clock: Callable[[], float] = time.monotonic,
        pull_hint: str | None = None,
        prompt_cache: bool = False,
    ) -> None:
        self.path = Path(path).expanduser()
        self.n_ctx = require_int_at_least("n_ctx", n_ctx, 64)
        threads = n_threads if n_threads is not None else (os.cpu_count() or 1)
        self.n_threads = require_int_at_least("n_threads", threads, 1)
        self.seed = require_int_at_least("seed", seed, 0)
        super().__init__(name or f"local:{self.path}", price=price, meter=meter, clock=clock)
        self._deadline_clock = deadline_clock
        self._pull_hint = pull_hint
        self.prompt_cache = bool(prompt_cache)
        self._grammars: dict[str, Any] = {}
        self._require_file()

    @classmethod
    def builtin(cls, model: str, *, home: Path | None = None, **options: Any) -> LocalLlama:
        """A built-in model by name (``closedloop models list``); says how to pull it."""
        path = builtin_model_path(model, home=home, require=True)
        options.setdefault("name", f"local:{model}")
        options.setdefault("pull_hint", f"run `closedloop models pull {model}`")
        return cls(path, **options)

    @property
    def supports_logprobs(self) -> bool:
        """The decision-token logprobs come from a logits processor (no logits buffer)."""
        return True

    def _require_file(self) -> None:
        if not self.path.is_file():
            hint = self._pull_hint or (
                "give the path of a .gguf file, or use a built-in model: "
                "`closedloop models list`, then `closedloop models pull NAME`"
            )
            raise ModelNotAvailableError(f"no model file at {self.path}; {hint}")

    def _loaded(self) -> _Loaded:
        self._require_file()
        key = (str(self.path.resolve()), self.n_ctx, self.n_threads)
        with _cache_lock:
            loaded = _cache.get(key)
            if loaded is not None:
                return loaded
            llama_cpp = _llama_cpp()
            _log_tail.clear()
            try:
                llama = llama_cpp.Llama(
                    model_path=str(self.path),
                    n_ctx=self.n_ctx,
                    n_threads=self.n_threads,
                    n_threads_batch=self.n_threads,
                    seed=self.seed,
                    verbose=False,
                )
            except (ValueError, RuntimeError, OSError) as exc:
                said = " | ".join(list(_log_tail)[-3:]) or str(exc)
                raise ModelLoadError(
                    f"cannot load {self.path}: {said}. The file is corrupt, truncated or "
                    "not a GGUF model; delete it and fetch it again "
                    "(`closedloop models pull NAME --force` for a built-in model)"
                ) from exc
            loaded = _Loaded(llama, threading.Lock())
            global _atexit_registered
            if not _atexit_registered:
                # Free models before interpreter teardown: Llama.__del__ run late finds its
                # ctypes bindings already gone and prints tracebacks.
                atexit.register(clear_local_model_cache)
                _atexit_registered = True
            _cache[key] = loaded
            return loaded

    def _grammar(self, loaded: _Loaded, schema: Any) -> Any:
        key = schema_text(schema)
        grammar = self._grammars.get(key)
        if grammar is not None:
            return grammar
        llama_cpp = _llama_cpp()
        from llama_cpp.llama_grammar import LlamaGrammar, json_schema_to_gbnf

        try:
            gbnf = json_schema_to_gbnf(key)
        except Exception as exc:
            # The converter reports unsupported constructs through assertions and ValueErrors.
            raise SchemaCompileError(
                f"the grammar compiler rejected the response schema: {exc or type(exc).__name__}."
                " Simplify it (local $ref only; patterns anchored with ^...$; plain types)"
            ) from exc
        # The converter's output is parsed again by llama.cpp; a NULL sampler would crash the
        # sampler chain later, so check it here while holding the model lock.
        with _captured_stderr() as said:
            probe = llama_cpp.llama_sampler_init_grammar(
                loaded.llama._model.vocab, gbnf.encode("utf-8"), b"root"
            )
        if not probe:
            detail = " ".join(said).strip().splitlines()
            raise SchemaCompileError(
                "llama.cpp could not parse the grammar made from the response schema: "
                + (detail[0] if detail else "parse error")
            )
        llama_cpp.llama_sampler_free(probe)
        grammar = LlamaGrammar.from_string(gbnf, verbose=False)
        self._grammars[key] = grammar
        return grammar

    async def _complete(self, call: CallInfo) -> RawCompletion:
        request = call.request
        if request.tools:
            raise ConfigurationError(
                "tools", request.tools, "LocalLlama has no native tool calling; use response_schema"
            )
        deadline = None if request.timeout is None else self._deadline_clock() + request.timeout
        return await asyncio.to_thread(self._complete_blocking, call, deadline)

    def _complete_blocking(self, call: CallInfo, deadline: float | None) -> RawCompletion:
        loaded = self._loaded()
        wait = -1.0 if deadline is None else max(0.0, deadline - self._deadline_clock())
        if not loaded.lock.acquire(timeout=wait):
            raise ModelTimeoutError(
                f"{self.name}: timed out after {call.timeout}s waiting for the model "
                "(another call holds it)"
            )
        try:
            return self._generate(loaded, call, deadline)
        finally:
            loaded.lock.release()

    def _generate(self, loaded: _Loaded, call: CallInfo, deadline: float | None) -> RawCompletion:
        request = call.request
        kwargs: dict[str, Any] = {
            "messages": [m.to_dict() for m in call.messages],
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "seed": request.seed if request.seed is not None else self.seed,
        }
        if request.stop:
            kwargs["stop"] = list(request.stop)
        if request.response_schema is not None:
            kwargs["grammar"] = self._grammar(loaded, request.response_schema)
        if not self.prompt_cache:
            loaded.llama.reset()
        recorder = _TokenLogprobs(loaded.llama) if request.logprobs else None
        if recorder is not None:
            kwargs["logits_processor"] = [recorder]
        try:
            on_token = None if recorder is None else recorder.took
            with _watched(loaded.llama, deadline, self._deadline_clock, on_token):
                response = loaded.llama.create_chat_completion(**kwargs)
        except _DeadlineExceededError:
            raise ModelTimeoutError(
                f"{self.name}: generation ran past the {call.timeout}s timeout"
            ) from None
        except ValueError as exc:
            match = _OVERFLOW.search(str(exc))
            if match:
                raise ContextOverflowError(
                    f"{self.name}: the prompt is {match.group(1)} tokens but the context window "
                    f"is {match.group(2)} (n_ctx); shorten the messages or load the model "
                    "with a larger n_ctx"
                ) from None
            raise ModelError(f"{self.name}: llama.cpp refused the call: {exc}") from exc
        except RuntimeError as exc:
            raise ModelError(f"{self.name}: llama.cpp failed during generation: {exc}") from exc
        choice = response["choices"][0]
        usage = response.get("usage") or {}
        return RawCompletion(
            text=choice["message"].get("content") or "",
            prompt_tokens=int(usage.get("prompt_tokens", 0)),
            completion_tokens=int(usage.get("completion_tokens", 0)),
            finish_reason=str(choice.get("finish_reason") or "stop"),
            model=self.name,
            logprobs=() if recorder is None else tuple(recorder.tokens),
        )
