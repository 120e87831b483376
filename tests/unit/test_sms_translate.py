"""Twilio incoming-message webhooks → turns, pinned by golden files of Twilio's documented
fields (the form a Messaging webhook posts)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from producers.sms.translate import BadForm, is_keyword, translate
from shared.settings import SettingsError, load_settings
from shared.turns import InboundTurn, validate_turn
from tests.fakes.golden import cases, check, load


@pytest.mark.parametrize("name", cases("sms"))
def test_golden(name: str) -> None:
    payload, expected = load("sms", name)
    check(translate(payload), expected)
    if "same_event_as" in expected:
        first, _ = load("sms", expected["same_event_as"])
        assert translate(first) == translate(payload)


def test_the_golden_set_covers_the_issue() -> None:
    wanted = {"dm", "redelivered", "mms", "mms_only", "stop", "help_any_case", "start"}
    assert wanted <= set(cases("sms"))


@pytest.mark.parametrize(
    "word", ["STOP", "stop", "Stop.", "STOPALL", "unsubscribe", "CANCEL", "end", "QUIT", "INFO"]
)
def test_carrier_keywords_are_the_whole_message(word: str) -> None:
    assert is_keyword(word) and is_keyword(f"  {word}  ")
    assert not is_keyword(f"please {word} that")


def _form(**changes: Any) -> dict[str, str]:
    payload, _ = load("sms", "dm")
    form = {**payload, **changes}
    return {k: v for k, v in form.items() if v is not None}


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"MessageSid": None, "SmsMessageSid": None}, "MessageSid"),
        ({"MessageSid": "SM123", "SmsMessageSid": None}, "MessageSid"),
        ({"From": None}, "From is missing"),
        ({"From": "   "}, "From is missing"),
        ({"From": "Alice"}, "From is not a phone number"),
        ({"From": "+1"}, "From is not a phone number"),
        ({"NumMedia": "x"}, "NumMedia"),
        ({"NumMedia": "-1"}, "NumMedia"),
        ({"NumMedia": "11"}, "NumMedia"),
        ({"NumMedia": "１"}, "NumMedia"),  # a full-width digit: isdigit() says yes, Twilio no
        ({"NumMedia": "1"}, "MediaUrl0 is missing"),
        ({"NumMedia": "1", "MediaUrl0": "file:///etc/passwd"}, "MediaUrl0 is not"),
    ],
)
def test_malformed_fields_are_bad_forms(changes: dict[str, Any], says: str) -> None:
    with pytest.raises(BadForm, match=says):
        translate(_form(**changes))


def test_half_configured_accounts_are_refused_by_the_settings(hermes_env: dict[str, str]) -> None:
    token = {**hermes_env, "HERMES_PLATFORMS__SMS__TOKEN": "auth-token"}
    with pytest.raises(SettingsError, match="account_sid"):
        load_settings(token)
    with pytest.raises(SettingsError, match="from_number"):
        load_settings({**token, "HERMES_PLATFORMS__SMS__ACCOUNT_SID": "AC" + "0" * 32})
    with pytest.raises(SettingsError, match="from_number"):
        load_settings(
            {
                **token,
                "HERMES_PLATFORMS__SMS__ACCOUNT_SID": "AC" + "0" * 32,
                "HERMES_PLATFORMS__SMS__FROM_NUMBER": "555-0100",
            }
        )
    with pytest.raises(SettingsError, match="account_sid"):
        load_settings({**token, "HERMES_PLATFORMS__SMS__ACCOUNT_SID": "not-a-sid"})
    fine = load_settings(
        {
            **token,
            "HERMES_PLATFORMS__SMS__ACCOUNT_SID": "AC" + "0" * 32,
            "HERMES_PLATFORMS__SMS__MESSAGING_SERVICE_SID": "MG" + "f" * 32,
        }
    )
    assert fine.platforms.of("sms").configured


FIELDS = ["MessageSid", "SmsMessageSid", "From", "Body", "NumMedia", "OptOutType"]
MEDIA = ["MediaUrl0", "MediaContentType0", "MediaUrl1"]


@settings(max_examples=300, deadline=None)
@given(
    changes=st.dictionaries(
        st.sampled_from(FIELDS + MEDIA),
        st.one_of(
            st.text(max_size=40),
            st.sampled_from(
                ["0", "1", "2", "10", "+14155550123", "STOP", "https://x.twilio.com/m"]
            ),
        ),
        max_size=6,
    ),
    dropped=st.sets(st.sampled_from(FIELDS)),
)
def test_any_fields_are_a_turn_that_validates_an_ignore_or_a_bad_form(
    changes: dict[str, str], dropped: set[str]
) -> None:
    form = {k: v for k, v in {**_form(), **changes}.items() if k not in dropped}
    try:
        result = translate(form)
    except BadForm:
        return
    if isinstance(result, InboundTurn):
        validate_turn(result)
        assert result.chat_id == result.user_id and result.chat_type == "dm"
