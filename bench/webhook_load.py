"""The load of bench/webhooks.py: each `--load` child process drives one endpoint with a lean
keep-alive HTTP/1.1 client over asyncio (so the load is not the bottleneck) and prints the raw
latencies as one JSON line."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

from bench.webhook_payloads import BODIES, request, sign_sms

REQUEST_TIMEOUT = 5.0  # an ack slower than this counts as an error and ends its connection


async def _read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    if length:
        await reader.readexactly(length)
    return status


async def _drive(
    url: str, kind: str, bodies: list[bytes], connections: int, seconds: float
) -> dict[str, Any]:
    """A lean keep-alive HTTP/1.1 client (the load must not be the bottleneck): `connections`
    sockets, each sending its next request as soon as the last one is acked."""
    _, rest = url.split("://", 1)
    hostport, _, path = rest.partition("/")
    host, port = hostport.split(":")
    path = "/" + path
    latencies: list[float] = []
    errors = ok = 0
    queue = list(reversed(bodies))
    deadline = time.perf_counter() + seconds

    async def one() -> None:
        nonlocal errors, ok
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            while queue and time.perf_counter() < deadline:
                sending = request(path, int(port), kind, queue.pop())
                sent = time.perf_counter()
                writer.write(sending)
                try:
                    status = await asyncio.wait_for(_read_response(reader), REQUEST_TIMEOUT)
                except TimeoutError:  # a stuck server must not stretch the run: an error, and
                    latencies.append(time.perf_counter() - sent)  # this connection is done
                    errors += 1
                    return
                latencies.append(time.perf_counter() - sent)
                if status == 200:
                    ok += 1
                else:
                    errors += 1
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(connections)))
    elapsed = time.perf_counter() - started
    return {"latencies": latencies, "errors": errors, "ok": ok, "elapsed": elapsed}


def load(url: str, kind: str, start: int, count: int, connections: int, seconds: float) -> None:
    """`--load`: drive `url` and print the raw latencies as one JSON line."""
    bodies = BODIES[kind](start, count)
    if kind == "sms":
        sign_sms(url, bodies)
    result = asyncio.run(_drive(url, kind, bodies, connections, seconds))
    print(json.dumps(result))
