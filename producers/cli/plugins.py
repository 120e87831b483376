"""Commands loaded on first use: our own heavy ones, and those other parts of the distribution
add to `hermes` (entry point group `hermes.commands`).

The worker roles live in `workers/`, which producers may not import; the distribution wires
them in through entry points, loaded only when that command runs. Our own commands are named
as "module:attribute" for the same reason a plugin is: `hermes insights` should not pay for
importing the chat, the stack supervisor and Celery's client before it starts.
"""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import EntryPoint, entry_points

import click

GROUP = "hermes.commands"


def _points() -> dict[str, EntryPoint]:
    return {point.name: point for point in entry_points(group=GROUP)}


class PluginGroup(click.Group):
    """A click group whose `lazy` commands ("module:attribute") and plugins load on first use."""

    def __init__(self, *args: object, lazy: dict[str, str] | None = None, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.lazy) | set(_points()))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            return command
        if cmd_name in self.lazy:
            module, _, attribute = self.lazy[cmd_name].partition(":")
            return _command(getattr(import_module(module), attribute), self.lazy[cmd_name])
        point = _points().get(cmd_name)
        if point is None:
            return None
        return _command(point.load(), point.value)


def _command(loaded: object, where: str) -> click.Command:
    if not isinstance(loaded, click.Command):
        raise click.ClickException(f"plugin {where} is not a click command")
    return loaded
