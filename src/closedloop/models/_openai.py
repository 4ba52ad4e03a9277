"""``OpenAICompatible``: any chat-completions server (OpenAI, vLLM, Ollama, llama.cpp, LM Studio).

Built on the official ``openai`` SDK's async client with its retries switched off: retrying
is a control decision and closedloop's controller owns it. Every SDK failure becomes one of
closedloop's typed model errors.

Structured output degrades step by step, remembered per instance, when a server rejects a
form (``structured_output="auto"``): ``json_schema`` response format, then ``json_object``
carrying the schema (llama-cpp-python's server turns that into a grammar), then plain
``json_object``, then no response format at all. From the second step on the schema is also
stated in the prompt, and the reply is parsed leniently (JSON dug out of prose or fences)
and validated against the schema.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

from .._exceptions import (
    ConfigurationError,
    ContextOverflowError,
    ModelAuthError,
    ModelError,
    ModelNotAvailableError,
    ModelRateLimitError,
    ModelResponseError,
    ModelTimeoutError,
    ModelUnreachableError,
    TransientModelError,
)
from .._validation import require_positive
from ._completion import Message, ToolCall
from ._protocol import CallInfo, ModelBase, RawCompletion
from ._usage import Price, UsageMeter

__all__ = ["OpenAICompatible", "StructuredOutput"]

StructuredOutput = Literal["auto", "json_schema", "json_object_schema", "json_object", "prompt"]
"""How an OpenAI-compatible server is asked for JSON: a fixed form, or ``auto`` to step
down from ``json_schema`` to a prompt until the server accepts one."""
_LADDER: tuple[StructuredOutput, ...] = (
    "json_schema",
    "json_object_schema",
    "json_object",
    "prompt",
)
_TOP_LOGPROBS = 5  # alternatives asked per token; the runner-up's share is a margin signal
_OVERFLOW_HINTS = ("context_length_exceeded", "maximum context length", "context window")


def _retry_after(headers: Mapping[str, str], now: Callable[[], float] = time.time) -> float | None:
    """Seconds to wait, from ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date)."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return max(0.0, float(raw_ms) / 1000.0)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - now())


def _schema_instruction(schema: Mapping[str, Any]) -> str:
    return (
        "Answer with one JSON value and nothing else (no prose, no code fences). "
        "It must match this JSON Schema:\n" + json.dumps(schema, ensure_ascii=False)
    )


def _with_instruction(messages: tuple[Message, ...], text: str) -> list[dict[str, Any]]:
    out = [m.to_dict() for m in messages]
    if out and out[0]["role"] == "system":
        out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{text}"}
    else:
        out.insert(0, {"role": "system", "content": text})
    return out


def _error_text(exc: Any) -> str:
    """The SDK's message plus the body it parsed (validation details often live only there)."""
    body = getattr(exc, "body", None)
    text = str(exc)
    if body is not None and str(body) not in text:
        text = f"{text} {json.dumps(body, ensure_ascii=False, default=str)}"
    return text


def _rejected(param: str, exc: Any, params: Mapping[str, Any], *also: str) -> bool:
    """Whether an error is the server refusing ``param`` (or a word of ``also``) that we
    sent. llama-cpp-python's server reports its request validation failure as a 500."""
    if param not in params or int(exc.status_code) not in (400, 422, 500):
        return False
    lowered = _error_text(exc).lower()
    return any(word in lowered for word in (param, *also))


def _format_rejected(exc: Any, params: Mapping[str, Any]) -> bool:
    """Whether an error is the server refusing the response format we asked for."""
    return _rejected("response_format", exc, params, "json_schema")


def _token_logprobs(choice: Any) -> tuple[tuple[str, float], ...]:
    """(token, logprob) of the content tokens, where the server sent ``logprobs``."""
    content = getattr(getattr(choice, "logprobs", None), "content", None) or ()
    out: list[tuple[str, float]] = []
    for item in content:
        logprob = getattr(item, "logprob", None)
        if isinstance(logprob, int | float) and logprob == logprob:  # not NaN
            out.append((str(getattr(item, "token", "")), min(0.0, float(logprob))))
    return tuple(out)


