"""The chat's -c/-r options, apart from the chat so `hermes` can offer them without loading it."""

from __future__ import annotations

import click

CONTINUE_HELP = "Resume the latest terminal session, or the newest in NAME's lineage."
RESUME_HELP = "Resume a session by id, unique id prefix or title."


def continue_option(func):  # type: ignore[no-untyped-def]
    return click.option(
        "-c",
        "--continue",
        "continue_",
        is_flag=False,
        flag_value="",
        default=None,
        metavar="[NAME]",
        help=CONTINUE_HELP,
    )(func)


def resume_option(func):  # type: ignore[no-untyped-def]
    return click.option("-r", "--resume", metavar="ID|PREFIX|TITLE", help=RESUME_HELP)(func)
