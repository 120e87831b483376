"""WhatsApp delivery through the real sender (httpx) against a fake Graph API on 127.0.0.1, on
real Redis: split replies quoting the user, the 24-hour window, rate limits, retries, groups,
media fetching, and the token never in a log line or an error."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from shared.db import Store, open_store
from shared.pipeline import outbox
from shared.settings import Settings, load_settings
from shared.turns import Attachment
from tests.fakes.delivery import delivery_runtime, reply, row
from tests.fakes.graph_api import FakeGraph
from tests.fakes.stack import redis_db_url
from workers.delivery.fetch import FetchFailed
from workers.delivery.whatsapp import WhatsAppFetcher
from workers.flush import flush

TOKEN = "EAAGwhatsappDeliveryTokenSecret"
PHONE = "106540352242922"
USER = "16505551234"
WAMID = "wamid.HBgLMTY1MDUxNzY0MzkVAgASGBQzQTRBNjU5OUFFRTAzODEwMTQ0RgA="
GROUP = "Y2FwaV9ncm91cDoxNzA1NTU1MDEzOToxMjAzNjM0MDQ2OTQyMzM4MjAZD"


@pytest.fixture
def graph() -> Iterator[FakeGraph]:
    with FakeGraph(TOKEN, PHONE) as fake:
        yield fake


@pytest.fixture
def wa(hermes_env: dict[str, str], redis_url: str, graph: FakeGraph) -> Settings:
    return load_settings(
        {
            **hermes_env,
            "HERMES_BROKER_URL": redis_db_url(redis_url),
            "HERMES_PLATFORMS__WHATSAPP__TOKEN": TOKEN,
            "HERMES_PLATFORMS__WHATSAPP__PHONE_NUMBER_ID": PHONE,
            "HERMES_PLATFORMS__WHATSAPP__API_BASE": graph.api_base,
        }
    )


@pytest.fixture
def wa_store(wa: Settings) -> Iterator[Store]:
    store = open_store(wa.resolved_database_url)
    yield store
    store.close()


def test_a_long_reply_is_split_at_4096_in_order_and_quotes_the_user_once(
    wa: Settings, wa_store: Store, graph: FakeGraph
) -> None:
    long = "\n\n".join(f"Paragraph {n}: " + "word " * 500 for n in range(5))
    with delivery_runtime(wa, wa_store) as (rt, _):
        row_id = reply(wa_store, "whatsapp", USER, long, reply_to=WAMID)
        assert flush(rt, f"whatsapp:{USER}").sent == 1
    sent = graph.sent(USER)
    assert len(sent) >= -(-len(long) // 4096) > 1
    assert all(len(p["text"]["body"]) <= 4096 for p in sent)
    assert " ".join(p["text"]["body"] for p in sent).split() == long.split()
    assert sent[0]["context"] == {"message_id": WAMID}
    assert all("context" not in p for p in sent[1:])
    assert {p["recipient_type"] for p in sent} == {"individual"}
    assert {p["messaging_product"] for p in sent} == {"whatsapp"}
    done = row(wa_store, row_id)
    assert done.status == outbox.SENT and done.platform_message_id is not None
    assert all(part.startswith("wamid.") for part in done.platform_message_id.split(","))


def test_outside_the_24_hour_window_a_reply_fails_once_clearly_and_is_not_retried(
    wa: Settings, wa_store: Store, graph: FakeGraph, caplog: pytest.LogCaptureFixture
) -> None:
    graph.window_closed.add(USER)
    caplog.set_level(logging.WARNING)
    with delivery_runtime(wa, wa_store) as (rt, waker):
        late = reply(wa_store, "whatsapp", USER, "Your report is ready.")
        other = reply(wa_store, "whatsapp", "447700900123", "hello Ann")
        assert flush(rt, f"whatsapp:{USER}").reason == "idle"
        assert flush(rt, "whatsapp:447700900123").sent == 1
        assert flush(rt, f"whatsapp:{USER}").reason == "idle"  # nothing left to try
        assert waker.deliveries == []  # no retry scheduled
    failed = row(wa_store, late)
    assert failed.status == outbox.FAILED and failed.attempts == 1
    assert "131047" in (failed.error or "") and "24-hour" in (failed.error or "")
    assert graph.attempts(USER) == 1
    assert row(wa_store, other).status == outbox.SENT
    reports = [r for r in caplog.records if "undeliverable" in r.getMessage()]
    assert len(reports) == 1 and "24-hour" in reports[0].getMessage()


def test_the_numbers_rate_limit_holds_every_worker_and_every_chat(
    wa: Settings, wa_store: Store, graph: FakeGraph
) -> None:
    graph.script(USER, "130429")
    with delivery_runtime(wa, wa_store) as (rt, _), delivery_runtime(wa, wa_store) as (rt2, _):
        first = reply(wa_store, "whatsapp", USER, "one")
        result = flush(rt, f"whatsapp:{USER}")
        assert result.reason == "cooldown" and result.retry_in == pytest.approx(2, abs=0.1)
        assert row(wa_store, first).attempts == 0  # a wait, not a failure
        reply(wa_store, "whatsapp", "447700900123", "held too")
        held = flush(rt2, "whatsapp:447700900123")  # another worker, another chat: Redis holds
        assert held.reason == "cooldown" and held.retry_in is not None and held.retry_in > 1
        assert graph.attempts("447700900123") == 0
        time.sleep(2.05)
        assert flush(rt2, f"whatsapp:{USER}").sent == 1
        assert flush(rt2, "whatsapp:447700900123").sent == 1
    assert graph.texts(USER) == ["one"]


def test_the_pair_rate_limit_cools_only_that_user(
    wa: Settings, wa_store: Store, graph: FakeGraph
) -> None:
    graph.script(USER, "131056")
    with delivery_runtime(wa, wa_store) as (rt, _):
        reply(wa_store, "whatsapp", USER, "one")
        result = flush(rt, f"whatsapp:{USER}")
        assert result.reason == "cooldown" and result.retry_in == pytest.approx(6, abs=0.1)
        reply(wa_store, "whatsapp", "447700900123", "not held")
        assert flush(rt, "whatsapp:447700900123").sent == 1


def test_a_server_error_is_retried_with_backoff_and_sent_once(
    wa: Settings, wa_store: Store, graph: FakeGraph
) -> None:
    graph.script(USER, "500", "drop")
    with delivery_runtime(wa, wa_store) as (rt, _):
        row_id = reply(wa_store, "whatsapp", USER, "hello")
        for _ in range(2):
            result = flush(rt, f"whatsapp:{USER}")
            assert result.reason == "retry"
            with wa_store.write() as conn:  # skip the wait
                conn.execute(text("UPDATE outbox SET not_before = NULL"))
                conn.execute(text("UPDATE leases SET cooldown_until = NULL"))
        assert flush(rt, f"whatsapp:{USER}").sent == 1
    assert graph.texts(USER) == ["hello"]
    assert graph.attempts(USER) == 3  # the 502, the dropped answer, the one that went
    assert row(wa_store, row_id).status == outbox.SENT


def test_an_undeliverable_message_fails_and_a_group_gets_recipient_type_group(
    wa: Settings, wa_store: Store, graph: FakeGraph
) -> None:
    graph.script(USER, "131026")
    with delivery_runtime(wa, wa_store) as (rt, _):
        gone = reply(wa_store, "whatsapp", USER, "are you there?")
        group = reply(wa_store, "whatsapp", GROUP, "hello all", reply_to=WAMID)
        flush(rt, f"whatsapp:{USER}")
        assert flush(rt, f"whatsapp:{GROUP}").sent == 1
    assert row(wa_store, gone).status == outbox.FAILED
    assert "131026" in (row(wa_store, gone).error or "")
    assert row(wa_store, group).status == outbox.SENT
    (sent,) = graph.sent(GROUP)
    assert sent["recipient_type"] == "group" and sent["context"] == {"message_id": WAMID}


def test_the_token_never_reaches_the_logs_or_the_store(
    wa: Settings, wa_store: Store, graph: FakeGraph, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with delivery_runtime(wa, wa_store) as (rt, _):
        for name in ("httpx", "httpcore"):
            logging.getLogger(name).setLevel(logging.DEBUG)
        try:
            for n, answer in enumerate(("ok", "500", "drop", "131026")):
                graph.script(f"44770090{n:04d}", answer)
                reply(wa_store, "whatsapp", f"44770090{n:04d}", f"message {n}")
                flush(rt, f"whatsapp:44770090{n:04d}")
        finally:
            for name in ("httpx", "httpcore"):
                logging.getLogger(name).setLevel(logging.WARNING)
        logging.getLogger("test").error("a line with the token %s", TOKEN)
    assert graph.sent("447700900000")
    assert "messages" in caplog.text  # the loggers did speak …
    assert TOKEN not in caplog.text  # … without the token
    with wa_store.read() as conn:
        errors = " ".join(str(e) for e in conn.execute(text("SELECT error FROM outbox")).scalars())
    assert TOKEN not in errors


def test_media_is_looked_up_then_downloaded_with_the_token(graph: FakeGraph) -> None:
    graph.media["1003383421387256"] = (b"\xff\xd8\xff" + b"0" * 1000, "image/jpeg")
    fetcher = WhatsAppFetcher(token=TOKEN, api_base=graph.api_base)
    try:
        image = Attachment("image", None, "image/jpeg", "whatsapp:media/1003383421387256")
        assert fetcher.fetch(image, 10_000).startswith(b"\xff\xd8\xff")
        with pytest.raises(FetchFailed, match="limit"):
            fetcher.fetch(image, 100)
        with pytest.raises(FetchFailed, match="without a URL"):
            fetcher.fetch(Attachment("image", url="whatsapp:media/gone"), 10_000)
        with pytest.raises(FetchFailed, match="not a WhatsApp media"):
            fetcher.fetch(Attachment("image", url="telegram:file/x"), 10_000)
    finally:
        fetcher.close()
    assert graph.downloads == ["1003383421387256"]


def test_the_token_goes_only_to_meta_or_the_configured_api(graph: FakeGraph) -> None:
    with FakeGraph("someone-else", PHONE) as other:
        other.media["m1"] = graph.media["m1"] = (b"bait", "image/jpeg")
        graph.download_base = other.api_base.rsplit("/", 1)[0]  # another origin on this host
        fetcher = WhatsAppFetcher(token=TOKEN, api_base=graph.api_base)
        try:
            with pytest.raises(FetchFailed, match="no credentials sent"):
                fetcher.fetch(Attachment("image", url="whatsapp:media/m1"), 10_000)
            download = fetcher.downloader()
            allowed = download.may_carry_token
            assert allowed("https://lookaside.fbsbx.com/whatsapp_business/attachments/?mid=1")
            for url in (
                "http://lookaside.fbsbx.com/x",
                "https://lookaside.fbsbx.com.evil.example/x",
            ):
                assert not allowed(url), url
            download.close()
        finally:
            fetcher.close()
    assert other.downloads == [] and graph.downloads == []
