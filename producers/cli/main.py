"""Entry point of `hermes`: the command tree and the one place errors become exit codes."""

from __future__ import annotations

import click

from producers.cli.app import EXPECTED_ERRORS, USER_ERRORS, App
from producers.cli.chat_options import continue_option, resume_option
from producers.cli.legacy import import_legacy_cmd
from producers.cli.plugins import PluginGroup
from producers.cli.search import search
from producers.cli.sessions import sessions
from shared import __version__
from shared.db import DatabaseError
from shared.db.errors import plainly

# Loaded when named: the chat alone costs a third of start-up (stack, Celery client, Rich live).
LAZY_COMMANDS = {
    "chat": "producers.cli.chat:chat",
    "up": "producers.cli.up:up",
    "status": "producers.cli.status:status",
    "cron": "producers.cli.cron:cron_group",
    "db": "producers.cli.db:db",
    "insights": "producers.cli.insights:insights",
    "config": "producers.cli.config:config_group",
}


@click.group(
    cls=PluginGroup,
    lazy=LAZY_COMMANDS,
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(
    __version__, "-V", "--version", package_name="hermes-fleet", prog_name="hermes"
)
@continue_option
@resume_option
@click.pass_context
def cli(ctx: click.Context, continue_: str | None, resume: str | None) -> None:
    """hermes — a session gateway for fleets of LLM chat agents.

    With no command, chat with the agent in this terminal (`hermes chat`); `-c`
    continues the latest terminal session, `-r` resumes one by id, prefix or title.
    Every conversation is a session in $HERMES_HOME/state.db (default ~/.hermes),
    named, resumable, searchable and exportable.
    """
    if ctx.invoked_subcommand is None:
        from producers.cli.chat import run_chat

        run_chat(ctx.ensure_object(App), continue_=continue_, resume=resume)
    elif continue_ is not None or resume is not None:
        raise click.UsageError(
            f"-c/-r belong to the chat: `hermes -c`, `hermes chat -r REF` (not with "
            f"`{ctx.invoked_subcommand}`)"
        )


cli.add_command(sessions)
sessions.add_command(search)
sessions.add_command(import_legacy_cmd)


def main() -> None:
    app = App()
    try:
        code = cli.main(obj=app, prog_name="hermes", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        raise SystemExit(1) from None
    except click.ClickException as exc:
        exc.show()
        raise SystemExit(exc.exit_code) from None
    except EXPECTED_ERRORS as exc:
        click.echo(f"hermes: {exc}", err=True)
        raise SystemExit(2) from None
    except USER_ERRORS as exc:
        click.echo(str(exc.args[0]) if exc.args else str(exc), err=True)
        raise SystemExit(1) from None
    except DatabaseError as exc:  # locked past the busy timeout, disk full, I/O error
        click.echo(f"hermes: the database refused: {_refusal(app, exc)}", err=True)
        raise SystemExit(2) from None
    finally:
        app.close()
    raise SystemExit(code if isinstance(code, int) else 0)


def _refusal(app: App, exc: DatabaseError) -> str:
    settings = app.loaded_settings
    return plainly(exc.orig or exc, settings.state_db_path if settings is not None else None)


if __name__ == "__main__":
    main()
