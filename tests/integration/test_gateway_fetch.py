"""Fetching attachments the receivers recorded: Telegram file ids, Slack private URLs."""

from __future__ import annotations

import pytest

from shared.settings import load_settings
from shared.turns import Attachment
from tests.fakes.slack_api import FakeSlack
from tests.fakes.telegram_api import FakeTelegram
from workers.delivery.fetch import (
    FetchFailed,
    TelegramFetcher,
    UrlFetcher,
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


def test_slack_private_urls_need_the_token() -> None:
    with FakeSlack("xoxb-fetch-secret") as fake:
        fake.files["notes.txt"] = b"meeting notes"
        url = f"{fake.api_base.removesuffix('/api/')}/files-pri/notes.txt"
        good, anonymous = UrlFetcher(token="xoxb-fetch-secret"), UrlFetcher()
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
