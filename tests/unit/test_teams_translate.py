"""Teams activities → turns, pinned by golden files shaped as the Bot Framework's activities."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from producers.teams.translate import BadPayload, Ignored, split_conversation, translate
from shared.platforms import CHANNEL, DM, GROUP
from shared.platforms.teams import TeamsSettings, chat_type_of, service_url_allowed
from tests.fakes.golden import cases, check, load


@pytest.mark.parametrize("name", cases("teams"))
def test_golden(name: str) -> None:
    payload, expected = load("teams", name)
    result = translate(payload)
    check(result, expected)
    if "same_event_as" in expected:
        first, _ = load("teams", expected["same_event_as"])
        assert translate(first) == result


def test_the_golden_set_covers_the_issue() -> None:
    wanted = {
        "personal_text",
        "personal_redelivered",
        "group_mention",
        "channel_new_post",
        "channel_reply_chain",
        "file_download",
        "inline_image",
        "conversation_update",
        "reaction",
        "only_a_mention",
    }
    assert wanted <= set(cases("teams"))


def _text() -> dict[str, Any]:
    payload, _ = load("teams", "personal_text")
    return copy.deepcopy(payload)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"id": None}, "id must be"),
        ({"id": "x\ny"}, "control characters"),
        ({"conversation": "a:1"}, "conversation must be an object"),
        ({"conversation": {"conversationType": "personal"}}, "conversation.id"),
        ({"from": None}, "from must be an object"),
        ({"from": {"name": "no id"}}, "from.id"),
        ({"text": 42}, "text must be a string"),
        ({"attachments": {"a": 1}}, "attachments must be a list"),
        ({"type": 7}, "type must be a string"),
    ],
)
def test_malformed_activities_are_refused_naming_the_field(
    change: dict[str, Any], says: str
) -> None:
    payload = {**_text(), **change}
    with pytest.raises(BadPayload, match=says):
        translate(payload)


def test_a_body_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(BadPayload):
        translate([_text()])


def test_an_unknown_conversation_type_is_ignored_not_guessed() -> None:
    payload = _text()
    payload["conversation"]["conversationType"] = "meeting-chat-of-the-future"
    assert isinstance(translate(payload), Ignored)


def test_without_a_conversation_type_the_ids_shape_decides() -> None:
    payload, _ = load("teams", "channel_reply_chain")
    del payload["conversation"]["conversationType"]
    turn = translate(payload)
    assert not isinstance(turn, Ignored)
    assert (turn.chat_type, turn.thread_id) == (CHANNEL, "1733318600789")


def test_only_the_bots_mention_is_cut() -> None:
    payload, _ = load("teams", "group_mention")
    turn = translate(payload)
    assert not isinstance(turn, Ignored)
    assert turn.text == "what did Adele Vance decide about the rollout?"


def test_reply_chains_and_chat_types() -> None:
    assert split_conversation("19:x@thread.tacv2;messageid=17") == ("19:x@thread.tacv2", "17")
    assert split_conversation("a:1abc") == ("a:1abc", None)
    assert chat_type_of("a:1abc") == DM
    assert chat_type_of("19:x@thread.tacv2") == CHANNEL
    assert chat_type_of("19:x@thread.skype") == CHANNEL
    assert chat_type_of("19:meeting_x@thread.v2") == GROUP


def test_settings_need_the_app_id_with_a_password_and_take_a_tenant() -> None:
    with pytest.raises(ValueError, match="app_id"):
        TeamsSettings(token="secret")  # type: ignore[arg-type]
    single = TeamsSettings(token="secret", app_id="app", tenant_id="contoso.onmicrosoft.com")  # type: ignore[arg-type]
    assert single.token_url == (
        "https://login.microsoftonline.com/contoso.onmicrosoft.com/oauth2/v2.0/token"
    )
    with pytest.raises(ValueError, match="http"):
        TeamsSettings(openid_metadata="file:///etc/passwd")


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://smba.trafficmanager.net/amer/", True),
        ("https://SMBA.trafficmanager.net/emea/", True),  # hosts compare without case
        ("https://smba.infra.gcc.teams.microsoft.com/", True),
        ("https://smba.trafficmanager.net.attacker.example/amer/", False),
        ("https://attacker.example/smba.trafficmanager.net/", False),
        ("http://smba.trafficmanager.net/amer/", False),  # not https
        ("https://user@smba.trafficmanager.net/amer/", False),
        ("ftp://smba.trafficmanager.net/amer/", False),
        ("https://proxy.internal:8443/anything/", True),  # api_base's origin
        ("https://proxy.internal/anything/", False),  # another port
    ],
)
def test_replies_go_only_to_allowed_service_urls(url: str, allowed: bool) -> None:
    conf = TeamsSettings(api_base="https://proxy.internal:8443/teams/")
    assert service_url_allowed(conf, url) is allowed


def test_service_url_prefixes_are_checked_and_replace_the_default() -> None:
    conf = TeamsSettings(
        api_base="https://proxy.internal/",
        service_urls="https://bots.example/emea/,https://bots.example/apac/",  # type: ignore[arg-type]
    )
    assert service_url_allowed(conf, "https://bots.example/emea/")
    assert not service_url_allowed(conf, "https://bots.example/amer/")
    assert not service_url_allowed(conf, "https://smba.trafficmanager.net/amer/")  # replaced
    for bad in ("https://bots.example/emea", "bots.example/", "javascript:alert(1)/"):
        with pytest.raises(ValueError, match="service_urls"):
            TeamsSettings(service_urls=(bad,))
