"""One asyncio event loop per worker process, in a background thread, for async SDK clients.

Worker threads are synchronous; python-telegram-bot is async and its HTTP client is bound to
the loop it first ran on. So each process runs one loop in a daemon thread, created lazily in
the process that uses it (never before a fork: a child that finds a loop from its parent
makes its own), and threads submit coroutines with `run_coroutine_threadsafe`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    def __init__(self, name: str = "hermes-aio") -> None:
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._on_new_loop: list[Callable[[], None]] = []

    def on_new_loop(self, callback: Callable[[], None]) -> None:
        """Called (under the lock) whenever a new loop is made: drop loop-bound clients."""
        self._on_new_loop.append(callback)

    def _ensure(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._pid != os.getpid():
                for callback in self._on_new_loop:
                    callback()
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name=self._name, daemon=True)
                thread.start()
                self._loop, self._thread, self._pid = loop, thread, os.getpid()
            return self._loop

    def run(self, make: Callable[[], Coroutine[Any, Any, T]], timeout: float) -> T:
        """Run `make()` on the loop and wait up to `timeout` seconds for its result."""
        loop = self._ensure()
        future = asyncio.run_coroutine_threadsafe(make(), loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"no answer within {timeout:g} s") from None

    def close(self, cleanup: Callable[[], Coroutine[Any, Any, None]] | None = None) -> None:
        """Run `cleanup` on the loop, then stop it and join its thread (this process only)."""
        with self._lock:
            loop, thread = self._loop, self._thread
            if loop is None or thread is None or self._pid != os.getpid():
                self._loop = self._thread = None
                return
            if cleanup is not None:
                with contextlib.suppress(Exception):  # best effort: the process is going away
                    asyncio.run_coroutine_threadsafe(cleanup(), loop).result(10)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
            self._loop = self._thread = None
