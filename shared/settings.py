"""Typed settings: `$HERMES_HOME/config.yaml` under `HERMES_*` environment variables, read once."""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, overload

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from shared.pricing import ModelPrice
from shared.sections import (
    AgentSettings,
    AuxiliarySettings,
    DisplaySettings,
    Endpoint,
    FleetSettings,
    FlowerSettings,
    GatewaySettings,
    MaintenanceSettings,
    MediaSettings,
    ModelSettings,
    PipelineSettings,
    Section,
    SessionResetSettings,
    SessionsSettings,
    TranscriptionSettings,
    WorkerSettings,
)

ENV_PREFIX = "HERMES_"
NESTED = "__"


class SettingsError(ValueError):
    """A configuration value is wrong; the message names the key and where it came from."""


class PlatformSettings(Section):
    """Credentials and routing for one platform (`platforms.<name>.*`); a platform's descriptor
    (shared/platforms/) names its subclass with the platform's own keys."""

    enabled: bool = True
    token: SecretStr | None = None
    api_base: str | None = None
    allowed_users: tuple[str, ...] = ()
    home_channel: str | None = None
    # Chat ids whose room is one shared session (turns then carry the sender's name).
    shared_rooms: tuple[str, ...] = ()

    @field_validator("allowed_users", "shared_rooms", mode="before")
    @classmethod
    def _split_users(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        if isinstance(value, int):
            return (str(value),)
        if isinstance(value, list | tuple):
            return tuple(str(item) for item in value)
        return value

    @property
    def configured(self) -> bool:
        """Enabled and holding a token: workers deliver to it."""
        return self.enabled and self.token is not None


class EditablePlatformSettings(PlatformSettings):
    """A platform whose sender can edit a message it sent (Telegram, Slack, Discord): with
    `stream_edits`, a reply is shown as it is written, by one message edited at most every
    `stream_edit_interval` seconds (within the fleet's rate limits), then finished by the
    committed text."""

    stream_edits: bool = False
    stream_edit_interval: float = Field(1.0, ge=0.25, le=60.0)


S = TypeVar("S", bound=PlatformSettings)


class PlatformsSettings(BaseModel):
    """`platforms.<name>`, one entry per registered platform (shared/platforms/registry.py),
    each validated by that platform's settings class; an unknown name is an error."""

    model_config = ConfigDict(extra="allow", frozen=True)

    @model_validator(mode="wrap")
    @classmethod
    def _per_platform(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        if isinstance(data, PlatformsSettings):
            return data
        from shared.platforms.registry import platforms

        given = dict(data) if isinstance(data, Mapping) else data
        if not isinstance(given, dict):
            return handler(given)
        known = platforms()
        parsed: dict[str, PlatformSettings] = {}
        problems: list[InitErrorDetails] = [
            InitErrorDetails(type="extra_forbidden", loc=(str(name),), input=value)
            for name, value in given.items()
            if name not in known
        ]
        for name, platform in known.items():
            try:
                parsed[name] = platform.settings.model_validate(given.get(name) or {})
            except ValidationError as exc:
                problems.extend(_under(name, exc))
        if problems:
            raise ValidationError.from_exception_data(cls.__name__, problems)
        return handler(parsed)

    @overload
    def of(self, name: str) -> PlatformSettings: ...

    @overload
    def of(self, name: str, kind: type[S]) -> S: ...

    def of(self, name: str, kind: type[PlatformSettings] = PlatformSettings) -> PlatformSettings:
        """`platforms.<name>` as `kind` (its settings class); LookupError when not registered."""
        found = (self.__pydantic_extra__ or {}).get(name)
        if found is None:
            raise LookupError(f"unknown platform {name!r}")
        if not isinstance(found, kind):
            raise TypeError(f"platforms.{name} is a {type(found).__name__}, not {kind.__name__}")
        return found

    def items(self) -> list[tuple[str, PlatformSettings]]:
        return list((self.__pydantic_extra__ or {}).items())

    if TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any: ...


def _under(name: str, exc: ValidationError) -> list[InitErrorDetails]:
    """`exc`'s errors, located under `name`."""
    return [
        InitErrorDetails(
            type=err["type"], loc=(name, *err["loc"]), input=err["input"], ctx=err.get("ctx", {})
        )
        for err in exc.errors()
    ]


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
    session_reset: SessionResetSettings = SessionResetSettings()
    maintenance: MaintenanceSettings = MaintenanceSettings()
    platforms: PlatformsSettings = Field(default_factory=PlatformsSettings)
    pipeline: PipelineSettings = PipelineSettings()
    workers: WorkerSettings = WorkerSettings()
    model: ModelSettings = ModelSettings()
    auxiliary: AuxiliarySettings = AuxiliarySettings()
    transcription: TranscriptionSettings = TranscriptionSettings()
    agent: AgentSettings = AgentSettings()
    media: MediaSettings = MediaSettings()
    flower: FlowerSettings = FlowerSettings()
    fleet: FleetSettings = FleetSettings()
    # Dollars per million tokens per model name, over shared.pricing.DEFAULT_PRICES.
    pricing: dict[str, ModelPrice] = Field(default_factory=dict)

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
    def run_dir(self) -> Path:
        """Sockets, pid files and the embedded broker's data."""
        return self.home / "run"

    @property
    def embedded_broker_socket(self) -> Path:
        return self.run_dir / "redis.sock"

    @property
    def uses_embedded_broker(self) -> bool:
        return self.broker_url is None

    @property
    def resolved_broker_url(self) -> str:
        return self.broker_url or f"redis+socket://{self.embedded_broker_socket}"

    @property
    def resolved_database_url(self) -> str:
        return self.database_url or f"sqlite:///{self.home / 'state.db'}"

    @property
    def model_endpoint(self) -> Endpoint | None:
        """The chat model's endpoint, or None: the offline model answers."""
        model = self.model
        if model.base_url is None:
            return None
        return Endpoint(base_url=model.base_url, api_key=model.api_key, name=model.name)

    @property
    def auxiliary_endpoint(self) -> Endpoint | None:
        """The auxiliary model; each unset part defaults to the chat model's."""
        aux = self.auxiliary
        base_url = aux.base_url or self.model.base_url
        if base_url is None:
            return None
        return Endpoint(
            base_url=base_url,
            api_key=aux.api_key if aux.api_key is not None else self.model.api_key,
            name=aux.name or self.model.name,
        )

    @property
    def transcription_endpoint(self) -> Endpoint | None:
        spoken = self.transcription
        base_url = spoken.base_url or self.model.base_url
        if base_url is None:
            return None
        key = spoken.api_key if spoken.api_key is not None else self.model.api_key
        return Endpoint(base_url=base_url, api_key=key, name=spoken.model)

    @property
    def media_dir(self) -> Path:
        """Where older versions saved attachments on this host; nothing is written here now
        (media lives in the database: shared.store.media)."""
        return self.home / "media"

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


def read_config(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except UnicodeDecodeError as exc:
        raise SettingsError(f"{path} is not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise SettingsError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SettingsError(f"{path} is not valid YAML: {_yaml_problem(exc)}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"{path} must hold a mapping of settings, not {type(data).__name__}")
    for key in data:
        if not isinstance(key, str):
            raise SettingsError(f"{path}: setting names are text; {key!r} is not a setting")
    if "home" in data:
        raise SettingsError(
            f"home (in {path}): config.yaml cannot move its own home; set HERMES_HOME instead"
        )
    return data


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's multi-line report as one line: what is wrong and where."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        what = exc.problem or exc.context or "syntax error"
        return f"{' '.join(what.split())} at line {mark.line + 1}, column {mark.column + 1}"
    return " ".join(str(exc).split())


def _describe(loc: tuple[int | str, ...], path: Path, environ: Mapping[str, str]) -> str:
    key = ".".join(str(part) for part in loc)
    wanted = ENV_PREFIX + NESTED.join(str(part) for part in loc).upper()
    for name in environ:
        # env_values() lower-cases names, so HERMES_Gateway__Port set this key too.
        if name.startswith(ENV_PREFIX) and name.upper() == wanted:
            return f"{key} (from {name})"
    return f"{key} (in {path})"


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Read config.yaml and the environment once; raise SettingsError naming the bad key."""
    env = os.environ if environ is None else environ
    home = Path(env.get(ENV_PREFIX + "HOME") or "~/.hermes").expanduser()
    path = config_path(home)
    yaml_values = read_config(path)
    token = _SOURCES.set((env, yaml_values))
    try:
        return Settings(home=home)
    except ValidationError as exc:
        problems = [f"{_describe(err['loc'], path, env)}: {err['msg']}" for err in exc.errors()]
        raise SettingsError("invalid configuration: " + "; ".join(problems)) from None
    finally:
        _SOURCES.reset(token)
