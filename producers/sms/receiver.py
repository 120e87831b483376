"""The SMS receiver: Twilio's incoming-message webhook at `POST /sms/twilio`.

Checks, in order, before anything is stored:
- no `X-Twilio-Signature` header → 403, without reading the body;
- a body over 64 KiB → 413; not `application/x-www-form-urlencoded` → 415; not UTF-8 form
  fields, or a field given twice → 400;
- the signature (signature.py: what twilio's own RequestValidator answers; HMAC-SHA1 with the
  Auth Token over the URL Twilio posted to and the sorted fields) → 403 when it does not
  match. Twilio signs the URL entered in its console: behind a proxy that rewrites host,
  scheme or port, set `platforms.sms.webhook_url` to exactly that URL (the request's query
  string is added);
- then the fields (translate.py): malformed → 400; carrier keywords and other non-turns → the
  empty answer, nothing stored.

The answer is TwiML, sent as soon as the turn is committed: an empty `<Response/>` (the reply
comes later through the outbox and the sender), or, once an hour for a number not in
`allowed_users`, a `<Message>` with the short refusal.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from urllib.parse import unquote, urlsplit

from starlette.requests import Request
from starlette.responses import Response

from producers.gateway.body import BadRequest, media_type, read_body
from producers.gateway.deps import Gateway
from producers.sms.signature import Signature
from producers.sms.translate import BadForm, Ignored, translate
from shared.surrogates import storable
from shared.turns import TurnRejected

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "x-twilio-signature"
FORM = "application/x-www-form-urlencoded"
MAX_FORM = 64 * 1024  # a message is at most 1,600 characters and ten media URLs
NOT_A_FORM = "the body is not UTF-8 form fields"


class Fields(dict[str, list[str]]):
    """A form's fields, every value kept (the validator signs them all)."""

    def getlist(self, name: str) -> list[str]:
        return self[name]


def parse_form(body: bytes) -> Fields:
    """The form's fields, or BadRequest(400): not UTF-8, or not name=value pairs.

    What `parse_qsl(text, keep_blank_values=True, strict_parsing=True, errors="strict")` reads
    (tests/unit/test_sms_form.py holds the two side by side), without its per-call argument
    coercion, in about two thirds of its time: a '+' is a space, and only a part with a '%' is
    unquoted (by urllib's own `unquote`)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest(400, NOT_A_FORM) from None
    fields = Fields()
    if not text:
        return fields
    for pair in text.split("&"):
        name, equals, value = pair.partition("=")
        if not equals:
            raise BadRequest(400, NOT_A_FORM)
        name, value = name.replace("+", " "), value.replace("+", " ")
        try:
            if "%" in name:
                name = unquote(name, errors="strict")
            if "%" in value:
                value = unquote(value, errors="strict")
        except UnicodeDecodeError:
            raise BadRequest(400, NOT_A_FORM) from None
        fields.setdefault(name, []).append(value)
    return fields


def single(fields: Fields) -> dict[str, str]:
    """One value per field (Twilio never repeats one), each storable (a NUL, which neither
    database takes in text, becomes U+FFFD), or BadRequest(400)."""
    repeated = sorted(name for name, values in fields.items() if len(values) > 1)
    if repeated:
        raise BadRequest(400, f"{repeated[0]} is given more than once")
    return {name: storable(values[0]) for name, values in fields.items()}


def twiml(text: str | None = None) -> Response:
    """The webhook's answer: nothing to send now, or one message."""
    if not text:
        return _empty_twiml()
    from twilio.twiml.messaging_response import MessagingResponse

    answer = MessagingResponse()
    answer.message(text)
    return Response(str(answer), media_type="text/xml")


@functools.cache
def _empty_twiml() -> Response:
    """The usual answer, built by twilio's own TwiML once (and one Response, only read when
    sent): serialising it through ElementTree for every request cost about as much as the
    HMAC of its signature check."""
    from twilio.twiml.messaging_response import MessagingResponse

    return Response(str(MessagingResponse()), media_type="text/xml")


# The URLs requests arrived at, by what Starlette builds one from: building it was 9 us a
# request, for the same URL every time. The Host header is the caller's, so this is bounded.
_ARRIVED_AT: dict[tuple[object, ...], str] = {}
URLS_KEPT = 64


def arrived_at(request: Request) -> str:
    """`str(request.url)`, kept per scheme, server, path, query, root path and Host header
    (all that Starlette builds it from)."""
    scope = request.scope
    host = next((value for name, value in scope["headers"] if name == b"host"), None)
    key = (
        scope.get("scheme", "http"),
        scope.get("server"),
        scope["path"],
        scope.get("query_string", b""),
        scope.get("root_path", ""),
        host,
    )
    try:
        return _ARRIVED_AT[key]
    except KeyError:
        pass
    except TypeError:  # a server given as a list: not kept
        return str(request.url)
    url = str(request.url)
    if len(_ARRIVED_AT) >= URLS_KEPT:
        _ARRIVED_AT.clear()
    _ARRIVED_AT[key] = url
    return url


class SmsReceiver:
    def __init__(self, gateway: Gateway, *, token: str, webhook_url: str | None) -> None:
        self.gateway = gateway
        self._signature = Signature(token)
        self._webhook_url = webhook_url

    def signed_url(self, request: Request) -> str:
        """The URL Twilio signed: the configured public one (with this request's query), or
        the one this request arrived at."""
        if self._webhook_url is None:
            return arrived_at(request)
        query = urlsplit(arrived_at(request)).query  # request.url.query
        if not query or "?" in self._webhook_url:
            return self._webhook_url
        return f"{self._webhook_url}?{query}"

    async def twilio(self, request: Request) -> Response:
        try:
            signature = request.headers.get(SIGNATURE_HEADER)
            if not signature:
                raise BadRequest(403, "unsigned: no X-Twilio-Signature header")
            body = await read_body(request, MAX_FORM)
            if media_type(request) != FORM:
                raise BadRequest(415, f"the body must be {FORM}")
            fields = parse_form(body)
            if not self._signature.matches(self.signed_url(request), fields, signature):
                raise BadRequest(403, "the X-Twilio-Signature does not match")
            refusal = await self.handle(single(fields))
        except BadRequest as exc:
            return exc.response()
        return twiml(refusal)

    async def handle(self, form: Mapping[str, str]) -> str | None:
        """Record (or ignore) one incoming message; returns a refusal to answer with, if due.

        Raises BadRequest(400) for fields that are not a message; store errors propagate (the
        app answers 503).
        """
        try:
            result = translate(form)
        except BadForm as exc:
            raise BadRequest(400, str(exc)) from None
        if isinstance(result, Ignored):
            log.debug("sms webhook ignored: %s", result.reason)
            return None
        refusal = self.gateway.refusal_for(result)
        if refusal is not None:
            return refusal or None
        try:
            await self.gateway.record(result)
        except TurnRejected as exc:
            log.warning("sms message %s not recorded: %s", result.event_id, exc)
        return None
