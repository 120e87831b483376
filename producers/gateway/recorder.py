"""Recording a receiver's turns in batches: one transaction for all the turns that arrived while
the last batch was being written, then their wake-ups in one publish, from one worker thread.

Profiled under bench/webhooks.py, one turn per request cost two thread hops (each a futex
wake of a sleeping thread, which on a busy machine costs more than the Python around it), a
transaction of its own (BEGIN, COMMIT) and a broker publish of its own (a pool checkout and
two Redis round trips: the task and its task-sent event) — more than the HTTP handling. So:

- `record` checks the turn on the event loop (TurnRejected is raised there, nothing written)
  and queues it. One worker thread takes everything queued, records it as one unit per turn
  of one transaction (`intake.record_all`), and answers each request once that transaction
  is committed — never before. A unit that raises fails its own request only; a lost
  transaction fails them all (the receivers answer 503; the platform redelivers and the
  inbox's unique event id keeps that a no-op).
- Then, on the same thread, the wake-ups the batch claimed (coalesced per session by
  routes.wake_sent_at, as before) go out in one batch (`intake.wake_all`). The acks do not
  wait for them: the turns are committed, and a wake-up that is not sent has its claim
  forgotten, so the next turn sends one and the redrive sweep finds this one.
- The thread keeps taking batches while turns are queued and returns when none are: a busy
  receiver wakes it once per burst, not once per request.
- Under load, wake-ups go out at most once per WAKE_EVERY: those claimed by batches committed
  meanwhile wait and go together. A publish (Celery's message, its task-sent event, a Redis
  round trip) cost ~25% of the receiver's CPU when every small batch had its own; the first
  wake-up after a quiet spell still goes at once. While some wait, and for WAKE_EVERY after
  its last batch, the thread stays for the next turns (told by a condition) instead of
  leaving and being started again through anyio, a thread hand-off that cost as much again.
  Acks never wait for any of this.

A Recorder belongs to one event loop; `settled` waits until its thread is idle (the app's
shutdown awaits it, so the wake-ups of acked turns are not dropped on exit).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Sequence

from anyio import CapacityLimiter, to_thread

from producers.intake import (
    Accepted,
    Before,
    Checked,
    Checker,
    WakeUp,
    record_all,
    wake_all,
    wake_up_for,
)
from shared.db import Store
from shared.pipeline import inbox
from shared.ports import Clock, Waker
from shared.settings import Settings
from shared.turns import InboundTurn

log = logging.getLogger(__name__)

# Turns per transaction at most (a batch is whatever queued meanwhile, usually far fewer).
MAX_BATCH = 256
# Under load, wake-ups are published at most this often (seconds); a turn's wake-up waits at
# most this long behind the last publish. Drains take seconds: 10 ms is noise to a reply.
WAKE_EVERY = 0.01

Waiting = tuple[Checked, "asyncio.Future[Accepted]"]
Outcome = inbox.Recorded | Exception


class Recorder:
    """Batches one event loop's turns into transactions and their wake-ups into publishes."""

    def __init__(self, store: Store, waker: Waker, settings: Settings, clock: Clock) -> None:
        self.loop = asyncio.get_running_loop()
        self._store = store
        self._waker = waker
        self._checked = Checker(settings)
        self._clock = clock
        self._lock = threading.Lock()
        self._queue: deque[Waiting] = deque()  # guarded by _lock, with _busy and _lingering
        self._busy = False  # the worker thread is taking batches
        self._lingering = False  # the worker thread waits on _more for turns (wake-ups wait)
        self._telling = False  # a call to _tell is scheduled on the loop
        self._more = threading.Condition(self._lock)
        self._wakes: list[WakeUp] = []  # claimed, not yet published (the worker thread's)
        self._published = -WAKE_EVERY  # time.monotonic() of the last publish (worker thread)
        self._last_batch = -WAKE_EVERY  # and of the last batch taken
        self._worker: asyncio.Task[None] | None = None
        self._slot = CapacityLimiter(1)

    async def record(self, turn: InboundTurn, before: Before | None = None) -> Accepted:
        """Returns once `turn` is committed. Raises TurnRejected (nothing written) for a bad
        turn, or the store's error if its unit or its transaction failed.

        `before` (a receiver's own write) is committed in the turn's unit of work, ahead of it.

        `woken` is True: a worker is woken by a wake-up now queued, by one already on its way,
        or by the drain holding the session; if the queued one is not sent, redrive wakes it.
        """
        item = self._checked(turn, before)
        future: asyncio.Future[Accepted] = self.loop.create_future()
        with self._lock:
            self._queue.append((item, future))
            start, self._busy = not self._busy, True
            tell = self._lingering and not self._telling
            self._telling = self._telling or tell
        if start:
            self._worker = self.loop.create_task(self._run(), name="record turns")
        elif tell:  # after the requests this loop pass already has: they join the batch
            self.loop.call_soon(self._tell)
        return await future

    def _tell(self) -> None:
        """Wake the lingering worker thread, once for every turn queued until now."""
        with self._lock:
            self._telling = False
            if self._lingering:
                self._lingering = False
                self._more.notify()

    async def settled(self) -> None:
        """Wait until every queued turn is recorded and its wake-up sent."""
        while self._worker is not None:
            await asyncio.wait([self._worker])

    async def _run(self) -> None:
        try:
            await to_thread.run_sync(self._work, limiter=self._slot)
        finally:
            if self._worker is asyncio.current_task():
                self._worker = None

    # --- the worker thread ---

    def _work(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                if not self._wakes:
                    return  # _take let go of the turn
                self._publish()
                continue
            try:
                outcomes: Sequence[Outcome] = record_all(
                    self._store, [item for item, _ in batch], clock=self._clock
                )
            except Exception as exc:  # not one unit's failure: the whole batch's
                outcomes = [exc] * len(batch)
            with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits for these
                self.loop.call_soon_threadsafe(_answer, batch, outcomes)
            self._wakes.extend(
                wake
                for outcome in outcomes
                if not isinstance(outcome, Exception) and (wake := wake_up_for(outcome))
            )
            if self._wakes and (
                time.monotonic() - self._published >= WAKE_EVERY or len(self._wakes) >= MAX_BATCH
            ):
                self._publish()

    def _take(self) -> list[Waiting] | None:
        """The next batch; None when nothing is queued, having waited for turns until the
        waiting wake-ups are due (or, with none waiting, for WAKE_EVERY after the last batch:
        under load the next turns come sooner, and waking this thread costs less than leaving
        and being started again). With no wake-up waiting either, the thread's turn ends."""
        with self._lock:
            if not self._queue:
                since = self._published if self._wakes else self._last_batch
                due = since + WAKE_EVERY - time.monotonic()
                if due > 0:
                    self._lingering = True
                    try:
                        self._more.wait(due)
                    finally:
                        self._lingering = False
            if not self._queue:
                if not self._wakes:
                    self._busy = False
                return None
            self._last_batch = time.monotonic()
            return [self._queue.popleft() for _ in range(min(MAX_BATCH, len(self._queue)))]

    def _publish(self) -> None:
        wakes, self._wakes = self._wakes, []
        self._published = time.monotonic()
        try:
            wake_all(self._store, self._waker, wakes)
        except Exception as exc:  # the claims could not be forgotten: they go stale
            log.error("wake-ups for %d turns: %s (redrive finds them)", len(wakes), exc)


def _answer(batch: Sequence[Waiting], outcomes: Sequence[Outcome]) -> None:
    """On the event loop: answer each request of a committed batch (or fail it)."""
    for (item, future), outcome in zip(batch, outcomes, strict=True):
        if future.done():  # a request that went away is not answered
            continue
        if isinstance(outcome, Exception):
            future.set_exception(outcome)
        else:
            accepted = Accepted(outcome.turn_id, item.key.key, outcome.seq, outcome.duplicate, True)
            future.set_result(accepted)
