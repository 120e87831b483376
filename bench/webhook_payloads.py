"""The requests bench/webhooks.py sends: per platform, unique valid bodies and their signatures.

Telegram updates (distinct update ids and chats, the secret-token header), Slack events (signed
with the signing secret), WhatsApp webhooks (a distinct wamid and wa_id each,
`X-Hub-Signature-256`), Twilio form posts from distinct numbers (signed ahead of time), and
Teams activities (distinct conversations and activity ids) carrying a Bot Framework JWT signed
with an RSA key made for the run, whose public half `TeamsKeys.serve` publishes as OpenID
metadata and a JWKS on 127.0.0.1 for the gateway's botframework-connector to check against.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKEN = "123456789:BenchTokenNotReal"
SECRET = "bench-webhook-secret"
SLACK_SECRET = "bench-slack-signing-secret"
WHATSAPP_SECRET = "bench-whatsapp-app-secret"
WHATSAPP_PHONE = "106540352242922"
TWILIO_TOKEN = "bench-twilio-auth-token"
TWILIO_ACCOUNT = "AC" + "0" * 32
TEAMS_APP_ID = "00000000-bench-4000-8000-000000000000"
TEAMS_PASSWORD = "bench-teams-app-password"
TEAMS_SERVICE = "http://127.0.0.1:9/amer/"  # replies would go there; the bench sends none
TEAMS_JWT_ENV = "BENCH_TEAMS_JWT"  # the signed token, handed to the load processes
KINDS = {
    "telegram": "/telegram/webhook",
    "slack": "/slack/events",
    "whatsapp": "/whatsapp/webhook",
    "sms": "/sms/twilio",
    "teams": "/teams/messages",
}


def telegram_bodies(start: int, count: int) -> list[bytes]:
    bodies = []
    for n in range(start, start + count):
        user = 1_000_000 + n % 5000
        update = {
            "update_id": n,
            "message": {
                "message_id": n,
                "from": {"id": user, "is_bot": False, "first_name": "Bench"},
                "chat": {"id": user, "type": "private", "first_name": "Bench"},
                "date": 1767225600,
                "text": f"benchmark message {n}",
            },
        }
        bodies.append(json.dumps(update).encode())
    return bodies


def slack_bodies(start: int, count: int) -> list[bytes]:
    bodies = []
    for n in range(start, start + count):
        event = {
            "type": "message",
            "text": f"benchmark message {n}",
            "user": f"U{n % 5000:08d}",
            "ts": f"1767225600.{n:06d}",
            "channel": f"D{n % 5000:08d}",
            "event_ts": f"1767225600.{n:06d}",
            "channel_type": "im",
        }
        payload = {
            "type": "event_callback",
            "team_id": "T0BENCH",
            "event": event,
            "event_id": f"Ev{n}",
            "event_time": 1767225600,
            "authorizations": [{"team_id": "T0BENCH", "user_id": "U0BOT", "is_bot": True}],
        }
        bodies.append(json.dumps(payload).encode())
    return bodies


def whatsapp_bodies(start: int, count: int) -> list[bytes]:
    bodies = []
    for n in range(start, start + count):
        wa_id = str(15550000000 + n % 5000)
        message = {
            "from": wa_id,
            "id": f"wamid.BENCH{n:012d}",
            "timestamp": "1767225600",
            "type": "text",
            "text": {"body": f"benchmark message {n}"},
        }
        value = {
            "messaging_product": "whatsapp",
            "metadata": {"display_phone_number": "15550783881", "phone_number_id": WHATSAPP_PHONE},
            "contacts": [{"profile": {"name": "Bench"}, "wa_id": wa_id}],
            "messages": [message],
        }
        payload = {
            "object": "whatsapp_business_account",
            "entry": [
                {"id": "102290129340398", "changes": [{"value": value, "field": "messages"}]}
            ],
        }
        bodies.append(json.dumps(payload).encode())
    return bodies


def sms_bodies(start: int, count: int) -> list[bytes]:
    from urllib.parse import urlencode

    bodies = []
    for n in range(start, start + count):
        sid = f"SM{n:032x}"
        fields = {
            "MessageSid": sid,
            "SmsMessageSid": sid,
            "AccountSid": TWILIO_ACCOUNT,
            "From": f"+1415{n % 5000:07d}",
            "To": "+15005550006",
            "Body": f"benchmark message {n}",
            "NumMedia": "0",
            "NumSegments": "1",
            "ApiVersion": "2010-04-01",
        }
        bodies.append(urlencode(fields).encode())
    return bodies


SIGNED: dict[bytes, str] = {}  # SMS bodies signed before the clock starts (see `load`)


def sign_sms(url: str, bodies: list[bytes]) -> None:
    """Sign every body as Twilio would for `url`, ahead of time: the load must not be slower
    than the server (an HMAC and a form parse per request would be)."""
    from urllib.parse import parse_qsl

    from twilio.request_validator import RequestValidator

    validator = RequestValidator(TWILIO_TOKEN)
    for body in bodies:
        SIGNED[body] = str(validator.compute_signature(url, dict(parse_qsl(body.decode()))))


def request(path: str, port: int, kind: str, body: bytes) -> bytes:
    """One complete HTTP/1.1 request (headers and body in one write: no Nagle stall)."""
    content_type = "application/json"
    if kind == "telegram":
        extra = f"X-Telegram-Bot-Api-Secret-Token: {SECRET}\r\n"
    elif kind == "whatsapp":  # Meta's signature (producers/whatsapp/receiver.py's `sign`),
        # computed here: importing the receiver would cost the first request seconds
        digest = hmac.new(WHATSAPP_SECRET.encode(), body, hashlib.sha256).hexdigest()
        extra = f"X-Hub-Signature-256: sha256={digest}\r\n"
    elif kind == "sms":
        content_type = "application/x-www-form-urlencoded"
        extra = f"X-Twilio-Signature: {SIGNED[body]}\r\n"
    elif kind == "teams":  # one Bot Framework token for every request, as the service reuses it
        extra = f"Authorization: Bearer {os.environ[TEAMS_JWT_ENV]}\r\n"
    else:
        from producers.slack.signature import sign

        stamp = str(int(time.time()))
        extra = (
            f"X-Slack-Request-Timestamp: {stamp}\r\n"
            f"X-Slack-Signature: {sign(SLACK_SECRET, stamp, body)}\r\n"
        )
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n{extra}\r\n"
    )
    return head.encode() + body


def teams_bodies(start: int, count: int) -> list[bytes]:
    bodies = []
    for n in range(start, start + count):
        activity = {
            "type": "message",
            "id": f"17672256{n:010d}",
            "timestamp": "2026-01-01T00:00:00.000Z",
            "serviceUrl": TEAMS_SERVICE,
            "channelId": "msteams",
            "from": {
                "id": f"29:bench{n % 5000}",
                "name": "Bench",
                "aadObjectId": f"aad-{n % 5000}",
            },
            "conversation": {"conversationType": "personal", "id": f"a:bench{n % 5000}"},
            "recipient": {"id": f"28:{TEAMS_APP_ID}", "name": "Hermes"},
            "text": f"benchmark message {n}",
            "textFormat": "plain",
        }
        bodies.append(json.dumps(activity).encode())
    return bodies


BODIES = {
    "telegram": telegram_bodies,
    "slack": slack_bodies,
    "whatsapp": whatsapp_bodies,
    "sms": sms_bodies,
    "teams": teams_bodies,
}


class TeamsKeys:
    """An RSA signing key for the run: its JWKS served as OpenID metadata on 127.0.0.1, and a
    Bot Framework token for the gateway's app id signed with it."""

    def __init__(self) -> None:
        from cryptography.hazmat.primitives.asymmetric import rsa

        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._server: ThreadingHTTPServer | None = None

    def token(self) -> str:
        import jwt

        now = int(time.time())
        claims = {
            "iss": "https://api.botframework.com",
            "aud": TEAMS_APP_ID,
            "serviceurl": TEAMS_SERVICE,
            "nbf": now - 10,
            "exp": now + 3600,
        }
        return jwt.encode(claims, self._key, "RS256", headers={"kid": "bench"})

    def serve(self) -> str:
        """Start the metadata server (a thread); returns the OpenID metadata URL."""
        from jwt.algorithms import RSAAlgorithm

        jwk: dict[str, Any] = RSAAlgorithm.to_jwk(self._key.public_key(), as_dict=True)
        jwk.update({"kid": "bench", "use": "sig", "endorsements": ["msteams"]})
        documents: dict[str, bytes] = {"/keys": json.dumps({"keys": [jwk]}).encode()}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = documents.get(self.path)
                self.send_response(200 if body else 404)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body or b"{}")

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        base = f"http://127.0.0.1:{self._server.server_address[1]}"
        documents["/openid"] = json.dumps({"issuer": "bench", "jwks_uri": f"{base}/keys"}).encode()
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return f"{base}/openid"

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