class OpenAICompatible(ModelBase):
    """A model behind an OpenAI-compatible ``/v1/chat/completions`` endpoint.

    ``timeout`` (seconds) is the default per call; ``client`` injects a ready
    ``openai.AsyncOpenAI`` (tests, custom transports). ``price`` None means unknown cost.
    """

    real = True

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        name: str | None = None,
        structured_output: StructuredOutput = "auto",
        strict_schema: bool = False,
        timeout: float = 60.0,
        price: Price | None = None,
        meter: UsageMeter | None = None,
        client: Any = None,
        default_headers: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ConfigurationError("model", model, "must be a non-empty model name")
        if structured_output not in ("auto", *_LADDER):
            raise ConfigurationError(
                "structured_output", structured_output, f"must be one of auto, {', '.join(_LADDER)}"
            )
        super().__init__(
            name or f"openai-compatible:{base_url}#{model}", price=price, meter=meter, clock=clock
        )
        self.base_url = base_url
        self.model = model
        self.timeout = require_positive("timeout", timeout)
        self.strict_schema = bool(strict_schema)
        self._auto = structured_output == "auto"
        self._logprobs_ok = True
        self._rung = 0 if self._auto else _LADDER.index(structured_output)
        self._new_client: Callable[[], Any] | None = None
        if client is None:
            try:
                from openai import AsyncOpenAI
            except ImportError as exc:  # pragma: no cover - depends on the install
                raise ModelNotAvailableError(
                    "the openai SDK is not installed; install closedloop[models]"
                ) from exc
            headers = dict(default_headers or {})

            def new_client() -> Any:
                return AsyncOpenAI(
                    api_key=api_key or "not-needed",
                    base_url=base_url,
                    max_retries=0,
                    timeout=self.timeout,
                    default_headers=headers,
                )

            client, self._new_client = new_client(), new_client
        self._client = client
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def supports_tool_calls(self) -> bool:
        """Chat-completions servers take ``tools`` and answer with native tool calls."""
        return True

    @property
    def supports_logprobs(self) -> bool:
        """Chat-completions servers return ``logprobs`` when asked, until this one refuses
        them once (some reasoning models do): from then on it is not asked again."""
        return self._logprobs_ok

    @property
    def structured_output(self) -> StructuredOutput:
        """The structured-output form in use now (it moves down the ladder on rejection)."""
        return _LADDER[self._rung]

    def _client_now(self) -> Any:
        """The client for the running event loop.

        The SDK's pooled connections belong to the loop that opened them: a model used from
        a new loop (a second ``run_sync``, a second ``asyncio.run``) gets a fresh client
        rather than "Event loop is closed". An injected client is used as given.
        """
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            if self._loop is not None and self._new_client is not None:
                self._client = self._new_client()
            self._loop = loop
        return self._client

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        if self._new_client is not None and self._loop is not None and self._loop.is_closed():
            return  # its connections died with the loop that opened them
        await self._client.close()

    async def _complete(self, call: CallInfo) -> RawCompletion:
        import openai

        while True:
            rung = _LADDER[self._rung]
            params = self._params(call, rung)
            try:
                response = await self._send(params, call)
            except openai.APIStatusError as exc:
                if self._auto and self._rung + 1 < len(_LADDER) and _format_rejected(exc, params):
                    self._rung += 1
                    continue
                if _rejected("logprobs", exc, params):
                    self._logprobs_ok = False  # the sensor reads None; the call goes on
                    continue
                raise self._status_error(exc) from exc
            lenient = call.request.response_schema is not None and rung != "json_schema"
            return self._raw(response, lenient=lenient)

    def _params(self, call: CallInfo, rung: StructuredOutput) -> dict[str, Any]:
        request = call.request
        schema = request.response_schema
        if schema is not None and rung != "json_schema":
            messages = _with_instruction(call.messages, _schema_instruction(schema))
        else:
            messages = [m.to_dict() for m in call.messages]
        params: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
        }
        if request.stop:
            params["stop"] = list(request.stop)
        if request.seed is not None:
            params["seed"] = request.seed
        if request.logprobs and self._logprobs_ok:
            params["logprobs"] = True
            params["top_logprobs"] = _TOP_LOGPROBS
        if request.tools:
            params["tools"] = [dict(t) for t in request.tools]
            # "auto" is OpenAI's and vLLM's default once tools are sent, but llama-cpp-python's
            # server reads a missing tool_choice as "none" and would answer in prose.
            params["tool_choice"] = "auto"
        if schema is not None:
            if rung == "json_schema":
                params["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {
                        "name": "response",
                        "schema": dict(schema),
                        "strict": self.strict_schema,
                    },
                }
            elif rung == "json_object_schema":
                params["response_format"] = {"type": "json_object", "schema": dict(schema)}
            elif rung == "json_object":
                params["response_format"] = {"type": "json_object"}
        return params

    async def _send(self, params: dict[str, Any], call: CallInfo) -> Any:
        import openai

        timeout = call.request.timeout if call.request.timeout is not None else self.timeout
        try:
            # The SDK's timeout bounds each network phase; wait_for bounds the whole call.
            return await asyncio.wait_for(
                self._client_now().chat.completions.create(**params, timeout=timeout), timeout
            )
        except TimeoutError:
            raise ModelTimeoutError(f"{self.name}: no answer within {timeout}s") from None
        except openai.APITimeoutError:
            raise ModelTimeoutError(f"{self.name}: no answer within {timeout}s") from None
        except openai.APIConnectionError as exc:
            cause = exc.__cause__ or exc
            raise ModelUnreachableError(
                f"cannot reach {self.base_url}: {cause}; is the server running?"
            ) from exc
        except openai.APIStatusError:
            raise  # mapped by the caller, which may first step down the format ladder
        except openai.OpenAIError as exc:
            raise ModelError(f"{self.name}: {exc}") from exc

    def _status_error(self, exc: Any) -> ModelError:
        import openai

        status = int(exc.status_code)
        text = _error_text(exc)
        lowered = text.lower()
        where = f"{self.base_url} answered {status}"
        if isinstance(exc, openai.AuthenticationError | openai.PermissionDeniedError):
            return ModelAuthError(
                f"{where}: the credentials were refused; check OPENAI_API_KEY or api_key ({text})"
            )
        if isinstance(exc, openai.RateLimitError):
            retry_after = _retry_after(exc.response.headers)
            return ModelRateLimitError(
                f"{where}: rate limited; retry after {retry_after}s ({text})",
                retry_after=retry_after,
            )
        if any(hint in lowered for hint in _OVERFLOW_HINTS):
            return ContextOverflowError(
                f"{where}: the prompt does not fit the model's context window; "
                f"shorten the messages or lower max_tokens ({text})"
            )
        if isinstance(exc, openai.NotFoundError):
            return ModelNotAvailableError(f"{where}: no such model {self.model!r} ({text})")
        if status >= 500 or status in (408, 409):
            return TransientModelError(f"{where}: a server-side failure; may pass ({text})")
        return ModelResponseError(f"{where}: {text}")

    def _raw(self, response: Any, *, lenient: bool) -> RawCompletion:
        choices = getattr(response, "choices", None)
        if not choices:
            raise ModelResponseError(f"{self.name}: the server answered with no choices")
        choice = choices[0]
        message = choice.message
        tool_calls = tuple(
            ToolCall(id=tc.id, name=tc.function.name, arguments=tc.function.arguments or "")
            for tc in (message.tool_calls or ())
            if getattr(tc, "function", None) is not None
        )
        usage = response.usage
        return RawCompletion(
            text=message.content or "",
            prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
            completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
            finish_reason=str(choice.finish_reason or "stop"),
            model=self.name,
            tool_calls=tool_calls,
            lenient_json=lenient,
            logprobs=_token_logprobs(choice),
        )
