"""Commands other parts of the distribution add to `hermes` (entry point group `hermes.commands`).

The worker roles live in `workers/`, which producers may not import; the distribution wires
them in through entry points, loaded only when that command runs.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points

import click

GROUP = "hermes.commands"


def _points() -> dict[str, EntryPoint]:
    return {point.name: point for point in entry_points(group=GROUP)}


class PluginGroup(click.Group):
    """A click group whose extra commands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(_points()))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            return command
        point = _points().get(cmd_name)
        if point is None:
            return None
        loaded = point.load()
        if not isinstance(loaded, click.Command):
            raise click.ClickException(f"plugin {point.value} is not a click command")
        return loaded
