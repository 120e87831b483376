"""A decorator for store-backed commands: driver errors become one-line StoreErrors (exit 2)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import click

from producers.cli.app import App
from shared.db.engine import guarded

P = ParamSpec("P")
T = TypeVar("T")


def store_command(command: Callable[P, T]) -> Callable[P, T]:
    """Run `command` so that a locked, full or broken state.db is one line, never a traceback."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        app = click.get_current_context().find_object(App)
        if app is None:
            return command(*args, **kwargs)
        return guarded(app.store(), lambda: command(*args, **kwargs))

    return wrapper
