"""shared.surrogates: every string of a parsed body storable, at any depth, keys included."""

from __future__ import annotations

import json

from shared.surrogates import scrub, scrub_body, storable

R = "\ufffd"


def test_lone_halves_and_nul_become_the_replacement_character_and_pairs_stay() -> None:
    assert storable("a\ud800b\udfffc\x00d") == f"a{R}b{R}c{R}d"
    assert storable("\U0001f600 ok") == "\U0001f600 ok"


def test_scrub_reaches_keys_lists_and_depth_beyond_the_recursion_limit() -> None:
    deep: list[object] = ["\ud800"]
    for _ in range(5000):
        deep = [deep]
    data = {"\udc00k": ["x\ud800", {"n": "\x00", "keep": 1}], "deep": deep}
    scrub(data)
    assert data["\ufffdk"] == [f"x{R}", {"n": R, "keep": 1}]
    inner = data["deep"]
    while isinstance(inner, list) and isinstance(inner[0], list):
        inner = inner[0]
    assert inner == [R]


def test_a_body_that_cannot_hold_a_lone_surrogate_is_not_walked() -> None:
    body = json.dumps({"text": "plain ascii and é"}, ensure_ascii=False).encode()
    data = json.loads(body)
    assert scrub_body(body, data) is data
    escaped = json.dumps({"text": "\ud800"}).encode()
    assert scrub_body(escaped, json.loads(escaped)) == {"text": R}
