"""Settings: config.yaml under HERMES_* variables, typed, read once, errors naming the key."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from shared.settings import Settings, SettingsError, load_settings

SECRET = "sk-TOPSECRET-4242"


def write_config(home: Path, text: str) -> Path:
    path = home / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def load_error(env: dict[str, str]) -> str:
    with pytest.raises(SettingsError) as caught:
        load_settings(env)
    message = str(caught.value)
    assert "\n" not in message, "a settings error is one line"
    return message


def test_defaults_without_config_file(hermes_env: dict[str, str], hermes_home: Path) -> None:
    settings = load_settings(hermes_env)
    assert settings.home == hermes_home
    assert settings.resolved_database_url == f"sqlite:///{hermes_home / 'state.db'}"
    assert settings.state_db_path == hermes_home / "state.db"
    assert (settings.gateway.host, settings.gateway.port) == ("127.0.0.1", 8080)
    assert settings.display.resume_display == "full"
    assert settings.group_sessions_per_user is True
    assert settings.platforms.telegram.api_base == "https://api.telegram.org/bot"
    assert settings.platforms.slack.api_base == "https://slack.com/api/"
    assert settings.platforms.discord.api_base == "https://discord.com/api/v10"
    assert settings.platforms.telegram.token is None


def test_default_home_is_dot_hermes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".hermes").mkdir()
    write_config(tmp_path / ".hermes", "gateway:\n  port: 9001\n")
    settings = load_settings({})
    assert settings.home == tmp_path / ".hermes"
    assert settings.gateway.port == 9001


def test_hermes_home_with_tilde_is_expanded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    settings = load_settings({"HERMES_HOME": "~/elsewhere"})
    assert settings.home == tmp_path / "elsewhere"


def test_yaml_values_are_read_and_typed(hermes_env: dict[str, str], hermes_home: Path) -> None:
    write_config(
        hermes_home,
        """
# comments are fine
group_sessions_per_user: false
gateway:
  host: 0.0.0.0
  port: 8443
display:
  resume_display: minimal
platforms:
  telegram:
    token: "123:abc"
    allowed_users: [111, "222"]
  slack:
    api_base: http://127.0.0.1:9999/api/
