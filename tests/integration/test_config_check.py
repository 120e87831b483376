"""`hermes config check`: every effective setting with its source, secrets never shown, so two
hosts' outputs can be diffed; a bad value is refused naming the key."""

from __future__ import annotations

import json
from pathlib import Path

from tests.integration.test_cli_sessions_support import hermes

TOKEN = "123456:telegram-secret-token"
PASSWORD = "broker-pass-word"


def _config(home: Path, text: str) -> None:
    (home / "config.yaml").write_text(text)


def test_values_and_sources_with_secrets_fingerprinted(
    hermes_env: dict[str, str], hermes_home: Path
) -> None:
    _config(hermes_home, "model:\n  api_key: sk-config-secret-key\n  name: gpt-fleet\n")
    env = {
        **hermes_env,
        "HERMES_BROKER_URL": f"redis://hermes:{PASSWORD}@10.1.0.2:6379/0",
        "HERMES_PLATFORMS__TELEGRAM__TOKEN": TOKEN,
    }
    done = hermes(env, "config", "check", "--json")
    assert done.returncode == 0, done.stderr
    rows = {row["key"]: row for row in map(json.loads, done.stdout.splitlines())}
    assert rows["model.name"] == {
        "key": "model.name",
        "value": "gpt-fleet",
        "source": "config.yaml",
    }
    assert rows["gateway.port"]["source"] == "default"
    assert rows["broker_url"]["source"] == "HERMES_BROKER_URL"
    assert rows["broker_url"]["value"].startswith("redis://hermes:***(sha256:")
    assert rows["broker_url"]["value"].endswith("@10.1.0.2:6379/0")
    assert rows["platforms.telegram.token"]["source"] == "HERMES_PLATFORMS__TELEGRAM__TOKEN"
    for secret in (TOKEN, PASSWORD, "sk-config-secret-key"):
        assert secret not in done.stdout
        assert secret not in done.stderr


def test_two_hosts_diff_shows_which_secret_differs(
    hermes_env: dict[str, str], tmp_path: Path
) -> None:
    outputs = []
    for host, token in (("a", TOKEN), ("b", TOKEN), ("c", TOKEN + "x")):
        home = tmp_path / host
        home.mkdir()
        env = {**hermes_env, "HERMES_HOME": str(home), "HERMES_PLATFORMS__TELEGRAM__TOKEN": token}
        done = hermes(env, "config", "check", "--changed")
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        outputs.append([line for line in lines if line.startswith("platforms.telegram.token")])
    assert outputs[0] == outputs[1]  # the same token: the same fingerprint
    assert outputs[0] != outputs[2]
    assert all(len(found) == 1 for found in outputs)


def test_a_bad_value_is_refused_naming_the_key(hermes_env: dict[str, str]) -> None:
    done = hermes({**hermes_env, "HERMES_GATEWAY__PORT": "eighty"}, "config", "check")
    assert done.returncode == 2
    assert "gateway.port (from HERMES_GATEWAY__PORT)" in done.stderr
    assert done.stdout == ""
