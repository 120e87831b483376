"""The reset sweep: end gateway sessions whose idle or daily policy says so.

For a session with real history the agent first gets one turn, queued in the session's own
line, to save what matters with the memory tool; the turn's event id makes it happen once
even across restarts and double fires. A session with a turn waiting or running is left for
the next sweep. The user is told on their platform (`session_reset.notify`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from shared.db import Connection
from shared.maintenance import (
    ResetOverride,
    ResetPolicy,
    effective_policy,
    reset_reason,
)
from shared.pipeline import outbox
from shared.sections import ResetOverrideSettings, SessionResetSettings
from shared.store import housekeeping as hk
from shared.wording import plural
from workers.flush import deliver_now
from workers.runtime import Runtime

log = logging.getLogger(__name__)

REAL_HISTORY = 2  # at least one exchange


@dataclass
class ResetReport:
    ended: list[str] = field(default_factory=list)
    memory_turns: list[str] = field(default_factory=list)
    skipped_busy: int = 0


def _override(o: ResetOverrideSettings) -> ResetOverride:
    return ResetOverride(o.mode, o.idle_minutes, o.at_hour, o.timezone)


def policies(
    cfg: SessionResetSettings,
) -> tuple[ResetPolicy, dict[str, ResetOverride], dict[str, ResetOverride]]:
    base = ResetPolicy(cfg.mode, cfg.idle_minutes, cfg.at_hour, cfg.timezone)
    by_platform = {name: _override(o) for name, o in cfg.platforms.items()}
    by_chat = {name: _override(o) for name, o in cfg.chat_types.items()}
    return base, by_platform, by_chat


def describe(reason: str, policy: ResetPolicy) -> str:
    if reason == "idle":
        return f"no messages for {plural(policy.idle_minutes, 'minute')}"
    return f"daily reset at {policy.at_hour:02d}:00 {policy.timezone}"


def sweep(rt: Runtime) -> ResetReport:
    cfg = rt.settings.session_reset
    base, by_platform, by_chat = policies(cfg)
    report = ResetReport()
    if base.mode == "none" and not by_platform and not by_chat:
        return report
    now = rt.clock()
    with rt.store.read() as conn:
        candidates = hk.reset_candidates(conn)
    for candidate in candidates:
        policy = effective_policy(
            base,
            platform=candidate.platform,
            chat_type=candidate.chat_type,
            by_platform=by_platform,
            by_chat_type=by_chat,
        )
        reason = reset_reason(policy, candidate.last_active_at, now)
        if reason is not None:
            _reset_one(rt, candidate, reason, policy, report)
    if report.ended or report.memory_turns:
        log.info(
            "reset sweep: %d ended, %d memory turns queued, %d busy",
            len(report.ended),
            len(report.memory_turns),
            report.skipped_busy,
        )
    return report


def _reset_one(
    rt: Runtime,
    candidate: hk.ResetCandidate,
    reason: str,
    policy: ResetPolicy,
    report: ResetReport,
) -> None:
    cfg = rt.settings.session_reset
    notice = cfg.notice.format(reason=describe(reason, policy)) if cfg.notify else None
    with rt.store.write() as conn:
        outcome = _decide(conn, rt.clock(), candidate, reason, notice)
    if outcome == "busy":
        report.skipped_busy += 1
    elif outcome in {"flush-queued", "flush-waiting"}:
        if outcome == "flush-queued":
            report.memory_turns.append(candidate.session_id)
        rt.waker.drain(candidate.session_key)  # after commit, so the drain finds the turn
    elif outcome == "ended":
        report.ended.append(candidate.session_id)
        if notice:
            deliver_now(rt, outbox.lane_for(candidate.platform, candidate.chat_id))


def _decide(
    conn: Connection, now: float, candidate: hk.ResetCandidate, reason: str, notice: str | None
) -> str:
    """Inside one write: busy | flush-queued | flush-waiting | ended | moved-on."""
    if hk.busy(conn, candidate.session_key):
        return "busy"
    if candidate.message_count >= REAL_HISTORY:
        status = hk.flush_status(conn, candidate)
        if status is None:
            hk.record_flush(conn, candidate, now)
            return "flush-queued"
        if status not in hk.FINISHED:
            return "flush-waiting"
    ended = hk.end_for_reset(conn, candidate, reason, now, notice)
    return "ended" if ended else "moved-on"
