"""Reading a webhook body safely: a size cap enforced while reading, before anything is parsed."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse

from shared.surrogates import scrub_body

MAX_BODY = 1024 * 1024  # 1 MiB: Telegram updates and Slack events are a few KiB


class BadRequest(Exception):
    """Answer `status` with `reason`; nothing was recorded."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason

    def response(self) -> JSONResponse:
        return JSONResponse({"ok": False, "error": self.reason}, status_code=self.status)


async def read_body(request: Request, limit: int = MAX_BODY) -> bytes:
    """The raw body, or BadRequest(413) as soon as it is known to exceed `limit`."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            if int(declared) > limit:
                raise BadRequest(413, f"body over {limit} bytes")
        except ValueError:
            raise BadRequest(400, "bad Content-Length") from None
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise BadRequest(413, f"body over {limit} bytes")
            chunks.append(chunk)
    except ClientDisconnect:  # it left, or was cut off by the body deadline (timeouts.py)
        raise BadRequest(408, "the body did not arrive") from None
    return b"".join(chunks)


def media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


def parse_json(body: bytes) -> dict[str, Any]:
    """The body's JSON object, every string in it storable (shared.surrogates), or BadRequest."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise BadRequest(400, "malformed JSON") from None
    except RecursionError:  # ~1,000 levels: no platform nests anything near that
        raise BadRequest(400, "JSON nested too deep") from None
    if not isinstance(data, dict):
        raise BadRequest(400, "the body must be a JSON object")
    return scrub_body(body, data)  # type: ignore[no-any-return]
