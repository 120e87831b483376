"""Entry point of `hermes`: the command tree and the one place errors become exit codes."""

from __future__ import annotations

import click

from producers.cli.app import EXPECTED_ERRORS, USER_ERRORS, App
from producers.cli.db import db
from producers.cli.sessions import sessions
from shared import __version__


@click.group(
    invoke_without_command=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(
    __version__, "-V", "--version", package_name="hermes-fleet", prog_name="hermes"
)
@click.pass_context
def cli(ctx: click.Context) -> None:
    """hermes — a session gateway for fleets of LLM chat agents.

    Every conversation is a session in $HERMES_HOME/state.db (default ~/.hermes),
    named, resumable, searchable and exportable.
    """
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


cli.add_command(sessions)
cli.add_command(db)


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
    finally:
        app.close()
    raise SystemExit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
