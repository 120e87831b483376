"""The Celery app's settings: JSON only, late acks, one prefetch, events on, three routed queues."""

from __future__ import annotations

import warnings

import pytest
from celery import Celery

from beat_schedule import SCHEDULE
from shared.settings import Settings
from shared.tasknames import (
    AUTOTITLE,
    CRON_TICK,
    DELIVER,
    DELIVERY_QUEUE,
    DRAIN,
    MAINTENANCE_QUEUE,
    PING,
    PRUNE,
    REDRIVE,
    RESET_SWEEP,
    TITLE_SWEEP,
    TURNS_QUEUE,
)
from workers.app import celery_config, create_app


@pytest.fixture
def app(settings: Settings) -> Celery:
    return create_app(settings)


def _queue_of(app: Celery, task_name: str) -> str:
    """Where Celery's own router sends `task_name` when the sender names no queue."""
    route = app.amqp.router.route({}, task_name)
    return str(route["queue"].name)


def test_messages_are_json_only(app: Celery) -> None:
    assert app.conf.task_serializer == "json"
    assert list(app.conf.accept_content) == ["json"]
    assert app.conf.result_serializer == "json"
    assert app.conf.event_serializer == "json"


def test_a_wake_up_is_acked_after_it_ran_and_requeued_if_the_worker_dies(app: Celery) -> None:
    assert app.conf.task_acks_late is True
    assert app.conf.task_reject_on_worker_lost is True
    assert app.conf.worker_prefetch_multiplier == 1


def test_events_are_on_for_flower(app: Celery) -> None:
    assert app.conf.worker_send_task_events is True
    assert app.conf.task_send_sent_event is True


def test_the_three_queues_are_declared(app: Celery) -> None:
    assert set(app.amqp.queues) == {TURNS_QUEUE, DELIVERY_QUEUE, MAINTENANCE_QUEUE}
    assert {TURNS_QUEUE, DELIVERY_QUEUE, MAINTENANCE_QUEUE} == {
        "hermes.turns",
        "hermes.delivery",
        "hermes.maintenance",
    }


@pytest.mark.parametrize(
    ("task_name", "queue"),
    [
        (DRAIN, TURNS_QUEUE),
        (DELIVER, DELIVERY_QUEUE),
        (AUTOTITLE, MAINTENANCE_QUEUE),
        (REDRIVE, MAINTENANCE_QUEUE),
        (PING, MAINTENANCE_QUEUE),
        (RESET_SWEEP, MAINTENANCE_QUEUE),
        (TITLE_SWEEP, MAINTENANCE_QUEUE),
        (PRUNE, MAINTENANCE_QUEUE),
        (CRON_TICK, MAINTENANCE_QUEUE),
    ],
)
def test_each_task_is_routed_to_its_queue(app: Celery, task_name: str, queue: str) -> None:
    assert _queue_of(app, task_name) == queue


def test_every_beat_task_goes_to_the_maintenance_queue(app: Celery) -> None:
    assert SCHEDULE
    for entry in SCHEDULE.values():
        assert _queue_of(app, str(entry["task"])) == MAINTENANCE_QUEUE


def test_tasks_are_registered_under_readable_names(app: Celery) -> None:
    registered = set(app.tasks)
    expected = {
        "hermes.turns.drain",
        "hermes.turns.wake",
        "hermes.delivery.flush",
        "hermes.sessions.autotitle",
        "hermes.maintenance.redrive",
        "hermes.maintenance.ping",
        "hermes.maintenance.reset_sweep",
        "hermes.maintenance.title_sweep",
        "hermes.maintenance.prune",
        "hermes.maintenance.index_merge",
        "hermes.maintenance.index_pending",
        "hermes.maintenance.cron_tick",
    }
    assert expected <= registered
    assert {str(entry["task"]) for entry in SCHEDULE.values()} <= registered
    ours = {name for name in registered if not name.startswith("celery.")}
    assert all(name.startswith("hermes.") for name in ours), ours


def test_the_config_is_plain_data_built_from_settings(settings: Settings) -> None:
    config = celery_config(settings)
    assert config["broker_url"] == settings.resolved_broker_url
    assert config["task_acks_late"] and config["task_reject_on_worker_lost"]
    assert config["worker_prefetch_multiplier"] == 1
    assert config["result_backend"] is None


def test_tasks_stay_with_the_app_that_defined_them(settings: Settings) -> None:
    """A second app in one process (tests, `hermes up`) runs its own tasks, not the first's."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a duplicate task name is a DuplicateTaskNameWarning
        first, second = create_app(settings), create_app(settings)
        assert DRAIN in first.tasks and DRAIN in second.tasks
        assert first.tasks[DRAIN] is not second.tasks[DRAIN]
        bystander = Celery("bystander", set_as_current=False)
        assert not [name for name in bystander.tasks if name.startswith("hermes.")]
