"""WhatsApp Cloud API webhooks → turns, pinned by golden files shaped as Meta's reference."""

from __future__ import annotations

import copy
import hashlib
import hmac
from typing import Any

import pytest

from producers.whatsapp.receiver import _well_formed, sign
from producers.whatsapp.translate import BadPayload, Ignored, translate
from shared.platforms import DM, GROUP
from shared.platforms.whatsapp import chat_type_of
from tests.fakes.golden import cases, check, load

PHONE = "106540352242922"


@pytest.mark.parametrize("name", cases("whatsapp"))
def test_golden(name: str) -> None:
    payload, expected = load("whatsapp", name)
    results = translate(payload, phone_number_id=PHONE)
    wanted = expected.get("each", [expected])
    assert len(results) == len(wanted)
    for result, one in zip(results, wanted, strict=True):
        check(result, one)
    if "same_event_as" in expected:
        first, _ = load("whatsapp", expected["same_event_as"])
        assert translate(first, phone_number_id=PHONE) == results


def test_the_golden_set_covers_the_issue() -> None:
    wanted = {
        "text",
        "text_reply",
        "image",
        "document",
        "audio_voice",
        "group_text",
        "reaction",
        "unsupported",
        "status_delivered",
        "status_failed_window",
        "repeated_text",
    }
    assert wanted <= set(cases("whatsapp"))


def test_without_a_configured_number_every_number_is_taken() -> None:
    payload, _ = load("whatsapp", "other_number")
    (result,) = translate(payload)
    assert not isinstance(result, Ignored) and result.text == "hello other number"


def _text() -> dict[str, Any]:
    payload, _ = load("whatsapp", "text")
    return copy.deepcopy(payload)


def _with_message(**fields: Any) -> dict[str, Any]:
    payload = _text()
    message = payload["entry"][0]["changes"][0]["value"]["messages"][0]
    for key, value in fields.items():
        if value is None:
            message.pop(key, None)
        else:
            message[key] = value
    return payload


@pytest.mark.parametrize(
    "bad",
    [
        [],
        "webhook",
        {},
        {"object": 7, "entry": []},
        {"object": "whatsapp_business_account"},
        {"object": "whatsapp_business_account", "entry": []},
        {"object": "whatsapp_business_account", "entry": {"changes": []}},
        {"object": "whatsapp_business_account", "entry": ["x"]},
        {"object": "whatsapp_business_account", "entry": [{"changes": [{"value": 5}]}]},
        {"object": "whatsapp_business_account", "entry": [{"changes": "all"}]},
        _with_message(id=None),
        _with_message(id=""),
        _with_message(id=12345),
        _with_message(id="wamid.x\nforged"),
        _with_message(**{"from": None}),
        _with_message(type=None),
        _with_message(text="just a string"),
        _with_message(type="image", image={"caption": "no id"}),
    ],
)
def test_malformed_payloads_are_refused(bad: object) -> None:
    with pytest.raises(BadPayload):
        translate(bad, phone_number_id=PHONE)


def test_other_objects_and_fields_are_ignored() -> None:
    (page,) = translate({"object": "page", "entry": []})
    assert isinstance(page, Ignored) and "page" in page.reason
    payload = _text()
    payload["entry"][0]["changes"][0]["field"] = "account_update"
    (update,) = translate(payload, phone_number_id=PHONE)
    assert isinstance(update, Ignored) and "account_update" in update.reason


def test_a_failed_status_is_worth_a_warning_and_others_are_not() -> None:
    failed, _ = load("whatsapp", "status_failed_window")
    delivered, _ = load("whatsapp", "status_delivered")
    (one,) = translate(failed, phone_number_id=PHONE)
    (two,) = translate(delivered, phone_number_id=PHONE)
    assert isinstance(one, Ignored) and one.warn and "131047" in one.reason
    assert isinstance(two, Ignored) and not two.warn


def test_chat_types_follow_the_id() -> None:
    assert chat_type_of("16505551234") == DM
    assert chat_type_of("Y2FwaV9ncm91cDoxNzA1NTU1MDEzOToxMjAzNjM0MDQ2OTQyMzM4MjAZD") == GROUP


def test_signatures_are_meta_s_hmac_of_the_raw_body() -> None:
    digest = hmac.new(b"app-secret", b'{"a": 1}', hashlib.sha256).hexdigest()
    assert sign("app-secret", b'{"a": 1}') == f"sha256={digest}"
    assert _well_formed(sign("secret", b"{}"))
    assert not _well_formed("sha1=" + "0" * 40)
    assert not _well_formed("sha256=" + "z" * 64)
