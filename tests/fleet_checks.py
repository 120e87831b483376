"""The multi-host test's checks (tests/integration/test_fleet_netns.py), apart from the fleet
they look at: pure functions of transcripts read from the store and of the sends the fake Bot
API recorded, so tests/unit/test_fleet_checks.py can show that each one can fail."""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from typing import Any

from tests.fakes.telegram_api import FakeTelegram

FIRST_CHAT = 5_100_000


def label(chat: int, n: int) -> str:
    return f"c{chat:03d} t{n:02d}"


def chat_id(chat: int) -> int:
    return FIRST_CHAT + chat


def key_of(chat: int | str) -> str:
    number = chat_id(chat) if isinstance(chat, int) else chat
    return f"agent:main:telegram:dm:{number}"


def photo(chat: int, n: int) -> bytes:
    """The bytes the fake Bot API serves for this turn's photo: each photo its own content."""
    return b"\x89PNG\r\n\x1a\n" + label(chat, n).encode() + bytes(600)


def check_transcripts(
    transcripts: dict[str, list[tuple[str, str]]], expected: dict[str, list[str]]
) -> list[str]:
    """Every turn once, in order, each followed at once by the reply that echoes it."""
    problems = []
    for key, want in expected.items():
        rows = transcripts.get(key, [])
        users = [content.split("\n\n")[0] for role, content in rows if role == "user"]
        if users != want:
            problems.append(f"{key}: user turns {users} != {want}")
            continue
        pairs = list(zip(rows[::2], rows[1::2], strict=False))
        if len(rows) != 2 * len(want) or any(
            u[0] != "user" or a[0] != "assistant" or f"echo: {u[1].split(chr(10))[0]}" not in a[1]
            for u, a in pairs
        ):
            problems.append(f"{key}: not user/reply pairs: {[r[0] for r in rows]}")
    return problems


def _sends(telegram: FakeTelegram) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """Chat key → (turn label, sendMessage params) of every reply the Bot API accepted."""
    by_chat: dict[str, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    for sent in telegram.sent():
        found = re.search(r"echo: (c\d{3} t\d{2})", str(sent.get("text", "")))
        by_chat[key_of(str(sent["chat_id"]))].append((found.group(1) if found else "?", sent))
    return by_chat


def check_sends(
    telegram: FakeTelegram,
    expected: dict[str, list[str]],
    excused: frozenset[tuple[str, str]] = frozenset(),
) -> list[str]:
    """Every chat answered: each turn's reply sent once, in the chat's order. A (key, label) in
    `excused` may have one later copy (see EXCUSE_SENDS_REPEATED_AFTER_SIGKILL)."""
    problems = []
    by_chat: dict[str, list[str]] = defaultdict(list)
    for key, sends in _sends(telegram).items():
        seen: set[str] = set()
        for found, _ in sends:
            if found in seen and (key, found) in excused:
                continue
            seen.add(found)
            by_chat[key].append(found)
    for key, want in expected.items():
        if by_chat.get(key, []) != want:
            problems.append(f"{key}: replies sent {by_chat.get(key)} != {want}")
    extra = set(by_chat) - set(expected)
    if extra:
        problems.append(f"replies to chats nobody wrote from: {sorted(extra)}")
    return problems


def repeated_after_sigkill(
    telegram: FakeTelegram, host_ip: str, killed_at: float
) -> frozenset[tuple[str, str]]:
    """(key, label) of replies sent twice whose first copy the killed (or cut off) host sent
    before its kill (its cut): the window between Telegram accepting a reply and the worker
    recording that it did."""
    found = set()
    for key, sends in _sends(telegram).items():
        first: dict[str, dict[str, Any]] = {}
        for name, params in sends:
            if name not in first:
                first[name] = params
                continue
            original = first[name]
            if original.get("_from") == host_ip and float(original["_at"]) <= killed_at:
                found.add((key, name))
    return frozenset(found)


BLOB_REF = re.compile(r"\bblob:([0-9a-f]{64})\b")

# Run on a host (`ip netns exec`): opens the fleet's store as the product does (settings from
# the host's environment) and reads every digest named in argv through shared.store.media;
# prints one JSON object, digest -> [sha256 of the bytes read, size] (null when not stored).
READ_BLOBS = """
import hashlib, json, sys
from shared.db import open_store
from shared.settings import load_settings
from shared.store import media
store = open_store(load_settings().resolved_database_url)
out = {}
try:
    with store.read() as conn:
        for sha in sys.argv[1:]:
            blob = media.read(conn, sha)
            out[sha] = None if blob is None else [hashlib.sha256(blob.data).hexdigest(), blob.size]
finally:
    store.close()
print(json.dumps(out))
"""


def photo_blobs(
    transcripts: dict[str, list[tuple[str, str]]], photos: list[tuple[int, int]]
) -> tuple[dict[tuple[int, int], str], list[str]]:
    """(chat, turn) → the digest its transcript names; and a problem for each photo turn whose
    transcript names no blob, or one whose digest is not that of the photo the Bot API served."""
    found: dict[tuple[int, int], str] = {}
    problems = []
    for chat, n in photos:
        users = [c for r, c in transcripts.get(key_of(chat), []) if r == "user"]
        mine = [c for c in users if c.split("\n\n")[0] == label(chat, n)]
        refs = BLOB_REF.findall(mine[0]) if mine else []
        if len(refs) != 1:
            problems.append(f"{label(chat, n)}: not one blob named in {mine}")
            continue
        if refs[0] != hashlib.sha256(photo(chat, n)).hexdigest():
            problems.append(f"{label(chat, n)}: blob {refs[0]} is not the photo served")
            continue
        found[(chat, n)] = refs[0]
    return found, problems


def check_read_back(
    host: str, wanted: dict[tuple[int, int], str], answer: dict[str, Any] | None
) -> list[str]:
    """What one host read (READ_BLOBS' output) against the photos: each blob there, its bytes
    hashing to its name, as long as the photo."""
    if answer is None:
        return [f"{host}: the reader printed nothing"]
    problems = []
    for (chat, n), sha in sorted(wanted.items()):
        got = answer.get(sha)
        if got is None:
            problems.append(f"{host}: {label(chat, n)}'s blob {sha[:12]} not readable")
        elif got != [sha, len(photo(chat, n))]:
            problems.append(f"{host}: {label(chat, n)}'s blob {sha[:12]} read back as {got}")
    return problems


def waits_after_kill(telegram: FakeTelegram, killed_at: float) -> list[float]:
    """Per chat, seconds from the kill to the chat's first reply sent after it, longest first:
    a chat whose delivery lane the killed host held waits for that lane's lease to expire."""
    waits = []
    for sends in _sends(telegram).values():
        after = [float(p["_at"]) for _, p in sends if float(p["_at"]) > killed_at]
        if after:
            waits.append(min(after) - killed_at)
    return sorted(waits, reverse=True)
