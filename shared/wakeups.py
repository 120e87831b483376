"""Publishing wake-ups in batches, for the receiver and for the worker's fan-out.

`shared` never imports Celery: `app` is a Celery app, used only through its public methods."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shared.tasknames import DRAIN, TURNS_QUEUE, WAKE


def send_drains(app: Any, session_keys: Sequence[str]) -> None:
    """A drain task per key through one producer in one kombu batch: on Redis one pipelined
    round trip for all of them and their task-sent events. Raises if the batch fails (some may
    have been sent; a duplicate wake-up is harmless)."""
    _send(app, [(DRAIN, [key], repr([key])) for key in session_keys])


def send_wake(app: Any, session_keys: Sequence[str]) -> None:
    """One `hermes.turns.wake` task naming every key (a worker sends their drains), with its
    task-sent event in the same round trip. Raises if it is not sent."""
    _send(app, [(WAKE, [list(session_keys)], f"[{len(session_keys)} session keys]")])


def _send(app: Any, tasks: Sequence[tuple[str, list[Any], str]]) -> None:
    with app.producer_or_acquire() as producer, producer.batch():
        for name, args, argsrepr in tasks:
            app.send_task(
                name,
                args=args,
                queue=TURNS_QUEUE,
                producer=producer,
                retry=False,
                argsrepr=argsrepr,  # what Celery's saferepr would give, at a tenth the cost
                kwargsrepr="{}",
            )
