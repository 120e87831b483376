"""Keeping credentials out of logs: quiet the HTTP client loggers, redact what still gets out.

Telegram puts the bot token in every request URL and httpx logs request URLs at INFO, so a
worker at `-l INFO` would print it. Installing the redactor sets the HTTP and SDK loggers to
WARNING (unless someone set them explicitly) and adds a filter to the root handlers and those
loggers that replaces every configured secret with `***` in messages and tracebacks.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Iterable

MASK = "***"
QUIET = (
    "httpx",
    "httpcore",
    "telegram",
    "slack_sdk",
    "discord.http",
    "discord.gateway",
    "discord.client",
)
FILTERED = (
    *QUIET,
    "telegram.Bot",
    "telegram.request",
    "telegram.request.BaseRequest",
    "telegram.request.HTTPXRequest",
    "slack_sdk.web.base_client",
    "slack_sdk.socket_mode",
)
MIN_SECRET = 6  # never mask short strings: they would turn ordinary words into ***


class Redactor(logging.Filter):
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.secrets: set[str] = set()
        self.add(secrets)

    def add(self, secrets: Iterable[str]) -> None:
        self.secrets.update(s for s in secrets if s and len(s) >= MIN_SECRET)

    def redact(self, text: str) -> str:
        for secret in sorted(self.secrets, key=len, reverse=True):
            if secret in text:
                text = text.replace(secret, MASK)
        return text

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


def install_redaction(secrets: Iterable[str]) -> Redactor:
    """Quiet the noisy loggers and mask `secrets` in everything the root handlers emit."""
    wanted = [s for s in secrets if s]
    for name in QUIET:
        logger = logging.getLogger(name)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.WARNING)
    targets: list[logging.Filterer] = [logging.getLogger(name) for name in FILTERED]
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
