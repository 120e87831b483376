"""The synthetic corpus's plan: which sessions exist, from which source and chat, in which
lineage, titled how, in which language and time window, with how many messages
(bench/corpus.py generates their messages from it). Seeded: the same arguments, the same plan."""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

from bench.corpus_text import _HANZI, _JA_NOUNS, BASE_TIME, SPAN_SECONDS, vocabulary

SOURCES = (("cli", 0.40), ("telegram", 0.25), ("slack", 0.20), ("discord", 0.15))


MODELS = (
    ("anthropic/claude-sonnet-4", 0.35),
    ("openai/gpt-4.1", 0.20),
    ("openai/gpt-4o-mini", 0.15),
    ("nousresearch/hermes-4-70b", 0.15),
    ("qwen/qwen3-coder", 0.10),
    ("local/llama-3.1-8b-instruct", 0.05),
)


@dataclass(frozen=True, slots=True)
class Chat:
    chat_type: str | None
    chat_id: str | None
    thread_id: str | None
    user_id: str | None
    session_key: str | None


@dataclass(frozen=True, slots=True)
class SessionPlan:
    """Everything about a session that is decided before its messages are written."""

    index: int
    id: str
    source: str
    chat: Chat
    n_messages: int
    started_at: float
    window: float  # the messages fit in [started_at, started_at + window]
    parent_id: str | None
    lineage_position: int  # 0 for a root, 1 for "x #2", ...
    title: str | None
    title_source: str | None
    language: str  # "en", "zh" or "ja"
    model: str
    prompt_variant: int
    end_reason: str | None  # None: still open


def _weighted(rng: random.Random, table: Sequence[tuple[str, float]]) -> str:
    return rng.choices([name for name, _ in table], weights=[w for _, w in table])[0]


def _message_counts(rng: random.Random, sessions: int, messages: int) -> list[int]:
    """Heavy-tailed (lognormal) counts, at least 2 each, summing to exactly `messages`."""
    if sessions < 1 or messages < 2 * sessions:
        raise ValueError("need at least one session and two messages per session")
    weights = [rng.lognormvariate(0.0, 1.1) for _ in range(sessions)]
    spare = messages - 2 * sessions
    scale = spare / sum(weights)
    shares = [w * scale for w in weights]
    counts = [2 + int(s) for s in shares]
    short = messages - sum(counts)
    by_fraction = sorted(range(sessions), key=lambda i: shares[i] - int(shares[i]), reverse=True)
    for i in by_fraction[:short]:
        counts[i] += 1
    return counts


def _new_chat(rng: random.Random, source: str) -> Chat:
    if source == "cli":
        return Chat(None, None, None, None, None)
    user = {
        "telegram": lambda: str(rng.randint(10_000_000, 7_999_999_999)),
        "slack": lambda: "U" + f"{rng.getrandbits(40):010X}",
        "discord": lambda: str(rng.getrandbits(60) | (1 << 59)),
    }[source]()
    chat_type = rng.choices(["dm", "group", "thread"], weights=[0.6, 0.3, 0.1])[0]
    if source == "telegram":
        chat_id = user if chat_type == "dm" else f"-100{rng.randint(10**9, 10**10 - 1)}"
    elif source == "slack":
        chat_id = ("D" if chat_type == "dm" else "C") + f"{rng.getrandbits(40):010X}"
    else:
        chat_id = str(rng.getrandbits(60) | (1 << 59))
    thread_id = None
    if chat_type == "thread":
        thread_id = (
            f"{BASE_TIME - rng.random() * SPAN_SECONDS:.6f}"
            if source == "slack"
            else (str(rng.randint(1, 99_999)))
        )
    parts = ["agent:main", source, chat_type, chat_id]
    if thread_id:
        parts.append(thread_id)
    if chat_type == "group":
        parts.append(user)
    return Chat(chat_type, chat_id, thread_id, user, ":".join(parts))


