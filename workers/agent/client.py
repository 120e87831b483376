"""One OpenAI-compatible chat endpoint: a completion (streamed when it can be), retried on 429/5xx.

The SDK's own retries are off (`max_retries=0`): this module retries with exponential backoff,
honours `Retry-After`, and checks `should_stop` while it waits, so a /stop is not held up by a
rate-limited endpoint.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import openai

from shared.sections import Endpoint

log = logging.getLogger(__name__)

MAX_RETRY_AFTER = 30.0
WAIT_STEP = 0.1
NO_KEY = "not-needed"  # the SDK insists on a key; local servers (Ollama, llama.cpp) take any


class Stopped(Exception):
    """The user asked to stop (or the lease was lost) while the model was working."""


class ModelUnavailable(Exception):
    """The endpoint stayed unreachable or overloaded after every retry."""

    def __init__(self, reason: str, attempts: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.attempts = attempts


class ModelRejected(Exception):
    """The endpoint refused the request itself (bad key, unknown model, malformed input)."""

    def __init__(self, status: int | None, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class ImagesRejected(ModelRejected):
    """A 400 for a request that carried images: the model does not take them."""


@dataclass
class Completion:
    content: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None  # of prompt_tokens, when the endpoint says
    reasoning_tokens: int | None = None  # of completion_tokens, when the endpoint says
    finish_reason: str | None = None
    latency_ms: float = 0.0  # the successful request's wall time

    def take_usage(self, usage: Any) -> None:
        """Tokens as an OpenAI-compatible `usage` object reports them (its details optional)."""
        self.prompt_tokens = getattr(usage, "prompt_tokens", None)
        self.completion_tokens = getattr(usage, "completion_tokens", None)
        prompt_details = getattr(usage, "prompt_tokens_details", None)
        self.cached_tokens = getattr(prompt_details, "cached_tokens", None)
        completion_details = getattr(usage, "completion_tokens_details", None)
        self.reasoning_tokens = getattr(completion_details, "reasoning_tokens", None)


def _has_images(messages: list[dict[str, Any]]) -> bool:
    for message in messages:
        content = message.get("content")
        if isinstance(content, list) and any(
            isinstance(part, dict) and part.get("type") == "image_url" for part in content
        ):
            return True
    return False


def _reason(exc: Exception) -> str:
    if isinstance(exc, openai.APIStatusError):
        body = exc.body
        message = body.get("message") if isinstance(body, dict) else None
        detail = " ".join(str(message or exc.message).split())[:200]
        return f"HTTP {exc.status_code}: {detail}"
    if isinstance(exc, openai.APITimeoutError):
        return "the request timed out"
    if isinstance(exc, openai.APIConnectionError):
        cause = exc.__cause__ or exc
        return f"cannot connect ({type(cause).__name__})"
    return f"{type(exc).__name__}: {exc}"


def _retry_after(exc: Exception) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        raw = headers.get(name)
        if raw is None:
            continue
        try:
            return min(MAX_RETRY_AFTER, max(0.0, float(raw) * scale))
        except ValueError:
            continue
    return None


def _retryable(exc: Exception) -> bool:
    if isinstance(exc, openai.APIConnectionError):  # includes timeouts
        return True
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code == 429 or exc.status_code >= 500 or exc.status_code == 408
    return False


class ChatClient:
    """Completions from one endpoint; thread-safe (one per process, shared by its turns)."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        timeout: float,
        retries: int,
        backoff: float,
        stream: bool = True,
        max_output_tokens: int | None = None,
    ) -> None:
        key = endpoint.api_key.get_secret_value() if endpoint.api_key is not None else NO_KEY
        self.endpoint = endpoint
        self.model = endpoint.name
        self._client = openai.OpenAI(
            base_url=endpoint.base_url, api_key=key, timeout=timeout, max_retries=0
        )
        self._retries = retries
        self._backoff = backoff
        self._stream = stream
        self._stream_usage = True
        self._max_output_tokens = max_output_tokens
        self._lock = threading.Lock()

    @property
    def sdk(self) -> openai.OpenAI:
        return self._client

    def close(self) -> None:
        self._client.close()

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        should_stop: Callable[[], bool] = lambda: False,
        stream: bool | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> Completion:
        """One completion, retried on 429/5xx/connection errors; raises the errors above.
        `on_text` is given the reply's text so far as it streams (a retry starts it again)."""
        attempts = self._retries + 1
        last: Exception | None = None
        for attempt in range(attempts):
            if should_stop():
                raise Stopped
            try:
                started = time.perf_counter()
                completion = self._once(messages, tools, should_stop, stream, on_text)
                completion.latency_ms = (time.perf_counter() - started) * 1000
                return completion
            except (Stopped, ModelRejected):
                raise
            except Exception as exc:
                if not _retryable(exc):
                    if isinstance(exc, openai.APIStatusError) and exc.status_code == 400:
                        kind = ImagesRejected if _has_images(messages) else ModelRejected
                        raise kind(400, _reason(exc)) from exc
                    status = exc.status_code if isinstance(exc, openai.APIStatusError) else None
                    raise ModelRejected(status, _reason(exc)) from exc
                last = exc
            if attempt + 1 < attempts:
                delay = _retry_after(last)
                if delay is None:
                    delay = min(MAX_RETRY_AFTER, self._backoff * 2**attempt)
                log.warning(
                    "model %s at %s: %s; retry %s/%s in %.1fs",
                    self.model,
                    self.endpoint.base_url,
                    _reason(last),
                    attempt + 1,
                    self._retries,
                    delay,
                )
                self._wait(delay, should_stop)
        assert last is not None
        raise ModelUnavailable(_reason(last), attempts) from last

    def _wait(self, seconds: float, should_stop: Callable[[], bool]) -> None:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if should_stop():
                raise Stopped
            time.sleep(min(WAIT_STEP, left))

    def _request(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, stream: bool
    ) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages}
        if tools:
            kwargs["tools"] = tools
        if self._max_output_tokens is not None:
            kwargs["max_tokens"] = self._max_output_tokens
        if stream:
            kwargs["stream"] = True
            if self._stream_usage:
                kwargs["stream_options"] = {"include_usage": True}
        return kwargs

    def _once(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        should_stop: Callable[[], bool],
        stream: bool | None,
        on_text: Callable[[str], None] | None = None,
    ) -> Completion:
        streaming = self._stream if stream is None else (stream and self._stream)
        try:
            if streaming:
                return self._streamed(self._request(messages, tools, True), should_stop, on_text)
            whole = self._client.chat.completions.create(**self._request(messages, tools, False))
            return _whole(whole)
        except openai.BadRequestError as exc:
            text = str(exc.message).lower()
            if streaming and "stream_options" in text and self._stream_usage:
                self._stream_usage = False  # an older server: stream without the usage chunk
                return self._once(messages, tools, should_stop, stream, on_text)
            if streaming and "stream" in text:
                with self._lock:
                    self._stream = False  # this endpoint does not stream: stop asking
                log.warning("model %s does not stream; using whole responses", self.model)
                return self._once(messages, tools, should_stop, False, on_text)
            raise

    def _streamed(
        self,
        kwargs: dict[str, Any],
        should_stop: Callable[[], bool],
        on_text: Callable[[str], None] | None,
    ) -> Completion:
        result = Completion()
        parts: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        response = self._client.chat.completions.create(**kwargs)
        try:
            for chunk in response:
                if should_stop():
                    raise Stopped
                usage = getattr(chunk, "usage", None)
                if usage is not None:
                    result.take_usage(usage)
                for choice in chunk.choices or []:
                    if choice.finish_reason:
                        result.finish_reason = choice.finish_reason
                    delta = choice.delta
                    if delta is None:
                        continue
                    if delta.content:
                        parts.append(delta.content)
                        if on_text is not None:
                            on_text("".join(parts))
                    for piece in delta.tool_calls or []:
                        _merge_call(calls, piece)
        finally:
            response.close()
        result.content = "".join(parts)
        result.tool_calls = [calls[i] for i in sorted(calls)]
        return result


