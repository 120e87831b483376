"""The cron tick: start every job whose latest slot has not run, once per (job, slot)."""

from __future__ import annotations

import logging

from shared.pipeline import cron
from workers.runtime import Runtime

log = logging.getLogger(__name__)


def tick(rt: Runtime) -> list[tuple[str, float]]:
    """Claim due slots and record their turns; a slot claimed by another beat is skipped."""
    started: list[tuple[str, float, str]] = []
    with rt.store.read() as conn:
        due = cron.due_jobs(conn, rt.clock())
    for job, slot in due:
        with rt.store.write() as conn:
            run = cron.start_run(conn, job, slot, rt.clock(), manual=False)
        if run is not None:
            started.append((job.id, slot, run.session_key))
    for job_id, slot, key in started:
        log.info("cron job %s: started the run for slot %s", job_id, slot)
        rt.waker.drain(key)
    return [(job_id, slot) for job_id, slot, _ in started]
