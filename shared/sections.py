"""The sections of config.yaml, one class each (`gateway`, `model`, `maintenance`, …).

`shared.settings.Settings` gathers them with the platforms' sections and reads the file and
the environment; a section knows only its own keys and their checks.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationInfo,
    field_validator,
)


class Section(BaseModel):
    """A config.yaml section: unknown keys are errors, values frozen once read."""

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


class GatewaySettings(Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    # A request's head must arrive within this of the connection opening, its body within the
    # second of the head; else the connection is closed (producers/gateway/timeouts.py).
    read_head_seconds: float = Field(default=10.0, gt=0, le=600)
    read_body_seconds: float = Field(default=20.0, gt=0, le=600)


class DisplaySettings(Section):
    resume_display: Literal["full", "minimal"] = "full"


class SessionsSettings(Section):
    auto_prune: bool = False
    retention_days: int = Field(default=90, ge=1)
    vacuum_after_prune: bool = True
    min_interval_hours: float = Field(default=24, ge=0)
    # How long `/handoff` waits for a gateway's worker to pick the request up before failing it.
    handoff_timeout_seconds: float = Field(default=60, gt=0)


class PipelineSettings(Section):
    """How workers drain sessions (DESIGN.md §2)."""

    lease_seconds: float = Field(default=30, gt=0)
    batch_turns: int = Field(default=20, ge=1)
    max_attempts: int = Field(default=3, ge=1)
    retry_backoff_seconds: float = Field(default=5, ge=0)
    max_text_chars: int = Field(default=32_000, ge=1)
    redrive_seconds: float = Field(default=10, gt=0, le=30)


class WorkerSettings(Section):
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


class ModelSettings(Section):
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


class AuxiliarySettings(Section):
    """The fast, cheap model for titles, summaries and image descriptions (default: the model)."""

    base_url: str | None = None
    api_key: SecretStr | None = None
    name: str | None = Field(default=None, min_length=1)
    vision: bool = True  # used to describe images for a model without vision

    @field_validator("base_url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        return _http_url(value)


class TranscriptionSettings(Section):
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


class AgentSettings(Section):
    """What the agent is told and how it manages its context."""

    system_prompt: str = Field(default=DEFAULT_SYSTEM_PROMPT, min_length=1, max_length=100_000)
    # Compress (summarise into a continuation session) when a turn's context reaches this share
    # of model.context_tokens.
    compression_threshold: float = Field(default=0.8, ge=0.2, le=0.95)
    memory_notes: int = Field(default=50, ge=0, le=1000)  # durable notes shown to the model
    document_chars: int = Field(default=20_000, ge=100, le=1_000_000)  # text kept per document
    max_attachment_mb: float = Field(default=20, gt=0, le=1024)


class MediaSettings(Section):
    """Where attachments' bytes live: unset `url`, in the database (media_blobs); an
    `s3://bucket/prefix` URL, in S3-compatible object storage (the rows keep the metadata)."""

    blank_is_unset: ClassVar[frozenset[str]] = frozenset(
        {"url", "endpoint_url", "region", "access_key_id", "secret_access_key"}
    )

    url: str | None = None
    endpoint_url: str | None = None  # MinIO, moto, another S3-compatible service
    region: str | None = None
    # Unset: boto3's own chain (AWS_ACCESS_KEY_ID…, ~/.aws, an instance role).
    access_key_id: str | None = None
    secret_access_key: SecretStr | None = None

    @field_validator("url", mode="after")
    @classmethod
    def _s3_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        bucket = value.removeprefix("s3://").split("/", 1)[0]
        if not value.startswith("s3://") or not bucket:
            raise ValueError(f"media.url must look like s3://bucket[/prefix], not {value!r}")
        return value


class Endpoint(BaseModel):
    """A resolved OpenAI-compatible endpoint: where, with which key, which model."""

    model_config = ConfigDict(frozen=True)

    base_url: str
    api_key: SecretStr | None
    name: str


class FlowerSettings(Section):
    """`hermes flower`: the Celery dashboard against the same broker."""

    address: str = "127.0.0.1"
    port: int = Field(default=5555, ge=1, le=65535)
    basic_auth: SecretStr | None = None  # "user:password"; required off loopback


class FleetSettings(Section):
    """How the processes of a fleet show themselves in the broker (`hermes status`)."""

    # A process drops out of `hermes status` this long after its last heartbeat; it beats
    # three times per period.
    presence_seconds: float = Field(default=30, ge=1, le=3600)


class ResetOverrideSettings(Section):
    """A platform's or chat type's changes to the reset policy; unset fields inherit."""

    mode: Literal["idle", "daily", "both", "none"] | None = None
    idle_minutes: float | None = Field(default=None, gt=0)
    at_hour: int | None = Field(default=None, ge=0, le=23)
    timezone: str | None = None


class SessionResetSettings(Section):
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


class MaintenanceSettings(Section):
    """How often beat runs each sweep (seconds)."""

    reset_seconds: float = Field(default=60, gt=0)
    title_seconds: float = Field(default=300, gt=0)
    prune_seconds: float = Field(default=3600, gt=0)
    cron_seconds: float = Field(default=15, gt=0, le=60)
    index_merge_seconds: float = Field(default=600, gt=0)
    index_pending_seconds: float = Field(default=2, gt=0)
    vacuum_step_pages: int = Field(default=256, ge=16)
    index_merge_pages: int = Field(default=64, ge=16)
    vacuum_pause_ms: float = Field(default=20, ge=0)
    # `hermes db backup` on beat's schedule: every this many hours (0: never), keeping the
    # newest `backup_keep` in $HERMES_HOME/backups (SQLite only).
    backup_hours: float = Field(default=0, ge=0)
    backup_keep: int = Field(default=7, ge=1)
