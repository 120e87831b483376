"""Slack request signatures: HMAC-SHA256 of `v0:<timestamp>:<raw body>` with the signing secret.

Checked on the raw bytes before anything is parsed, compared in constant time, and only
within five minutes of our clock either way (a captured request cannot be replayed later).
"""

from __future__ import annotations

import hashlib
import hmac

VERSION = "v0"
WINDOW_SECONDS = 5 * 60
MAX_TIMESTAMP_DIGITS = 12  # seconds since 1970 for the next 30,000 years


class BadSignature(ValueError):
    """Why a request is not from Slack (missing header, stale timestamp, wrong signature)."""


def sign(secret: str, timestamp: str, body: bytes) -> str:
    base = f"{VERSION}:{timestamp}:".encode() + body
    return f"{VERSION}=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def check_headers(timestamp: str | None, signature: str | None, *, now: float) -> tuple[str, str]:
    """What can be refused before the body is read: headers missing, malformed or stale.
    Returns both headers, present."""
    if not timestamp or not signature:
        raise BadSignature("missing X-Slack-Request-Timestamp or X-Slack-Signature")
    if not signature.startswith(f"{VERSION}=") or len(signature) != len(VERSION) + 65:
        raise BadSignature("signature does not match")
    if not (timestamp.isascii() and timestamp.isdigit()) or len(timestamp) > MAX_TIMESTAMP_DIGITS:
        raise BadSignature("X-Slack-Request-Timestamp is not a number of seconds (Unix time)")
    sent = int(timestamp)
    if abs(now - sent) > WINDOW_SECONDS:
        raise BadSignature("stale timestamp (more than five minutes from now)")
    return timestamp, signature


def verify(
    secret: str, timestamp: str | None, signature: str | None, body: bytes, *, now: float
) -> None:
    """Raise BadSignature unless `signature` signs `body` at a `timestamp` near `now`."""
    timestamp, signature = check_headers(timestamp, signature, now=now)
    expected = sign(secret, timestamp, body)
    if not hmac.compare_digest(expected.encode(), signature.encode()):
        raise BadSignature("signature does not match")
