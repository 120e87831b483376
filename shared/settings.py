"""Typed settings: `$HERMES_HOME/config.yaml` under `HERMES_*` environment variables, read once."""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

ENV_PREFIX = "HERMES_"
NESTED = "__"


class SettingsError(ValueError):
    """A configuration value is wrong; the message names the key and where it came from."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PlatformSettings(_Section):
    """Credentials and routing for one platform (`platforms.<name>.*`)."""

    enabled: bool = True
    token: SecretStr | None = None
    api_base: str | None = None
    allowed_users: tuple[str, ...] = ()
    home_channel: str | None = None
    webhook_secret: SecretStr | None = None  # Telegram
    signing_secret: SecretStr | None = None  # Slack

    @field_validator("allowed_users", mode="before")
    @classmethod
    def _split_users(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        if isinstance(value, int):
            return (str(value),)
        if isinstance(value, list | tuple):
            return tuple(str(item) for item in value)
        return value


class TelegramSettings(PlatformSettings):
    api_base: str | None = "https://api.telegram.org/bot"


class SlackSettings(PlatformSettings):
    api_base: str | None = "https://slack.com/api/"


class DiscordSettings(PlatformSettings):
    api_base: str | None = "https://discord.com/api/v10"


class PlatformsSettings(_Section):
    telegram: TelegramSettings = TelegramSettings()
    slack: SlackSettings = SlackSettings()
    discord: DiscordSettings = DiscordSettings()


class GatewaySettings(_Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)


class DisplaySettings(_Section):
    resume_display: Literal["full", "minimal"] = "full"


class SessionsSettings(_Section):
    auto_prune: bool = False
    retention_days: int = Field(default=90, ge=1)
    vacuum_after_prune: bool = True
    min_interval_hours: float = Field(default=24, ge=0)


class Settings(BaseSettings):
    """Everything a process needs to know, built once at the edge and passed in."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=NESTED,
        extra="forbid",
        frozen=True,
    )

    home: Path = Path("~/.hermes")
    database_url: str | None = None
    broker_url: str | None = None
    group_sessions_per_user: bool = True
    gateway: GatewaySettings = GatewaySettings()
    display: DisplaySettings = DisplaySettings()
    sessions: SessionsSettings = SessionsSettings()
    platforms: PlatformsSettings = PlatformsSettings()

    @field_validator("home", mode="after")
    @classmethod
    def _expand_home(cls, value: Path) -> Path:
        return value.expanduser()

    @property
    def state_db_path(self) -> Path | None:
        """The SQLite file behind `database_url`, or None for a server database."""
        url = self.resolved_database_url
        if url.startswith("sqlite:///"):
            return Path(url.removeprefix("sqlite:///"))
        return None

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.home / 'state.db'}"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Highest first: explicit values, then HERMES_* variables, then config.yaml.
        env, yaml_values = _SOURCES.get()
        return (
            init_settings,
            _MappingSource(settings_cls, env_values(env)),
            _MappingSource(settings_cls, yaml_values),
        )


class _MappingSource(PydanticBaseSettingsSource):
    """A settings source over an already-read nested mapping (environment or config.yaml)."""

    def __init__(self, settings_cls: type[BaseSettings], values: dict[str, Any]) -> None:
        super().__init__(settings_cls)
        self._values = values

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return self._values.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._values)


_SOURCES: ContextVar[tuple[Mapping[str, str], dict[str, Any]]] = ContextVar(
    "hermes_settings_sources", default=({}, {})
)


def env_values(environ: Mapping[str, str]) -> dict[str, Any]:
    """`HERMES_A__B=v` → {"a": {"b": "v"}}; pydantic then parses the strings by field type."""
    values: dict[str, Any] = {}
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX) or name == ENV_PREFIX + "HOME":
            continue
        parts = name.removeprefix(ENV_PREFIX).lower().split(NESTED)
        if not all(parts):
            continue
        node = values
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                break
            node = child
        else:
            node[parts[-1]] = raw
    return values


def config_path(home: Path) -> Path:
    return home / "config.yaml"


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise SettingsError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SettingsError(f"{path} is not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"{path} must hold a mapping of settings, not {type(data).__name__}")
    return data


def _describe(loc: tuple[int | str, ...], path: Path, environ: Mapping[str, str]) -> str:
    key = ".".join(str(part) for part in loc)
    env_name = ENV_PREFIX + NESTED.join(str(part) for part in loc).upper()
    if env_name in environ:
        return f"{key} (from {env_name})"
    return f"{key} (in {path})"


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Read config.yaml and the environment once; raise SettingsError naming the bad key."""
    env = os.environ if environ is None else environ
    home = Path(env.get(ENV_PREFIX + "HOME") or "~/.hermes").expanduser()
    path = config_path(home)
    yaml_values = _read_yaml(path)
    yaml_values.pop("home", None)  # HERMES_HOME decides where config.yaml is; it cannot move it.
    token = _SOURCES.set((env, yaml_values))
    try:
        return Settings(home=home)
    except ValidationError as exc:
        problems = [f"{_describe(err['loc'], path, env)}: {err['msg']}" for err in exc.errors()]
        raise SettingsError("invalid configuration: " + "; ".join(problems)) from None
    finally:
        _SOURCES.reset(token)
