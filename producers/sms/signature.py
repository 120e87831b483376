"""Twilio's webhook signature (`X-Twilio-Signature`): base64 of HMAC-SHA1, keyed with the Auth
Token, over the URL Twilio posted to followed by every field's name and value, fields sorted by
name and each field's distinct values sorted.

`Signature.matches` answers exactly what twilio's own `RequestValidator(token).validate(url,
fields, signature)` answers for a form's fields (tests/unit/test_sms_signature.py holds the two
side by side): the URL as given, its port taken out or the scheme's default put in (twilio's
own `remove_port` and `add_port`), and either must sign the fields. RequestValidator took 34 us
a request (timed on bench/webhooks.py's form; 52 on a busier machine), a fifth to a third of
the SMS receiver's CPU per request: it parses the URL three times, signs both forms of it
every time, and asks each field for its values by raising and catching AttributeError twice.
Here the URL's two forms are kept per URL (a receiver sees one or a few), the fields are
joined once, and the form that is the URL as given is signed first, the other only when that
one does not match: 5 us, timed beside it.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
from collections.abc import Mapping, Sequence
from urllib.parse import urlparse

URL_FORMS = 64  # URLs whose two forms are kept (the Host header chooses it: bounded)


class Signature:
    """Checks Twilio's signatures made with one Auth Token."""

    def __init__(self, token: str) -> None:
        self._key = token.encode("utf-8")

    def matches(self, url: str, fields: Mapping[str, Sequence[str]], signature: str) -> bool:
        """`signature` signs `fields` posted to `url`, with or without its port."""
        given = signature.encode("utf-8", "surrogatepass")
        joined = signed_fields(fields)
        return any(hmac.compare_digest(self._sign(form + joined), given) for form in url_forms(url))

    def _sign(self, text: str) -> bytes:
        # hmac.new, not the one-shot hmac.digest: that one lets go of the GIL around OpenSSL's
        # HMAC, and the event loop then waited for the recording thread to give it back (100
        # us a call beside a busy thread, 2 here).
        return base64.b64encode(hmac.new(self._key, text.encode("utf-8"), hashlib.sha1).digest())


def signed_fields(fields: Mapping[str, Sequence[str]]) -> str:
    """The fields as Twilio signs them: name then value, by name, each distinct value sorted."""
    parts: list[str] = []
    for name in sorted(fields):
        values = fields[name]
        for value in values if len(values) == 1 else sorted(set(values)):
            parts += (name, value)
    return "".join(parts)


@functools.lru_cache(maxsize=URL_FORMS)
def url_forms(url: str) -> tuple[str, str]:
    """`url` without its port and with it (the scheme's default when it has none), the one
    that is `url` as given first: Twilio's signatures are made over one or the other.
    Raises ValueError for a URL whose port is not a port, as RequestValidator does."""
    from twilio.request_validator import add_port, remove_port

    parsed = urlparse(url)
    forms: tuple[str, str] = (remove_port(parsed), add_port(parsed))
    return forms[::-1] if forms[1] == url else forms  # as given first: Twilio's likeliest
