"""Fetching attachments the receivers recorded: Telegram file ids, Slack private URLs."""

from __future__ import annotations

import pytest

from shared.settings import load_settings
from shared.turns import Attachment
from tests.fakes.slack_api import FakeSlack
from tests.fakes.telegram_api import FakeTelegram
from workers.delivery.fetch import (
    SLACK_HOSTS,
    FetchFailed,
    TelegramFetcher,
    UrlFetcher,
    patiently,
    platform_fetchers,
    telegram_file_base,
)

TOKEN = "123456789:AAFakeTokenForTestsFetchSecret"


def test_the_file_root_follows_the_api_root() -> None:
    assert telegram_file_base("https://api.telegram.org/bot") == "https://api.telegram.org/file/bot"
    assert telegram_file_base("http://127.0.0.1:9/tg/bot") == "http://127.0.0.1:9/tg/file/bot"


def test_telegram_files_by_id_within_the_limit() -> None:
    with FakeTelegram(TOKEN) as fake:
        fake.files["AgACAgQ"] = b"\x89PNG" + b"0" * 1000
        fetcher = TelegramFetcher(token=TOKEN, api_base=fake.api_base)
        try:
            image = Attachment("image", None, "image/jpeg", "telegram:file/AgACAgQ", None, 1004)
            assert fetcher.fetch(image, 10_000).startswith(b"\x89PNG")
            with pytest.raises(FetchFailed, match="limit"):
                fetcher.fetch(Attachment("image", url="telegram:file/AgACAgQ"), 100)
            with pytest.raises(FetchFailed, match="getFile refused") as missing:
                fetcher.fetch(Attachment("image", url="telegram:file/gone"), 10_000)
            assert TOKEN.split(":")[1] not in str(missing.value)
        finally:
            fetcher.close()


def test_a_fetch_with_no_answer_or_a_5xx_is_tried_again_and_a_refusal_is_not() -> None:
    with FakeTelegram(TOKEN) as fake:
        fake.files["AgACAgQ"] = b"the photo"
        fetcher = TelegramFetcher(token=TOKEN, api_base=fake.api_base)
        image = Attachment("image", url="telegram:file/AgACAgQ")
        waited: list[float] = []

        def tries() -> int:
            return sum(call.method == "getFile" for call in fake.calls)

        try:
            fake.script("getFile", "500", "drop", "429:0")  # a 5xx, a dropped connection, a 429
            got = patiently(
                lambda: fetcher.fetch(image, 1000), delays=(1, 2, 3), sleep=waited.append
            )
            assert got == b"the photo" and tries() == 4 and waited == [1, 2, 3]

            fake.script("getFile", "500", "500", "500")
            with pytest.raises(FetchFailed, match="500") as gave_up:
                patiently(lambda: fetcher.fetch(image, 1000), delays=(0, 0), sleep=waited.append)
            assert gave_up.value.transient and tries() == 7

            fake.script("getFile", "403")  # the platform refuses: asking again changes nothing
            with pytest.raises(FetchFailed, match="getFile refused") as refused:
                patiently(lambda: fetcher.fetch(image, 1000), delays=(0, 0), sleep=waited.append)
            assert not refused.value.transient and tries() == 8
        finally:
            fetcher.close()


def test_a_download_from_a_host_that_is_not_there_is_transient() -> None:
    fetcher = UrlFetcher()
    try:
        with pytest.raises(FetchFailed) as down:  # port 9 (discard): nothing listens
            fetcher.fetch(Attachment("document", url="http://127.0.0.1:9/f.txt"), 1000)
        assert down.value.transient
    finally:
        fetcher.close()


def test_slack_private_urls_need_the_token() -> None:
    with FakeSlack("xoxb-fetch-secret") as fake:
        fake.files["notes.txt"] = b"meeting notes"
        url = f"{fake.api_base.removesuffix('/api/')}/files-pri/notes.txt"
        good = UrlFetcher(token="xoxb-fetch-secret", hosts=SLACK_HOSTS, api_base=fake.api_base)
        anonymous = UrlFetcher()
        try:
            doc = Attachment("document", "notes.txt", "text/plain", url, None, 13)
            assert good.fetch(doc, 1000) == b"meeting notes"
            with pytest.raises(FetchFailed):
                anonymous.fetch(Attachment("document", url=url + "?x"), 1000)
        finally:
            good.close()
            anonymous.close()


def test_fetchers_exist_for_platforms_with_a_token(hermes_env: dict[str, str]) -> None:
    settings = load_settings(
        {
            **hermes_env,
            "HERMES_PLATFORMS__TELEGRAM__TOKEN": TOKEN,
            "HERMES_PLATFORMS__DISCORD__TOKEN": "d-token",
        }
    )
    found = platform_fetchers(settings)
    try:
        assert sorted(found) == ["discord", "telegram"]
    finally:
        for fetcher in found.values():
            fetcher.close()


@pytest.mark.parametrize(
    "where",
    [
        "{other}/files-pri/notes.txt",  # another server on this machine (another origin)
        "http://files.slack.com/files-pri/notes.txt",  # Slack's host, but plain http
        "https://files.slack.com.evil.example/files-pri/notes.txt",
        "https://notslack.com/files-pri/notes.txt",
    ],
)
def test_the_slack_token_goes_only_to_slack(where: str) -> None:
    with FakeSlack("xoxb-fetch-secret") as fake, FakeSlack("someone-else") as other:
        other.files["notes.txt"] = b"bait"
        url = where.format(other=other.api_base.removesuffix("/api/"))
        fetcher = UrlFetcher(token="xoxb-fetch-secret", hosts=SLACK_HOSTS, api_base=fake.api_base)
        try:
            with pytest.raises(FetchFailed, match="no credentials sent"):
                fetcher.fetch(Attachment("document", "notes.txt", "text/plain", url), 1000)
        finally:
            fetcher.close()
        assert other.downloads == [] and fake.downloads == []


def test_slacks_own_https_hosts_and_subdomains_may_carry_the_token() -> None:
    fetcher = UrlFetcher(token="xoxb-t", hosts=SLACK_HOSTS, api_base="https://slack.com/api/")
    try:
        for url in ("https://files.slack.com/files-pri/T1/x", "https://slack.com/x"):
            assert fetcher.may_carry_token(url), url
    finally:
        fetcher.close()
