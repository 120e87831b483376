"""Running a receiver's coroutine on its own event loop in a thread, cancelled on exit."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine
from typing import Any


class Background:
    def __init__(self, make: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        self._make = make
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Task[Any] | None = None
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        async def main() -> None:
            self.loop = asyncio.get_running_loop()
            self.task = asyncio.current_task()
            self.ready.set()
            await self._make()

        with contextlib.suppress(asyncio.CancelledError):
            asyncio.run(main())

    def __enter__(self) -> Background:
        self.thread.start()
        self.ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.loop is not None and self.task is not None
        self.loop.call_soon_threadsafe(self.task.cancel)
        self.thread.join(15)
        assert not self.thread.is_alive()
