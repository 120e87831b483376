"""A webhook body is read by orjson where it reads it as json does, by json elsewhere: the same
bodies are accepted and refused, with the same values (producers/gateway/body.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from producers.gateway.body import BadRequest, parse_json
from shared.surrogates import scrub_body


def as_json_reads(body: bytes) -> tuple[str, str]:
    """What parse_json answered with json alone: the value's repr, or the refusal."""
    try:
        data: Any = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return ("refused", "malformed JSON")
    except RecursionError:
        return ("refused", "JSON nested too deep")
    if not isinstance(data, dict):
        return ("refused", "the body must be a JSON object")
    return ("read", repr(scrub_body(body, data)))


def as_we_read(body: bytes) -> tuple[str, str]:
    try:
        return ("read", repr(parse_json(body)))
    except BadRequest as exc:
        return ("refused", exc.reason)


BODIES = [
    b'{"update_id": 5, "message": {"text": "hello", "chat": {"id": -1001234567890}}}',
    b'{"a": "\\ud800 lone"}',  # orjson refuses a lone surrogate: json reads it, scrub fixes it
    b'{"\xed\xa0\x80": 1}',  # CESU-8
    b'{"a": "\\u0000"}',
    b'{"a": NaN, "b": Infinity}',
    b'{"a": 1e400}',
    b'{"a": 123456789012345678901234567890}',  # past 64 bits: a float to orjson
    b'{"a": -9999999999999999999, "b": 18446744073709551615}',
    b'{"a": 9223372036854775807, "b": -9223372036854775808}',
    b'{"a": -0.0, "b": 1.7976931348623157e308, "c": 5e-324, "d": 0.12345678901234567890}',
    b'\xef\xbb\xbf{"a": 1}',
    '{"a": 1}'.encode("utf-16"),
    b'{"a": 1, "a": 2}',
    b' {"a": 1} ',
    b'{"a": 1}\n\x00',
    b'{"a": "\xff"}',
    b"[1]",
    b'"x"',
    b"",
    b'{"x":' * 600 + b"1" + b"}" * 600,
    b'{"x":' * 2000 + b"1" + b"}" * 2000,
]


@pytest.mark.parametrize("body", BODIES)
def test_a_body_is_read_as_json_reads_it(body: bytes) -> None:
    assert as_we_read(body) == as_json_reads(body)


values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(st.dictionaries(st.text(), values, max_size=5), st.booleans())
def test_any_object_is_read_as_json_reads_it(data: dict[str, Any], ascii_only: bool) -> None:
    body = json.dumps(data, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    assert as_we_read(body) == as_json_reads(body)