""",
    )
    settings = load_settings(hermes_env)
    assert settings.group_sessions_per_user is False
    assert (settings.gateway.host, settings.gateway.port) == ("0.0.0.0", 8443)
    assert settings.display.resume_display == "minimal"
    assert settings.platforms.telegram.allowed_users == ("111", "222")
    assert settings.platforms.slack.api_base == "http://127.0.0.1:9999/api/"
    token = settings.platforms.telegram.token
    assert isinstance(token, SecretStr)
    assert token.get_secret_value() == "123:abc"


def test_env_overrides_yaml_and_merges_within_a_section(
    hermes_env: dict[str, str], hermes_home: Path
) -> None:
    write_config(hermes_home, "gateway:\n  host: 10.0.0.1\n  port: 1000\n")
    env = {**hermes_env, "HERMES_GATEWAY__PORT": "2000"}
    settings = load_settings(env)
    assert settings.gateway.port == 2000  # from the environment
    assert settings.gateway.host == "10.0.0.1"  # still from config.yaml


def test_env_strings_are_parsed_by_type(hermes_env: dict[str, str]) -> None:
    env = {
        **hermes_env,
        "HERMES_GROUP_SESSIONS_PER_USER": "false",
        "HERMES_SESSIONS__RETENTION_DAYS": "30",
        "HERMES_SESSIONS__MIN_INTERVAL_HOURS": "0.5",
        "HERMES_PLATFORMS__DISCORD__ALLOWED_USERS": "1, 2,,3",
        "HERMES_DATABASE_URL": "postgresql://db/hermes",
    }
    settings = load_settings(env)
    assert settings.group_sessions_per_user is False
    assert settings.sessions.retention_days == 30
    assert settings.sessions.min_interval_hours == 0.5
    assert settings.platforms.discord.allowed_users == ("1", "2", "3")
    assert settings.resolved_database_url == "postgresql://db/hermes"
    assert settings.state_db_path is None


def test_variables_without_the_prefix_are_ignored(hermes_env: dict[str, str]) -> None:
    env = {**hermes_env, "GATEWAY__PORT": "1", "XHERMES_GATEWAY__PORT": "2"}
    assert load_settings(env).gateway.port == 8080


def test_bad_env_value_names_the_key_and_the_variable(hermes_env: dict[str, str]) -> None:
    message = load_error({**hermes_env, "HERMES_GATEWAY__PORT": "eighty"})
    assert "gateway.port" in message
    assert "HERMES_GATEWAY__PORT" in message


def test_bad_env_value_is_attributed_even_in_odd_case(hermes_env: dict[str, str]) -> None:
    message = load_error({**hermes_env, "HERMES_Gateway__Port": "eighty"})
    assert "gateway.port (from HERMES_Gateway__Port)" in message


def test_bad_yaml_value_names_the_key_and_the_file(
    hermes_env: dict[str, str], hermes_home: Path
) -> None:
    path = write_config(hermes_home, "gateway:\n  port: 70000\n")
    message = load_error(hermes_env)
    assert "gateway.port" in message
    assert str(path) in message


def test_every_bad_value_is_listed(hermes_env: dict[str, str], hermes_home: Path) -> None:
    write_config(hermes_home, "display:\n  resume_display: loud\nsessions:\n  retention_days: 0\n")
    message = load_error({**hermes_env, "HERMES_GATEWAY__PORT": "x"})
    assert "display.resume_display" in message
    assert "sessions.retention_days" in message
    assert "gateway.port (from HERMES_GATEWAY__PORT)" in message


def test_env_fixes_a_bad_yaml_value(hermes_env: dict[str, str], hermes_home: Path) -> None:
    write_config(hermes_home, "gateway:\n  port: nope\n")
    assert load_settings({**hermes_env, "HERMES_GATEWAY__PORT": "81"}).gateway.port == 81


@pytest.mark.parametrize(
    ("yaml_text", "key"),
    [
        ("colour: blue\n", "colour"),
        ("gateway:\n  hots: 0.0.0.0\n", "gateway.hots"),
        ("platforms:\n  telegram:\n    tokn: x\n", "platforms.telegram.tokn"),
        ("platforms:\n  myspace:\n    token: x\n", "platforms.myspace"),
    ],
)
def test_unknown_yaml_keys_are_errors(
    hermes_env: dict[str, str], hermes_home: Path, yaml_text: str, key: str
) -> None:
    path = write_config(hermes_home, yaml_text)
    message = load_error(hermes_env)
    assert key in message
    assert str(path) in message


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("HERMES_COLOUR", "colour"),
        ("HERMES_GATEWAY__HOTS", "gateway.hots"),
        ("HERMES_PLATFORMS__SLACK__TOKN", "platforms.slack.tokn"),
    ],
)
def test_unknown_env_keys_are_errors(hermes_env: dict[str, str], name: str, key: str) -> None:
    message = load_error({**hermes_env, name: "1"})
    assert f"{key} (from {name})" in message


def test_home_in_config_yaml_is_refused_not_ignored(
    hermes_env: dict[str, str], hermes_home: Path
) -> None:
    write_config(hermes_home, "home: /somewhere/else\n")
    message = load_error(hermes_env)
    assert "home" in message
    assert "HERMES_HOME" in message


@pytest.mark.parametrize(
    "yaml_text",
    [
        "gateway:\n  port: [8080\n",
        "gateway: {host: x\n",
        "a: b: c\n",
        "\tgateway: 1\n",
        "key: 'open\n",
    ],
)
def test_invalid_yaml_is_one_clear_line(
    hermes_env: dict[str, str], hermes_home: Path, yaml_text: str
) -> None:
    path = write_config(hermes_home, yaml_text)
    message = load_error(hermes_env)
    assert str(path) in message
    assert "not valid YAML" in message
    assert "line " in message


@pytest.mark.parametrize("yaml_text", ["- a\n- b\n", "just a string\n", "42\n", "true\n"])
def test_yaml_that_is_not_a_mapping_is_an_error(
    hermes_env: dict[str, str], hermes_home: Path, yaml_text: str
) -> None:
    path = write_config(hermes_home, yaml_text)
    message = load_error(hermes_env)
    assert str(path) in message
    assert "mapping" in message


@pytest.mark.parametrize("yaml_text", ["", "\n", "# only a comment\n", "---\n"])
def test_empty_config_means_defaults(
    hermes_env: dict[str, str], hermes_home: Path, yaml_text: str
) -> None:
    write_config(hermes_home, yaml_text)
    assert load_settings(hermes_env).gateway.port == 8080


def test_non_text_key_is_an_error(hermes_env: dict[str, str], hermes_home: Path) -> None:
    write_config(hermes_home, "1: one\n")
    assert "1" in load_error(hermes_env)


def test_non_utf8_config_is_an_error(hermes_env: dict[str, str], hermes_home: Path) -> None:
    (hermes_home / "config.yaml").write_bytes(b"gateway:\n  host: \xff\xfe\n")
    assert "UTF-8" in load_error(hermes_env)


def test_unreadable_config_is_an_error(hermes_env: dict[str, str], hermes_home: Path) -> None:
    (hermes_home / "config.yaml").mkdir()
    assert "config.yaml" in load_error(hermes_env)


def test_secrets_never_show_in_repr_or_str(hermes_env: dict[str, str], hermes_home: Path) -> None:
    write_config(
        hermes_home,
        f"platforms:\n  telegram:\n    token: {SECRET}-tg\n    webhook_secret: {SECRET}-wh\n"
        f"  slack:\n    signing_secret: {SECRET}-sl\n",
    )
    env = {**hermes_env, "HERMES_PLATFORMS__DISCORD__TOKEN": f"{SECRET}-dc"}
    settings = load_settings(env)
    platforms = settings.platforms
    shown = [
        repr(settings),
        str(settings),
        repr(platforms),
        str(platforms.telegram),
        repr(platforms.telegram.token),
        str(platforms.slack.signing_secret),
        f"{platforms.discord.token}",
        settings.model_dump_json(),
        str(settings.model_dump()),
    ]
    for text in shown:
        assert SECRET not in text
    assert platforms.telegram.token is not None
    assert platforms.telegram.token.get_secret_value() == f"{SECRET}-tg"
    assert platforms.telegram.webhook_secret is not None
    assert platforms.telegram.webhook_secret.get_secret_value() == f"{SECRET}-wh"
    assert platforms.discord.token is not None
    assert platforms.discord.token.get_secret_value() == f"{SECRET}-dc"


def test_secrets_never_show_in_errors(hermes_env: dict[str, str], hermes_home: Path) -> None:
    write_config(
        hermes_home,
        f"platforms:\n  telegram:\n    token: [{SECRET}]\n    tokn: {SECRET}\n",
    )
    message = load_error({**hermes_env, "HERMES_PLATFORMS__SLACK__SIGNING_SECRET": "ok"})
    assert "platforms.telegram.token" in message
    assert SECRET not in message


def test_read_once_later_file_changes_do_not_leak_in(
    hermes_env: dict[str, str], hermes_home: Path
) -> None:
    write_config(hermes_home, "gateway:\n  port: 1111\n")
    settings = load_settings(hermes_env)
    write_config(hermes_home, "gateway:\n  port: 2222\n")
    assert settings.gateway.port == 1111
    with pytest.raises(ValidationError):
        settings.gateway.port = 3  # type: ignore[misc]
    with pytest.raises(ValidationError):
        settings.home = Path("/")  # type: ignore[misc]


def test_load_settings_does_not_read_the_process_environment_when_given_one(
    hermes_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERMES_GATEWAY__PORT", "not-a-port")
    assert load_settings(hermes_env).gateway.port == 8080
    assert Settings().gateway.port == 8080


def test_importing_settings_reads_nothing(hermes_env: dict[str, str], hermes_home: Path) -> None:
    write_config(hermes_home, "this is: [not yaml\n")
    env = {**hermes_env, "HERMES_GATEWAY__PORT": "bad"}
    code = "import shared.settings, shared.store, shared.titles, shared.ids; print('ok')"
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=os.fspath(Path(__file__).resolve().parents[2]),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_blank_credentials_mean_unset(hermes_env: dict[str, str]) -> None:
    """compose passes `${X:-}` as an empty variable: that must not look like a configured token."""
    blank = {
        "HERMES_PLATFORMS__TELEGRAM__TOKEN": "",
        "HERMES_PLATFORMS__TELEGRAM__WEBHOOK_URL": " ",
        "HERMES_PLATFORMS__SLACK__SIGNING_SECRET": "",
        "HERMES_PLATFORMS__DISCORD__HOME_CHANNEL": "",
        "HERMES_MODEL__API_KEY": "",
        "HERMES_FLOWER__BASIC_AUTH": "",
    }
    settings = load_settings({**hermes_env, **blank})
    assert settings.platforms.telegram.token is None
    assert settings.platforms.telegram.webhook_url is None
    assert settings.platforms.slack.signing_secret is None
    assert settings.platforms.discord.home_channel is None
    assert settings.model.api_key is None
    assert settings.flower.basic_auth is None
    kept = load_settings({**hermes_env, "HERMES_PLATFORMS__TELEGRAM__TOKEN": "123:abc"})
    token = kept.platforms.telegram.token
    assert token is not None and token.get_secret_value() == "123:abc"
