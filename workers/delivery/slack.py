"""Slack sender: `slack_sdk.WebClient.chat_postMessage`, split at 4,000 characters.

Slack accepts up to 40,000 characters but asks for at most 4,000 per message (longer ones are
hard to read and may be truncated in places), so parts are 4,000 characters, split at
paragraphs, lines or words. `&`, `<` and `>` are escaped as Slack's formatting requires, so the
agent's text cannot turn into mentions or links. Replies to a thread go to that thread
(`thread_ts`). Limits: about 1 message/s per channel (bursts of 3), shared across the fleet;
a 429's Retry-After cools the channel down for every worker; one over 5 s is not the
per-channel limit (our buckets keep to that) but a method's workspace-wide tier, so it cools
every channel down. Errors that will never succeed (channel not found, not in channel,
archived, user gone, revoked token) → Undeliverable. With `stream_edits` the streamed message
is posted and updated (`chat.update`) through the same buckets, and the reply's first part is
an update of it (workers/delivery/live_message.py). With `assistant_status` (an AI app), a
turn from an assistant thread (a DM thread) shows "is thinking…" there while it runs
(`assistant.threads.setStatus`, refreshed; Slack clears it when the reply is posted).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from shared.pipeline.outbox import OutboxRow
from shared.platforms import DM
from shared.platforms.slack import PLATFORM, SlackSettings, chat_type_of
from workers.delivery.base import RetryLater, SenderDeps, Sent, ThreadUnavailable, Undeliverable
from workers.delivery.live_message import LiveMessages, MessageGone, finish_live
from workers.delivery.progress import Progress
from workers.delivery.ratelimit import Bucket, Limiter, bot_key
from workers.delivery.split import split_for

PER_CHANNEL = PLATFORM.rate_limits["chat"]
PER_WORKSPACE = PLATFORM.rate_limits["bot"]
TIMEOUT = 30
WORKSPACE_WIDE_AFTER = 5.0  # a 429 asking for a longer wait pauses every channel

FATAL = frozenset(
    {
        "channel_not_found",
        "not_in_channel",
        "is_archived",
        "user_not_found",
        "user_disabled",
        "account_inactive",
        "invalid_auth",
        "not_authed",
        "token_revoked",
        "cannot_dm_bot",
        "restricted_action",
        "msg_too_long",
        "no_text",
    }
)


# chat.update's answers for a message that cannot be edited any more: post the reply instead.
GONE = frozenset({"message_not_found", "cant_update_message", "edit_window_closed"})


ASSISTANT_STATUS = "is thinking…"


class SendFailed(Exception):
    """A transient failure (connection dropped, 5xx); the flush retries with backoff."""


def escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class SlackSender:
    platform = PLATFORM.name
    reads_store = False
    typing_every = 30.0  # a thread's status stays until the app replies (Slack drops it in 2 min)

    def __init__(
        self,
        *,
        token: str,
        api_base: str,
        limiter: Limiter,
        progress: Progress,
        live: LiveMessages | None = None,
        stream_interval: float = 1.0,
        assistant_status: bool = False,
    ) -> None:
        from slack_sdk import WebClient

        self._assistant_status = assistant_status
        self.live = live
        self.stream_interval = stream_interval
        self._token = token
        # No SDK retries: a retried POST can post twice; the flush owns retrying.
        self._client: Any = WebClient(
            token=token, base_url=api_base, timeout=TIMEOUT, retry_handlers=[]
        )
        self._limiter = limiter
        self._progress = progress
        self._keys = bot_key(PLATFORM.name, token)

    def buckets(self, channel: str) -> list[Bucket]:
        return [
            Bucket(f"{self._keys}:chat:{channel}", *PER_CHANNEL),
            Bucket(f"{self._keys}:bot", *PER_WORKSPACE),
        ]

    def cooldowns(self, channel: str) -> list[str]:
        return [f"{self._keys}:cool:chat:{channel}", f"{self._keys}:cool:bot"]

    def send(self, row: OutboxRow) -> Sent:
        parts = split_for(PLATFORM, row.text)
        done = self._progress.sent_parts(row.id)
        for index in range(len(done), len(parts)):
            wait = self._limiter.acquire(
                self.buckets(row.chat_id), self.cooldowns(row.chat_id), want=len(parts) - index
            )
            if wait > 0:
                raise RetryLater(wait, f"slack rate limit for channel {row.chat_id}")
            ts = (
                finish_live(self.live, row, parts[0], partial(self._update, row))
                if index == 0
                else None
            )
            ts = ts or self._post(row, parts[index])
            self._progress.part_sent(row.id, ts)
            done.append(ts)
        return Sent(",".join(done) if done else None)

    def _post(self, row: OutboxRow, text: str) -> str:
        from slack_sdk.errors import SlackApiError

        try:
            response = self._client.chat_postMessage(
                channel=row.chat_id, text=escape(text), thread_ts=row.thread_id or None
            )
        except SlackApiError as exc:
            raise self._map(row, exc) from None
        except Exception as exc:  # urllib: connection refused/reset, incomplete read, timeout
            message = str(exc).replace(self._token, "***")
            raise SendFailed(f"slack: {type(exc).__name__}: {message}") from None
        return str(response.get("ts") or "")

    def typing(self, chat_id: str, thread_id: str | None) -> None:
        """An assistant thread's status while its turn runs (AI apps only: elsewhere there is
        no indicator a bot can show on Slack). Errors are the caller's to log."""
        if not self._assistant_status or thread_id is None or chat_type_of(chat_id) != DM:
            return
        self._client.assistant_threads_setStatus(
            channel_id=chat_id, thread_ts=thread_id, status=ASSISTANT_STATUS
        )

    def post_live(self, row: OutboxRow, text: str) -> str:
        self._take_token(row.chat_id)
        return self._post(row, text)

    def edit_live(self, row: OutboxRow, message_id: str, text: str) -> None:
        self._take_token(row.chat_id)
        self._update(row, message_id, text)

    def _take_token(self, channel: str) -> None:
        wait = self._limiter.acquire(self.buckets(channel), self.cooldowns(channel))
        if wait > 0:
            raise RetryLater(wait, f"slack rate limit for channel {channel}")

    def _update(self, row: OutboxRow, ts: str, text: str) -> None:
        """chat.update of message `ts`; one that is gone or past editing → MessageGone."""
        from slack_sdk.errors import SlackApiError

        try:
            self._client.chat_update(channel=row.chat_id, ts=ts, text=escape(text))
        except SlackApiError as exc:
            error = str((getattr(exc.response, "data", None) or {}).get("error", ""))
            if error in GONE:
                raise MessageGone(f"slack {error}") from None
            raise self._map(row, exc) from None
        except Exception as exc:
            message = str(exc).replace(self._token, "***")
            raise SendFailed(f"slack: {type(exc).__name__}: {message}") from None

    def open_thread(self, chat_id: str, title: str) -> str:
        """A seed message in `chat_id` whose ts anchors the thread; ThreadUnavailable if Slack
        refuses it (the send that follows, without a thread, reports the same refusal)."""
        from slack_sdk.errors import SlackApiError

        try:
            response = self._client.chat_postMessage(channel=chat_id, text=escape(f"🧵 {title}"))
        except SlackApiError as exc:
            error = (getattr(exc.response, "data", None) or {}).get("error", "refused")
            raise ThreadUnavailable(f"slack: {error}") from None
        except Exception as exc:
            message = str(exc).replace(self._token, "***")
            raise ThreadUnavailable(f"slack: {type(exc).__name__}: {message}") from None
        ts = response.get("ts")
        if not ts:
            raise ThreadUnavailable("slack: the seed message has no ts")
        return str(ts)

    def _map(self, row: OutboxRow, exc: Any) -> Exception:
        response = exc.response
        status = int(getattr(response, "status_code", 0) or 0)
        error = str((response.data or {}).get("error", "")) if hasattr(response, "data") else ""
        if status == 429 or error == "ratelimited":
            headers = getattr(response, "headers", {}) or {}
            wait = _seconds(headers.get("Retry-After") or headers.get("retry-after"), 1.0)
            channel_key, workspace = self.cooldowns(row.chat_id)
            self._limiter.cool_down(channel_key, wait)
            if wait > WORKSPACE_WIDE_AFTER:
                self._limiter.cool_down(workspace, wait)
                return RetryLater(wait, f"slack 429 (whole workspace): retry after {wait:g} s")
            return RetryLater(wait, f"slack 429: retry after {wait:g} s")
        if status in (401, 403, 404) or error in FATAL:
            return Undeliverable(f"slack {status or ''} {error or 'refused'}".strip())
        return SendFailed(f"slack {status}: {error or 'error'}")


def _seconds(value: Any, default: float) -> float:
    try:
        return max(0.0, float(value))
    except (TypeError, ValueError):
        return default


def build(conf: SlackSettings, deps: SenderDeps) -> SlackSender:
    """The sender for `platforms.slack` (the descriptor's `sender`)."""
    assert conf.token is not None
    return SlackSender(
        token=conf.token.get_secret_value(),
        api_base=conf.api_base or "",
        limiter=deps.limiter,
        progress=deps.progress,
        live=deps.live if conf.stream_edits else None,
        stream_interval=conf.stream_edit_interval,
        assistant_status=conf.assistant_status,
    )
