"""Task and queue names: the only thing producers and beat know about workers."""

from __future__ import annotations

DRAIN = "hermes.turns.drain"
WAKE = "hermes.turns.wake"  # many session keys at once (a receiver's batch): a drain for each
DELIVER = "hermes.delivery.flush"
REDRIVE = "hermes.maintenance.redrive"
PING = "hermes.maintenance.ping"
PROBE = "hermes.maintenance.probe"  # benchmarks: a no-op that reports its start time
HANDOFF = "hermes.sessions.handoff"  # run one /handoff request (maintenance queue)
AUTOTITLE = "hermes.sessions.autotitle"  # after a session's first exchange (maintenance queue)
RESET_SWEEP = "hermes.maintenance.reset_sweep"
TITLE_SWEEP = "hermes.maintenance.title_sweep"
PRUNE = "hermes.maintenance.prune"
INDEX_MERGE = "hermes.maintenance.index_merge"
INDEX_PENDING = "hermes.maintenance.index_pending"
BACKUP = "hermes.maintenance.backup"
CRON_TICK = "hermes.maintenance.cron_tick"

TURNS_QUEUE = "hermes.turns"
DELIVERY_QUEUE = "hermes.delivery"
MAINTENANCE_QUEUE = "hermes.maintenance"
ALL_QUEUES = (TURNS_QUEUE, DELIVERY_QUEUE, MAINTENANCE_QUEUE)
