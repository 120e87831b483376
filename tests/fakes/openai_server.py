"""A fake OpenAI-compatible server on 127.0.0.1 (starlette on uvicorn, in a thread), scriptable.

Each chat request takes the next scripted step for its model (or the shared script), else the
default: an echo of the last user text. Steps: a reply (text, tool calls, usage with cached
and reasoning token details, or no usage at all), an HTTP
error (429 with Retry-After, 500, ...), or a callable deciding from the request. Requests are
recorded. `stream: true` requests get SSE chunks (with a usage chunk when asked for);
models in `no_vision` refuse image input with a 400 like real text-only endpoints; the
transcription endpoint answers with `transcript`.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


@dataclass
class Step:
    content: str | None = None
    tool_calls: list[tuple[str, dict[str, Any] | str]] = field(default_factory=list)
    usage: tuple[int, int] | None = (11, 7)
    cached: int | None = None  # usage.prompt_tokens_details.cached_tokens
    reasoning: int | None = None  # usage.completion_tokens_details.reasoning_tokens
    status: int = 200
    error: str = "scripted failure"
    headers: dict[str, str] = field(default_factory=dict)
    # Streaming slowly: a pause before each text chunk, and a gate the last chunk waits for
    # (set by the test once it has seen the first words arrive).
    chunk_delay: float = 0.0
    first_delay: float = 0.0  # the model "thinking" before its first chunk
    gate: threading.Event | None = None
    chunk_size: int = 8


def reply(
    text: str,
    usage: tuple[int, int] | None = (11, 7),
    *,
    cached: int | None = None,
    reasoning: int | None = None,
) -> Step:
    return Step(content=text, usage=usage, cached=cached, reasoning=reasoning)


def tool_call(name: str, args: dict[str, Any] | str, usage: tuple[int, int] = (20, 5)) -> Step:
    return Step(tool_calls=[(name, args)], usage=usage)


def error(status: int, message: str = "scripted failure", **headers: str) -> Step:
    return Step(
        status=status, error=message, headers={k.replace("_", "-"): v for k, v in headers.items()}
    )


StepLike = Step | Callable[[dict[str, Any]], Step]


@dataclass
class Recorded:
    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    raw: bytes = b""

    @property
    def model(self) -> str:
        return str(self.body.get("model", ""))

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages", []))

    def text(self) -> str:
        """Every text part of every message, joined (for "was X sent?" checks)."""
        out = []
        for message in self.messages:
            content = message.get("content")
            if isinstance(content, str):
                out.append(content)
            elif isinstance(content, list):
                out.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
        return "\n".join(out)

    def has_image(self) -> bool:
        return any(
            isinstance(m.get("content"), list)
            and any(isinstance(p, dict) and p.get("type") == "image_url" for p in m["content"])
            for m in self.messages
        )


def _last_user(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages", [])):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            return str(content)
    return ""


class FakeOpenAI:
    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.transcript = "this is the transcript"
        self.no_vision: set[str] = set()
        self.always: Step | None = None  # answer every chat request with this (persistent 500)
        self._shared: deque[StepLike] = deque()
        self._by_model: dict[str, deque[StepLike]] = defaultdict(deque)
        self._lock = threading.Lock()
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0
        self.host = "127.0.0.1"
        self._ids = 0
        self.text_done_at = 0.0  # when the last streamed reply's last text chunk was sent
        # (request received, first text chunk sent) per streamed reply, time.time() (benches)
        self.first_text: list[tuple[float, float]] = []

    # --- scripting ---

    def script(self, *steps: StepLike, model: str | None = None) -> None:
        with self._lock:
            (self._by_model[model] if model else self._shared).extend(steps)

    def chats(self, model: str | None = None) -> list[Recorded]:
        return [
            r
            for r in self.requests
            if r.path.endswith("/chat/completions") and (not model or r.model == model)
        ]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def _next(self, body: dict[str, Any]) -> Step:
        with self._lock:
            if self.always is not None:
                return self.always
            queue = self._by_model.get(str(body.get("model")))
            if queue:
                step = queue.popleft()
            elif self._shared:
                step = self._shared.popleft()
            else:
                return reply(f"echo: {_last_user(body)}")
        return step(body) if callable(step) else step

    # --- HTTP ---

    async def _chat(self, request: Request) -> Response:
        raw = await request.body()
        body = json.loads(raw)
        self.requests.append(Recorded(request.url.path, body, dict(request.headers), raw))
        model = str(body.get("model"))
        record = self.requests[-1]
        if model in self.no_vision and record.has_image():
            return _error(400, f"model {model} does not support image input", {})
        step = self._next(body)
        if step.status != 200:
            return _error(step.status, step.error, step.headers)
        self._ids += 1
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return StreamingResponse(
                self._sse(step, model, include_usage), media_type="text/event-stream"
            )
        return JSONResponse(self._whole(step, model))

    def _calls(self, step: Step) -> list[dict[str, Any]]:
        calls = []
        for n, (name, args) in enumerate(step.tool_calls):
            arguments = args if isinstance(args, str) else json.dumps(args)
            calls.append(
                {
                    "id": f"call_{self._ids}_{n}",
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            )
        return calls

    def _whole(self, step: Step, model: str) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": step.content}
        calls = self._calls(step)
        if calls:
            message["tool_calls"] = calls
        out: dict[str, Any] = {
            "id": f"chatcmpl-{self._ids}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
            ],
        }
        if step.usage is not None:
            out["usage"] = _usage(step)
        return out

    async def _sse(self, step: Step, model: str, include_usage: bool) -> AsyncIterator[bytes]:
        base = {
            "id": f"chatcmpl-{self._ids}",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
        }

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            data = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            return f"data: {json.dumps(data)}\n\n".encode()

        received = time.time()
        await asyncio.sleep(step.first_delay)
        yield chunk({"role": "assistant", "content": ""})
        text = step.content or ""
        size = step.chunk_size
        for start in range(0, len(text), size):
            if step.gate is not None and start + size >= len(text):
                await asyncio.to_thread(step.gate.wait, 60)
            yield chunk({"content": text[start : start + size]})
            if start == 0:
                self.first_text.append((received, time.time()))
            await asyncio.sleep(step.chunk_delay)
        self.text_done_at = time.monotonic()
        for n, call in enumerate(self._calls(step)):
            head = {
                "index": n,
                "id": call["id"],
                "type": "function",
                "function": {"name": call["function"]["name"], "arguments": ""},
            }
            yield chunk({"tool_calls": [head]})
            arguments = call["function"]["arguments"]
            for start in range(0, len(arguments), 5):
                piece = {"index": n, "function": {"arguments": arguments[start : start + 5]}}
                yield chunk({"tool_calls": [piece]})
        yield chunk({}, "tool_calls" if step.tool_calls else "stop")
        if include_usage and step.usage is not None:
            usage = _usage(step)
            yield f"data: {json.dumps({**base, 'choices': [], 'usage': usage})}\n\n".encode()
        yield b"data: [DONE]\n\n"

    async def _transcribe(self, request: Request) -> Response:
        raw = await request.body()
        match = re.search(rb'name="model"\r\n\r\n([^\r]*)\r\n', raw)
        body = {"model": match.group(1).decode() if match else None, "bytes": len(raw)}
        self.requests.append(Recorded(request.url.path, body, dict(request.headers), raw))
        return JSONResponse({"text": self.transcript})

    async def _models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": []})

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                Route("/v1/audio/transcriptions", self._transcribe, methods=["POST"]),
                Route("/v1/models", self._models, methods=["GET"]),
            ]
        )

    # --- lifecycle ---

    def start(self, host: str = "127.0.0.1") -> None:
        """Serve on a free port of `host` (another local address: a bridge the test made)."""
        self.host = host
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app(), log_level="warning", lifespan="off", ws="none", http="h11", loop="asyncio"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="fake-openai", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the fake OpenAI server did not start")
            time.sleep(0.01)
        self._socket = sock

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)
        if getattr(self, "_socket", None) is not None:
            self._socket.close()


def _usage(step: Step) -> dict[str, Any]:
    assert step.usage is not None
    prompt, completion = step.usage
    usage: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }
    if step.cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": step.cached}
    if step.reasoning is not None:
        usage["completion_tokens_details"] = {"reasoning_tokens": step.reasoning}
    return usage


def _error(status: int, message: str, headers: dict[str, str]) -> Response:
    kind = (
        "rate_limit_error"
        if status == 429
        else "server_error"
        if status >= 500
        else "invalid_request_error"
    )
    payload = {"error": {"message": message, "type": kind, "code": None, "param": None}}
    return JSONResponse(payload, status_code=status, headers=headers)


@contextmanager
def running() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    server.start()
    try:
        yield server
    finally:
        server.stop()
