"""Keeping credentials out of logs: quiet the HTTP client loggers, redact what still gets out.

Telegram puts the bot token in every request URL and httpx logs request URLs at INFO, so a
worker at `-l INFO` would print it. Installing the redactor sets the HTTP and SDK loggers to
WARNING (unless someone set them explicitly) and adds a filter to the root handlers and those
loggers that replaces every configured secret with `***` in messages and tracebacks.
"""

from __future__ import annotations

import logging
import re
import traceback
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from shared.platforms import registry

if TYPE_CHECKING:
    from shared.settings import Settings

MASK = "***"
HTTP_LOGGERS = ("httpx", "httpcore")  # and each platform's SDK loggers (its descriptor's)
# A secret this long is masked wherever it appears; a shorter one only where it stands alone
# (not inside a longer word or number), so a short password does not turn words into ***.
MIN_ANYWHERE = 6


def quiet_loggers() -> tuple[str, ...]:
    """Loggers set to WARNING (unless set explicitly) and redacted."""
    found = [name for p in registry.platforms().values() for name in p.quiet_loggers]
    return (*HTTP_LOGGERS, *found)


def filtered_loggers() -> tuple[str, ...]:
    """Every logger the redaction filter is added to (besides the root handlers)."""
    found = [name for p in registry.platforms().values() for name in p.redacted_loggers]
    return (*quiet_loggers(), *found)


class Redactor(logging.Filter):
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.secrets: set[str] = set()
        self._pattern: re.Pattern[str] | None = None
        self.add(secrets)

    def add(self, secrets: Iterable[str]) -> None:
        self.secrets.update(s for s in secrets if s)
        ordered = sorted(self.secrets, key=len, reverse=True)  # longest first
        # case-insensitive: some SDKs lower-case the error text that quotes a URL
        self._pattern = (
            re.compile("|".join(map(_pattern, ordered)), re.IGNORECASE) if ordered else None
        )

    def redact(self, text: str) -> str:
        return self._pattern.sub(MASK, text) if self._pattern is not None else text

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.secrets:
            return True
        message = record.getMessage()
        clean = self.redact(message)
        if clean != message:
            record.msg, record.args = clean, ()
        if record.exc_info:
            formatted = "".join(traceback.format_exception(*record.exc_info)).rstrip()
            record.exc_text, record.exc_info = self.redact(formatted), None
        elif record.exc_text:
            record.exc_text = self.redact(record.exc_text)
        return True


def _pattern(secret: str) -> str:
    escaped = re.escape(secret)
    return escaped if len(secret) >= MIN_ANYWHERE else rf"(?<![^\W_]){escaped}(?![^\W_])"


def install_redaction(secrets: Iterable[str]) -> Redactor:
    """Quiet the noisy loggers and mask `secrets` in everything the root handlers emit."""
    wanted = [s for s in secrets if s]
    for name in quiet_loggers():
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.WARNING)
    targets: list[logging.Filterer] = [logging.getLogger(name) for name in filtered_loggers()]
    targets.extend(logging.getLogger().handlers)
    shared: Redactor | None = None
    for target in targets:
        found = next((f for f in target.filters if isinstance(f, Redactor)), None)
        if found is None:
            if shared is None:
                shared = Redactor(wanted)
            target.addFilter(shared)
        else:
            found.add(wanted)
    return shared or Redactor(wanted)


def _value(secret: Any) -> str | None:
    """A SecretStr's value; a plain string (a plug-in's secret typed as text) as it is."""
    if secret is None or isinstance(secret, str):
        return secret
    value: str = secret.get_secret_value()
    return value


def url_password(url: str | None) -> list[str]:
    """The password inside `scheme://user:password@host/…`, as written and decoded."""
    if not url or "@" not in url:
        return []
    try:
        password = urlsplit(url).password
    except ValueError:
        return []
    return [password, unquote(password)] if password else []


def secrets_of(settings: Settings) -> list[str]:
    """Every credential the configuration holds: platform tokens and secrets, the model,
    auxiliary and transcription API keys, Flower's basic auth, and the passwords inside the
    broker and database URLs."""
    values: list[str | None] = []
    for name, platform in registry.platforms().items():
        conf = settings.platforms.of(name)
        values.extend(_value(getattr(conf, attr, None)) for attr in platform.secrets)
    for section in (settings.model, settings.auxiliary, settings.transcription):
        values.append(_value(section.api_key))
    basic_auth = _value(settings.flower.basic_auth)
    if basic_auth:
        values.extend([basic_auth, basic_auth.partition(":")[2]])
    for url in (settings.broker_url, settings.database_url):
        values.extend(url_password(url))
    found: list[str] = []
    for value in values:
        if value and value not in found:
            found.append(value)
    return found
