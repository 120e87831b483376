"""The terminal's side of `/handoff <platform>`: wait for the request the command recorded,
then say how it ended. Completed: the completion lines, and the chat exits (the session now
lives on the platform). Failed, or nobody took it before its deadline: say why, fail it so it
cannot fire later, and stay on the session."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from shared.db import Store
from shared.store import handoffs

POLL_SECONDS = 0.25
RUNNING_GRACE_SECONDS = 60.0  # claimed before the deadline: give the worker this long to finish


@dataclass(frozen=True, slots=True)
class Ended:
    completed: bool
    lines: list[str]


def no_pickup(platform: str, waited: float) -> str:
    return (
        f"Handoff to {platform} failed: no gateway picked it up within {waited:.0f}s. "
        f"Start one with `hermes up` or `hermes gateway {platform}`, then /handoff again. "
        "This terminal stays on the session."
    )


def failed_line(platform: str, error: str) -> str:
    return (
        f"Handoff to {platform} failed: {error}. "
        "This terminal stays on the session; /handoff again to retry."
    )


def last_id(store: Store, session_id: str | None) -> int:
    """The newest handoff request of the session so far (0: none), read before /handoff is sent."""
    if session_id is None:
        return 0
    with store.read() as conn:
        found = handoffs.latest_for(conn, session_id)
    return found.id if found is not None else 0


def await_handoff(
    store: Store,
    session_id: str,
    clock: Callable[[], float],
    tick: Callable[[str], None] = lambda state: None,
    *,
    after_id: int = 0,
) -> Ended | None:
    """Wait for the session's handoff request newer than `after_id` (the one the command just
    recorded; it may have finished already); None when the command recorded none."""
    with store.read() as conn:
        request = handoffs.latest_for(conn, session_id)
    if request is None or request.id <= after_id:
        return None
    while True:
        with store.read() as conn:
            found = handoffs.get(conn, request.id)
        assert found is not None
        if found.status == handoffs.COMPLETED:
            return _completed(store, found)
        if found.status == handoffs.FAILED:
            error = found.error or "unknown error"
            if error.startswith("no gateway"):
                return Ended(
                    False, [no_pickup(found.platform, found.deadline - found.requested_at)]
                )
            return Ended(False, [failed_line(found.platform, error)])
        now = clock()
        if found.status == handoffs.PENDING and now >= found.deadline:
            waited = found.deadline - found.requested_at
            with store.write() as conn:
                failed = handoffs.fail(
                    conn, found.id, f"no gateway picked it up within {waited:.0f}s", now,
                    only=handoffs.PENDING,
                )  # fmt: skip
            if failed:
                return Ended(False, [no_pickup(found.platform, waited)])
            continue  # claimed just now: wait for it
        if found.status == handoffs.RUNNING and now >= found.deadline + RUNNING_GRACE_SECONDS:
            late = f"still running after {now - found.requested_at:.0f}s; check `hermes status`"
            return Ended(False, [f"Handoff to {found.platform} is {late}."])
        tick(found.status)
        time.sleep(POLL_SECONDS)


def _completed(store: Store, found: handoffs.Handoff) -> Ended:
    from shared.store import sessions as session_rows

    with store.read() as conn:
        session = session_rows.get_session(conn, found.session_id)
    ref = session.title if session is not None and session.title else found.session_id
    return Ended(
        True,
        [
            f"↻ Handoff complete. The session is now active on {found.platform}.",
            f"Resume it on this terminal later with: /resume {ref}",
        ],
    )
