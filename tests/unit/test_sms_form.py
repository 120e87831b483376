"""An SMS webhook's form is read as `parse_qsl(text, keep_blank_values=True,
strict_parsing=True, errors="strict")` reads it: the same fields, in the same order, and the
same bodies refused (producers/sms/receiver.py's `parse_form`)."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode

import pytest
from hypothesis import given
from hypothesis import strategies as st

from producers.gateway.body import BadRequest
from producers.sms.receiver import Fields, parse_form, single
from shared.surrogates import storable


def as_parse_qsl_reads(body: bytes) -> tuple[str, object]:
    try:
        text = body.decode("utf-8")
        pairs = parse_qsl(text, keep_blank_values=True, strict_parsing=bool(text), errors="strict")
    except (UnicodeDecodeError, ValueError):
        return ("refused", "the body is not UTF-8 form fields")
    fields: dict[str, list[str]] = {}
    for name, value in pairs:
        fields.setdefault(name, []).append(value)
    return ("read", list(fields.items()))


def as_we_read(body: bytes) -> tuple[str, object]:
    try:
        fields = parse_form(body)
    except BadRequest as exc:
        assert exc.status == 400
        return ("refused", exc.reason)
    assert all(fields.getlist(name) is values for name, values in fields.items())
    return ("read", list(fields.items()))


BODIES = [
    b"",
    b"MessageSid=SM0&From=%2B14155550123&Body=Hello+there%2C+what%27s+on+today%3F&NumMedia=0",
    b"a=1&a=2&b=",
    b"a=1&&b=2",  # an empty field: refused
    b"a=1&",
    b"&",
    b"=",
    b"a",
    b"a=b=c",
    b"+a+=+b+",
    b"%2B=%2b",
    b"a=%zz&b=%4",  # not escapes: kept as written
    b"a=%C3%A9&b=\xc3\xa9",
    b"a=%C3",  # half a character
    b"a=%ff",
    b"a=\xff",
    b"a=%ED%A0%80",  # an escaped surrogate: not UTF-8
    b"a=\xc3%A9",
    b"%C3%A9=%F0%9F%98%80+%E2%82",
    b"a=1;b=2",  # ';' is not a separator
    b"a=%00&b=\x00",
    urlencode({"Body": "line\r\nbreak & = + % \u00e9\U0001f600"}).encode(),
]


@pytest.mark.parametrize("body", BODIES)
def test_a_form_is_read_and_refused_as_parse_qsl_reads_it(body: bytes) -> None:
    assert as_we_read(body) == as_parse_qsl_reads(body)


FORM_BYTES = st.lists(
    st.sampled_from(
        [
            *(b"a", b"B", b"=", b"&", b"+", b"%", b"2", b"B", b"C3", b"A9", b"zz", b"ff", b";"),
            *(b"\xc3\xa9", b"\xc3", b"\xa9", b"\xff", b"\x00", b" ", b"%2B", b"%26", b"%3D"),
        ]
    ),
    max_size=24,
).map(b"".join)


@given(FORM_BYTES)
def test_any_body_is_read_and_refused_as_parse_qsl_reads_it(body: bytes) -> None:
    assert as_we_read(body) == as_parse_qsl_reads(body)


@given(st.lists(st.tuples(st.text(), st.text()), max_size=8))
def test_any_encoded_form_is_read_back_as_it_was_encoded(pairs: list[tuple[str, str]]) -> None:
    body = urlencode(pairs, errors="surrogatepass").encode("utf-8", "surrogatepass")
    assert as_we_read(body) == as_parse_qsl_reads(body)


@given(st.dictionaries(st.text(max_size=4), st.text(alphabet=st.characters(), max_size=8)))
def test_each_field_is_given_once_and_storable(given_fields: dict[str, str]) -> None:
    fields = Fields({name: [value] for name, value in given_fields.items()})
    assert single(fields) == {name: storable(value) for name, value in given_fields.items()}


def test_a_nul_or_a_lone_surrogate_becomes_a_replacement_character_and_a_repeat_is_400() -> None:
    fields = Fields({"Body": ["a\x00b"], "From": ["+1415"], "X": ["\udc80\u00e9"], "Y": ["ok"]})
    assert single(fields) == {"Body": "a\ufffdb", "From": "+1415", "X": "\ufffd\u00e9", "Y": "ok"}
    with pytest.raises(BadRequest) as refused:
        single(Fields({"Body": ["a"], "To": ["1", "2"]}))
    assert (refused.value.status, refused.value.reason) == (400, "To is given more than once")
