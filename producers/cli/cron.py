"""`hermes cron`: agent jobs on a schedule; each run is a turn in the job's own session."""

from __future__ import annotations

from datetime import datetime

import click

from producers.cli.app import App, fail, pass_app
from shared.maintenance import ScheduleError, zone
from shared.pipeline import cron
from shared.platforms import CLI, gateway_platforms


def _when(ts: float | None, tz: str) -> str:
    if ts is None:
        return "—"
    return datetime.fromtimestamp(ts, zone(tz)).strftime("%Y-%m-%d %H:%M %Z")


def _parse_deliver(value: str | None) -> tuple[str | None, str | None]:
    if not value:
        return None, None
    platform, _, chat = value.partition(":")
    if platform not in gateway_platforms() | {CLI}:
        known = ", ".join(sorted(gateway_platforms()))
        raise click.BadParameter(
            f"unknown platform {platform!r} (one of {known})", param_hint="--deliver"
        )
    return platform, chat or None


@click.group("cron")
def cron_group() -> None:
    """Agent jobs on a cron schedule (add, list, pause, resume, remove, run-now)."""


@cron_group.command("add")
@click.argument("schedule")
@click.argument("prompt")
@click.option("--name", "-n", help="A name to refer to the job by (default job-<id>).")
@click.option(
    "--deliver",
    "-d",
    metavar="PLATFORM[:CHAT]",
    help="Where replies go: a platform's home channel, or a given chat.",
)
@click.option("--tz", "timezone", default="UTC", show_default=True, help="IANA time zone.")
@pass_app
def add(
    app: App, schedule: str, prompt: str, name: str | None, deliver: str | None, timezone: str
) -> None:
    """Add a job: SCHEDULE is cron syntax ("0 9 * * *"), PROMPT what the agent is asked."""
    platform, chat = _parse_deliver(deliver)
    try:
        with app.store().write() as conn:
            job = cron.add_job(
                conn,
                schedule=schedule,
                prompt=prompt,
                now=app.clock(),
                name=name,
                timezone=timezone,
                deliver_platform=platform,
                deliver_chat=chat,
            )
    except (ScheduleError, cron.CronError) as exc:
        fail(str(exc))
    click.echo(
        f"Added {job.name} ({job.id}); next run {_when(job.next_run(app.clock()), job.timezone)}."
    )


@cron_group.command("list")
@pass_app
def list_cmd(app: App) -> None:
    """Jobs with their schedule, next run and where replies go."""
    with app.store().read() as conn:
        jobs = cron.list_jobs(conn)
    if not jobs:
        click.echo('No cron jobs. Add one with: hermes cron add "0 9 * * *" "Morning summary"')
        return
    now = app.clock()
    for job in jobs:
        target = job.deliver_platform or "its session only"
        if job.deliver_platform:
            target += f":{job.deliver_chat}" if job.deliver_chat else " home channel"
        state = "paused" if job.paused else f"next {_when(job.next_run(now), job.timezone)}"
        click.echo(
            f"{job.id}  {job.name:<20} {job.schedule:<15} {job.timezone:<14} {state:<28} → {target}"
        )
        click.echo(f"          {job.prompt[:70]}")


def _toggle(app: App, ref: str, paused: bool) -> None:
    try:
        with app.store().write() as conn:
            job = cron.set_paused(conn, ref, paused)
    except cron.CronError as exc:
        fail(str(exc))
    click.echo(f"{'Paused' if paused else 'Resumed'} {job.name}.")


@cron_group.command("pause")
@click.argument("job")
@pass_app
def pause(app: App, job: str) -> None:
    """Stop running JOB (id or name) until resumed."""
    _toggle(app, job, True)


@cron_group.command("resume")
@click.argument("job")
@pass_app
def resume(app: App, job: str) -> None:
    """Run JOB again on its schedule (slots missed while paused are not made up)."""
    _toggle(app, job, False)


@cron_group.command("remove")
@click.argument("job")
@pass_app
def remove(app: App, job: str) -> None:
    """Delete JOB (its past sessions stay)."""
    try:
        with app.store().write() as conn:
            gone = cron.remove_job(conn, job)
    except cron.CronError as exc:
        fail(str(exc))
    click.echo(f"Removed {gone.name}.")


@cron_group.command("run-now")
@click.argument("job")
@pass_app
def run_now(app: App, job: str) -> None:
    """Run JOB once now, outside its schedule (through the workers)."""
    from producers.broker import BrokerWaker, broker_client

    with app.store().write() as conn:
        try:
            found = cron.require_job(conn, job)
        except cron.CronError as exc:
            fail(str(exc))
        now = app.clock()
        started = cron.start_run(conn, found, now, now, manual=True)
    if started is None:
        fail(f"{found.name} was started for this moment already; try again in a second.")
    woken = BrokerWaker(broker_client(app.settings)).drain(started.session_key)
    note = "" if woken else " (no worker reachable yet; it runs when one is)"
    click.echo(f"Queued a run of {found.name} as turn {started.turn_id}{note}.")
