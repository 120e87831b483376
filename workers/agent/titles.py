"""Auto-titles: after a session's first exchange, once, off the reply path.

The auxiliary model writes 3–7 words in the user's language; offline (or when it fails) a
heuristic takes 3–7 words from the first user message that has them (past greetings). A session
with nothing to go on yet ("hi") is left untitled while it is fresh; once it has been quiet for
a minute (the title sweep's call) its first words are the title, so the sweep does not ask
again. A session that already has a title — the user's, a derived one, or an earlier auto
one — is left alone. A title another session holds takes the distinct form "x (2)", not the
continuation form "x #2": the two sessions are no lineage (shared.store.lineage). Mentions of
the bot (`@hermes_bot`, `<@U…>`, `<@123>`) are left out of what a title is made from.
"""

from __future__ import annotations

import logging
import re

from shared.db import Connection
from shared.db.errors import TitleInUse
from shared.mentions import without_mentions
from shared.store import lineage, usage
from shared.store import messages as message_rows
from shared.store import sessions as session_rows
from shared.titles import MAX_TITLE_CHARS, TitleError, TitleSource, validate_title
from workers.agent.auxiliary import AuxiliaryUnavailable, first_words, heuristic_title
from workers.agent.compression import auxiliary_of
from workers.agent.metering import Meter, where
from workers.runtime import Runtime

log = logging.getLogger(__name__)

MAX_WORDS = 7
QUIET_SECONDS = 60.0  # a session quiet this long gets a fallback title (as the sweep's wait)
UNSPACED_CHARS = 24  # a title in a script without spaces (CJK): at most this many characters
_PREFIX_RE = re.compile(r"^(title|titre|titel|título|标题|タイトル)\s*[:：]\s*", re.IGNORECASE)
_QUOTES = "\"'“”‘’«»「」『』`*#"


def tidy_title(raw: str) -> str | None:
    """A model's title as a title: first line, no label, mentions, quotes or end punctuation,
    ≤ 7 words."""
    lines = [line for line in without_mentions(raw).strip().splitlines() if line.strip()]
    if not lines:
        return None
    text = _PREFIX_RE.sub("", lines[0].strip()).strip().strip(_QUOTES).strip()
    text = text.rstrip(".。!！?？:：;；,，").strip().strip(_QUOTES).strip()
    words = text.split()
    if len(words) > MAX_WORDS:
        text = " ".join(words[:MAX_WORDS])
    elif len(words) == 1 and len(text) > UNSPACED_CHARS:
        text = text[:UNSPACED_CHARS]
    try:
        return validate_title(text[:MAX_TITLE_CHARS])
    except TitleError:
        return None


def _first_exchange(rt: Runtime, session_id: str) -> tuple[list[str], str] | None:
    """The first user messages (of the first 20 rows) and the first reply."""
    with rt.store.read() as conn:
        rows = message_rows.first_exchange_rows(conn, session_id)
    users = [without_mentions(content) for role, content in rows if role == "user"]
    reply = next((content for role, content in rows if role == "assistant"), "")
    return (users, reply) if users else None


def _offline_title(users: list[str], *, quiet: bool) -> str | None:
    users = [without_mentions(text) for text in users]
    for text in users:
        title = tidy_title(heuristic_title(text) or "")
        if title is not None:
            return title
    return tidy_title(first_words(users[0]) or "") if quiet else None


def autotitle(rt: Runtime, session_id: str) -> str:
    """Title an untitled session from its first exchange; returns what happened (for logs)."""
    with rt.store.read() as conn:
        session = session_rows.get_session(conn, session_id)
    if session is None:
        return "gone"
    if session.title is not None:
        return "already titled"
    exchange = _first_exchange(rt, session_id)
    if exchange is None:
        return "no exchange yet"
    users, reply = exchange
    title = None
    calls: Meter = []
    try:
        title = tidy_title(auxiliary_of(rt).title(users[0], reply, calls))
    except AuxiliaryUnavailable as exc:
        log.info("auto-title of %s falls back to the heuristic: %s", session_id, exc)
    quiet = session.last_active_at < rt.clock() - QUIET_SECONDS
    title = title or _offline_title(users, quiet=quiet)
    spent = where(session.source, session_id, session.chat_id)
    if title is None:
        if calls:
            rt.store.commit(lambda conn: usage.record(conn, calls, spent, rt.pricing))
        return "nothing to title it with yet"
    with rt.store.write() as conn:
        written = write_auto_title(conn, session_id, title)
        usage.record(conn, calls, spent, rt.pricing)
    return f"titled {written!r}" if written is not None else "already titled"


def write_auto_title(conn: Connection, session_id: str, title: str) -> str | None:
    """Inside a write: give an untitled session `title` (or the next free one of its lineage).
    Returns the title written, or None when the session has one already (or is gone)."""
    if conn.dialect.name == "postgresql":
        written = _untitled_in_one(conn, session_id, title)
        if written is not None:
            return title if written else None
    current = session_rows.get_session(conn, session_id)
    if current is None or current.title is not None:
        return None
    try:
        session_rows.set_title(conn, session_id, title, TitleSource.AUTO)
    except TitleInUse:  # an unrelated session's: "x (2)", never the continuation form "x #2"
        title = lineage.distinct_title(conn, validate_title(title))
        session_rows.set_title(conn, session_id, title, TitleSource.AUTO)
    return title


def _untitled_in_one(conn: Connection, session_id: str, title: str) -> bool | None:
    """PostgreSQL's usual case of `write_auto_title` (the title is free): the look at the
    session, the look for another holder and the write as one statement in its savepoint
    (`session_rows.title_untitled`), 3 round trips instead of 6. None: take the general path
    (the title is another session's or not valid; that path looks again and decides as ever)."""
    try:
        clean = validate_title(title)
        return session_rows.title_untitled(conn, session_id, clean, TitleSource.AUTO)
    except (TitleError, TitleInUse):
        return None


def offline_now(rt: Runtime, users: list[str]) -> tuple[bool, str | None]:
    """With the offline auxiliary a title is a heuristic over the user's words: nothing to wait
    for, so the drain writes it with the first exchange instead of queueing a task for it.
    Returns (True, title or None) then; (False, None) when a model writes titles."""
    if getattr(auxiliary_of(rt), "name", None) != "offline":
        return False, None
    return True, _offline_title(users, quiet=False) if users else None
