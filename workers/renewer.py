"""One thread per worker process keeps every held lease alive: sessions' while models think,
chat lanes' while a send is in flight."""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from shared.db import Store
from shared.pipeline import leases as lease_rows
from shared.pipeline import routes
from shared.ports import Clock

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Held:
    lease: lease_rows.Lease
    started_at: float
    named: bool = False  # a named lease (a chat lane), not a session's route
    ttl: float | None = None  # None: the Renewer's
    lost: bool = False
    stop: bool = False
    # The lease is surely this worker's until then: the clock read before the last write that
    # extended it was sent, plus its ttl. A write whose answer came back late (the network cut,
    # the process paused) proves only that much, however recent the answer. Kept for named
    # leases (a lane's sends act outside the store); a session's writes are fenced instead.
    until: float = math.inf

    def confirmed(self, now: float, ttl: float) -> None:
        """A write that extended the lease to `now + ttl` (`now` read before it) committed."""
        self.until = max(self.until, now + ttl)

    def should_stop(self) -> bool:
        return self.lost or self.stop


class Renewer:
    """Extends held leases every `interval` seconds in one transaction; flags lost ones."""

    def __init__(self, store: Store, clock: Clock, ttl: float, interval: float | None = None):
        self._store = store
        self._clock = clock
        self._ttl = ttl
        self._interval = interval if interval is not None else min(ttl / 3, 1.0)
        self._held: set[Held] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = False
        self._thread: threading.Thread | None = None

    @contextmanager
    def hold(
        self,
        lease: lease_rows.Lease,
        started_at: float,
        *,
        named: bool = False,
        ttl: float | None = None,
        until: float = math.inf,
    ) -> Iterator[Held]:
        """Renew `lease` until the block ends; `named` for a named lease, `until` how long the
        write that took it proves it ours (see Held)."""
        held = Held(lease, started_at, named=named, ttl=ttl, until=until)
        with self._lock:
            self._held.add(held)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="hermes-lease-renewer", daemon=True
                )
                self._thread.start()
        try:
            yield held
        finally:
            with self._lock:
                self._held.discard(held)

    def restart_clock(self, held: Held, started_at: float) -> None:
        """A new turn under the same lease: only stop requests after it started count."""
        held.started_at = started_at
        held.stop = False

    def _run(self) -> None:
        while not self._stopped:
            self._wake.wait(self._interval)
            if self._stopped:
                return
            try:
                self.renew_all()
            except Exception:  # keep renewing; a failed round is retried next interval
                log.exception("lease renewal round failed")

    def renew_all(self) -> None:
        with self._lock:
            snapshot = list(self._held)
        if not snapshot:
            return
        renewed = []
        with self._store.write() as conn:
            now = self._clock()
            for held in snapshot:
                ttl = held.ttl if held.ttl is not None else self._ttl
                try:
                    if held.named:
                        lease_rows.check_named(conn, held.lease, now, ttl)
                    else:
                        routes.check_route(conn, held.lease, now, ttl)
                except lease_rows.LeaseLost:
                    if not held.lost:
                        log.warning(
                            "lost lease on %s (fence %s)", held.lease.name, held.lease.fence
                        )
                    held.lost = True
                    continue
                renewed.append((held, ttl))
                if held.named:
                    continue  # stop requests are for sessions' turns
                asked = routes.stop_requested_at(conn, held.lease.name)
                if asked is not None and asked >= held.started_at:
                    held.stop = True
        for held, ttl in renewed:  # committed
            held.confirmed(now, ttl)

    def close(self) -> None:
        self._stopped = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
