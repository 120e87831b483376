"""A worker Runtime whose senders are the real ones (built by build_senders) against fakes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
from sqlalchemy import select

from shared.db import Store
from shared.db.schema import outbox as table
from shared.pipeline import outbox
from shared.ports import RecordingWaker
from shared.settings import Settings
from workers.agent.offline import OfflineAgent
from workers.delivery.registry import build_senders
from workers.renewer import Renewer
from workers.runtime import Runtime


@contextmanager
def delivery_runtime(settings: Settings, store: Store) -> Iterator[tuple[Runtime, RecordingWaker]]:
    client = redis.Redis.from_url(settings.resolved_broker_url)
    waker = RecordingWaker()
    senders = build_senders(settings, client)
    rt = Runtime(
        settings=settings,
        store=store,
        agent=OfflineAgent(),  # type: ignore[arg-type]
        senders=senders,
        waker=waker,
        clock=time.time,
        renewer=Renewer(store, time.time, settings.pipeline.lease_seconds),
        redis=client,
    )
    try:
        yield rt, waker
    finally:
        senders.close()
        rt.renewer.close()
        client.close()


def reply(store: Store, platform: str, chat_id: str, text: str, **extra: Any) -> int:
    with store.write() as conn:
        return outbox.add(
            conn, platform=platform, chat_id=chat_id, text=text, now=time.time(), **extra
        ).id


def row(store: Store, row_id: int) -> outbox.OutboxRow:
    with store.read() as conn:
        data = conn.execute(select(table).where(table.c.id == row_id)).one()
        return outbox.OutboxRow.from_row(data)
