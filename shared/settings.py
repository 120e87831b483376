"""Typed settings: `$HERMES_HOME/config.yaml` under `HERMES_*` environment variables, read once."""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar, overload

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from shared.pricing import ModelPrice

ENV_PREFIX = "HERMES_"
NESTED = "__"


class SettingsError(ValueError):
    """A configuration value is wrong; the message names the key and where it came from."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # Optional fields whose empty value means "not configured" (a section may add its own).
    blank_is_unset: ClassVar[frozenset[str]] = frozenset(
        {"token", "home_channel", "api_key", "basic_auth", "metrics_port"}
    )

    @field_validator("*", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: Any, info: ValidationInfo) -> Any:
        """`HERMES_X=` (how compose passes an unset `${X:-}`) means unset for optional
        secrets and ids, never an empty token that looks configured."""
        if isinstance(value, str) and not value.strip() and info.field_name in cls.blank_is_unset:
            return None
        return value


class PlatformSettings(_Section):
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


class GatewaySettings(_Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    # A request's head must arrive within this of the connection opening, its body within the
    # second of the head; else the connection is closed (producers/gateway/timeouts.py).
    read_head_seconds: float = Field(default=10.0, gt=0, le=600)
    read_body_seconds: float = Field(default=20.0, gt=0, le=600)


class DisplaySettings(_Section):
    resume_display: Literal["full", "minimal"] = "full"


class SessionsSettings(_Section):
    auto_prune: bool = False
    retention_days: int = Field(default=90, ge=1)
    vacuum_after_prune: bool = True
    min_interval_hours: float = Field(default=24, ge=0)


class PipelineSettings(_Section):
    """How workers drain sessions (DESIGN.md §2)."""

    lease_seconds: float = Field(default=30, gt=0)
    batch_turns: int = Field(default=20, ge=1)
    max_attempts: int = Field(default=3, ge=1)
    retry_backoff_seconds: float = Field(default=5, ge=0)
    max_text_chars: int = Field(default=32_000, ge=1)
    redrive_seconds: float = Field(default=10, gt=0, le=30)


class WorkerSettings(_Section):
    processes: int = Field(default=2, ge=1)
    # Turns wait on the model, so a worker process runs many at once in threads.
    concurrency: int = Field(default=128, ge=1)
    # Prometheus /metrics of each worker process (`hermes up` gives worker N the port + N - 1).
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    metrics_host: str = "127.0.0.1"


def _http_url(value: str | None) -> str | None:
    """An endpoint root the OpenAI SDK takes as `base_url` (http or https), or None."""
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if not text.startswith(("http://", "https://")) or len(text.split("://", 1)[1]) == 0:
        raise ValueError(f"must be an http(s) URL such as https://api.openai.com/v1, not {text!r}")
    return text


class ModelSettings(_Section):
    """The chat model; with no `base_url` the built-in offline model answers."""

    base_url: str | None = None
    api_key: SecretStr | None = None
    name: str = Field(default="offline", min_length=1)
    offline_latency_ms: float = Field(default=0, ge=0)
    # The model's context window in tokens: the window of history sent is cut to fit it.
    context_tokens: int = Field(default=32_000, ge=1_024, le=10_000_000)
    # Tokens kept free for the reply (and sent as max_tokens when set).
    max_output_tokens: int | None = Field(default=None, ge=16)
    vision: bool = False  # the model takes images itself; otherwise the auxiliary describes them
    stream: bool = True  # ask for a stream (falls back to one response if the endpoint refuses)
    max_tool_rounds: int = Field(default=8, ge=1, le=64)
    timeout: float = Field(default=120, gt=0, le=3600)
    retries: int = Field(default=3, ge=0, le=10)
    retry_backoff_seconds: float = Field(default=1.0, ge=0, le=60)

    @field_validator("base_url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        return _http_url(value)


class AuxiliarySettings(_Section):
    """The fast, cheap model for titles, summaries and image descriptions (default: the model)."""

    base_url: str | None = None
    api_key: SecretStr | None = None
    name: str | None = Field(default=None, min_length=1)
    vision: bool = True  # used to describe images for a model without vision

    @field_validator("base_url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        return _http_url(value)


class TranscriptionSettings(_Section):
    """Speech to text for audio attachments: an OpenAI-compatible /audio/transcriptions."""

    base_url: str | None = None  # default: model.base_url
    api_key: SecretStr | None = None  # default: model.api_key
    model: str = Field(default="whisper-1", min_length=1)

    @field_validator("base_url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        return _http_url(value)


DEFAULT_SYSTEM_PROMPT = (
    "You are Hermes, a helpful assistant talking with a person through a chat gateway "
    "(a terminal, Telegram, Slack or Discord). Answer clearly and briefly; use the tools "
    "when they help."
)


class AgentSettings(_Section):
    """What the agent is told and how it manages its context."""

    system_prompt: str = Field(default=DEFAULT_SYSTEM_PROMPT, min_length=1, max_length=100_000)
    # Compress (summarise into a continuation session) when a turn's context reaches this share
    # of model.context_tokens.
    compression_threshold: float = Field(default=0.8, ge=0.2, le=0.95)
    memory_notes: int = Field(default=50, ge=0, le=1000)  # durable notes shown to the model
    document_chars: int = Field(default=20_000, ge=100, le=1_000_000)  # text kept per document
    max_attachment_mb: float = Field(default=20, gt=0, le=1024)


class Endpoint(BaseModel):
    """A resolved OpenAI-compatible endpoint: where, with which key, which model."""

    model_config = ConfigDict(frozen=True)

    base_url: str
    api_key: SecretStr | None
    name: str


class FlowerSettings(_Section):
    """`hermes flower`: the Celery dashboard against the same broker."""

    address: str = "127.0.0.1"
    port: int = Field(default=5555, ge=1, le=65535)
    basic_auth: SecretStr | None = None  # "user:password"; required off loopback


class ResetOverrideSettings(_Section):
    """A platform's or chat type's changes to the reset policy; unset fields inherit."""

    mode: Literal["idle", "daily", "both", "none"] | None = None
    idle_minutes: float | None = Field(default=None, gt=0)
    at_hour: int | None = Field(default=None, ge=0, le=23)
    timezone: str | None = None


class SessionResetSettings(_Section):
    """When gateway sessions end on their own (DESIGN.md §3); the next message starts anew."""

    mode: Literal["idle", "daily", "both", "none"] = "none"
    idle_minutes: float = Field(default=1440, gt=0)
    at_hour: int = Field(default=4, ge=0, le=23)
    timezone: str = "UTC"
    notify: bool = True
    notice: str = "This conversation was reset ({reason}). Your next message starts a new one."
    platforms: dict[str, ResetOverrideSettings] = Field(default_factory=dict)
    chat_types: dict[str, ResetOverrideSettings] = Field(default_factory=dict)

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r}") from None
        return value


class MaintenanceSettings(_Section):
    """How often beat runs each sweep (seconds)."""

    reset_seconds: float = Field(default=60, gt=0)
    title_seconds: float = Field(default=300, gt=0)
    prune_seconds: float = Field(default=3600, gt=0)
    cron_seconds: float = Field(default=15, gt=0, le=60)
    index_merge_seconds: float = Field(default=600, gt=0)
    vacuum_step_pages: int = Field(default=256, ge=16)
    index_merge_pages: int = Field(default=64, ge=16)
    vacuum_pause_ms: float = Field(default=20, ge=0)


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
    flower: FlowerSettings = FlowerSettings()
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
        """Where attachments that are neither text, image nor audio are kept."""
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


def _read_yaml(path: Path) -> dict[str, Any]:
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
    yaml_values = _read_yaml(path)
    token = _SOURCES.set((env, yaml_values))
    try:
        return Settings(home=home)
    except ValidationError as exc:
        problems = [f"{_describe(err['loc'], path, env)}: {err['msg']}" for err in exc.errors()]
        raise SettingsError("invalid configuration: " + "; ".join(problems)) from None
    finally:
        _SOURCES.reset(token)
