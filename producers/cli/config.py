"""`hermes config check`: the effective settings of this host, so two hosts can be compared."""

from __future__ import annotations

import json
import os

import click

from producers.cli.app import App
from shared.settings import config_path, read_config
from shared.settings_report import effective


@click.group("config")
def config_group() -> None:
    """This host's configuration (config.yaml and HERMES_* variables)."""


@config_group.command("check")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per setting.")
@click.option("--changed", is_flag=True, help="Only settings not at their default.")
@click.pass_obj
def check(app: App, as_json: bool, changed: bool) -> None:
    """Print every effective setting with where it came from; secrets show only a fingerprint
    (equal secrets, equal fingerprints). Run it on two hosts and diff the output."""
    settings = app.settings  # an invalid configuration stops here, naming the bad key
    lines = effective(settings, os.environ, read_config(config_path(settings.home)))
    if changed:
        lines = [line for line in lines if line.source != "default"]
    if as_json:
        for line in lines:
            click.echo(json.dumps({"key": line.key, "value": line.value, "source": line.source}))
        return
    # Plain aligned text, one setting a line: `diff` of two hosts' output is the comparison.
    width = max((len(line.key) for line in lines), default=0)
    for line in lines:
        click.echo(f"{line.key.ljust(width)}  {line.value}  [{line.source}]")
