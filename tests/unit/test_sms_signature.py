"""Twilio's webhook signature is checked as twilio's own RequestValidator checks it: for any
URL, fields and header, `Signature.matches` answers what `RequestValidator.validate` answers
(producers/sms/signature.py)."""

from __future__ import annotations

from urllib.parse import urlparse

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twilio.request_validator import RequestValidator, add_port, remove_port

from producers.sms.receiver import Fields
from producers.sms.signature import Signature

TOKEN = "12345678901234567890123456789012"
URLS = [
    "https://hermes.example.com/hooks/sms",
    "https://hermes.example.com:443/hooks/sms",
    "https://hermes.example.com:8443/hooks/sms?x=1&y=%20",
    "http://127.0.0.1:8000/sms/twilio",
    "http://testserver/sms/twilio",
    "http://[::1]:8080/sms/twilio?bodySHA256=abc",
    "http://user:pass@host:81/sms",  # RequestValidator's remove_port keeps only "user"
    "https://h\u00e9rmes.example.com/s\u00e9ms",
]


def fields_of(pairs: list[tuple[str, str]]) -> Fields:
    fields = Fields()
    for name, value in pairs:
        fields.setdefault(name, []).append(value)
    return fields


def signatures_for(url: str, fields: Fields) -> list[str]:
    """What a header could hold: the signature over the URL, its other forms, others."""
    twilio = RequestValidator(TOKEN)
    parsed = urlparse(url)
    signed = [
        twilio.compute_signature(u, fields) for u in (url, remove_port(parsed), add_port(parsed))
    ]
    other = RequestValidator("another token").compute_signature(url, fields)
    return [*signed, other, signed[0][:-1], signed[0] + " ", "", "\u00e9" * 28, "\udc80"]


PAIRS = st.lists(
    st.tuples(st.sampled_from(["Body", "From", "a", "A", "", "\u00e9", "b"]), st.text(max_size=6)),
    max_size=8,
)


@given(st.sampled_from(URLS), PAIRS)
def test_a_signature_matches_exactly_when_twilios_validator_says_so(
    url: str, pairs: list[tuple[str, str]]
) -> None:
    fields = fields_of(pairs)
    ours, twilio = Signature(TOKEN), RequestValidator(TOKEN)
    for signature in signatures_for(url, fields):
        assert ours.matches(url, fields, signature) == twilio.validate(url, fields, signature)


def test_a_signature_over_the_url_with_or_without_its_port_matches() -> None:
    fields = fields_of(
        [("Body", "hi"), ("From", "+14155550123"), ("a", "2"), ("a", "1"), ("a", "2")]
    )
    twilio = RequestValidator(TOKEN)
    ours = Signature(TOKEN)
    for given_url, signed_url in [
        ("https://h.example/sms", "https://h.example:443/sms"),
        ("https://h.example:443/sms", "https://h.example/sms"),
        ("http://h.example:8000/sms", "http://h.example/sms"),
    ]:
        assert ours.matches(given_url, fields, twilio.compute_signature(signed_url, fields))
    wrong = twilio.compute_signature("https://h.example:444/sms", fields)
    assert not ours.matches("https://h.example/sms", fields, wrong)
    tampered = fields_of([("Body", "hi!"), ("From", "+14155550123"), ("a", "2"), ("a", "1")])
    good = twilio.compute_signature("https://h.example/sms", fields)
    assert not ours.matches("https://h.example/sms", tampered, good)


def test_a_url_whose_port_is_not_a_port_is_a_value_error_as_in_twilios_validator() -> None:
    fields = fields_of([("Body", "hi")])
    for url in ("http://h.example:99999/sms", "http://h.example:x/sms"):
        with pytest.raises(ValueError):
            RequestValidator(TOKEN).validate(url, fields, "x")
        with pytest.raises(ValueError):
            Signature(TOKEN).matches(url, fields, "x")
