"""The URL an SMS webhook arrived at (the one Twilio signed when no `webhook_url` is set) is
Starlette's `str(request.url)`, also when kept from an earlier request
(producers/sms/receiver.py's `arrived_at`)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from starlette.requests import Request

from producers.sms import receiver
from producers.sms.receiver import URLS_KEPT, arrived_at

HOSTS = [None, b"hermes.example.com", b"hermes.example.com:8443", b"127.0.0.1:80", b"[::1]:8000"]
HOSTS += [b"h\xe9rmes.example", b"bad host:port", b"host:99999", b""]
SERVERS = [None, ("127.0.0.1", 8000), ("127.0.0.1", 80), ("::1", 443), ("10.0.0.1", 443)]
PATHS = ["/sms/twilio", "/sms/twilio/", "//sms", "/a?b#c\\d", "/s\u00e9ms"]
QUERIES = [b"", b"a=1", b"a=1&b=%20", b"x"]


def scope_of(
    scheme: str, server: Any, path: str, query: bytes, hosts: list[bytes | None]
) -> dict[str, Any]:
    headers = [(b"content-type", b"application/x-www-form-urlencoded")]
    headers += [(b"host", host) for host in hosts if host is not None]
    return {
        "type": "http",
        "method": "POST",
        "scheme": scheme,
        "server": server,
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "root_path": "",
        "headers": headers,
    }


@given(
    st.sampled_from(["http", "https"]),
    st.sampled_from(SERVERS),
    st.sampled_from(PATHS),
    st.sampled_from(QUERIES),
    st.lists(st.sampled_from(HOSTS), max_size=2),
)
def test_the_url_is_the_one_starlette_builds_first_time_and_after(
    scheme: str, server: Any, path: str, query: bytes, hosts: list[bytes | None]
) -> None:
    scope = scope_of(scheme, server, path, query, hosts)
    expected = str(Request(scope).url)
    assert arrived_at(Request(scope)) == expected
    assert arrived_at(Request(dict(scope))) == expected


def test_urls_are_kept_per_host_and_the_kept_ones_stay_bounded() -> None:
    receiver._ARRIVED_AT.clear()
    urls = set()
    for n in range(URLS_KEPT * 3):
        scope = scope_of("https", ("127.0.0.1", 8000), "/sms", b"", [f"h{n}.example".encode()])
        urls.add(arrived_at(Request(scope)))
        assert len(receiver._ARRIVED_AT) <= URLS_KEPT
    assert len(urls) == URLS_KEPT * 3
    listed = scope_of("http", ["127.0.0.1", 8000], "/sms", b"", [])  # not hashable: not kept
    assert arrived_at(Request(listed)) == "http://127.0.0.1:8000/sms"