def _merge_call(calls: dict[int, dict[str, Any]], piece: Any) -> None:
    """Streamed tool calls arrive in fragments keyed by index: id and name once, arguments split."""
    index = piece.index if piece.index is not None else len(calls)
    call = calls.setdefault(
        index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
    )
    if piece.id:
        call["id"] = piece.id
    function = piece.function
    if function is not None:
        if function.name:
            call["function"]["name"] += function.name
        if function.arguments:
            call["function"]["arguments"] += function.arguments


def _whole(response: Any) -> Completion:
    result = Completion()
    usage = getattr(response, "usage", None)
    if usage is not None:
        result.take_usage(usage)
    if not response.choices:
        return result
    choice = response.choices[0]
    result.finish_reason = choice.finish_reason
    message = choice.message
    result.content = message.content or ""
    for call in message.tool_calls or []:
        function = getattr(call, "function", None)
        result.tool_calls.append(
            {
                "id": call.id,
                "type": "function",
                "function": {
                    "name": getattr(function, "name", "") or "",
                    "arguments": getattr(function, "arguments", "") or "",
                },
            }
        )
    return result


def model_config(client: ChatClient, **extra: Any) -> str:
    """The session's `model_config` snapshot: where and how it was answered (never the key)."""
    config = {"base_url": client.endpoint.base_url, "model": client.model, **extra}
    return json.dumps(config, ensure_ascii=False, sort_keys=True)
