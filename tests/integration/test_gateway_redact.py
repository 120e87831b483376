"""Secrets out of logs: the redactor both the gateway and the workers install (shared.redact)."""

from __future__ import annotations

import logging
from pathlib import Path
from types import ModuleType

import pytest

from shared import redact

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "123456789:AAEhBOweik6ad9r_Qsecret"


@pytest.mark.parametrize("module", [redact], ids=["shared"])
def test_messages_arguments_and_tracebacks_are_masked(
    module: ModuleType, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    module.install_redaction([TOKEN, "short"])
    log = logging.getLogger("hermes.test.redact")
    log.info("POST https://api.telegram.org/bot%s/sendMessage", TOKEN)
    try:
        raise RuntimeError(f"The token `{TOKEN}` was rejected by the server.")
    except RuntimeError:
        log.exception("failed")
    logging.getLogger("httpx").warning("HTTP Request: POST .../bot%s/getMe", TOKEN)
    assert TOKEN not in caplog.text
    assert "bot***/sendMessage" in caplog.text and "rejected by the server" in caplog.text
    log.info("a short note")  # strings under six characters are never masked
    assert "a short note" in caplog.text
    assert logging.getLogger("httpx").level == logging.WARNING
