"""Every `hermes` command has help text, and --help works on each."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from producers.cli.main import cli


def _walk(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    found = [prefix]
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found.extend(_walk(command, (*prefix, name)))
        else:
            found.append((*prefix, name))
    return found


COMMANDS = _walk(cli)


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "hermes")
def test_command_has_help(path: tuple[str, ...]) -> None:
    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group)
        command = command.commands[name]
    assert (command.help or "").strip(), f"`hermes {' '.join(path)}` needs help text"
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output
