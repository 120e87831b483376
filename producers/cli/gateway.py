"""`hermes gateway <platform>`: run one platform's receiver (for fleets, and for `hermes up`)."""

from __future__ import annotations

import logging

import click

from shared.platforms import registry
from shared.redact import Redactor, secrets_of
from shared.settings import Settings, load_settings


class PlatformChoice(click.Choice):  # type: ignore[type-arg]
    """The registered platforms (shared/platforms/registry.py), read when first needed."""

    def __init__(self) -> None:
        super().__init__([])

    @property
    def choices(self) -> tuple[str, ...]:
        return tuple(registry.names())

    @choices.setter
    def choices(self, value: object) -> None:
        pass


def _settings(ctx: click.Context) -> Settings:
    """The settings the `hermes` root command read (its context object), or read them now."""
    settings = getattr(ctx.obj, "settings", None)
    return settings if isinstance(settings, Settings) else load_settings()


@click.command()
@click.argument("platform", type=PlatformChoice())
@click.option(
    "--polling/--webhook",
    default=None,
    help="Telegram: long polling (no inbound access needed) instead of the webhook "
    "[default: platforms.telegram.polling, or polling when no webhook_secret is set].",
)
@click.option(
    "--socket-mode/--events-api",
    default=None,
    help="Slack: Socket Mode (development) instead of the Events API over HTTP "
    "[default: platforms.slack.socket_mode].",
)
@click.option(
    "--webhook-url",
    metavar="URL",
    help="Telegram: register this public URL of /telegram/webhook at start "
    "[default: platforms.telegram.webhook_url].",
)
@click.option("--host", help="Listen address [default: gateway.host].")
@click.option("--port", type=click.IntRange(1, 65535), help="Listen port [default: gateway.port].")
@click.option(
    "--loglevel",
    "-l",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    default="WARNING",
    show_default=True,
)
@click.pass_context
def gateway(
    ctx: click.Context,
    platform: str,
    polling: bool | None,
    socket_mode: bool | None,
    webhook_url: str | None,
    host: str | None,
    port: int | None,
    loglevel: str,
) -> None:
    """Run PLATFORM's receiver until Ctrl-C.

    Serves every configured platform's routes (POST /telegram/webhook, POST /slack/events, …)
    and GET /healthz on the address in
    gateway.host and gateway.port (shared by the receivers of this HERMES_HOME; refused when
    another stack or program holds it), records each turn in state.db and wakes a worker.
    Telegram can long-poll instead (--polling); Slack can use Socket Mode (--socket-mode);
    Discord connects to its gateway. Credentials come from config.yaml or
    HERMES_PLATFORMS__<P>__* variables and are never logged.
    """
    from producers.gateway.serve import GatewayError, default_mode, run

    settings = _settings(ctx)
    if host is not None or port is not None:
        gateway_conf = settings.gateway.model_copy(
            update={k: v for k, v in (("host", host), ("port", port)) if v is not None}
        )
        settings = settings.model_copy(update={"gateway": gateway_conf})
    mode = default_mode(
        settings, platform, polling=polling, socket_mode=socket_mode, webhook_url=webhook_url
    )
    logging.basicConfig(
        level=loglevel.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        run(settings, mode)
    except GatewayError as exc:  # its text may quote an SDK error, and so a credential
        raise click.ClickException(Redactor(secrets_of(settings)).redact(str(exc))) from None
