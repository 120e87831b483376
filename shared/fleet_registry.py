"""The fleet as its broker knows it: the fleet's id, and the processes alive in it.

The database holds the fleet id (shared.store.fleet); the first process to use a broker
publishes it there (`hermes:fleet:id`, set only when absent), and every process compares the
two at start: a worker, beat, receiver, `hermes up` or terminal whose database and broker
belong to different fleets (a client that fell back to a local SQLite file, a host pointed at
another fleet's Redis) refuses with one line naming both, instead of taking or sending
wake-ups for turns it cannot see.

Each process then keeps a hash of itself (`hermes:fleet:process:<host>:<pid>`: role, pid,
version, start and last-seen times, fleet id) alive with a time to live, refreshed three times
per `fleet.presence_seconds`: `hermes status` lists what is there, and a killed process drops
out when its time to live runs out. The heartbeat also re-publishes the fleet id, so a broker
that lost its data (a restart without persistence) learns it again.

Pure: the Redis client is passed in (redis-py's); nothing here imports it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from shared import __version__
from shared.db import Store
from shared.settings import Settings
from shared.settings_report import masked_url
from shared.store.fleet import fleet_id

FLEET_ID_KEY = "hermes:fleet:id"
PROCESS_PREFIX = "hermes:fleet:process:"
BEATS_PER_PERIOD = 3

log = logging.getLogger(__name__)


class FleetMismatch(Exception):
    """This process's database and broker belong to different fleets."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def refusal(database_url: str, database_fleet: str, broker_url: str, broker_fleet: str) -> str:
    return (
        f"database {masked_url(database_url)} belongs to fleet {database_fleet}, but broker "
        f"{masked_url(broker_url)} belongs to fleet {broker_fleet}: point HERMES_DATABASE_URL "
        f"and HERMES_BROKER_URL at one fleet's database and broker"
    )


def broker_fleet(client: Any, fleet: str) -> str:
    """The broker's fleet id, publishing `fleet` as it when the broker holds none yet."""
    for _ in range(3):  # a wipe between the two calls leaves nothing to read: set it again
        client.set(FLEET_ID_KEY, fleet, nx=True)
        found = client.get(FLEET_ID_KEY)
        if found is not None:
            return _text(found)
    return fleet


def check(settings: Settings, fleet: str, client: Any) -> None:
    """Raise FleetMismatch (its text the one line to print) unless the broker is `fleet`'s."""
    found = broker_fleet(client, fleet)
    if found != fleet:
        raise FleetMismatch(
            refusal(settings.resolved_database_url, fleet, settings.resolved_broker_url, found)
        )


@dataclass(frozen=True, slots=True)
class Process:
    """One process of the fleet, as its heartbeat last wrote it."""

    role: str
    host: str
    pid: int
    version: str
    fleet: str
    started_at: float
    last_seen: float
    name: str = ""

    @property
    def key(self) -> str:
        return f"{PROCESS_PREFIX}{self.host}:{self.pid}"

    def fields(self) -> dict[str, str]:
        return {k: str(v) for k, v in asdict(self).items()}

    @classmethod
    def parse(cls, raw: dict[Any, Any]) -> Process | None:
        """The process a hash describes, or None for one that is not whole (expired mid-read)."""
        values = {_text(k): _text(v) for k, v in raw.items()}
        try:
            return cls(
                role=values["role"],
                host=values["host"],
                pid=int(values["pid"]),
                version=values["version"],
                fleet=values["fleet"],
                started_at=float(values["started_at"]),
                last_seen=float(values["last_seen"]),
                name=values.get("name", ""),
            )
        except (KeyError, ValueError):
            return None


def publish(client: Any, process: Process, ttl: float) -> str | None:
    """Write `process` with a time to live of `ttl` seconds (and the fleet id, if gone);
    returns the fleet id the broker now holds."""
    pipe = client.pipeline(transaction=False)
    pipe.set(FLEET_ID_KEY, process.fleet, nx=True)
    pipe.hset(process.key, mapping=process.fields())
    pipe.pexpire(process.key, max(1, round(ttl * 1000)))
    pipe.get(FLEET_ID_KEY)
    found = pipe.execute()[-1]
    return _text(found) if found is not None else None


def processes(client: Any) -> list[Process]:
    """Every process whose heartbeat is still alive, by host, role and pid."""
    keys = list(client.scan_iter(match=PROCESS_PREFIX + "*", count=1000))
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.hgetall(key)
    found = [Process.parse(raw) for raw in pipe.execute()] if keys else []
    return sorted((p for p in found if p is not None), key=lambda p: (p.host, p.role, p.pid))


class Heartbeat:
    """Keeps this process's hash alive from a daemon thread until `stop` deletes it."""

    def __init__(
        self,
        client: Any,
        process: Process,
        ttl: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self._process = process
        self._ttl = ttl
        self._clock = clock
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fleet-heartbeat", daemon=True)
        self._failing = False
        self._foreign: str | None = None

    @property
    def process(self) -> Process:
        return self._process

    def start(self) -> Heartbeat:
        self.beat()  # listed before the caller goes on, not a period later
        self._thread.start()
        return self

    def beat(self) -> None:
        process = self._process
        self._process = Process(**{**asdict(process), "last_seen": self._clock()})
        try:
            found = publish(self._client, self._process, self._ttl)
        except Exception as exc:  # the broker is away: Celery and redrive cope; keep trying
            if not self._failing:
                log.warning("fleet heartbeat not written (%s); retrying", exc)
            self._failing = True
            return
        if self._failing:
            log.warning("fleet heartbeat written again")
        self._failing = False
        if found is not None and found != process.fleet and found != self._foreign:
            # Wiped, then claimed by another fleet's process while this one ran: say so loudly
            # (once per id); the next start of this process refuses.
            log.error(
                "the broker now belongs to fleet %s, not this process's %s", found, process.fleet
            )
        self._foreign = found if found != process.fleet else None

    def _run(self) -> None:
        while not self._stopped.wait(self._ttl / BEATS_PER_PERIOD):
            self.beat()

    def stop(self) -> None:
        """Stop beating and leave the list at once (a killed process leaves by its TTL)."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        with contextlib.suppress(Exception):
            self._client.delete(self._process.key)


def join(
    settings: Settings,
    store: Store,
    client: Any,
    role: str,
    *,
    name: str = "",
    clock: Callable[[], float] = time.time,
) -> Heartbeat:
    """Check that `store` and the broker `client` reaches belong to one fleet (FleetMismatch
    if not), then show this process in the fleet until the heartbeat returned is stopped."""
    fleet = fleet_id(store)
    try:
        check(settings, fleet, client)
    except FleetMismatch:
        raise
    except Exception as exc:  # unreachable: the process waits for its broker as it always did
        log.warning(
            "could not compare fleet ids with broker %s (%s); going on",
            masked_url(settings.resolved_broker_url),
            exc,
        )
    now = clock()
    process = Process(
        role=role,
        host=socket.gethostname(),
        pid=os.getpid(),
        version=__version__,
        fleet=fleet,
        started_at=now,
        last_seen=now,
        name=name,
    )
    return Heartbeat(client, process, settings.fleet.presence_seconds, clock).start()