def _session_id(rng: random.Random, started_at: float, source: str, taken: set[str]) -> str:
    stamp = time.strftime("%Y%m%d_%H%M%S", time.gmtime(started_at))
    digits = 6 if source == "cli" else 8
    while True:
        candidate = f"{stamp}_{rng.getrandbits(digits * 4):0{digits}x}"
        if candidate not in taken:
            taken.add(candidate)
            return candidate


def _title_words(rng: random.Random, language: str, count: int) -> str:
    if language == "zh":
        return "".join(rng.choices(_HANZI[:400], k=count * 2))
    if language == "ja":
        return "".join(rng.choices(_JA_NOUNS, k=max(1, count // 2)))
    words = vocabulary().sample(rng, count)
    return " ".join(words).capitalize()


def _free_title(rng: random.Random, language: str, count: int, taken: set[str]) -> str:
    title = _title_words(rng, language, count)[:80]
    while title in taken:
        title = f"{title} {vocabulary().sample(rng, 1)[0]}"[-90:]
    taken.add(title)
    return title


def plan_corpus(*, sessions: int, messages: int, seed: int = 1) -> list[SessionPlan]:
    """The sessions of the corpus in start order (parents before their continuations)."""
    rng = random.Random(f"hermes-corpus-plan:{seed}")
    counts = _message_counts(rng, sessions, messages)
    chats: dict[str, list[Chat]] = {name: [] for name, _ in SOURCES}
    ids: set[str] = set()
    titles: set[str] = set()
    plans: list[SessionPlan] = []
    index = 0
    while index < sessions:
        length = 1
        if rng.random() < 0.06:
            while length < 4 and rng.random() < 0.55:
                length += 1
            length = max(2, length)
        length = min(length, sessions - index)
        source = _weighted(rng, SOURCES)
        pool = chats[source]
        if pool and rng.random() < 0.7:
            chat = rng.choice(pool)  # the same chat again, after a reset
        else:
            chat = _new_chat(rng, source)
            pool.append(chat)
        roll = rng.random()
        language = "zh" if roll < 0.035 else "ja" if roll < 0.06 else "en"
        model = _weighted(rng, MODELS)
        variant = rng.randrange(8)
        roll = rng.random()
        base_title, base_source = None, None
        if roll < 0.45:
            base_title, base_source = _free_title(rng, language, rng.randint(3, 7), titles), "auto"
        elif roll < 0.55:
            base_title, base_source = _free_title(rng, language, rng.randint(1, 4), titles), "user"
        start = BASE_TIME - SPAN_SECONDS + SPAN_SECONDS * (index + rng.random()) / sessions
        parent_id: str | None = None
        for position in range(length):
            n = counts[index]
            window = n * 75.0 * rng.lognormvariate(0.0, 0.5)
            start = min(start, BASE_TIME - window - 60.0)
            session_id = _session_id(rng, start, source, ids)
            title, title_source = base_title, base_source
            if base_title is not None and position > 0:
                title, title_source = f"{base_title} #{position + 1}", "derived"
                titles.add(title)
            if position < length - 1:
                end_reason: str | None = "compression"
            elif index >= sessions * 0.97 and rng.random() < 0.8:
                end_reason = None  # the newest sessions are mostly still open
            elif rng.random() < 0.9:
                end_reason = (
                    rng.choice(["cli_exit", "cli_exit", "new_session"])
                    if source == "cli"
                    else rng.choice(["idle", "idle", "daily", "new_session", "user_reset"])
                )
            else:
                end_reason = None
            plans.append(
                SessionPlan(
                    index=index,
                    id=session_id,
                    source=source,
                    chat=chat,
                    n_messages=n,
                    started_at=start,
                    window=window,
                    parent_id=parent_id,
                    lineage_position=position,
                    title=title,
                    title_source=title_source,
                    language=language,
                    model=model,
                    prompt_variant=variant,
                    end_reason=end_reason,
                )
            )
            parent_id = session_id
            start = start + window + rng.uniform(5.0, 120.0)
            index += 1
    return plans
